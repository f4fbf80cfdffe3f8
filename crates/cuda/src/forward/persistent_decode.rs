//! The persistent decode path of [`CudaModel`]: the step list built once per cache
//! ([`crate::persistent`]), one launch a decode step, and the fallback bookkeeping when the kernel
//! is refused or a wait in it times out (docs/cuda-persistent.md).

use super::CudaModel;
use crate::error::{CudaError, Result};
use crate::kv::CudaKvCache;
use crate::launch::{self, Out, Prep};
use crate::persistent::{Input, Persistent, Steps, Token};
use crate::weights::DevMatrix;
use cudarc::driver::CudaSlice;
use std::sync::atomic::Ordering;

impl CudaModel {
    /// With `MOLLA_PK_TRACE=1` (and `MOLLA_KDEFS=PKMEASURE`) set at cache creation: the last persistent decode step's timing.
    pub fn persistent_trace(&self) -> Option<crate::persistent::Trace> {
        self.pk_trace
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub(super) fn persistent_fails(&self, why: String) {
        self.persistent.store(false, Ordering::Relaxed);
        *self
            .persistent_off
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(why);
    }

    /// Queues one decode step of `token` at position `pos` as one launch of the persistent
    /// kernel (and the head after it, when it runs outside): None, having queued nothing, when
    /// the kernel is not available for this model (then it is off from now on). With
    /// `pick` (Some(host)), a head after the kernel also makes the greedy pick into `kv.pick`
    /// (`matvec_wide_pick`, the error flag with it), and into `host` unless it is 0
    /// ([`Head::Picked`]). Else, with `mapped` (not 0: the device address of n_vocab + 1 words of
    /// mapped host memory), a head after the kernel writes the logits there and copies the
    /// error flag after them ([`Head::Mapped`]).
    ///
    /// # Safety
    /// A [`Token::Picked`] address holds the pick kernel's words, written earlier on the stream;
    /// a pick's `host` is 0 or the device address of four words of mapped host memory; `mapped`
    /// is 0 or such an address of n_vocab + 1 words.
    pub(super) unsafe fn queue_persistent(
        &self,
        token: Token,
        pos: usize,
        kv: &mut CudaKvCache,
        pick: Option<u64>,
        mapped: u64,
    ) -> Result<Option<Head>> {
        let (g, vocab) = (&self.gpu, self.hp.n_vocab);
        if kv.pk.is_none() {
            match self.build_persistent(kv) {
                Ok(pk) => {
                    self.pk_grid.store(pk.grid(), Ordering::Relaxed);
                    self.pk_packed.store(pk.packed_build(), Ordering::Relaxed);
                    self.pk_short
                        .store(pk.short_positions().unwrap_or(0), Ordering::Relaxed);
                    self.pk_head_out
                        .store(pk.head_x.is_some(), Ordering::Relaxed);
                    kv.pk = Some(pk);
                }
                Err(e) => {
                    self.persistent_fails(e.to_string());
                    return Ok(None);
                }
            }
        }
        let Some(pk) = kv.pk.as_mut() else {
            return Ok(None);
        };
        // The word after the logits is the kernel's error flag (zero).
        let err = g.ptr(&kv.decode.logits) + (vocab * 4) as u64;
        // SAFETY: the step list holds addresses of this model's and this cache's buffers; a
        // picked token's address is as the caller guarantees.
        unsafe { pk.launch(g, &self.heads, (token, pos), err, g.ptr(&self.freqs))? };
        if let Some((x, tagged)) = pk.head_x {
            let (w, eps) = (g.ptr(&self.output_norm), self.hp.rms_eps);
            let norm = if tagged {
                Prep::RmsNormTagged(w, eps)
            } else {
                Prep::RmsNorm(w, eps)
            };
            let head = self.head_out(g.ptr(&kv.decode.logits));
            // SAFETY: x is the step list's x (n_embd values, tagged or plain as the kernel wrote
            // them), complete once the kernel is; the prep buffer holds prep_stride(max_cols)
            // bytes.
            let prep = g.ptr(&kv.decode_prep);
            if let Some(host) = pick {
                // SAFETY: as above; the pick buffer's ticket is zero, as the pick kernels leave
                // it; host as the caller guarantees.
                unsafe {
                    let input = launch::WideIn {
                        cols: self.hp.n_embd,
                        x,
                        prep: norm,
                        buf: prep,
                    };
                    launch::matvec_wide_pick(g, head, input, true, &kv.pick, host)?
                };
                return Ok(Some(Head::Picked));
            }
            let input = launch::WideIn {
                cols: self.hp.n_embd,
                x,
                prep: norm,
                buf: prep,
            };
            if mapped != 0 {
                let flag = (err, mapped + (vocab * 4) as u64);
                // SAFETY: as above; mapped holds n_vocab + 1 words (the caller guarantees), and
                // err is the kernel's flag word, complete once the kernel is.
                unsafe {
                    launch::matvec_wide_flag(g, &[self.head_out(mapped)], input, Some(flag))?
                };
                return Ok(Some(Head::Mapped));
            }
            // SAFETY: as above.
            unsafe { launch::matvec_wide_flag(g, &[head], input, None)? };
        }
        Ok(Some(Head::Device))
    }

    /// Turns the persistent path off after a launch whose error word is `flag` (not 0): a wait
    /// timed out or a folded product overflowed. The cache's step list is dropped and its logits
    /// (and so the error word) cleared.
    pub(super) fn persistent_flagged(&self, kv: &mut CudaKvCache, flag: u32) -> Result<()> {
        kv.pk = None;
        self.gpu.clear(&mut kv.decode.logits)?;
        // 1 + the step; with PK_ERR_FX, a product a word cannot hold; with PK_ERR_SHORT, the
        // kernel built for short caches ran at a position past them.
        let step = (flag & !(PK_ERR_FX | PK_ERR_SHORT)).wrapping_sub(1);
        self.persistent_fails(if flag & PK_ERR_FX != 0 {
            format!("a folded product at step {step} was too large or not finite")
        } else if flag & PK_ERR_SHORT != 0 {
            format!("the kernel for short caches ran past them at step {step}")
        } else {
            format!("a wait timed out at step {step}")
        });
        Ok(())
    }

    /// One decode step as one launch of the persistent kernel, its logits read by `f`. `f`
    /// back, unused, when the kernel is not available for this model or a wait in it timed out
    /// (then it is off from now on, and the caller runs the step on the graph path: the step
    /// rewrites everything it wrote).
    pub(super) fn decode_persistent<R, F: FnOnce(&[f32]) -> R>(
        &self,
        token: u32,
        kv: &mut CudaKvCache,
        f: F,
    ) -> Result<std::result::Result<R, F>> {
        let (g, vocab) = (&self.gpu, self.hp.n_vocab);
        let t0 = std::time::Instant::now();
        // In pick mode a head after the kernel makes the pick (matvec_wide_pick).
        let pick = (kv.reduce == super::pick::Reduce::Pick).then_some(0);
        let mapped = if kv.reduce == super::pick::Reduce::Logits && mapped_logits() {
            if kv.host_logits.is_none() && !kv.host_logits_tried {
                // Once a cache: without page-locked memory the logits are copied as before.
                kv.host_logits_tried = true;
                kv.host_logits = crate::mapped::HostWords::new(g, vocab + 1)?;
            }
            kv.host_logits
                .as_ref()
                .map_or(0, |h| if h.mapped() { h.dev_at(0) } else { 0 })
        } else {
            0
        };
        // SAFETY: the token is an id; mapped is 0 or the device address of the cache's n_vocab
        // + 1 mapped words.
        let Some(head) =
            (unsafe { self.queue_persistent(Token::Id(token), kv.len, kv, pick, mapped)? })
        else {
            return Ok(Err(f));
        };
        // A timeline's mark after the step (testing::timeline, tests/bench.rs decode_gaps): its
        // entry is the time until the next launch, the device idle between tokens.
        launch::timeline_mark(g, "idle", "idle");
        let t1 = std::time::Instant::now();
        let got = if let (Head::Mapped, Some(h)) = (head, kv.host_logits.as_ref()) {
            // The head wrote the logits and the flag into mapped host memory: no copy, only the
            // stream's end waited for.
            g.sync()?;
            // SAFETY: the launches that wrote the words are complete; nothing else writes them.
            let out = unsafe { h.f32s(vocab + 1) };
            match out[vocab].to_bits() {
                0 => Ok(f(&out[..vocab])),
                flag => Err((f, flag)),
            }
        } else {
            // The logits and the flag in one copy, or in pick mode (forward/pick.rs) the pick's
            // three words and the flag; `f` reads them only when the flag is clear.
            let (buf, words) = if head == Head::Picked {
                super::pick::pick_result(kv)
            } else {
                // SAFETY: the kernel (and the head after it) wrote this cache's logits and flag.
                unsafe { self.step_result(kv, true)? }
            };
            g.download_with(buf, words + 1, |out| match out[words].to_bits() {
                0 => Ok(f(&out[..words])),
                flag => Err((f, flag)),
            })?
        };
        let t2 = std::time::Instant::now();
        match got {
            Ok(r) => {
                if let Some(pk) = kv.pk.as_ref()
                    && let Some(mut t) = pk.read_trace(g)?
                {
                    t.host_us = [(t1 - t0), (t2 - t1)].map(|d| d.as_secs_f64() * 1e6);
                    *self.pk_trace.lock().unwrap_or_else(|e| e.into_inner()) = Some(t);
                }
                kv.len += 1;
                Ok(Ok(r))
            }
            Err((f, flag)) => {
                self.persistent_flagged(kv, flag)?;
                Ok(Err(f))
            }
        }
    }

    /// The persistent kernel for `kv`, with the head inside it or after it (`MOLLA_PK_HEAD`, see
    /// [`HeadPolicy`]).
    fn build_persistent(&self, kv: &CudaKvCache) -> Result<Persistent> {
        let w = self.output();
        let can_go_out = head_can_go_out(w.ty, self.hp.n_embd);
        let policy = match self.pk_head.load(Ordering::Relaxed) {
            1 => HeadPolicy::Wide,
            2 => HeadPolicy::Kernel,
            _ => head_policy(),
        };
        match policy {
            HeadPolicy::Wide => self.build_persistent_with(kv, can_go_out),
            HeadPolicy::Kernel => self.build_persistent_with(kv, false),
            HeadPolicy::Auto if can_go_out && w.rows * w.row_bytes >= HEAD_OUTSIDE_BYTES => {
                self.build_persistent_with(kv, true)
            }
            HeadPolicy::Auto => {
                let inside = self.build_persistent_with(kv, false)?;
                if inside.packed_build() || !can_go_out {
                    return Ok(inside);
                }
                // A head too big to pack (SmolLM2's 49152-row Q8_0 head) keeps the whole list
                // from the kernel built for packed steps; after the kernel, it lets the rest
                // take it (SmolLM2 Q8_0 shape: +1%, session 18).
                let outside = self.build_persistent_with(kv, true)?;
                Ok(if outside.packed_build() {
                    outside
                } else {
                    inside
                })
            }
        }
    }

    /// The persistent kernel's step list for `kv`: per layer q/k/v (RMSNorm in the input, the
    /// embedding lookup too in the first layer), rope + cache store + attention, wo (+= x),
    /// gate/up with SwiGLU, down (+= x); then the head, unless `outside` (then the caller runs
    /// it after the kernel, on `matvec_wide`).
    fn build_persistent_with(&self, kv: &CudaKvCache, outside: bool) -> Result<Persistent> {
        let (g, hp, s) = (&self.gpu, &self.hp, &kv.decode);
        if self.layers.is_empty() {
            return Err(CudaError::Unsupported("a model without layers".into()));
        }
        let p = |b: &CudaSlice<f32>| g.ptr(b);
        let logits = s.ptrs(g).logits;
        // The tagged buffers the steps pass values through: 8 bytes a value, each 16-byte aligned.
        let sizes = [
            hp.n_embd,
            hp.n_head * hp.head_dim,
            hp.kv_dim(),
            hp.v_dim(),
            hp.n_head * hp.head_dim_v,
            hp.n_ff,
        ];
        // wo folded into attention (`PkBuild::fold`: wo matrices of the legacy q16 formats over
        // heads of whole 32-column units); its accumulators (a row a layer) follow the tagged
        // buffers.
        let fold = g.pk_build.fold;
        let acc_words = if fold {
            self.layers.len() * hp.n_embd
        } else {
            0
        };
        let tagged_words: usize = sizes.iter().map(|n| n.next_multiple_of(2)).sum();
        let ll = g.zeros::<u64>(tagged_words + acc_words)?;
        let mut at = g.ptr(&ll);
        let [x, q, k, v, att, gate] = sizes.map(|n| {
            let a = at;
            at += 8 * n.next_multiple_of(2) as u64;
            a
        });
        let acc_base = at;
        let out =
            |w: &DevMatrix, y: u64, bias: u64, accumulate: bool| self.out(w, y, bias, accumulate);
        let eps = hp.rms_eps;
        let mut st = Steps::new(crate::persistent::ll_max());
        // Fused q/k/v (`PkBuild::fuse`, crate::fused): every layer's but the first made by the
        // down step before it, into q, k and v (end to end: their widths are even).
        let fuse = g.pk_build.fuse && fold;
        for (li, l) in self.layers.iter().enumerate() {
            // This layer's q/k/v come from the down step before (its C was made at load).
            let fused_in = fuse && li > 0 && l.fused.is_some();
            if !fused_in {
                let input = if li == 0 {
                    Input::EmbedRmsNorm {
                        emb: self.embd.r(g),
                        w: p(&l.attn_norm),
                        eps,
                    }
                } else {
                    Input::RmsNorm(x, p(&l.attn_norm), eps)
                };
                let qkv = [
                    out(&l.wq, q, self.opt(&l.bq), false),
                    out(&l.wk, k, self.opt(&l.bk), false),
                    out(&l.wv, v, self.opt(&l.bv), false),
                ];
                st.matvec(&qkv, hp.n_embd, input);
            }
            let att_len = hp.n_head * hp.head_dim_v;
            let ffn_in = if fold {
                let acc = acc_base + 8 * (li * hp.n_embd) as u64;
                let wo = out(&l.wo, acc, 0, false);
                let caches = self.cache_ptrs(kv, li);
                if fused_in {
                    let bias = [self.opt(&l.bq), self.opt(&l.bk), self.opt(&l.bv)];
                    let norm = (x, hp.n_embd, eps);
                    st.attention_wo_fused((q, k, v), caches, &wo, att_len, norm, bias);
                } else {
                    st.attention_wo((q, k, v), caches, &wo, att_len);
                }
                Input::FoldRmsNorm {
                    acc,
                    w: p(&l.ffn_norm),
                    eps,
                }
            } else {
                st.attention((q, k, v), self.cache_ptrs(kv, li), att, att_len);
                // wo and down add onto x, which the q/k/v and gate/up steps before them read.
                st.residual(&out(&l.wo, x, 0, true), att_len, Input::Plain(att));
                Input::RmsNorm(x, p(&l.ffn_norm), eps)
            };
            // The pair step writes silu(gate) * up into gate's buffer only.
            st.gate_up(
                &out(&l.w_gate, gate, 0, false),
                &out(&l.w_up, gate, 0, false),
                hp.n_embd,
                ffn_in,
            );
            let down = out(&l.w_down, x, 0, true);
            let next = self.layers.get(li + 1).and_then(|n| n.fused.as_ref());
            match next.filter(|_| fuse) {
                Some(c) => {
                    let c_out = Out {
                        w: c.r(g),
                        y: q,
                        bias: 0,
                        accumulate: false,
                        fixed: false,
                    };
                    let input = Input::Plain(gate);
                    let widths = [hp.n_head * hp.head_dim, hp.kv_dim(), hp.v_dim()];
                    st.residual_fused(&down, hp.n_ff, input, &c_out, c.xcols, widths);
                }
                None => st.residual(&down, hp.n_ff, Input::Plain(gate)),
            }
        }
        let head = self.head_out(logits);
        // A head after the kernel runs at four blocks an SM (matvec_wide) instead of the
        // kernel's one.
        if !outside {
            st.matvec_plain(
                &[head],
                hp.n_embd,
                Input::RmsNorm(x, p(&self.output_norm), eps),
            );
        }
        let tagged = st.tagged(x);
        let mut pk = Persistent::new(g, st, ll, &self.heads)?;
        pk.head_x = outside.then_some((x, tagged));
        pk.fold = (acc_base, acc_words);
        Ok(pk)
    }

    /// The head's matvec into `logits`.
    pub(super) fn head_out(&self, logits: u64) -> Out {
        Out {
            w: self.output(),
            y: logits,
            bias: 0,
            accumulate: false,
            fixed: false,
        }
    }
}

/// Where a queued persistent step's result lands ([`CudaModel::queue_persistent`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Head {
    /// The logits and the error flag in the cache's device buffer.
    Device,
    /// The greedy pick and the flag in the pick buffer (and the host words given).
    Picked,
    /// The logits and the flag in the cache's mapped host words.
    Mapped,
}

