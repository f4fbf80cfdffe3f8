//! A copy of a GGUF file with its metadata edited and its tensors' bytes patched: the shapes and
//! types stay, so the result describes the same tensors (used to build deliberately broken model
//! files for tests, and to change a file's metadata).

use crate::error::Result;
use crate::reader::GgufFile;
use crate::tensor::TensorSpec;
use crate::value::Value;
use crate::writer::GgufWriter;

/// `f` rewritten: `edit` applied to its metadata (key, value) list, `patch` to each tensor's
/// data (by tensor name; the length must stay).
pub fn rewrite(
    f: &GgufFile,
    edit: impl FnOnce(&mut Vec<(String, Value)>),
    patch: impl Fn(&str, &mut Vec<u8>),
) -> Result<Vec<u8>> {
    let mut md = f.metadata().to_vec();
    edit(&mut md);
    let specs: Vec<TensorSpec> = f
        .tensors()
        .iter()
        .map(|t| TensorSpec::new(t.name.clone(), t.dims.clone(), t.ty))
        .collect();
    let mut w = GgufWriter::new(Vec::new(), &md, &specs)?;
    for t in f.tensors() {
        let mut data = f.tensor_data(t).to_vec();
        patch(&t.name, &mut data);
        w.write_tensor(&data)?;
    }
    w.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::GgmlType;

    #[test]
    fn edits_metadata_and_patches_tensors() {
        let md = vec![("a".to_string(), Value::U32(1))];
        let specs = [TensorSpec::new("t".to_string(), vec![4u64], GgmlType::F32)];
        let mut w = GgufWriter::new(Vec::new(), &md, &specs).unwrap();
        w.write_tensor(&[0u8; 16]).unwrap();
        let f = GgufFile::from_bytes(w.finish().unwrap()).unwrap();
        let out = rewrite(
            &f,
            |md| md.push(("b".into(), Value::String("x".into()))),
            |name, data| {
                assert_eq!(name, "t");
                data[0] = 7;
            },
        )
        .unwrap();
        let g = GgufFile::from_bytes(out).unwrap();
        assert_eq!(g.metadata().len(), 2);
        assert_eq!(g.tensor_data(&g.tensors()[0])[0], 7);
    }
}
