//! Shared by the test suites of several crates (included with `#[path]`):
//! how a test that cannot run here says so.

/// A test that cannot run here, because of `why` (a program or a kernel
/// feature missing). Under CI (`CI` set, and not `false` or `0`) that fails
/// the test: scripts/setup.sh installs every dependency, so a missing one
/// is a regression. Elsewhere it prints `SKIPPED test: why` and adds the
/// line to `$SKIPPED_TESTS_LOG`, which scripts/test.sh counts as skipped
/// rather than passed. The caller returns.
pub fn skip(test: &str, why: &str) {
    let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0");
    assert!(
        !ci,
        "{test} cannot run: {why}; under CI every dependency must be there (scripts/setup.sh installs them)"
    );
    eprintln!("SKIPPED {test}: {why}");
    // The harness shows a passing test's output to nobody: the suite's
    // summary reads the skips from this file.
    if let Some(log) = std::env::var_os("SKIPPED_TESTS_LOG") {
        use std::io::Write;
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(log)
        {
            let _ = writeln!(f, "{test}: {why}");
        }
    }
}
