//! [`GgufWriter`]: writes a GGUF v3 file in one pass, tensor by tensor, so a quantizer never holds
//! more than one tensor (or one chunk of it) in memory.

use crate::cursor::MAX_DEPTH;
use crate::error::{GgufError, Result, escape_short};
use crate::reader::{ALIGNMENT_KEY, DEFAULT_ALIGNMENT, align_up, alignment_of};
use crate::tensor::{TensorSpec, shape_bytes};
use crate::value::{Array, Value};
use std::collections::HashSet;
use std::io::Write;

/// The version this writer produces.
pub const WRITE_VERSION: u32 = 3;

/// Zeros for padding; alignments above this size are padded in several writes.
const ZEROS: [u8; 256] = [0; 256];

/// One planned tensor: where its data goes and how big it is.
#[derive(Debug)]
struct Planned {
    name: String,
    offset: u64,
    n_bytes: u64,
}

/// Streams a GGUF v3 file (little endian): [`GgufWriter::new`] writes the header, metadata and
/// tensor directory; then [`GgufWriter::write_tensor`] (or [`GgufWriter::write_tensor_chunk`])
/// is called for each tensor in directory order; [`GgufWriter::finish`] checks and flushes.
///
/// Writes go straight to `W`, mostly in large pieces; wrap a `File` in a `BufWriter` if the
/// tensor chunks you pass are small.
#[derive(Debug)]
pub struct GgufWriter<W: Write> {
    w: W,
    alignment: u64,
    data_offset: u64,
    tensors: Vec<Planned>,
    /// Index of the tensor being written.
    next: usize,
    /// Bytes of tensor `next` written so far.
    written: u64,
}

impl<W: Write> GgufWriter<W> {
    /// Writes header, metadata (in the given order) and the tensor directory (offsets computed
    /// from the sizes with the alignment: 32, or `general.alignment` if the metadata holds it,
    /// which must be a u32 power of two), then padding up to the data section.
    ///
    /// Fails without writing anything if a key or tensor name repeats, a shape is invalid for
    /// its type (see [`TensorSpec::n_bytes`]) or arrays nest more than 8 levels deep: the writer
    /// never produces a file its reader would reject.
    pub fn new(mut w: W, metadata: &[(String, Value)], tensors: &[TensorSpec]) -> Result<Self> {
        let mut alignment = DEFAULT_ALIGNMENT;
        let mut keys = HashSet::with_capacity(metadata.len());
        for (key, value) in metadata {
            let at = || format!("writer: metadata key \"{}\"", escape_short(key, 80));
            if !keys.insert(key.as_str()) {
                return Err(GgufError::Invalid {
                    at: at(),
                    msg: "duplicate metadata key".into(),
                });
            }
            if key == ALIGNMENT_KEY {
                alignment =
                    alignment_of(value).map_err(|msg| GgufError::Invalid { at: at(), msg })?;
            }
            if let Value::Array(a) = value
                && a.depth() > MAX_DEPTH
            {
                let msg = format!("arrays nested more than {MAX_DEPTH} levels deep");
                return Err(GgufError::Invalid { at: at(), msg });
            }
        }

        let mut names = HashSet::with_capacity(tensors.len());
        let mut planned = Vec::with_capacity(tensors.len());
        let mut offset = 0u64;
        for t in tensors {
            let invalid = |msg| GgufError::Invalid {
                at: format!("writer: tensor '{}'", escape_short(&t.name, 80)),
                msg,
            };
            if !names.insert(t.name.as_str()) {
                return Err(invalid("duplicate tensor name".into()));
            }
            let n_bytes = shape_bytes(&t.dims, t.ty).map_err(invalid)?;
            planned.push(Planned {
                name: t.name.clone(),
                offset,
                n_bytes,
            });
            offset = offset
                .checked_add(n_bytes)
                .and_then(|end| align_up(end, alignment))
                .ok_or_else(|| invalid("data section size overflows u64".into()))?;
        }

        let mut buf = Vec::new();
        buf.extend_from_slice(b"GGUF");
        buf.extend_from_slice(&WRITE_VERSION.to_le_bytes());
        put_u64(&mut buf, tensors.len() as u64);
        put_u64(&mut buf, metadata.len() as u64);
        for (key, value) in metadata {
            put_str(&mut buf, key);
            buf.extend_from_slice(&value.tag().to_le_bytes());
            put_value(&mut buf, value);
        }
        for (t, p) in tensors.iter().zip(&planned) {
            put_str(&mut buf, &t.name);
            buf.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
            for &d in &t.dims {
                put_u64(&mut buf, d);
            }
            buf.extend_from_slice(&t.ty.id().to_le_bytes());
            put_u64(&mut buf, p.offset);
        }
        let header_len = buf.len() as u64;
        let data_offset = align_up(header_len, alignment).unwrap_or(header_len);
        w.write_all(&buf).map_err(|source| GgufError::Write {
            what: "header".into(),
            source,
        })?;
        write_zeros(&mut w, data_offset - header_len).map_err(|source| GgufError::Write {
            what: "header padding".into(),
            source,
        })?;
        Ok(GgufWriter {
            w,
            alignment,
            data_offset,
            tensors: planned,
            next: 0,
            written: 0,
        })
    }

    /// The alignment in use.
    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// Absolute file offset of the data section.
    pub fn data_offset(&self) -> u64 {
        self.data_offset
    }

    /// Data of the next tensor in directory order, all at once: its length must equal the
    /// tensor's size. Pads to the alignment.
    pub fn write_tensor(&mut self, data: &[u8]) -> Result<()> {
        let n_bytes = self.current()?.n_bytes;
        if self.written != 0 {
            let msg = format!(
                "{} of its {n_bytes} bytes were already written with write_tensor_chunk",
                self.written
            );
            return Err(self.misuse(msg));
        }
        if data.len() as u64 != n_bytes {
            return Err(self.misuse(format!("data is {} bytes, expected {n_bytes}", data.len())));
        }
        self.write_tensor_chunk(data)
    }

