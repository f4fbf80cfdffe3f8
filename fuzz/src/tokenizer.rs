//! Target `tokenizer`: text to encode and ids to decode, on a fixed set of vocabularies.
//!
//! Input: byte 0 picks the tokenizer ([`tokenizers`]), byte 1 the operation and its flags, the
//! rest is the payload (text, or little-endian u16 ids).
//!
//! Checks beyond "no panic": encoded ids are in range; on byte-level BPE vocabularies the
//! pieces of the ids give back the text exactly (when each of its bytes has a byte token); the stream decoder gives the same text as
//! decoding the whole sequence's raw pieces; an out-of-range id is an error, not a panic.

use std::path::PathBuf;
use std::sync::OnceLock;
use tokenizer::{TokError, Tokenizer, Vocab, VocabKind, toy};

/// Real vocabularies tried, by file name, in `MOLLA_FUZZ_VOCABS` (a directory) or
/// `$MOLLA_MODELS` / `~/.cache/molla/models`. Missing ones are replaced by the synthetic one,
/// so an input means the same on every machine that has the same files.
const REAL: [&str; 3] = [
    "SmolLM2-135M-Instruct.Q4_1.gguf",
    "qwen2.5-coder-0.5b-instruct.gguf",
    "gemma-3-270m-q4_k_m.gguf",
];

/// GPT-2's printable stand-in for each byte.
fn byte_chars() -> &'static [String] {
    static CHARS: OnceLock<Vec<String>> = OnceLock::new();
    CHARS.get_or_init(|| (0..=255u8).map(|b| toy::byte_char(b).to_string()).collect())
}

/// Byte-level BPE: three control tokens, the 256 byte tokens, a few merges, one user-defined
/// token, with pre-tokenizer `pre`.
fn byte_bpe(pre: &str) -> Vocab {
    let mut v = toy::byte_bpe(
        pre,
        &[
            "Ġ t",
            "h e",
            "Ġt he",
            "i n",
            "Ġ a",
            "e r",
            "Ġ 1",
            "1 2",
            "Ġ Ġ",
            "ĠĠ ĠĠ",
            "ã ģ",
        ],
    );
    v.tokens.push("<tool>".into());
    v.token_types.push(4);
    v.add_bos = Some(true);
    v
}

/// SentencePiece with byte fallback: pieces of a few words, scores by id.
fn spm(add_space_prefix: bool) -> Vocab {
    Vocab {
        add_space_prefix: Some(add_space_prefix),
        ..toy::spm(
            &[
                "▁Hello",
                "Hello",
                "▁world",
                "▁the",
                "▁▁▁▁",
                "ab",
                "abc",
                "日本",
            ],
            1,
        )
    }
}

fn models_dir() -> PathBuf {
    if let Some(d) =
        std::env::var_os("MOLLA_FUZZ_VOCABS").or_else(|| std::env::var_os("MOLLA_MODELS"))
    {
        return PathBuf::from(d);
    }
    PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/molla/models")
}

/// The tokenizer set: the synthetic chat model's (byte-level BPE, no merges), hand-built BPE
/// vocabularies with five pre-tokenizers, two SentencePiece ones, then the real ones.
pub fn tokenizers() -> &'static [Tokenizer] {
    static TOKS: OnceLock<Vec<Tokenizer>> = OnceLock::new();
    TOKS.get_or_init(|| {
        let synth = || {
            let bytes = model::synth::chat_model(None).expect("synthetic model");
            let file = gguf::GgufFile::from_bytes(bytes).expect("synthetic model parses");
            Tokenizer::from_gguf(&file).expect("synthetic tokenizer")
        };
        let mut v = vec![synth()];
        for pre in ["gpt2", "smollm", "qwen2", "llama-bpe", "default"] {
            v.push(Tokenizer::new(byte_bpe(pre)).expect("hand-built BPE"));
        }
        v.push(Tokenizer::new(spm(true)).expect("hand-built SPM"));
        v.push(Tokenizer::new(spm(false)).expect("hand-built SPM"));
        let dir = models_dir();
        for name in REAL {
            v.push(Tokenizer::open(dir.join(name)).unwrap_or_else(|_| synth()));
        }
        v
    })
}

