//! A small thread pool for decode: the caller and `n - 1` workers run the same job, each told
//! its index. Workers spin briefly on a generation counter between jobs (a decode step issues
//! ~150 short parallel regions, each a few microseconds), then park, so an idle pool costs
//! nothing. Rayon remains in use for prefill, where regions are long.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle, Thread};
use std::time::{Duration, Instant};

/// A job as seen by workers: a type-erased `&dyn Fn(usize)`.
type JobRef = &'static (dyn Fn(usize) + Sync);

struct Shared {
    /// Bumped once per job; workers run a job when they see it change.
    generation: AtomicUsize,
    /// Workers still running the current job.
    pending: AtomicUsize,
    job: Mutex<Option<JobRef>>,
    panicked: AtomicBool,
    stop: AtomicBool,
    /// How long an idle worker spins before parking.
    spin: Duration,
}

/// A fixed set of threads that run jobs together with the caller.
pub struct Pool {
    shared: Arc<Shared>,
    workers: Vec<(JoinHandle<()>, Thread)>,
    /// Serialises `run` (the pool runs one job at a time).
    running: Mutex<()>,
}

impl Pool {
    /// A pool of `n` threads in all (the caller counts as one); `spin` is how long idle workers
    /// poll before they park.
    pub fn new(n: usize, spin: Duration) -> Pool {
        let shared = Arc::new(Shared {
            generation: AtomicUsize::new(0),
            pending: AtomicUsize::new(0),
            job: Mutex::new(None),
            panicked: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            spin,
        });
        let workers = (1..n.max(1))
            .map(|i| {
                let s = Arc::clone(&shared);
                let h = thread::Builder::new()
                    .name(format!("molla-decode-{i}"))
                    .spawn(move || worker(&s, i))
                    .expect("spawning a decode thread");
                let t = h.thread().clone();
                (h, t)
            })
            .collect();
        Pool {
            shared,
            workers,
            running: Mutex::new(()),
        }
    }

    /// Threads that run each job, the caller included.
    pub fn threads(&self) -> usize {
        self.workers.len() + 1
    }

    /// Runs `f(i)` for every thread index `i` in `0..threads()`, the caller taking index 0, and
    /// returns when all are done. A panic in any of them is re-raised here.
    pub fn run(&self, f: &(dyn Fn(usize) + Sync)) {
        if self.workers.is_empty() {
            f(0);
            return;
        }
        let _one_at_a_time = self.running.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: the reference is only used by workers between here and the wait loop below,
        // which does not return until every worker has finished with it (`pending` reaches 0),
        // even when a job panics (workers catch it). So it never outlives `f`.
        let job: JobRef = unsafe { std::mem::transmute::<&(dyn Fn(usize) + Sync), JobRef>(f) };
        *self.shared.job.lock().unwrap_or_else(|e| e.into_inner()) = Some(job);
        self.shared
            .pending
            .store(self.workers.len(), Ordering::Release);
        self.shared.generation.fetch_add(1, Ordering::AcqRel);
        for (_, t) in &self.workers {
            t.unpark();
        }
        let mine = catch_unwind(AssertUnwindSafe(|| f(0)));
        let mut spins = 0u32;
        while self.shared.pending.load(Ordering::Acquire) != 0 {
            backoff(&mut spins);
        }
        *self.shared.job.lock().unwrap_or_else(|e| e.into_inner()) = None;
        if let Err(p) = mine {
            std::panic::resume_unwind(p);
        }
        if self.shared.panicked.swap(false, Ordering::AcqRel) {
            panic!("a decode worker thread panicked");
        }
    }
}

fn worker(s: &Shared, index: usize) {
    let mut seen = 0usize;
    loop {
        let start = Instant::now();
        let mut spins = 0u32;
        let mut current = s.generation.load(Ordering::Acquire);
        while current == seen && !s.stop.load(Ordering::Acquire) {
            if start.elapsed() < s.spin {
                backoff(&mut spins);
            } else {
                thread::park_timeout(Duration::from_millis(50));
            }
            current = s.generation.load(Ordering::Acquire);
        }
        if s.stop.load(Ordering::Acquire) {
            return;
        }
        seen = current;
        let job = *s.job.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(job) = job
            && catch_unwind(AssertUnwindSafe(|| job(index))).is_err()
        {
            s.panicked.store(true, Ordering::Release);
        }
        s.pending.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Spins for a while, then yields the core on each call: when the machine has more runnable
/// threads than cores, the thread being waited for may need this core to finish.
fn backoff(spins: &mut u32) {
    *spins = spins.saturating_add(1);
    if *spins < 256 {
        std::hint::spin_loop();
    } else {
        thread::yield_now();
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        for (h, t) in self.workers.drain(..) {
            t.unpark();
            let _ = h.join();
        }
    }
}

/// Hands out chunks of `0..total` to whichever thread asks first.
pub struct Chunks {
    next: AtomicUsize,
    total: usize,
    chunk: usize,
}

impl Chunks {
    pub fn new(total: usize, chunk: usize) -> Chunks {
        Chunks {
            next: AtomicUsize::new(0),
            total,
            chunk: chunk.max(1),
        }
    }

    /// The next unclaimed range, or `None` when all are taken.
    pub fn claim(&self) -> Option<std::ops::Range<usize>> {
        let start = self.next.fetch_add(self.chunk, Ordering::Relaxed);
        (start < self.total).then(|| start..(start + self.chunk).min(self.total))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_index_runs_once_per_job() {
        let pool = Pool::new(3, Duration::from_micros(50));
        for _ in 0..1000 {
            let hits: Vec<AtomicUsize> = (0..3).map(|_| AtomicUsize::new(0)).collect();
            pool.run(&|i| {
                hits[i].fetch_add(1, Ordering::Relaxed);
            });
            assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
        }
    }

    #[test]
    fn chunks_cover_the_range_once() {
        let pool = Pool::new(2, Duration::ZERO);
        let c = Chunks::new(1001, 64);
        let sum = AtomicUsize::new(0);
        pool.run(&|_| {
            while let Some(r) = c.claim() {
                sum.fetch_add(r.len(), Ordering::Relaxed);
            }
        });
        assert_eq!(sum.load(Ordering::Relaxed), 1001);
    }

    #[test]
    fn worker_panic_reaches_the_caller_and_the_pool_survives() {
        let pool = Pool::new(2, Duration::ZERO);
        let r = catch_unwind(AssertUnwindSafe(|| {
            pool.run(&|i| {
                if i == 1 {
                    panic!("boom");
                }
            })
        }));
        assert!(r.is_err());
        let n = AtomicUsize::new(0);
        pool.run(&|_| {
            n.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(n.load(Ordering::Relaxed), 2);
    }
}
