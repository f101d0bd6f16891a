//! The progress bar every long sweep shows on stderr: what it is doing,
//! steps done, time so far and an estimate of the time left.

use indicatif::{ProgressBar, ProgressStyle};

/// A bar of `len` steps labelled `what`.
pub fn bar(len: u64, what: &str) -> ProgressBar {
    let b = ProgressBar::new(len);
    b.set_style(
        ProgressStyle::with_template(
            "{msg:>12} [{bar:30}] {pos}/{len} {elapsed}, about {eta} left",
        )
        .expect("a valid template")
        .progress_chars("=> "),
    );
    b.set_message(what.to_string());
    b
}
