//! The persistent kernel's table of packed matvec steps (kernels/persistent_steps.cuh `PkBlk`):
//! each block's rows of each such step, the spans of global memory its copy reads and where its
//! chunks land in shared memory, worked out once on the host instead of on every step (the
//! kernel's `pk_rows`, `pk_seg_chunk`, `pk_span` and `pk_row` give the same values).

use super::{OP_ATTN_WO, OP_MATVEC, PkStep};
use cudarc::driver::DeviceRepr;

/// One block's share of one packed matvec step (kernels/persistent_steps.cuh `PkBlk`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct PkBlk {
    /// Span k's 16-byte-aligned start less 16 bytes times the units of the spans before it: unit
    /// i of the block's copy reads `src[k] + 16 i` (k: the first span with i < end[k]).
    src: [u64; 3],
    /// 16-byte units of spans 0 ..= k together.
    end: [i32; 3],
    r0: i32,
    r1: i32,
    /// Chunks: one a segment with rows of the block (a pair step: one, both matrices).
    nch: i32,
    seg: [i32; 3],
    ra: [i32; 3],
    rb: [i32; 3],
    /// Byte offset in the chunk buffers of chunk k's row `ra[k]`.
    row0: [i32; 3],
    /// A pair step: the byte offset of the second matrix's row `ra[0]`.
    row1: i32,
    pad: [i32; 3],
}

// SAFETY: plain #[repr(C)] data whose layout matches the CUDA struct (checked in tests below).
unsafe impl DeviceRepr for PkBlk {}

/// Block b's rows [r0, r1) of a step with `total` rows in a grid of `grid` blocks (the
/// kernel's `pk_rows`).
pub(super) fn block_rows(total: usize, b: usize, grid: usize) -> (usize, usize) {
    (total * b / grid, total * (b + 1) / grid)
}

/// Block b's rows [r0, r1) of a folded wo (`OP_ATTN_WO`, `rows` rows) in a grid of `grid`
/// blocks attending over `n_head` heads: block b takes head b % n_head, and the j-th of the nj
/// blocks of that head (j = b / n_head) the j-th share of the rows (the kernel worked this out,
/// four divisions, on every attention step).
pub(super) fn fold_rows(rows: usize, b: usize, grid: usize, n_head: usize) -> (usize, usize) {
    let h = b % n_head;
    let nj = (grid - 1 - h) / n_head + 1;
    let j = b / n_head;
    (rows * j / nj, rows * (j + 1) / nj)
}

/// The table for `list` run by `grid` blocks over `n_head` query heads: step-major (step s,
/// block b at s * grid + b); a folded attention step's entries hold only its wo rows (r0, r1:
/// [`fold_rows`]), other steps' that are not packed matvec steps are zero.
pub(super) fn table(list: &[PkStep], grid: usize, n_head: usize) -> Vec<PkBlk> {
    let mut t = Vec::with_capacity(list.len() * grid);
    for st in list {
        for b in 0..grid {
            t.push(if st.op == OP_MATVEC && st.packed != 0 {
                entry(st, b, grid)
            } else if st.op == OP_ATTN_WO && n_head > 0 {
                let (r0, r1) = fold_rows(st.rows[0].max(0) as usize, b, grid, n_head);
                PkBlk {
                    r0: r0 as i32,
                    r1: r1 as i32,
                    ..PkBlk::default()
                }
            } else {
                PkBlk::default()
            });
        }
    }
    t
}

