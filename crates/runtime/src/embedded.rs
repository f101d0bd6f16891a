//! The embedded memory server: a real `farmem serve` in a child process on an
//! abstract Unix socket, used when no servers are configured.

use crate::RuntimeError;
use farmem_server::{Server, ServerConfig, ServerError};
use std::io;

/// The embedded server's threads spin this long for the next request before
/// blocking: a blocked server thread costs the faulting client a ~100 µs
/// wake-up on an idle CPU. The spin yields the CPU to runnable threads.
const EMBEDDED_SERVER_SPIN_NS: u64 = 2_000_000;

/// Start the embedded memory server as a child process and return its address.
///
/// Why a process and not a thread: threads of the faulting process that spin
/// (as a server thread must, to answer within microseconds) turn every
/// TLB flush of the fault path (`madvise`, write-protect) into an IPI to their
/// CPU. A separate process shares no page tables. The child watches its parent
/// and exits when the parent is gone.
pub fn spawn_embedded_server(capacity: u64) -> Result<String, RuntimeError> {
    use farmem_sys::process::{self, Forked};
    use std::io::{Read, Write};
    let server_err = |e: io::Error| RuntimeError::Server(ServerError::Spawn(e));
    let (rd, wr) = process::pipe().map_err(server_err)?;
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: the child only binds a socket, starts server threads and
    // allocates (glibc's malloc is fork-safe); it never returns to the caller.
    match unsafe { process::fork() }.map_err(server_err)? {
        Forked::Child => {
            drop(rd);
            process::set_thread_name(c"farmem-server");
            let mut out = std::fs::File::from(wr);
            // An abstract Unix socket: same-machine only, no TCP stack, no file
            // to clean up.
            let name = format!("@farmem-{}-{:x}", parent, farmem_sys::now_ns());
            let mut sc = ServerConfig::new(farmem_server::ListenAddr::Unix(name), capacity);
            sc.spin_ns = EMBEDDED_SERVER_SPIN_NS;
            match Server::bind(sc) {
                Ok(server) => {
                    let _ = writeln!(out, "OK {}", server.local_addr());
                    drop(out);
                    let stop = server.shutdown_flag();
                    std::thread::spawn(move || loop {
                        if process::getppid() != parent {
                            stop.stop();
                            process::exit_now(0);
                        }
                        std::thread::sleep(std::time::Duration::from_millis(100));
                    });
                    let _ = server.run();
                    process::exit_now(0)
                }
                Err(e) => {
                    let _ = writeln!(out, "ERR {e}");
                    process::exit_now(1)
                }
            }
        }
        Forked::Parent(pid) => {
            drop(wr);
            let mut msg = String::new();
            let _ = std::fs::File::from(rd).read_to_string(&mut msg);
            match msg.trim().strip_prefix("OK ") {
                Some(addr) => Ok(addr.to_string()),
                None => {
                    process::try_reap(pid);
                    Err(server_err(io::Error::other(format!(
                        "the embedded server did not start: {}",
                        msg.trim().strip_prefix("ERR ").unwrap_or("no reply")
                    ))))
                }
            }
        }
    }
}
