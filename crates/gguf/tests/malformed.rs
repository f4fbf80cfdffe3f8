//! Malformed input: every case must be a one-line `gguf:` error, fast, and never a panic.

mod common;

use common::*;
use gguf::{GgufError, GgufFile};
use std::time::{Duration, Instant};

/// Parses `bytes`, which must fail; returns the message after checking its form.
fn err(bytes: Vec<u8>) -> String {
    let e = GgufFile::from_bytes(bytes).expect_err("malformed input must be rejected");
    let msg = e.to_string();
    assert!(msg.starts_with("gguf: "), "{msg}");
    assert!(!msg.contains('\n') && !msg.contains('\r'), "{msg:?}");
    msg
}

fn assert_contains(msg: &str, want: &str) {
    assert!(msg.contains(want), "expected {want:?} in {msg:?}");
}

/// A file with one tensor info and `data` bytes after the aligned header.
fn one_tensor(dims: &[u64], ty: u32, offset: u64, data: usize) -> Vec<u8> {
    Raw::header(1, 0)
        .tensor("blk.0.attn_q.weight", dims, ty, offset)
        .pad(32)
        .zeros(data)
        .0
}

#[test]
fn positive_controls_parse() {
    // The builders below make valid files when left unbroken.
    assert!(GgufFile::from_bytes(one_tensor(&[4], 0, 0, 16)).is_ok());
    assert!(GgufFile::from_bytes(Raw::header(0, 1).kv_u32("k", 1).0).is_ok());
    assert!(GgufFile::from_bytes(small_file()).is_ok());
}

#[test]
fn bad_magic_and_versions() {
    assert_eq!(
        err(b"GGML\x03\0\0\0".to_vec()),
        "gguf: header: bad magic \"GGML\" (expected \"GGUF\"): not a GGUF file"
    );
    assert_contains(&err(b"\x7fELF".to_vec()), "bad magic \"\\x7fELF\"");
    assert_contains(
        &err(b"GGU".to_vec()),
        "header: magic needs 4 bytes at offset 0, but only 3 remain",
    );
    let with_version = |v: u32| Raw::default().bytes(b"GGUF").u32(v).u64(0).u64(0).0;
    assert_contains(
        &err(with_version(1)),
        "version 1 is not supported (this reader accepts versions 2 and 3)",
    );
    assert_contains(&err(with_version(0)), "version 0 is not supported");
    assert_contains(&err(with_version(4)), "version 4 is not supported");
    assert_contains(
        &err(with_version(u32::MAX)),
        "version 4294967295 is not supported",
    );
    let be = err(with_version(3u32.swap_bytes()));
    assert_eq!(
        be,
        "gguf: header: version field 0x03000000 is version 3 byte-swapped: big-endian GGUF files are not supported"
    );
    assert!(matches!(
        GgufFile::from_bytes(with_version(2u32.swap_bytes())),
        Err(GgufError::BigEndian { swapped: 2, .. })
    ));
    assert_contains(
        &err(b"GGUF\x03\0\0\0\0\0".to_vec()),
        "header: tensor_count needs 8 bytes at offset 8",
    );
}

#[test]
fn huge_counts_fail_fast() {
    let start = Instant::now();
    for (what, bytes) in huge_count_cases() {
        let t = Instant::now();
        let e = GgufFile::from_bytes(bytes).expect_err(&what).to_string();
        assert!(e.starts_with("gguf: ") && !e.contains('\n'), "{what}: {e}");
        assert!(
            t.elapsed() < Duration::from_millis(200),
            "{what} took {:?}",
            t.elapsed()
        );
    }
    assert!(start.elapsed() < Duration::from_secs(2));
}

