//! Causal grouped-query attention over the KV cache.

use crate::kv::KvView;
use crate::pool::{Chunks, Pool};
use model::HParams;
use rayon::prelude::*;
use std::borrow::Cow;
use std::sync::Mutex;

/// `q`: n rows of q_dim for positions `start..start+n`; `keys`/`values`: positions
/// `0..start+n`. Writes n rows of `n_head * head_dim_v` into `out`. With a `window`, the token
/// at position p sees positions p - window + 1 ..= p only (sliding-window layers). One task per
/// (token, head): on the decode pool for a single token, on rayon for prefill.
#[allow(clippy::too_many_arguments)]
pub fn attention(
    pool: &Pool,
    hp: &HParams,
    q: &[f32],
    keys: KvView,
    values: KvView,
    start: usize,
    window: Option<usize>,
    out: &mut [f32],
) {
    let at = Span { start, window };
    let task =
        |h: usize, o: &mut [f32]| o.copy_from_slice(&head_block(hp, q, keys, values, at, h, 0, 1));
    if out.len() == hp.n_head * hp.head_dim_v {
        let heads: Vec<Mutex<&mut [f32]>> = out.chunks_mut(hp.head_dim_v).map(Mutex::new).collect();
        let next = Chunks::new(heads.len(), 1);
        pool.run(&|_| {
            while let Some(r) = next.claim() {
                // Each head is claimed by one thread only: the lock is never contended.
                let mut o = heads[r.start].lock().unwrap_or_else(|e| e.into_inner());
                task(r.start, &mut o);
            }
        });
    } else {
        prefill(hp, q, keys, values, at, out);
    }
}

/// Where a pass's query rows start, and the window they see (None: every earlier position).
#[derive(Clone, Copy)]
struct Span {
    start: usize,
    window: Option<usize>,
}

impl Span {
    /// The first position query row `t` (position `start + t`) sees.
    fn lo(self, t: usize) -> usize {
        self.window
            .map_or(0, |w| (self.start + t + 1).saturating_sub(w))
    }
}

/// Query rows per prefill task: bounds the score matrix to QUERY_BLOCK x positions.
const QUERY_BLOCK: usize = 64;

/// Prefill attention as matrix products per (head, block of query rows): scores = Q·Kᵀ and
/// out = softmax(scores)·V through sgemm, with the causal mask applied to the scores.
fn prefill(hp: &HParams, q: &[f32], keys: KvView, values: KvView, at: Span, out: &mut [f32]) {
    let n = out.len() / (hp.n_head * hp.head_dim_v);
    let blocks = n.div_ceil(QUERY_BLOCK);
    let o_dim = hp.n_head * hp.head_dim_v;
    // Each task produces a (rows x head_dim_v) block; they are scattered into `out` afterwards.
    let results: Vec<(usize, usize, Vec<f32>)> = (0..hp.n_head * blocks)
        .into_par_iter()
        .map(|task| {
            let (h, b) = (task / blocks, task % blocks);
            let t0 = b * QUERY_BLOCK;
            let rows = QUERY_BLOCK.min(n - t0);
            (h, t0, head_block(hp, q, keys, values, at, h, t0, rows))
        })
        .collect();
    for (h, t0, block) in results {
        for (r, row) in block.chunks_exact(hp.head_dim_v).enumerate() {
            let at = (t0 + r) * o_dim + h * hp.head_dim_v;
            out[at..at + hp.head_dim_v].copy_from_slice(row);
        }
    }
}

