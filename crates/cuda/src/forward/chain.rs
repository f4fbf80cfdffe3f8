//! Greedy decoding chained on the device: each step's pick (kernels/pick.cu) stays on the
//! device, where the next step's persistent launch reads it as its token (`Token::Picked`), so
//! the host queues steps back to back and reads the picks as they complete. Step by step, the
//! GPU idles between tokens while the pick comes back, the host takes it and launches the next
//! step (docs/cuda-persistent.md, "the host round trip": 1-3% of a SmolLM2 token, measured in
//! session 25); chained, the next launch is already queued. The server and the CLI take this
//! path for plain greedy sampling unless `MOLLA_CHAIN=0` (see [`chain_on`]).

use super::CudaModel;
use super::persistent_decode::Head;
use super::pick::{PICK_WORDS, Pick, launch_pick};
use crate::error::{CudaError, Result, drv};
use crate::kv::CudaKvCache;
use crate::mapped::HostWords;
use crate::persistent::Token;
use cudarc::driver::CudaEvent;
use std::sync::atomic::Ordering;

/// Steps queued ahead of the one whose pick the host waits for (`MOLLA_CHAIN_DEPTH`, 1 .. 16,
/// read once; 1 is step by step through the same code).
fn depth() -> usize {
    static D: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *D.get_or_init(|| {
        std::env::var("MOLLA_CHAIN_DEPTH")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(3)
            .clamp(1, 16)
    })
}

/// Whether the server's and the CLI's greedy decoding goes through
/// [`CudaModel::decode_greedy`] (the default; `MOLLA_CHAIN=0` turns it off; read once).
/// Measured on the H200 (session 27, `molla bench --pick`, tg128, synth.py's SmolLM2 Q4_1
/// quantized by molla, alternating twice): chained 2391 and 2389 tok/s, against 2322 and 2309
/// copying the logits back step by step and 2337 and 2335 chained with the picks copied into
/// the slots instead of written through the mapping (`MOLLA_MAPPED=0`). Before the slots were
/// kept and mapped (session 26) it was 1-2% slower than the logits' copy.
pub fn chain_on() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("MOLLA_CHAIN").map_or(true, |v| v != "0"))
}

/// Page-locked slots the picks land in, one a queued step, each with the event recorded after
/// its step: written by the pick kernel itself where the memory is mapped for the device
/// (`crate::mapped`), else copied in after it. Kept by the model from one chained run to the
/// next (`CudaModel::chain_ring`): allocating and freeing page-locked memory is slow (not timed
/// here; estimated at up to a millisecond, what the chain saves in two or three hundred steps).
pub(crate) struct Ring {
    words: HostWords,
    events: Vec<CudaEvent>,
}

impl Ring {
    /// None when no page-locked memory can be had.
    fn new(m: &CudaModel, slots: usize) -> Result<Option<Ring>> {
        let g = &m.gpu;
        let Some(words) = HostWords::new(g, slots * PICK_WORDS)? else {
            return Ok(None);
        };
        let events = (0..slots)
            .map(|_| g.ctx.new_event(None).map_err(drv("event")))
            .collect::<Result<_>>()?;
        Ok(Some(Ring { words, events }))
    }

    fn slots(&self) -> usize {
        self.events.len()
    }

    /// Where the pick kernel of slot `i`'s step writes its words itself (0: it does not).
    fn host(&self, i: usize) -> u64 {
        self.words.dev_at(i * PICK_WORDS)
    }

    /// After slot `i`'s step: the copy of its pick's words unless the kernel wrote them, and the
    /// slot's event.
    fn queue(&mut self, m: &CudaModel, kv: &CudaKvCache, i: usize) -> Result<()> {
        if !self.words.mapped() {
            // SAFETY: the slot is read only after its event, recorded next; drop waits for
            // the stream; pick holds at least PICK_WORDS words.
            unsafe {
                self.words
                    .copy_in(&m.gpu, i * PICK_WORDS, &kv.pick, PICK_WORDS)?
            };
        }
        self.events[i]
            .record(&m.gpu.stream)
            .map_err(drv("event record"))
    }

    /// Slot `i`'s words once its step is done.
    fn read(&self, i: usize) -> Result<[u32; PICK_WORDS]> {
        crate::watchdog::watched("pick download", || self.events[i].synchronize())
            .map_err(drv("pick download"))?;
        // SAFETY: the slot's step (and its copy) is complete (its event), and nothing writes
        // the slot until it is queued again.
        Ok(unsafe { self.words.read::<PICK_WORDS>(i * PICK_WORDS) })
    }
}

