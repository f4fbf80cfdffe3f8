//! Metadata values: [`Value`] (one typed value) and [`Array`] (a homogeneous, possibly nested
//! array), their GGUF type ids, and typed accessors. Human display lives in `display.rs`.

/// GGUF metadata value type ids as stored in files.
pub(crate) mod tag {
    pub const U8: u32 = 0;
    pub const I8: u32 = 1;
    pub const U16: u32 = 2;
    pub const I16: u32 = 3;
    pub const U32: u32 = 4;
    pub const I32: u32 = 5;
    pub const F32: u32 = 6;
    pub const BOOL: u32 = 7;
    pub const STRING: u32 = 8;
    pub const ARRAY: u32 = 9;
    pub const U64: u32 = 10;
    pub const I64: u32 = 11;
    pub const F64: u32 = 12;
}

/// One metadata value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    U64(u64),
    I64(i64),
    F32(f32),
    F64(f64),
    Bool(bool),
    String(String),
    Array(Array),
}

/// A metadata array: every element has the same type. Arrays of arrays hold inner arrays that may
/// each have their own element type.
#[derive(Clone, Debug, PartialEq)]
pub enum Array {
    U8(Vec<u8>),
    I8(Vec<i8>),
    U16(Vec<u16>),
    I16(Vec<i16>),
    U32(Vec<u32>),
    I32(Vec<i32>),
    U64(Vec<u64>),
    I64(Vec<i64>),
    F32(Vec<f32>),
    F64(Vec<f64>),
    Bool(Vec<bool>),
    String(Vec<String>),
    Array(Vec<Array>),
}

impl Value {
    /// Any integer type holding a value >= 0.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::U8(v) => Some(v.into()),
            Value::U16(v) => Some(v.into()),
            Value::U32(v) => Some(v.into()),
            Value::U64(v) => Some(v),
            Value::I8(v) => u64::try_from(v).ok(),
            Value::I16(v) => u64::try_from(v).ok(),
            Value::I32(v) => u64::try_from(v).ok(),
            Value::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// Any integer type holding a value that fits in an `i64`.
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            Value::U8(v) => Some(v.into()),
            Value::U16(v) => Some(v.into()),
            Value::U32(v) => Some(v.into()),
            Value::U64(v) => i64::try_from(v).ok(),
            Value::I8(v) => Some(v.into()),
            Value::I16(v) => Some(v.into()),
            Value::I32(v) => Some(v.into()),
            Value::I64(v) => Some(v),
            _ => None,
        }
    }

    /// Any numeric type (integers converted, possibly rounding above 2^53).
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::F32(v) => Some(v.into()),
            Value::F64(v) => Some(v),
            Value::U64(v) => Some(v as f64),
            Value::I64(v) => Some(v as f64),
            _ => self.as_i64().map(|v| v as f64),
        }
    }

    /// Any numeric type, as `f32` (an `f32` value exactly, others rounded).
    pub fn as_f32(&self) -> Option<f32> {
        match *self {
            Value::F32(v) => Some(v),
            _ => self.as_f64().map(|v| v as f32),
        }
    }

    /// A `bool` value.
    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            Value::Bool(v) => Some(v),
            _ => None,
        }
    }

    /// A string value.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    /// An array value.
    pub fn as_array(&self) -> Option<&Array> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }

    /// The type as written in messages: `u32`, `string`, `array[string]`, `array[array]`, ...
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::U8(_) => "u8",
            Value::I8(_) => "i8",
            Value::U16(_) => "u16",
            Value::I16(_) => "i16",
            Value::U32(_) => "u32",
            Value::I32(_) => "i32",
            Value::U64(_) => "u64",
            Value::I64(_) => "i64",
            Value::F32(_) => "f32",
            Value::F64(_) => "f64",
            Value::Bool(_) => "bool",
            Value::String(_) => "string",
            Value::Array(a) => match a {
                Array::U8(_) => "array[u8]",
                Array::I8(_) => "array[i8]",
                Array::U16(_) => "array[u16]",
                Array::I16(_) => "array[i16]",
                Array::U32(_) => "array[u32]",
                Array::I32(_) => "array[i32]",
                Array::U64(_) => "array[u64]",
                Array::I64(_) => "array[i64]",
                Array::F32(_) => "array[f32]",
                Array::F64(_) => "array[f64]",
                Array::Bool(_) => "array[bool]",
                Array::String(_) => "array[string]",
                Array::Array(_) => "array[array]",
            },
        }
    }

    /// The GGUF value type id.
    pub(crate) fn tag(&self) -> u32 {
        match self {
            Value::U8(_) => tag::U8,
            Value::I8(_) => tag::I8,
            Value::U16(_) => tag::U16,
            Value::I16(_) => tag::I16,
            Value::U32(_) => tag::U32,
            Value::I32(_) => tag::I32,
            Value::U64(_) => tag::U64,
            Value::I64(_) => tag::I64,
            Value::F32(_) => tag::F32,
            Value::F64(_) => tag::F64,
            Value::Bool(_) => tag::BOOL,
            Value::String(_) => tag::STRING,
            Value::Array(_) => tag::ARRAY,
        }
    }
}

