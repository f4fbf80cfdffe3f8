//! `matvec_bulk` (kernels/matvec_bulk.cu): `matvec_wide`'s rows with their weights staged in
//! shared memory by the bulk copy engine, several pieces in flight a warp (compute capability 9.0
//! and up, K-quant rows). The same bits as `matvec_wide`. Off by default until measured on the
//! H200: `MOLLA_BULK=1` turns it on; `MOLLA_BULK_PIECE` (bytes a slot, default 2304: sixteen
//! Q4_K super-blocks) and `MOLLA_BULK_SLOTS` (slots a warp, 2 to 4, default 3) size it.

use super::{Out, cfg, mv_args, xq_bytes};
use crate::device::Gpu;
use crate::error::{Result, drv};
use crate::pdl::launch_dep;
use cudarc::driver::PushKernelArg;

/// Warps of a `matvec_bulk` block (kernels/matvec_bulk.cu `BULK_WARPS`).
const BULK_WARPS: usize = 8;
/// Slots a warp at most (`BULK_MAX_SLOTS`).
const BULK_MAX_SLOTS: usize = 4;

/// The ggml K-quant types `matvec_bulk` decodes (Q4_K, Q5_K, Q6_K) and their super-block bytes
/// on the device (Q6_K padded to 224: kernels/common.cuh `Q6K_BYTES`).
fn sb_bytes(ty: i32, q6pad: bool) -> Option<usize> {
    match ty {
        12 => Some(144),
        13 => Some(176),
        14 => Some(if q6pad { 224 } else { 210 }),
        _ => None,
    }
}

/// The bulk settings (read once): `(piece bytes, slots a warp)`, None when off.
pub(crate) fn settings() -> Option<(usize, usize)> {
    static S: std::sync::OnceLock<Option<(usize, usize)>> = std::sync::OnceLock::new();
    *S.get_or_init(|| {
        if !std::env::var("MOLLA_BULK").is_ok_and(|v| v == "1") {
            return None;
        }
        let num = |k: &str, d: usize| {
            std::env::var(k)
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(d)
        };
        let piece = num("MOLLA_BULK_PIECE", 2304);
        let slots = num("MOLLA_BULK_SLOTS", 3).clamp(2, BULK_MAX_SLOTS);
        Some((piece, slots))
    })
}

/// The slot size for `outs` on a `cols`-wide input: `piece` rounded down to whole super-blocks
/// of the widest type; None when `matvec_bulk` cannot take them (not every matrix a K-quant,
/// rows or addresses not whole 16-byte units, a super-block over the piece, fixed-point rows).
fn slot_bytes(outs: &[Out], cols: usize, piece: usize, q6pad: bool) -> Option<usize> {
    if outs.is_empty() || outs.len() > 3 || !cols.is_multiple_of(256) {
        return None;
    }
    let mut widest = 0;
    for o in outs {
        let sb = sb_bytes(o.w.ty, q6pad)?;
        if !sb.is_multiple_of(16)
            || !o.w.row_bytes.is_multiple_of(16)
            || o.w.ptr % 16 != 0
            || o.fixed
            || o.w.row_bytes != cols / 256 * sb
        {
            return None;
        }
        widest = widest.max(sb);
    }
    // Every type's pieces must be whole super-blocks of it: the slot holds at least one of the
    // widest, and the kernel takes piece / sb of each type.
    (piece >= widest).then_some(piece - piece % 16)
}

/// Whether a one-row decode matvec over `outs` that goes wide runs as `matvec_bulk`.
pub(crate) fn goes_bulk(gpu: &Gpu, outs: &[Out], cols: usize) -> bool {
    bulk_shape(gpu, outs, cols).is_some()
}

/// `(slot bytes, slots, dynamic shared memory)` of `matvec_bulk` over `outs`, when it applies.
fn bulk_shape(gpu: &Gpu, outs: &[Out], cols: usize) -> Option<(usize, usize, usize)> {
    let (piece, slots) = settings()?;
    if gpu.cc.0 < 9 {
        return None;
    }
    let slot = slot_bytes(outs, cols, piece, gpu.q6pad)?;
    let smem = xq_bytes(cols) + BULK_WARPS * slots * slot;
    (smem <= gpu.bulk_max_smem).then_some((slot, slots, smem))
}

/// `matvec_wide` of `outs` as `matvec_bulk`, on the input already prepared (or ready) in `buf`
/// (`prep` says how, for its RMSNorm scale); false, having launched nothing, when it does not
/// apply (see [`goes_bulk`]).
///
/// # Safety
/// As `launch::matvec_wide`, after the input's preparation was queued.
pub(crate) unsafe fn matvec_bulk(
    gpu: &Gpu,
    outs: &[Out],
    cols: usize,
    x: u64,
    prep: super::Prep,
    buf: u64,
) -> Result<bool> {
    let Some((slot, slots, smem)) = bulk_shape(gpu, outs, cols) else {
        return Ok(false);
    };
    let (a, total) = mv_args(outs, cols, x, prep);
    let per_sm = gpu
        .k
        .matvec_bulk
        .occupancy_max_active_blocks_per_multiprocessor((BULK_WARPS * 32) as u32, smem, None)
        .map_err(drv("occupancy"))?
        .max(1) as usize;
    let blocks = total.div_ceil(BULK_WARPS).clamp(1, per_sm * gpu.sm_count) as u32;
    let c = cfg((blocks, 1, 1), (BULK_WARPS * 32) as u32, smem as u32);
    let (piece, n) = (slot as i32, slots as i32);
    // SAFETY: the caller guarantees the addresses; the argument layout matches the kernel; the
    // dynamic shared memory holds the input and every warp's slots.
    unsafe { launch_dep!(gpu, &gpu.k.matvec_bulk, c, "matvec launch"; &a, &buf, &piece, &n) }?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::launch::WeightRef;

    fn out(ty: i32, rows: usize, cols: usize, sb: usize) -> Out {
        Out {
            w: WeightRef {
                ptr: 4096,
                rows,
                cols,
                row_bytes: cols / 256 * sb,
                ty,
            },
            bias: 0,
            y: 0,
            accumulate: false,
            fixed: false,
        }
    }

    #[test]
    fn slots_hold_whole_super_blocks_of_k_quants_only() {
        let q4 = out(12, 4096, 4096, 144);
        let q6 = out(14, 1024, 4096, 224);
        assert_eq!(slot_bytes(&[q4, q4, q6], 4096, 2304, true), Some(2304));
        // A piece under a Q6_K super-block cannot hold one.
        assert_eq!(slot_bytes(&[q6], 4096, 200, true), None);
        // The file's 210-byte Q6_K blocks are not whole 16-byte units.
        assert_eq!(
            slot_bytes(&[out(14, 8, 4096, 210)], 4096, 2304, false),
            None
        );
        // Legacy formats stay on matvec_wide.
        let q8 = Out {
            w: WeightRef {
                ptr: 4096,
                rows: 8,
                cols: 4096,
                row_bytes: 4096 / 32 * 34,
                ty: 8,
            },
            ..q4
        };
        assert_eq!(slot_bytes(&[q8], 4096, 2304, true), None);
        // Rows must be whole super-blocks of 256 columns.
        assert_eq!(slot_bytes(&[q4], 896, 2304, true), None);
    }
}
