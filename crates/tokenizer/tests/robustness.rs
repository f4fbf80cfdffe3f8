//! Hand-built vocabularies: construction errors, special tokens, and no panics on any input.

use tokenizer::{SpecialIds, TokError, Tokenizer, Vocab, toy};

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// Byte-level BPE over all 256 GPT-2 byte chars plus a few merges and control tokens.
fn byte_bpe(pre: &str) -> Vocab {
    toy::byte_bpe(pre, &["Ġ t", "h e", "Ġt he", "i n", "Ġ a"])
}

/// A tiny SentencePiece vocabulary with byte fallback: every prefix of "▁Hello", "Hello" and
/// "▁world" is a token, so merging can build the whole words.
fn spm() -> Vocab {
    Vocab {
        special: SpecialIds::default(),
        ..toy::spm(&["▁Hello", "Hello", "▁world"], 2)
    }
}

/// Deterministic pseudo-random strings mixing ASCII, whitespace, multi-byte and special text.
fn random_texts(n: usize) -> Vec<String> {
    let parts = [
        "a",
        "Z",
        "7",
        " ",
        "  ",
        "\t",
        "\n",
        "\r\n",
        "'s",
        "'LL",
        ".",
        "!?",
        "é",
        "中",
        "😀",
        "👨‍👩‍👧",
        "\u{301}",
        "\u{a0}",
        "\u{3000}",
        "٣",
        "<|im_start|>",
        "<|im_end|>",
        "<start_of_turn>",
        "<0x41>",
        "▁",
        "\0",
        "\u{7f}",
        "\u{10ffff}",
        "\u{fffd}",
        "the",
        " the",
        "Hello",
    ];
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    (0..n)
        .map(|_| {
            let len = (next() % 24) as usize;
            (0..len)
                .map(|_| parts[(next() % parts.len() as u64) as usize])
                .collect()
        })
        .collect()
}

#[test]
fn malformed_vocabularies_are_errors() {
    assert_eq!(
        Tokenizer::new(Vocab::default()).unwrap_err(),
        TokError::EmptyVocab
    );

    let dup = Vocab {
        tokens: strings(&["a", "b", "a"]),
        ..Vocab::default()
    };
    assert!(matches!(
        Tokenizer::new(dup).unwrap_err(),
        TokError::DuplicateToken {
            first: 0,
            second: 2,
            ..
        }
    ));

    let mut short_scores = spm();
    short_scores.scores.pop();
    assert!(matches!(
        Tokenizer::new(short_scores).unwrap_err(),
        TokError::LengthMismatch { what: "scores", .. }
    ));

    let mut long_types = spm();
    long_types.token_types.push(1);
    assert!(matches!(
        Tokenizer::new(long_types).unwrap_err(),
        TokError::LengthMismatch {
            what: "token types",
            ..
        }
    ));

    let mut bad_merge = byte_bpe("qwen2");
    bad_merge.merges.push("nospace".into());
    assert!(matches!(
        Tokenizer::new(bad_merge).unwrap_err(),
        TokError::BadMerge { .. }
    ));

    let mut unknown_part = byte_bpe("qwen2");
    unknown_part.merges.push("Ġ zzz".into());
    let err = Tokenizer::new(unknown_part).unwrap_err();
    assert!(matches!(&err, TokError::MergeUnknownToken { part, .. } if part == "zzz"));
    assert!(!err.to_string().contains('\n'));
}

#[test]
fn lenient_where_llamacpp_is() {
    // Out-of-range special ids are ignored, empty tokens renamed, unknown pre-tokenizers
    // fall back to "default"; each leaves a warning.
    let mut v = byte_bpe("no-such-pre");
    v.special.eos = Some(1_000_000);
    v.tokens.push(String::new());
    v.token_types.push(1);
    let tok = Tokenizer::new(v).unwrap();
    assert_eq!(tok.pre(), Some("default"));
    assert_eq!(
        tok.eos(),
        Some(11),
        "1000000 is ignored for BPE's default EOS, 11"
    );
    let w = tok.warnings().join("\n");
    assert!(
        w.contains("no-such-pre") && w.contains("1000000") && w.contains("EMPTY"),
        "{w}"
    );
}

