//! Human display of metadata values, always on one line. Long strings are cut with `…` and their
//! length in characters; long arrays show their length, type and first elements:
//! `[array of 49152 string: "<|endoftext|>", "<|im_start|>", "<|im_end|>", ... ]`.
//! The alternate form (`{:#}`) prints everything in full (still escaped to one line).

use crate::value::{Array, Value};
use std::fmt::{self, Display, Formatter, Write};

/// Longest top-level string shown in full, in characters.
const STR_MAX: usize = 80;
/// Longest string shown in full inside an array.
const ELEM_STR_MAX: usize = 40;
/// Longest array shown in full.
const ARRAY_MAX: usize = 8;
/// Elements shown of a longer array.
const ARRAY_HEAD: usize = 3;

/// Writes `s` quoted and escaped; cut after `max` characters unless `max` is `None`.
fn write_string(f: &mut Formatter<'_>, s: &str, max: Option<usize>) -> fmt::Result {
    f.write_str("\"")?;
    for (i, c) in s.chars().enumerate() {
        if max == Some(i) {
            return write!(f, "…\" ({} chars)", s.chars().count());
        }
        if c == '\'' {
            f.write_char(c)?; // inside double quotes: no need to escape
        } else {
            for e in c.escape_debug() {
                f.write_char(e)?;
            }
        }
    }
    f.write_str("\"")
}

impl Display for Value {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            Value::U8(v) => write!(f, "{v}"),
            Value::I8(v) => write!(f, "{v}"),
            Value::U16(v) => write!(f, "{v}"),
            Value::I16(v) => write!(f, "{v}"),
            Value::U32(v) => write!(f, "{v}"),
            Value::I32(v) => write!(f, "{v}"),
            Value::U64(v) => write!(f, "{v}"),
            Value::I64(v) => write!(f, "{v}"),
            Value::F32(v) => write!(f, "{v:?}"),
            Value::F64(v) => write!(f, "{v:?}"),
            Value::Bool(v) => write!(f, "{v}"),
            Value::String(s) => write_string(f, s, (!f.alternate()).then_some(STR_MAX)),
            Value::Array(a) => a.fmt(f),
        }
    }
}

/// Writes the elements of one array, abbreviated unless `full`.
fn write_elems<T>(
    f: &mut Formatter<'_>,
    items: &[T],
    ty: &str,
    full: bool,
    each: impl Fn(&mut Formatter<'_>, &T) -> fmt::Result,
) -> fmt::Result {
    let abbreviate = !full && items.len() > ARRAY_MAX;
    if abbreviate {
        write!(f, "[array of {} {ty}: ", items.len())?;
    } else {
        f.write_str("[")?;
    }
    let shown = if abbreviate { ARRAY_HEAD } else { items.len() };
    for (i, x) in items.iter().take(shown).enumerate() {
        if i > 0 {
            f.write_str(", ")?;
        }
        each(f, x)?;
    }
    if abbreviate {
        f.write_str(", ... ]")
    } else {
        f.write_str("]")
    }
}

impl Display for Array {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        let full = f.alternate();
        let ty = self.elem_type_name();
        fn num<T: Display>(f: &mut Formatter<'_>, v: &T) -> fmt::Result {
            write!(f, "{v}")
        }
        fn float<T: fmt::Debug>(f: &mut Formatter<'_>, v: &T) -> fmt::Result {
            write!(f, "{v:?}")
        }
        match self {
            Array::U8(v) => write_elems(f, v, ty, full, num),
            Array::I8(v) => write_elems(f, v, ty, full, num),
            Array::U16(v) => write_elems(f, v, ty, full, num),
            Array::I16(v) => write_elems(f, v, ty, full, num),
            Array::U32(v) => write_elems(f, v, ty, full, num),
            Array::I32(v) => write_elems(f, v, ty, full, num),
            Array::U64(v) => write_elems(f, v, ty, full, num),
            Array::I64(v) => write_elems(f, v, ty, full, num),
            Array::F32(v) => write_elems(f, v, ty, full, float),
            Array::F64(v) => write_elems(f, v, ty, full, float),
            Array::Bool(v) => write_elems(f, v, ty, full, num),
            Array::String(v) => {
                let max = (!full).then_some(ELEM_STR_MAX);
                write_elems(f, v, ty, full, |f, s| write_string(f, s, max))
            }
            Array::Array(v) => write_elems(f, v, ty, full, |f, a| {
                if full { write!(f, "{a:#}") } else { a.fmt(f) }
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scalars() {
        assert_eq!(Value::U32(7).to_string(), "7");
        assert_eq!(Value::I8(-3).to_string(), "-3");
        assert_eq!(Value::F32(1.0).to_string(), "1.0");
        assert_eq!(Value::F64(1e-5).to_string(), "1e-5");
        assert_eq!(Value::Bool(false).to_string(), "false");
        assert_eq!(Value::from("a\"b\nc").to_string(), "\"a\\\"b\\nc\"");
        assert_eq!(Value::from("").to_string(), "\"\"");
        assert_eq!(Value::from("it's\t\u{7}").to_string(), "\"it's\\t\\u{7}\"");
    }

    #[test]
    fn long_string_is_cut() {
        let s: String = "é".repeat(100);
        let shown = Value::from(s.as_str()).to_string();
        assert_eq!(shown, format!("\"{}…\" (100 chars)", "é".repeat(80)));
        assert_eq!(format!("{:#}", Value::from(s.as_str())), format!("\"{s}\""));
        assert_eq!(
            Value::from("é".repeat(80)).to_string(),
            format!("\"{}\"", "é".repeat(80))
        );
    }

    #[test]
    fn arrays() {
        assert_eq!(Value::from(vec![1u8, 2, 3]).to_string(), "[1, 2, 3]");
        assert_eq!(Value::from(Vec::<String>::new()).to_string(), "[]");
        let toks: Vec<String> = (0..49152).map(|i| format!("<|t{i}|>")).collect();
        assert_eq!(
            Value::from(toks).to_string(),
            "[array of 49152 string: \"<|t0|>\", \"<|t1|>\", \"<|t2|>\", ... ]"
        );
        let nested = Array::Array(vec![Array::F32(vec![0.5]), Array::Bool(vec![true, false])]);
        assert_eq!(nested.to_string(), "[[0.5], [true, false]]");
        let long: Vec<i32> = (0..10).collect();
        assert_eq!(
            format!("{:#}", Value::from(long)),
            "[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]"
        );
    }
}
