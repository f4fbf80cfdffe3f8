//! Special tokens: which ids are BOS/EOS/EOT/..., the end-of-generation set, and cutting
//! special-token text out of the input before the normal tokenizer runs.
//!
//! Follows llama.cpp's `llama_vocab::load`: ids come from metadata, falling back to per-model
//! defaults; EOT/EOM/FIM tokens missing from metadata are found by their text, and tokens named
//! like end-of-generation markers are forced to be control tokens.

use crate::attr::{self, Attr};
use crate::vocab::{SpecialIds, VocabKind};
use std::collections::HashMap;

/// Resolved special ids (all in range).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Specials {
    pub ids: SpecialIds,
    /// End-of-generation ids, sorted.
    pub eog: Vec<u32>,
}

const EOT_NAMES: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "<｜end▁of▁sentence｜>",
    "<end_of_utterance>",
];
const EOM_NAMES: &[&str] = &["<|eom_id|>"];
const FIM_PRE_NAMES: &[&str] = &[
    "<|fim_prefix|>",
    "<fim-prefix>",
    "<fim_prefix>",
    "<｜fim▁begin｜>",
    "<PRE>",
    "▁<PRE>",
    "<|code_prefix|>",
    "<|prefix|>",
];
const FIM_SUF_NAMES: &[&str] = &[
    "<|fim_suffix|>",
    "<fim-suffix>",
    "<fim_suffix>",
    "<｜fim▁hole｜>",
    "<SUF>",
    "▁<SUF>",
    "<|code_suffix|>",
    "<|suffix|>",
];
const FIM_MID_NAMES: &[&str] = &[
    "<|fim_middle|>",
    "<fim-middle>",
    "<fim_middle>",
    "<｜fim▁end｜>",
    "<MID>",
    "▁<MID>",
    "<|code_middle|>",
    "<|middle|>",
];
const FIM_PAD_NAMES: &[&str] = &["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"];
const FIM_REP_NAMES: &[&str] = &[
    "<|fim_repo|>",
    "<|repo_name|>",
    "<fim-repo>",
    "<REPO>",
    "<reponame>",
];
const FIM_SEP_NAMES: &[&str] = &["<|file_sep|>"];
const EOG_NAMES: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<｜end▁of▁sentence｜>",
    "[e~[",
];
/// Always rendered, never treated as control (gpt-oss).
const FORCE_USER_DEFINED: &[&str] = &["<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"];

/// Resolves special ids and adjusts `attrs` the way llama.cpp does. `warnings` collects
/// notes about ignored metadata.
pub(crate) fn resolve(
    kind: VocabKind,
    meta: &SpecialIds,
    texts: &[String],
    to_id: &HashMap<String, u32>,
    attrs: &mut [Attr],
    warnings: &mut Vec<String>,
) -> Specials {
    let n = texts.len();
    let in_range = |id: u32| (id as usize) < n;
    let mut ids = match kind {
        VocabKind::Spm => SpecialIds {
            bos: Some(1),
            eos: Some(2),
            unk: Some(0),
            ..SpecialIds::default()
        },
        VocabKind::Bpe => SpecialIds {
            bos: Some(11),
            eos: Some(11),
            ..SpecialIds::default()
        },
    };
    let pairs: [(&str, &mut Option<u32>, Option<u32>); 14] = [
        ("bos", &mut ids.bos, meta.bos),
        ("eos", &mut ids.eos, meta.eos),
        ("eot", &mut ids.eot, meta.eot),
        ("eom", &mut ids.eom, meta.eom),
        ("unknown", &mut ids.unk, meta.unk),
        ("separator", &mut ids.sep, meta.sep),
        ("padding", &mut ids.pad, meta.pad),
        ("mask", &mut ids.mask, meta.mask),
        ("fim_pre", &mut ids.fim_pre, meta.fim_pre),
        ("fim_suf", &mut ids.fim_suf, meta.fim_suf),
        ("fim_mid", &mut ids.fim_mid, meta.fim_mid),
        ("fim_pad", &mut ids.fim_pad, meta.fim_pad),
        ("fim_rep", &mut ids.fim_rep, meta.fim_rep),
        ("fim_sep", &mut ids.fim_sep, meta.fim_sep),
    ];
    for (name, slot, from_meta) in pairs {
        if slot.is_some_and(|id| !in_range(id)) {
            *slot = None;
        }
        match from_meta {
            Some(id) if in_range(id) => *slot = Some(id),
            Some(id) => warnings.push(format!(
                "{name} token id {id} is out of range ({n} tokens); using {slot:?}"
            )),
            None => {}
        }
    }

    // Find tokens by text when metadata does not name them; a match becomes a control token.
    // llama.cpp takes the first match in hash-map order; here the first name in list order.
    let mut find = |slot: &mut Option<u32>, names: &[&str]| {
        if slot.is_some() {
            return;
        }
        if let Some(&id) = names.iter().find_map(|name| to_id.get(*name)) {
            *slot = Some(id);
            attrs[id as usize] |= attr::CONTROL;
        }
    };
    find(&mut ids.eot, EOT_NAMES);
    find(&mut ids.eom, EOM_NAMES);
    find(&mut ids.fim_pre, FIM_PRE_NAMES);
    find(&mut ids.fim_suf, FIM_SUF_NAMES);
    find(&mut ids.fim_mid, FIM_MID_NAMES);
    find(&mut ids.fim_pad, FIM_PAD_NAMES);
    find(&mut ids.fim_rep, FIM_REP_NAMES);
    find(&mut ids.fim_sep, FIM_SEP_NAMES);

    // Control tokens named "unused..." are unused.
    for (text, a) in texts.iter().zip(attrs.iter_mut()) {
        if *a & attr::CONTROL != 0 && text.contains("unused") {
            *a |= attr::UNUSED;
        }
    }

    let mut eog: Vec<u32> = [ids.fim_pad, ids.fim_rep, ids.fim_sep]
        .into_iter()
        .flatten()
        .collect();
    for name in EOG_NAMES {
        if let Some(&id) = to_id.get(*name) {
            eog.push(id);
            attrs[id as usize] |= attr::CONTROL;
        }
    }
    for name in FORCE_USER_DEFINED {
        if let Some(&id) = to_id.get(*name) {
            attrs[id as usize] = attr::USER_DEFINED;
        }
    }
    eog.extend([ids.eos, ids.eot, ids.eom].into_iter().flatten());
    eog.sort_unstable();
    eog.dedup();

    let has = |eog: &[u32], name: &str| to_id.get(name).filter(|id| eog.contains(id)).copied();
    // o200k_harmony / solar-open: "<|end|>" ends a message, not the generation.
    if let Some(end) = has(&eog, "<|end|>") {
        let call = has(&eog, "<|call|>").or(has(&eog, "<|calls|>"));
        let harmony = has(&eog, "<|return|>").is_some() && call.is_some();
        let solar = call.is_some() && has(&eog, "<|flush|>").is_some();
        if harmony || solar {
            eog.retain(|&id| id != end);
            attrs[end as usize] = attr::USER_DEFINED;
        }
    }
    // Gemma 4 / PLaMo: "</s>" is a normal token there.
    if let Some(s) = has(&eog, "</s>")
        && (has(&eog, "<|tool_response>").is_some() || has(&eog, "<|plamo:eos|>").is_some())
    {
        eog.retain(|&id| id != s);
        attrs[s as usize] = attr::NORMAL;
    }
    Specials { ids, eog }
}

