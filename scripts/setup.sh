#!/usr/bin/env bash
# Install what farmem needs to build and test, then build it (release).
# Idempotent: installs only what is missing. Run as root on Debian 12.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v gcc >/dev/null || need_apt+=(gcc)
command -v g++ >/dev/null || need_apt+=(g++)
command -v make >/dev/null || need_apt+=(make)
command -v gfortran >/dev/null || need_apt+=(gfortran)
command -v python3 >/dev/null || need_apt+=(python3)
# Real workloads for `farmem numa`: hackbench, memcached and its load tool.
command -v hackbench >/dev/null || need_apt+=(rt-tests)
command -v memcached >/dev/null || need_apt+=(memcached)
command -v memcslap >/dev/null || need_apt+=(libmemcached-tools)
# Real programs nobody here wrote, run under `farmem run` by the tests of
# every kernel access to far memory (crates/cli/tests/system/{real_programs,kernel_access}.rs).
command -v redis-server >/dev/null || need_apt+=(redis-server)
command -v redis-benchmark >/dev/null || need_apt+=(redis-tools)
command -v sqlite3 >/dev/null || need_apt+=(sqlite3)
# Headless Chromium renders `farmem report` pages in their test (crates/cli/tests/system/report.rs).
command -v chromium >/dev/null || need_apt+=(chromium)
command -v mpicc >/dev/null || need_apt+=(openmpi-bin libopenmpi-dev)
# Emulated hosts for the scale-out test and benchmarks: network namespaces,
# veth pairs and tc rate limits (scripts/netns-hosts.sh).
command -v ip >/dev/null && command -v tc >/dev/null || need_apt+=(iproute2)
# `systemd-analyze verify` checks the service unit (contrib/systemd).
command -v systemd-analyze >/dev/null || need_apt+=(systemd)
# Managed runtimes on far memory (crates/cli/tests/system/managed.rs): a JDK (javac
# builds the test's program) and Node.js.
command -v javac >/dev/null || need_apt+=(default-jdk-headless)
command -v node >/dev/null || need_apt+=(nodejs)
[ -e /usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4 ] || need_apt+=(libtcmalloc-minimal4)
# A real Slurm for its test (crates/cli/tests/system/slurm.rs, contrib/slurm/one-node.sh):
# munge, the controller, the node daemon and sbatch/srun. The packages'
# own services are not used: the test starts a private cluster.
command -v slurmctld >/dev/null || need_apt+=(slurmctld)
command -v slurmd >/dev/null || need_apt+=(slurmd)
command -v sbatch >/dev/null || need_apt+=(slurm-client)
command -v munged >/dev/null || need_apt+=(munge)
# Containers for their test (crates/cli/tests/system/containers.rs): rootless
# Podman (uidmap gives it newuidmap) and bubblewrap, which plays Apptainer's
# model of a user namespace without a seccomp filter.
command -v podman >/dev/null || need_apt+=(podman)
command -v newuidmap >/dev/null || need_apt+=(uidmap)
command -v bwrap >/dev/null || need_apt+=(bubblewrap)
# The Debian package's test builds a C program with pkg-config and packs with dpkg-deb.
command -v pkg-config >/dev/null || need_apt+=(pkg-config)
command -v dpkg-deb >/dev/null || need_apt+=(dpkg)
# UCX: the one-sided page path (FARMEM_TRANSPORT=ucx), its headers for the
# binding's ABI test, and ucx_info / ucx_perftest for the benchmarks.
[ -e /usr/include/ucp/api/ucp.h ] || need_apt+=(libucx-dev)
command -v ucx_perftest >/dev/null || need_apt+=(ucx-utils)
/usr/bin/python3 -c 'import numpy' 2>/dev/null || need_apt+=(python3-numpy)
[ -e /usr/include/linux/userfaultfd.h ] || need_apt+=(linux-libc-dev)
# libgomp ships with gcc; make sure the OpenMP runtime is there.
gcc -fopenmp -x c -o /dev/null - <<<'int main(void){return 0;}' 2>/dev/null || need_apt+=(libgomp1 libgcc-12-dev)
if ! command -v cargo >/dev/null; then
    need_apt+=(curl ca-certificates)
fi
if [ ${#need_apt[@]} -gt 0 ]; then
    echo "setup: installing ${need_apt[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

if ! command -v cargo >/dev/null && [ -x "$HOME/.cargo/bin/cargo" ]; then
    export PATH="$HOME/.cargo/bin:$PATH"
fi
if ! command -v cargo >/dev/null; then
    # Debian 12's own rustc (1.63) is too old; rustup installs a current one.
    echo "setup: installing Rust with rustup"
    curl -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal --component clippy,rustfmt
    export PATH="$HOME/.cargo/bin:$PATH"
fi
rustup component add clippy rustfmt >/dev/null 2>&1 || true

# AFL++ through cargo-afl (stable Rust; builds AFL++'s runtime with make and
# gcc), for the coverage-guided fuzz targets that scripts/test.sh runs
# briefly (fuzz/run.sh).
if ! cargo afl --version >/dev/null 2>&1; then
    echo "setup: installing cargo-afl (AFL++)"
    cargo install --quiet --locked cargo-afl
fi

# numpy, for the `farmem run` Python test: pip where it may install
# (a pyenv or venv Python), else Debian's package (system Python, PEP 668).
if ! python3 -c 'import numpy' 2>/dev/null; then
    echo "setup: installing numpy"
    python3 -m pip install -q numpy 2>/dev/null ||
        { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-numpy >/dev/null; }
fi

# userfaultfd must be usable: root, or vm.unprivileged_userfaultfd=1.
if [ "$(id -u)" != 0 ] && [ "$(cat /proc/sys/vm/unprivileged_userfaultfd 2>/dev/null || echo 0)" != 1 ]; then
    echo "setup: warning: not root and vm.unprivileged_userfaultfd=0; far memory needs one of them" >&2
fi

cargo build --release --workspace --quiet
make -s -C workloads
echo "setup: built target/release/farmem, libfarmem.so, libfarmem_preload.so and target/release/workloads/"
