//! A bounds-checked little-endian byte cursor over file data, and [`Loc`], the place in the file
//! that error messages name. Every read checks the remaining length before touching the bytes.

use crate::error::{GgufError, Result, escape_short};
use std::fmt;

/// Deepest nesting of metadata arrays accepted (an array of scalars is depth 1).
pub(crate) const MAX_DEPTH: usize = 8;

/// Longest name quoted in an error message, in characters.
const NAME_IN_ERROR: usize = 80;

/// Which part of the file is being parsed.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Place<'a> {
    Header,
    Key { index: u64, key: Option<&'a str> },
    Tensor { index: u64, name: Option<&'a str> },
}

/// A place in the file plus, inside metadata arrays, the element path (`[2][5]`). Cheap to keep
/// up to date; only formatted when an error is built.
#[derive(Clone, Debug)]
pub(crate) struct Loc<'a> {
    place: Place<'a>,
    path: [u64; MAX_DEPTH],
    depth: usize,
}

impl<'a> Loc<'a> {
    pub(crate) fn new(place: Place<'a>) -> Self {
        Loc {
            place,
            path: [0; MAX_DEPTH],
            depth: 0,
        }
    }

    /// Current array nesting depth (0 outside arrays).
    pub(crate) fn depth(&self) -> usize {
        self.depth
    }

    /// Enters one level of array elements; the caller checked the depth against [`MAX_DEPTH`].
    pub(crate) fn enter(&mut self) {
        if self.depth < MAX_DEPTH {
            self.depth += 1;
        }
    }

    /// Sets the index of the element being read at the innermost level.
    pub(crate) fn set_index(&mut self, i: u64) {
        if let Some(slot) = self.depth.checked_sub(1).and_then(|d| self.path.get_mut(d)) {
            *slot = i;
        }
    }

    pub(crate) fn leave(&mut self) {
        self.depth = self.depth.saturating_sub(1);
    }

    /// An [`GgufError::Invalid`] at this place.
    pub(crate) fn invalid(&self, msg: impl Into<String>) -> GgufError {
        GgufError::Invalid {
            at: self.to_string(),
            msg: msg.into(),
        }
    }
}

impl fmt::Display for Loc<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.place {
            Place::Header => f.write_str("header")?,
            Place::Key { index, key: None } => write!(f, "metadata key #{index}")?,
            Place::Key {
                index,
                key: Some(k),
            } => write!(
                f,
                "metadata key #{index} (\"{}\")",
                escape_short(k, NAME_IN_ERROR)
            )?,
            Place::Tensor { index, name: None } => write!(f, "tensor #{index}")?,
            Place::Tensor { name: Some(n), .. } => {
                write!(f, "tensor '{}'", escape_short(n, NAME_IN_ERROR))?
            }
        }
        if self.depth > 0 {
            f.write_str(", element ")?;
            for i in self.path.iter().take(self.depth) {
                write!(f, "[{i}]")?;
            }
        }
        Ok(())
    }
}

/// Reads little-endian values from a byte slice, never past its end.
pub(crate) struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Cursor { buf, pos: 0 }
    }

    /// Absolute offset of the next byte.
    pub(crate) fn pos(&self) -> u64 {
        self.pos as u64
    }

    /// Bytes left after the current position.
    pub(crate) fn remaining(&self) -> u64 {
        self.buf.len().saturating_sub(self.pos) as u64
    }

    /// Fails unless `count` elements of at least `min_size` bytes each can fit in the rest of the
    /// file. Call before allocating anything sized by `count`.
    pub(crate) fn check_count(
        &self,
        count: u64,
        min_size: u64,
        loc: &Loc,
        field: &str,
    ) -> Result<()> {
        let remaining = self.remaining();
        match count.checked_mul(min_size) {
            Some(n) if n <= remaining => Ok(()),
            _ => Err(GgufError::TooLarge {
                at: loc.to_string(),
                field: field.to_string(),
                value: count,
                remaining,
            }),
        }
    }

    /// The next `n` bytes.
    pub(crate) fn take(&mut self, n: u64, loc: &Loc, field: &str) -> Result<&'a [u8]> {
        let truncated = || GgufError::Truncated {
            at: loc.to_string(),
            field: field.to_string(),
            offset: self.pos as u64,
            need: n,
            remaining: self.remaining(),
        };
        let len = usize::try_from(n).map_err(|_| truncated())?;
        let end = self.pos.checked_add(len).ok_or_else(truncated)?;
        let bytes = self.buf.get(self.pos..end).ok_or_else(truncated)?;
        self.pos = end;
        Ok(bytes)
    }

    pub(crate) fn array<const N: usize>(&mut self, loc: &Loc, field: &str) -> Result<[u8; N]> {
        let bytes = self.take(N as u64, loc, field)?;
        let mut out = [0u8; N];
        for (o, b) in out.iter_mut().zip(bytes) {
            *o = *b;
        }
        Ok(out)
    }

    pub(crate) fn u8(&mut self, loc: &Loc, field: &str) -> Result<u8> {
        Ok(u8::from_le_bytes(self.array(loc, field)?))
    }

    pub(crate) fn u32(&mut self, loc: &Loc, field: &str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(loc, field)?))
    }

    pub(crate) fn u64(&mut self, loc: &Loc, field: &str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(loc, field)?))
    }

    /// A GGUF string: u64 byte length (`len_field` in errors), then that many bytes of UTF-8.
    pub(crate) fn string(&mut self, loc: &Loc, field: &str, len_field: &str) -> Result<&'a str> {
        let len = self.u64(loc, len_field)?;
        self.check_count(len, 1, loc, len_field)?;
        let bytes = self.take(len, loc, field)?;
        std::str::from_utf8(bytes).map_err(|e| GgufError::InvalidUtf8 {
            at: loc.to_string(),
            field: field.to_string(),
            valid_up_to: e.valid_up_to(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_are_bounded() {
        let loc = Loc::new(Place::Header);
        let mut c = Cursor::new(&[1, 0, 0, 0, 9]);
        assert_eq!(c.u32(&loc, "x").unwrap(), 1);
        assert!(c.u32(&loc, "y").is_err());
        assert!(c.take(u64::MAX, &loc, "z").is_err());
        assert_eq!(c.u8(&loc, "w").unwrap(), 9);
        assert_eq!(c.remaining(), 0);
    }

    #[test]
    fn loc_formats_element_paths() {
        let mut loc = Loc::new(Place::Key {
            index: 3,
            key: Some("a\nb"),
        });
        loc.enter();
        loc.set_index(2);
        loc.enter();
        loc.set_index(5);
        assert_eq!(
            loc.to_string(),
            "metadata key #3 (\"a\\nb\"), element [2][5]"
        );
        loc.leave();
        loc.leave();
        assert_eq!(
            Loc::new(Place::Tensor {
                index: 1,
                name: None
            })
            .to_string(),
            "tensor #1"
        );
    }
}
