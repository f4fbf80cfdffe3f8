//! `hf:owner/repo[:file]` model references: a GGUF file from the Hugging Face hub, downloaded
//! once into `models_dir()/hf/owner/repo/file` and used from there afterwards (offline too).
//!
//! The hub is `$HF_ENDPOINT` (default [`client::DEFAULT_ENDPOINT`]); `$HF_TOKEN` is sent as a
//! bearer token (never across a redirect to another host). Without `:file`, the repository's file
//! list (`/api/models/owner/repo`) picks its one GGUF file, or the Q4_K_M one among several. A
//! download goes to `file.partial`, renamed once complete; a dropped connection is resumed with
//! a Range request, within the run (a few retries) or by the next run.

mod client;

use crate::default_model::models_dir;
use anyhow::{Context, Result, anyhow, bail};
use client::Client;
use std::fs;
use std::path::{Path, PathBuf};

/// A parsed `owner/repo[:file]` (the text after `hf:`).
#[derive(Debug, PartialEq, Eq)]
pub struct HfRef {
    pub owner: String,
    pub repo: String,
    pub file: Option<String>,
}

impl HfRef {
    pub fn parse(spec: &str) -> Result<HfRef> {
        let usage = || {
            anyhow!(
                "'hf:{spec}' is not a hub reference (expected hf:owner/repo or hf:owner/repo:FILE)"
            )
        };
        let (id, file) = match spec.split_once(':') {
            Some((id, f)) => (id, Some(f)),
            None => (spec, None),
        };
        let (owner, repo) = id.split_once('/').ok_or_else(usage)?;
        if !is_name(owner) || !is_name(repo) || file.is_some_and(|f| !is_file_path(f)) {
            return Err(usage());
        }
        Ok(HfRef {
            owner: owner.into(),
            repo: repo.into(),
            file: file.map(String::from),
        })
    }

    fn id(&self) -> String {
        format!("{}/{}", self.owner, self.repo)
    }
}

/// An owner or repository name: what the hub allows, and never a path trick.
fn is_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 96
        && s != "."
        && s != ".."
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
}

/// A file path inside a repository (the hub's `rfilename`): relative, no `.`/`..` segments.
fn is_file_path(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 512
        && s.split('/').all(|seg| {
            !seg.is_empty()
                && seg != "."
                && seg != ".."
                && !seg.chars().any(|c| c.is_control() || c == '\\')
        })
}

/// Resolves `spec` (after `hf:`) to a local file, downloading it unless it is cached.
pub fn fetch(spec: &str, show: bool) -> Result<PathBuf> {
    let r = HfRef::parse(spec)?;
    let dir = models_dir().join("hf").join(&r.owner).join(&r.repo);
    let hub = Client::from_env();
    let file = match &r.file {
        Some(f) => f.clone(),
        None => choose(&hub, &r, &dir)?,
    };
    let path = dir.join(&file);
    if path.is_file() {
        return Ok(path);
    }
    let segments: Vec<String> = file.split('/').map(encode).collect();
    let url = format!(
        "{}/{}/{}/resolve/main/{}",
        hub.endpoint,
        encode(&r.owner),
        encode(&r.repo),
        segments.join("/")
    );
    hub.download(&url, &path, &format!("hf:{}:{file}", r.id()), show)?;
    Ok(path)
}

/// The one GGUF file among `files`, else the one Q4_K_M file; else an error listing them.
pub fn pick(files: &[String], what: &str) -> Result<String> {
    let ggufs: Vec<&String> = files
        .iter()
        .filter(|f| f.to_ascii_lowercase().ends_with(".gguf") && is_file_path(f))
        .collect();
    if let [one] = ggufs[..] {
        return Ok(one.clone());
    }
    if ggufs.is_empty() {
        bail!("{what} has no .gguf file");
    }
    let q4km: Vec<&String> = ggufs
        .iter()
        .copied()
        .filter(|f| f.to_ascii_lowercase().contains("q4_k_m"))
        .collect();
    if let [one] = q4km[..] {
        return Ok(one.clone());
    }
    const SHOWN: usize = 12;
    let mut list = ggufs
        .iter()
        .take(SHOWN)
        .map(|s| s.as_str())
        .collect::<Vec<_>>()
        .join(", ");
    if ggufs.len() > SHOWN {
        list.push_str(&format!(", and {} more", ggufs.len() - SHOWN));
    }
    let why = if q4km.is_empty() {
        "none of them Q4_K_M"
    } else {
        "several of them Q4_K_M"
    };
    bail!(
        "{what} has {} GGUF files, {why}; name one as {what}:FILE ({list})",
        ggufs.len()
    )
}

