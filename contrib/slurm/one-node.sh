#!/usr/bin/env bash
# A private one-node Slurm cluster on this machine, for trying farmem's batch
# recipe and for its test (crates/cli/tests/system/slurm.rs): munge with a fresh
# key, slurmctld and slurmd on free loopback ports, cgroup v1 memory limits
# per job and step, everything under DIR. Needs root (slurmd starts jobs as
# their users) and Debian 12's slurmd, slurmctld, slurm-client and munge.
#   contrib/slurm/one-node.sh start DIR   then: export SLURM_CONF=DIR/slurm.conf
#   contrib/slurm/one-node.sh stop DIR
set -euo pipefail
cmd=${1:-}; D=${2:-}
[ -n "$cmd" ] && [ -n "$D" ] || { echo "usage: $0 start|stop DIR" >&2; exit 2; }

stop() {
    for p in slurmd slurmctld munged; do
        [ -f "$D/$p.pid" ] && kill "$(cat "$D/$p.pid")" 2>/dev/null || true
    done
    # Wait for the daemons, so that DIR can be removed after.
    for _ in $(seq 50); do
        alive=0
        for p in slurmd slurmctld munged; do
            [ -f "$D/$p.pid" ] && kill -0 "$(cat "$D/$p.pid")" 2>/dev/null && alive=1
        done
        [ $alive = 0 ] && break
        sleep 0.1
    done
}

case $cmd in
stop) stop; exit 0 ;;
start) ;;
*) echo "usage: $0 start|stop DIR" >&2; exit 2 ;;
esac

[ "$(id -u)" = 0 ] || { echo "$0: needs root (slurmd runs jobs as their users)" >&2; exit 1; }
for p in munged slurmctld slurmd sbatch sinfo; do
    command -v $p >/dev/null || { echo "$0: $p is missing (apt-get install munge slurmctld slurmd slurm-client)" >&2; exit 1; }
done
[ -d /sys/fs/cgroup/memory ] || { echo "$0: no cgroup v1 memory controller at /sys/fs/cgroup/memory" >&2; exit 1; }
mkdir -p "$D/state" "$D/spool"
# Users submit jobs: they reach munge's socket and read the configuration.
chmod 0755 "$D"
D=$(cd "$D" && pwd)
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
host=$(hostname -s)
mem_mb=$(awk '/MemTotal/ {print int($2 / 1024 * 0.9)}' /proc/meminfo)
head -c 1024 /dev/urandom > "$D/munge.key"
chmod 0400 "$D/munge.key"
munged --force --key-file="$D/munge.key" --socket="$D/munge.socket" \
    --pid-file="$D/munged.pid" --log-file="$D/munged.log" --seed-file="$D/munged.seed"
cat > "$D/slurm.conf" <<CONF
ClusterName=farmem-one-node
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
SlurmUser=root
AuthType=auth/munge
AuthInfo=socket=$D/munge.socket
CredType=cred/munge
StateSaveLocation=$D/state
SlurmdSpoolDir=$D/spool
SlurmctldPidFile=$D/slurmctld.pid
SlurmdPidFile=$D/slurmd.pid
SlurmctldLogFile=$D/slurmctld.log
SlurmdLogFile=$D/slurmd.log
ProctrackType=proctrack/cgroup
TaskPlugin=task/cgroup
JobAcctGatherType=jobacct_gather/cgroup
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
MpiDefault=none
SwitchType=switch/none
ReturnToService=2
NodeName=$host NodeAddr=127.0.0.1 CPUs=$(nproc) RealMemory=$mem_mb State=UNKNOWN
PartitionName=main Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
cat > "$D/cgroup.conf" <<CONF
CgroupPlugin=cgroup/v1
ConstrainRAMSpace=yes
ConstrainSwapSpace=yes
AllowedSwapSpace=0
CONF
chmod 0644 "$D/slurm.conf" "$D/cgroup.conf"
export SLURM_CONF=$D/slurm.conf
slurmctld -f "$D/slurm.conf"
slurmd -f "$D/slurm.conf" -N "$host"
for _ in $(seq 100); do
    sinfo -h -o %t 2>/dev/null | grep -qE '^idle' && { echo "slurm: one node ($host) idle; export SLURM_CONF=$D/slurm.conf"; exit 0; }
    sleep 0.2
done
echo "$0: the node did not come up; logs in $D" >&2
tail -5 "$D/slurmctld.log" "$D/slurmd.log" >&2 || true
exit 1