/// Ids whose text is cut out of the input (control, user-defined, unknown), longest first.
pub(crate) fn cache(texts: &[String], attrs: &[Attr]) -> Vec<u32> {
    let wanted = attr::CONTROL | attr::USER_DEFINED | attr::UNKNOWN;
    let mut ids: Vec<u32> = (0..texts.len() as u32)
        .filter(|&id| attrs[id as usize] & wanted != 0)
        .collect();
    ids.sort_by_key(|&id| std::cmp::Reverse(texts[id as usize].len()));
    ids
}

/// A piece of input: text still to tokenize, or a special token found in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fragment<'t> {
    Text(&'t str),
    Token(u32),
}

/// Cuts every occurrence of each special token's text out of `text`, longest tokens first
/// (llama.cpp's `tokenizer_st_partition`). Without `parse_special` only user-defined tokens
/// are cut.
pub(crate) fn partition<'t>(
    text: &'t str,
    cache: &[u32],
    texts: &[String],
    attrs: &[Attr],
    parse_special: bool,
) -> Vec<Fragment<'t>> {
    if text.is_empty() {
        return Vec::new();
    }
    let mut present = [false; 256];
    for &b in text.as_bytes() {
        present[b as usize] = true;
    }
    let mut frags = vec![Fragment::Text(text)];
    for &id in cache {
        let a = attrs[id as usize];
        if !parse_special && a & (attr::CONTROL | attr::UNKNOWN) != 0 {
            continue;
        }
        let needle = texts[id as usize].as_str();
        match needle.as_bytes().first() {
            Some(&b) if present[b as usize] && needle.len() <= text.len() => {}
            _ => continue,
        }
        if !frags
            .iter()
            .any(|f| matches!(f, Fragment::Text(t) if t.contains(needle)))
        {
            continue;
        }
        let mut next = Vec::with_capacity(frags.len() + 2);
        for frag in frags {
            let Fragment::Text(t) = frag else {
                next.push(frag);
                continue;
            };
            let mut rest_start = 0;
            for (pos, _) in t.match_indices(needle) {
                if pos > rest_start {
                    next.push(Fragment::Text(&t[rest_start..pos]));
                }
                next.push(Fragment::Token(id));
                rest_start = pos + needle.len();
            }
            if rest_start < t.len() {
                next.push(Fragment::Text(&t[rest_start..]));
            }
        }
        frags = next;
    }
    frags
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_longest_first() {
        let texts: Vec<String> = ["<a>", "<a><b>", "x", "<c>"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let attrs = [
            attr::CONTROL,
            attr::CONTROL,
            attr::NORMAL,
            attr::USER_DEFINED,
        ];
        let cache = cache(&texts, &attrs);
        assert_eq!(cache, [1, 0, 3]);
        let f = partition("q<a><b><a>r<c>", &cache, &texts, &attrs, true);
        use Fragment::*;
        assert_eq!(f, [Text("q"), Token(1), Token(0), Text("r"), Token(3)]);
        let f = partition("q<a><c>", &cache, &texts, &attrs, false);
        assert_eq!(f, [Text("q<a>"), Token(3)]);
        assert!(partition("", &cache, &texts, &attrs, true).is_empty());
    }
}
