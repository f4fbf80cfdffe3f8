//! Small synthetic models with seeded random weights, written as GGUF bytes. Tests and fuzz
//! seeds use them where a real model would be too big or too slow.

use crate::error::Result;
use gguf::{Array, GgmlType, GgufFile, GgufWriter, TensorSpec, Value};

/// The shape of a synthetic model.
#[derive(Clone, Debug)]
pub struct SynthSpec {
    /// "llama", "qwen2", "qwen3", "smollm3", "phi3" (q/k/v and gate/up fused), "granite"
    /// (embedding, attention, residual and logit scales of 2, 0.1, 0.5 and 3), "gemma2" or
    /// "gemma3" (whose layers attend over windows of
    /// [`SYNTH_WINDOW`] positions, the sixth globally): the tensors its spec
    /// ([`crate::arch::lookup`]) asks for.
    pub arch: &'static str,
    pub n_vocab: usize,
    pub n_embd: usize,
    pub n_layer: usize,
    pub n_ff: usize,
    pub n_head: usize,
    pub n_head_kv: usize,
    /// Type of the weight matrices (vectors are always F32).
    pub ty: GgmlType,
    pub tied: bool,
    pub seed: u64,
}

impl SynthSpec {
    /// A tiny llama: 2 layers, 64 wide, 4 heads over 2 KV heads, 256 tokens, Q8_0.
    pub fn tiny(arch: &'static str) -> SynthSpec {
        SynthSpec {
            arch,
            n_vocab: 256,
            n_embd: 64,
            n_layer: 2,
            n_ff: 96,
            n_head: 4,
            n_head_kv: 2,
            ty: GgmlType::Q8_0,
            tied: false,
            seed: 1,
        }
    }

    /// The head width [`build`] gives: n_embd / n_head (file metadata without `key_length`).
    pub fn head_dim(&self) -> usize {
        self.n_embd / self.n_head.max(1)
    }

    /// [`tiny`](Self::tiny) with Gemma 3 270M's attention: 640 wide, four heads over one KV
    /// head, to be built [`build_with_heads`] with heads of [`WIDE_HEAD_DIM`] (q 1024 wide).
    pub fn wide_heads(arch: &'static str) -> SynthSpec {
        SynthSpec {
            n_embd: 640,
            n_head: 4,
            n_head_kv: 1,
            n_ff: 256,
            ..SynthSpec::tiny(arch)
        }
    }

    /// SmolLM2-135M's shapes: 30 layers, 576 wide, 9 heads over 3 KV heads, ff 1536, 49152
    /// tokens, tied head.
    pub fn smollm2(ty: GgmlType) -> SynthSpec {
        SynthSpec {
            arch: "llama",
            n_vocab: 49152,
            n_embd: 576,
            n_layer: 30,
            n_ff: 1536,
            n_head: 9,
            n_head_kv: 3,
            ty,
            tied: true,
            seed: 5,
        }
    }

    /// Qwen2.5-0.5B's shapes: 24 layers, 896 wide, 14 heads over 2 KV heads, ff 4864, 151936
    /// tokens, tied head, biases on q/k/v.
    pub fn qwen2_0_5b(ty: GgmlType) -> SynthSpec {
        SynthSpec {
            arch: "qwen2",
            n_vocab: 151936,
            n_embd: 896,
            n_layer: 24,
            n_ff: 4864,
            n_head: 14,
            n_head_kv: 2,
            ty,
            tied: true,
            seed: 5,
        }
    }
}

/// The head width [`SynthSpec::wide_heads`] is built with.
pub const WIDE_HEAD_DIM: usize = 256;

/// The sliding window of a synthetic gemma3: short, so that tests of a few tokens cross it.
pub const SYNTH_WINDOW: u32 = 4;

/// xorshift64*, uniform in [-1, 1).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> f32 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let v = self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 40;
        (v as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
}

/// Writes the model described by `s` as a GGUF file in memory.
pub fn build(s: &SynthSpec) -> Result<Vec<u8>> {
    build_with_heads(s, s.head_dim())
}

