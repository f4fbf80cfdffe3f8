//! `molla inspect PATH`: metadata and tensor table of a GGUF file, for people.

use anyhow::{Context, Result};
use gguf::GgufFile;
use std::fmt::Write as _;
use std::io::Write;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// GGUF file.
    path: PathBuf,
}

/// "1.5 MiB" style sizes.
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// Renders the whole report.
pub fn report(path: &str, f: &GgufFile) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{path}: GGUF v{}, {}, {} metadata keys, {} tensors, alignment {}, data at offset {}",
        f.version(),
        human_bytes(f.file_size()),
        f.metadata().len(),
        f.tensors().len(),
        f.alignment(),
        f.data_offset()
    );
    let _ = writeln!(s, "\nmetadata:");
    let kw = f.metadata().iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    for (k, v) in f.metadata() {
        let _ = writeln!(s, "  {k:kw$}  {:<14} {v}", v.type_name());
    }
    let params: u64 = f.tensors().iter().map(|t| t.n_elements()).sum();
    let bytes: u64 = f.tensors().iter().map(|t| t.n_bytes).sum();
    let _ = writeln!(
        s,
        "\ntensors: {} parameters, {}",
        params,
        human_bytes(bytes)
    );
    let nw = f
        .tensors()
        .iter()
        .map(|t| t.name.len())
        .max()
        .unwrap_or(4)
        .max(4);
    let _ = writeln!(
        s,
        "  {:nw$}  {:<7} {:<20} {:>12}",
        "name", "type", "shape", "bytes"
    );
    for t in f.tensors() {
        let shape = t
            .dims
            .iter()
            .map(|d| d.to_string())
            .collect::<Vec<_>>()
            .join(" x ");
        let _ = writeln!(
            s,
            "  {:nw$}  {:<7} {:<20} {:>12}",
            t.name,
            t.ty.name(),
            shape,
            t.n_bytes
        );
    }
    s
}

pub fn run(a: Args) -> Result<()> {
    let f = GgufFile::open(&a.path).with_context(|| a.path.display().to_string())?;
    let out = report(&a.path.display().to_string(), &f);
    std::io::stdout().lock().write_all(out.as_bytes())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::human_bytes;

    #[test]
    fn sizes_read_well() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(3 << 30), "3.0 GiB");
    }
}