#[test]
fn huge_count_messages_name_the_field() {
    let big = 1u64 << 63;
    assert_eq!(
        err(Raw::header(big, 0).zeros(64).0),
        "gguf: header: tensor_count (at least 32 bytes per tensor) 9223372036854775808 exceeds remaining 64 bytes of file"
    );
    assert_contains(
        &err(Raw::header(0, u64::MAX).zeros(64).0),
        "header: kv_count (at least 13 bytes per key-value pair) 18446744073709551615 exceeds",
    );
    assert_eq!(
        err(Raw::header(0, 1).u64(big).zeros(64).0),
        "gguf: metadata key #0: key length 9223372036854775808 exceeds remaining 64 bytes of file"
    );
    let s = Raw::header(0, 2)
        .kv_u32("a", 1)
        .str("general.name")
        .u32(T_STRING)
        .u64(big)
        .zeros(1234);
    assert_eq!(
        err(s.0),
        "gguf: metadata key #1 (\"general.name\"): string length 9223372036854775808 exceeds remaining 1234 bytes of file"
    );
    let a = Raw::header(0, 1)
        .str("k")
        .u32(T_ARRAY)
        .u32(T_F32)
        .u64(1000)
        .zeros(3999);
    assert_contains(
        &err(a.0),
        "metadata key #0 (\"k\"): array count (of f32, 4 bytes each) 1000 exceeds remaining 3999",
    );
    let a = Raw::header(0, 1)
        .str("k")
        .u32(T_ARRAY)
        .u32(T_STRING)
        .u64(big)
        .zeros(64);
    assert_contains(
        &err(a.0),
        "array count (of string, at least 8 bytes each) 9223372036854775808 exceeds",
    );
    assert_contains(
        &err(Raw::header(1, 0).u64(big).zeros(64).0),
        "tensor #0: name length 9223372036854775808 exceeds",
    );
    for n_dims in [0, 5, u32::MAX] {
        let t = Raw::header(1, 0).str("t").u32(n_dims).zeros(64);
        assert_eq!(
            err(t.0),
            format!("gguf: tensor 't': n_dims {n_dims} is not in 1..=4")
        );
    }
    let t = one_tensor(&[1 << 32, 1 << 32], 0, 0, 64);
    assert_contains(
        &err(t),
        "tensor 'blk.0.attn_q.weight': element count of dims [4294967296, 4294967296] overflows",
    );
    let t = one_tensor(&[big, 1], 0, 0, 64);
    assert_contains(&err(t), "overflows");
}

#[test]
fn unknown_types() {
    for id in [13, 100, u32::MAX] {
        let kv = Raw::header(0, 1).str("k").u32(id).zeros(16);
        assert_eq!(
            err(kv.0),
            format!("gguf: metadata key #0 (\"k\"): unknown value type {id}")
        );
        let arr = Raw::header(0, 1)
            .str("k")
            .u32(T_ARRAY)
            .u32(id)
            .u64(1)
            .zeros(16);
        assert_eq!(
            err(arr.0),
            format!("gguf: metadata key #0 (\"k\"): unknown array element type {id}")
        );
    }
    for id in [4, 5, 31, 36, 40, 1000, u32::MAX] {
        assert_eq!(
            err(one_tensor(&[32], id, 0, 64)),
            format!("gguf: tensor 'blk.0.attn_q.weight': unknown ggml type id {id}")
        );
    }
}

#[test]
fn tensor_offsets() {
    assert_eq!(
        err(one_tensor(&[4], 0, 16, 64)),
        "gguf: tensor 'blk.0.attn_q.weight': offset 16 is not a multiple of alignment 32"
    );
    let past = err(one_tensor(&[4], 0, 32, 47));
    assert_contains(
        &past,
        "tensor 'blk.0.attn_q.weight': data at offset 32 + 16 bytes (data section at 96) extends past the end of the 143-byte file",
    );
    assert!(
        GgufFile::from_bytes(one_tensor(&[4], 0, 32, 48)).is_ok(),
        "exactly fitting data is fine"
    );
    assert_contains(&err(one_tensor(&[4], 0, 0, 15)), "extends past the end");
    assert_contains(&err(one_tensor(&[4], 0, !31, 64)), "extends past the end");
    // Overlaps, in and out of directory order.
    let two = |a: u64, b: u64| {
        Raw::header(2, 0)
            .tensor("a", &[16], 0, a)
            .tensor("b", &[8], 0, b)
            .pad(32)
            .zeros(256)
            .0
    };
    assert_contains(
        &err(two(0, 0)),
        "tensor 'b': data [0, 32) overlaps tensor 'a' [0, 64)",
    );
    assert_contains(&err(two(0, 32)), "overlaps tensor 'a'");
    let b_first = Raw::header(2, 0)
        .tensor("a", &[16], 0, 64)
        .tensor("b", &[32], 0, 0)
        .pad(32)
        .zeros(256);
    assert_contains(
        &err(b_first.0),
        "tensor 'a': data [64, 128) overlaps tensor 'b' [0, 128)",
    );
    assert!(GgufFile::from_bytes(two(0, 64)).is_ok());
    assert!(
        GgufFile::from_bytes(two(96, 0)).is_ok(),
        "order in the directory need not match the data"
    );
    let dup = Raw::header(2, 0)
        .tensor("a", &[8], 0, 0)
        .tensor("a", &[8], 0, 32)
        .pad(32)
        .zeros(64);
    assert_eq!(
        err(dup.0),
        "gguf: tensor 'a': duplicate tensor name (first seen as tensor #0)"
    );
}

