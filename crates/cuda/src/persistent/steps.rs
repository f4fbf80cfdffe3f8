//! The persistent kernel's step list (kernels/persistent_steps.cuh `PkStep`) and its builder,
//! [`Steps`]: which step reads what another wrote, tagged or through a counter.

use crate::launch::{Out, WeightRef};
use cudarc::driver::DeviceRepr;

pub(super) const OP_MATVEC: i32 = 0;
pub(super) const OP_ATTN: i32 = 1;
/// Attention with the layer's wo folded in (`PkBuild::fold`,
/// kernels/persistent_steps.cuh `PK_OP_ATTN_WO`).
pub(super) const OP_ATTN_WO: i32 = 2;
pub(super) const PREP_PLAIN: i32 = 0;
pub(super) const PREP_RMSNORM: i32 = 1;
pub(super) const PREP_EMBED_RMSNORM: i32 = 2;
pub(super) const PREP_FOLD_RMSNORM: i32 = 3;
/// An attention step whose q/k/v came unscaled from the down step before (crate::fused): it
/// polls the residual row as well, and applies RMSNorm's scale and the biases.
pub(super) const PREP_FUSED: i32 = 4;

/// One step of the list (kernels/persistent_steps.cuh `PkStep`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct PkStep {
    pub(super) w: [u64; 3],
    pub(super) bias: [u64; 3],
    pub(super) y: [u64; 3],
    pub(super) x: u64,
    pub(super) norm_w: u64,
    pub(super) emb: u64,
    pub(super) q: u64,
    pub(super) k: u64,
    pub(super) v: u64,
    pub(super) kc: u64,
    pub(super) vc: u64,
    pub(super) out: u64,
    pub(super) rows: [i32; 3],
    pub(super) row_bytes: [i32; 3],
    pub(super) ty: [i32; 3],
    pub(super) accumulate: [i32; 3],
    pub(super) op: i32,
    pub(super) prep: i32,
    pub(super) pair: i32,
    pub(super) nseg: i32,
    pub(super) cols: i32,
    pub(super) total: i32,
    pub(super) emb_ty: i32,
    pub(super) emb_rows: i32,
    pub(super) emb_row_bytes: i32,
    pub(super) eps: f32,
    pub(super) res_smem: i32,
    pub(super) in_step: i32,
    pub(super) out_ll: i32,
    pub(super) in_ll: i32,
    pub(super) arrive: i32,
    /// 1: every block's rows of this matvec step fit its chunk buffers at once (see
    /// [`mark_packed`]): they are copied in one go, each segment's share after the last.
    pub(super) packed: i32,
}

// SAFETY: plain #[repr(C)] data whose layout matches the CUDA struct (checked in tests below).
unsafe impl DeviceRepr for PkStep {}

impl PkStep {
    /// Segment i's matrix, bias, output and accumulation from `o`.
    fn set_seg(&mut self, i: usize, o: &Out) {
        self.w[i] = o.w.ptr;
        self.bias[i] = o.bias;
        self.y[i] = o.y;
        self.rows[i] = o.w.rows as i32;
        self.row_bytes[i] = o.w.row_bytes as i32;
        self.ty[i] = o.w.ty;
        self.accumulate[i] = i32::from(o.accumulate);
    }
}

/// How a matvec step prepares its input.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Input {
    Plain(u64),
    /// rmsnorm(x) * w, epsilon.
    RmsNorm(u64, u64, f32),
    /// The token's embedding row, then RMSNorm (w, eps).
    EmbedRmsNorm {
        emb: WeightRef,
        w: u64,
        eps: f32,
    },
    /// x (the raw row the block's previous RMSNorm step read) plus a folded step's fixed-point
    /// accumulator (`acc`, see [`Steps::attention_wo`]), then RMSNorm (w, eps).
    FoldRmsNorm {
        acc: u64,
        w: u64,
        eps: f32,
    },
}

