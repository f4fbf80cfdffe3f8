//! [`GgufFile`]: a memory-mapped (or owned) GGUF file, parsed and validated in full when opened so
//! that every later access is infallible and zero-copy.

use crate::cursor::{Cursor, Loc, Place};
use crate::decode::read_value;
use crate::error::{GgufError, Result, escape_short};
use crate::tensor::{MAX_DIMS, TensorInfo, shape_bytes};
use crate::types::GgmlType;
use crate::value::Value;
use memmap2::Mmap;
use std::collections::HashMap;
use std::fmt;
use std::fs::File;
use std::path::Path;

/// Alignment of the data section and of every tensor when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// The metadata key that sets the alignment (a u32, a nonzero power of two).
pub const ALIGNMENT_KEY: &str = "general.alignment";

/// Smallest encoding of a key-value pair: key length, value type, a one-byte value.
const MIN_KV: u64 = 8 + 4 + 1;
/// Smallest encoding of a tensor info: name length, n_dims, one dim, type, offset.
const MIN_TENSOR: u64 = 8 + 4 + 8 + 4 + 8;
/// Memory alignment of the buffer [`GgufFile::from_bytes`] keeps.
const MEM_ALIGN: usize = 64;

/// The bytes of an open file.
enum Backing {
    Mmap(Mmap),
    /// `buf[start..]` is the file; `start` puts it at a [`MEM_ALIGN`]-aligned address.
    Owned {
        buf: Vec<u8>,
        start: usize,
    },
}

impl Backing {
    fn owned(bytes: Vec<u8>) -> Backing {
        if bytes.as_ptr().align_offset(MEM_ALIGN) == 0 {
            return Backing::Owned {
                buf: bytes,
                start: 0,
            };
        }
        let Some(cap) = bytes.len().checked_add(MEM_ALIGN) else {
            return Backing::Owned {
                buf: bytes,
                start: 0,
            };
        };
        let mut buf: Vec<u8> = Vec::with_capacity(cap);
        let start = buf.as_ptr().align_offset(MEM_ALIGN);
        let start = if start < MEM_ALIGN { start } else { 0 };
        // Within capacity: neither call reallocates, so the alignment holds.
        buf.resize(start, 0);
        buf.extend_from_slice(&bytes);
        Backing::Owned { buf, start }
    }

    fn bytes(&self) -> &[u8] {
        match self {
            Backing::Mmap(m) => m,
            Backing::Owned { buf, start } => buf.get(*start..).unwrap_or(&[]),
        }
    }
}

/// A GGUF file (versions 2 and 3, little endian), validated in full when opened:
/// every count, length, string, shape, type and offset has been checked against the file, so the
/// accessors cannot fail and [`GgufFile::tensor_data`] is a zero-copy slice.
///
/// Tensor data starts at an address aligned to the file's alignment, up to 64 bytes (memory maps
/// are page aligned; [`GgufFile::from_bytes`] copies into an aligned buffer when needed).
pub struct GgufFile {
    backing: Backing,
    version: u32,
    alignment: u64,
    data_offset: u64,
    metadata: Vec<(String, Value)>,
    key_index: HashMap<String, usize>,
    tensors: Vec<TensorInfo>,
    tensor_index: HashMap<String, usize>,
}

/// Everything parsed from the file's bytes.
struct Parsed {
    version: u32,
    alignment: u64,
    data_offset: u64,
    metadata: Vec<(String, Value)>,
    key_index: HashMap<String, usize>,
    tensors: Vec<TensorInfo>,
    tensor_index: HashMap<String, usize>,
}

