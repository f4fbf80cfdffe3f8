//! Input preparations folded into the kernel before them, on the graph path's one-token decode.
//! A `matvec_wide` reads its input as a q16 row that `matvec_prep_wide` writes in a launch of its
//! own, four times a layer. Two of the four inputs are quantized block by block (32 values) with
//! no reduction over the whole row, so the kernel that computes them can quantize them too, with
//! the same bits:
//! - `rope_attention` quantizes each head's output for wo: the default since session 28
//!   (`MOLLA_ATT_PREP=0` turns it off; on the 8B file +2.1%, 442.5 / 442.4 tok/s against
//!   433.6 / 433.2 on the H200);
//! - the SwiGLU for down could be quantized by the gate/up kernel (`matvec_wide_glu`, sessions
//!   10-49): level with the default on the 8B file (session 26), a ticketed version 5% slower
//!   (session 28; code in 1c63d6b), and session 49's leaner form 1.8% slower on the H100 (session
//!   50: 379.3-379.4 tok/s against 386.4; its grid of one block per 32 rows leaves SMs unevenly
//!   loaded), so it was removed (code in 165a794).
//!
//! The other two, the RMSNorm inputs, need the whole row's sum of squares; preparing them in the
//! last block of wo and down (session 25's `MOLLA_NORM_LAST`) measured 7% slower on the 8B file
//! (session 26; the code is in 02125c3).

use super::{Prep, mv_args, prep_wide};
use crate::device::Gpu;
use crate::error::Result;

/// Whether `rope_attention` quantizes wo's input (unless `MOLLA_ATT_PREP=0`; read once).
pub(crate) fn att_prep_on() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("MOLLA_ATT_PREP").map_or(true, |v| v != "0"))
}

/// `matvec_wide`'s input preparation alone: `x` (`cols` values) prepared by `prep` into `buf`
/// (the conformance tests compare the fused preparations with it).
///
/// # Safety
/// As `matvec_wide`, with `buf` holding `prep_stride(cols)` bytes.
pub(crate) unsafe fn prepare(gpu: &Gpu, cols: usize, x: u64, prep: Prep, buf: u64) -> Result<()> {
    let (a, _) = mv_args(&[], cols, x, prep);
    // SAFETY: as the caller guarantees.
    unsafe { prep_wide(gpu, &a, cols, buf) }
}
