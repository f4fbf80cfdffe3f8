//! Writer -> reader round trips, the writer's own checks, and opening files from disk.

mod common;

use common::*;
use gguf::{GgmlType, GgufError, GgufFile, GgufWriter, TensorSpec, Value};

#[test]
fn round_trip_every_value_type_and_tensor() {
    let md = sample_metadata();
    let specs = sample_specs();
    let bytes = sample_file();
    let f = GgufFile::from_bytes(bytes.clone()).unwrap();
    assert_eq!(f.version(), 3);
    assert_eq!(f.alignment(), 32);
    assert_eq!(f.file_size(), bytes.len() as u64);
    assert_eq!(f.bytes(), &bytes[..]);
    assert_eq!(f.data_offset() % 32, 0);
    assert_eq!(f.metadata(), &md[..]);
    for (k, v) in &md {
        assert_eq!(f.get(k), Some(v), "key {k}");
    }
    assert_eq!(f.get("missing"), None);
    assert_eq!(f.tensors().len(), specs.len());
    let mut end = 0;
    for (i, (t, s)) in f.tensors().iter().zip(&specs).enumerate() {
        assert_eq!((&t.name, &t.dims, t.ty), (&s.name, &s.dims, s.ty));
        assert_eq!(Some(t.n_bytes), s.n_bytes());
        assert_eq!(t.offset % 32, 0, "{}", t.name);
        assert!(t.offset >= end, "tensors are laid out in order");
        end = t.offset + t.n_bytes;
        assert_eq!(f.tensor_data(t), &tensor_bytes(i, t.n_bytes)[..]);
        assert_eq!(f.tensor(&t.name).map(|x| &x.name), Some(&t.name));
        let addr = f.tensor_data(t).as_ptr() as usize;
        assert_eq!(addr % 32, 0, "tensor data is aligned in memory");
    }
    assert!(f.tensor("nope").is_none());
    let q4k = f.tensor("blk.0.q4_k").unwrap();
    assert_eq!(
        (
            q4k.n_elements(),
            q4k.row_len(),
            q4k.n_rows(),
            q4k.row_bytes(),
            q4k.n_bytes
        ),
        (512, 256, 2, 144, 288)
    );
    let q8 = f.tensor("q8_0.4d").unwrap();
    assert_eq!((q8.n_rows(), q8.row_bytes()), (4, 34));
    // The last tensor is padded too, so the file ends aligned.
    assert_eq!(bytes.len() % 32, 0);
    // Writing what was read gives the same bytes.
    let specs2: Vec<TensorSpec> = f
        .tensors()
        .iter()
        .map(|t| TensorSpec::new(t.name.clone(), t.dims.clone(), t.ty))
        .collect();
    let mut w = GgufWriter::new(Vec::new(), f.metadata(), &specs2).unwrap();
    for t in f.tensors() {
        w.write_tensor(f.tensor_data(t)).unwrap();
    }
    assert_eq!(w.finish().unwrap(), bytes);
}

#[test]
fn display_of_read_values() {
    let f = GgufFile::from_bytes(sample_file()).unwrap();
    let show = |k: &str| f.get(k).unwrap().to_string();
    assert_eq!(show("t.string"), "\"héllo\\nwörld ✓\"");
    assert_eq!(show("t.arr.u32"), "[array of 9 u32: 7, 7, 7, ... ]");
    assert_eq!(show("t.arr.empty_array"), "[]");
    assert_eq!(show("t.arr.nested"), "[[1, 2], [\"x\"], [[], [false]], []]");
    assert_eq!(show("t.f32"), "1e-5");
    assert_eq!(f.get("t.arr.nested").unwrap().type_name(), "array[array]");
    for (_, v) in f.metadata() {
        assert!(!v.to_string().contains('\n'));
    }
}

