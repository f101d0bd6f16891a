#!/usr/bin/env bash
# Emulated hosts on one machine: network namespaces joined by veth pairs to a
# bridge, each with its own address, optionally rate-limited with tc (tbf on
# both ends of a host's link, so both directions are limited).
#
#   netns-hosts.sh up NAME SERVERS [SERVER_RATE [CLIENT_RATE]]
#       NAME-c is the client host (10.77.0.1), NAME-s1..NAME-sSERVERS the
#       servers (10.77.0.11, .12, ...); NAME-sw holds the bridge. A rate is
#       tc's form, e.g. 10gbit or 2gbit; "-" or none means unlimited.
#   netns-hosts.sh down NAME      removes every namespace NAME-* (idempotent)
#   netns-hosts.sh addr NAME HOST prints HOST's address (c, s1, s2, ...)
#   netns-hosts.sh agent NAME     prints the path of an rsh agent for mpirun:
#       `ssh`-like, it runs a command in the namespace of the host whose
#       address it is given (mpirun --mca plm_rsh_agent ...).
#
# Addresses repeat between NAMEs: every set lives in its own namespaces, so
# they never meet. Traffic stays inside them.
set -euo pipefail

die() { echo "netns-hosts: $*" >&2; exit 2; }
[ "$(id -u)" = 0 ] || die "needs root (ip netns)"
command -v ip >/dev/null || die "needs ip (apt-get install iproute2)"

addr_of() {
    case "$1" in
        c) echo 10.77.0.1 ;;
        s[0-9]*) echo "10.77.0.$((10 + ${1#s}))" ;;
        *) die "no host $1 (c, s1, s2, ...)" ;;
    esac
}

limit() { # NS DEV RATE
    [ "$3" = - ] && return 0
    # A burst of 1 ms at the rate (at least 64 KiB) and a queue of 20 ms.
    local bits
    bits=$(tc_rate_bits "$3")
    local burst=$((bits / 8 / 1000))
    [ "$burst" -lt 65536 ] && burst=65536
    ip netns exec "$1" tc qdisc replace dev "$2" root tbf rate "$3" burst "$burst" latency 20ms
}

tc_rate_bits() {
    local r=${1,,}
    case "$r" in
        *gbit) echo $(( ${r%gbit} * 1000000000 )) ;;
        *mbit) echo $(( ${r%mbit} * 1000000 )) ;;
        *kbit) echo $(( ${r%kbit} * 1000 )) ;;
        *) die "rate $1: write it as Ngbit, Nmbit or Nkbit" ;;
    esac
}

join() { # NAME HOST RATE
    local ns="$1-$2" sw="$1-sw" a
    a=$(addr_of "$2")
    ip netns add "$ns"
    ip netns exec "$ns" ip link set lo up
    ip link add "fmh$$-$2" type veth peer name "fmb$$-$2"
    ip link set "fmh$$-$2" netns "$ns"
    ip link set "fmb$$-$2" netns "$sw"
    ip netns exec "$ns" ip link set "fmh$$-$2" name eth0
    ip netns exec "$ns" ip addr add "$a/24" dev eth0
    ip netns exec "$ns" ip link set eth0 up
    ip netns exec "$sw" ip link set "fmb$$-$2" master br0 up
    limit "$ns" eth0 "$3"
    limit "$sw" "fmb$$-$2" "$3"
}

case "${1:-}" in
    up)
        [ $# -ge 3 ] || die "usage: up NAME SERVERS [SERVER_RATE [CLIENT_RATE]]"
        name=$2 n=$3 srate=${4:--} crate=${5:--}
        [[ "$n" =~ ^[1-9][0-9]?$ ]] && [ "$n" -le 32 ] || die "SERVERS $n: give 1 to 32"
        [ "$srate" = - ] || tc_rate_bits "$srate" >/dev/null
        [ "$crate" = - ] || tc_rate_bits "$crate" >/dev/null
        "$0" down "$name"
        ip netns add "$name-sw"
        ip netns exec "$name-sw" ip link add br0 type bridge
        ip netns exec "$name-sw" ip link set br0 up
        join "$name" c "$crate"
        for i in $(seq 1 "$n"); do join "$name" "s$i" "$srate"; done
        ;;
    down)
        [ $# -eq 2 ] || die "usage: down NAME"
        for ns in $(ip netns list | awk '{print $1}' | grep -E "^$2-(sw|c|s[0-9]+)$" || true); do
            ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
            ip netns del "$ns"
        done
        rm -rf "/tmp/$2-tmp-$2-"* "/tmp/$2-rsh-agent"
        ;;
    addr)
        [ $# -eq 3 ] || die "usage: addr NAME HOST"
        addr_of "$3"
        ;;
    agent)
        [ $# -eq 2 ] || die "usage: agent NAME"
        f="/tmp/$2-rsh-agent"
        cat >"$f" <<AGENT
#!/bin/sh
# rsh agent for mpirun: "$f HOST CMD..." runs CMD in HOST's namespace.
host=\$1; shift
case "\$host" in
    10.77.0.1) ns=$2-c ;;
    10.77.0.*) ns=$2-s\$(( \${host##*.} - 10 )) ;;
    *) echo "rsh agent: unknown host \$host" >&2; exit 255 ;;
esac
# Each host gets a /tmp of its own for what Open MPI keeps there (its
# session directories), as a real node has: two orteds creating the same
# session directory at once in a shared /tmp fail with "File exists".
tmp=/tmp/$2-tmp-\$ns
mkdir -p "\$tmp"
exec ip netns exec "\$ns" env TMPDIR="\$tmp" /bin/sh -c "\$*"
AGENT
        chmod 755 "$f"
        echo "$f"
        ;;
    *) die "usage: up|down|addr|agent (see the comment at the top)" ;;
esac