/// Builds the step list on the host. Steps pass values through tagged buffers, or plain ones
/// with a counter when wider than `ll_max` values (kernels/persistent_steps.cuh): every buffer a step
/// reads must be one an earlier step wrote, and the list records which step that was.
#[derive(Default)]
pub(crate) struct Steps {
    pub list: Vec<PkStep>,
    /// Widest matvec input, in values.
    pub max_cols: usize,
    /// Largest bytes of one row of a step (a pair step: of both rows).
    pub max_row: usize,
    /// Widest input that is RMS-normalised (its weights are staged in shared memory).
    pub max_norm_cols: usize,
    /// The last step that wrote each buffer (by address), and whether in tagged form.
    writer: std::collections::HashMap<u64, (i32, bool)>,
    /// Widest output a step writes in tagged form.
    ll_max: usize,
    /// A read of a buffer no step wrote, or an accumulation the kernel does not do.
    pub(super) bad: Option<String>,
}

impl Steps {
    /// A builder whose steps write outputs of up to `ll_max` values in tagged form.
    pub fn new(ll_max: usize) -> Steps {
        Steps {
            ll_max,
            ..Steps::default()
        }
    }

    /// Whether the last step that wrote `x` wrote it as tagged words (else plain f32).
    pub fn tagged(&self, x: u64) -> bool {
        self.writer.get(&x).is_some_and(|w| w.1)
    }

    /// The step that last wrote buffer `x`, and whether in tagged form.
    fn producer(&mut self, x: u64) -> (i32, bool) {
        match self.writer.get(&x) {
            Some(&w) => w,
            None => {
                self.bad.get_or_insert_with(|| {
                    format!("step {} reads a buffer no step wrote", self.list.len())
                });
                (-1, false)
            }
        }
    }

    /// Fewest rows of a matvec step (a block must have rows in every step it reads for, see
    /// kernels/persistent_steps.cuh).
    pub fn min_rows(&self) -> usize {
        self.list
            .iter()
            .filter(|s| s.op == OP_MATVEC)
            .map(|s| s.total.max(0) as usize)
            .min()
            .unwrap_or(0)
    }

    fn input(&mut self, st: &mut PkStep, input: Input, cols: usize) {
        st.cols = cols as i32;
        self.max_cols = self.max_cols.max(cols);
        if !matches!(input, Input::Plain(_)) {
            self.max_norm_cols = self.max_norm_cols.max(cols);
        }
        st.in_step = -1;
        let mut from = |x: u64, st: &mut PkStep| {
            let (s, ll) = self.producer(x);
            (st.in_step, st.in_ll) = (s, i32::from(ll));
        };
        match input {
            Input::Plain(x) => {
                (st.prep, st.x) = (PREP_PLAIN, x);
                from(x, st);
            }
            Input::RmsNorm(x, w, eps) => {
                (st.prep, st.x, st.norm_w, st.eps) = (PREP_RMSNORM, x, w, eps);
                from(x, st);
            }
            Input::FoldRmsNorm { acc, w, eps } => {
                (st.prep, st.x, st.norm_w, st.eps) = (PREP_FOLD_RMSNORM, acc, w, eps);
                from(acc, st);
                st.emb_rows = self.fold_count(st.in_step);
            }
            Input::EmbedRmsNorm { emb, w, eps } => {
                st.prep = PREP_EMBED_RMSNORM;
                (st.emb, st.emb_ty, st.emb_rows, st.emb_row_bytes) =
                    (emb.ptr, emb.ty, emb.rows as i32, emb.row_bytes as i32);
                (st.norm_w, st.eps) = (w, eps);
            }
        }
    }

    /// The adds each accumulator word of folded step `s` counts when complete: one a 32-column
    /// unit of its row (the heads' output, wo's columns). The kernel reads it where an embedding
    /// step keeps its row count (`emb_rows`).
    fn fold_count(&mut self, s: i32) -> i32 {
        match self.list.get(s.max(0) as usize) {
            Some(p) if s >= 0 && p.op == OP_ATTN_WO => p.cols / 32,
            _ => {
                self.bad.get_or_insert_with(|| {
                    format!("step {} reads a fold no folded step wrote", self.list.len())
                });
                0
            }
        }
    }