/// Percent-encodes one URL path segment.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// The file names in the hub's model JSON (`siblings[].rfilename`).
fn siblings(body: &str) -> Result<Vec<String>> {
    let v: serde_json::Value = serde_json::from_str(body)?;
    let list = v["siblings"]
        .as_array()
        .ok_or_else(|| anyhow!("no 'siblings' list"))?;
    Ok(list
        .iter()
        .filter_map(|s| s["rfilename"].as_str().map(String::from))
        .collect())
}

/// GGUF files already downloaded under `dir`, as paths relative to it.
fn cached_ggufs(dir: &Path) -> Vec<String> {
    fn walk(root: &Path, dir: &Path, depth: usize, out: &mut Vec<String>) {
        let Ok(entries) = fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() && depth < 4 {
                walk(root, &p, depth + 1, out);
            } else if p
                .extension()
                .is_some_and(|x| x.eq_ignore_ascii_case("gguf"))
                && let Ok(rel) = p.strip_prefix(root)
                && let Some(rel) = rel.to_str()
            {
                out.push(rel.to_string());
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, 0, &mut out);
    out.sort();
    out
}

/// The file to use for a reference without `:file`: from the hub's file list, or from the
/// cache when the hub cannot be reached.
fn choose(hub: &Client, r: &HfRef, dir: &Path) -> Result<String> {
    let what = format!("hf:{}", r.id());
    let url = format!(
        "{}/api/models/{}/{}",
        hub.endpoint,
        encode(&r.owner),
        encode(&r.repo)
    );
    let files = match hub.get(&url, 0) {
        Ok(mut resp) => {
            let body = resp
                .body_mut()
                .read_to_string()
                .with_context(|| format!("{what}: reading {url}"))?;
            siblings(&body).with_context(|| format!("{what}: unexpected file list from {url}"))?
        }
        Err(e) => {
            let cached = cached_ggufs(dir);
            if matches!(e, ureq::Error::StatusCode(_)) || cached.is_empty() {
                return Err(hub.describe(e, &what, &url));
            }
            cached
        }
    };
    pick(&files, &what)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_references() {
        let r = HfRef::parse("bartowski/SmolLM2-135M-Instruct-GGUF:sub/m-Q8_0.gguf").unwrap();
        assert_eq!(
            (r.owner.as_str(), r.repo.as_str()),
            ("bartowski", "SmolLM2-135M-Instruct-GGUF")
        );
        assert_eq!(r.file.as_deref(), Some("sub/m-Q8_0.gguf"));
        assert_eq!(HfRef::parse("a/b").unwrap().file, None);
        for bad in [
            "",
            "a",
            "a/",
            "/b",
            "a/b/c",
            "../b",
            "a/..",
            "a/b:",
            "a/b:../x.gguf",
            "a/b:/x.gguf",
            "a b/c",
        ] {
            assert!(HfRef::parse(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn picks_the_gguf_file() {
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(
            pick(&v(&["README.md", "m.gguf"]), "hf:a/b").unwrap(),
            "m.gguf"
        );
        assert_eq!(
            pick(
                &v(&["m-Q8_0.gguf", "m-q4_k_m.gguf", "m-F16.gguf"]),
                "hf:a/b"
            )
            .unwrap(),
            "m-q4_k_m.gguf"
        );
        let e = pick(&v(&["m-Q8_0.gguf", "m-F16.gguf"]), "hf:a/b")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("m-Q8_0.gguf, m-F16.gguf") && e.contains("hf:a/b:FILE"),
            "{e}"
        );
        assert!(
            pick(&v(&["README.md"]), "hf:a/b")
                .unwrap_err()
                .to_string()
                .contains("no .gguf")
        );
        assert!(pick(&v(&["../evil.gguf"]), "hf:a/b").is_err());
    }

    #[test]
    fn encodes_path_segments() {
        assert_eq!(encode("a b+c.gguf"), "a%20b%2Bc.gguf");
    }
}
