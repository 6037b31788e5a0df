#!/usr/bin/env bash
# Start (or confirm) a real two-node SLURM cluster on this single host.
#
#   tests/cluster/slurm_up.sh [DIR]        # DIR defaults to $MESHRUN_SLURM_DIR or /tmp/meshrun-slurm
#   . DIR/env.sh                           # exports SLURM_CONF for sbatch/srun/sinfo
#
# node1 and node2 are two slurmd daemons (slurmd -N) on 127.0.0.1, ports 17001/17002;
# slurmctld listens on 17000. Everything (munge key and socket, config, state, spool,
# logs) lives under DIR. Idempotent: if the cluster is already up it only says so.
# Exits 0 when both nodes are usable, non-zero with the reason (and log tails) otherwise.
# Needs root and Debian's slurm-wlm + munge. Env knobs: MESHRUN_SLURM_TIMEOUT (s, 60),
# MESHRUN_SLURM_PORT (slurmctld port, 17000; nodes use PORT+1, PORT+2), MESHRUN_SLURM_CPUS (2),
# MESHRUN_SLURM_GPUS (0; N>0 gives each node N fake GPUs). Changing a knob restarts the cluster.
set -euo pipefail

DIR=$(realpath -m "${1:-${MESHRUN_SLURM_DIR:-/tmp/meshrun-slurm}}")
TIMEOUT=${MESHRUN_SLURM_TIMEOUT:-60}
PORT=${MESHRUN_SLURM_PORT:-17000}
CPUS=${MESHRUN_SLURM_CPUS:-2}
GPUS=${MESHRUN_SLURM_GPUS:-0}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CONF=$DIR/etc/slurm.conf
NODES=(node1 node2)

