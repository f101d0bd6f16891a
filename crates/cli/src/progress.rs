//! The progress bar every long sweep shows on stderr: what it is doing,
//! steps done, time so far and an estimate of the time left; and [`Bars`],
//! which the libraries' progress traits drive.

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

/// One bar at a time, cleared when the next begins or this is dropped.
#[derive(Default)]
pub struct Bars(Option<ProgressBar>);

impl Bars {
    fn bar(&mut self) -> &ProgressBar {
        self.0.get_or_insert_with(|| bar(0, ""))
    }
}

impl Drop for Bars {
    fn drop(&mut self) {
        farmem_probe::suite::Progress::end(self);
    }
}

/// The probe: a bar per phase.
impl farmem_probe::suite::Progress for Bars {
    fn phase(&mut self, name: &str, steps: u64) {
        self.end();
        self.0 = Some(bar(steps, name));
    }
    fn set(&mut self, done: u64) {
        self.bar().set_position(done);
    }
    fn step(&mut self) {
        self.bar().inc(1);
    }
    fn end(&mut self) {
        if let Some(b) = self.0.take() {
            b.finish_and_clear();
        }
    }
}

/// The bench: one bar for every run, labelled with the cell running.
impl farmem_bench::Progress for Bars {
    fn start(&mut self, runs: u64) {
        self.bar().set_length(runs);
    }
    fn doing(&mut self, what: &str) {
        self.bar().set_message(what.to_string());
    }
    fn step(&mut self) {
        self.bar().inc(1);
    }
}
