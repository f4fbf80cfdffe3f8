//! Weight-bytes throughput of the q16 matvec kernels, single thread, per type and shape, against the
//! scalar `quant::dot` ("dot GB/s") and on every instruction set this CPU has. Prints GB/s of weight
//! bytes, best of several runs; pin it with `taskset`.
//!
//! `cargo bench -p quant --bench q16 [-- FILTER...]`, where a filter is a type name (`q4_k`), `big`
//! (adds 100+ MB matrices streamed from DRAM, with a plain read and a two-thread run for scale),
//! `float` (`matvec_f32`) or `deq` (`dequantize_fast`); no filter runs everything but `big`.

use std::hint::black_box;
use std::time::{Duration, Instant};

use gguf::GgmlType;
use quant::q16::{Q16Acts, matvec_q16_with, supports_q16};
use quant::simd::Isa;

/// (rows, width) of the model matrices: SmolLM2-135M and Qwen2.5-0.5B.
const SHAPES: &[(usize, usize)] = &[
    (151936 / 2, 4864),
    (1536, 576),
    (576, 1536),
    (4864, 896),
    (896, 4864),
    (49152, 576),
    (151936, 896),
];

#[path = "../tests/common/mod.rs"]
mod common;

use common::{BLOCK_TYPES as TYPES, Rng, f16_fields};

/// Random blocks with finite, modest f16 scales (F16 and BF16: a small f16 pattern in every element).
fn random_rows(ty: GgmlType, n_bytes: usize, rng: &mut Rng) -> Vec<u8> {
    let fields = if ty.block_size() == 1 {
        &[0]
    } else {
        f16_fields(ty)
    };
    common::random_blocks_at(rng, ty, fields, n_bytes, |_| 0.01)
}

/// Best time of `f` over repeated runs for about `budget`.
fn best(budget: Duration, mut f: impl FnMut()) -> Duration {
    f();
    let start = Instant::now();
    let mut min = Duration::MAX;
    let mut runs = 0;
    while runs < 5 || start.elapsed() < budget {
        let t = Instant::now();
        f();
        min = min.min(t.elapsed());
        runs += 1;
    }
    min
}

fn gbs(bytes: usize, t: Duration) -> f64 {
    bytes as f64 / t.as_secs_f64() / 1e9
}

