//! A loaded decoder: hyper-parameters plus weights bound from a memory-mapped GGUF file.
//! The model holds no per-sequence state; KV caches live with the caller.

use crate::arch::{self, ArchSpec};
use crate::error::{ModelError, Result};
use crate::hparams::HParams;
use crate::weights::{Binder, Matrix};
use gguf::GgufFile;
use std::path::Path;

/// One transformer block.
#[derive(Clone, Debug)]
pub struct Layer {
    pub attn_norm: Vec<f32>,
    pub wq: Matrix,
    pub wk: Matrix,
    pub wv: Matrix,
    pub bq: Option<Vec<f32>>,
    pub bk: Option<Vec<f32>>,
    pub bv: Option<Vec<f32>>,
    /// Per-head RMSNorm weights of q and k (head_dim each), when the family has them.
    pub q_norm: Option<Vec<f32>>,
    pub k_norm: Option<Vec<f32>>,
    pub wo: Matrix,
    /// RMSNorm of the attention output before its residual add, when the family has it.
    pub post_attn_norm: Option<Vec<f32>>,
    pub ffn_norm: Vec<f32>,
    pub w_gate: Matrix,
    pub w_up: Matrix,
    pub w_down: Matrix,
    /// RMSNorm of the FFN output before its residual add, when the family has it.
    pub post_ffn_norm: Option<Vec<f32>>,
}

/// A decoder-only model ready to run.
pub struct Model {
    pub file: GgufFile,
    pub arch: ArchSpec,
    pub hp: HParams,
    pub tok_embd: Matrix,
    pub output_norm: Vec<f32>,
    /// The output head; the same tensor as `tok_embd` when the file ties them.
    pub output: Matrix,
    pub tied_output: bool,
    /// llama3 rope scaling: per-frequency divisors (`rope_freqs.weight`), n_rot/2 of them.
    pub rope_freqs: Option<Vec<f32>>,
    pub layers: Vec<Layer>,
}

impl Model {
    /// Opens and validates a GGUF model file.
    pub fn open(path: impl AsRef<Path>) -> Result<Model> {
        Model::from_file(GgufFile::open(path)?)
    }

    /// Binds an already parsed file.
    pub fn from_file(file: GgufFile) -> Result<Model> {
        let arch_name = file
            .get("general.architecture")
            .ok_or_else(|| ModelError::MissingKey("general.architecture".into()))?;
        let arch_name = arch_name.as_str().ok_or_else(|| ModelError::KeyType {
            key: "general.architecture".into(),
            found: arch_name.type_name(),
            expected: "string",
        })?;
        let arch = arch::lookup(arch_name)
            .ok_or_else(|| ModelError::UnsupportedArch(arch_name.to_string()))?;
        let mut hp = HParams::read(&file, &arch)?;
        let b = Binder { file: &file };
        let tok_embd = b.matrix_any_rows("token_embd.weight", hp.n_embd)?;
        hp.n_vocab = tok_embd.rows;
        let output_norm = b.vector("output_norm.weight", hp.n_embd)?;
        let (output, tied_output) = if b.has("output.weight") {
            (b.matrix("output.weight", hp.n_embd, hp.n_vocab)?, false)
        } else {
            (tok_embd.clone(), true)
        };
        if b.has("rope_factors_long.weight") || b.has("blk.0.rope_factors_long.weight") {
            return Err(ModelError::BadHParam(format!(
                "{}: LongRoPE (rope_factors_long/short, the 128k-context models) is not supported",
                arch.name
            )));
        }
        let rope_freqs = if arch.rope_freqs {
            b.opt_vector("rope_freqs.weight", hp.n_rot / 2)?
        } else {
            None
        };
        let mut layers = Vec::with_capacity(hp.n_layer);
        for i in 0..hp.n_layer {
            layers.push(bind_layer(&b, &arch, &hp, i)?);
        }
        Ok(Model {
            arch,
            hp,
            tok_embd,
            output_norm,
            output,
            tied_output,
            rope_freqs,
            layers,
            file,
        })
    }

