//! Bit-exact checks against the Python `gguf` package (the reference ggml's own converters use), through
//! `scripts/gguf_quants.py`. Needs `python3 -m pip install gguf numpy`; the interpreter is `$MOLLA_PYTHON`
//! (default `python3`). A missing interpreter or package fails these tests rather than skipping them.

use std::path::{Path, PathBuf};
use std::process::Command;

use gguf::GgmlType;

/// Types whose dequantization must match the package bit for bit (their f16 scale fields, at
/// `common::f16_fields`, kept finite by the generator).
const DEQUANT_TYPES: &[GgmlType] = &[
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::BF16,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q2_K,
    GgmlType::Q3_K,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
];

/// Types whose quantization must match the package byte for byte (the package quantizes no K-quant).
const QUANT_TYPES: &[GgmlType] = &[
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::BF16,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
];

mod common;

use common::{Rng, f16_fields};

/// Random finite f16 bits: half the time a value in ±2, otherwise any finite pattern (subnormals too).
fn finite_f16(rng: &mut Rng) -> [u8; 2] {
    if rng.next_u64().is_multiple_of(2) {
        half::f16::from_f32(2.0 * rng.uniform()).to_le_bytes()
    } else {
        loop {
            let h = rng.next_u64() as u16;
            if h & 0x7c00 != 0x7c00 {
                return h.to_le_bytes();
            }
        }
    }
}

/// `blocks` random blocks of `ty`: random payload bytes, finite f16 scales, no NaN elements.
fn random_blocks(rng: &mut Rng, ty: GgmlType, blocks: usize) -> Vec<u8> {
    let ts = ty.type_size() as usize;
    let mut out = vec![0u8; ts * blocks];
    for block in out.chunks_exact_mut(ts) {
        match ty {
            GgmlType::F32 => loop {
                let v = rng.next_u64() as u32;
                if v & 0x7f80_0000 != 0x7f80_0000 {
                    block.copy_from_slice(&v.to_le_bytes());
                    break;
                }
            },
            GgmlType::F16 => block.copy_from_slice(&finite_f16(rng)),
            GgmlType::BF16 => loop {
                let v = rng.next_u64() as u16;
                if v & 0x7f80 != 0x7f80 {
                    block.copy_from_slice(&v.to_le_bytes());
                    break;
                }
            },
            _ => {
                block.iter_mut().for_each(|b| *b = rng.next_u64() as u8);
                for &at in f16_fields(ty) {
                    block[at..at + 2].copy_from_slice(&finite_f16(rng));
                }
            }
        }
    }
    out
}

fn python() -> String {
    std::env::var("MOLLA_PYTHON").unwrap_or_else(|_| "python3".to_string())
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/gguf_quants.py")
}

/// A fresh scratch directory for one test, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("molla-quant-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("create scratch dir");
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const INSTALL: &str = "the Python reference needs `python3 -m pip install gguf numpy` \
                       (or set MOLLA_PYTHON to an interpreter that has them)";

/// Runs the script; returns its output file's bytes. Panics (failing the test) if Python or the
/// package is missing or the script fails.
fn run_script(dir: &Path, op: &str, ty: GgmlType, input: &[u8]) -> Vec<u8> {
    let (src, dst) = (
        dir.join(format!("{ty}.{op}.in")),
        dir.join(format!("{ty}.{op}.out")),
    );
    std::fs::write(&src, input).expect("write script input");
    let out = Command::new(python())
        .arg(script())
        .args([op, ty.name()])
        .arg(&src)
        .arg(&dst)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}; {INSTALL}", python()));
    let stderr = String::from_utf8_lossy(&out.stderr);
    match out.status.code() {
        Some(0) => std::fs::read(&dst).expect("read script output"),
        Some(4) => panic!("{stderr}\n{INSTALL}"),
        code => panic!("{op} {ty} via gguf_quants.py failed ({code:?}): {stderr}"),
    }
}

