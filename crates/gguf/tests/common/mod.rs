//! Shared helpers: sample metadata and tensors, a valid file written by the writer, and a raw
//! byte builder for hand-crafting malformed files.
#![allow(dead_code)]

use gguf::{Array, GgmlType, GgufWriter, TensorSpec, Value};

/// GGUF value type ids.
pub const T_U8: u32 = 0;
pub const T_U32: u32 = 4;
pub const T_I32: u32 = 5;
pub const T_F32: u32 = 6;
pub const T_BOOL: u32 = 7;
pub const T_STRING: u32 = 8;
pub const T_ARRAY: u32 = 9;
pub const T_U64: u32 = 10;
pub const T_F64: u32 = 12;

/// Metadata holding every value type, nested arrays, and empty arrays and strings.
pub fn sample_metadata() -> Vec<(String, Value)> {
    let kv = |k: &str, v: Value| (k.to_string(), v);
    vec![
        kv("general.architecture", Value::from("llama")),
        kv("t.u8", Value::U8(200)),
        kv("t.i8", Value::I8(-100)),
        kv("t.u16", Value::U16(60000)),
        kv("t.i16", Value::I16(-30000)),
        kv("t.u32", Value::U32(4_000_000_000)),
        kv("t.i32", Value::I32(-2_000_000_000)),
        kv("t.u64", Value::U64(u64::MAX)),
        kv("t.i64", Value::I64(i64::MIN)),
        kv("t.f32", Value::F32(1e-5)),
        kv("t.f64", Value::F64(-2.5e300)),
        kv("t.bool", Value::Bool(true)),
        kv("t.string", Value::from("héllo\nwörld ✓")),
        kv("t.empty_string", Value::from("")),
        kv("", Value::from("empty key")),
        kv("t.arr.u8", Value::from(vec![0u8, 1, 255])),
        kv("t.arr.i8", Value::from(vec![-128i8, 127])),
        kv("t.arr.u16", Value::from(vec![1u16, 65535])),
        kv("t.arr.i16", Value::from(vec![-1i16])),
        kv("t.arr.u32", Value::from(vec![7u32; 9])),
        kv("t.arr.i32", Value::from(vec![-1i32, 0, 1])),
        kv("t.arr.u64", Value::from(vec![u64::MAX, 0])),
        kv("t.arr.i64", Value::from(vec![i64::MIN, i64::MAX])),
        kv("t.arr.f32", Value::from(vec![0.5f32, -0.0, f32::INFINITY])),
        kv("t.arr.f64", Value::from(vec![1.0f64 / 3.0])),
        kv("t.arr.bool", Value::from(vec![true, false, true])),
        kv(
            "t.arr.string",
            Value::from(vec!["a".to_string(), String::new(), "ü".repeat(50)]),
        ),
        kv("t.arr.empty_u8", Value::from(Vec::<u8>::new())),
        kv("t.arr.empty_string", Value::from(Vec::<String>::new())),
        kv("t.arr.empty_array", Value::Array(Array::Array(vec![]))),
        kv(
            "t.arr.nested",
            Value::Array(Array::Array(vec![
                Array::I32(vec![1, 2]),
                Array::String(vec!["x".into()]),
                Array::Array(vec![Array::F64(vec![]), Array::Bool(vec![false])]),
                Array::U8(vec![]),
            ])),
        ),
    ]
}

/// Tensors of several types and odd shapes.
pub fn sample_specs() -> Vec<TensorSpec> {
    vec![
        TensorSpec::new("vec.f32", [3], GgmlType::F32),
        TensorSpec::new("blk.0.q4_0", [64, 3], GgmlType::Q4_0),
        TensorSpec::new("blk.0.q4_k", [256, 2], GgmlType::Q4_K),
        TensorSpec::new("f16.3d", [5, 1, 3], GgmlType::F16),
        TensorSpec::new("q8_0.4d", [32, 1, 2, 2], GgmlType::Q8_0),
        TensorSpec::new("i8.odd", [7], GgmlType::I8),
    ]
}

/// Deterministic data for tensor number `i` of `n` bytes.
pub fn tensor_bytes(i: usize, n: u64) -> Vec<u8> {
    (0..n)
        .map(|j| (j as usize).wrapping_mul(31).wrapping_add(i * 7 + 1) as u8)
        .collect()
}

/// A file written by the writer.
pub fn write_file(metadata: &[(String, Value)], specs: &[TensorSpec]) -> Vec<u8> {
    let mut w = GgufWriter::new(Vec::new(), metadata, specs).expect("writer accepts the sample");
    for (i, s) in specs.iter().enumerate() {
        w.write_tensor(&tensor_bytes(i, s.n_bytes().unwrap()))
            .unwrap();
    }
    w.finish().unwrap()
}

/// The full sample file (every value type, six tensors).
pub fn sample_file() -> Vec<u8> {
    write_file(&sample_metadata(), &sample_specs())
}

