//! A measurement, `MOLLA_GRAPH_SKIP=BITS`: kinds of launch left out of the graph path's decode
//! step, so that `molla bench` on a real file times what each kind costs in the replayed graph.
//! (The device trace, `MOLLA_KDEFS=KTRACE`, stamps every block's exit and so lengthens each
//! launch's tail; by its gaps the SwiGLU preparation cost about 7.6 us a layer of the 8B, yet
//! leaving it out changed tg128 by -1%: docs/cuda-persistent.md, session 28.) The logits are
//! then wrong; a skipped preparation leaves its matvec reading whatever its buffer holds, and a
//! skipped matvec takes its preparation launch with it. `scripts/cuda-tests graph-ladder` runs
//! the ladder.

use super::{Out, Prep, Rows, goes_wide};

/// The kinds, as bits of `MOLLA_GRAPH_SKIP`.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Skip(u32);

impl Skip {
    /// The RMSNorm preparations (q/k/v's, gate/up's, the head's), where their matvec goes wide.
    pub const NORM: u32 = 1;
    /// rope and attention.
    pub const ATT: u32 = 2;
    pub const WO: u32 = 4;
    pub const GATE_UP: u32 = 8;
    /// Down's SwiGLU preparation, where down goes wide.
    pub const SWIGLU: u32 = 16;
    pub const DOWN: u32 = 32;
    pub const QKV: u32 = 64;
    pub const HEAD: u32 = 128;

    /// `MOLLA_GRAPH_SKIP` (read once; none when unset).
    pub(crate) fn get() -> Skip {
        static S: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
        Skip(*S.get_or_init(|| {
            std::env::var("MOLLA_GRAPH_SKIP")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        }))
    }

    /// The bits set (0: nothing left out).
    pub(crate) fn bits(self) -> u32 {
        self.0
    }

    /// Whether the launches of `kind` are left out.
    pub(crate) fn has(self, kind: u32) -> bool {
        self.0 & kind != 0
    }

    /// The preparation of a matvec over `outs` on `cols` inputs: `prep`, or `Prep::Ready` (no
    /// preparation launch) when `kind` is skipped and the matvec goes wide.
    pub(crate) fn prep(self, kind: u32, prep: Prep, outs: &[Out], cols: usize, rows: Rows) -> Prep {
        if self.has(kind) && goes_wide(outs, cols, rows) {
            Prep::Ready
        } else {
            prep
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::launch::WeightRef;

    /// A 4096 x 4096 Q4_K matrix (9 MiB: wide) at a made-up address.
    fn big() -> [Out; 1] {
        let w = WeightRef {
            ptr: 1 << 20,
            ty: 12,
            rows: 4096,
            cols: 4096,
            row_bytes: 4096 / 256 * 144,
        };
        [Out {
            w,
            y: 1 << 30,
            bias: 0,
            accumulate: false,
            fixed: false,
        }]
    }

    #[test]
    fn a_skipped_preparation_is_ready_only_where_the_matvec_goes_wide() {
        let one = Rows {
            n: 1,
            prep: 1 << 24,
        };
        let norm = Prep::RmsNorm(1 << 16, 1e-5);
        let s = Skip(Skip::NORM | Skip::DOWN);
        assert!(s.has(Skip::NORM) && s.has(Skip::DOWN) && !s.has(Skip::ATT));
        assert!(matches!(
            s.prep(Skip::NORM, norm, &big(), 4096, one),
            Prep::Ready
        ));
        // Not skipped, or not wide (two rows: a batch), keeps its preparation.
        assert!(matches!(
            s.prep(Skip::SWIGLU, norm, &big(), 4096, one),
            Prep::RmsNorm(..)
        ));
        let two = Rows { n: 2, ..one };
        assert!(matches!(
            s.prep(Skip::NORM, norm, &big(), 4096, two),
            Prep::RmsNorm(..)
        ));
        assert!(!Skip::default().has(Skip::HEAD));
    }
}
