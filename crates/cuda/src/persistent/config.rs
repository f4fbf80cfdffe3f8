//! What the environment and the model choose for a persistent decode kernel's build and launch:
//! the tuning and measurement knobs (`MOLLA_PK_*`), which steps are packed, what a kernel is
//! built for (weight types, head shape).

use super::{PkStep, steps};
use crate::compile::{PkBuild, PkRoles};
use crate::launch;
use gguf::GgmlType;

pub(super) fn env_i32(name: &str, default: i32) -> i32 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Blocks per SM to use at most (`MOLLA_PK_BPS`, default 1).
pub(super) fn blocks_per_sm_cap() -> u32 {
    env_i32("MOLLA_PK_BPS", 1).max(1) as u32
}

/// Bytes of weights a block stages in shared memory at a time (`MOLLA_PK_CHUNK`, default: all
/// that shared memory leaves; `stages()` such buffers).
pub(super) fn chunk_bytes() -> usize {
    env_i32("MOLLA_PK_CHUNK", 1 << 20).clamp(1024, 1 << 20) as usize
}

/// Chunk buffers a block cycles through (`MOLLA_PK_STAGES`, 1 to 4, default 1): how many
/// chunks of weights are in flight while one is decoded. One buffer as large as shared memory
/// allows measured fastest (session 5, H200, in-process tg128: 8B shape 1551 with two 48 KiB
/// buffers, 1780 with one of 107 KiB; Qwen shape 1145 / 1180; SmolLM2 Q4_1 1329 / 1334): the
/// 8B's decode is bound by the row decoders and each chunk ends in a block barrier, so fewer,
/// larger chunks beat overlapping the copy.
pub(super) fn stages() -> usize {
    env_i32("MOLLA_PK_STAGES", 1).clamp(1, 4) as usize
}

/// Widest output (values) a step hands over in tagged words (`MOLLA_PK_LL_MAX`, default 6144);
/// wider ones go plain with a counter: tagged words double the bytes every block reads. 2048
/// until session 45: Qwen2.5-0.5B's 4864-wide gate/up output as tagged words measured level
/// while the kernel still held the counter path (sessions 26-32), +3.2% once every output goes
/// tagged and that path is not built (`PkRoles::ll_only`; H100, real file: 2039, 2011, 2029
/// against 1967, 1962, 1963 tok/s). Wider outputs (8B-class FFNs) keep the counters, unmeasured.
pub(crate) fn ll_max() -> usize {
    env_i32("MOLLA_PK_LL_MAX", 6144).max(0) as usize
}

/// Chunks of a block's rows prefetched into L2 ahead of their copy into shared memory
/// (`MOLLA_PK_L2`, default 2; 0 turns it off).
pub(super) fn l2_ahead() -> i32 {
    env_i32("MOLLA_PK_L2", 2).clamp(0, 64)
}

/// Measurement only (`MOLLA_PK_SKIP`, bits, default 0): stages of the persistent kernel left
/// out while their hand-overs stay, so that time differences split a token into matvec work,
/// attention work, input preparation and synchronisation (kernels/persistent_steps.cuh
/// PK_SKIP_*: 1 rows, 2 attention, 4 input preparation, which implies 1; 8 the rows' weight
/// copies, 16 the rows' dots, each leaving the rest of the rows' work in). The logits are then
/// meaningless. It acts only in kernels built with `MOLLA_KDEFS=PKMEASURE`: the default kernel
/// leaves the code out, which measured 4-6% faster decode (session 12).
pub(super) fn skip_knobs() -> i32 {
    let k = env_i32("MOLLA_PK_SKIP", 0) & 31;
    if k & 4 != 0 { k | 1 } else { k }
}