#[test]
fn tensor_shapes() {
    assert_eq!(
        err(one_tensor(&[4, 0], 0, 0, 64)),
        "gguf: tensor 'blk.0.attn_q.weight': dims[1] is 0 (dims [4, 0])"
    );
    assert_eq!(
        err(one_tensor(&[16, 2], 2, 0, 64)),
        "gguf: tensor 'blk.0.attn_q.weight': row length dims[0] = 16 is not a multiple of the Q4_0 block size 32"
    );
    assert_contains(
        &err(one_tensor(&[128, 2], 12, 0, 4096)),
        "not a multiple of the Q4_K block size 256",
    );
}

#[test]
fn bad_alignment() {
    for a in [0, 3, 48, 1 << 31 | 1] {
        let f = Raw::header(0, 1).kv_u32("general.alignment", a);
        assert_eq!(
            err(f.0),
            format!(
                "gguf: metadata key #0 (\"general.alignment\"): general.alignment {a} is not a nonzero power of two"
            )
        );
    }
    let f = Raw::header(0, 1)
        .str("general.alignment")
        .u32(T_U64)
        .u64(32);
    assert_contains(&err(f.0), "general.alignment must be u32, found u64");
    let f = Raw::header(0, 1)
        .str("general.alignment")
        .u32(T_STRING)
        .str("32");
    assert_contains(&err(f.0), "general.alignment must be u32, found string");
    // A valid larger alignment applies to tensor offsets.
    let f = Raw::header(1, 1)
        .kv_u32("general.alignment", 64)
        .tensor("t", &[4], 0, 32)
        .pad(64)
        .zeros(128);
    assert_contains(
        &err(f.0),
        "tensor 't': offset 32 is not a multiple of alignment 64",
    );
}

#[test]
fn invalid_utf8_and_duplicates() {
    let key = Raw::header(0, 1)
        .u64(2)
        .bytes(&[b'a', 0xff])
        .u32(T_U8)
        .bytes(&[0]);
    assert_eq!(
        err(key.0),
        "gguf: metadata key #0: key is not valid UTF-8 (first bad byte at index 1)"
    );
    let val = Raw::header(0, 1)
        .str("general.name")
        .u32(T_STRING)
        .u64(3)
        .bytes(&[b'x', 0xc3, 0x28]);
    assert_eq!(
        err(val.0),
        "gguf: metadata key #0 (\"general.name\"): string value is not valid UTF-8 (first bad byte at index 1)"
    );
    let arr = Raw::header(0, 1)
        .str("toks")
        .u32(T_ARRAY)
        .u32(T_STRING)
        .u64(2)
        .str("ok")
        .u64(1)
        .bytes(&[0x80]);
    assert_eq!(
        err(arr.0),
        "gguf: metadata key #0 (\"toks\"), element [1]: string is not valid UTF-8 (first bad byte at index 0)"
    );
    let name = Raw::header(1, 0).u64(1).bytes(&[0xfe]).zeros(64);
    assert_eq!(
        err(name.0),
        "gguf: tensor #0: name is not valid UTF-8 (first bad byte at index 0)"
    );
    let dup = Raw::header(0, 3)
        .kv_u32("a", 1)
        .kv_u32("b", 1)
        .kv_u32("a", 2);
    assert_eq!(
        err(dup.0),
        "gguf: metadata key #2 (\"a\"): duplicate metadata key (first seen as key #0)"
    );
    // Control characters in names are escaped, long names cut: the message stays one line.
    let long = format!("x\n{}", "y".repeat(500));
    let e = err(Raw::header(0, 2).kv_u32(&long, 1).kv_u32(&long, 1).0);
    assert!(
        e.len() < 200 && e.contains("x\\ny") && e.contains('…'),
        "{e}"
    );
}

