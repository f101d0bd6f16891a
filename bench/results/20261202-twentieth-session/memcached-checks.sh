#!/usr/bin/env bash
# memcached under farmem, checked byte for byte: the embedded server as root
# and as `nobody`, then an external `farmem serve` over each transport
# (socket, memfd, ucx). Each run loads 200 MiB through memcache_check.py at
# --local 64M, reads it all back, and lists the listening sockets (ss -ltnp)
# while it pages. usage: memcached-checks.sh (root, from the repository root,
# after a release build)
set -uo pipefail
FM=$PWD/target/release
port=$((21300 + RANDOM % 500))
check() { # $1: port; runs the check while memcached pages, then lists sockets
    python3 tests/clients/memcache_check.py --port "$1" load-verify --total-mib 200
    echo "client exit $?"
    ss -ltnp | grep -E "memcached|farmem" | sed 's/  */ /g'
}
wait_port() { for _ in $(seq 100); do ss -ltn | grep -q ":$1 " && return 0; sleep 0.1; done; return 1; }

echo "# memcached under farmem on $(git rev-parse --short HEAD) (200 MiB through memcache_check.py load-verify at --local 64M); ss -ltnp during each run"
echo "## embedded server, root"
port=$((port + 1))
"$FM/farmem" run --local 64M --stats -- memcached -p $port -l 127.0.0.1 -m 400 -u root > /tmp/mc-root.log 2>&1 &
wait_port $port && check $port
pkill -f "memcached -p $port"; wait
grep -E 'fetched from backend' /tmp/mc-root.log

echo "## embedded server, as nobody"
rm -rf /tmp/fmbin && mkdir -p /tmp/fmbin && cp "$FM/farmem" "$FM"/*.so /tmp/fmbin/ && chmod -R a+rx /tmp/fmbin
port=$((port + 1))
su nobody -s /bin/bash -c "/tmp/fmbin/farmem run --local 64M --stats -- memcached -p $port -l 127.0.0.1 -m 400" > /tmp/mc-nobody.log 2>&1 &
wait_port $port && check $port
pkill -f "memcached -p $port"; wait
grep -E 'fetched from backend' /tmp/mc-nobody.log

for t in socket memfd ucx; do
    echo "## external farmem serve, transport $t"
    sec=$(mktemp -u /tmp/fm-secret.XXXXXX)
    "$FM/farmem" secret init --path "$sec" > /dev/null
    FARMEM_SECRET_FILE=$sec "$FM/farmem" serve --listen 127.0.0.1:0 --capacity 1G > /tmp/mc-serve.log 2>&1 &
    spid=$!
    addr=
    for _ in $(seq 100); do
        addr=$(ss -ltnp | grep "pid=$spid," | awk '{print $4}' | head -1)
        [ -n "$addr" ] && break; sleep 0.1
    done
    port=$((port + 1))
    FARMEM_SECRET_FILE=$sec FARMEM_SERVERS=$addr FARMEM_TRANSPORT=$t \
        "$FM/farmem" run --local 64M --stats -- memcached -p $port -l 127.0.0.1 -m 400 -u root > /tmp/mc-ext.log 2>&1 &
    wait_port $port && check $port
    pkill -f "memcached -p $port"; sleep 1
    kill $spid; wait
    grep -E 'fetched from backend|^ *transport' /tmp/mc-ext.log
    rm -f "$sec"
done
