#!/usr/bin/env bash
# The quick start's main job: set up, build, and run `farmem demo` — a
# workload 4x larger than its local budget on the embedded loopback server,
# checked, timed next to all-local, with the runtime's statistics.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
[ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"
exec target/release/farmem demo "$@"