die() {
  echo "slurm_up: ERROR: $*" >&2
  for f in "$DIR"/munge/munged.log "$DIR"/log/*.log; do
    [ -f "$f" ] && { echo "--- tail $f" >&2; tail -n 15 "$f" >&2; }
  done
  exit 1
}

[ "$(id -u)" = 0 ] || die "must run as root (slurmd runs jobs as any user, munged/slurm dirs are root-owned)"
for b in munged munge slurmctld slurmd sinfo scontrol; do
  command -v "$b" >/dev/null 2>&1 || die "'$b' not found: apt-get install -y slurm-wlm munge"
done

export SLURM_CONF=$CONF
unset SLURM_JOB_ID SLURM_JOBID  # don't let an enclosing job confuse the client commands

alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }
gone() { ! alive "$1" && sleep 2 && ! alive "$1"; }  # grace for a daemon still writing its pidfile

# Prints "node state" lines, e.g. "node1 idle".
node_states() { timeout 10 sinfo -h -N -o '%N %t' 2>/dev/null | sort -u; }

cluster_up() {  # up = all four daemons alive and both nodes schedulable (idle, mix or alloc)
  [ -f "$CONF" ] && [ "$(cat "$CONF")" = "$NEWCONF" ] || return 1  # a changed config restarts
  alive "$DIR/munge/munged.pid" && alive "$DIR/run/slurmctld.pid" || return 1
  local n; for n in "${NODES[@]}"; do alive "$DIR/run/slurmd-$n.pid" || return 1; done
  [ "$(node_states | grep -cE ' (idle|mix|alloc|comp)$')" = "${#NODES[@]}" ]
}

write_env() {
  printf 'export SLURM_CONF=%q\n' "$CONF" > "$DIR/env.sh"
}

# Optional fake GPUs (MESHRUN_SLURM_GPUS=N): gres backed by DIR/dev/nvidia* -> /dev/null, so
# jobs with --gpus-per-node get SLURM_GPUS_ON_NODE and CUDA_VISIBLE_DEVICES like on a GPU node.
GPUS_CONF=
[ "$GPUS" -gt 0 ] && GPUS_CONF="NodeName=node[1-2] Name=gpu File=$DIR/dev/nvidia[0-$((GPUS - 1))]"
CTLHOST=$(hostname -s)  # slurmctld refuses to start unless SlurmctldHost matches its hostname
NEWCONF=$(cat <<EOF
# written by tests/cluster/slurm_up.sh
ClusterName=meshrun
SlurmctldHost=$CTLHOST(127.0.0.1)
SlurmctldPort=$PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$DIR/munge/munge.socket
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/%n
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd-%n.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
${GPUS_CONF:+GresTypes=gpu}
SchedulerType=sched/backfill
# batch jobs start ~1 s after sbatch instead of ~3 s (batch_sched_delay defaults to 3)
SchedulerParameters=batch_sched_delay=0
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
InactiveLimit=0
KillWait=5
MinJobAge=300
SlurmctldTimeout=30
SlurmdTimeout=60
NodeName=node[1-2] NodeHostname=localhost NodeAddr=127.0.0.1 Port=[$((PORT + 1))-$((PORT + 2))] CPUs=$CPUS ${GPUS_CONF:+Gres=gpu:$GPUS} State=UNKNOWN
PartitionName=debug Nodes=node[1-2] Default=YES MaxTime=INFINITE State=UP
EOF
)
if cluster_up; then
  write_env
  echo "slurm_up: already up ($(node_states | tr '\n' ' ')); export SLURM_CONF=$CONF"
  exit 0
fi

# Partially up or stale: stop whatever of ours is left, then start clean.
[ -d "$DIR" ] && "$HERE/slurm_down.sh" "$DIR" >/dev/null 2>&1 || true

# munged insists: socket dir executable by all, key dir not writable by others, key 0400/0600.
mkdir -p "$DIR"/{munge,etc,state,run,log} "$DIR"/spool/{node1,node2}
chmod 755 "$DIR" "$DIR/munge"
if [ ! -s "$DIR/munge/munge.key" ]; then
  dd if=/dev/urandom of="$DIR/munge/munge.key" bs=1024 count=1 status=none
fi
chmod 400 "$DIR/munge/munge.key"
echo "$NEWCONF" > "$CONF"
rm -f "$DIR/etc/gres.conf"
if [ -n "$GPUS_CONF" ]; then
  mkdir -p "$DIR/dev"
  for ((i = 0; i < GPUS; i++)); do ln -sfn /dev/null "$DIR/dev/nvidia$i"; done  # must be char devices
  echo "$GPUS_CONF" > "$DIR/etc/gres.conf"
fi

# Node names must resolve (srun, scontrol show hostnames users); add only what is missing.
for n in "${NODES[@]}"; do
  getent hosts "$n" >/dev/null || echo "127.0.0.1 $n  # meshrun test cluster" >> /etc/hosts
done

write_env

# setsid: a test runner killing its process group must not take the daemons down;
# stdio to files: a caller capturing our output must not wait on the daemons' pipes.
M=$DIR/munge
setsid munged --key-file="$M/munge.key" --socket="$M/munge.socket" --log-file="$M/munged.log" \
  --pid-file="$M/munged.pid" --seed-file="$M/munged.seed" </dev/null >>"$DIR/log/daemons.out" 2>&1 \
  || die "munged failed to start"
munge -S "$M/munge.socket" -n </dev/null | unmunge -S "$M/munge.socket" >/dev/null 2>&1 \
  || die "munge credential round-trip failed"

setsid slurmctld -c -f "$CONF" </dev/null >>"$DIR/log/daemons.out" 2>&1 || die "slurmctld failed to start"
deadline=$((SECONDS + TIMEOUT))
until timeout 5 scontrol ping 2>/dev/null | grep -q UP; do
  [ $SECONDS -lt $deadline ] || die "slurmctld not answering after ${TIMEOUT}s"
  gone "$DIR/run/slurmctld.pid" && die "slurmctld exited (port $PORT in use?)"
  sleep 0.5
done
for n in "${NODES[@]}"; do
  setsid slurmd -N "$n" -f "$CONF" </dev/null >>"$DIR/log/daemons.out" 2>&1 || die "slurmd -N $n failed to start"
done

until [ "$(node_states | grep -c ' idle$')" = "${#NODES[@]}" ]; do
  [ $SECONDS -lt $deadline ] || die "nodes not idle after ${TIMEOUT}s: $(node_states | tr '\n' ' ')"
  for n in "${NODES[@]}"; do
    gone "$DIR/run/slurmd-$n.pid" && die "slurmd -N $n exited (port in use?)"
  done
  sleep 0.5
done
echo "slurm_up: ready ($(node_states | tr '\n' ' ')); export SLURM_CONF=$CONF"
