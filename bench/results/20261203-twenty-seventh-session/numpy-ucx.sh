#!/usr/bin/env bash
# An end check on the UCX path: NumPy fills 768 MiB (about 6x the local
# budget) with known values, rewrites half of it, and reads all of it back
# twice, under `farmem run --local 128M` against a loopback `farmem serve`
# with a shared secret (the only kind that offers UCX). Any page that came
# back zero or stale makes a check fail. (redis cannot be checked this way:
# farmem refuses UCX for programs with their own allocator, see ucx.txt and redis-ucx.sh.)
set -eu
FM=${FM:-/work/main/target/release/farmem}
. "$(dirname "$0")/ucx-server.sh"
"$FM" run --local 128M --stats -- python3 -c '
import numpy as np
n = 768 * 2**20 // 8
a = np.arange(n, dtype=np.int64)
a[::2] *= 3
for r in range(2):
    # even i hold 3i, odd i hold i
    ev, od = a[::2], a[1::2]
    assert (ev == 3 * np.arange(0, n, 2)).all(), "even elements wrong"
    assert (od == np.arange(1, n, 2)).all(), "odd elements wrong"
    print("pass", r, "ok, sum", int(a.sum()))
' 2>&1 | grep -E "^pass|Error|error|fetched from|written back|resident / budget|transport|backend"