/// A small valid file (a few hundred bytes) for byte-level truncation and mutation.
pub fn small_file() -> Vec<u8> {
    let md = vec![
        ("general.architecture".to_string(), Value::from("llama")),
        ("n".to_string(), Value::U32(7)),
        (
            "toks".to_string(),
            Value::from(vec!["a".to_string(), "bc".to_string()]),
        ),
        (
            "nest".to_string(),
            Value::Array(Array::Array(vec![
                Array::I32(vec![1]),
                Array::Bool(vec![true]),
            ])),
        ),
    ];
    let specs = vec![
        TensorSpec::new("a", [3], GgmlType::F32),
        TensorSpec::new("b", [32, 2], GgmlType::Q8_0),
    ];
    write_file(&md, &specs)
}

/// Builds GGUF bytes field by field, valid or not.
#[derive(Clone, Default)]
pub struct Raw(pub Vec<u8>);

impl Raw {
    /// Magic, version 3 and the two counts.
    pub fn header(tensors: u64, kvs: u64) -> Raw {
        Raw::default().bytes(b"GGUF").u32(3).u64(tensors).u64(kvs)
    }
    pub fn bytes(mut self, b: &[u8]) -> Raw {
        self.0.extend_from_slice(b);
        self
    }
    pub fn u32(self, v: u32) -> Raw {
        self.bytes(&v.to_le_bytes())
    }
    pub fn u64(self, v: u64) -> Raw {
        self.bytes(&v.to_le_bytes())
    }
    /// A GGUF string: u64 length then bytes.
    pub fn str(self, s: &str) -> Raw {
        self.u64(s.len() as u64).bytes(s.as_bytes())
    }
    /// A u32 key-value pair.
    pub fn kv_u32(self, key: &str, v: u32) -> Raw {
        self.str(key).u32(T_U32).u32(v)
    }
    /// A tensor info.
    pub fn tensor(self, name: &str, dims: &[u64], ty: u32, offset: u64) -> Raw {
        let mut r = self.str(name).u32(dims.len() as u32);
        for &d in dims {
            r = r.u64(d);
        }
        r.u32(ty).u64(offset)
    }
    /// Zeros up to a multiple of `align`.
    pub fn pad(self, align: usize) -> Raw {
        let n = self.0.len().next_multiple_of(align) - self.0.len();
        self.zeros(n)
    }
    pub fn zeros(self, n: usize) -> Raw {
        self.bytes(&vec![0; n])
    }
}

/// Tiny files whose counts or lengths claim far more than the file holds: (what, bytes).
pub fn huge_count_cases() -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for big in [1u64 << 63, u64::MAX, 1 << 40, 1 << 20] {
        out.push((
            format!("tensor_count {big}"),
            Raw::header(big, 0).zeros(64).0,
        ));
        out.push((format!("kv_count {big}"), Raw::header(0, big).zeros(64).0));
        out.push((
            format!("key length {big}"),
            Raw::header(0, 1).u64(big).zeros(64).0,
        ));
        let string_value = Raw::header(0, 1).str("k").u32(T_STRING).u64(big).zeros(64);
        out.push((format!("string value length {big}"), string_value.0));
        for ety in [T_U8, T_U32, T_F64, T_BOOL, T_STRING, T_ARRAY] {
            let arr = Raw::header(0, 1)
                .str("k")
                .u32(T_ARRAY)
                .u32(ety)
                .u64(big)
                .zeros(64);
            out.push((format!("array[{ety}] count {big}"), arr.0));
        }
        let nested = Raw::header(0, 1)
            .str("k")
            .u32(T_ARRAY)
            .u32(T_ARRAY)
            .u64(1)
            .u32(T_STRING)
            .u64(big)
            .zeros(64);
        out.push((format!("nested array count {big}"), nested.0));
        let elem = Raw::header(0, 1)
            .str("k")
            .u32(T_ARRAY)
            .u32(T_STRING)
            .u64(2)
            .str("a")
            .u64(big)
            .zeros(64);
        out.push((format!("array element string length {big}"), elem.0));
        out.push((
            format!("tensor name length {big}"),
            Raw::header(1, 0).u64(big).zeros(64).0,
        ));
        for dims in [[big, 1], [1, big], [big, big]] {
            let t = Raw::header(1, 0).tensor("t", &dims, 0, 0).pad(32).zeros(64);
            out.push((format!("tensor dims {dims:?}"), t.0));
        }
        let t = Raw::header(1, 0)
            .tensor("t", &[4], 0, big & !31)
            .pad(32)
            .zeros(64);
        out.push((format!("tensor offset {}", big & !31), t.0));
    }
    for n_dims in [u32::MAX, 1 << 31, 5, 0] {
        let t = Raw::header(1, 0).str("t").u32(n_dims).zeros(64);
        out.push((format!("n_dims {n_dims}"), t.0));
    }
    out
}

/// A tiny xorshift64 generator.
pub struct XorShift(pub u64);

impl XorShift {
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}