impl GgufFile {
    /// Memory-maps and validates the file at `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<GgufFile> {
        let path = path.as_ref();
        let io = |op, source| GgufError::Io {
            path: escape_short(&path.display().to_string(), 200),
            op,
            source,
        };
        let file = File::open(path).map_err(|e| io("open", e))?;
        // SAFETY: `Mmap::map` is unsafe because the mapped file may be modified or truncated by
        // another process while mapped, which would change bytes we validated or make reads fault
        // (SIGBUS). Like every mmap-based model loader (llama.cpp, candle, safetensors), we accept
        // that: model files are not modified while in use. Within this process all access goes
        // through the `&[u8]` the map derefs to, and nothing writes to it.
        let map = unsafe { Mmap::map(&file) }.map_err(|e| io("mmap", e))?;
        Self::from_backing(Backing::Mmap(map))
    }

    /// Parses and validates a file held in memory (tests, fuzzing, small files).
    pub fn from_bytes(bytes: Vec<u8>) -> Result<GgufFile> {
        Self::from_backing(Backing::owned(bytes))
    }

    fn from_backing(backing: Backing) -> Result<GgufFile> {
        let p = parse(backing.bytes())?;
        Ok(GgufFile {
            backing,
            version: p.version,
            alignment: p.alignment,
            data_offset: p.data_offset,
            metadata: p.metadata,
            key_index: p.key_index,
            tensors: p.tensors,
            tensor_index: p.tensor_index,
        })
    }

    /// The format version: 2 or 3.
    pub fn version(&self) -> u32 {
        self.version
    }

    /// Alignment of the data section and of every tensor offset (`general.alignment`, default 32).
    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// Absolute file offset of the tensor data section. In a file without tensors this may lie
    /// past the end of the file (writers need not pad a file that holds no data).
    pub fn data_offset(&self) -> u64 {
        self.data_offset
    }

    /// Size of the file in bytes.
    pub fn file_size(&self) -> u64 {
        self.bytes().len() as u64
    }

    /// Metadata key-value pairs in file order.
    pub fn metadata(&self) -> &[(String, Value)] {
        &self.metadata
    }

    /// The value of a metadata key.
    pub fn get(&self, key: &str) -> Option<&Value> {
        let i = *self.key_index.get(key)?;
        self.metadata.get(i).map(|(_, v)| v)
    }

    /// The tensor directory in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// The tensor named `name`.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensors.get(*self.tensor_index.get(name)?)
    }

    /// The data of `t`: exactly `t.n_bytes` bytes, borrowed from the file.
    ///
    /// # Panics
    /// If `t` describes data outside this file, which can only happen when `t` did not come from
    /// this file's [`GgufFile::tensors`] (the directory was validated when the file was opened).
    pub fn tensor_data(&self, t: &TensorInfo) -> &[u8] {
        let range = self.data_offset.checked_add(t.offset).and_then(|start| {
            let end = start.checked_add(t.n_bytes)?;
            Some(usize::try_from(start).ok()?..usize::try_from(end).ok()?)
        });
        match range.and_then(|r| self.bytes().get(r)) {
            Some(data) => data,
            None => panic!(
                "gguf: tensor '{}' ({} bytes at data offset {}) lies outside this {}-byte file; \
                 was its TensorInfo taken from another file?",
                t.name,
                t.n_bytes,
                t.offset,
                self.file_size()
            ),
        }
    }

    /// The whole file.
    pub fn bytes(&self) -> &[u8] {
        self.backing.bytes()
    }
}

impl fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GgufFile")
            .field("version", &self.version)
            .field("file_size", &self.file_size())
            .field("alignment", &self.alignment)
            .field("data_offset", &self.data_offset)
            .field("n_metadata", &self.metadata.len())
            .field("n_tensors", &self.tensors.len())
            .finish()
    }
}

/// `x` rounded up to a multiple of `align` (a power of two), or `None` on overflow.
pub(crate) fn align_up(x: u64, align: u64) -> Option<u64> {
    let mask = align.checked_sub(1)?;
    Some(x.checked_add(mask)? & !mask)
}

/// The alignment a `general.alignment` value sets, or why it is invalid.
pub(crate) fn alignment_of(value: &Value) -> std::result::Result<u64, String> {
    match value {
        Value::U32(a) if a.is_power_of_two() => Ok(u64::from(*a)),
        Value::U32(a) => Err(format!("{ALIGNMENT_KEY} {a} is not a nonzero power of two")),
        other => Err(format!(
            "{ALIGNMENT_KEY} must be u32, found {}",
            other.type_name()
        )),
    }
}

