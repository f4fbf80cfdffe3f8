//! Code point classes as llama.cpp's pre-tokenizers see them, and GPT-2's byte <-> char map.
//!
//! llama.cpp classifies code points with tables generated from Unicode 15.1. We take general
//! categories from `unicode-general-category` 0.6 (Unicode 15.0) and patch in the 627 code points
//! that 15.1 assigned, which makes every code point's class agree with llama.cpp's (checked
//! against its table, all 0x110000 code points). Newer scripts (Unicode 16+) stay unassigned,
//! exactly as they are for llama.cpp.

use unicode_general_category::{GeneralCategory as G, get_general_category};

/// The one general-category class llama.cpp keeps per code point (`\p{..}` in its regexes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Class {
    Unassigned,
    Number,
    Letter,
    Separator,
    Mark,
    Punctuation,
    Symbol,
    Control,
}

/// Class of `c` (Unicode 15.1 general category, grouped).
pub(crate) fn class(c: char) -> Class {
    let cp = c as u32;
    // Unicode 15.1 additions: ideographic description characters and CJK Extension I.
    if (0x2FFC..=0x2FFF).contains(&cp) || cp == 0x31EF {
        return Class::Symbol;
    }
    if (0x2EBF0..=0x2EE5D).contains(&cp) {
        return Class::Letter;
    }
    match get_general_category(c) {
        G::UppercaseLetter
        | G::LowercaseLetter
        | G::TitlecaseLetter
        | G::ModifierLetter
        | G::OtherLetter => Class::Letter,
        G::DecimalNumber | G::LetterNumber | G::OtherNumber => Class::Number,
        G::SpaceSeparator | G::LineSeparator | G::ParagraphSeparator => Class::Separator,
        G::NonspacingMark | G::SpacingMark | G::EnclosingMark => Class::Mark,
        G::ConnectorPunctuation
        | G::DashPunctuation
        | G::OpenPunctuation
        | G::ClosePunctuation
        | G::InitialPunctuation
        | G::FinalPunctuation
        | G::OtherPunctuation => Class::Punctuation,
        G::MathSymbol | G::CurrencySymbol | G::ModifierSymbol | G::OtherSymbol => Class::Symbol,
        G::Unassigned => Class::Unassigned,
        G::Control | G::Format | G::Surrogate | G::PrivateUse => Class::Control,
    }
}

/// `\s` as llama.cpp means it: the Unicode White_Space property (25 code points), which is
/// exactly what `char::is_whitespace` tests.
pub(crate) fn is_whitespace(c: char) -> bool {
    c.is_whitespace()
}

pub(crate) fn is_letter(c: char) -> bool {
    class(c) == Class::Letter
}

pub(crate) fn is_number(c: char) -> bool {
    class(c) == Class::Number
}

/// The 188 bytes GPT-2 shows as themselves; the other 68 map to U+0100.. in byte order.
fn byte_is_printable(b: u8) -> bool {
    matches!(b, 0x21..=0x7E | 0xA1..=0xAC | 0xAE..=0xFF)
}

/// GPT-2's byte -> char table (`bytes_to_unicode`).
pub(crate) fn byte_to_char_table() -> [char; 256] {
    let mut table = ['\0'; 256];
    let mut next = 0x100u32;
    for b in 0..=255u8 {
        table[b as usize] = if byte_is_printable(b) {
            char::from(b)
        } else {
            let c = char::from_u32(next).unwrap_or('\u{FFFD}');
            next += 1;
            c
        };
    }
    table
}

/// Inverse of [`byte_to_char_table`]: the byte a char stands for, if any.
pub(crate) fn char_to_byte(c: char) -> Option<u8> {
    let cp = c as u32;
    if cp < 0x100 {
        let b = cp as u8;
        return byte_is_printable(b).then_some(b);
    }
    // U+0100 + k is the k-th non-printable byte: 0x00..=0x20, then 0x7F..=0xA0, then 0xAD.
    match cp.checked_sub(0x100)? {
        k @ 0..=32 => Some(k as u8),
        k @ 33..=66 => Some((0x7F + (k - 33)) as u8),
        67 => Some(0xAD),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes() {
        assert_eq!(class('a'), Class::Letter);
        assert_eq!(class('7'), Class::Number);
        assert_eq!(class('٣'), Class::Number);
        assert_eq!(class('!'), Class::Punctuation);
        assert_eq!(class('$'), Class::Symbol);
        assert_eq!(class('\u{301}'), Class::Mark);
        assert_eq!(class('中'), Class::Letter);
        assert_eq!(class('\u{2EBF0}'), Class::Letter);
        // Garay (Unicode 16) is unassigned for llama.cpp.
        assert_eq!(class('\u{10D40}'), Class::Unassigned);
        assert!(is_whitespace('\u{3000}') && is_whitespace('\u{85}') && !is_whitespace('\u{1C}'));
    }

    #[test]
    fn byte_map_round_trips() {
        let table = byte_to_char_table();
        assert_eq!(table[b' ' as usize], 'Ġ');
        assert_eq!(table[b'\n' as usize], 'Ċ');
        assert_eq!(table[b'a' as usize], 'a');
        for b in 0..=255u8 {
            assert_eq!(char_to_byte(table[b as usize]), Some(b));
        }
        assert_eq!(char_to_byte('中'), None);
        let distinct: std::collections::HashSet<char> = table.iter().copied().collect();
        assert_eq!(distinct.len(), 256);
    }
}
