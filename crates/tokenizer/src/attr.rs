//! Per-token attribute bits (llama.cpp's `llama_token_attr`), derived from the stored token
//! type and then adjusted by name-based detection (see `special.rs`).

use crate::vocab::TokenType;

pub(crate) type Attr = u16;

pub(crate) const UNKNOWN: Attr = 1 << 0;
pub(crate) const UNUSED: Attr = 1 << 1;
pub(crate) const NORMAL: Attr = 1 << 2;
pub(crate) const CONTROL: Attr = 1 << 3;
pub(crate) const USER_DEFINED: Attr = 1 << 4;
pub(crate) const BYTE: Attr = 1 << 5;

/// Attributes a stored token type starts with (`Undefined` has none).
pub(crate) fn from_type(t: TokenType) -> Attr {
    match t {
        TokenType::Undefined => 0,
        TokenType::Normal => NORMAL,
        TokenType::Unknown => UNKNOWN,
        TokenType::Control => CONTROL,
        TokenType::UserDefined => USER_DEFINED,
        TokenType::Unused => UNUSED,
        TokenType::Byte => BYTE,
    }
}
