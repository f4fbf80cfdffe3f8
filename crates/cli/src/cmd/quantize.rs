//! `molla quantize IN OUT TYPE`.

use anyhow::{Context, Result, bail};
use gguf::{GgmlType, GgufFile};
use indicatif::{ProgressBar, ProgressStyle};
use std::io::BufWriter;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// Source GGUF model.
    input: PathBuf,
    /// Destination file (overwritten).
    output: PathBuf,
    /// Target type: F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K.
    #[arg(value_name = "TYPE")]
    ty: String,
}

pub fn run(a: Args) -> Result<()> {
    let Some(ty) = GgmlType::from_name(&a.ty) else {
        bail!("unknown type '{}'", a.ty);
    };
    if !quant::supports_quantize(ty) {
        bail!("molla cannot quantize to {ty} yet");
    }
    let src = GgufFile::open(&a.input).with_context(|| a.input.display().to_string())?;
    let tmp = a.output.with_extension("partial");
    let out =
        std::fs::File::create(&tmp).with_context(|| format!("cannot create {}", tmp.display()))?;
    let bar = ProgressBar::new(src.tensors().len() as u64);
    bar.set_style(ProgressStyle::with_template(
        "{bar:40} {pos}/{len} tensors {msg}",
    )?);
    let w = model::quantize::quantize_file(&src, BufWriter::new(out), ty, |done, _, name| {
        bar.set_position(done as u64);
        bar.set_message(name.to_string());
    })?;
    w.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    std::fs::rename(&tmp, &a.output)?;
    bar.finish_and_clear();
    eprintln!("wrote {} ({ty})", a.output.display());
    Ok(())
}