/// `MOLLA_PK_DELAY=KINDS:WHERE:NS` (measurement build only, kernels/persistent_steps.cuh
/// `pk_delay`): every block spins NS ns (in units of 32 cycles at 2 GHz, up to ~4 us) at point
/// WHERE (0 before the wait for the input, 1 once it is in, 2 before the folded wo) of the
/// steps of KINDS (bits: 1 q/k/v, 2 attention, 4 gate/up, 8 down, 16 the head), for a causal
/// profile of a token: how much it slows says how much of that point lies on its critical path.
/// As `PkArgs::knobs` bits 16..31; 0 when unset or malformed.
pub(super) fn delay_knobs() -> i32 {
    std::env::var("MOLLA_PK_DELAY").map_or(0, |v| delay_bits(&v))
}

/// [`delay_knobs`] of the value `v`.
fn delay_bits(v: &str) -> i32 {
    let f: Vec<u32> = v.split(':').filter_map(|x| x.trim().parse().ok()).collect();
    let [kinds, at, ns] = f[..] else {
        return 0;
    };
    let units = (ns.saturating_mul(2) / 32).min(255);
    ((kinds & 31) << 16 | (at & 3) << 21 | units << 24) as i32
}

/// Marks the matvec steps whose rows fit each block's `room` bytes of chunk buffers whole
/// (`PkStep::packed`): then a block copies all of them as the step begins, each segment's share
/// (as kernels/persistent.cu `pk_span` lays it out: whole 16-byte units, at most 32 bytes more
/// than its rows) after the last, and computes them with no further wait. Block b of `grid` owns
/// rows total * b / grid .. total * (b + 1) / grid, as `pk_rows`. Returns whether every matvec
/// step is packed (the list can run on the kernel built for packed steps only).
pub(super) fn mark_packed(list: &mut [PkStep], grid: usize, room: usize) -> bool {
    let on = std::env::var("MOLLA_PK_PACKED").map_or(true, |v| v != "0");
    let mut all = true;
    for st in list.iter_mut().filter(|s| s.op == steps::OP_MATVEC) {
        let total = st.total.max(0) as usize;
        let fits = (0..grid).all(|b| {
            let (r0, r1) = super::blocks::block_rows(total, b, grid);
            let mut bytes = 0;
            let mut add = |n: usize, j: usize| bytes += n * st.row_bytes[j] as usize + 32;
            if st.pair != 0 {
                for j in 0..2 {
                    add(r1 - r0, j);
                }
            } else {
                let mut start = 0;
                for j in 0..st.nseg as usize {
                    let end = start + st.rows[j] as usize;
                    let n = r1.min(end).saturating_sub(r0.max(start));
                    if n > 0 {
                        add(n, j);
                    }
                    start = end;
                }
            }
            bytes <= room
        });
        let packed = on && fits;
        st.packed = packed as i32;
        all &= packed;
    }
    all
}

/// Whether `MOLLA_PK_TYMASK=0` asks for the generic persistent kernel (every weight and
/// embedding type, read at run time).
fn generic_asked() -> bool {
    std::env::var("MOLLA_PK_TYMASK").is_ok_and(|v| v == "0")
}

/// The ggml types of `model`'s matrices that persistent decode steps multiply by (every layer's
/// and the output's), as a mask (bit t: type t) for a kernel built for them alone, when all of
/// them are q16 formats (kernels/persistent.cu `PK_TYMASK`); else, or with `MOLLA_PK_TYMASK=0`,
/// None (a kernel for every type). The smaller kernel measured 5-7% more tokens/s on the H200
/// (SmolLM2 Q4_1 and Qwen Q5_0 shapes, session 16); the program is compiled (and cached) once
/// per set of types.
fn pk_types(model: &model::Model) -> Option<u64> {
    if generic_asked() {
        return None;
    }
    let mut mask = 0u64;
    // The output head (the embedding matrix itself when the file ties them), then the layers.
    for w in std::iter::once(&model.output).chain(layer_matrices(model)) {
        let t = w.ty.id();
        if !launch::is_q16(t as i32) {
            return None;
        }
        mask |= 1u64 << t;
    }
    Some(mask)
}

