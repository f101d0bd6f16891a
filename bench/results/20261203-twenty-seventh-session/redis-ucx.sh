#!/usr/bin/env bash
# The redis end check on the UCX path: a loopback `farmem serve` with a shared
# secret (the only kind that offers UCX), and the twenty-second session's
# fill-and-read-back script run against it with FARMEM_TRANSPORT=ucx.
set -eu
FM=${FM:-/work/main/target/release/farmem}
here=$(cd "$(dirname "$0")" && pwd)
. "$(dirname "$0")/ucx-server.sh"
FM=$FM bash "$here/../20261202-twenty-second-session/redis-fill-readback.sh"
grep -E "^ *(transport|backend) " /tmp/redis-t/redis.out