impl CudaModel {
    /// Greedy decoding of up to `max` tokens after what `kv` holds, from `first`: each step's
    /// input is the step before's pick. `on_pick` gets each step's pick, in order, and says
    /// whether to go on; generation stops at once after a pick that is not a token. Where the
    /// persistent kernel serves the cache, the steps are chained on the device: up to
    /// `MOLLA_CHAIN_DEPTH` (3) are queued ahead of the pick the host waits for, and those queued
    /// past the last pick taken are discarded (their cache positions lie past `kv.len`, which
    /// counts the steps whose picks `on_pick` saw). Elsewhere, step by step
    /// ([`forward_pick`](Self::forward_pick)). The picks are those of `forward_pick` step by
    /// step, bit for bit: the same kernels on the same inputs. Returns the steps taken.
    pub fn decode_greedy(
        &self,
        first: u32,
        max: usize,
        kv: &mut CudaKvCache,
        mut on_pick: impl FnMut(Pick) -> bool,
    ) -> Result<usize> {
        if kv.model_uid != self.uid {
            return Err(CudaError::CacheShape);
        }
        let mut input = first;
        let mut taken = 0;
        while taken < max {
            cpu::check_input(&[input], kv.len, kv.capacity(), self.hp.n_vocab)?;
            let room = (max - taken).min(kv.capacity() - kv.len).min(
                self.pk_max_pos
                    .load(Ordering::Relaxed)
                    .saturating_sub(kv.len),
            );
            let chained = if room > 1 && self.persistent.load(Ordering::Relaxed) && !kv.f32 {
                self.chain(input, room, kv, &mut on_pick)?
            } else {
                None
            };
            let (n, next) = match chained {
                Some(r) => r,
                None => {
                    let p = self.forward_pick(&[input], kv)?;
                    let go = on_pick(p);
                    (1, if go { token_of(p) } else { None })
                }
            };
            taken += n;
            match next {
                Some(t) => input = t,
                None => break,
            }
        }
        Ok(taken)
    }

    /// Up to `room` chained steps from `first` (see [`decode_greedy`](Self::decode_greedy)):
    /// the steps taken and the next input (None: stop), or None, having taken none, when the
    /// persistent kernel cannot run the first or no page-locked memory can be had.
    fn chain(
        &self,
        first: u32,
        room: usize,
        kv: &mut CudaKvCache,
        on_pick: &mut impl FnMut(Pick) -> bool,
    ) -> Result<Option<(usize, Option<u32>)>> {
        let _guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        let (g, vocab) = (&self.gpu, self.hp.n_vocab);
        g.ctx.bind_to_thread().map_err(drv("bind context"))?;
        let slots = depth();
        let mut cached = self.chain_ring.lock().unwrap_or_else(|e| e.into_inner());
        if cached.as_ref().is_none_or(|r| r.slots() != slots) {
            *cached = Ring::new(self, slots)?;
        }
        // Without page-locked memory, step by step.
        let Some(ring) = cached.as_mut() else {
            return Ok(None);
        };
        let len0 = kv.len;
        let pick_at = g.ptr(&kv.pick);
        let logits = g.ptr(&kv.decode.logits);
        let (mut queued, mut done) = (0usize, 0usize);
        let mut input = first;
        let next = loop {
            while queued < room && queued - done < slots {
                let token = if queued == 0 {
                    Token::Id(first)
                } else {
                    Token::Picked(pick_at)
                };
                // A head after the kernel makes the pick itself (matvec_wide_pick).
                // SAFETY: a picked token's words were written by the pick launched after the
                // step before, on this stream.
                let host = ring.host(queued % slots);
                let Some(head) =
                    (unsafe { self.queue_persistent(token, len0 + queued, kv, Some(host), 0)? })
                else {
                    // Only the first step can find the kernel unavailable (it is built then).
                    if queued == 0 {
                        return Ok(None);
                    }
                    break;
                };
                if head != Head::Picked {
                    // SAFETY: the step just queued writes the logits and the error word after
                    // them; pick holds pick_buffer_words(vocab) words, its ticket left zero;
                    // host is 0 or the slot's mapped words.
                    unsafe { launch_pick(g, logits, vocab, true, &kv.pick, host)? };
                }
                ring.queue(self, kv, queued % slots)?;
                queued += 1;
            }
            if done == queued {
                break Some(input);
            }
            let w = ring.read(done % slots)?;
            let flag = w[PICK_WORDS - 1];
            if flag != 0 {
                // A wait in the kernel timed out: this step and those after it are redone on
                // the graph path, from the input the host knows.
                g.sync()?;
                kv.len = len0 + done;
                self.persistent_flagged(kv, flag)?;
                return Ok(Some((done, Some(input))));
            }
            let p = Pick::from_words(&w.map(f32::from_bits));
            done += 1;
            kv.len = len0 + done;
            let go = on_pick(p);
            match token_of(p) {
                Some(t) if go => input = t,
                _ => break None,
            }
        };
        // Steps queued past the last pick taken finish before the cache is handed back (what
        // they wrote lies past kv.len).
        if queued > done {
            g.sync()?;
        }
        Ok(Some((done, next)))
    }
}

/// The pick's token, if it is one.
fn token_of(p: Pick) -> Option<u32> {
    match p {
        Pick::Token(t) => Some(t),
        _ => None,
    }
}