/// Whether the persistent path runs `model`'s head after the kernel by default (build_persistent's
/// Auto policy): a q16 head over a multiple of 32 columns, as large as `HEAD_OUTSIDE_BYTES` or
/// too big for a block's shared memory on a typical grid (SmolLM2's 30 MB head: it does not
/// pack, so the list goes after the kernel to keep the packed build).
fn head_outside(model: &model::Model) -> bool {
    use crate::forward::persistent_decode::{HEAD_OUTSIDE_BYTES, head_can_go_out};
    let o = &model.output;
    let head = o.rows * o.row_bytes;
    head_can_go_out(o.ty.id() as i32, model.hp.n_embd)
        && (head >= HEAD_OUTSIDE_BYTES || head.div_ceil(TYPICAL_SMS) > 200 << 10)
}

/// Every layer's matrices that decode steps multiply by.
fn layer_matrices(model: &model::Model) -> impl Iterator<Item = &model::Matrix> {
    model
        .layers
        .iter()
        .flat_map(|l| [&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down])
}

/// What the persistent kernel is built for, for `model`: its weight types (`pk_types`), and
/// its head shape, compiled in (unless `MOLLA_PK_SHAPE=0`): a fifth fewer instructions and 4-7%
/// more tokens/s on the H200 (SmolLM2 Q4_1 1718 -> 1845, Qwen Q5_0 1483 -> 1549, session 16).
/// A shape the CUDA backend refuses anyway (forward.rs `check_shape`) is not compiled in, so that
/// the refusal stays a clear error rather than a compile failure.
pub(crate) fn pk_build(model: &model::Model) -> PkBuild {
    let h = &model.hp;
    let dims = |d: usize| (2..=crate::forward::MAX_HEAD_DIM).contains(&d) && d.is_multiple_of(2);
    let sane = dims(h.head_dim)
        && dims(h.head_dim_v)
        && h.n_head_kv > 0
        && h.n_head.is_multiple_of(h.n_head_kv)
        && h.n_head <= 1 << 16;
    let build = PkBuild {
        types: pk_types(model),
        shape: (sane && std::env::var("MOLLA_PK_SHAPE").map_or(true, |v| v != "0"))
            .then(|| [h.head_dim, h.head_dim_v, h.n_head, h.n_head_kv].map(|v| v as u32)),
        packed: false,
        fold: wo_folds(model),
        threads: block_threads(model),
        emb: emb_type(model),
        short: false,
        roles: None,
        fuse: false,
        next_l2: next_l2(model),
        legpad: legpad(model),
    };
    let fuse = fuses(model, &build);
    PkBuild {
        roles: role_types(model, build.block_threads() as usize / 32),
        types: build.types.map(|m| {
            if fuse {
                m | 1 << crate::fused::T_W16
            } else {
                m
            }
        }),
        fuse,
        ..build
    }
}

/// `MOLLA_LEGPAD=1` or `=0`: legacy blocks padded on upload for every model (and for a device
/// opened without one), or for none; None when unset (`legpad`).
pub(crate) fn legpad_forced() -> Option<bool> {
    match std::env::var("MOLLA_LEGPAD").as_deref() {
        Ok("1") => Some(true),
        Ok("0") => Some(false),
        _ => None,
    }
}

/// Whether `model`'s Q8_0, Q4_0 and Q5_0 blocks are padded on upload (`PkBuild::legpad`,
/// weights.rs `pad_legacy`, kernels/common.cuh `LEGPAD`; `MOLLA_LEGPAD` decides when set): when
/// a layer matrix is of one of those types. Session 60 (was `MOLLA_KDEFS=LEGPAD`; H100, tg128,
/// three rounds, tok/s): SmolLM2 Q8_0 2760.7, 2745.8, 2745.5 against 2701.3, 2689.9, 2702.8
/// (+2.0%), Qwen2.5 Q4_K_M (Q5_0 and Q8_0 in its 896-column matrices) 2216.6, 2201.0, 2214.2
/// against 2175.8, 2183.3, 2173.2 (+1.5%); SmolLM2 Q4_1, whose only Q8_0 matrix is the head
/// (and embedding), 2816.7, 2822.4, 2794.6 against 2850.4, 2874.1, 2859.9 (-1.8%), so a head
/// alone does not ask for it (the padded head's walk is no slower, mvbench; that file's kernel
/// grows with the padded row lookup, 3920 -> 4056 instructions).
fn legpad(model: &model::Model) -> bool {
    legpad_forced().unwrap_or_else(|| {
        layer_matrices(model).any(|m| crate::weights::legacy_padded(m.ty).is_some())
    })
}

