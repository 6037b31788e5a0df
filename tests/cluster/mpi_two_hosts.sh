#!/usr/bin/env bash
# Two "hosts" on one machine for real multi-node Open MPI runs (root, iproute2, util-linux).
#
#   tests/cluster/mpi_two_hosts.sh up                 # create hosts h1, h2 (idempotent)
#   tests/cluster/mpi_two_hosts.sh mpirun [ARGS] CMD  # mpirun on h1: one rank on h1, one on h2
#   tests/cluster/mpi_two_hosts.sh exec h2 CMD...     # run CMD "on" h2
#   tests/cluster/mpi_two_hosts.sh check              # self-test: sockets + mpirun
#   tests/cluster/mpi_two_hosts.sh down               # delete namespaces (idempotent)
#
# Host hN is network namespace mr-hN holding interface eth0 = 10.77.0.N/24 (a veth pair joins
# h1 and h2 directly: no bridge, so host firewalls/br_netfilter never see the traffic) and lo.
# Commands run "on" hN get that namespace, their own UTS namespace with hostname hN, and an
# /etc/hosts that maps h1/h2 (ip netns exec bind-mounts /etc/netns/mr-hN/hosts over /etc/hosts;
# the real /etc/hosts is not touched). mpirun runs on h1 and reaches h2 through fake_ssh.
# Nothing here talks to any address outside 10.77.0.0/24 and loopback.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SELF=$HERE/mpi_two_hosts.sh
HOSTS=(h1 h2)
NET=10.77.0
IF=eth0

die() { echo "mpi_two_hosts: ERROR: $*" >&2; exit 1; }
ns_of() {  # h2 | h2.anything | 10.77.0.2 -> mr-h2
  local h=${1%%.*}
  case $1 in "$NET".*) h=h${1##*.} ;; esac
  [[ " ${HOSTS[*]} " == *" $h "* ]] || die "unknown host '$1' (known: ${HOSTS[*]})"
  echo "mr-$h"
}

is_up() {
  local i
  for i in 1 2; do
    ip -n "mr-h$i" -4 addr show dev "$IF" 2>/dev/null | grep -q "inet $NET.$i/24" || return 1
    [ -f "/etc/netns/mr-h$i/hosts" ] || return 1
  done
}

cmd_down() {  # also ends processes still running "on" the hosts (e.g. after a killed mpirun)
  local h pids
  for h in "${HOSTS[@]}"; do
    pids=$(ip netns pids "mr-$h" 2>/dev/null | tr '\n' ' ' || true)
    if [ -n "${pids// /}" ]; then
      echo "mpi_two_hosts: stopping processes on $h: $pids"
      # shellcheck disable=SC2086  # a list of pids
      kill -TERM $pids 2>/dev/null || true
      sleep 1
      # shellcheck disable=SC2086
      kill -KILL $pids 2>/dev/null || true
    fi
    if ip netns del "mr-$h" 2>/dev/null; then echo "mpi_two_hosts: deleted netns mr-$h"; fi
    rm -rf "/etc/netns/mr-$h"
  done
  return 0
}

cmd_up() {
  [ "$(id -u)" = 0 ] || die "must run as root (ip netns)"
  command -v ip >/dev/null || die "need iproute2 (ip)"
  command -v unshare >/dev/null || die "need util-linux (unshare)"
  if is_up; then echo "mpi_two_hosts: already up (h1=$NET.1 h2=$NET.2)"; return 0; fi
  cmd_down >/dev/null
  local i
  for i in 1 2; do
    ip netns add "mr-h$i"
    ip -n "mr-h$i" link set lo up
    mkdir -p "/etc/netns/mr-h$i"
    { cat /etc/hosts; echo "$NET.1 h1"; echo "$NET.2 h2"; } > "/etc/netns/mr-h$i/hosts"
  done
  ip link add mrv-h1 type veth peer name mrv-h2
  for i in 1 2; do
    ip link set "mrv-h$i" netns "mr-h$i"
    ip -n "mr-h$i" link set "mrv-h$i" name "$IF"
    ip -n "mr-h$i" addr add "$NET.$i/24" dev "$IF"
    ip -n "mr-h$i" link set "$IF" up
  done
  is_up || die "namespaces did not come up"
  echo "mpi_two_hosts: up (h1=$NET.1 h2=$NET.2, interface $IF in each)"
}

