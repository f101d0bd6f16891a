//! `libfarmem.so`: the C API declared in `include/farmem.h`, and every
//! kernel access to far memory.
//!
//! In SIGBUS mode a fault the kernel takes on a user's behalf cannot be
//! served: the system call fails with EFAULT. So besides `fm_*` ([`api`])
//! the library exports wrappers that pin and fault in the far pages a call
//! hands the kernel. A program linked with `-lfarmem` gets them by ordinary
//! symbol interposition, as does one run under `farmem run`. Design and
//! gaps: docs/design.md, "System calls on far memory". Exports are compiled
//! out of test builds (`cfg_attr(not(test), no_mangle)`).
//!
//! The modules are layers; each uses only those above it in this list
//! (tests/layers.rs checks it), as mio's `sys` layer sits under its API:
//! 1. [`reg`], [`forward`], [`table`], [`selector`]: a C argument's
//!    register image, the one symbol resolver, the table of which user
//!    memory each system call hands the kernel, the raw-call net's per-thread
//!    state;
//! 2. [`pin`]: pin-and-call, chunked calls, the wrapper generator;
//! 3. the call families, which never use each other: [`io`], [`net`],
//!    [`files`], [`process`], [`sync`] (waiting pthread calls), [`aio`],
//!    [`remote`] (`process_vm_*`), [`signals`] (masks and handlers);
//! 4. [`router`], `syscall(2)`;
//! 5. [`dispatch`]: the syscall-user-dispatch net for system calls made
//!    without libc, whose SIGSYS handler runs the router;
//! 6. [`api`], `fm_*`.
//!
//! Nothing a signal handler reaches (the router and everything under it)
//! allocates: tests/handler_alloc.rs counts.

pub mod forward;
pub mod reg;
pub mod selector;
pub mod table;

pub mod pin;

pub mod aio;
pub mod files;
pub mod io;
pub mod net;
pub mod process;
pub mod remote;
pub mod signals;
pub mod sync;

pub mod router;

pub mod dispatch;

pub mod api;

pub use api::*;
