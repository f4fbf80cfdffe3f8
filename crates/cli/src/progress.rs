//! Progress on stderr: a spinner while a model loads or the default model is fetched, a byte bar
//! while a file downloads. `show = false` (--quiet) hides them; indicatif also draws nothing when
//! stderr is not a terminal, so logs and tests never see control sequences.

use indicatif::{ProgressBar, ProgressStyle};
use std::time::Duration;

/// A spinner with `msg` and the time elapsed, ticking on its own until finished.
pub fn spinner(show: bool, msg: String) -> ProgressBar {
    if !show {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::new_spinner();
    let style = ProgressStyle::with_template("{spinner} {msg} ({elapsed})")
        .unwrap_or_else(|_| ProgressStyle::default_spinner());
    pb.set_style(style);
    pb.set_message(msg);
    pb.enable_steady_tick(Duration::from_millis(120));
    pb
}

/// A download bar in bytes; its length is set once the size is known.
pub fn bytes(show: bool, msg: String) -> ProgressBar {
    if !show {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::no_length();
    let style = ProgressStyle::with_template(
        "{msg} [{bar:30}] {bytes}/{total_bytes} {binary_bytes_per_sec} eta {eta}",
    )
    .map(|s| s.progress_chars("=> "))
    .unwrap_or_else(|_| ProgressStyle::default_bar());
    pb.set_style(style);
    pb.set_message(msg);
    pb
}
