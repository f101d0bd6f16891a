//! The embedded memory server: `farmem serve` in a child process on an
//! abstract Unix socket, used when no servers are configured.
//!
//! The runtime binds the socket itself and hands it to the child
//! (`farmem serve --listen-fd 3`), so the address is known, and clients may
//! connect (they wait in the backlog), before the child has started. The
//! runtime does not link the server: the child is the `farmem` program.

use crate::RuntimeError;
use std::ffi::CString;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

/// The embedded server's threads spin this long for the next request before
/// blocking: a blocked server thread costs the faulting client a ~100 µs
/// wake-up on an idle CPU. The spin yields the CPU to runnable threads.
const EMBEDDED_SERVER_SPIN_US: u64 = 2000;

/// A started embedded server.
#[derive(Debug)]
pub struct EmbeddedServer {
    /// Where clients connect: `unix:@NAME`.
    pub addr: farmem_wire::ServerAddr,
    pub pid: libc::pid_t,
}

impl EmbeddedServer {
    /// Stop the server and wait for it. Without this it stops by itself
    /// within 50 ms of its parent's exit.
    pub fn stop(self) {
        farmem_sys::process::stop_child(self.pid);
    }
}

/// Start the embedded memory server as a child process.
///
/// Why a process and not a thread: threads of the faulting process that spin
/// (as a server thread must, to answer within microseconds) turn every
/// TLB flush of the fault path (`madvise`, write-protect) into an IPI to their
/// CPU. A separate process shares no page tables. The child exits when its
/// parent (this process) is gone.
pub fn spawn_embedded_server(capacity: u64) -> Result<EmbeddedServer, RuntimeError> {
    use std::os::linux::net::SocketAddrExt;
    let err = |why: String| RuntimeError::Server(why);
    let bin = farmem_program().ok_or_else(|| {
        err(format!(
            "the `farmem` program was not found (looked next to {}, in ../bin from there, next to \
             this executable, and on PATH); install farmem on PATH, or start `farmem serve` \
             yourself and name it in FARMEM_SERVERS",
            here().map_or("this library".into(), |p| p.display().to_string())
        ))
    })?;
    let parent = std::process::id();
    // An abstract Unix socket: same-machine only, no TCP stack, no file to
    // clean up.
    let name = format!("farmem-{}-{:x}", parent, farmem_sys::now_ns());
    let sa = std::os::unix::net::SocketAddr::from_abstract_name(&name)
        .map_err(|e| err(format!("socket name {name}: {e}")))?;
    let listener = std::os::unix::net::UnixListener::bind_addr(&sa)
        .map_err(|e| err(format!("cannot listen on unix:@{name}: {e}")))?;
    let arg = |s: String| CString::new(s).map_err(|_| err("a path with a NUL byte".into()));
    let argv = [
        arg(bin.display().to_string())?,
        arg("serve".into())?,
        arg("--listen-fd".into())?,
        arg("3".into())?,
        arg("--capacity".into())?,
        arg(capacity.to_string())?,
        arg("--spin-us".into())?,
        arg(EMBEDDED_SERVER_SPIN_US.to_string())?,
        arg("--parent".into())?,
        arg(parent.to_string())?,
        // Its sessions are this program's own: say only what goes wrong,
        // in the program's stderr.
        arg("--log-level".into())?,
        arg("warn".into())?,
    ];
    // The server needs none of the program's preloads (farmem's own shim
    // would start a runtime, and so another server, in it) or settings.
    use std::os::unix::ffi::OsStrExt;
    let env: Vec<CString> = std::env::vars_os()
        .filter(|(k, _)| {
            let k = k.as_bytes();
            k != b"LD_PRELOAD" && !k.starts_with(b"FARMEM_")
        })
        .filter_map(|(k, v)| {
            let mut kv = k.as_bytes().to_vec();
            kv.push(b'=');
            kv.extend_from_slice(v.as_bytes());
            CString::new(kv).ok()
        })
        .collect();
    let pid = farmem_sys::process::spawn_passing_fd(&argv, &env, listener.as_fd(), 3)
        .map_err(|e| err(format!("cannot run {}: {e}", bin.display())))?;
    // The child holds its own copy of the socket; this one closes here, so
    // that if the child dies, clients are refused instead of waiting.
    drop(listener);
    Ok(EmbeddedServer {
        addr: farmem_wire::ServerAddr::UnixAbstract(name),
        pid,
    })
}

/// This code's own file: the library or executable the runtime is linked into.
fn here() -> Option<PathBuf> {
    farmem_sys::process::object_path_of(spawn_embedded_server as *const () as usize)
}

/// Where the `farmem` program is: next to the object holding this code (a
/// build tree: `target/release/libfarmem.so` beside `target/release/farmem`),
/// in `../bin` from there (an install: `lib/` and `bin/`), next to the
/// executable (test binaries in `target/release/deps`), or on PATH.
fn farmem_program() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok();
    let mut dirs: Vec<PathBuf> = Vec::new();
    for obj in [here(), exe.clone()].into_iter().flatten() {
        if let Some(d) = obj.parent() {
            dirs.push(d.to_path_buf());
            dirs.push(d.join("../bin"));
            dirs.push(d.join(".."));
        }
    }
    if let Some(path) = std::env::var_os("PATH") {
        dirs.extend(std::env::split_paths(&path));
    }
    dirs.iter()
        .map(|d| d.join("farmem"))
        .find(|p| is_program(p))
}

fn is_program(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}