/// A packed step's share of weights a block, in bytes, from which the persistent kernel asks L2
/// for each step's weights a step ahead (`next_l2`).
const NEXT_L2_BYTES: usize = 12 << 10;

/// Whether the persistent kernel asks L2 for each packed step's weights while the step before
/// runs (`PkBuild::next_l2`, kernels/persistent_chunks.cuh `pk_next_l2`): for a model whose
/// widest matvec step (q/k/v, gate/up or down) gives a block of a typical grid at least
/// `NEXT_L2_BYTES`, unless `MOLLA_PK_NEXT_L2=0` (`=1` asks for it on any model). Such a share
/// lands in shared memory later than the step's input; a smaller one does not, and the kernel
/// built with the prefetch is slower there. Session 58 (H100, real files, tg128, two rounds
/// each, tok/s): Qwen2.5 Q4_K_M (FFN shares ~37 KB) 2194.4, 2195.6 against 2108.2, 2128.7 and
/// in a second call 2194.0, 2184.2 against 2138.4, 2140.1 (+2.6-3.6%); SmolLM2 Q8_0 (gate/up
/// ~14 KB) 2698.0, 2696.9 against 2659.7, 2667.4 (+1.3%); SmolLM2 Q4_1 (at most ~8.4 KB)
/// 2750.9, 2738.4 against 2829.2, 2804.3 (-2.6%), and as slow with the prefetch built in but
/// never issued.
fn next_l2(model: &model::Model) -> bool {
    match std::env::var("MOLLA_PK_NEXT_L2").as_deref() {
        Ok("0") => return false,
        Ok("1") => return true,
        _ => {}
    }
    let bytes = |ms: &[&model::Matrix]| ms.iter().map(|m| m.rows * m.row_bytes).sum::<usize>();
    model
        .layers
        .iter()
        .flat_map(|l| {
            [
                bytes(&[&l.wq, &l.wk, &l.wv]),
                bytes(&[&l.w_gate, &l.w_up]),
                bytes(&[&l.w_down]),
            ]
        })
        .any(|b| b.div_ceil(TYPICAL_SMS) >= NEXT_L2_BYTES)
}

/// Whether the persistent kernel makes each layer's q/k/v in the down step before
/// (`MOLLA_KDEFS=FUSEQKV`, an experiment, crate::fused): asked for, wo folded, a kernel built
/// for the model's types, llama or qwen2 layers whose residual row and q, k and v are handed over as
/// tagged words (the attention step polls the residual row whole) and whose q, k and v buffers lie
/// end to end (even widths).
fn fuses(model: &model::Model, build: &PkBuild) -> bool {
    let h = &model.hp;
    // The down step's outputs (x, and q, k and v end to end) go as tagged words; its input (the
    // SwiGLU row) may come either way.
    let widths = [h.n_embd, h.n_head * h.head_dim, h.kv_dim(), h.v_dim()];
    crate::compile::experiment("FUSEQKV")
        && build.fold
        && build.types.is_some()
        && model.layers.len() > 1
        && widths.iter().all(|&w| w <= ll_max() && w.is_multiple_of(2))
        && h.n_embd.is_multiple_of(32)
        && h.n_ff.is_multiple_of(32)
        && (h.n_head * h.head_dim + h.kv_dim() + h.v_dim()) <= ll_max()
        && model
            .layers
            .iter()
            .all(|l| l.q_norm.is_none() && l.post_attn_norm.is_none())
}