    /// Records the step being added as the writer of its outputs (`len`: the widest, in values):
    /// tagged when `tagged` and no wider than `ll_max`, else plain f32 with a counter (plain
    /// outputs no step reads, the logits, need none).
    fn push(&mut self, mut st: PkStep, outs: &[u64], len: usize, tagged: bool) {
        let ll = tagged && len <= self.ll_max;
        st.out_ll = i32::from(ll);
        st.arrive = i32::from(tagged && !ll);
        let s = self.list.len() as i32;
        if tagged {
            for &y in outs {
                self.writer.insert(y, (s, ll));
            }
        }
        self.list.push(st);
    }

    /// y = W · input + y where y is the residual row the previous RMSNorm step read (as its
    /// input, before normalising): the block adds the copy it kept instead of reading y again.
    pub fn residual(&mut self, out: &Out, cols: usize, input: Input) {
        self.add_matvec(std::slice::from_ref(out), cols, input, true, true);
    }

    /// y_i = W_i · input for up to three matrices (bias as each `Out` says; no accumulation),
    /// into tagged buffers.
    pub fn matvec(&mut self, outs: &[Out], cols: usize, input: Input) {
        self.add_matvec(outs, cols, input, false, true);
    }

    /// As `matvec`, into plain f32 buffers that no later step reads (the logits).
    pub fn matvec_plain(&mut self, outs: &[Out], cols: usize, input: Input) {
        self.add_matvec(outs, cols, input, false, false);
    }

    fn add_matvec(
        &mut self,
        outs: &[Out],
        cols: usize,
        input: Input,
        residual: bool,
        tagged: bool,
    ) {
        let mut st = PkStep {
            op: OP_MATVEC,
            nseg: outs.len().min(3) as i32,
            res_smem: i32::from(residual),
            ..PkStep::default()
        };
        self.input(&mut st, input, cols);
        for (i, o) in outs.iter().take(3).enumerate() {
            st.set_seg(i, o);
            if o.accumulate != residual {
                self.bad.get_or_insert_with(|| {
                    format!("step {}: only a residual step accumulates", self.list.len())
                });
            }
        }
        st.total = outs.iter().take(3).map(|o| o.w.rows as i32).sum();
        for o in outs.iter().take(3) {
            self.max_row = self.max_row.max(o.w.row_bytes);
        }
        let ys: Vec<u64> = outs.iter().take(3).map(|o| o.y).collect();
        let len = outs.iter().take(3).map(|o| o.w.rows).max().unwrap_or(0);
        self.push(st, &ys, len, tagged);
    }

    /// Fused q/k/v (crate::fused): down as [`Steps::residual`], and the next layer's q, k and v
    /// before RMSNorm's scale and the biases: `c`'s W16 rows (of `xcols` x_old values, the raw row
    /// this block's gate/up step kept, then the step's input) into c.y, where q, k and v lie end
    /// to end (`widths` values each: the kernel writes C's rows straight through them).
    pub fn residual_fused(
        &mut self,
        down: &Out,
        cols: usize,
        input: Input,
        c: &Out,
        xcols: usize,
        widths: [usize; 3],
    ) {
        self.residual(down, cols, input);
        let s = self.list.len() as i32 - 1;
        let ll = self.list.last().is_some_and(|st| st.out_ll != 0);
        if !ll || c.w.rows > self.ll_max || c.accumulate || c.w.rows != widths.iter().sum() {
            self.bad.get_or_insert_with(|| {
                format!("step {s}: fused q/k/v hand over tagged words only, as many as q, k and v")
            });
        }
        if let Some(st) = self.list.last_mut() {
            st.set_seg(1, c);
            // The kernel reads x_old's width where an embedding step keeps its row count.
            (st.nseg, st.emb_rows) = (2, xcols as i32);
            st.total += c.w.rows as i32;
        }
        self.max_row = self.max_row.max(c.w.row_bytes);
        let mut y = c.y;
        for w in widths {
            self.writer.insert(y, (s, true));
            y += 8 * w as u64;
        }
    }

