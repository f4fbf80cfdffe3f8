//! The K-quant quantizers against llama.cpp's reference quantizers (`quantize_row_q*_K_ref` from
//! ggml-quants.c, llama.cpp 0c1e570, built with gcc -O2, no FMA contraction): both produced the same
//! bytes for the input below, whose FNV-1a hashes are pinned here. The Python package cannot quantize
//! K-quants, so this is the cross-check for them; it also guards the quantizers against regressions.
//!
//! To regenerate: `MOLLA_GOLDEN_INPUT=/tmp/golden.f32 cargo test -p quant --test llama_cpp_golden`
//! writes the input (little-endian f32); quantize it with llama.cpp's `quantize_row_*_ref` and hash
//! the output with 64-bit FNV-1a.

use gguf::GgmlType;

mod common;

use common::Rng;

/// 16 super-blocks of varied data: normal, zeros, partly zero, negative, shifted, outlier, constant,
/// tiny, weight-like and mixed magnitudes.
fn golden_input() -> Vec<f32> {
    let mut rng = Rng(0x601d);
    let mut x = Vec::with_capacity(16 * 256);
    for block in 0..16i32 {
        for i in 0..256i32 {
            let n = rng.normal();
            x.push(match block {
                0..4 => n,
                4 => 0.0,
                5 if i < 48 => 0.0,
                5 if i < 64 => 1e-20,
                6 => -n.abs(),
                7 => 3.0 + n,
                8 if i == 77 => 300.0,
                9 => 5.0,
                10 => 1e-6 * n,
                11 => 0.02 * n,
                12.. => rng.uniform() * 10f32.powi(i % 5 - 2 + (block - 13)),
                _ => n,
            });
        }
    }
    x
}

/// 64-bit FNV-1a.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

#[test]
fn k_quants_match_llama_cpp_reference() {
    let x = golden_input();
    if let Ok(path) = std::env::var("MOLLA_GOLDEN_INPUT") {
        let bytes: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
        std::fs::write(&path, bytes).expect("write golden input");
    }
    let pinned: &[(GgmlType, u64)] = &[
        (GgmlType::Q2_K, 0xa67c_c3d7_601b_8c21),
        (GgmlType::Q3_K, 0x7b71_ec37_e562_ab2d),
        (GgmlType::Q4_K, 0xb2e9_36b4_1a8f_04d2),
        (GgmlType::Q5_K, 0xb975_5f15_48df_a2ce),
        (GgmlType::Q6_K, 0x50c8_7bc9_d33d_f363),
    ];
    let mut report = String::new();
    for &(ty, want) in pinned {
        let mut out = vec![0u8; ty.bytes_for(x.len() as u64).unwrap() as usize];
        quant::quantize(ty, &x, &mut out).unwrap();
        let got = fnv1a(&out);
        if got != want {
            report += &format!("{ty}: molla {got:#018x}, llama.cpp {want:#018x}\n");
        }
    }
    assert!(
        report.is_empty(),
        "quantized bytes differ from llama.cpp's reference:\n{report}"
    );
}
