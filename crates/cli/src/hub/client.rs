//! The HTTP side of `hf:` references: requests to the hub with the token, errors as one line,
//! and resumable downloads (`file.partial`, Range requests, retries after a dropped connection).

use crate::progress;
use anyhow::{Context, Result, anyhow};
use indicatif::ProgressBar;
use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind, Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;
use ureq::http::Response;

/// The hub when `$HF_ENDPOINT` is not set.
pub const DEFAULT_ENDPOINT: &str = "https://huggingface.co";
/// Retries of a download whose connection dropped mid-file.
const RETRIES: u32 = 4;

/// `file.partial` beside `dest`.
fn partial_path(dest: &Path) -> PathBuf {
    let mut name = dest.file_name().unwrap_or_default().to_os_string();
    name.push(".partial");
    dest.with_file_name(name)
}

/// `bytes START-END/TOTAL` → (START, TOTAL); TOTAL may be `*`.
fn content_range(v: &str) -> Option<(u64, Option<u64>)> {
    let (range, total) = v.strip_prefix("bytes ")?.split_once('/')?;
    let start = range.split_once('-')?.0.trim().parse().ok()?;
    Some((start, total.trim().parse().ok()))
}

/// How one download attempt failed.
enum Attempt {
    /// Worth another try (the connection dropped): what was written stays for the resume.
    Retry(anyhow::Error),
    Fatal(anyhow::Error),
}

pub struct Client {
    pub endpoint: String,
    token: Option<String>,
    agent: ureq::Agent,
}

impl Client {
    pub fn from_env() -> Client {
        let var = |k: &str| {
            std::env::var(k)
                .ok()
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        let endpoint = var("HF_ENDPOINT")
            .unwrap_or_else(|| DEFAULT_ENDPOINT.into())
            .trim_end_matches('/')
            .to_string();
        let config = ureq::Agent::config_builder()
            .timeout_connect(Some(Duration::from_secs(20)))
            .timeout_per_read(Some(Duration::from_secs(60)))
            .user_agent(concat!("molla/", env!("CARGO_PKG_VERSION")))
            .build();
        Client {
            endpoint,
            token: var("HF_TOKEN"),
            agent: config.into(),
        }
    }

    /// GET `url`, from byte `from` on when it is not 0.
    pub fn get(&self, url: &str, from: u64) -> Result<Response<ureq::Body>, ureq::Error> {
        let mut req = self.agent.get(url);
        if let Some(t) = &self.token {
            req = req.header("Authorization", format!("Bearer {t}"));
        }
        if from > 0 {
            req = req.header("Range", format!("bytes={from}-"));
        }
        req.call()
    }

    /// One line for a failed request.
    pub fn describe(&self, e: ureq::Error, what: &str, url: &str) -> anyhow::Error {
        match e {
            ureq::Error::StatusCode(404) => anyhow!("{what}: not found (HTTP 404 from {url})"),
            ureq::Error::StatusCode(c @ (401 | 403)) => anyhow!(
                "{what}: not found or access denied (HTTP {c} from {url}); a gated or private repository needs HF_TOKEN"
            ),
            ureq::Error::StatusCode(c) => anyhow!("{what}: HTTP {c} from {url}"),
            e => anyhow!(
                "{what}: cannot reach {} ({e}); check the network (HF_ENDPOINT sets another hub)",
                self.endpoint
            ),
        }
    }

    /// Downloads `url` to `dest` through `dest.partial`, resuming what a previous run left.
    pub fn download(&self, url: &str, dest: &Path, label: &str, show: bool) -> Result<()> {
        let dir = dest.parent().unwrap_or(Path::new("."));
        fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let part = partial_path(dest);
        let pb = progress::bytes(show, format!("downloading {label}"));
        let mut retries = 0;
        loop {
            let have = fs::metadata(&part).map_or(0, |m| m.len());
            match self.attempt(url, &part, have, &pb, label) {
                Ok(()) => break,
                Err(Attempt::Retry(_)) if retries < RETRIES => {
                    retries += 1;
                    pb.set_message(format!(
                        "downloading {label} (resuming, try {})",
                        retries + 1
                    ));
                    std::thread::sleep(Duration::from_millis(200 << retries));
                }
                Err(Attempt::Retry(e) | Attempt::Fatal(e)) => {
                    pb.abandon();
                    return Err(e);
                }
            }
        }
        pb.finish_and_clear();
        fs::rename(&part, dest)
            .with_context(|| format!("cannot rename {} to {}", part.display(), dest.display()))?;
        if show {
            eprintln!("molla: saved {label} as {}", dest.display());
        }
        Ok(())
    }

    /// One request: appends to `part` (which holds `have` bytes) until the file is complete.
    fn attempt(
        &self,
        url: &str,
        part: &Path,
        have: u64,
        pb: &ProgressBar,
        label: &str,
    ) -> Result<(), Attempt> {
        let mut resp = match self.get(url, have) {
            Ok(r) => r,
            Err(ureq::Error::StatusCode(416)) if have > 0 => {
                // What we hold is no prefix of the file (it changed, or was complete): start over.
                let _ = fs::remove_file(part);
                return Err(Attempt::Retry(anyhow!(
                    "{label}: the server refused to resume"
                )));
            }
            Err(e) => return Err(Attempt::Fatal(self.describe(e, label, url))),
        };
        let (start, total) = if resp.status().as_u16() == 206 {
            let cr = resp
                .headers()
                .get("content-range")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            match content_range(cr) {
                Some((s, total)) if s == have => (s, total),
                _ => {
                    return Err(Attempt::Fatal(anyhow!(
                        "{label}: bad Content-Range '{cr}' from {url}"
                    )));
                }
            }
        } else {
            (0, resp.body().content_length())
        };
        let opened = if start > 0 {
            OpenOptions::new().append(true).open(part)
        } else {
            File::create(part)
        };
        let fatal =
            |e: std::io::Error| Attempt::Fatal(anyhow!("cannot write {}: {e}", part.display()));
        let mut file = opened.map_err(fatal)?;
        if let Some(t) = total {
            pb.set_length(t);
        }
        pb.set_position(start);
        let mut reader = resp.body_mut().as_reader();
        let mut buf = vec![0u8; 1 << 16];
        let mut done = start;
        let dropped = |done: u64, e: &dyn std::fmt::Display| {
            let of = total.map_or(String::new(), |t| format!(" of {t}"));
            Attempt::Retry(anyhow!(
                "{label}: the connection dropped after {done}{of} bytes ({e}); run the command again to resume"
            ))
        };
        loop {
            let n = match reader.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(dropped(done, &e)),
            };
            file.write_all(&buf[..n]).map_err(fatal)?;
            done += n as u64;
            pb.set_position(done);
        }
        file.sync_all().map_err(fatal)?;
        if let Some(t) = total
            && done != t
        {
            return Err(dropped(done, &"short body"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_content_range_and_names_partial_files() {
        assert_eq!(content_range("bytes 100-199/200"), Some((100, Some(200))));
        assert_eq!(content_range("bytes 5-9/*"), Some((5, None)));
        assert_eq!(content_range("items 1-2/3"), None);
        assert_eq!(
            partial_path(Path::new("/x/m.gguf")),
            Path::new("/x/m.gguf.partial")
        );
    }
}
