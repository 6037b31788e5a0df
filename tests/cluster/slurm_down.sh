#!/usr/bin/env bash
# Stop the test cluster started by slurm_up.sh (same DIR argument / $MESHRUN_SLURM_DIR).
#
#   tests/cluster/slurm_down.sh [DIR] [--purge]    # --purge also deletes DIR
#
# Cancels jobs, then stops slurmd x2, slurmctld and munged by the pids in DIR (nothing
# else is touched). Safe to run when nothing is running. The /etc/hosts lines stay.
set -uo pipefail

DIR=${MESHRUN_SLURM_DIR:-/tmp/meshrun-slurm}
PURGE=0
for a in "$@"; do
  case $a in --purge) PURGE=1 ;; *) DIR=$a ;; esac
done
DIR=$(realpath -m "$DIR")
export SLURM_CONF=$DIR/etc/slurm.conf

stop() {  # stop <pidfile> <name>: TERM, wait up to 10 s, then KILL
  local f=$1 pid
  [ -s "$f" ] || return 0
  pid=$(cat "$f")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -0 "$pid" 2>/dev/null && { echo "slurm_down: $2 ($pid) ignored TERM, killing"; kill -KILL "$pid"; }
    echo "slurm_down: stopped $2 ($pid)"
  fi
  rm -f "$f"
}

if [ -f "$SLURM_CONF" ] && [ -s "$DIR/run/slurmctld.pid" ] && kill -0 "$(cat "$DIR/run/slurmctld.pid")" 2>/dev/null; then
  jobs=$(timeout 10 squeue -h -o %i 2>/dev/null | tr '\n' ' ')
  if [ -n "${jobs// /}" ]; then
    echo "slurm_down: cancelling jobs $jobs"
    # shellcheck disable=SC2086
    timeout 10 scancel $jobs 2>/dev/null
    for _ in $(seq 25); do [ -z "$(timeout 5 squeue -h -o %i 2>/dev/null)" ] && break; sleep 0.4; done
  fi
fi

stop "$DIR/run/slurmd-node1.pid" "slurmd node1"
stop "$DIR/run/slurmd-node2.pid" "slurmd node2"
stop "$DIR/run/slurmctld.pid" slurmctld
stop "$DIR/munge/munged.pid" munged

if [ $PURGE = 1 ] && [ -d "$DIR" ]; then
  rm -rf -- "$DIR" && echo "slurm_down: removed $DIR"
fi
exit 0
