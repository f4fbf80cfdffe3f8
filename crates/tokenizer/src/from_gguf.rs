//! Reading a [`Vocab`] from a GGUF file's `tokenizer.ggml.*` metadata.

use crate::error::{Result, TokError};
use crate::vocab::{SpecialIds, Vocab, VocabKind};
use gguf::{GgufFile, Value};

const MODEL: &str = "tokenizer.ggml.model";
const PRE: &str = "tokenizer.ggml.pre";
const TOKENS: &str = "tokenizer.ggml.tokens";
const SCORES: &str = "tokenizer.ggml.scores";
const TOKEN_TYPE: &str = "tokenizer.ggml.token_type";
const MERGES: &str = "tokenizer.ggml.merges";
const ADD_BOS: &str = "tokenizer.ggml.add_bos_token";
const ADD_EOS: &str = "tokenizer.ggml.add_eos_token";
const ADD_SPACE_PREFIX: &str = "tokenizer.ggml.add_space_prefix";
/// The model's token embedding, when the file holds a model.
const EMBEDDING: &str = "token_embd.weight";

impl Vocab {
    /// Reads the vocabulary from GGUF metadata. Fails on a missing or mistyped required key
    /// (`tokenizer.ggml.model`, `.tokens`, and `.merges` for BPE), an unsupported model, or a
    /// token count that differs from the rows of the file's `token_embd.weight`.
    pub fn from_gguf(file: &GgufFile) -> Result<Vocab> {
        let get = |key: &'static str| file.get(key);

        let model = get(MODEL).ok_or(TokError::MissingKey { key: MODEL })?;
        let model = model.as_str().ok_or(wrong(MODEL, "string"))?;
        let kind = VocabKind::from_model_name(model)
            .ok_or_else(|| TokError::UnsupportedModel(model.to_string()))?;

        let pre = match get(PRE) {
            Some(v) => v.as_str().ok_or(wrong(PRE, "string"))?.to_string(),
            None => String::new(),
        };

        let tokens = strings(get(TOKENS), TOKENS)?.ok_or(TokError::MissingKey { key: TOKENS })?;
        // A model's embedding has one row per token: an id the tokenizer makes must have a row
        // and an id the model samples a text (llama.cpp refuses a mismatch at load too).
        // Vocabulary-only files have no embedding and skip this.
        if let Some(t) = file.tensor(EMBEDDING)
            && let [_, rows] = t.dims[..]
            && rows != tokens.len() as u64
        {
            return Err(TokError::EmbeddingMismatch {
                n_vocab: tokens.len(),
                rows,
            });
        }

        let scores = match get(SCORES) {
            None => Vec::new(),
            Some(v) => {
                let arr = v.as_array().ok_or(wrong(SCORES, "f32 or i32 array"))?;
                if let Some(f) = arr.as_f32s() {
                    f.to_vec()
                } else if let Some(i) = arr.as_i32s() {
                    i.iter().map(|&x| x as f32).collect()
                } else {
                    return Err(wrong(SCORES, "f32 or i32 array"));
                }
            }
        };

        let token_types = match get(TOKEN_TYPE) {
            None => Vec::new(),
            Some(v) => v
                .as_array()
                .and_then(|a| a.as_i32s())
                .ok_or(wrong(TOKEN_TYPE, "i32 array"))?
                .to_vec(),
        };

        let merges = match kind {
            VocabKind::Bpe => {
                strings(get(MERGES), MERGES)?.ok_or(TokError::MissingKey { key: MERGES })?
            }
            VocabKind::Spm => Vec::new(),
        };

        let id = |key: &'static str| -> Result<Option<u32>> {
            match get(key) {
                None => Ok(None),
                Some(v) => {
                    let n = v.as_u64().ok_or(wrong(key, "non-negative integer"))?;
                    // Out-of-range ids are ignored later, as llama.cpp does.
                    Ok(Some(u32::try_from(n).unwrap_or(u32::MAX)))
                }
            }
        };
        let flag = |key: &'static str| -> Result<Option<bool>> {
            match get(key) {
                None => Ok(None),
                Some(v) => v.as_bool().map(Some).ok_or(wrong(key, "bool")),
            }
        };

        // The deprecated prefix/suffix/middle keys win over fim_* when both are present.
        let or_deprecated = |new: Option<u32>, old: Option<u32>| old.or(new);
        let special = SpecialIds {
            bos: id("tokenizer.ggml.bos_token_id")?,
            eos: id("tokenizer.ggml.eos_token_id")?,
            eot: id("tokenizer.ggml.eot_token_id")?,
            eom: id("tokenizer.ggml.eom_token_id")?,
            unk: id("tokenizer.ggml.unknown_token_id")?,
            sep: id("tokenizer.ggml.seperator_token_id")?,
            pad: id("tokenizer.ggml.padding_token_id")?,
            mask: id("tokenizer.ggml.mask_token_id")?,
            fim_pre: or_deprecated(
                id("tokenizer.ggml.fim_pre_token_id")?,
                id("tokenizer.ggml.prefix_token_id")?,
            ),
            fim_suf: or_deprecated(
                id("tokenizer.ggml.fim_suf_token_id")?,
                id("tokenizer.ggml.suffix_token_id")?,
            ),
            fim_mid: or_deprecated(
                id("tokenizer.ggml.fim_mid_token_id")?,
                id("tokenizer.ggml.middle_token_id")?,
            ),
            fim_pad: id("tokenizer.ggml.fim_pad_token_id")?,
            fim_rep: id("tokenizer.ggml.fim_rep_token_id")?,
            fim_sep: id("tokenizer.ggml.fim_sep_token_id")?,
        };

        Ok(Vocab {
            kind,
            pre,
            tokens,
            scores,
            token_types,
            merges,
            special,
            add_bos: flag(ADD_BOS)?,
            add_eos: flag(ADD_EOS)?,
            add_space_prefix: flag(ADD_SPACE_PREFIX)?,
        })
    }
}

fn wrong(key: &'static str, expected: &'static str) -> TokError {
    TokError::WrongType { key, expected }
}

fn strings(v: Option<&Value>, key: &'static str) -> Result<Option<Vec<String>>> {
    match v {
        None => Ok(None),
        Some(v) => v
            .as_array()
            .and_then(|a| a.as_strings())
            .map(|s| Some(s.to_vec()))
            .ok_or(wrong(key, "string array")),
    }
}
