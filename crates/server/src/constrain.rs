//! Constrained generation: JSON output (OpenAI's `response_format` `json_object` and
//! `json_schema`, llama.cpp's `json_schema`), a regular expression or a Lark grammar, enforced
//! token by token by masking the logits of every token that could not continue a valid output.
//!
//! The grammars, their Earley parser and the token masks are llguidance's (the library
//! llama.cpp, vLLM and SGLang use for the same); this module gives it the model's vocabulary
//! (each token's bytes, control tokens marked as special so that no grammar produces them as
//! text) and molla's tokenizer for the text it forces. A [`Grammars`] is built once per model on
//! the first constrained request; each request compiles its own [`Constraint`].

use llguidance::api::{ParserLimits, TopLevelGrammar};
use llguidance::toktrie::{TokEnv, TokRxInfo, TokTrie, TokenId, TokenizerEnv};
use llguidance::{JsonCompileOptions, Matcher, ParserFactory};
use serde_json::Value;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use tokenizer::Tokenizer;

/// Longest token (in bytes) the trie takes; longer ones (no real vocabulary has them) are left
/// out of every mask rather than risk the trie's limits.
const MAX_TOKEN_BYTES: usize = 1024;

/// Largest grammar source (a JSON schema as text, a regular expression, a Lark grammar) one
/// request may give.
pub const MAX_GRAMMAR_BYTES: usize = 256 << 10;

/// What the output must be.
#[derive(Clone, Debug, PartialEq)]
pub enum Format {
    /// Any JSON object.
    JsonObject,
    /// JSON valid under this schema.
    JsonSchema(Value),
    /// Text matching this regular expression (Rust `regex` syntax), whole.
    Regex(String),
    /// Text of this Lark grammar (llguidance's dialect).
    Lark(String),
}

/// molla's tokenizer as llguidance sees it: the trie of token bytes and canonical tokenization
/// of forced text.
struct Env {
    tok: Arc<Tokenizer>,
    trie: TokTrie,
}

impl TokenizerEnv for Env {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    fn tokenize_bytes(&self, s: &[u8]) -> Vec<TokenId> {
        match std::str::from_utf8(s) {
            Ok(text) => self.tok.encode(text, false, false),
            // Part of a character: the trie's greedy split (llguidance falls back the same way).
            Err(_) => self.trie.greedy_tokenize(s),
        }
    }
}

/// The bytes each token stands for: its text for normal, user-defined and byte tokens, and
/// for control and unknown tokens the special marker before its name (so a grammar's text never
/// matches one). Tokens too long for the trie get no bytes (never allowed).
fn token_bytes(tok: &Tokenizer) -> Vec<Vec<u8>> {
    (0..tok.n_vocab() as u32)
        .map(|id| {
            let piece = tok.token_to_piece(id).unwrap_or_default();
            if piece.len() > MAX_TOKEN_BYTES {
                Vec::new()
            } else if tok.is_control(id) {
                let mut b = vec![TokTrie::SPECIAL_TOKEN_MARKER];
                b.extend_from_slice(&piece);
                b
            } else {
                piece
            }
        })
        .collect()
}

/// A model's grammar compiler: its vocabulary's trie and llguidance's parser factory.
pub struct Grammars {
    factory: ParserFactory,
    n_vocab: usize,
}

impl std::fmt::Debug for Grammars {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Grammars")
            .field("n_vocab", &self.n_vocab)
            .finish()
    }
}

impl Grammars {
    /// The compiler for `tok`'s vocabulary (~0.1-0.5 s for 150k tokens). End of generation is
    /// any of the vocabulary's end-of-generation tokens (EOS, `<|im_end|>`, ...).
    pub fn new(tok: Arc<Tokenizer>) -> Result<Grammars, String> {
        let eog = tok.eog_ids().to_vec();
        let eos = tok
            .eos()
            .or_else(|| eog.first().copied())
            .ok_or("the vocabulary has no end-of-generation token to end a constrained output")?;
        let n_vocab = tok.n_vocab();
        let words = token_bytes(&tok);
        let info = TokRxInfo::new(n_vocab as u32, eos);
        let trie = catch_unwind(|| TokTrie::from(&info, &words).with_eos_tokens(&eog))
            .map_err(|_| "the vocabulary cannot be turned into a token trie".to_string())?;
        let env: TokEnv = Arc::new(Env { tok, trie });
        let mut factory = catch_unwind(AssertUnwindSafe(|| ParserFactory::new_simple(&env)))
            .map_err(|_| "the grammar compiler could not be set up".to_string())?
            .map_err(|e| format!("the grammar compiler could not be set up: {e}"))?;
        factory.quiet();
        *factory.limits_mut() = ParserLimits {
            verbose_errors: false,
            ..ParserLimits::default()
        };
        Ok(Grammars { factory, n_vocab })
    }