#[test]
fn other_value_errors() {
    let b = Raw::header(0, 1).str("flag").u32(T_BOOL).bytes(&[2]);
    assert_eq!(
        err(b.0),
        "gguf: metadata key #0 (\"flag\"): bool value 2 is neither 0 nor 1"
    );
    let b = Raw::header(0, 1)
        .str("flags")
        .u32(T_ARRAY)
        .u32(T_BOOL)
        .u64(3)
        .bytes(&[0, 1, 7]);
    assert_eq!(
        err(b.0),
        "gguf: metadata key #0 (\"flags\"), element [2]: bool value 7 is neither 0 nor 1"
    );
    // Nine nested levels are too many; eight are fine.
    let nest = |levels: usize| {
        let mut r = Raw::header(0, 1).str("deep").u32(T_ARRAY);
        for _ in 1..levels {
            r = r.u32(T_ARRAY).u64(1);
        }
        r.u32(T_U8).u64(0).0
    };
    assert!(GgufFile::from_bytes(nest(8)).is_ok());
    assert_eq!(
        err(nest(9)),
        "gguf: metadata key #0 (\"deep\"), element [0][0][0][0][0][0][0][0]: arrays nested more than 8 levels deep"
    );
    let short = Raw::header(0, 1).str("k").u32(T_F64).bytes(&[0; 7]);
    assert_eq!(
        err(short.0),
        "gguf: metadata key #0 (\"k\"): value needs 8 bytes at offset 37, but only 7 remain in the file"
    );
}

#[test]
fn truncation_at_every_sixteenth_of_the_sample_file() {
    let bytes = sample_file();
    for k in 0..16 {
        let n = bytes.len() * k / 16;
        let _ = err(bytes[..n].to_vec());
    }
    assert!(GgufFile::from_bytes(bytes).is_ok());
}

#[test]
fn truncation_at_every_byte_of_a_small_file() {
    let bytes = small_file();
    assert!(bytes.len() < 512, "small file is {} bytes", bytes.len());
    let f = GgufFile::from_bytes(bytes.clone()).unwrap();
    // The padding after the last tensor is optional; everything before its end is needed.
    let needed = f
        .tensors()
        .iter()
        .map(|t| f.data_offset() + t.offset + t.n_bytes)
        .max()
        .unwrap();
    assert!(needed < bytes.len() as u64);
    for n in 0..bytes.len() {
        if (n as u64) < needed {
            let _ = err(bytes[..n].to_vec());
        } else {
            assert!(GgufFile::from_bytes(bytes[..n].to_vec()).is_ok());
        }
    }
}

/// Exercises every accessor of a file that parsed, so a bad invariant would panic here.
fn exercise(f: &GgufFile) {
    for (k, v) in f.metadata() {
        assert_eq!(f.get(k), Some(v));
        let _ = (
            v.to_string(),
            format!("{v:#}"),
            v.type_name(),
            v.as_u64(),
            v.as_f64(),
        );
    }
    for t in f.tensors() {
        assert_eq!(f.tensor_data(t).len() as u64, t.n_bytes);
        assert_eq!(t.n_rows() * t.row_bytes(), t.n_bytes);
        assert!(f.tensor(&t.name).is_some());
    }
}

#[test]
fn random_mutations_never_panic() {
    let base = small_file();
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
    let (mut ok, mut rejected) = (0, 0);
    for _ in 0..2000 {
        let mut b = base.clone();
        for _ in 0..1 + rng.below(3) {
            let i = rng.below(b.len());
            match rng.below(6) {
                0 => b[i] ^= 1 << rng.below(8),
                1 => b[i] = 0xff,
                2 => b.truncate(i),
                3 => {
                    // A length-sized field set to a huge value.
                    let v = [1u64 << 63, u64::MAX, 1 << 32, 0x7f][rng.below(4)].to_le_bytes();
                    for (j, x) in v.iter().enumerate() {
                        if let Some(slot) = b.get_mut(i + j) {
                            *slot = *x;
                        }
                    }
                }
                4 => b[i] = rng.next() as u8,
                _ => {
                    b.insert(i, rng.next() as u8);
                }
            }
            if b.is_empty() {
                break;
            }
        }
        match GgufFile::from_bytes(b) {
            Ok(f) => {
                exercise(&f);
                ok += 1;
            }
            Err(e) => {
                let msg = e.to_string();
                assert!(msg.starts_with("gguf: ") && !msg.contains('\n'), "{msg:?}");
                rejected += 1;
            }
        }
    }
    // Both outcomes happen: the mutations reach past the header.
    assert!(ok > 0 && rejected > 1000, "ok {ok}, rejected {rejected}");
}