/// Whether a persistent decode step's head (after the kernel) writes the logits straight into
/// mapped host memory (`matvec_wide_host`: coalesced runs of rows across PCIe), so that no copy
/// from the device follows the step (`MOLLA_MAPPED_LOGITS=0` turns it off; read once). Measured
/// on the H200 (session 30, `decode_speed`, tg128): the Qwen shape (151936 logits) 1782 against
/// 1701 tok/s with the copy (+4.8%), the SmolLM2 shape (49152) 2285 against 2281. (Each row's
/// 4-byte value stored alone across PCIe, the first version, cost Qwen 14%.)
pub(super) fn mapped_logits() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("MOLLA_MAPPED_LOGITS").map_or(true, |v| v != "0"))
}

/// The error word's flag for a product the fixed-point sums cannot hold
/// (kernels/persistent_steps.cuh `PK_ERR_FX`).
const PK_ERR_FX: u32 = 0x4000_0000;
/// kernels/persistent_steps.cuh `PK_ERR_SHORT`.
const PK_ERR_SHORT: u32 = 0x2000_0000;

/// Heads of this many bytes and more run after the persistent kernel. Measured on the H200
/// (session 10, tg128 tok/s, head in the kernel / after it): the Qwen2.5-0.5B file's 145 MB Q8_0
/// head 1190 / 1213; SmolLM2's 30 MB Q8_0 head 1292 / 1287 (Q8_0 file), 1316 / 1318 (Q4_1).
pub(crate) const HEAD_OUTSIDE_BYTES: usize = 64 << 20;