/// Block b's entry of packed step `st`: its chunks one a segment (pk_seg_chunk), each chunk's
/// spans (pk_span: one a matrix) back to back in the buffers (pk_copy), the rows' places
/// (pk_row).
fn entry(st: &PkStep, b: usize, grid: usize) -> PkBlk {
    let (r0, r1) = block_rows(st.total.max(0) as usize, b, grid);
    let pair = st.pair != 0;
    let mut d = PkBlk {
        r0: r0 as i32,
        r1: r1 as i32,
        ..PkBlk::default()
    };
    let mut spans: Vec<(u64, u64)> = Vec::with_capacity(3);
    let mut off = 0u64;
    let mut cur = r0;
    while cur < r1 && (d.nch as usize) < 3 {
        let (mut si, mut r) = (0usize, cur);
        if !pair {
            while si + 1 < st.nseg as usize && r >= st.rows[si] as usize {
                r -= st.rows[si] as usize;
                si += 1;
            }
        }
        let end = r1.min(cur - r + st.rows[si] as usize);
        let (ra, rb) = (r, r + (end - cur));
        cur = end;
        let k = d.nch as usize;
        (d.seg[k], d.ra[k], d.rb[k]) = (si as i32, ra as i32, rb as i32);
        for j in 0..if pair { 2 } else { 1 } {
            let s = if pair { j } else { si };
            let row_bytes = st.row_bytes[s] as u64;
            let a = st.w[s] + ra as u64 * row_bytes;
            let z = st.w[s] + rb as u64 * row_bytes;
            let a0 = a & !15;
            let n16 = (z - a0).div_ceil(16);
            let at = (off + (a & 15)) as i32;
            if j == 0 {
                d.row0[k] = at;
            } else {
                d.row1 = at;
            }
            spans.push((a0, n16));
            off += 16 * n16;
        }
        d.nch += 1;
    }
    let mut units = 0u64;
    for (k, &(a0, n16)) in spans.iter().take(3).enumerate() {
        d.src[k] = a0.wrapping_sub(16 * units);
        units += n16;
        d.end[k] = units as i32;
    }
    for k in spans.len().min(3)..3 {
        d.end[k] = units as i32;
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A step of up to three matrices (or a pair) at unaligned addresses in `mem`'s space.
    fn step(rows: &[usize], row_bytes: &[usize], pair: bool) -> PkStep {
        let mut st = PkStep {
            op: OP_MATVEC,
            packed: 1,
            pair: i32::from(pair),
            nseg: rows.len() as i32,
            ..PkStep::default()
        };
        let mut at = 0x105u64;
        for (i, (&r, &rb)) in rows.iter().zip(row_bytes).enumerate() {
            st.w[i] = at;
            st.rows[i] = r as i32;
            st.row_bytes[i] = rb as i32;
            at += (r * rb) as u64 + 0x23;
        }
        st.total = if pair {
            rows[0] as i32
        } else {
            rows.iter().sum::<usize>() as i32
        };
        st
    }

    /// Copies the entry's spans as the kernel does (unit i from src[k] + 16 i to 16 i), then
    /// checks that every row of every chunk reads its own bytes where the entry says.
    fn check(st: &PkStep, grid: usize) {
        let mem: Vec<u8> = (0..4u32 << 20)
            .map(|i| i.wrapping_mul(2_654_435_761).to_le_bytes()[3])
            .collect();
        for b in 0..grid {
            let d = entry(st, b, grid);
            let (r0, r1) = block_rows(st.total as usize, b, grid);
            assert_eq!((d.r0, d.r1), (r0 as i32, r1 as i32));
            let n = d.end[2] as usize;
            let mut buf = vec![0u8; 16 * n];
            for i in 0..n {
                let k = (0..3).find(|&k| i < d.end[k] as usize).unwrap();
                let src = d.src[k].wrapping_add(16 * i as u64) as usize;
                assert_eq!(src % 16, 0, "aligned copies");
                buf[16 * i..16 * i + 16].copy_from_slice(&mem[src..src + 16]);
            }
            // The chunks cover the block's rows in order.
            let mut cur = r0;
            let mut start = [0usize; 3];
            for s in 1..3 {
                start[s] = start[s - 1] + st.rows[s - 1] as usize;
            }
            for k in 0..d.nch as usize {
                let (s, ra, rb) = (d.seg[k] as usize, d.ra[k] as usize, d.rb[k] as usize);
                let first = if st.pair != 0 { ra } else { start[s] + ra };
                assert_eq!(first, cur, "chunk {k} of block {b}");
                cur += rb - ra;
                let mats: &[(usize, i32)] = if st.pair != 0 {
                    &[(0, d.row0[k]), (1, d.row1)]
                } else {
                    &[(s, d.row0[k])]
                };
                for &(m, at) in mats {
                    let rbytes = st.row_bytes[m] as usize;
                    for r in ra..rb {
                        let g = st.w[m] as usize + r * rbytes;
                        let l = at as usize + (r - ra) * rbytes;
                        assert_eq!(l % 16, g % 16, "rows keep their alignment");
                        assert_eq!(
                            &buf[l..l + rbytes],
                            &mem[g..g + rbytes],
                            "block {b} row {r}"
                        );
                    }
                }
            }
            assert_eq!(cur, r1);
        }
    }

    #[test]
    fn entries_put_every_row_where_the_kernel_reads_it() {
        // q/k/v of SmolLM2 (Q4_1 rows of 360 bytes), odd grids so blocks straddle segments.
        check(&step(&[576, 192, 192], &[360, 360, 360], false), 132);
        check(&step(&[576, 192, 192], &[360, 360, 360], false), 7);
        check(&step(&[64, 16, 16], &[68, 68, 68], false), 5);
        // gate/up (Q8_0 and Q4_1 rows), wo, a single block.
        check(&step(&[1536, 1536], &[612, 360], true), 132);
        check(&step(&[576], &[360], false), 132);
        check(&step(&[896, 128, 128], &[1120, 1120, 1120], false), 1);
    }

    #[test]
    fn other_steps_have_zero_entries() {
        let mut st = step(&[64], &[68], false);
        st.packed = 0;
        let attn = PkStep {
            op: 1,
            ..PkStep::default()
        };
        let t = table(&[st, attn, step(&[64], &[68], false)], 4, 2);
        assert_eq!(t.len(), 12);
        assert!(t[..8].iter().all(|e| *e == PkBlk::default()));
        assert!(t[8..].iter().all(|e| e.nch == 1));
    }

    /// A folded attention step's entries: each block's share of wo's rows, the shares of one
    /// head's blocks covering every row once (SmolLM2's 9 heads on 132 blocks, Qwen's 14).
    #[test]
    fn folded_attention_entries_hold_the_wo_shares() {
        for (rows, heads, grid) in [(576usize, 9usize, 132usize), (896, 14, 132), (64, 2, 4)] {
            let attn = PkStep {
                op: OP_ATTN_WO,
                rows: [rows as i32, 0, 0],
                ..PkStep::default()
            };
            let t = table(&[attn], grid, heads);
            for h in 0..heads {
                let mut next = 0;
                for b in (h..grid).step_by(heads) {
                    assert_eq!(t[b].r0 as usize, next, "head {h} block {b}");
                    assert!(t[b].r1 >= t[b].r0);
                    next = t[b].r1 as usize;
                    assert_eq!(t[b].nch, 0);
                }
                assert_eq!(next, rows, "head {h}");
            }
        }
    }

    #[test]
    fn layout_matches_the_kernel() {
        assert_eq!(std::mem::offset_of!(PkBlk, end), 24);
        assert_eq!(std::mem::offset_of!(PkBlk, r0), 36);
        assert_eq!(std::mem::offset_of!(PkBlk, nch), 44);
        assert_eq!(std::mem::offset_of!(PkBlk, row0), 84);
        assert_eq!(std::mem::offset_of!(PkBlk, row1), 96);
        assert_eq!(std::mem::offset_of!(PkBlk, pad), 100);
        assert_eq!(size_of::<PkBlk>(), 112);
    }
}