    /// As [`Steps::attention_wo`] for q, k and v that [`Steps::residual_fused`] made: the step
    /// also polls the residual row `x` (`n` values, which the same step wrote) for RMSNorm's
    /// scale (`eps`), applies it and the biases (`bias`: q's, k's, v's, or 0), and keeps x for
    /// the gate/up step after it.
    pub fn attention_wo_fused(
        &mut self,
        qkv: (u64, u64, u64),
        caches: (u64, u64),
        wo: &Out,
        att_len: usize,
        (x, n, eps): (u64, usize, f32),
        bias: [u64; 3],
    ) {
        self.attention_wo(qkv, caches, wo, att_len);
        let from = self.producer(x);
        let s = self.list.len();
        if let Some(st) = self.list.last_mut() {
            if from != (st.in_step, st.in_ll != 0) || st.in_ll == 0 {
                self.bad.get_or_insert_with(|| {
                    format!("step {s}: a fused attention step's x and q/k/v from different steps")
                });
            }
            // The residual row's width where an embedding step keeps its row count.
            (st.prep, st.x, st.eps, st.emb_rows) = (PREP_FUSED, x, eps, n as i32);
            st.bias = bias;
        }
    }

    /// `y = silu(gate · x) * (up · x)` into gate's output.
    pub fn gate_up(&mut self, gate: &Out, up: &Out, cols: usize, input: Input) {
        let mut st = PkStep {
            op: OP_MATVEC,
            nseg: 2,
            pair: 1,
            total: gate.w.rows as i32,
            ..PkStep::default()
        };
        self.input(&mut st, input, cols);
        st.set_seg(0, gate);
        st.set_seg(1, up);
        self.max_row = self.max_row.max(gate.w.row_bytes + up.w.row_bytes);
        self.push(st, &[gate.y], gate.w.rows, true);
    }

    /// Rope, cache store and attention of one layer: (q, k, v) raw (one step wrote all three),
    /// caches, output (`out_len` values).
    pub fn attention(
        &mut self,
        (q, k, v): (u64, u64, u64),
        (kc, vc): (u64, u64),
        out: u64,
        out_len: usize,
    ) {
        let (in_step, in_ll) = self.producer(q);
        if self.producer(k) != (in_step, in_ll) || self.producer(v) != (in_step, in_ll) {
            self.bad
                .get_or_insert_with(|| "attention: q, k and v come from different steps".into());
        }
        let st = PkStep {
            op: OP_ATTN,
            q,
            k,
            v,
            kc,
            vc,
            out,
            in_step,
            in_ll: i32::from(in_ll),
            ..PkStep::default()
        };
        self.push(st, &[out], out_len, true);
    }