/// Whether a head of ggml type `ty` over `n_embd` columns can run after the persistent kernel
/// (`matvec_wide_host`: a q16 type over whole 32-column units).
pub(crate) fn head_can_go_out(ty: i32, n_embd: usize) -> bool {
    launch::is_q16(ty) && n_embd.is_multiple_of(32)
}

/// Where the persistent path runs the head (a q16 head over a multiple of 32 columns can go
/// after the kernel; others stay in it).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum HeadPolicy {
    /// After the kernel when it is large ([`HEAD_OUTSIDE_BYTES`]), or when it alone keeps the
    /// step list from the kernel built for packed steps (the default).
    Auto,
    /// Always after the kernel (`MOLLA_PK_HEAD=wide`).
    Wide,
    /// Always inside the kernel (`MOLLA_PK_HEAD=kernel`).
    Kernel,
}

/// `MOLLA_PK_HEAD`'s choice (read once).
fn head_policy() -> HeadPolicy {
    static P: std::sync::OnceLock<HeadPolicy> = std::sync::OnceLock::new();
    *P.get_or_init(|| match std::env::var("MOLLA_PK_HEAD").as_deref() {
        Ok("wide") => HeadPolicy::Wide,
        Ok("kernel") => HeadPolicy::Kernel,
        _ => HeadPolicy::Auto,
    })
}