/// The raw bytes `ids` stand for (control tokens as their text).
fn pieces(tok: &Tokenizer, ids: &[u32]) -> Vec<u8> {
    let mut out = Vec::new();
    for &id in ids {
        out.extend(tok.token_to_piece(id).expect("id in range"));
    }
    out
}

/// Feeds `ids` to a stream decoder; the text it gives must be the lossy UTF-8 of the pieces.
fn check_stream(tok: &Tokenizer, ids: &[u32]) {
    let mut stream = tok.stream_decoder();
    let mut text = String::new();
    for &id in ids {
        text.push_str(&stream.push(id).expect("id in range"));
    }
    text.push_str(&stream.finish());
    let expected = String::from_utf8_lossy(&pieces(tok, ids)).into_owned();
    assert_eq!(
        text, expected,
        "stream decoder disagrees with the pieces of {ids:?}"
    );
}

pub fn run(data: &[u8]) {
    let [which, op, payload @ ..] = data else {
        return;
    };
    let toks = tokenizers();
    let tok = &toks[*which as usize % toks.len()];
    let n_vocab = tok.n_vocab();
    match op % 4 {
        0 => {
            let text = String::from_utf8_lossy(payload);
            let (add_special, parse_special) = (op & 4 != 0, op & 8 != 0);
            let ids = tok.encode(&text, add_special, parse_special);
            assert!(ids.iter().all(|&id| (id as usize) < n_vocab));
            let _ = tok.decode(&ids).expect("ids from encode decode");
            let plain = tok.encode(&text, false, parse_special);
            // A byte without a byte token is dropped (as llama.cpp drops it: SmolLM2's vocabulary
            // has no token for 21 byte values, 0x16 among them), so the round trip holds only
            // for texts whose every byte has one.
            let byte_chars = byte_chars();
            let has_all_bytes = || {
                text.bytes()
                    .all(|b| tok.token_id(&byte_chars[b as usize]).is_some())
            };
            if tok.kind() == VocabKind::Bpe && has_all_bytes() {
                assert_eq!(
                    String::from_utf8_lossy(&pieces(tok, &plain)),
                    text,
                    "byte-level BPE does not give the text back"
                );
            }
            check_stream(tok, &plain);
        }
        1 => {
            // ids: u16 pairs, mostly in range, some past the end
            let ids: Vec<u32> = payload
                .chunks_exact(2)
                .map(|c| u32::from(u16::from_le_bytes([c[0], c[1]])) % (n_vocab as u32 + 4))
                .collect();
            let bad = ids.iter().find(|&&id| id as usize >= n_vocab);
            match (tok.decode(&ids), bad) {
                (Ok(_), None) => {}
                (Err(TokError::InvalidId { id, .. }), Some(&b)) => assert_eq!(id, b),
                (r, b) => panic!("decode of {ids:?} gave {r:?} (first bad id {b:?})"),
            }
            let _ = tok.detokenize(&ids, op & 4 != 0, op & 8 != 0);
            let valid: Vec<u32> = ids
                .into_iter()
                .filter(|&id| (id as usize) < n_vocab)
                .collect();
            check_stream(tok, &valid);
            let mut gen_stream = tok.stream_decoder().skip_special(true);
            for &id in &valid {
                let _ = gen_stream.push(id);
            }
            let _ = gen_stream.finish_generation();
        }
        2 => {
            // raw u32 ids, anything at all
            let ids: Vec<u32> = payload
                .chunks_exact(4)
                .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            let _ = tok.decode(&ids);
            let mut stream = tok.stream_decoder();
            for &id in &ids {
                let _ = stream.push(id);
                let _ = (
                    tok.token_to_piece(id),
                    tok.token_text(id),
                    tok.is_control(id),
                    tok.is_eog(id),
                );
            }
        }
        _ => {
            let text = String::from_utf8_lossy(payload);
            if let Some(id) = tok.token_id(&text) {
                assert_eq!(tok.token_text(id).ok(), Some(&*text));
            }
        }
    }
}