    /// The next piece of the current tensor's data. Once the tensor's size is reached, pads to
    /// the alignment and moves on to the next tensor. A piece may not run past the tensor's end.
    pub fn write_tensor_chunk(&mut self, data: &[u8]) -> Result<()> {
        let (n_bytes, offset) = self.current().map(|p| (p.n_bytes, p.offset))?;
        let total = self
            .written
            .checked_add(data.len() as u64)
            .filter(|&t| t <= n_bytes);
        let Some(total) = total else {
            let msg = format!(
                "{} more bytes after {} would exceed its size {n_bytes}",
                data.len(),
                self.written
            );
            return Err(self.misuse(msg));
        };
        if let Err(source) = self.w.write_all(data) {
            return Err(GgufError::Write {
                what: self.current_name() + " data",
                source,
            });
        }
        self.written = total;
        if total == n_bytes {
            let end = offset.saturating_add(n_bytes);
            let pad = align_up(end, self.alignment).unwrap_or(end) - end;
            if let Err(source) = write_zeros(&mut self.w, pad) {
                return Err(GgufError::Write {
                    what: self.current_name() + " padding",
                    source,
                });
            }
            self.next += 1;
            self.written = 0;
        }
        Ok(())
    }

    /// Checks that every tensor was written in full, flushes, and returns the inner writer.
    pub fn finish(mut self) -> Result<W> {
        if let Some(p) = self.tensors.get(self.next) {
            return Err(GgufError::Invalid {
                at: "writer: finish".into(),
                msg: format!(
                    "{} of {} tensors written; tensor '{}' has {} of {} bytes",
                    self.next,
                    self.tensors.len(),
                    escape_short(&p.name, 80),
                    self.written,
                    p.n_bytes
                ),
            });
        }
        self.w.flush().map_err(|source| GgufError::Write {
            what: "flush".into(),
            source,
        })?;
        Ok(self.w)
    }

    /// `tensor 'name'` for the tensor being written.
    fn current_name(&self) -> String {
        let name = self.tensors.get(self.next).map_or("", |p| p.name.as_str());
        format!("tensor '{}'", escape_short(name, 80))
    }

    /// Misuse of the writer while writing the current tensor.
    fn misuse(&self, msg: String) -> GgufError {
        GgufError::Invalid {
            at: format!("writer: {}", self.current_name()),
            msg,
        }
    }

    fn current(&self) -> Result<&Planned> {
        self.tensors
            .get(self.next)
            .ok_or_else(|| GgufError::Invalid {
                at: "writer: write_tensor".into(),
                msg: format!("all {} tensors were already written", self.tensors.len()),
            })
    }
}

fn write_zeros<W: Write>(w: &mut W, mut n: u64) -> std::io::Result<()> {
    while n > 0 {
        let k = n.min(ZEROS.len() as u64);
        w.write_all(ZEROS.get(..k as usize).unwrap_or(&ZEROS))?;
        n -= k;
    }
    Ok(())
}

fn put_u64(buf: &mut Vec<u8>, v: u64) {
    buf.extend_from_slice(&v.to_le_bytes());
}

fn put_str(buf: &mut Vec<u8>, s: &str) {
    put_u64(buf, s.len() as u64);
    buf.extend_from_slice(s.as_bytes());
}

/// Encodes a value's payload (the type tag is written by the caller).
fn put_value(buf: &mut Vec<u8>, v: &Value) {
    match v {
        Value::U8(x) => buf.push(*x),
        Value::I8(x) => buf.extend_from_slice(&x.to_le_bytes()),
        Value::U16(x) => buf.extend_from_slice(&x.to_le_bytes()),
        Value::I16(x) => buf.extend_from_slice(&x.to_le_bytes()),
        Value::U32(x) => buf.extend_from_slice(&x.to_le_bytes()),
        Value::I32(x) => buf.extend_from_slice(&x.to_le_bytes()),
        Value::U64(x) => buf.extend_from_slice(&x.to_le_bytes()),
        Value::I64(x) => buf.extend_from_slice(&x.to_le_bytes()),
        Value::F32(x) => buf.extend_from_slice(&x.to_le_bytes()),
        Value::F64(x) => buf.extend_from_slice(&x.to_le_bytes()),
        Value::Bool(x) => buf.push(u8::from(*x)),
        Value::String(s) => put_str(buf, s),
        Value::Array(a) => put_array(buf, a),
    }
}

/// Encodes an array: element type, count, elements.
fn put_array(buf: &mut Vec<u8>, a: &Array) {
    buf.extend_from_slice(&a.elem_tag().to_le_bytes());
    put_u64(buf, a.len() as u64);
    macro_rules! each {
        ($v:expr) => {
            for x in $v {
                buf.extend_from_slice(&x.to_le_bytes());
            }
        };
    }
    match a {
        Array::U8(v) => buf.extend_from_slice(v),
        Array::I8(v) => each!(v),
        Array::U16(v) => each!(v),
        Array::I16(v) => each!(v),
        Array::U32(v) => each!(v),
        Array::I32(v) => each!(v),
        Array::U64(v) => each!(v),
        Array::I64(v) => each!(v),
        Array::F32(v) => each!(v),
        Array::F64(v) => each!(v),
        Array::Bool(v) => buf.extend(v.iter().map(|&b| u8::from(b))),
        Array::String(v) => v.iter().for_each(|s| put_str(buf, s)),
        Array::Array(v) => v.iter().for_each(|inner| put_array(buf, inner)),
    }
}