/// Head `h`, query rows `t0..t0+rows` (positions `start+t0..`): returns rows x head_dim_v.
#[allow(clippy::too_many_arguments)]
fn head_block(
    hp: &HParams,
    q: &[f32],
    keys: KvView,
    values: KvView,
    at: Span,
    h: usize,
    t0: usize,
    rows: usize,
) -> Vec<f32> {
    let (hd, hdv) = (hp.head_dim, hp.head_dim_v);
    let kvh = h / (hp.n_head / hp.n_head_kv);
    // Positions any of these rows may see: lo..end (a window starts them past 0).
    let end = at.start + t0 + rows;
    let lo = at.lo(t0);
    let (kh, krs) = head_rows(keys, lo..end, hp.kv_dim(), kvh * hd, hd);
    let (vh, vrs) = head_rows(values, lo..end, hp.v_dim(), kvh * hdv, hdv);
    let span = end - lo;
    SCORES.with(|cell| match cell.try_borrow_mut() {
        Ok(mut scores) => {
            // Every element is written by the first GEMM: growing without clearing skips a
            // memset of up to 128 x positions floats per task.
            scores.resize(rows * span, 0.0);
            scores_to_output(hp, q, (&kh, krs), (&vh, vrs), at, h, t0, rows, &mut scores)
        }
        Err(_) => {
            let mut scores = vec![0.0f32; rows * span];
            scores_to_output(hp, q, (&kh, krs), (&vh, vrs), at, h, t0, rows, &mut scores)
        }
    })
}

thread_local! {
    /// Each thread's score matrix, kept between tasks.
    static SCORES: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The two GEMMs and the softmax of [`head_block`], over positions `lo..end` (`kh`, `vh` start
/// at position `lo`), with `scores` holding `rows * (end - lo)` floats.
#[allow(clippy::too_many_arguments)]
fn scores_to_output(
    hp: &HParams,
    q: &[f32],
    (kh, krs): (&[f32], usize),
    (vh, vrs): (&[f32], usize),
    at: Span,
    h: usize,
    t0: usize,
    rows: usize,
    scores: &mut [f32],
) -> Vec<f32> {
    let (hd, hdv) = (hp.head_dim, hp.head_dim_v);
    let (lo, end) = (at.lo(t0), at.start + t0 + rows);
    let span = end - lo;
    let q0 = t0 * hp.q_dim() + h * hd;
    crate::matmul::sgemm_strided(
        (rows, hd, span),
        (&q[q0..], hp.q_dim(), 1),
        (kh, 1, krs),
        (&mut *scores, span, 1),
        hp.attn_scale,
    );
    for (r, row) in scores.chunks_exact_mut(span).enumerate() {
        // Row r sees positions at.lo(t0 + r)..=start + t0 + r, here shifted by lo.
        let visible = at.start + t0 + r + 1 - lo;
        let first = at.lo(t0 + r) - lo;
        let seen = &mut row[first..visible];
        if let Some(c) = hp.attn_softcap {
            crate::ops::softcap(seen, c);
        }
        let max = seen.iter().fold(f32::NEG_INFINITY, |m, &s| m.max(s));
        let sum = quant::simd::softmax_exp(seen, max);
        let inv = 1.0 / sum;
        for s in seen {
            *s *= inv;
        }
        row[..first].fill(0.0);
        row[visible..].fill(0.0);
    }
    let mut o = vec![0.0f32; rows * hdv];
    crate::matmul::sgemm_strided(
        (rows, span, hdv),
        (&*scores, span, 1),
        (vh, vrs, 1),
        (&mut o, hdv, 1),
        1.0,
    );
    o
}

/// One head's `width` elements at `offset` of cache rows `pos` (of `stride`) as f32, from
/// row `pos.start`, with the row stride to read them by: the cache itself when it holds f32
/// in one piece, a contiguous copy (decoded when it holds f16) otherwise.
fn head_rows(
    src: KvView<'_>,
    pos: std::ops::Range<usize>,
    stride: usize,
    offset: usize,
    width: usize,
) -> (Cow<'_, [f32]>, usize) {
    match src {
        KvView::F32(v) => (Cow::Borrowed(&v[pos.start * stride + offset..]), stride),
        KvView::F16(_) | KvView::Paged(_) => {
            let mut out = vec![0.0f32; pos.len() * width];
            let mut tmp = vec![0.0f32; width];
            for (p, dst) in pos.zip(out.chunks_exact_mut(width)) {
                dst.copy_from_slice(src.row(p * stride + offset, &mut tmp));
            }
            (Cow::Owned(out), width)
        }
    }
}
