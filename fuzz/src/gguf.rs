//! Target `gguf`: the bytes as a GGUF file, read the way `molla inspect` and model loading do.

use std::fmt::Write;

/// Parses `data`; when it parses, prints every metadata value and tensor (as `molla inspect`
/// does), slices every tensor's data, and builds the tokenizer, the model and its chat template.
pub fn run(data: &[u8]) {
    let Ok(file) = ::gguf::GgufFile::from_bytes(data.to_vec()) else {
        return;
    };
    let mut sink = String::new();
    for (key, value) in file.metadata() {
        let _ = write!(sink, "{key} = {value} / {value:#}");
        let _ = (
            value.as_u64(),
            value.as_i64(),
            value.as_f64(),
            value.as_str(),
        );
        if let Some(a) = value.as_array() {
            let _ = (a.len(), a.as_strings(), a.as_f32s(), a.elem_type_name());
        }
        sink.clear();
    }
    for t in file.tensors() {
        let _ = write!(sink, "{t}");
        let bytes = file.tensor_data(t);
        assert_eq!(bytes.len() as u64, t.n_bytes, "tensor {}", t.name);
        let _ = (t.n_elements(), t.row_len(), t.n_rows(), t.row_bytes());
        sink.clear();
    }
    let _ = format!("{file:?}");
    let tok = ::tokenizer::Tokenizer::from_gguf(&file).ok();
    if let Some(tok) = &tok {
        let ids = tok.encode("Hello <|im_start|>world<|im_end|> 123 ÿ", true, true);
        assert!(ids.iter().all(|&id| (id as usize) < tok.n_vocab()));
        let _ = tok.decode(&ids);
    }
    let Ok(model) = ::model::Model::from_file(file) else {
        return;
    };
    let _ = model.describe();
    if let Some(tok) = &tok
        && let Ok(t) = server::chat_template(&model, tok)
    {
        let _ = t.render(&[template::Message::new("user", "hi")], None, true);
    }
}