/// The persistent kernel's row code by role (`PkBuild::roles`, the default since session 45:
/// real files +3.8-7.2% on an H100; `MOLLA_PK_ROLES=0` builds every row walk for every type of
/// the kernel, as before) for a kernel of `warps` warps a block: the gate/up matrices' types,
/// wo's types when folded (else none), whether every layer's gate and up share a type, whether a
/// warp can take one row at a time (the head goes after the kernel, `head_outside`, and no other
/// step has more rows a block than warps on a typical grid), and whether every output is handed
/// over as tagged words. None for a kernel built for every type.
fn role_types(model: &model::Model, warps: usize) -> Option<PkRoles> {
    if std::env::var("MOLLA_PK_ROLES").is_ok_and(|v| v == "0") || pk_types(model).is_none() {
        return None;
    }
    let bit = |m: &model::Matrix| 1u64 << m.ty.id();
    let pair = model
        .layers
        .iter()
        .fold(0, |a, l| a | bit(&l.w_gate) | bit(&l.w_up));
    let fold = if wo_folds(model) {
        model.layers.iter().fold(0, |a, l| a | bit(&l.wo))
    } else {
        0
    };
    let same = model.layers.iter().all(|l| l.w_gate.ty == l.w_up.ty);
    let rows = model
        .layers
        .iter()
        .map(|l| {
            (l.wq.rows + l.wk.rows + l.wv.rows)
                .max(l.wo.rows)
                .max(l.w_down.rows)
        })
        .max()
        .unwrap_or(0);
    // Also for a head too big for a block's shared memory (SmolLM2's), not only one as large as
    // HEAD_OUTSIDE_BYTES. Session 45 (H100, real files, three alternations): SmolLM2 Q4_1 2713,
    // 2696, 2714 against 2630, 2622, 2634 tok/s (+3.0%), Q8_0 +0.6%.
    let rows1 = head_outside(model) && rows <= warps * TYPICAL_SMS;
    let h = &model.hp;
    let widest = [
        h.n_embd,
        h.n_head * h.head_dim,
        h.n_head_kv * h.head_dim,
        h.n_head_kv * h.head_dim_v,
        h.n_ff,
    ];
    let ll_only = widest.iter().all(|&w| w <= ll_max());
    Some(PkRoles {
        pair,
        fold,
        same,
        rows1,
        ll_only,
        half: same && pair_half(model, warps),
    })
}

/// Whether the gate/up pairs go a half-warp each (`PkRoles::half`): when a block's pairs on a
/// typical grid are more than its warps but at most twice as many, so that the half-warps take
/// them in one round where whole warps take two; `MOLLA_PK_PAIR_HALF=1` or `=0` says so
/// whatever the shape (the suites run both). Measured (session 49, H100, SmolLM2 Q8_0's real
/// file: 11.6 pairs a block on eight warps, four alternations) 2633, 2623, 2633, 2631 tok/s
/// against 2617, 2608, 2614, 2613 (+0.65%); in the trace gate/up's rows 1.19 -> 0.93 us. Not
/// for more rounds: Qwen2.5's 36.8 pairs on twelve warps, four rounds made two, measured 1.5%
/// slower (session 46), as SmolLM2 Q4_1's, whose twelve warps take its pairs in one round.
fn pair_half(model: &model::Model, warps: usize) -> bool {
    match std::env::var("MOLLA_PK_PAIR_HALF").as_deref() {
        Ok("1") => return true,
        Ok("0") => return false,
        _ => {}
    }
    let pairs = model
        .layers
        .iter()
        .map(|l| l.w_gate.rows)
        .max()
        .unwrap_or(0);
    pairs > warps * TYPICAL_SMS && pairs <= 2 * warps * TYPICAL_SMS
}