#[test]
fn custom_alignment() {
    let md = vec![
        ("general.alignment".to_string(), Value::U32(64)),
        ("x".to_string(), Value::U8(1)),
    ];
    let specs = vec![
        TensorSpec::new("a", [3], GgmlType::F32),
        TensorSpec::new("b", [5], GgmlType::F16),
    ];
    let bytes = write_file(&md, &specs);
    let f = GgufFile::from_bytes(bytes).unwrap();
    assert_eq!(f.alignment(), 64);
    assert_eq!(f.data_offset() % 64, 0);
    assert_eq!(f.tensors()[1].offset, 64);
    assert_eq!(f.tensor_data(&f.tensors()[1]).as_ptr() as usize % 64, 0);
    // An alignment larger than the padding buffer.
    let md = vec![("general.alignment".to_string(), Value::U32(4096))];
    let f = GgufFile::from_bytes(write_file(&md, &specs)).unwrap();
    assert_eq!(
        (f.data_offset(), f.tensors()[1].offset, f.file_size()),
        (4096, 4096, 3 * 4096)
    );
}

#[test]
fn no_tensors_and_v2() {
    let md = vec![("a".to_string(), Value::from("b"))];
    let mut bytes = write_file(&md, &[]);
    let f = GgufFile::from_bytes(bytes.clone()).unwrap();
    assert!(f.tensors().is_empty());
    assert_eq!(f.get("a").and_then(Value::as_str), Some("b"));
    bytes[4] = 2;
    let f = GgufFile::from_bytes(bytes).unwrap();
    assert_eq!(f.version(), 2);
    // A tensor-less file that ends right after its metadata (like the peers' meta files) is fine.
    let raw = Raw::header(0, 1).kv_u32("k", 5).0;
    let f = GgufFile::from_bytes(raw).unwrap();
    assert!(f.data_offset() > f.file_size());
    // The empty file is an error, not a panic.
    assert!(GgufFile::from_bytes(Vec::new()).is_err());
}

#[test]
fn chunked_writes_equal_whole_writes() {
    let specs = sample_specs();
    let whole = sample_file();
    let mut w = GgufWriter::new(Vec::new(), &sample_metadata(), &specs).unwrap();
    for (i, s) in specs.iter().enumerate() {
        let data = tensor_bytes(i, s.n_bytes().unwrap());
        for chunk in data.chunks(5) {
            w.write_tensor_chunk(chunk).unwrap();
        }
        if i + 1 < specs.len() {
            w.write_tensor_chunk(&[]).unwrap(); // an empty piece of the next tensor is a no-op
        }
    }
    assert_eq!(w.finish().unwrap(), whole);
}

fn err_of<T: std::fmt::Debug>(r: gguf::Result<T>) -> String {
    let e = r.unwrap_err().to_string();
    assert!(e.starts_with("gguf: ") && !e.contains('\n'), "{e}");
    e
}