fn parse(buf: &[u8]) -> Result<Parsed> {
    let mut cur = Cursor::new(buf);
    let header = Loc::new(Place::Header);
    let magic: [u8; 4] = cur.array(&header, "magic")?;
    if &magic != b"GGUF" {
        return Err(GgufError::BadMagic {
            found: format!("\"{}\"", magic.escape_ascii()),
        });
    }
    let version = cur.u32(&header, "version")?;
    let swapped = version.swap_bytes();
    match version {
        2 | 3 => {}
        v if v > 0xffff && (1..=0xffff).contains(&swapped) => {
            return Err(GgufError::BigEndian { raw: v, swapped });
        }
        v => return Err(GgufError::UnsupportedVersion { version: v }),
    }
    let tensor_count = cur.u64(&header, "tensor_count")?;
    let kv_count = cur.u64(&header, "kv_count")?;
    cur.check_count(
        tensor_count,
        MIN_TENSOR,
        &header,
        "tensor_count (at least 32 bytes per tensor)",
    )?;
    cur.check_count(
        kv_count,
        MIN_KV,
        &header,
        "kv_count (at least 13 bytes per key-value pair)",
    )?;
    // Both counts are now bounded by the file length, so these capacities are too.
    let kv_cap = usize::try_from(kv_count).unwrap_or(0);
    let tensor_cap = usize::try_from(tensor_count).unwrap_or(0);

    let mut metadata: Vec<(String, Value)> = Vec::with_capacity(kv_cap);
    let mut key_index = HashMap::with_capacity(kv_cap);
    let mut alignment = DEFAULT_ALIGNMENT;
    for i in 0..kv_count {
        let key = cur.string(
            &Loc::new(Place::Key {
                index: i,
                key: None,
            }),
            "key",
            "key length",
        )?;
        let mut loc = Loc::new(Place::Key {
            index: i,
            key: Some(key),
        });
        if let Some(&first) = key_index.get(key) {
            return Err(GgufError::DuplicateKey {
                at: loc.to_string(),
                first,
            });
        }
        let ty = cur.u32(&loc, "value type")?;
        let value = read_value(&mut cur, ty, &mut loc)?;
        if key == ALIGNMENT_KEY {
            alignment = alignment_of(&value).map_err(|m| loc.invalid(m))?;
        }
        key_index.insert(key.to_owned(), metadata.len());
        metadata.push((key.to_owned(), value));
    }

    let mut tensors = Vec::with_capacity(tensor_cap);
    let mut tensor_index = HashMap::with_capacity(tensor_cap);
    for i in 0..tensor_count {
        let name = cur.string(
            &Loc::new(Place::Tensor {
                index: i,
                name: None,
            }),
            "name",
            "name length",
        )?;
        let loc = Loc::new(Place::Tensor {
            index: i,
            name: Some(name),
        });
        if let Some(&first) = tensor_index.get(name) {
            return Err(GgufError::DuplicateTensor {
                at: loc.to_string(),
                first,
            });
        }
        let n_dims = cur.u32(&loc, "n_dims")?;
        if n_dims == 0 || n_dims as usize > MAX_DIMS {
            return Err(loc.invalid(format!("n_dims {n_dims} is not in 1..={MAX_DIMS}")));
        }
        let mut dims = Vec::with_capacity(n_dims as usize);
        for _ in 0..n_dims {
            dims.push(cur.u64(&loc, "dimension")?);
        }
        let id = cur.u32(&loc, "ggml type")?;
        let ty = GgmlType::from_id(id).ok_or_else(|| GgufError::UnknownGgmlType {
            at: loc.to_string(),
            id,
        })?;
        let offset = cur.u64(&loc, "offset")?;
        let n_bytes = shape_bytes(&dims, ty).map_err(|m| loc.invalid(m))?;
        if !offset.is_multiple_of(alignment) {
            return Err(loc.invalid(format!(
                "offset {offset} is not a multiple of alignment {alignment}"
            )));
        }
        tensor_index.insert(name.to_owned(), tensors.len());
        tensors.push(TensorInfo {
            name: name.to_owned(),
            dims,
            ty,
            offset,
            n_bytes,
        });
    }

    let header_end = cur.pos();
    let data_offset = align_up(header_end, alignment).ok_or_else(|| {
        header.invalid(format!(
            "data section offset {header_end} aligned to {alignment} overflows"
        ))
    })?;
    check_tensor_spans(&tensors, data_offset, buf.len() as u64)?;
    Ok(Parsed {
        version,
        alignment,
        data_offset,
        metadata,
        key_index,
        tensors,
        tensor_index,
    })
}

/// Every tensor's data lies within the file, and no two tensors overlap.
fn check_tensor_spans(tensors: &[TensorInfo], data_offset: u64, file_size: u64) -> Result<()> {
    let loc = |i: usize, t: &TensorInfo| {
        Loc::new(Place::Tensor {
            index: i as u64,
            name: Some(&t.name),
        })
        .to_string()
    };
    let mut spans = Vec::with_capacity(tensors.len());
    for (i, t) in tensors.iter().enumerate() {
        let end = data_offset
            .checked_add(t.offset)
            .and_then(|s| s.checked_add(t.n_bytes));
        match end {
            Some(end) if end <= file_size => spans.push((t.offset, i, t.offset + t.n_bytes)),
            _ => {
                return Err(GgufError::Invalid {
                    at: loc(i, t),
                    msg: format!(
                        "data at offset {} + {} bytes (data section at {data_offset}) extends past \
                         the end of the {file_size}-byte file",
                        t.offset, t.n_bytes
                    ),
                });
            }
        }
    }
    // By offset, then directory order: the later of two tensors is the one reported.
    spans.sort_unstable();
    for pair in spans.windows(2) {
        if let [(a_start, a, a_end), (b_start, b, b_end)] = *pair
            && b_start < a_end
            && let (Some(ta), Some(tb)) = (tensors.get(a), tensors.get(b))
        {
            return Err(GgufError::Invalid {
                at: loc(b, tb),
                msg: format!(
                    "data [{b_start}, {b_end}) overlaps tensor '{}' [{a_start}, {a_end}) (data offsets)",
                    escape_short(&ta.name, 80)
                ),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn send_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<GgufFile>();
    }

    #[test]
    fn align_up_works() {
        assert_eq!(align_up(0, 32), Some(0));
        assert_eq!(align_up(1, 32), Some(32));
        assert_eq!(align_up(64, 32), Some(64));
        assert_eq!(align_up(u64::MAX, 32), None);
    }

    #[test]
    fn alignment_values() {
        assert_eq!(alignment_of(&Value::U32(64)), Ok(64));
        assert!(alignment_of(&Value::U32(0)).is_err());
        assert!(alignment_of(&Value::U32(48)).is_err());
        assert!(alignment_of(&Value::U64(32)).is_err());
    }

    #[test]
    fn owned_buffer_is_aligned() {
        for pad in 0..3 {
            let v = vec![7u8; 100 + pad];
            let b = Backing::owned(v.clone());
            assert_eq!(b.bytes(), &v[..]);
            assert_eq!(b.bytes().as_ptr().align_offset(MEM_ALIGN), 0);
        }
    }
}