/// Whether step `st` keeps to the role masks of a kernel built with them (`role_types`): a
/// gate/up pair of the pairs' types (of one type when built so), a folded wo of the fold's, and
/// (`ll_only`) an input a step wrote as tagged words wherever the kernel reads one.
pub(super) fn roles_in(st: &PkStep, roles: PkRoles) -> bool {
    let reads_written =
        st.op != steps::OP_MATVEC || st.prep == steps::PREP_PLAIN || st.prep == steps::PREP_RMSNORM;
    if roles.ll_only && reads_written && st.in_ll == 0 {
        return false;
    }
    match st.op {
        steps::OP_ATTN_WO => in_mask(roles.fold, st.ty[0]),
        steps::OP_MATVEC if st.pair != 0 => {
            in_mask(roles.pair, st.ty[0])
                && in_mask(roles.pair, st.ty[1])
                && (!roles.same || st.ty[0] == st.ty[1])
        }
        _ => true,
    }
}

/// The token embedding's type, when the persistent kernel's row lookup can decode it (any type
/// the kernels decode: `weights::supports`, kernels/dequant.cuh `dq8_rt`) and `MOLLA_PK_TYMASK=0`
/// does not ask for the generic kernel.
fn emb_type(model: &model::Model) -> Option<u32> {
    let t = model.tok_embd.ty;
    (!generic_asked() && crate::weights::supports(t)).then(|| t.id())
}

/// SMs the thread choice assumes (an H200's; a GPU with another count only makes the choice a
/// little less apt).
const TYPICAL_SMS: usize = 132;

/// The persistent kernel's threads a block for `model` (`PkBuild::threads`): 384 when its
/// gate/up pairs would take more than two rounds of eight warps a block, or when every layer's
/// gate and up are Q4_1; else the default (0: 256). Measured on the H200: Qwen2.5-0.5B (37 pairs
/// a block) +1-2% tokens/s with twelve warps (session 31; ten or eleven warps level with twelve,
/// session 34); SmolLM2 Q4_1 (11.6 pairs) +0.7% with twelve (session 34, real-shape file, seven
/// pairs of runs: 2439-2455 against 2422-2436; nine warps 1% slower), SmolLM2 Q8_0 level or
/// 0.3% slower, so 256 there. Q4_1 packs a 32-value unit in 20 bytes against Q8_0's 34: more
/// decoding a byte staged, which more warps overlap.
fn block_threads(model: &model::Model) -> u32 {
    let q4_1 = |m: &model::Matrix| m.ty == GgmlType::Q4_1;
    let ffn_q4_1 = !model.layers.is_empty()
        && model
            .layers
            .iter()
            .all(|l| q4_1(&l.w_gate) && q4_1(&l.w_up));
    if model.hp.n_ff > 2 * 8 * TYPICAL_SMS || ffn_q4_1 {
        384
    } else {
        0
    }
}

/// Whether the persistent kernel folds each layer's wo into its attention step (kernels/
/// persistent_steps.cuh `PK_OP_ATTN_WO`): every wo of a legacy q16 format (a unit of 32 columns)
/// over heads of whole units, unless `MOLLA_WO_FOLD=0`. One hand-over and one input
/// preparation fewer a layer: measured +3-5% tokens/s on the H200 (SmolLM2 Q4_1 shape 2063-2068
/// -> 2156-2176, Q8_0 1967-1969 -> 2032-2054, Qwen Q5_0 1562-1592 -> 1614-1627, session 19).
fn wo_folds(model: &model::Model) -> bool {
    std::env::var("MOLLA_WO_FOLD").map_or(true, |v| v != "0")
        && model.hp.head_dim_v > 0
        && model.hp.head_dim_v.is_multiple_of(32)
        // A word counts at most 255 adds: one a 32-column unit of the heads' output.
        && model.hp.n_head * model.hp.head_dim_v / 32 < 256
        // The fold reads a head's output from the quantized input row's place (xq_off), which
        // holds at least a gate/up input's (n_embd values).
        && 4 * model.hp.head_dim_v <= launch::xq_bytes(model.hp.n_embd)
        && !model.layers.is_empty()
        && model
            .layers
            .iter()
            .all(|l| launch::is_q16_legacy(l.wo.ty.id() as i32))
}

