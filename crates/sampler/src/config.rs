//! Sampling parameters, with llama.cpp's defaults, and their validation.

/// Why a configuration or a call was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SamplerError {
    /// A parameter is out of range (the message names it and says why).
    #[error("invalid sampler config: {0}")]
    InvalidConfig(String),
    /// `logits.len()` is not the vocabulary size the sampler was built for.
    #[error("logits have {got} entries, expected n_vocab = {expected}")]
    LogitsLength { expected: usize, got: usize },
    /// A logit is NaN or +infinity (-infinity is allowed: it masks a token).
    #[error("logit {index} is {value}: logits must be finite or -inf")]
    BadLogit { index: usize, value: f32 },
    /// Every token is masked (-inf) after biases and penalties.
    #[error("no token can be sampled: every logit is -inf")]
    NoCandidates,
}

/// Sampling parameters. Field meanings and defaults follow llama.cpp's
/// `common_params_sampling`; see [`crate::Sampler`] for the order they apply in.
#[derive(Debug, Clone, PartialEq)]
pub struct SamplerConfig {
    /// Divides the logits before the final draw; `<= 0` means greedy (argmax). 0.8.
    pub temperature: f32,
    /// Keep the `top_k` most likely tokens; 0 disables. 40.
    pub top_k: i32,
    /// Keep the smallest set of most likely tokens whose probability reaches `top_p`;
    /// 1 disables. 0.95.
    pub top_p: f32,
    /// Drop tokens whose probability is below `min_p` times the top token's; 0 disables. 0.05.
    pub min_p: f32,
    /// Locally typical sampling mass; 1 disables. 1.0.
    pub typical_p: f32,
    /// Divides positive logits and multiplies negative ones of tokens seen in the last
    /// `penalty_last_n` tokens; 1 disables. 1.0.
    pub repeat_penalty: f32,
    /// Subtracts `count * frequency_penalty` from a seen token's logit. 0.
    pub frequency_penalty: f32,
    /// Subtracts `presence_penalty` from a seen token's logit. 0.
    pub presence_penalty: f32,
    /// How many of the latest history tokens the penalties look at; 0 disables them,
    /// -1 means the whole history. 64.
    pub penalty_last_n: i32,
    /// Added to the logits of the given token ids before anything else (`-inf` bans a
    /// token). Empty.
    pub logit_bias: Vec<(u32, f32)>,
    /// Seed of the random draw; `None` seeds from the OS clock and process entropy.
    pub seed: Option<u64>,
}

impl Default for SamplerConfig {
    fn default() -> Self {
        SamplerConfig {
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            typical_p: 1.0,
            repeat_penalty: 1.0,
            frequency_penalty: 0.0,
            presence_penalty: 0.0,
            penalty_last_n: 64,
            logit_bias: Vec::new(),
            seed: None,
        }
    }
}

impl SamplerConfig {
    /// Greedy decoding: always the most likely token (ties go to the lowest id), after
    /// logit biases and penalties (none by default).
    pub fn greedy() -> Self {
        SamplerConfig {
            temperature: 0.0,
            ..SamplerConfig::default()
        }
    }

    /// Checks every parameter against `n_vocab`; the error names the first bad one.
    pub fn validate(&self, n_vocab: usize) -> Result<(), SamplerError> {
        let bad = |msg: String| Err(SamplerError::InvalidConfig(msg));
        if n_vocab == 0 || n_vocab > u32::MAX as usize {
            return bad(format!("n_vocab = {n_vocab} (must be 1..=2^32-1)"));
        }
        if self.temperature.is_nan() || self.temperature == f32::INFINITY {
            return bad(format!(
                "temperature = {} (must be a number, < inf)",
                self.temperature
            ));
        }
        if self.top_k < 0 {
            return bad(format!("top_k = {} (must be >= 0; 0 disables)", self.top_k));
        }
        for (name, v) in [
            ("top_p", self.top_p),
            ("min_p", self.min_p),
            ("typical_p", self.typical_p),
        ] {
            if !(0.0..=1.0).contains(&v) {
                return bad(format!("{name} = {v} (must be in [0, 1])"));
            }
        }
        if !(self.repeat_penalty.is_finite() && self.repeat_penalty > 0.0) {
            return bad(format!(
                "repeat_penalty = {} (must be finite and > 0; 1 disables)",
                self.repeat_penalty
            ));
        }
        for (name, v) in [
            ("frequency_penalty", self.frequency_penalty),
            ("presence_penalty", self.presence_penalty),
        ] {
            if !v.is_finite() {
                return bad(format!("{name} = {v} (must be finite)"));
            }
        }
        if self.penalty_last_n < -1 {
            return bad(format!(
                "penalty_last_n = {} (must be >= -1)",
                self.penalty_last_n
            ));
        }
        for &(id, bias) in &self.logit_bias {
            if id as usize >= n_vocab {
                return bad(format!(
                    "logit_bias token {id} is outside the vocabulary (n_vocab = {n_vocab})"
                ));
            }
            if bias.is_nan() || bias == f32::INFINITY {
                return bad(format!(
                    "logit_bias for token {id} is {bias} (must be finite or -inf)"
                ));
            }
        }
        Ok(())
    }
}