    /// Compiles `format` into a fresh constraint, or says why it cannot be used.
    pub fn compile(&self, format: &Format) -> Result<Constraint, String> {
        let grammar = match format {
            Format::JsonObject => TopLevelGrammar::from_json_schema(with_layout(
                serde_json::json!({"type": "object"}),
            )),
            Format::JsonSchema(s) => TopLevelGrammar::from_json_schema(with_layout(s.clone())),
            Format::Regex(r) => TopLevelGrammar::from_regex(r),
            Format::Lark(g) => TopLevelGrammar::from_lark(g.clone()),
        };
        let parser = catch_unwind(AssertUnwindSafe(|| self.factory.create_parser(grammar)))
            .map_err(|_| "the grammar could not be compiled".to_string())?
            .map_err(|e| brief(&e.to_string()))?;
        let mut c = Constraint {
            m: Box::new(Matcher::new(Ok(parser))),
            n_vocab: self.n_vocab,
        };
        // A grammar that admits nothing at all fails here, not after the prompt's prefill.
        c.m.compute_mask()
            .map_err(|e| format!("it admits no output ({})", brief(&e.to_string())))?;
        Ok(c)
    }
}

/// `schema` with JSON laid out as `json.dumps` does (`", "` and `": "`, no other whitespace)
/// unless it sets llguidance's own layout options (`x-guidance`): small models otherwise tend
/// to emit whitespace without end.
fn with_layout(mut schema: Value) -> Value {
    if let Some(obj) = schema.as_object_mut()
        && !obj.contains_key("x-guidance")
    {
        let opts = JsonCompileOptions {
            item_separator: ", ".into(),
            key_separator: ": ".into(),
            whitespace_flexible: false,
            ..JsonCompileOptions::default()
        };
        if let Ok(v) = serde_json::to_value(&opts) {
            obj.insert("x-guidance".into(), v);
        }
    }
    schema
}

/// llguidance's message on one line (a regex error spans several) and at most 400 characters.
fn brief(s: &str) -> String {
    let s = s.replace("<non-verbose/>", "");
    let line = s.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut out: String = line.chars().take(400).collect();
    if out.len() < line.len() {
        out.push_str("...");
    }
    out
}

/// One generation's constraint: which tokens may come next, and the tokens taken so far.
#[derive(Clone)]
pub struct Constraint {
    m: Box<Matcher>,
    n_vocab: usize,
}

impl std::fmt::Debug for Constraint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Constraint")
            .field("stopped", &self.m.is_stopped())
            .finish()
    }
}

impl Constraint {
    /// `logits` with every token that may not come next set to minus infinity (the allowed
    /// ones as they were). An end-of-generation token is allowed once the output is complete.
    pub fn masked(&mut self, logits: &[f32]) -> Result<Vec<f32>, String> {
        let allowed = self
            .m
            .compute_mask_or_eos()
            .map_err(|e| format!("constrained generation failed: {}", brief(&e.to_string())))?;
        let n = logits.len().min(self.n_vocab);
        let mut out = vec![f32::NEG_INFINITY; logits.len()];
        let mut any = false;
        allowed.iter_set_entries(|i| {
            if i < n {
                out[i] = logits[i];
                any = true;
            }
        });
        if !any {
            return Err("constrained generation failed: no token may follow".into());
        }
        Ok(out)
    }

    /// Takes `id` as the next token.
    pub fn consume(&mut self, id: u32) -> Result<(), String> {
        self.m
            .consume_token(id)
            .map_err(|e| format!("constrained generation failed: {}", brief(&e.to_string())))
    }

    /// Whether the output is complete and nothing may follow it (a closed JSON value): the
    /// generation ends there.
    pub fn is_done(&self) -> bool {
        self.m.is_stopped()
    }
}
