//! What the other backends' conformance tests share when they check themselves against this one
//! (the reference): a seeded generator, random quantized matrices of real widths, error
//! measures, and the whole-model logits criterion (same top-1, top-16 log-prob difference within
//! 0.02). Plain functions that panic on a failed check, for use in tests.

use crate::ops::log_softmax;
use gguf::GgmlType;

/// xorshift64*, uniform in [-1, 1).
pub struct Rng(pub u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn f(&mut self) -> f32 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let v = self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 40;
        (v as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }

    pub fn vec(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| self.f() * scale).collect()
    }

    pub fn below(&mut self, n: usize) -> usize {
        ((self.f() * 0.5 + 0.5) * n as f32) as usize % n
    }
}

/// A random `rows` x `cols` matrix quantized to `ty`: its bytes and its dequantized values.
///
/// # Panics
/// When `ty` cannot hold rows of `cols` values.
pub fn matrix(rng: &mut Rng, ty: GgmlType, rows: usize, cols: usize) -> (Vec<u8>, Vec<f32>) {
    let vals = rng.vec(rows * cols, 1.0);
    let len = ty.bytes_for((rows * cols) as u64).expect("whole blocks") as usize;
    let mut bytes = vec![0u8; len];
    quant::quantize(ty, &vals, &mut bytes).expect("quantizes");
    let mut deq = vec![0.0f32; rows * cols];
    quant::dequantize(ty, &bytes, &mut deq).expect("dequantizes");
    (bytes, deq)
}

/// ‖a − b‖ / ‖b‖ in f64; a non-finite value anywhere gives infinity.
pub fn rel(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len());
    let (mut num, mut den) = (0.0f64, 0.0f64);
    for (&x, &y) in a.iter().zip(b) {
        if !x.is_finite() || !y.is_finite() {
            return f64::INFINITY;
        }
        num += (f64::from(x) - f64::from(y)).powi(2);
        den += f64::from(y).powi(2);
    }
    (num / den.max(1e-30)).sqrt()
}

/// Every block format the reference supports.
pub const ALL_TYPES: [GgmlType; 13] = [
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

/// The real widths (SmolLM2, Qwen2.5, their ffn) that `ty` can hold: K-quants need 256-multiples.
pub fn widths(ty: GgmlType) -> Vec<usize> {
    [576usize, 896, 1536, 4864]
        .into_iter()
        .filter(|&c| (c as u64).is_multiple_of(ty.block_size()))
        .collect()
}

/// One position's logits from another backend against this one's: the same top-1 (a differing
/// top-1 is accepted, and printed, only on a near tie: the reference's gap below 1e-3) and max
/// |Δ log-prob| over the reference's top 16 within 0.02. Returns that max.
///
/// # Panics
/// When the criterion fails.
pub fn compare_logits(what: &str, got: &[f32], reference: &[f32]) -> f64 {
    assert_eq!(got.len(), reference.len(), "{what}: logits length");
    assert!(
        got.iter().all(|v| v.is_finite()),
        "{what}: non-finite logits"
    );
    let (lg, lc) = (log_softmax(got), log_softmax(reference));
    let mut order: Vec<usize> = (0..lc.len()).collect();
    order.sort_by(|&a, &b| lc[b].total_cmp(&lc[a]));
    let top = (0..lg.len())
        .max_by(|&a, &b| lg[a].total_cmp(&lg[b]))
        .unwrap_or(0);
    if top != order[0] {
        let gap = lc[order[0]] - lc[top];
        assert!(
            gap < 1e-3,
            "{what}: top-1 differs ({top}, reference {}), reference gap {gap}",
            order[0]
        );
        println!(
            "{what}: near-tie top-1 ({top}, reference {}, gap {gap:.1e})",
            order[0]
        );
    }
    let d = order[..16.min(order.len())]
        .iter()
        .map(|&i| (lg[i] - lc[i]).abs())
        .fold(0.0, f64::max);
    assert!(d <= 0.02, "{what}: max |dlogprob| over top-16 is {d}");
    d
}
