//! Hyper-parameters read from GGUF metadata (`{arch}.*` keys).

use crate::arch::{ArchSpec, FfnAct};
use crate::error::{ModelError, Result};
use gguf::{GgufFile, Value};

/// How rotary embeddings pair the dimensions of a head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeStyle {
    /// Adjacent pairs (x[2i], x[2i+1]), as llama.cpp's llama (the converter permutes Q/K to fit).
    Normal,
    /// Halves (x[i], x[i + n_rot/2]), as GPT-NeoX and qwen2.
    Neox,
}

/// Everything the forward pass needs to know about the shape of a decoder.
#[derive(Clone, Debug)]
pub struct HParams {
    pub n_vocab: usize,
    pub n_embd: usize,
    pub n_layer: usize,
    pub n_ff: usize,
    pub n_head: usize,
    pub n_head_kv: usize,
    /// Width of one query/key head.
    pub head_dim: usize,
    /// Width of one value head.
    pub head_dim_v: usize,
    /// Leading dimensions of each head that are rotated.
    pub n_rot: usize,
    pub rms_eps: f32,
    pub rope_base: f64,
    /// Positions are multiplied by this before rotation (1/factor for linear scaling).
    pub rope_freq_scale: f64,
    pub rope_style: RopeStyle,
    pub n_ctx_train: usize,
    /// Attention scores are q.k times this: 1/sqrt(head_dim), but 1/sqrt(n_embd / n_head) for
    /// Gemma 2 and 3 27B and the file's `attention.scale` for granite.
    pub attn_scale: f32,
    /// Sliding-window attention: layers `l` with `(l + 1) % swa_pattern != 0` attend to the
    /// last `swa_window` positions only (the token's own included), with rope base
    /// `rope_base_swa` scaled by `rope_freq_scale_swa`; 0 when every layer attends globally.
    pub swa_window: usize,
    pub swa_pattern: usize,
    pub rope_base_swa: f64,
    pub rope_freq_scale_swa: f64,
    /// Attention scores become `c * tanh(s / c)` (gemma2), when set.
    pub attn_softcap: Option<f32>,
    /// Logits become `c * tanh(z / c)` (gemma2), when set.
    pub final_softcap: Option<f32>,
    /// Each block's attention and FFN outputs are multiplied by this before their residual
    /// adds (granite), when set.
    pub residual_scale: Option<f32>,
    /// Logits are multiplied by this (granite: 1 / `logit_scale`), when set.
    pub logit_mul: Option<f32>,
    pub ffn_act: FfnAct,
    /// Every `nope_every`-th layer applies no rope (0: none); see [`HParams::ropes`].
    pub nope_every: usize,
    /// Token embeddings are multiplied by this (sqrt(n_embd) for gemma), when set.
    pub embd_scale: Option<f32>,
}

impl HParams {
    pub fn q_dim(&self) -> usize {
        self.n_head * self.head_dim
    }
    pub fn kv_dim(&self) -> usize {
        self.n_head_kv * self.head_dim
    }
    pub fn v_dim(&self) -> usize {
        self.n_head_kv * self.head_dim_v
    }

    /// Whether layer `l` rotates q and k (SmolLM3's every fourth layer does not).
    pub fn ropes(&self, l: usize) -> bool {
        self.nope_every == 0 || !(l + 1).is_multiple_of(self.nope_every)
    }

    /// The window of layer `l`'s attention in positions, or None when it attends globally.
    pub fn window(&self, l: usize) -> Option<usize> {
        let global = self.swa_pattern == 0 || (l + 1).is_multiple_of(self.swa_pattern);
        (self.swa_window > 0 && !global).then_some(self.swa_window)
    }

