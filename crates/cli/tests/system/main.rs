//! The system tests of farmem: the real `farmem` binary, libfarmem and the
//! preload shim, with real servers, real programs and the machine's own
//! kernel, in one test binary (issue 40) with a module per area. A test is
//! `NAME::test_fn`; one area runs with
//! `cargo test --release -p farmem-cli --test system NAME::`.
//!
//! The harness runs tests on as many threads as there are CPUs, and the
//! areas now run side by side. A test that starts `farmem run`, a memory
//! server or a real program, measures time, or touches what the machine
//! shares (swap, zram, cgroups, network namespaces, installed packages,
//! Slurm, Podman) takes [`common::programs::serial`] first, so that such
//! tests run one at a time whatever `--test-threads` says; light tests
//! (argument checks, fixtures, files) run in parallel with them.
//!
//! A test that cannot run here calls [`common::skip`] (under `CI=true` that
//! fails the test): no test passes silently without having run.

mod common;

mod as_user;
mod bench;
mod c_programs;
mod containers;
mod corruption;
mod erasure;
mod executable_pages;
mod kernel_access;
mod logs;
mod managed;
mod metrics;
mod misbehaving_server;
mod numa;
mod one_host;
mod package;
mod probe;
mod real_programs;
mod replicas;
mod report;
mod run;
mod scaleout;
mod secret;
mod server_load;
mod service;
mod slurm;
mod stat;
mod trace;
mod transport;