#[test]
fn bpe_round_trips_and_specials() {
    let tok = Tokenizer::new(byte_bpe("qwen2")).unwrap();
    assert!(tok.warnings().is_empty(), "{:?}", tok.warnings());
    let the = tok.token_id("Ġthe").unwrap();
    assert_eq!(tok.encode(" the", true, true), [the]);
    let ids = tok.encode("<|im_start|>in<|im_end|>", true, true);
    assert_eq!(ids, [1, tok.token_id("in").unwrap(), 2]);
    assert_eq!(
        tok.encode("<|im_end|>", false, false).len(),
        "<|im_end|>".len()
    );
    assert_eq!(tok.eog_ids(), [0, 2]);
    assert!(tok.is_eog(2) && !tok.is_eog(1));
    assert_eq!(tok.token_to_piece(the).unwrap(), b" the");
    assert_eq!(tok.token_to_piece(1).unwrap(), b"<|im_start|>");
    assert_eq!(tok.detokenize(&[1, the], false, false).unwrap(), b" the");
    for text in random_texts(2000) {
        let ids = tok.encode(&text, true, true);
        assert_eq!(tok.decode(&ids).unwrap(), text);
        let plain = tok.encode(&text, false, false);
        assert_eq!(tok.decode(&plain).unwrap(), text);
        let mut stream = tok.stream_decoder();
        let mut streamed = String::new();
        for &id in &ids {
            streamed += &stream.push(id).unwrap();
        }
        streamed += &stream.finish();
        assert_eq!(streamed, text);
    }
}

#[test]
fn spm_space_prefix_and_byte_fallback() {
    let tok = Tokenizer::new(spm()).unwrap();
    assert_eq!(
        (tok.bos(), tok.eos(), tok.unk()),
        (Some(1), Some(2), Some(0))
    );
    assert!(tok.add_bos() && !tok.add_eos());
    let id = |t: &str| tok.token_id(t).unwrap();
    let (hello, world, sot) = (id("▁Hello"), id("▁world"), id("<start_of_turn>"));
    // A space is prefixed to the text and again after each special token.
    assert_eq!(tok.encode("Hello world", true, true), [1, hello, world]);
    assert_eq!(
        tok.encode("Hello<start_of_turn>Hello", false, true),
        [hello, sot, hello]
    );
    // Characters with no token are spelled as UTF-8 bytes.
    assert_eq!(
        tok.encode("é", false, true),
        [id("▁"), id("<0xC3>"), id("<0xA9>")]
    );
    // Detokenizing drops the prefixed space, unless it drops a BOS instead (as llama.cpp).
    assert_eq!(
        tok.detokenize(&[hello, world], false, false).unwrap(),
        b"Hello world"
    );
    assert_eq!(
        tok.detokenize(&[1, hello, world], true, false).unwrap(),
        b" Hello world"
    );
    assert_eq!(tok.decode(&[1, hello]).unwrap(), "<s> Hello");
    let mut no_prefix = spm();
    no_prefix.add_space_prefix = Some(false);
    let tok2 = Tokenizer::new(no_prefix).unwrap();
    assert_eq!(
        tok2.encode("Hello", false, true),
        [tok2.token_id("Hello").unwrap()]
    );
    for text in random_texts(2000) {
        // With the prefix a space appears after each special token, so only tok2 round-trips.
        let ids = tok.encode(&text, true, true);
        tok.detokenize(&ids, true, true).unwrap();
        let ids = tok2.encode(&text, true, true);
        let back = String::from_utf8(tok2.detokenize(&ids, true, true).unwrap()).unwrap();
        // A literal U+2581 in the input comes back as a space, as in llama.cpp.
        assert_eq!(back, text.replace('▁', " "));
    }
}

#[test]
fn invalid_ids_are_errors_not_panics() {
    for tok in [
        Tokenizer::new(spm()).unwrap(),
        Tokenizer::new(byte_bpe("smollm")).unwrap(),
    ] {
        let n = tok.n_vocab() as u32;
        for id in [n, n + 1, u32::MAX] {
            assert_eq!(
                tok.token_to_piece(id).unwrap_err(),
                TokError::InvalidId {
                    id,
                    n_vocab: n as usize
                }
            );
            assert!(tok.decode(&[0, id]).is_err());
            assert!(tok.token_text(id).is_err());
            assert!(tok.stream_decoder().push(id).is_err());
            assert!(!tok.is_eog(id) && !tok.is_control(id));
        }
        for id in 0..n {
            tok.token_to_piece(id).unwrap();
        }
        let all: Vec<u32> = (0..n).collect();
        let _ = tok.decode(&all).unwrap();
    }
}

#[test]
fn tokenizer_is_shareable_across_threads() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Tokenizer>();
    assert_send_sync::<tokenizer::StreamDecoder<'static>>();
}