    /// Reads `{arch}.*` keys; `n_vocab` is filled in from the embedding tensor by the loader.
    pub fn read(file: &GgufFile, spec: &ArchSpec) -> Result<Self> {
        let a = spec.name;
        let n_embd = req_usize(file, &format!("{a}.embedding_length"))?;
        let n_head = req_usize(file, &format!("{a}.attention.head_count"))?;
        let n_head_kv = opt_usize(file, &format!("{a}.attention.head_count_kv"))?.unwrap_or(n_head);
        if n_head == 0 || n_embd == 0 {
            return Err(ModelError::BadHParam(format!(
                "{a}.embedding_length ({n_embd}) and {a}.attention.head_count ({n_head}) must be positive"
            )));
        }
        let head_dim =
            opt_usize(file, &format!("{a}.attention.key_length"))?.unwrap_or(n_embd / n_head);
        let head_dim_v =
            opt_usize(file, &format!("{a}.attention.value_length"))?.unwrap_or(head_dim);
        let n_rot = opt_usize(file, &format!("{a}.rope.dimension_count"))?.unwrap_or(head_dim);
        let scaling = opt_str(file, &format!("{a}.rope.scaling.type"))?;
        let factor = opt_f64(file, &format!("{a}.rope.scaling.factor"))?;
        let rope_freq_scale = match (scaling.as_deref(), factor) {
            (None | Some("none"), _) => 1.0,
            (Some("linear"), Some(f)) if f > 0.0 => 1.0 / f,
            (Some("linear"), None) => 1.0,
            (Some(other), f) => {
                return Err(ModelError::BadHParam(format!(
                    "{a}.rope.scaling.type '{other}' (factor {f:?}) is not supported (supported: none, linear, llama3 via rope_freqs)"
                )));
            }
        };
        let n_layer = req_usize(file, &format!("{a}.block_count"))?;
        let rope_base = opt_f64(file, &format!("{a}.rope.freq_base"))?.unwrap_or(10000.0);
        let (swa_window, swa_pattern, rope_base_swa, rope_freq_scale_swa) = match spec.swa {
            Some(swa) => {
                let key = format!("{a}.attention.sliding_window");
                let window = match swa.default_window {
                    Some(w) => opt_usize(file, &key)?.unwrap_or(w),
                    None => req_usize(file, &key)?,
                };
                let (base, scale) = swa
                    .rope_base
                    .map_or((rope_base, rope_freq_scale), |b| (b, 1.0));
                (window, swa.pattern, base, scale)
            }
            None => (0, 0, 0.0, 1.0),
        };
        let cap = |key: &str, default: f32| -> Result<Option<f32>> {
            let c = opt_f64(file, &format!("{a}.{key}"))?.map_or(default, |c| c as f32);
            if !(c.is_finite() && c > 0.0) {
                return Err(ModelError::BadHParam(format!(
                    "{a}.{key} {c} is not a positive number"
                )));
            }
            Ok(Some(c))
        };
        let (attn_softcap, final_softcap) = match spec.softcaps {
            Some(s) => (
                cap("attn_logit_softcapping", s.attn)?,
                cap("final_logit_softcapping", s.final_logits)?,
            ),
            None => (None, None),
        };
        // Gemma 2 27B (46 layers) and Gemma 3 27B (62) scale queries by 1/sqrt(n_embd /
        // n_head), as their reference implementation and llama.cpp do; every other model by
        // 1/sqrt(head_dim).
        let query_width = match (spec.name, n_layer) {
            ("gemma2", 46) | ("gemma3", 62) => n_embd / n_head,
            _ => head_dim,
        };
        // Granite's scalars: a key that is absent or 0 leaves its step out, as in llama.cpp.
        let scalar = |key: &str| -> Result<Option<f32>> {
            if !spec.granite_scales {
                return Ok(None);
            }
            match opt_f64(file, &format!("{a}.{key}"))?.map(|v| v as f32) {
                None | Some(0.0) => Ok(None),
                Some(v) if v.is_finite() && (1.0 / v).is_finite() => Ok(Some(v)),
                Some(v) => Err(ModelError::BadHParam(format!(
                    "{a}.{key} {v} is not a finite number with a finite inverse"
                ))),
            }
        };
        let granite_attn = scalar("attention.scale")?;
        let granite_embd = scalar("embedding_scale")?;
        let residual_scale = scalar("residual_scale")?;
        let logit_mul = scalar("logit_scale")?.map(|s| 1.0 / s);
        let hp = HParams {
            n_vocab: 0,
            n_embd,
            n_layer,
            n_ff: req_usize(file, &format!("{a}.feed_forward_length"))?,
            n_head,
            n_head_kv,
            head_dim,
            head_dim_v,
            n_rot,
            rms_eps: req_f64(file, &format!("{a}.attention.layer_norm_rms_epsilon"))? as f32,
            rope_base,
            rope_freq_scale,
            rope_style: spec.rope_style,
            n_ctx_train: opt_usize(file, &format!("{a}.context_length"))?.unwrap_or(2048),
            attn_scale: granite_attn.unwrap_or(1.0 / (query_width.max(1) as f32).sqrt()),
            swa_window,
            swa_pattern,
            rope_base_swa,
            rope_freq_scale_swa,
            attn_softcap,
            final_softcap,
            residual_scale,
            logit_mul,
            ffn_act: spec.ffn_act,
            nope_every: spec.nope_every,
            embd_scale: granite_embd.or(spec.embd_scale.then(|| (n_embd as f32).sqrt())),
        };
        hp.check()?;
        Ok(hp)
    }