    /// A one-line description: architecture, size, vocabulary.
    pub fn describe(&self) -> String {
        let hp = &self.hp;
        let window = match hp.swa_window {
            0 => String::new(),
            w => format!(
                ", sliding window {w} (one layer in {} global)",
                hp.swa_pattern
            ),
        };
        format!(
            "{} model: {} layers, embd {}, ff {}, heads {}/{} kv, head dim {}, vocab {}{}{window}",
            self.arch.name,
            hp.n_layer,
            hp.n_embd,
            hp.n_ff,
            hp.n_head,
            hp.n_head_kv,
            hp.head_dim,
            hp.n_vocab,
            if self.tied_output {
                ", tied output"
            } else {
                ""
            }
        )
    }
}

fn bind_layer(b: &Binder, arch: &ArchSpec, hp: &HParams, i: usize) -> Result<Layer> {
    let n = |t: &str| format!("blk.{i}.{t}");
    let bias = |t: &str, len: usize| -> Result<Option<Vec<f32>>> {
        if arch.qkv_bias {
            b.opt_vector(&n(t), len)
        } else {
            Ok(None)
        }
    };
    let norm = |on: bool, t: &str, len: usize| -> Result<Option<Vec<f32>>> {
        if on {
            b.vector(&n(t), len).map(Some)
        } else {
            Ok(None)
        }
    };
    // q/k/v as one fused tensor (phi3) when the file has no separate q.
    let (wq, wk, wv) = if b.has(&n("attn_qkv.weight")) && !b.has(&n("attn_q.weight")) {
        let (q, k, v) = (hp.q_dim(), hp.kv_dim(), hp.v_dim());
        let qkv = b.matrix(&n("attn_qkv.weight"), hp.n_embd, q + k + v)?;
        (
            qkv.rows_view(0, q),
            qkv.rows_view(q, k),
            qkv.rows_view(q + k, v),
        )
    } else {
        (
            b.matrix(&n("attn_q.weight"), hp.n_embd, hp.q_dim())?,
            b.matrix(&n("attn_k.weight"), hp.n_embd, hp.kv_dim())?,
            b.matrix(&n("attn_v.weight"), hp.n_embd, hp.v_dim())?,
        )
    };
    // gate and up as one `ffn_up` of twice the width, gate first (phi3), when there is no gate.
    let (w_gate, w_up) = if b.has(&n("ffn_gate.weight")) {
        (
            b.matrix(&n("ffn_gate.weight"), hp.n_embd, hp.n_ff)?,
            b.matrix(&n("ffn_up.weight"), hp.n_embd, hp.n_ff)?,
        )
    } else {
        let up = b.matrix(&n("ffn_up.weight"), hp.n_embd, 2 * hp.n_ff)?;
        (up.rows_view(0, hp.n_ff), up.rows_view(hp.n_ff, hp.n_ff))
    };
    Ok(Layer {
        attn_norm: b.vector(&n("attn_norm.weight"), hp.n_embd)?,
        wq,
        wk,
        wv,
        bq: bias("attn_q.bias", hp.q_dim())?,
        bk: bias("attn_k.bias", hp.kv_dim())?,
        bv: bias("attn_v.bias", hp.v_dim())?,
        q_norm: norm(arch.qk_norm, "attn_q_norm.weight", hp.head_dim)?,
        k_norm: norm(arch.qk_norm, "attn_k_norm.weight", hp.head_dim)?,
        wo: b.matrix(
            &n("attn_output.weight"),
            hp.n_head * hp.head_dim_v,
            hp.n_embd,
        )?,
        post_attn_norm: norm(arch.post_norms, "post_attention_norm.weight", hp.n_embd)?,
        ffn_norm: b.vector(&n("ffn_norm.weight"), hp.n_embd)?,
        w_gate,
        w_up,
        w_down: b.matrix(&n("ffn_down.weight"), hp.n_ff, hp.n_embd)?,
        post_ffn_norm: norm(arch.post_norms, "post_ffw_norm.weight", hp.n_embd)?,
    })
}
