//! Executable pages stay local (issue 38): a JIT-style program writes
//! machine code into far memory, lets it be evicted, `mprotect`s it to
//! read+exec and runs it (tests/programs/jit_exec.c). The code's pages are
//! fetched once, content kept, and lent to the kernel: the program checks
//! in /proc/self/smaps that their mapping is no longer registered with
//! userfaultfd (so nothing can fetch into it again) and stays resident
//! while it pages through four times its budget, and that a piece made
//! executable in the middle of a buffer leaves its neighbours far.

use crate::common::programs::*;
use crate::common::*;
use std::time::Duration;

#[test]
fn executable_far_pages_become_local_with_their_content_on_each_transport() {
    let exe = build_plain("gcc", "tests/programs/jit_exec.c", "jit_exec", &["-Wextra"]);
    let _g = serial();
    let dir = TempDir::new("jit");
    let exe = exe.to_str().unwrap();
    // The default path on this host, and farmem's sockets.
    for transport in ["auto", "socket"] {
        let mut c = farmem_run("16M", &[exe, "64", "far"]);
        c.env("FARMEM_TRANSPORT", transport);
        let f = Proc::spawn(&format!("jit-{transport}"), c, dir.path())
            .finish(Duration::from_secs(120));
        assert!(f.ok(), "{transport}:\n{}", f.report);
        assert!(f.stdout.ends_with("all ok\n"), "{transport}:\n{}", f.report);
        assert!(!f.stdout.contains("FAILED"), "{transport}:\n{}", f.report);
        // The paging between the checks went through the server: had the
        // code stayed far, it would have been evicted and fetched again.
        let s = stats(&f.stderr).unwrap_or_else(|| panic!("no --stats\n{}", f.report));
        assert!(s.evicted > 3 * 4096 && s.fetched > 0, "{}", f.report);
        assert_no_farmem_error(transport, &f.stderr, &f.report);
    }
}
