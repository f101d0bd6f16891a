#!/usr/bin/env bash
# The redis end check on the UCX path: a loopback `farmem serve` with a shared
# secret (the only kind that offers UCX), and the twenty-second session's
# fill-and-read-back script run against it with FARMEM_TRANSPORT=ucx.
set -eu
FM=${FM:-/work/main/target/release/farmem}
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
"$FM" secret init --path "$tmp/secret" >/dev/null
"$FM" serve --listen 127.0.0.1:0 --capacity 4G --secret-file "$tmp/secret" --log-level warn > "$tmp/serve.out" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; rm -rf "$tmp"' EXIT
until grep -q listening "$tmp/serve.out"; do sleep 0.1; done
addr=$(sed -nE 's/.*listening on ([^ ]+).*/\1/p' "$tmp/serve.out")
echo "server $addr"
FARMEM_TRANSPORT=ucx FARMEM_SERVERS=$addr FARMEM_SECRET_FILE=$tmp/secret FM=$FM \
    bash "$here/../20261202-twenty-second-session/redis-fill-readback.sh"
grep -E "^ *(transport|backend) " /tmp/redis-t/redis.out