    /// As [`Steps::attention`] with the layer's wo folded in (`PkBuild::fold`):
    /// instead of the heads' output, each block adds its share of `wo`'s rows over its head's
    /// columns into `wo.y`, a row of `wo.w.rows` u64 words (fixed point and a count of adds,
    /// kernels/persistent_steps.cuh `pk_acc_add`) that must be zero when the launch begins; the
    /// next step reads it with [`Input::FoldRmsNorm`], polling each word until it counts every
    /// unit of its row. `att_len`: the heads' output width (wo's columns).
    pub fn attention_wo(
        &mut self,
        qkv: (u64, u64, u64),
        caches: (u64, u64),
        wo: &Out,
        att_len: usize,
    ) {
        self.attention(qkv, caches, wo.y, usize::MAX);
        if let Some(st) = self.list.last_mut() {
            // No counter: each accumulator word counts its own adds (pk_acc_add).
            (st.op, st.arrive) = (OP_ATTN_WO, 0);
            st.cols = att_len as i32;
            st.set_seg(0, wo);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::config::{mark_packed, types_in};
    use super::*;
    use crate::launch;

    fn out(rows: usize, y: u64, accumulate: bool) -> Out {
        Out {
            w: WeightRef {
                ptr: 0x1000,
                ty: 8,
                rows,
                cols: 64,
                row_bytes: 68,
            },
            y,
            bias: 0,
            accumulate,
            fixed: false,
        }
    }

    /// The first layer's q/k/v step (from the embedding) into 0x20, 0x30, 0x40.
    fn qkv(ll_max: usize) -> Steps {
        let mut st = Steps::new(ll_max);
        let emb = out(100, 0, false).w;
        let input = Input::EmbedRmsNorm {
            emb,
            w: 0x80,
            eps: 1e-5,
        };
        st.matvec(
            &[
                out(64, 0x20, false),
                out(16, 0x30, false),
                out(16, 0x40, false),
            ],
            64,
            input,
        );
        st
    }

    /// A layer's steps as the model builds them: q/k/v, attention, wo, gate/up, down, head.
    fn layer(ll_max: usize, n_ff: usize) -> Steps {
        let (x, q, k, v, att, gate, logits) = (0x10, 0x20, 0x30, 0x40, 0x50, 0x60, 0x70);
        let mut st = qkv(ll_max);
        st.attention((q, k, v), (0x90, 0xa0), att, 64);
        st.residual(&out(64, x, true), 64, Input::Plain(att));
        let norm = Input::RmsNorm(x, 0x80, 1e-5);
        st.gate_up(&out(n_ff, gate, false), &out(n_ff, gate, false), 64, norm);
        st.residual(&out(64, x, true), n_ff, Input::Plain(gate));
        st.matvec_plain(
            &[out(100, logits, false)],
            64,
            Input::RmsNorm(x, 0x80, 1e-5),
        );
        st
    }

    #[test]
    fn steps_read_what_earlier_steps_wrote() {
        let st = layer(2048, 256);
        assert!(st.bad.is_none(), "{:?}", st.bad);
        let ins: Vec<i32> = st.list.iter().map(|s| s.in_step).collect();
        // q/k/v from the embedding; attention from q/k/v; wo from attention; gate/up from x
        // after wo; down from gate/up; the head from x after down.
        assert_eq!(ins, [-1, 0, 1, 2, 3, 4]);
        let ll: Vec<(i32, i32, i32)> = st
            .list
            .iter()
            .map(|s| (s.in_ll, s.out_ll, s.arrive))
            .collect();
        assert_eq!(
            ll,
            [
                (0, 1, 0),
                (1, 1, 0),
                (1, 1, 0),
                (1, 1, 0),
                (1, 1, 0),
                (1, 0, 0)
            ]
        );
        assert_eq!(st.min_rows(), 64, "wo and down have 64 rows");
        // The head outside the kernel (MOLLA_PK_HEAD=wide) reads x as the last down step left it.
        assert!(st.tagged(0x10));
        assert!(!layer(0, 256).tagged(0x10));
        assert!(!st.tagged(0x70), "the logits are plain");
    }

    #[test]
    fn a_folded_wo_hands_its_accumulator_to_gate_up_in_counted_words() {
        let (x, q, k, v, gate, acc) = (0x10, 0x20, 0x30, 0x40, 0x60, 0x100);
        let mut st = qkv(2048);
        // wo's 64 columns: two 32-column units a row.
        st.attention_wo((q, k, v), (0x90, 0xa0), &out(64, acc, false), 64);
        let ffn_in = Input::FoldRmsNorm {
            acc,
            w: 0x80,
            eps: 1e-5,
        };
        st.gate_up(&out(256, gate, false), &out(256, gate, false), 64, ffn_in);
        st.residual(&out(64, x, true), 256, Input::Plain(gate));
        assert!(st.bad.is_none(), "{:?}", st.bad);
        let a = &st.list[1];
        assert_eq!((a.op, a.cols, a.rows[0], a.y[0]), (OP_ATTN_WO, 64, 64, acc));
        // Plain output without a counter (the words count their adds); gate/up polls them and
        // reads x + the accumulator.
        assert_eq!((a.out_ll, a.arrive), (0, 0));
        let g = &st.list[2];
        assert_eq!(
            (g.prep, g.x, g.in_step, g.in_ll, g.emb_rows),
            (PREP_FOLD_RMSNORM, acc, 1, 0, 2)
        );
        assert_eq!(st.list[3].in_step, 2);
    }

    #[test]
    fn steps_are_packed_when_every_block_s_rows_fit() {
        // Rows of 68 bytes (Q8_0, 64 columns); 4 blocks. q/k/v: 96 rows, 24 a block, spanning
        // up to two segments: 24 * 68 + 2 * 32 = 1696 bytes at most. gate/up: 256 pairs, 64 a
        // block: 2 * (64 * 68 + 32) = 8768. The head: 100 rows, 25 a block: 1732.
        let mut st = layer(2048, 256);
        assert!(!mark_packed(&mut st.list, 4, 1700));
        let packed: Vec<i32> = st.list.iter().map(|s| s.packed).collect();
        // wo and down: 16 rows a block (1120 bytes) fit; attention is never packed.
        assert_eq!(packed, [1, 0, 1, 0, 1, 0]);
        assert!(mark_packed(&mut st.list, 4, 8768));
        let packed: Vec<i32> = st.list.iter().map(|s| s.packed).collect();
        assert_eq!(packed, [1, 0, 1, 1, 1, 1]);
        assert!(!mark_packed(&mut st.list, 4, 1000));
        assert!(st.list.iter().all(|s| s.packed == 0));
    }

    #[test]
    fn a_kernel_built_for_some_types_takes_only_steps_of_those() {
        let st = layer(2048, 256);
        // Every matrix of the test layer is Q8_0 (type 8).
        assert!(
            st.list
                .iter()
                .filter(|s| s.op == 0)
                .all(|s| types_in(s, 1 << 8))
        );
        assert!(!types_in(&st.list[0], 1 << 3));
        use gguf::GgmlType as G;
        let named = [
            G::Q4_0,
            G::Q4_1,
            G::Q5_0,
            G::Q5_1,
            G::Q8_0,
            G::Q4_K,
            G::Q5_K,
            G::Q6_K,
        ];
        // pk_types admits exactly these (launch::is_q16).
        let q16 = (0..64)
            .filter(|&t| launch::is_q16(t))
            .fold(0, |m, t| m | 1u64 << t);
        assert_eq!(named.iter().fold(0, |m, t| m | 1u64 << t.id()), q16);
    }

    #[test]
    fn wide_outputs_go_plain_with_a_counter() {
        // gate/up writes 4096 values: over ll_max, so plain with arrivals, and down reads it so.
        let st = layer(2048, 4096);
        assert!(st.bad.is_none());
        let (gu, down) = (&st.list[3], &st.list[4]);
        assert_eq!((gu.out_ll, gu.arrive), (0, 1));
        assert_eq!((down.in_ll, down.in_step), (0, 3));
        // Everything plain when ll_max is 0; the logits never need a counter.
        let st = layer(0, 256);
        assert!(st.list[..5].iter().all(|s| s.out_ll == 0 && s.arrive == 1));
        assert_eq!((st.list[5].out_ll, st.list[5].arrive), (0, 0));
    }

    #[test]
    fn a_read_of_an_unwritten_buffer_or_a_stray_accumulate_is_refused() {
        let mut st = Steps::new(2048);
        st.matvec(&[out(64, 0x20, false)], 64, Input::Plain(0x99));
        assert!(st.bad.is_some());
        let mut st = Steps::new(2048);
        let emb = out(100, 0, false).w;
        st.matvec(
            &[out(64, 0x20, true)],
            64,
            Input::EmbedRmsNorm {
                emb,
                w: 0,
                eps: 0.0,
            },
        );
        assert!(
            st.bad.is_some(),
            "an accumulating step that is not a residual one"
        );
    }

    /// Layer 0 (folded wo) whose down step makes layer 1's q/k/v ([`Steps::residual_fused`]),
    /// then layer 1's fused attention reading k and v at `kv` (q's 64 and k's 16 values after q
    /// is where the fused step writes them); `ll_max` as [`Steps::new`].
    fn fused_layers(ll_max: usize, kv: (u64, u64)) -> Steps {
        let (x, q, k, v, gate) = (0x10, 0x20, 0x30, 0x40, 0x60);
        let mut st = qkv(ll_max);
        st.attention_wo((q, k, v), (0x90, 0xa0), &out(64, 0x100, false), 64);
        let fold = |acc| Input::FoldRmsNorm {
            acc,
            w: 0x80,
            eps: 1e-5,
        };
        st.gate_up(
            &out(256, gate, false),
            &out(256, gate, false),
            64,
            fold(0x100),
        );
        let mut c = out(96, q, false);
        c.w.ty = crate::fused::T_W16;
        let down = out(64, x, true);
        st.residual_fused(&down, 256, Input::Plain(gate), &c, 64, [64, 16, 16]);
        let wo = out(64, 0x200, false);
        let norm = (x, 64, 1e-5);
        st.attention_wo_fused((q, kv.0, kv.1), (0x90, 0xa0), &wo, 64, norm, [0x7, 0, 0]);
        st.gate_up(
            &out(256, gate, false),
            &out(256, gate, false),
            64,
            fold(0x200),
        );
        st
    }

    #[test]
    fn a_fused_down_step_hands_q_k_v_and_x_to_the_attention_after_it() {
        let end_to_end = (0x20 + 8 * 64, 0x20 + 8 * 80);
        let st = fused_layers(2048, end_to_end);
        assert!(st.bad.is_none(), "{:?}", st.bad);
        let (down, att) = (&st.list[3], &st.list[4]);
        assert_eq!((down.nseg, down.total, down.emb_rows), (2, 64 + 96, 64));
        assert_eq!(
            (down.ty[1], down.accumulate, down.y[1]),
            (crate::fused::T_W16, [1, 0, 0], 0x20)
        );
        assert_eq!(
            (att.op, att.prep, att.in_step, att.in_ll),
            (OP_ATTN_WO, PREP_FUSED, 3, 1)
        );
        assert_eq!((att.x, att.emb_rows, att.bias), (0x10, 64, [0x7, 0, 0]));
        assert_eq!(
            st.list[5].in_step, 4,
            "gate/up reads the fused attention's fold"
        );
        // Outputs wider than ll_max go plain: a fused step hands over tagged words only.
        assert!(fused_layers(32, end_to_end).bad.is_some());
        // k and v read elsewhere than where the fused step wrote them (after q) are refused.
        assert!(fused_layers(2048, (0x30, 0x40)).bad.is_some());
    }

    #[test]
    fn step_matches_the_cuda_layout() {
        assert_eq!(std::mem::offset_of!(PkStep, out), 136);
        assert_eq!(std::mem::offset_of!(PkStep, rows), 144);
        assert_eq!(std::mem::offset_of!(PkStep, op), 192);
        assert_eq!(std::mem::offset_of!(PkStep, eps), 228);
        assert_eq!(std::mem::offset_of!(PkStep, res_smem), 232);
        assert_eq!(std::mem::offset_of!(PkStep, out_ll), 240);
        assert_eq!(std::mem::offset_of!(PkStep, arrive), 248);
        assert_eq!(size_of::<PkStep>(), 256);
    }
}