    fn check(&self) -> Result<()> {
        let bad = |m: String| Err(ModelError::BadHParam(m));
        if self.n_layer == 0 || self.n_ff == 0 || self.n_head_kv == 0 || self.head_dim == 0 {
            return bad(format!(
                "block_count {}, feed_forward_length {}, head_count_kv {} and key_length {} must be positive",
                self.n_layer, self.n_ff, self.n_head_kv, self.head_dim
            ));
        }
        if !self.n_head.is_multiple_of(self.n_head_kv) {
            return bad(format!(
                "head_count {} is not a multiple of head_count_kv {}",
                self.n_head, self.n_head_kv
            ));
        }
        if self.n_rot > self.head_dim || !self.n_rot.is_multiple_of(2) {
            return bad(format!(
                "rope.dimension_count {} must be even and at most the head width {}",
                self.n_rot, self.head_dim
            ));
        }
        // Caps that keep a lying file from asking for absurd buffers before tensor shapes are checked.
        let limit = 1 << 20;
        for (name, v) in [
            ("embedding_length", self.n_embd),
            ("feed_forward_length", self.n_ff),
            ("head_count", self.n_head),
            ("key_length", self.head_dim),
            ("value_length", self.head_dim_v),
        ] {
            if v > limit {
                return bad(format!("{name} {v} is larger than {limit}"));
            }
        }
        if self.n_layer > 4096 {
            return bad(format!("block_count {} is larger than 4096", self.n_layer));
        }
        if !(self.rms_eps.is_finite() && self.rms_eps >= 0.0) {
            return bad(format!(
                "layer_norm_rms_epsilon {} is not a finite non-negative number",
                self.rms_eps
            ));
        }
        if !(self.rope_base.is_finite() && self.rope_base > 0.0) {
            return bad(format!(
                "rope.freq_base {} is not a positive number",
                self.rope_base
            ));
        }
        Ok(())
    }
}

fn typed<'a>(file: &'a GgufFile, key: &str) -> Option<&'a Value> {
    file.get(key)
}

fn key_type(key: &str, v: &Value, expected: &'static str) -> ModelError {
    ModelError::KeyType {
        key: key.to_string(),
        found: v.type_name(),
        expected,
    }
}

fn opt_usize(file: &GgufFile, key: &str) -> Result<Option<usize>> {
    match typed(file, key) {
        None => Ok(None),
        Some(v) => v
            .as_u64()
            .and_then(|x| usize::try_from(x).ok())
            .map(Some)
            .ok_or_else(|| key_type(key, v, "non-negative integer")),
    }
}

fn req_usize(file: &GgufFile, key: &str) -> Result<usize> {
    opt_usize(file, key)?.ok_or_else(|| ModelError::MissingKey(key.to_string()))
}

fn opt_f64(file: &GgufFile, key: &str) -> Result<Option<f64>> {
    match typed(file, key) {
        None => Ok(None),
        Some(v) => v
            .as_f64()
            .map(Some)
            .ok_or_else(|| key_type(key, v, "number")),
    }
}

fn req_f64(file: &GgufFile, key: &str) -> Result<f64> {
    opt_f64(file, key)?.ok_or_else(|| ModelError::MissingKey(key.to_string()))
}

fn opt_str(file: &GgufFile, key: &str) -> Result<Option<String>> {
    match typed(file, key) {
        None => Ok(None),
        Some(v) => v
            .as_str()
            .map(|s| Some(s.to_string()))
            .ok_or_else(|| key_type(key, v, "string")),
    }
}

#[cfg(test)]
mod tests {
    use crate::synth::{SynthSpec, build};

    fn hp(arch: &'static str, n_layer: usize) -> super::HParams {
        let bytes = build(&SynthSpec {
            n_layer,
            ..SynthSpec::tiny(arch)
        })
        .unwrap();
        crate::Model::from_file(gguf::GgufFile::from_bytes(bytes).unwrap())
            .unwrap()
            .hp
    }

    /// Heads wider than n_embd / n_head (`attention.key_length`): Gemma 3 270M's shape loads with
    /// q 1024 wide over a 640-wide residual stream, every family's tensors checked by the loader.
    #[test]
    fn heads_may_be_wider_than_the_embedding_split() {
        for arch in ["gemma3", "qwen3", "llama", "phi3", "qwen2"] {
            let spec = SynthSpec::wide_heads(arch);
            let bytes = crate::synth::build_with_heads(&spec, crate::synth::WIDE_HEAD_DIM).unwrap();
            let m = crate::Model::from_file(gguf::GgufFile::from_bytes(bytes).unwrap()).unwrap();
            assert_eq!(
                (m.hp.head_dim, m.hp.q_dim(), m.hp.n_embd),
                (256, 1024, 640),
                "{arch}"
            );
        }
    }