/// [`build`] with heads `hd` wide (`attention.key_length` and `value_length`), so that q and
/// the attention output are `n_head * hd` wide rather than `n_embd`, as in Gemma 3 270M (640
/// wide, four heads of 256) and Qwen3 (1024 wide, sixteen heads of 128).
pub fn build_with_heads(s: &SynthSpec, hd: usize) -> Result<Vec<u8>> {
    let a = s.arch;
    let kv = s.n_head_kv * hd;
    let q = s.n_head * hd;
    let md: Vec<(String, Value)> = vec![
        ("general.architecture".into(), Value::String(a.into())),
        (
            "general.name".into(),
            Value::String(format!("synthetic {a}")),
        ),
        (format!("{a}.context_length"), Value::U32(256)),
        (format!("{a}.embedding_length"), Value::U32(s.n_embd as u32)),
        (format!("{a}.block_count"), Value::U32(s.n_layer as u32)),
        (
            format!("{a}.feed_forward_length"),
            Value::U32(s.n_ff as u32),
        ),
        (
            format!("{a}.attention.head_count"),
            Value::U32(s.n_head as u32),
        ),
        (
            format!("{a}.attention.head_count_kv"),
            Value::U32(s.n_head_kv as u32),
        ),
        (
            format!("{a}.attention.layer_norm_rms_epsilon"),
            Value::F32(1e-5),
        ),
        (format!("{a}.rope.freq_base"), Value::F32(10000.0)),
    ];
    let mut md = md;
    if q != s.n_embd {
        for key in ["key_length", "value_length"] {
            md.push((format!("{a}.attention.{key}"), Value::U32(hd as u32)));
        }
    }
    let spec = crate::arch::lookup(a).unwrap_or(crate::arch::ArchSpec::LLAMA);
    if spec.granite_scales {
        for (key, v) in [
            ("embedding_scale", 2.0),
            ("attention.scale", 0.1),
            ("residual_scale", 0.5),
            ("logit_scale", 3.0),
        ] {
            md.push((format!("{a}.{key}"), Value::F32(v)));
        }
    }
    if spec.swa.is_some() {
        md.push((
            format!("{a}.attention.sliding_window"),
            Value::U32(SYNTH_WINDOW),
        ));
    }
    // (name, cols, rows); rows == 0 marks a vector.
    let mut t: Vec<(String, usize, usize)> =
        vec![("token_embd.weight".into(), s.n_embd, s.n_vocab)];
    for i in 0..s.n_layer {
        let n = |x: &str| format!("blk.{i}.{x}");
        t.push((n("attn_norm.weight"), s.n_embd, 0));
        // phi3's files fuse q/k/v, and gate with up (gate first).
        let fused = a == "phi3";
        if fused {
            t.push((n("attn_qkv.weight"), s.n_embd, q + 2 * kv));
        } else {
            t.push((n("attn_q.weight"), s.n_embd, q));
            t.push((n("attn_k.weight"), s.n_embd, kv));
            t.push((n("attn_v.weight"), s.n_embd, kv));
        }
        if spec.qkv_bias {
            t.push((n("attn_q.bias"), q, 0));
            t.push((n("attn_k.bias"), kv, 0));
            t.push((n("attn_v.bias"), kv, 0));
        }
        if spec.qk_norm {
            t.push((n("attn_q_norm.weight"), hd, 0));
            t.push((n("attn_k_norm.weight"), hd, 0));
        }
        if spec.post_norms {
            t.push((n("post_attention_norm.weight"), s.n_embd, 0));
            t.push((n("post_ffw_norm.weight"), s.n_embd, 0));
        }
        t.push((n("attn_output.weight"), q, s.n_embd));
        t.push((n("ffn_norm.weight"), s.n_embd, 0));
        if fused {
            t.push((n("ffn_up.weight"), s.n_embd, 2 * s.n_ff));
        } else {
            t.push((n("ffn_gate.weight"), s.n_embd, s.n_ff));
            t.push((n("ffn_up.weight"), s.n_embd, s.n_ff));
        }
        t.push((n("ffn_down.weight"), s.n_ff, s.n_embd));
    }
    t.push(("output_norm.weight".into(), s.n_embd, 0));
    if !s.tied {
        t.push(("output.weight".into(), s.n_embd, s.n_vocab));
    }
    let specs: Vec<TensorSpec> = t
        .iter()
        .map(|(name, cols, rows)| TensorSpec {
            name: name.clone(),
            dims: if *rows == 0 {
                vec![*cols as u64]
            } else {
                vec![*cols as u64, *rows as u64]
            },
            ty: if *rows == 0 { GgmlType::F32 } else { s.ty },
        })
        .collect();
    let mut w = GgufWriter::new(Vec::new(), &md, &specs)?;
    let mut rng = Rng(s.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    for (spec, (name, cols, rows)) in specs.iter().zip(&t) {
        let n = cols * rows.max(&1);
        let vals: Vec<f32> = if *rows == 0 && name.ends_with("norm.weight") {
            (0..n).map(|_| 1.0 + 0.1 * rng.next()).collect()
        } else {
            let scale = 1.0 / (*cols as f32).sqrt();
            (0..n).map(|_| scale * rng.next()).collect()
        };
        let mut bytes = vec![0u8; spec.ty.bytes_for(n as u64).unwrap_or(0) as usize];
        quantize_rows(spec.ty, &vals, *cols, &mut bytes)?;
        w.write_tensor(&bytes)?;
    }
    Ok(w.finish()?)
}

/// `quant::quantize` of whole rows of `cols` values, split by rows over the machine's threads
/// (the same bytes as one call: each row is quantized on its own).
fn quantize_rows(ty: GgmlType, vals: &[f32], cols: usize, out: &mut [u8]) -> Result<()> {
    let rows = vals.len() / cols.max(1);
    let row_bytes = out.len() / rows.max(1);
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    if rows < 2 * threads || row_bytes * rows != out.len() || rows * cols != vals.len() {
        quant::quantize(ty, vals, out)?;
        return Ok(());
    }
    let per = rows.div_ceil(threads);
    std::thread::scope(|sc| {
        let jobs: Vec<_> = vals
            .chunks(per * cols)
            .zip(out.chunks_mut(per * row_bytes))
            .map(|(v, o)| sc.spawn(move || quant::quantize(ty, v, o)))
            .collect();
        jobs.into_iter()
            .try_for_each(|j| j.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
    })?;
    Ok(())
}

/// GPT-2's byte-to-unicode table: the printable character standing for each byte.
fn byte_char(b: u8) -> char {
    let printable = |c: u32| {
        (0x21..=0x7e).contains(&c) || (0xa1..=0xac).contains(&c) || (0xae..=0xff).contains(&c)
    };
    if printable(u32::from(b)) {
        return char::from(b);
    }
    let n = (0..u32::from(b)).filter(|&c| !printable(c)).count() as u32;
    char::from_u32(256 + n).unwrap_or('?')
}

/// Token ids of [`chat_model`]'s special tokens (after the 256 byte tokens).
pub const ENDOFTEXT: u32 = 256;
pub const IM_START: u32 = 257;
pub const IM_END: u32 = 258;

/// A tiny llama (random weights, 259 tokens: the 256 bytes and three ChatML specials) with
/// byte-level BPE tokenizer metadata and `template` as `tokenizer.chat_template` (none when
/// `None`, so the engine falls back to ChatML).
pub fn chat_model(template: Option<&str>) -> Result<Vec<u8>> {
    let spec = SynthSpec {
        n_vocab: 259,
        ..SynthSpec::tiny("llama")
    };
    let base = GgufFile::from_bytes(build(&spec)?)?;
    let mut tokens: Vec<String> = (0..=255u8).map(|b| byte_char(b).to_string()).collect();
    tokens.extend(["<|endoftext|>", "<|im_start|>", "<|im_end|>"].map(String::from));
    let mut types = vec![1i32; 256];
    types.extend([3, 3, 3]);
    let mut md: Vec<(String, Value)> = base.metadata().to_vec();
    let s = |v: &str| Value::String(v.into());
    md.extend([
        ("tokenizer.ggml.model".into(), s("gpt2")),
        ("tokenizer.ggml.pre".into(), s("gpt2")),
        (
            "tokenizer.ggml.tokens".into(),
            Value::Array(Array::String(tokens)),
        ),
        (
            "tokenizer.ggml.token_type".into(),
            Value::Array(Array::I32(types)),
        ),
        (
            "tokenizer.ggml.merges".into(),
            Value::Array(Array::String(Vec::new())),
        ),
        ("tokenizer.ggml.bos_token_id".into(), Value::U32(ENDOFTEXT)),
        ("tokenizer.ggml.eos_token_id".into(), Value::U32(IM_END)),
        ("tokenizer.ggml.add_bos_token".into(), Value::Bool(false)),
    ]);
    if let Some(t) = template {
        md.push(("tokenizer.chat_template".into(), s(t)));
    }
    let specs: Vec<TensorSpec> = base
        .tensors()
        .iter()
        .map(|t| TensorSpec {
            name: t.name.clone(),
            dims: t.dims.clone(),
            ty: t.ty,
        })
        .collect();
    let mut w = GgufWriter::new(Vec::new(), &md, &specs)?;
    for t in base.tensors() {
        w.write_tensor(base.tensor_data(t))?;
    }
    Ok(w.finish()?)
}
