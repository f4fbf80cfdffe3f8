//! How much prompt prefill an engine step may take on while other sequences are decoding.
//!
//! Each prefill call runs before the step's batched decode, so every decoding stream waits for
//! it: a burst of new prompts made the streams already running see one step many times as long
//! as the others (64 streams on the H200, 2026-12-01: the slowest stream's inter-token p95 was
//! 6x the fastest's). The engine now prefills, besides the oldest waiting chunk (which always
//! runs, so prompts make progress), only as many further chunks as fit in about one decode
//! step's time, predicted from what recent steps measured. A step then takes at most about
//! twice a plain decode step; with no stream decoding, prefill takes the whole token budget.

/// Weight of the newest measurement in the running means.
const ALPHA: f64 = 0.25;

/// Running means of what a decode step and a prompt token of prefill cost (seconds).
#[derive(Debug, Default, Clone)]
pub struct Pace {
    decode_s: Option<f64>,
    token_s: Option<f64>,
}

fn mean(old: Option<f64>, new: f64) -> Option<f64> {
    Some(match old {
        Some(m) => m + ALPHA * (new - m),
        None => new,
    })
}

impl Pace {
    /// A batched decode step took `secs`.
    pub fn decoded(&mut self, secs: f64) {
        self.decode_s = mean(self.decode_s, secs);
    }

    /// A prefill call of `tokens` prompt tokens took `secs`.
    pub fn prefilled(&mut self, tokens: usize, secs: f64) {
        if tokens > 0 {
            self.token_s = mean(self.token_s, secs / tokens as f64);
        }
    }

    /// Whether a further prefill call of `tokens` tokens fits in a step that has spent `spent`
    /// seconds on prefill so far, when `decoding` streams wait for the step. Without
    /// measurements yet, or with nothing decoding, it always fits.
    pub fn fits(&self, tokens: usize, spent: f64, decoding: bool) -> bool {
        match (decoding, self.decode_s, self.token_s) {
            (true, Some(d), Some(t)) => spent + t * tokens as f64 <= d,
            _ => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefill_fits_in_one_decode_step() {
        let mut p = Pace::default();
        assert!(p.fits(500, 10.0, true), "no measurements: no limit");
        p.decoded(0.008);
        p.prefilled(30, 0.0015); // 50 us a token
        assert!(p.fits(30, 0.0, true));
        assert!(p.fits(30, 0.0060, true));
        assert!(
            !p.fits(30, 0.0070, true),
            "8 ms of decode: 7 + 1.5 ms does not fit"
        );
        assert!(
            !p.fits(500, 0.0, true),
            "a 25 ms chunk does not fit an 8 ms step"
        );
        assert!(p.fits(500, 1.0, false), "nothing decoding: no limit");
    }

    #[test]
    fn means_follow_the_measurements() {
        let mut p = Pace::default();
        p.decoded(0.010);
        p.prefilled(10, 0.010);
        for _ in 0..40 {
            p.decoded(0.002);
            p.prefilled(10, 0.001);
        }
        // 0.1 ms a token now, 2 ms a step: 20 tokens fit, 21 do not.
        assert!(p.fits(19, 0.0, true));
        assert!(!p.fits(21, 0.0, true));
        p.prefilled(0, 5.0); // an empty call changes nothing
        assert!(p.fits(19, 0.0, true));
    }
}
