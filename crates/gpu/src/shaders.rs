//! WGSL sources: one file per block format (`dequant8`) joined with the shared bindings
//! (`common.wgsl`) and the matvec/embed entry points (`matvec.wgsl`), and one file per op.
//! WGSL has no includes, so modules are put together here, as text.

use gguf::GgmlType;

const COMMON: &str = include_str!("shaders/common.wgsl");
const MATVEC: &str = include_str!("shaders/matvec.wgsl");
pub(crate) const RMS_NORM: &str = include_str!("shaders/rms_norm.wgsl");
pub(crate) const ROPE: &str = include_str!("shaders/rope.wgsl");
pub(crate) const ELEMENTWISE: &str = include_str!("shaders/elementwise.wgsl");
const ATTENTION: &str = include_str!("shaders/attention.wgsl");
/// The 6-bit scale/min unpacking Q4_K and Q5_K share.
const KSCALE: &str = include_str!("shaders/kscale.wgsl");

/// Block formats with a matvec shader, and their `dequant8` source.
const FORMATS: &[(GgmlType, &str)] = &[
    (GgmlType::F32, include_str!("shaders/f32.wgsl")),
    (GgmlType::F16, include_str!("shaders/f16.wgsl")),
    (GgmlType::BF16, include_str!("shaders/bf16.wgsl")),
    (GgmlType::Q8_0, include_str!("shaders/q8_0.wgsl")),
    (GgmlType::Q4_0, include_str!("shaders/q4_0.wgsl")),
    (GgmlType::Q4_1, include_str!("shaders/q4_1.wgsl")),
    (GgmlType::Q5_0, include_str!("shaders/q5_0.wgsl")),
    (GgmlType::Q5_1, include_str!("shaders/q5_1.wgsl")),
    (GgmlType::Q2_K, include_str!("shaders/q2_k.wgsl")),
    (GgmlType::Q3_K, include_str!("shaders/q3_k.wgsl")),
    (GgmlType::Q4_K, include_str!("shaders/q4_k.wgsl")),
    (GgmlType::Q5_K, include_str!("shaders/q5_k.wgsl")),
    (GgmlType::Q6_K, include_str!("shaders/q6_k.wgsl")),
];

/// Whether weights of type `ty` can be used by the wgpu backend.
pub fn supports(ty: GgmlType) -> bool {
    FORMATS.iter().any(|(t, _)| *t == ty)
}

/// The block formats with a shader.
pub fn formats() -> impl Iterator<Item = GgmlType> {
    FORMATS.iter().map(|(t, _)| *t)
}

/// The matvec/embed module for weights of type `ty`.
pub(crate) fn matvec(ty: GgmlType) -> Option<String> {
    let (_, src) = FORMATS.iter().find(|(t, _)| *t == ty)?;
    let shared = if matches!(ty, GgmlType::Q4_K | GgmlType::Q5_K) {
        KSCALE
    } else {
        ""
    };
    Some(format!("{COMMON}\n{shared}\n{src}\n{MATVEC}"))
}

/// The attention/store module for an f32 or (`f16`) f16 KV cache.
pub(crate) fn attention(f16: bool) -> String {
    if f16 {
        ATTENTION.replace("const KV_F16: bool = false;", "const KV_F16: bool = true;")
    } else {
        ATTENTION.to_string()
    }
}

/// Every module the backend can build, by name (for translation tests).
pub fn all_modules() -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = formats()
        .filter_map(|t| matvec(t).map(|s| (format!("matvec_{t}"), s)))
        .collect();
    v.push(("rms_norm".into(), RMS_NORM.into()));
    v.push(("rope".into(), ROPE.into()));
    v.push(("elementwise".into(), ELEMENTWISE.into()));
    v.push(("attention_f32".into(), attention(false)));
    v.push(("attention_f16".into(), attention(true)));
    v
}
