//! `GET /metrics` in Prometheus' text format: requests by route and status, tokens in and out,
//! time-to-first-token and inter-token latency histograms, queue depth and busy slots. Plain
//! atomics (a mutex for the request table), rendered on demand.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::time::Duration;

/// Upper bounds (seconds) of the latency buckets.
const TTFT_BOUNDS: [f64; 12] = [
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];
const ITL_BOUNDS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56,
];

struct Histogram {
    bounds: &'static [f64],
    /// Per bucket (not cumulative), plus one for +Inf.
    counts: Vec<AtomicU64>,
    /// Sum in microseconds.
    sum_us: AtomicU64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Histogram {
        Histogram {
            bounds,
            counts: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum_us: AtomicU64::new(0),
        }
    }

    fn observe(&self, d: Duration) {
        let s = d.as_secs_f64();
        let i = self.bounds.partition_point(|&b| b < s);
        self.counts[i].fetch_add(1, Relaxed);
        self.sum_us.fetch_add(d.as_micros() as u64, Relaxed);
    }

    fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        let mut cum = 0;
        for (i, c) in self.counts.iter().enumerate() {
            cum += c.load(Relaxed);
            let le = self.bounds.get(i).map_or("+Inf".into(), |b| b.to_string());
            let _ = writeln!(out, "{name}_bucket{{le=\"{le}\"}} {cum}");
        }
        let sum = self.sum_us.load(Relaxed) as f64 / 1e6;
        let _ = writeln!(out, "{name}_sum {sum}\n{name}_count {cum}");
    }
}

/// The server's counters.
pub struct Metrics {
    requests: Mutex<BTreeMap<(&'static str, u16), u64>>,
    prompt_tokens: AtomicU64,
    cached_prompt_tokens: AtomicU64,
    generated_tokens: AtomicU64,
    ttft: Histogram,
    itl: Histogram,
    queue_depth: AtomicI64,
    active: AtomicUsize,
    slots: usize,
    /// KV blocks held by caches, and the pool's size (CPU; 0 and 0 elsewhere).
    kv_used: AtomicUsize,
    kv_total: AtomicUsize,
}

impl Metrics {
    pub fn new(slots: usize) -> Metrics {
        Metrics {
            requests: Mutex::new(BTreeMap::new()),
            prompt_tokens: AtomicU64::new(0),
            cached_prompt_tokens: AtomicU64::new(0),
            generated_tokens: AtomicU64::new(0),
            ttft: Histogram::new(&TTFT_BOUNDS),
            itl: Histogram::new(&ITL_BOUNDS),
            queue_depth: AtomicI64::new(0),
            active: AtomicUsize::new(0),
            slots,
            kv_used: AtomicUsize::new(0),
            kv_total: AtomicUsize::new(0),
        }
    }

    /// Counts a finished request (its response head) on `route` with `status`.
    pub fn request(&self, route: &'static str, status: u16) {
        let mut m = self.requests.lock().unwrap_or_else(|e| e.into_inner());
        *m.entry((route, status)).or_default() += 1;
    }

    pub fn prompt_tokens(&self, n: usize) {
        self.prompt_tokens.fetch_add(n as u64, Relaxed);
    }

    pub fn cached_prompt_tokens(&self, n: usize) {
        self.cached_prompt_tokens.fetch_add(n as u64, Relaxed);
    }

    pub fn generated_tokens(&self, n: usize) {
        self.generated_tokens.fetch_add(n as u64, Relaxed);
    }

    pub fn ttft(&self, d: Duration) {
        self.ttft.observe(d);
    }

    pub fn itl(&self, d: Duration) {
        self.itl.observe(d);
    }

    /// Requests waiting for a slot: +1 on submit, -1 when one leaves the queue (admitted, run
    /// if an embedding, or dropped). Returns the depth after adding `delta`.
    pub fn queued(&self, delta: i64) -> i64 {
        self.queue_depth.fetch_add(delta, Relaxed) + delta
    }

    /// Sequences generating now.
    pub fn set_active(&self, n: usize) {
        self.active.store(n, Relaxed);
    }

    /// KV blocks held by caches now, of `total`.
    pub fn set_kv_blocks(&self, used: usize, total: usize) {
        self.kv_used.store(used, Relaxed);
        self.kv_total.store(total, Relaxed);
    }

    /// The text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        out.push_str(
            "# HELP molla_requests_total HTTP requests by route and status.\n\
             # TYPE molla_requests_total counter\n",
        );
        for ((route, status), n) in self
            .requests
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            let _ = writeln!(
                out,
                "molla_requests_total{{route=\"{route}\",status=\"{status}\"}} {n}"
            );
        }
        let counter = |out: &mut String, name: &str, help: &str, v: u64| {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {v}"
            );
        };
        let gauge = |out: &mut String, name: &str, help: &str, v: i64| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {v}");
        };
        counter(
            &mut out,
            "molla_prompt_tokens_total",
            "Prompt tokens prefilled.",
            self.prompt_tokens.load(Relaxed),
        );
        counter(
            &mut out,
            "molla_prompt_tokens_cached_total",
            "Prompt tokens kept from a slot's cache instead of prefilled (prefix reuse).",
            self.cached_prompt_tokens.load(Relaxed),
        );
        counter(
            &mut out,
            "molla_generated_tokens_total",
            "Tokens generated.",
            self.generated_tokens.load(Relaxed),
        );
        self.ttft.render(
            &mut out,
            "molla_time_to_first_token_seconds",
            "From queueing a request to its first generated token.",
        );
        self.itl.render(
            &mut out,
            "molla_inter_token_latency_seconds",
            "Between consecutive generated tokens of one sequence.",
        );
        gauge(
            &mut out,
            "molla_queue_depth",
            "Requests waiting for a slot.",
            self.queue_depth.load(Relaxed).max(0),
        );
        gauge(
            &mut out,
            "molla_active_sequences",
            "Sequences generating now.",
            self.active.load(Relaxed) as i64,
        );
        gauge(
            &mut out,
            "molla_slots",
            "Sequences that can generate at once (--parallel).",
            self.slots as i64,
        );
        gauge(
            &mut out,
            "molla_kv_blocks_used",
            "KV cache blocks (16 positions of every layer) held by sequences and reusable prefixes.",
            self.kv_used.load(Relaxed) as i64,
        );
        gauge(
            &mut out,
            "molla_kv_blocks_total",
            "KV cache blocks in the pool (--kv-blocks; 0 where caches are not paged).",
            self.kv_total.load(Relaxed) as i64,
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counts_and_cumulative_buckets() {
        let m = Metrics::new(4);
        m.request("/v1/models", 200);
        m.request("/v1/models", 200);
        m.ttft(Duration::from_millis(30));
        m.ttft(Duration::from_secs(100));
        let t = m.render();
        assert!(t.contains("molla_requests_total{route=\"/v1/models\",status=\"200\"} 2"));
        assert!(t.contains("molla_time_to_first_token_seconds_bucket{le=\"0.05\"} 1"));
        assert!(t.contains("molla_time_to_first_token_seconds_bucket{le=\"+Inf\"} 2"));
        assert!(t.contains("molla_time_to_first_token_seconds_count 2"));
        assert!(t.contains("molla_slots 4"));
        m.set_kv_blocks(3, 40);
        let t = m.render();
        assert!(t.contains("molla_kv_blocks_used 3"));
        assert!(t.contains("molla_kv_blocks_total 40"));
    }
}