/// Whether every type that matvec step `st` multiplies by is in `mask` (a kernel built with
/// `pk_types`).
pub(super) fn types_in(st: &PkStep, mask: u64) -> bool {
    let n = if st.pair != 0 {
        2
    } else {
        st.nseg.clamp(0, 3) as usize
    };
    st.ty[..n].iter().all(|&t| in_mask(mask, t))
}

/// Whether ggml type `t` is in type mask `mask` (bit t).
fn in_mask(mask: u64, t: i32) -> bool {
    (0..64).contains(&t) && mask >> t & 1 == 1
}

/// What in `model` the persistent kernel does not do, if anything: then decode takes the graph
/// path.
pub(crate) fn pk_lacks(model: &model::Model) -> Option<String> {
    let hp = &model.hp;
    let lacks = [
        // Its attention step ropes every layer alike (one n_rot for the launch).
        (
            (0..hp.n_layer).any(|l| !hp.ropes(l)),
            "layers without rope (the persistent kernel ropes every layer)",
        ),
        (
            model.layers.iter().any(|l| l.q_norm.is_some()),
            "per-head q/k norms (not in the persistent kernel)",
        ),
        (
            model.arch.post_norms,
            "post-norms of the attention and FFN outputs (not in the persistent kernel)",
        ),
        (
            hp.ffn_act != model::FfnAct::Silu,
            "GeGLU (the persistent kernel computes SwiGLU)",
        ),
        (
            hp.swa_window > 0,
            "sliding-window layers (the persistent kernel attends globally)",
        ),
        (
            hp.attn_softcap.is_some() || hp.final_softcap.is_some(),
            "soft-capped scores or logits (not in the persistent kernel)",
        ),
        (
            hp.embd_scale.is_some() || hp.residual_scale.is_some() || hp.logit_mul.is_some(),
            "scaled embeddings, residuals or logits (not in the persistent kernel)",
        ),
    ];
    lacks
        .into_iter()
        .find(|(has, _)| *has)
        .map(|(_, why)| why.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use gguf::{GgmlType, GgufFile};
    use model::synth::{SynthSpec, build};

    fn model(spec: &SynthSpec) -> model::Model {
        let bytes = build(spec).expect("synthetic model builds");
        model::Model::from_file(GgufFile::from_bytes(bytes).unwrap()).unwrap()
    }

    /// `spec` with one layer and a 512-token vocabulary.
    fn one_layer(spec: SynthSpec) -> model::Model {
        model(&SynthSpec {
            n_layer: 1,
            n_vocab: 512,
            ..spec
        })
    }

    #[test]
    fn role_masks_refuse_steps_of_other_types() {
        let (q4_1, q8_0) = (GgmlType::Q4_1.id() as i32, GgmlType::Q8_0.id() as i32);
        let roles = PkRoles {
            pair: 1 << q4_1,
            fold: 1 << q4_1,
            same: true,
            rows1: false,
            ll_only: false,
            half: false,
        };
        let pair = |t0, t1| PkStep {
            op: steps::OP_MATVEC,
            pair: 1,
            ty: [t0, t1, 0],
            ..PkStep::default()
        };
        assert!(roles_in(&pair(q4_1, q4_1), roles));
        assert!(!roles_in(&pair(q4_1, q8_0), roles), "a type the pairs lack");
        let both = PkRoles {
            pair: roles.pair | 1 << q8_0,
            ..roles
        };
        assert!(
            !roles_in(&pair(q4_1, q8_0), both),
            "two types, built for one"
        );
        assert!(roles_in(
            &pair(q4_1, q8_0),
            PkRoles {
                same: false,
                ..both
            }
        ));
        let fold = |t| PkStep {
            op: steps::OP_ATTN_WO,
            ty: [t, 0, 0],
            ..PkStep::default()
        };
        assert!(roles_in(&fold(q4_1), roles));
        assert!(!roles_in(&fold(q8_0), roles));
        // Other steps keep to the kernel's whole mask (types_in), not to these.
        let rows = PkStep {
            op: steps::OP_MATVEC,
            ty: [q8_0, 0, 0],
            ..PkStep::default()
        };
        assert!(roles_in(&rows, roles));
        // Built without the counter-fed input path: a step reading a plain row is refused.
        let ll = PkStep { in_ll: 1, ..rows };
        let only = PkRoles {
            ll_only: true,
            ..roles
        };
        assert!(!roles_in(&rows, only) && roles_in(&ll, only));
    }

    #[test]
    fn the_kernel_is_built_for_the_models_types_and_heads() {
        // SmolLM2's heads (64 wide, 9 over 3) on Q4_1 layers and a tied Q4_1 head.
        let m = one_layer(SynthSpec::smollm2(GgmlType::Q4_1));
        let b = pk_build(&m);
        assert_eq!(b.types, Some(1 << GgmlType::Q4_1.id()));
        assert_eq!(b.shape, Some([64, 64, 9, 3]));
        assert_eq!(
            b.emb,
            Some(GgmlType::Q4_1.id()),
            "the lookup built for its embedding's type"
        );
        assert!(b.fold, "Q4_1 wo over 64-wide heads folds");
        // A format without a q16 kernel (F32): a kernel for every type, the shape still compiled in.
        let m = model(&SynthSpec {
            ty: GgmlType::F32,
            ..SynthSpec::tiny("llama")
        });
        let b = pk_build(&m);
        assert_eq!(b.types, None);
        assert_eq!(b.shape, Some([16, 16, 4, 2]));
        assert!(!b.fold, "16-wide heads and F32 wo do not fold");
    }

    #[test]
    fn a_delay_is_kinds_place_and_time() {
        // Gate/up (4), once its input is in (1), 1 us: 2000 cycles, 62 units of 32.
        assert_eq!(
            delay_bits("4:1:1000"),
            (4u32 << 16 | 1 << 21 | 62 << 24) as i32
        );
        // The longest delay the byte holds, whatever is asked.
        assert_eq!(delay_bits("1:0:100000") as u32 >> 24, 255);
        for bad in ["", "4:1", "a:1:100", "4:1:100:2"] {
            assert_eq!(delay_bits(bad), 0, "{bad:?}");
        }
    }

    #[test]
    fn the_next_steps_weights_go_to_l2_where_a_blocks_share_is_large() {
        // Widest step a block of 132: SmolLM2 Q4_1's gate/up ~8.4 KB, Q8_0's ~14 KB, Qwen2.5's
        // Q5_0 gate/up ~45 KB.
        for (spec, on) in [
            (SynthSpec::smollm2(GgmlType::Q4_1), false),
            (SynthSpec::smollm2(GgmlType::Q8_0), true),
            (SynthSpec::qwen2_0_5b(GgmlType::Q5_0), true),
        ] {
            let b = pk_build(&one_layer(spec));
            assert_eq!(b.next_l2, on);
            assert_eq!(b.describe().contains("next weights to L2"), on);
        }
    }

    #[test]
    fn twelve_warps_for_a_wide_ffn_or_q4_1() {
        // SmolLM2: 1536 pairs, 11.6 a block (but Q4_1 takes twelve warps); Qwen2.5-0.5B: 4864,
        // 36.8 a block.
        for (spec, threads) in [
            (SynthSpec::smollm2(GgmlType::Q8_0), 256),
            (SynthSpec::smollm2(GgmlType::Q4_1), 384),
            (SynthSpec::qwen2_0_5b(GgmlType::Q5_0), 384),
        ] {
            let b = pk_build(&one_layer(spec));
            assert_eq!(b.block_threads(), threads);
            assert_eq!(b.threads, if threads == 256 { 0 } else { threads });
            assert_eq!(
                b.describe().ends_with("384 threads a block"),
                threads == 384
            );
            // Pairs a half-warp only where that makes two rounds of warps one: SmolLM2 Q8_0's.
            assert_eq!(b.roles.map(|r| r.half), Some(threads == 256));
        }
    }
}
