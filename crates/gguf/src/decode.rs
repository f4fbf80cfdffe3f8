//! Decoding metadata values from file bytes. Every count is checked against the bytes left in the
//! file (times the smallest size an element can take) before anything is allocated, and arrays
//! nest at most [`MAX_DEPTH`] levels, so hostile counts fail fast with small allocations.

use crate::cursor::{Cursor, Loc, MAX_DEPTH};
use crate::error::{GgufError, Result};
use crate::value::{Array, Value, tag};

/// Smallest encoding of a string: its u64 length.
const MIN_STRING: u64 = 8;
/// Smallest encoding of an inner array: u32 element type and u64 count.
const MIN_ARRAY: u64 = 12;

/// Reads one value of GGUF type `ty` (a metadata value, not an array element).
pub(crate) fn read_value(cur: &mut Cursor<'_>, ty: u32, loc: &mut Loc<'_>) -> Result<Value> {
    const F: &str = "value";
    Ok(match ty {
        tag::U8 => Value::U8(u8::from_le_bytes(cur.array(loc, F)?)),
        tag::I8 => Value::I8(i8::from_le_bytes(cur.array(loc, F)?)),
        tag::U16 => Value::U16(u16::from_le_bytes(cur.array(loc, F)?)),
        tag::I16 => Value::I16(i16::from_le_bytes(cur.array(loc, F)?)),
        tag::U32 => Value::U32(u32::from_le_bytes(cur.array(loc, F)?)),
        tag::I32 => Value::I32(i32::from_le_bytes(cur.array(loc, F)?)),
        tag::U64 => Value::U64(u64::from_le_bytes(cur.array(loc, F)?)),
        tag::I64 => Value::I64(i64::from_le_bytes(cur.array(loc, F)?)),
        tag::F32 => Value::F32(f32::from_le_bytes(cur.array(loc, F)?)),
        tag::F64 => Value::F64(f64::from_le_bytes(cur.array(loc, F)?)),
        tag::BOOL => Value::Bool(to_bool(cur.u8(loc, F)?, loc)?),
        tag::STRING => Value::String(cur.string(loc, "string value", "string length")?.to_owned()),
        tag::ARRAY => Value::Array(read_array(cur, loc)?),
        id => {
            return Err(GgufError::UnknownValueType {
                at: loc.to_string(),
                field: "value type",
                id,
            });
        }
    })
}

fn to_bool(b: u8, loc: &Loc<'_>) -> Result<bool> {
    match b {
        0 => Ok(false),
        1 => Ok(true),
        _ => Err(loc.invalid(format!("bool value {b} is neither 0 nor 1"))),
    }
}

/// Reads a fixed-size numeric array of `count` elements.
macro_rules! numeric {
    ($cur:expr, $loc:expr, $count:expr, $t:ty, $var:ident, $size:literal) => {{
        const SIZE: usize = $size;
        const _: () = assert!(SIZE == std::mem::size_of::<$t>());
        const FIELD: &str = concat!(
            "array count (of ",
            stringify!($t),
            ", ",
            $size,
            " bytes each)"
        );
        $cur.check_count($count, SIZE as u64, $loc, FIELD)?;
        // check_count bounded count * SIZE by the file length: no overflow.
        let bytes = $cur.take($count.saturating_mul(SIZE as u64), $loc, "array data")?;
        let (chunks, _) = bytes.as_chunks::<SIZE>();
        Array::$var(chunks.iter().map(|c| <$t>::from_le_bytes(*c)).collect())
    }};
}