fn main() {
    let filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let budget = Duration::from_millis(300);
    let isas: Vec<Isa> = Isa::available();
    let mut rng = Rng(42);
    print!("{:<6} {:>12} {:>9}", "type", "rows x width", "MB");
    print!(" {:>10}", "dot GB/s");
    for isa in &isas {
        print!(" {:>10}", format!("{isa:?}"));
    }
    println!();
    for &ty in TYPES {
        if !supports_q16(ty) {
            continue;
        }
        let named = |f: &String| ty.name().eq_ignore_ascii_case(f);
        let type_filter = filter.iter().any(|f| f.starts_with(['q', 'Q']));
        let wanted = if type_filter {
            filter.iter().any(named)
        } else {
            filter.is_empty() || filter.iter().any(|f| f == "big")
        };
        if !wanted {
            continue;
        }
        for &(m, n) in SHAPES {
            let big = m == 49152 || m >= 75968;
            if n % ty.block_size() as usize != 0
                || (big
                    && !matches!(
                        ty,
                        GgmlType::Q8_0
                            | GgmlType::Q5_0
                            | GgmlType::Q4_1
                            | GgmlType::Q4_K
                            | GgmlType::Q6_K
                    ))
                || (big && !filter.iter().any(|f| f == "big"))
            {
                continue;
            }
            let row_bytes = ty.bytes_for(n as u64).unwrap() as usize;
            let w = random_rows(ty, m * row_bytes, &mut rng);
            let x: Vec<f32> = (0..n).map(|_| rng.uniform()).collect();
            let mut a = Q16Acts::new();
            a.quantize(&x).unwrap();
            let mut y = vec![0.0f32; m];
            print!(
                "{:<6} {:>12} {:>9.2}",
                ty.name(),
                format!("{m}x{n}"),
                w.len() as f64 / 1e6
            );
            let t = best(budget, || {
                for (row, y) in w.chunks_exact(row_bytes).zip(y.iter_mut()) {
                    *y = quant::dot(ty, row, black_box(&x)).unwrap();
                }
                black_box(&y);
            });
            print!(" {:>10.2}", gbs(w.len(), t));
            if big {
                // A plain streaming read of the same bytes, for calibration.
                let t = best(budget, || {
                    let s: u64 = w
                        .as_chunks::<8>()
                        .0
                        .iter()
                        .fold(0u64, |a, c| a.wrapping_add(u64::from_le_bytes(*c)));
                    black_box(s);
                });
                print!("  read: {:.2}", gbs(w.len(), t));
                // Two threads, half the rows each: the decode case (weights streamed from DRAM).
                let best_isa = *isas.last().unwrap();
                let t = best(budget, || {
                    let half = m / 2 * row_bytes;
                    let (w0, w1) = w.split_at(half);
                    let (y0, y1) = y.split_at_mut(m / 2);
                    std::thread::scope(|s| {
                        s.spawn(|| matvec_q16_with(best_isa, ty, w0, row_bytes, &a, y0).unwrap());
                        matvec_q16_with(best_isa, ty, w1, row_bytes, &a, y1).unwrap();
                    });
                });
                print!("  2 threads: {:.2}", gbs(w.len(), t));
            }
            for &isa in &isas {
                let t = best(budget, || {
                    matvec_q16_with(isa, ty, &w, row_bytes, black_box(&a), &mut y).unwrap();
                    black_box(&y);
                });
                print!(" {:>10.2}", gbs(w.len(), t));
            }
            println!();
        }
    }
    // Float weights through matvec_f32 (no activation quantization).
    if filter.is_empty() || filter.iter().any(|f| f == "float") {
        for ty in [GgmlType::F32, GgmlType::F16, GgmlType::BF16] {
            for &(m, n) in &[(1536, 576), (576, 1536), (49152, 576)] {
                let row_bytes = n * ty.type_size() as usize;
                let w: Vec<f32> = (0..m * n).map(|_| rng.uniform()).collect();
                let mut rows = vec![0u8; m * row_bytes];
                quant::quantize(ty, &w, &mut rows).unwrap();
                let x: Vec<f32> = (0..n).map(|_| rng.uniform()).collect();
                let mut y = vec![0.0f32; m];
                print!(
                    "{:<6} {:>12} {:>9.2}",
                    ty.name(),
                    format!("{m}x{n}"),
                    rows.len() as f64 / 1e6
                );
                let t = best(budget, || {
                    for (row, y) in rows.chunks_exact(row_bytes).zip(y.iter_mut()) {
                        *y = quant::dot(ty, row, black_box(&x)).unwrap();
                    }
                });
                print!(" {:>10.2}", gbs(rows.len(), t));
                for &isa in &isas {
                    let t = best(budget, || {
                        quant::q16::matvec_f32_with(
                            isa,
                            ty,
                            &rows,
                            row_bytes,
                            black_box(&x),
                            &mut y,
                        )
                        .unwrap();
                    });
                    print!(" {:>10.2}", gbs(rows.len(), t));
                }
                println!();
            }
        }
    }
    // dequantize_fast against the scalar dequantize, 576x1536 weights (GB/s of weight bytes).
    if filter.is_empty() || filter.iter().any(|f| f == "deq") {
        for &ty in TYPES.iter().chain(&[GgmlType::F16, GgmlType::BF16]) {
            let n = 576 * 1536;
            let w = random_rows(ty, ty.bytes_for(n as u64).unwrap() as usize, &mut rng);
            let mut out = vec![0.0f32; n];
            let t0 = best(budget, || {
                quant::dequantize(ty, black_box(&w), &mut out).unwrap()
            });
            let t1 = best(budget, || {
                quant::simd::dequantize_fast(ty, black_box(&w), &mut out).unwrap()
            });
            println!(
                "dequantize {:<6} scalar {:>6.2} GB/s  fast {:>6.2} GB/s",
                ty.name(),
                gbs(w.len(), t0),
                gbs(w.len(), t1)
            );
        }
    }
    // The activation quantization itself, per call.
    for n in [576, 896, 1536, 4864] {
        let x: Vec<f32> = (0..n).map(|_| rng.uniform()).collect();
        let mut a = Q16Acts::new();
        let t = best(budget, || a.quantize(black_box(&x)).unwrap());
        println!("Q16Acts::quantize n={n}: {:.2} us", t.as_secs_f64() * 1e6);
    }
}
