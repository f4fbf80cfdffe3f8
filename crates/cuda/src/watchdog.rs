//! A watchdog over the host's waits for the GPU (`Gpu::sync`, a download's copy, the chained
//! picks' events). Every spin in molla's kernels is bounded and fails loudly (the persistent
//! kernel's error word), but a kernel that deadlocks at a barrier never ends: it holds the GPU
//! until the process ends, and the thread waiting for it stays blocked for good, so a server
//! would stop answering with no word why (session 48 found such a bug in the persistent kernel's
//! unfolded build, docs/cuda-persistent.md). A wait that lasts longer than
//! `MOLLA_GPU_WATCHDOG_S` seconds (default 120; 0 turns the watchdog off) is taken for such a
//! hang: the watchdog says so on stderr and aborts the process, whose end frees the GPU, so that
//! a supervisor sees a failed process and can start it again.

use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

/// The limit when `MOLLA_GPU_WATCHDOG_S` is unset: far above any single wait of a working
/// engine (a decode step takes under a millisecond, a prefill chunk of the 8B under a second).
const DEFAULT_LIMIT: Duration = Duration::from_secs(120);

/// The waits in progress.
#[derive(Default)]
struct Waits {
    next: u64,
    open: Vec<(u64, Instant, &'static str)>,
}

impl Waits {
    fn begin(&mut self, now: Instant, what: &'static str) -> u64 {
        let id = self.next;
        self.next += 1;
        self.open.push((id, now, what));
        id
    }

    fn end(&mut self, id: u64) {
        if let Some(i) = self.open.iter().position(|w| w.0 == id) {
            self.open.swap_remove(i);
        }
    }

    /// The longest wait open at `now` for more than `limit`: what it waits for, and how long.
    fn overdue(&self, now: Instant, limit: Duration) -> Option<(&'static str, Duration)> {
        self.open
            .iter()
            .map(|&(_, t, what)| (what, now.saturating_duration_since(t)))
            .filter(|&(_, d)| d > limit)
            .max_by_key(|&(_, d)| d)
    }
}

/// The limit `MOLLA_GPU_WATCHDOG_S` sets (`v`: its value): whole seconds, 0 for none; unset or
/// not a number, the default.
fn parse_limit(v: Option<&str>) -> Option<Duration> {
    match v.map(|s| s.trim().parse::<u64>()) {
        Some(Ok(0)) => None,
        Some(Ok(s)) => Some(Duration::from_secs(s)),
        _ => Some(DEFAULT_LIMIT),
    }
}

struct Dog {
    limit: Duration,
    waits: Mutex<Waits>,
}

impl Dog {
    fn waits(&self) -> MutexGuard<'_, Waits> {
        self.waits.lock().unwrap_or_else(|e| e.into_inner())
    }
}

static DOG: OnceLock<Option<Dog>> = OnceLock::new();

/// The watchdog, started with the first wait (none when turned off, or when its thread cannot
/// be started).
fn dog() -> Option<&'static Dog> {
    DOG.get_or_init(|| {
        let limit = parse_limit(std::env::var("MOLLA_GPU_WATCHDOG_S").ok().as_deref())?;
        std::thread::Builder::new()
            .name("molla-gpu-watchdog".into())
            .spawn(move || watch(limit))
            .ok()?;
        Some(Dog {
            limit,
            waits: Mutex::new(Waits::default()),
        })
    })
    .as_ref()
}

/// The watchdog's thread: looks at the open waits a few times a limit (at least once a second).
fn watch(limit: Duration) {
    let period = (limit / 4).clamp(Duration::from_millis(50), Duration::from_secs(1));
    loop {
        std::thread::sleep(period);
        let Some(Some(d)) = DOG.get() else { continue };
        let late = d.waits().overdue(Instant::now(), d.limit);
        if let Some((what, waited)) = late {
            eprintln!(
                "molla: a wait for the GPU ({what}) has lasted {} s: a kernel hangs, which is a \
                 bug in molla (please report it with the model and the command). A hung kernel \
                 holds the GPU until this process ends, so it ends now. MOLLA_GPU_WATCHDOG_S sets \
                 the limit (0: no limit).",
                waited.as_secs()
            );
            std::process::abort();
        }
    }
}

/// A wait for the GPU in progress, watched until it is dropped.
struct Wait(Option<u64>);

/// Starts watching a wait for `what` (named in the watchdog's message).
fn wait(what: &'static str) -> Wait {
    Wait(dog().map(|d| d.waits().begin(Instant::now(), what)))
}

/// `f`, a wait for the GPU, watched for as long as it runs.
pub(crate) fn watched<R>(what: &'static str, f: impl FnOnce() -> R) -> R {
    let _w = wait(what);
    f()
}

impl Drop for Wait {
    fn drop(&mut self) {
        if let (Some(id), Some(d)) = (self.0, dog()) {
            d.waits().end(id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_parse() {
        assert_eq!(parse_limit(None), Some(DEFAULT_LIMIT));
        assert_eq!(parse_limit(Some("0")), None);
        assert_eq!(parse_limit(Some(" 5 ")), Some(Duration::from_secs(5)));
        assert_eq!(parse_limit(Some("soon")), Some(DEFAULT_LIMIT));
    }

    #[test]
    fn the_longest_wait_past_the_limit_is_overdue() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut w = Waits::default();
        let a = w.begin(t0, "a");
        let b = w.begin(t0 + s(10), "b");
        let limit = s(30);
        assert_eq!(w.overdue(t0 + s(30), limit), None);
        assert_eq!(w.overdue(t0 + s(35), limit), Some(("a", s(35))));
        w.end(a);
        assert_eq!(w.overdue(t0 + s(35), limit), None);
        assert_eq!(w.overdue(t0 + s(41), limit), Some(("b", s(31))));
        w.end(b);
        w.end(b);
        assert!(w.open.is_empty());
        assert_eq!(w.overdue(t0 + s(1000), limit), None);
    }

    /// A wait that never ends aborts the process, with the message (the test runs itself
    /// again as that process).
    #[test]
    fn a_hung_wait_ends_the_process_with_a_message() {
        if std::env::var_os("MOLLA_WATCHDOG_CHILD").is_some() {
            let _w = wait("a test's endless wait");
            std::thread::sleep(Duration::from_secs(30));
            return;
        }
        let exe = std::env::current_exe().unwrap();
        let out = std::process::Command::new(exe)
            .args([
                "--exact",
                "watchdog::tests::a_hung_wait_ends_the_process_with_a_message",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("MOLLA_WATCHDOG_CHILD", "1")
            .env("MOLLA_GPU_WATCHDOG_S", "1")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "the child ended well: {err}");
        assert!(
            err.contains("a wait for the GPU (a test's endless wait) has lasted"),
            "stderr: {err}"
        );
    }
}