/// Reads an array (element type, count, elements) at the current position.
fn read_array(cur: &mut Cursor<'_>, loc: &mut Loc<'_>) -> Result<Array> {
    if loc.depth() >= MAX_DEPTH {
        return Err(loc.invalid(format!("arrays nested more than {MAX_DEPTH} levels deep")));
    }
    let ety = cur.u32(loc, "array element type")?;
    let count = cur.u64(loc, "array count")?;
    Ok(match ety {
        tag::U8 => numeric!(cur, loc, count, u8, U8, 1),
        tag::I8 => numeric!(cur, loc, count, i8, I8, 1),
        tag::U16 => numeric!(cur, loc, count, u16, U16, 2),
        tag::I16 => numeric!(cur, loc, count, i16, I16, 2),
        tag::U32 => numeric!(cur, loc, count, u32, U32, 4),
        tag::I32 => numeric!(cur, loc, count, i32, I32, 4),
        tag::U64 => numeric!(cur, loc, count, u64, U64, 8),
        tag::I64 => numeric!(cur, loc, count, i64, I64, 8),
        tag::F32 => numeric!(cur, loc, count, f32, F32, 4),
        tag::F64 => numeric!(cur, loc, count, f64, F64, 8),
        tag::BOOL => {
            cur.check_count(count, 1, loc, "array count (of bool, 1 byte each)")?;
            let bytes = cur.take(count, loc, "array data")?;
            let mut out = Vec::with_capacity(bytes.len());
            loc.enter();
            for (i, &b) in bytes.iter().enumerate() {
                loc.set_index(i as u64);
                out.push(to_bool(b, loc)?);
            }
            loc.leave();
            Array::Bool(out)
        }
        tag::STRING => {
            cur.check_count(
                count,
                MIN_STRING,
                loc,
                "array count (of string, at least 8 bytes each)",
            )?;
            let mut out = Vec::with_capacity(bounded_capacity(count));
            loc.enter();
            for i in 0..count {
                loc.set_index(i);
                out.push(cur.string(loc, "string", "string length")?.to_owned());
            }
            loc.leave();
            Array::String(out)
        }
        tag::ARRAY => {
            cur.check_count(
                count,
                MIN_ARRAY,
                loc,
                "array count (of array, at least 12 bytes each)",
            )?;
            let mut out = Vec::with_capacity(bounded_capacity(count));
            loc.enter();
            for i in 0..count {
                loc.set_index(i);
                out.push(read_array(cur, loc)?);
            }
            loc.leave();
            Array::Array(out)
        }
        id => {
            return Err(GgufError::UnknownValueType {
                at: loc.to_string(),
                field: "array element type",
                id,
            });
        }
    })
}

/// A capacity for `count` elements; callers have already bounded `count` by the file length.
fn bounded_capacity(count: u64) -> usize {
    usize::try_from(count).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cursor::Place;

    fn read(bytes: &[u8], ty: u32) -> Result<Value> {
        let mut cur = Cursor::new(bytes);
        let mut loc = Loc::new(Place::Key {
            index: 0,
            key: Some("k"),
        });
        read_value(&mut cur, ty, &mut loc)
    }

    #[test]
    fn scalars_and_bools() {
        assert_eq!(read(&[0xff, 0xff], tag::I16).unwrap(), Value::I16(-1));
        assert_eq!(read(&[1], tag::BOOL).unwrap(), Value::Bool(true));
        let e = read(&[2], tag::BOOL).unwrap_err().to_string();
        assert_eq!(
            e,
            "gguf: metadata key #0 (\"k\"): bool value 2 is neither 0 nor 1"
        );
        assert!(read(&[0; 3], tag::F32).is_err());
        assert!(read(&[0; 3], 13).is_err());
    }

    #[test]
    fn array_counts_are_bounded() {
        let mut b = tag::U32.to_le_bytes().to_vec();
        b.extend(1000u64.to_le_bytes());
        b.extend([0u8; 3000]);
        let e = read(&b, tag::ARRAY).unwrap_err().to_string();
        assert_eq!(
            e,
            "gguf: metadata key #0 (\"k\"): array count (of u32, 4 bytes each) 1000 exceeds remaining 3000 bytes of file"
        );
    }

    #[test]
    fn nested_element_errors_name_the_element() {
        // array of 1 array of 2 strings, the second with a bad length.
        let mut b = tag::ARRAY.to_le_bytes().to_vec();
        b.extend(1u64.to_le_bytes());
        b.extend(tag::STRING.to_le_bytes());
        b.extend(2u64.to_le_bytes());
        b.extend(1u64.to_le_bytes());
        b.push(b'a');
        b.extend(u64::MAX.to_le_bytes());
        let e = read(&b, tag::ARRAY).unwrap_err().to_string();
        assert_eq!(
            e,
            "gguf: metadata key #0 (\"k\"), element [0][1]: string length 18446744073709551615 exceeds remaining 0 bytes of file"
        );
    }

    #[test]
    fn depth_is_bounded() {
        let mut b = Vec::new();
        for _ in 0..MAX_DEPTH {
            b.extend(tag::ARRAY.to_le_bytes());
            b.extend(1u64.to_le_bytes());
        }
        b.extend(tag::U8.to_le_bytes());
        b.extend(0u64.to_le_bytes());
        let e = read(&b, tag::ARRAY).unwrap_err().to_string();
        assert!(e.contains("nested more than 8 levels"), "{e}");
        // One level less is fine.
        assert!(read(&b[12..], tag::ARRAY).is_ok());
    }
}
