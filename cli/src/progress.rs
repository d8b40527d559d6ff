//! Progress bars, drawn only when standard error is a terminal, so logs and
//! pipes never fill with redraws.

use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;
use std::time::Duration;

fn visible() -> bool {
    std::io::stderr().is_terminal()
}

/// A bar of bytes, for reading a file of known size.
pub fn bytes(len: u64, message: &str) -> ProgressBar {
    if !visible() {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::new(len);
    let style = ProgressStyle::with_template(
        "{msg} [{bar:30}] {bytes}/{total_bytes} ({bytes_per_sec}, {eta})",
    )
    .expect("valid template")
    .progress_chars("=> ");
    pb.set_style(style);
    pb.set_message(message.to_string());
    pb
}

/// A spinner counting lines, for input of unknown length.
pub fn spinner(message: &str) -> ProgressBar {
    if !visible() {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::new_spinner();
    let style = ProgressStyle::with_template("{spinner} {msg} {human_pos} lines ({elapsed})")
        .expect("valid template");
    pb.set_style(style);
    pb.set_message(message.to_string());
    pb.enable_steady_tick(Duration::from_millis(200));
    pb
}
