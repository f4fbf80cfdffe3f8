//! Every WGSL module the backend builds parses, validates, and translates to Metal Shading
//! Language and HLSL through naga (the translator wgpu itself uses on macOS and Windows), so a
//! Mac or Windows build cannot first meet a shader problem at run time. Needs no adapter.

use naga::back::{hlsl, msl};
use naga::valid::{Capabilities, ValidationFlags, Validator};

#[test]
fn every_shader_translates_to_msl_and_hlsl() {
    let modules = gpu::all_modules();
    assert!(modules.len() >= 18, "{} modules", modules.len());
    for (name, src) in modules {
        let module = naga::front::wgsl::parse_str(&src)
            .unwrap_or_else(|e| panic!("{name}: {}", e.emit_to_string(&src)));
        let info = Validator::new(ValidationFlags::all(), Capabilities::empty())
            .validate(&module)
            .unwrap_or_else(|e| panic!("{name}: {}", e.emit_to_string(&src)));

        let options = msl::Options {
            lang_version: (2, 1),
            ..Default::default()
        };
        let pipeline = msl::PipelineOptions::default();
        let (metal, _) = msl::write_string(&module, &info, &options, &pipeline)
            .unwrap_or_else(|e| panic!("{name}: MSL: {e}"));
        assert!(metal.contains("kernel"), "{name}: no kernel in MSL");

        let options = hlsl::Options {
            shader_model: hlsl::ShaderModel::V5_1,
            ..Default::default()
        };
        let mut out = String::new();
        hlsl::Writer::new(&mut out, &options, &hlsl::PipelineOptions::default())
            .write(&module, &info, None)
            .unwrap_or_else(|e| panic!("{name}: HLSL: {e}"));
        assert!(
            out.contains("[numthreads("),
            "{name}: no entry point in HLSL"
        );
        println!(
            "{name}: MSL {} bytes, HLSL {} bytes",
            metal.len(),
            out.len()
        );
    }
}