#[test]
fn writer_rejects_misuse() {
    let specs = vec![
        TensorSpec::new("a", [3], GgmlType::F32),
        TensorSpec::new("b", [2], GgmlType::F32),
    ];
    let mut w = GgufWriter::new(Vec::new(), &[], &specs).unwrap();
    assert_eq!(
        err_of(w.write_tensor(&[0; 8])),
        "gguf: writer: tensor 'a': data is 8 bytes, expected 12"
    );
    w.write_tensor_chunk(&[0; 4]).unwrap();
    assert!(err_of(w.write_tensor(&[0; 12])).contains("already written"));
    assert!(err_of(w.write_tensor_chunk(&[0; 9])).contains("would exceed its size 12"));
    w.write_tensor_chunk(&[0; 8]).unwrap();
    w.write_tensor(&[1; 8]).unwrap();
    assert!(err_of(w.write_tensor(&[0; 8])).contains("all 2 tensors were already written"));
    w.finish().unwrap();

    let mut w = GgufWriter::new(Vec::new(), &[], &specs).unwrap();
    w.write_tensor(&[0; 12]).unwrap();
    assert!(err_of(w.finish()).contains("1 of 2 tensors written; tensor 'b' has 0 of 8 bytes"));

    let kv = |k: &str, v: Value| (k.to_string(), v);
    let dup = [kv("a", Value::U8(1)), kv("a", Value::U8(2))];
    assert!(err_of(GgufWriter::new(Vec::new(), &dup, &[])).contains("duplicate metadata key"));
    let twice = [specs[0].clone(), specs[0].clone()];
    assert!(err_of(GgufWriter::new(Vec::new(), &[], &twice)).contains("duplicate tensor name"));
    for (v, msg) in [
        (Value::U32(0), "not a nonzero power of two"),
        (Value::U32(48), "not a nonzero power of two"),
        (Value::U64(32), "must be u32, found u64"),
    ] {
        let md = [kv("general.alignment", v)];
        assert!(err_of(GgufWriter::new(Vec::new(), &md, &[])).contains(msg));
    }
    for (dims, msg) in [
        (vec![], "n_dims 0"),
        (vec![1, 1, 1, 1, 1], "n_dims 5"),
        (vec![32, 0], "dims[1] is 0"),
        (vec![16], "not a multiple of the Q4_0 block size 32"),
        (vec![u64::MAX, 32], "overflows"),
    ] {
        let s = [TensorSpec::new("t", dims, GgmlType::Q4_0)];
        let e = err_of(GgufWriter::new(Vec::new(), &[], &s));
        assert!(
            e.starts_with("gguf: writer: tensor 't': ") && e.contains(msg),
            "{e}"
        );
    }
    let mut deep = gguf::Array::U8(vec![]);
    for _ in 0..gguf::MAX_ARRAY_DEPTH {
        deep = gguf::Array::Array(vec![deep]);
    }
    assert!(
        err_of(GgufWriter::new(
            Vec::new(),
            &[kv("d", Value::Array(deep))],
            &[]
        ))
        .contains("nested")
    );
}

#[test]
fn writer_reports_io_errors() {
    #[derive(Debug)]
    struct Failing;
    impl std::io::Write for Failing {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(std::io::Error::other("disk full"))
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let e = err_of(GgufWriter::new(Failing, &[], &[]));
    assert_eq!(e, "gguf: writing header: disk full");
}

#[test]
fn open_maps_a_file_from_disk() {
    let dir = std::env::temp_dir().join(format!("gguf-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("sample.gguf");
    let bytes = sample_file();
    let out = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    let mut w = GgufWriter::new(out, &sample_metadata(), &sample_specs()).unwrap();
    for (i, s) in sample_specs().iter().enumerate() {
        w.write_tensor(&tensor_bytes(i, s.n_bytes().unwrap()))
            .unwrap();
    }
    drop(w.finish().unwrap());
    let f = GgufFile::open(&path).unwrap();
    assert_eq!(f.bytes(), &bytes[..]);
    assert_eq!(f.metadata(), &sample_metadata()[..]);
    for t in f.tensors() {
        assert_eq!(f.tensor_data(t).as_ptr() as usize % 32, 0);
    }
    // A file shared between threads.
    let f = std::sync::Arc::new(f);
    let g = f.clone();
    let n = std::thread::spawn(move || g.tensors().len())
        .join()
        .unwrap();
    assert_eq!(n, sample_specs().len());

    let e = GgufFile::open(dir.join("missing.gguf")).unwrap_err();
    assert!(matches!(e, GgufError::Io { op: "open", .. }), "{e}");
    assert!(
        e.to_string().starts_with("gguf: ") && e.to_string().contains("missing.gguf: open failed")
    );
    assert!(
        GgufFile::open(&dir).is_err(),
        "a directory is not a GGUF file"
    );
    let empty = dir.join("empty.gguf");
    std::fs::write(&empty, b"").unwrap();
    assert!(matches!(
        GgufFile::open(&empty),
        Err(GgufError::Truncated { .. })
    ));
    std::fs::remove_dir_all(&dir).unwrap();
}
