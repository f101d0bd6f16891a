#!/usr/bin/env bash
# The whole test suite: set-up, formatting, lints (Rust and C), unit,
# property and integration tests (real userfaultfd, real servers on loopback,
# C programs built with gcc -fopenmp -Wall -Wextra -Werror).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
[ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy --all-targets -- -D warnings"
cargo clippy --release --workspace --all-targets --quiet -- -D warnings
echo "== C sources with -Wall -Wextra -Werror"
for c in tests/programs/*.c workloads/*.c; do
    [ -e "$c" ] || continue
    gcc -O2 -fopenmp -Wall -Wextra -Werror -Iinclude -fsyntax-only "$c"
done
echo "== cargo test"
cargo test --release --workspace 2>&1 | tee target/test.log
passed=$(grep -Eo '[0-9]+ passed' target/test.log | awk '{s+=$1} END {print s+0}')
failed=$(grep -Eo '[0-9]+ failed' target/test.log | awk '{s+=$1} END {print s+0}')
echo "all suites: $passed passed, $failed failed"