    /// Which layers rope and which attend over a window, per family.
    #[test]
    fn layer_kinds_follow_the_family() {
        let s = hp("smollm3", 8);
        let ropes: Vec<bool> = (0..8).map(|l| s.ropes(l)).collect();
        assert_eq!(ropes, [true, true, true, false, true, true, true, false]);
        let g = hp("gemma3", 12);
        let w = crate::synth::SYNTH_WINDOW as usize;
        let windows: Vec<Option<usize>> = (0..12).map(|l| g.window(l)).collect();
        let expect: Vec<Option<usize>> = (0..12).map(|l| ((l + 1) % 6 != 0).then_some(w)).collect();
        assert_eq!(windows, expect);
        assert!((0..12).all(|l| g.ropes(l)));
        let l = hp("llama", 8);
        assert!((0..8).all(|i| l.ropes(i) && l.window(i).is_none()));
        assert_eq!(g.embd_scale, Some(64f32.sqrt()));
        assert_eq!(l.embd_scale, None);
        // gemma2: every other layer over the window, the global rope, default caps.
        let g2 = hp("gemma2", 4);
        let windows: Vec<Option<usize>> = (0..4).map(|l| g2.window(l)).collect();
        assert_eq!(windows, [Some(w), None, Some(w), None]);
        assert_eq!(
            (g2.rope_base_swa, g2.rope_freq_scale_swa),
            (g2.rope_base, g2.rope_freq_scale)
        );
        assert_eq!(
            (g2.attn_softcap, g2.final_softcap),
            (Some(50.0), Some(30.0))
        );
        assert_eq!((g.attn_softcap, l.final_softcap), (None, None));
        let gr = hp("granite", 2);
        assert_eq!(
            (
                gr.embd_scale,
                gr.attn_scale,
                gr.residual_scale,
                gr.logit_mul
            ),
            (Some(2.0), 0.1, Some(0.5), Some(1.0 / 3.0))
        );
        assert_eq!((l.residual_scale, l.logit_mul), (None, None));
    }

    #[test]
    fn an_unknown_family_is_named_with_the_supported_ones() {
        let bytes = build(&SynthSpec::tiny("mamba")).unwrap();
        let file = gguf::GgufFile::from_bytes(bytes).unwrap();
        let e = crate::Model::from_file(file).err().unwrap().to_string();
        assert!(
            e.contains("'mamba'") && e.contains("qwen3") && e.contains("gemma3"),
            "{e}"
        );
    }

    /// Bad values of the new families' keys are errors naming the key, not panics or NaNs.
    #[test]
    fn bad_family_keys_are_named_errors() {
        use gguf::{GgufWriter, TensorSpec, Value};
        let with = |arch: &'static str, key: &str, v: Value| {
            let base = gguf::GgufFile::from_bytes(build(&SynthSpec::tiny(arch)).unwrap()).unwrap();
            let mut md = base.metadata().to_vec();
            md.retain(|(k, _)| k != key);
            md.push((key.to_string(), v));
            let specs: Vec<TensorSpec> = base
                .tensors()
                .iter()
                .map(|t| TensorSpec::new(t.name.clone(), t.dims.clone(), t.ty))
                .collect();
            let mut w = GgufWriter::new(Vec::new(), &md, &specs).unwrap();
            for t in base.tensors() {
                w.write_tensor(base.tensor_data(t)).unwrap();
            }
            let file = gguf::GgufFile::from_bytes(w.finish().unwrap()).unwrap();
            crate::Model::from_file(file).err().map(|e| e.to_string())
        };
        for (arch, key, v) in [
            ("gemma2", "gemma2.attn_logit_softcapping", Value::F32(0.0)),
            (
                "gemma2",
                "gemma2.final_logit_softcapping",
                Value::F32(f32::NAN),
            ),
            ("granite", "granite.logit_scale", Value::F32(1e-45)),
            (
                "granite",
                "granite.residual_scale",
                Value::F32(f32::INFINITY),
            ),
            (
                "gemma3",
                "gemma3.attention.sliding_window",
                Value::String("x".into()),
            ),
        ] {
            let e = with(arch, key, v).expect("refused");
            assert!(e.contains(key), "{e}");
        }
        // A granite scale of 0 leaves its step out, as llama.cpp does.
        assert_eq!(
            with("granite", "granite.residual_scale", Value::F32(0.0)),
            None
        );
    }
}
