//! `tokenizer.ggml.pre` names -> the split steps and options llama.cpp uses for them.

use crate::pretokenize::{CharSet, Step};

/// How a BPE vocabulary pre-tokenizes and detokenizes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PreConfig {
    /// The name it resolved to (after aliases and the fallback to "default").
    pub name: &'static str,
    pub steps: Vec<Step>,
    /// Tidy " ." / " 's" style spaces when detokenizing.
    pub clean_spaces: bool,
    /// A word that is a token as a whole is emitted without merging (Llama 3).
    pub ignore_merges: bool,
    /// Whether BOS is added when `tokenizer.ggml.add_bos_token` is absent.
    pub add_bos: bool,
}

const NUMBER_1: Step = Step::Runs {
    set: CharSet::Number,
    chunk: Some(1),
};
const DIGITS_3: Step = Step::Runs {
    set: CharSet::AsciiDigit,
    chunk: Some(3),
};

fn cfg(name: &'static str, steps: Vec<Step>, clean_spaces: bool) -> PreConfig {
    PreConfig {
        name,
        steps,
        clean_spaces,
        ignore_merges: false,
        add_bos: false,
    }
}

fn default_cfg() -> PreConfig {
    let punct = Step::Runs {
        set: CharSet::PunctSym { backtick: false },
        chunk: None,
    };
    let numbers = Step::Runs {
        set: CharSet::Number,
        chunk: None,
    };
    cfg("default", vec![punct, Step::Gpt2, numbers, DIGITS_3], true)
}

/// The configuration for a pre-tokenizer name. Names llama.cpp knows but this crate does not
/// implement, and unknown names, fall back to "default" with a warning (llama.cpp refuses
/// unknown names).
pub(crate) fn resolve(pre: &str) -> (PreConfig, Option<String>) {
    let llama3 = Step::Llama3 { max_digits: 3 };
    let qwen2 = Step::Llama3 { max_digits: 1 };
    let config = match pre {
        "default" => default_cfg(),
        "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "falcon-h1" | "pixtral" | "midm-2.0"
        | "lfm2" | "jina-v5-nano" => PreConfig {
            ignore_merges: true,
            add_bos: true,
            ..cfg("llama-bpe", vec![llama3], true)
        },
        "dbrx" | "smaug-bpe" => cfg("llama-bpe", vec![llama3], true),
        "qwen2" | "deepseek-r1-qwen" | "kormo" | "f2llmv2" | "hunyuan" | "solar-open"
        | "grok-2" => cfg("qwen2", vec![qwen2], false),
        "stablelm2" | "megrez" => cfg("qwen2", vec![qwen2], true),
        "smollm" | "command-r" => cfg("smollm", vec![NUMBER_1, Step::Gpt2], false),
        "starcoder" | "refact" | "codeshell" | "exaone" | "minerva-7b" | "mellum2" => {
            cfg("smollm", vec![NUMBER_1, Step::Gpt2], true)
        }
        "gpt2" | "gpt-2" | "phi-2" | "jina-es" | "jina-de" | "gigachat" | "jina-v2-es"
        | "jina-v2-de" | "a.x-4.0" | "mellum" | "modern-bert" | "exaone4" | "mpt" | "olmo"
        | "jais" => cfg("gpt2", vec![Step::Gpt2], true),
        "trillion" | "granite-docling" => cfg("gpt2", vec![Step::Gpt2], false),
        "falcon" => {
            let punct = Step::Runs {
                set: CharSet::PunctSym { backtick: true },
                chunk: None,
            };
            cfg("falcon", vec![punct, Step::Gpt2, DIGITS_3], true)
        }
        "" => {
            let warning = "tokenizer.ggml.pre is missing; using the \"default\" pre-tokenizer";
            return (default_cfg(), Some(warning.to_string()));
        }
        other => {
            let warning = format!(
                "pre-tokenizer {other:?} is not supported; using \"default\" instead (tokenization may differ from llama.cpp)"
            );
            return (default_cfg(), Some(warning));
        }
    };
    (config, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_resolve() {
        assert_eq!(resolve("llama-bpe").0.name, "llama-bpe");
        assert!(resolve("llama-bpe").0.ignore_merges);
        assert_eq!(resolve("qwen2").0.name, "qwen2");
        assert!(!resolve("smollm").0.clean_spaces);
        assert_eq!(resolve("gpt-2").0, resolve("gpt2").0);
        let (c, w) = resolve("no-such-pre");
        assert_eq!(c.name, "default");
        assert!(w.unwrap().contains("no-such-pre"));
        assert!(resolve("").1.is_some());
        assert!(resolve("default").1.is_none());
    }
}