impl Array {
    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            Array::U8(v) => v.len(),
            Array::I8(v) => v.len(),
            Array::U16(v) => v.len(),
            Array::I16(v) => v.len(),
            Array::U32(v) => v.len(),
            Array::I32(v) => v.len(),
            Array::U64(v) => v.len(),
            Array::I64(v) => v.len(),
            Array::F32(v) => v.len(),
            Array::F64(v) => v.len(),
            Array::Bool(v) => v.len(),
            Array::String(v) => v.len(),
            Array::Array(v) => v.len(),
        }
    }

    /// True when the array has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The elements of a string array.
    pub fn as_strings(&self) -> Option<&[String]> {
        match self {
            Array::String(v) => Some(v),
            _ => None,
        }
    }

    /// The elements of an `f32` array.
    pub fn as_f32s(&self) -> Option<&[f32]> {
        match self {
            Array::F32(v) => Some(v),
            _ => None,
        }
    }

    /// The elements of an `i32` array.
    pub fn as_i32s(&self) -> Option<&[i32]> {
        match self {
            Array::I32(v) => Some(v),
            _ => None,
        }
    }

    /// The elements of a `u32` array.
    pub fn as_u32s(&self) -> Option<&[u32]> {
        match self {
            Array::U32(v) => Some(v),
            _ => None,
        }
    }

    /// The elements of an array of arrays.
    pub fn as_arrays(&self) -> Option<&[Array]> {
        match self {
            Array::Array(v) => Some(v),
            _ => None,
        }
    }

    /// The element type as written in messages: `u8`, ..., `string`, `array`.
    pub fn elem_type_name(&self) -> &'static str {
        match self {
            Array::U8(_) => "u8",
            Array::I8(_) => "i8",
            Array::U16(_) => "u16",
            Array::I16(_) => "i16",
            Array::U32(_) => "u32",
            Array::I32(_) => "i32",
            Array::U64(_) => "u64",
            Array::I64(_) => "i64",
            Array::F32(_) => "f32",
            Array::F64(_) => "f64",
            Array::Bool(_) => "bool",
            Array::String(_) => "string",
            Array::Array(_) => "array",
        }
    }

    /// The GGUF value type id of the elements.
    pub(crate) fn elem_tag(&self) -> u32 {
        match self {
            Array::U8(_) => tag::U8,
            Array::I8(_) => tag::I8,
            Array::U16(_) => tag::U16,
            Array::I16(_) => tag::I16,
            Array::U32(_) => tag::U32,
            Array::I32(_) => tag::I32,
            Array::U64(_) => tag::U64,
            Array::I64(_) => tag::I64,
            Array::F32(_) => tag::F32,
            Array::F64(_) => tag::F64,
            Array::Bool(_) => tag::BOOL,
            Array::String(_) => tag::STRING,
            Array::Array(_) => tag::ARRAY,
        }
    }

    /// Nesting depth: 1 for an array of scalars, 1 + the deepest inner array otherwise.
    pub(crate) fn depth(&self) -> usize {
        match self {
            Array::Array(v) => 1 + v.iter().map(Array::depth).max().unwrap_or(0),
            _ => 1,
        }
    }
}

macro_rules! from_impls {
    ($($t:ty => $var:ident),* $(,)?) => {$(
        impl From<$t> for Value {
            fn from(v: $t) -> Self {
                Value::$var(v)
            }
        }
        impl From<Vec<$t>> for Array {
            fn from(v: Vec<$t>) -> Self {
                Array::$var(v)
            }
        }
        impl From<Vec<$t>> for Value {
            fn from(v: Vec<$t>) -> Self {
                Value::Array(Array::$var(v))
            }
        }
    )*};
}

from_impls!(u8 => U8, i8 => I8, u16 => U16, i16 => I16, u32 => U32, i32 => I32, u64 => U64, i64 => I64,
    f32 => F32, f64 => F64, bool => Bool, String => String);

impl From<&str> for Value {
    fn from(v: &str) -> Self {
        Value::String(v.to_string())
    }
}

impl From<Array> for Value {
    fn from(v: Array) -> Self {
        Value::Array(v)
    }
}

impl From<Vec<Array>> for Array {
    fn from(v: Vec<Array>) -> Self {
        Array::Array(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integer_accessors() {
        assert_eq!(Value::I8(-1).as_u64(), None);
        assert_eq!(Value::I32(7).as_u64(), Some(7));
        assert_eq!(Value::U64(u64::MAX).as_i64(), None);
        assert_eq!(Value::U64(5).as_i64(), Some(5));
        assert_eq!(Value::I64(-5).as_i64(), Some(-5));
        assert_eq!(Value::F32(1.5).as_u64(), None);
        assert_eq!(Value::Bool(true).as_u64(), None);
    }

    #[test]
    fn float_and_other_accessors() {
        assert_eq!(Value::U16(3).as_f64(), Some(3.0));
        assert_eq!(Value::F64(0.25).as_f32(), Some(0.25));
        assert_eq!(Value::F32(1e-5).as_f32(), Some(1e-5));
        assert_eq!(Value::String("x".into()).as_f64(), None);
        assert_eq!(Value::Bool(true).as_bool(), Some(true));
        assert_eq!(Value::from("hi").as_str(), Some("hi"));
        let a = Value::from(vec![1i32, 2]);
        assert_eq!(a.as_array().and_then(Array::as_i32s), Some(&[1, 2][..]));
        assert_eq!(a.type_name(), "array[i32]");
    }

    #[test]
    fn array_shape() {
        let a = Array::Array(vec![
            Array::Array(vec![Array::U8(vec![])]),
            Array::F32(vec![1.0]),
        ]);
        assert_eq!(a.depth(), 3);
        assert_eq!(a.len(), 2);
        assert!(!a.is_empty());
        assert_eq!(a.elem_type_name(), "array");
        assert!(Array::String(vec![]).is_empty());
        assert_eq!(Value::Array(a).type_name(), "array[array]");
    }
}