#[test]
fn python_and_gguf_package_are_installed() {
    let out = Command::new(python())
        .args(["-c", "import gguf, numpy"])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}; {INSTALL}", python()));
    assert!(
        out.status.success(),
        "{}\n{INSTALL}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn dequantize_matches_python_bit_for_bit() {
    let dir = Scratch::new("dequant");
    let mut rng = Rng(0x5eed_0001);
    // One file per type; molla decodes it in runs of several lengths (1, 2, 7, 29 and 41 blocks).
    let runs = [1usize, 2, 7, 29, 41];
    for &ty in DEQUANT_TYPES {
        let (bs, ts) = (ty.block_size() as usize, ty.type_size() as usize);
        let blocks = runs.iter().sum::<usize>() * if bs == 1 { 64 } else { 1 };
        let data = random_blocks(&mut rng, ty, blocks);
        let want: Vec<u32> = run_script(&dir.0, "dequantize", ty, &data)
            .chunks_exact(4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        assert_eq!(
            want.len(),
            blocks * bs,
            "{ty}: python returned the wrong count"
        );

        let mut got = vec![0f32; blocks * bs];
        let (mut at, scale) = (0usize, blocks / runs.iter().sum::<usize>());
        for n in runs.map(|r| r * scale) {
            let src = &data[at * ts..(at + n) * ts];
            quant::dequantize(ty, src, &mut got[at * bs..(at + n) * bs]).unwrap();
            at += n;
        }
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(
                g.to_bits() == *w,
                "{ty}: element {i} (block {}) is {g:e} ({:#010x}), python gives {:e} ({w:#010x})",
                i / bs,
                g.to_bits(),
                f32::from_bits(*w),
            );
        }
    }
}

/// Rows that stress the quantizers' choices: random, all zeros, one outlier, negative only, ties.
fn quantize_rows(rng: &mut Rng, width: usize) -> Vec<Vec<f32>> {
    let mut outlier: Vec<f32> = (0..width).map(|_| 0.01 * rng.normal()).collect();
    outlier[width / 3] = 40.0;
    vec![
        (0..width).map(|_| rng.normal()).collect(),
        (0..width).map(|_| 0.02 * rng.normal()).collect(),
        (0..width)
            .map(|i| rng.uniform() * 10f32.powi(i as i32 % 7 - 3))
            .collect(),
        vec![0.0; width],
        outlier,
        (0..width).map(|_| -0.1 - rng.uniform().abs()).collect(),
        (0..width)
            .map(|_| (rng.next_u64() % 33) as f32 / 8.0 - 2.0)
            .collect(),
        (0..width).map(|_| 0.5 + rng.uniform().abs()).collect(),
        // Exact halves with a unit scale (Q8_0: amax 127 gives d = 1): ties must round away from 0.
        (0..width)
            .map(|i| {
                if i % 32 == 0 {
                    127.0
                } else {
                    (i % 21) as f32 - 10.5
                }
            })
            .collect(),
    ]
}

#[test]
fn quantize_matches_python_byte_for_byte() {
    let dir = Scratch::new("quant");
    let mut rng = Rng(0x5eed_0002);
    let rows: Vec<Vec<f32>> = [576, 896, 4096]
        .into_iter()
        .flat_map(|w| quantize_rows(&mut rng, w))
        .collect();
    let input: Vec<u8> = rows
        .iter()
        .flatten()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    for &ty in QUANT_TYPES {
        let want = run_script(&dir.0, "quantize", ty, &input);
        let mut at = 0usize;
        for (r, row) in rows.iter().enumerate() {
            let n = ty.bytes_for(row.len() as u64).unwrap() as usize;
            let mut got = vec![0u8; n];
            quant::quantize(ty, row, &mut got).unwrap();
            let want = &want[at..at + n];
            if let Some(i) = (0..n).find(|&i| got[i] != want[i]) {
                let ts = ty.type_size() as usize;
                let b = i / ts;
                panic!(
                    "{ty}: row {r} (width {}) differs at byte {i} (block {b}):\n molla  {:?}\n python {:?}",
                    row.len(),
                    &got[b * ts..(b + 1) * ts],
                    &want[b * ts..(b + 1) * ts],
                );
            }
            at += n;
        }
        assert_eq!(at, want.len(), "{ty}: python returned extra bytes");
    }
}

#[test]
fn python_does_not_quantize_k_quants() {
    // Documents why the K-quant quantizers are checked by round trip (see src/tests.rs) instead.
    let dir = Scratch::new("kquant");
    let input: Vec<u8> = (0..256)
        .flat_map(|i| (i as f32 / 100.0).to_le_bytes())
        .collect();
    std::fs::write(dir.0.join("in"), &input).unwrap();
    let out = Command::new(python())
        .arg(script())
        .args(["quantize", "Q4_K"])
        .arg(dir.0.join("in"))
        .arg(dir.0.join("out"))
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}; {INSTALL}", python()));
    let code = out.status.code();
    assert_ne!(code, Some(4), "{INSTALL}");
    assert!(
        code == Some(3) && String::from_utf8_lossy(&out.stderr).contains("unsupported"),
        "expected exit 3 `unsupported`, got {code:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
