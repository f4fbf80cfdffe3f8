//! OpenAI's `POST /v1/embeddings`: per input, the mean over its tokens of the model's final
//! hidden states after the output norm, scaled to unit length (see docs/server.md). Runs on the
//! engine thread, between generation steps.

use crate::engine::SubmitError;
use crate::error::{ApiError, ServerError, parse_json};
use crate::routes::body;
use crate::{AppState, openai::Prompt};
use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use serde::Deserialize;
use serde_json::{Value, json};

/// Most inputs one request may carry.
const MAX_INPUTS: usize = 256;

#[derive(Deserialize)]
#[serde(untagged)]
enum Input {
    One(Prompt),
    /// Several token-id lists.
    Batch(Vec<Vec<u32>>),
}

#[derive(Deserialize)]
struct Request {
    input: Input,
    model: Option<String>,
    encoding_format: Option<String>,
}

pub async fn embeddings(
    State(state): State<AppState>,
    b: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let r: Request = parse_json(&body(b)?)?;
    let base64 = match r.encoding_format.as_deref() {
        None | Some("float") => false,
        Some("base64") => true,
        Some(other) => {
            return Err(ApiError::bad_request(
                format!("encoding_format '{other}' is not float or base64"),
                Some("encoding_format"),
            ));
        }
    };
    let enc = |t: &str| state.tok.encode(t, true, false);
    let inputs: Vec<Vec<u32>> = match r.input {
        Input::One(Prompt::Text(t)) => vec![enc(&t)],
        Input::One(Prompt::Texts(v)) => v.iter().map(|t| enc(t)).collect(),
        Input::One(Prompt::Tokens(ids)) => vec![ids],
        Input::Batch(v) => v,
    };
    let (vecs, tokens) = embed(&state, inputs).await?;
    let data: Vec<Value> = vecs
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let e = if base64 {
                json!(base64_f32(v))
            } else {
                json!(v)
            };
            json!({"object": "embedding", "index": i, "embedding": e})
        })
        .collect();
    Ok(Json(json!({
        "object": "list",
        "data": data,
        "model": r.model.unwrap_or_else(|| state.model_id.clone()),
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    })))
}

/// The embeddings of `inputs` (token ids; each checked: not empty, within the context and the
/// vocabulary; 1 to [`MAX_INPUTS`] of them), and their tokens in all.
pub async fn embed(
    state: &AppState,
    inputs: Vec<Vec<u32>>,
) -> Result<(Vec<Vec<f32>>, usize), ApiError> {
    let bad = |m: String| ApiError::bad_request(m, Some("input"));
    if inputs.is_empty() || inputs.len() > MAX_INPUTS {
        return Err(bad(format!("input must hold 1 to {MAX_INPUTS} items")));
    }
    let mut tokens = 0;
    for (i, ids) in inputs.iter().enumerate() {
        if ids.is_empty() || (ids.len() == 1 && Some(ids[0]) == state.tok.bos()) {
            return Err(bad(format!("input {i} is empty")));
        }
        if ids.len() > state.ctx {
            return Err(bad(format!(
                "input {i} has {} tokens, more than the context of {}",
                ids.len(),
                state.ctx
            )));
        }
        if let Some(&t) = ids.iter().find(|&&t| t as usize >= state.tok.n_vocab()) {
            return Err(bad(format!("token id {t} is out of the vocabulary")));
        }
        tokens += ids.len();
    }
    let rx = state.engine.embed(inputs).map_err(|e| match e {
        SubmitError::Full => ApiError::busy(),
        SubmitError::Gone => ApiError::internal(ServerError::EngineGone.to_string()),
    })?;
    let vecs = rx
        .await
        .map_err(|_| ApiError::internal(ServerError::EngineGone.to_string()))?
        .map_err(ApiError::internal)?;
    Ok((vecs, tokens))
}

/// The little-endian f32 bytes of `v` in standard base64 (what OpenAI's `base64` format holds).
fn base64_f32(v: &[f32]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for c in bytes.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for (i, shift) in [18, 12, 6, 0].into_iter().enumerate() {
            if i <= c.len() {
                out.push(ABC[(n >> shift) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn base64_of_floats() {
        // 1.0f32 = 00 00 80 3f
        assert_eq!(super::base64_f32(&[1.0]), "AACAPw==");
        assert_eq!(super::base64_f32(&[]), "");
    }
}