cmd_exec() {  # exec HOST CMD...
  [ $# -ge 2 ] || die "usage: exec HOST CMD..."
  local ns; ns=$(ns_of "$1"); shift
  is_up || die "hosts are not up: run '$SELF up' first"
  # shellcheck disable=SC2016  # $0/$@ belong to the inner sh
  exec ip netns exec "$ns" unshare --uts -- sh -c 'hostname "$0" && exec "$@"' "${ns#mr-}" "$@"
}

# The mpirun options that make the two hosts work; printed by `mpirun-args` for reuse.
# `mpirun` adds --host ${MESHRUN_MPI_HOSTS:-h1:1,h2:1}; without -np, mpirun starts one process per slot.
# shellcheck disable=SC2054  # the commas belong to the values
MPIRUN_ARGS=(--allow-run-as-root
  --mca plm_rsh_agent "$HERE/fake_ssh" --mca plm_rsh_no_tree_spawn 1
  --mca oob_tcp_if_include "$NET.0/24" --mca btl_tcp_if_include "$NET.0/24"
  --mca btl self,tcp --bind-to none)

cmd_mpirun() {
  cmd_exec h1 mpirun "${MPIRUN_ARGS[@]}" --host "${MESHRUN_MPI_HOSTS:-h1:1,h2:1}" "$@"
}

ALLREDUCE_PY='
import ctypes as C
mpi = C.CDLL("libmpi.so.40", mode=C.RTLD_GLOBAL)
sym = lambda n: C.c_void_p(C.addressof(C.c_void_p.in_dll(mpi, n)))
world = sym("ompi_mpi_comm_world")
mpi.MPI_Init(None, None)
rank, name, n, out = C.c_int(), C.create_string_buffer(256), C.c_int(), C.c_int()
mpi.MPI_Comm_rank(world, C.byref(rank))
mpi.MPI_Get_processor_name(name, C.byref(n))
mpi.MPI_Allreduce(C.byref(C.c_int(rank.value + 1)), C.byref(out), 1, sym("ompi_mpi_int"), sym("ompi_mpi_op_sum"), world)
print("rank", rank.value, "on", name.value.decode(), "allreduce=%d" % out.value, flush=True)
mpi.MPI_Finalize()'

cmd_check() {
  cmd_up
  local port=17077 out
  echo "== socket h1 -> h2 ($NET.2:$port)"
  "$SELF" exec h2 python3 -c "
import socket; s = socket.create_server(('$NET.2', $port)); s.settimeout(20)
c, a = s.accept(); c.sendall(('hello from ' + socket.gethostname() + ' to ' + a[0]).encode())" &
  local srv=$!
  out=$("$SELF" exec h1 python3 -c "
import socket, time
for _ in range(100):
    try: c = socket.create_connection(('h2', $port), timeout=5); break
    except OSError: time.sleep(0.1)
print(c.recv(100).decode(), 'via', c.getsockname()[0], 'on', socket.gethostname())")
  wait $srv
  echo "$out"
  [[ $out == "hello from h2 to $NET.1 via $NET.1 on h1" ]] || die "socket test failed: $out"
  echo "== mpirun, one rank per host"
  # shellcheck disable=SC2016  # expanded by each rank
  out=$("$SELF" mpirun sh -c 'echo "$(hostname) rank=$OMPI_COMM_WORLD_RANK local_size=$OMPI_COMM_WORLD_LOCAL_SIZE local_rank=$OMPI_COMM_WORLD_LOCAL_RANK node_rank=$OMPI_COMM_WORLD_NODE_RANK nodes=$OMPI_MCA_orte_num_nodes"' | sort)
  echo "$out"
  [ "$out" = "h1 rank=0 local_size=1 local_rank=0 node_rank=0 nodes=2
h2 rank=1 local_size=1 local_rank=0 node_rank=0 nodes=2" ] || die "mpirun did not give one rank per host"
  echo "== MPI_Init + MPI_Allreduce across the hosts (libmpi via ctypes, btl tcp)"
  out=$("$SELF" mpirun python3 -c "$ALLREDUCE_PY" | sort)
  echo "$out"
  [ "$(grep -c 'allreduce=3$' <<<"$out")" = 2 ] || die "MPI allreduce across hosts failed"
  echo "mpi_two_hosts: check OK"
}

case ${1:-} in
  up) cmd_up ;;
  down) cmd_down ;;
  exec) shift; cmd_exec "$@" ;;
  mpirun) shift; cmd_mpirun "$@" ;;
  mpirun-args) printf '%q ' "${MPIRUN_ARGS[@]}" --host h1:1,h2:1; echo ;;
  check) cmd_check ;;
  *) sed -n '2,9p' "$SELF" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
