#!/usr/bin/env bash
# A SLURM cluster of $SLURM_CI_NODES compute nodes (default 2) on this one machine for the end-to-end tests
# (Debian/Ubuntu packages, run as root, no systemd needed). Each compute node is a network namespace of its
# own (`sp-<node>`) with its own address on the project's test network 10.87.0.0/24 (a bridge `spbr0` in
# the root namespace, 10.87.0.1, where slurmctld and munged run; veth pairs to the nodes, 10.87.0.11,
# .12, ...; nothing is routed off that network) and its own host name (a UTS namespace: `node1`, `node2`,
# ...). All nodes see the same file system, as compute nodes see a cluster's shared file system, and
# reach munged through its socket there. Verbs, usually in this order:
#   install    apt-get the packages (slurmctld slurmd slurm-client munge)
#   configure  write slurm.conf/gres.conf under $SLURM_CI_DIR (default: <project>/.slurm-ci)
#   start      make the network, start munged, slurmctld and one slurmd per node (PIDs under $DIR/run)
#   health     run one batch job on each node and check its host name; prints HEALTHY
#   kill-node NODE  a node dies: SIGKILL to every process in its namespace (slurmd and its jobs)
#   start-node NODE start a node's slurmd again (the node returns to service)
#   stop       stop exactly the daemons `start` started (by PID), every process left in the nodes'
#              namespaces, remove the namespaces, the bridge and the config links
#   up         configure + start + health (install first when the packages are missing)
#
# Two partitions over all nodes: `cpu` (the default) and `gpu`. Each node advertises two GPUs as a
# generic resource backed by two empty placeholder files ($DIR/dev/gpu0, gpu1): SLURM schedules `--gpus`/`--gres=gpu:N` requests and
# accounts for them exactly as on a real GPU node, but no device exists, so GPU jobs of the test run a
# model on the CPU. This keeps the routing real (sbatch --partition=gpu --gpus=1) without hardware.
#
# Without slurmdbd, `sacct` has no history: the workflow polls `squeue` (jobs stay visible for
# MinJobAge seconds after they end) and every finished job is appended to $SLURM_CI_DIR/log/jobcomp.txt
# (JobComp plugin, with the node it ran on), which the tests read to check partitions, nodes and states.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
DIR=${SLURM_CI_DIR:-$ROOT/.slurm-ci}
CONF=$DIR/slurm.conf
MUNGE_SOCKET=$DIR/munge/munge.socket.2
# The job step that the Snakemake SLURM executor runs clears SLURM_* variables (SLURM_CONF included)
# before its inner `srun`, so the configuration must also be found at SLURM's default path.
DEFAULT_CONF=/etc/slurm/slurm.conf
CONTROLLER=$(hostname)
NODE_COUNT=${SLURM_CI_NODES:-2}
NET=10.87.0
BRIDGE=spbr0
NODES=()
for i in $(seq 1 "$NODE_COUNT"); do NODES+=("node$i"); done
export SLURM_CONF=$CONF
trap 'echo "error: cluster.sh failed at line $LINENO: $BASH_COMMAND (logs: $DIR/log, $DIR/munge/munged.log)" >&2' ERR

install() {
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
    slurmctld slurmd slurm-client munge iproute2
}

node_index() { echo "${1#node}"; }
node_addr() { echo "$NET.$((10 + $(node_index "$1")))"; }

configure() {
  mkdir -p "$DIR"/{munge,log,run,state/ctld,dev}
  touch "$DIR/dev/gpu0" "$DIR/dev/gpu1"
  chown munge:munge "$DIR/munge"
  chmod 755 "$DIR/munge"
  if [ ! -f "$DIR/munge/munge.key" ]; then
    # A fresh key for this cluster only (1024 random bytes, as `mungekey` would write).
    dd if=/dev/urandom of="$DIR/munge/munge.key" bs=1024 count=1 status=none
    chown munge:munge "$DIR/munge/munge.key"
    chmod 400 "$DIR/munge/munge.key"
  fi
  # A new cluster starts with no jobs and a new job completion log (the tests read it by job id): jobs
  # of an interrupted earlier run would otherwise end in it when the controller restores its state.
  rm -rf "$DIR/log/jobcomp.txt" "$DIR/state/ctld" "$DIR"/state/d-*
  mkdir -p "$DIR/state/ctld"
  # The machine's memory shared out between the nodes (they all run on it).
  local mem=$((($(free -m | awk '/^Mem:/{print $2}') - 1024) / NODE_COUNT))
  local node nodes=""
  for node in "${NODES[@]}"; do
    nodes+="NodeName=$node NodeHostname=$node NodeAddr=$(node_addr "$node") CPUs=$(nproc)"
    nodes+=" RealMemory=$mem Gres=gpu:2 State=UNKNOWN"$'\n'
  done
  cat >"$CONF" <<EOF
ClusterName=stressprobe-ci
SlurmctldHost=$CONTROLLER($NET.1)
SlurmUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$MUNGE_SOCKET
StateSaveLocation=$DIR/state/ctld
SlurmdSpoolDir=$DIR/state/d-%n
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd-%n.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$DIR/log/jobcomp.txt
SelectType=select/cons_tres
# Cores and memory are what jobs take; the least loaded node is filled first, so jobs spread over nodes.
SelectTypeParameters=CR_Core_Memory,CR_LLN
GresTypes=gpu
DefMemPerCPU=1000
MpiDefault=none
ReturnToService=2
# Finished jobs stay in squeue this long; the profile polls squeue (no slurmdbd), so keep it well above
# the executor's first status check.
MinJobAge=300
KillWait=5
# A node whose slurmd is silent this long goes DOWN and its jobs end as NODE_FAIL; SLURM does not requeue
# them (Snakemake reruns them: restart-times, or the next invocation).
SlurmdTimeout=10
JobRequeue=0
$nodes
PartitionName=cpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP
PartitionName=gpu Nodes=ALL Default=NO MaxTime=INFINITE State=UP
EOF
  cat >"$DIR/gres.conf" <<EOF
NodeName=node[1-$NODE_COUNT] Name=gpu File=$DIR/dev/gpu[0-1]
EOF
  mkdir -p "$(dirname "$DEFAULT_CONF")"
  if [ -e "$DEFAULT_CONF" ] && [ ! -L "$DEFAULT_CONF" ]; then
    echo "error: $DEFAULT_CONF exists and is not ours; move it away before running the CI cluster" >&2
    exit 1
  fi
  ln -sfn "$CONF" "$DEFAULT_CONF"
  ln -sfn "$DIR/gres.conf" "$(dirname "$DEFAULT_CONF")/gres.conf"
}

wait_for() {
  local what=$1 tries=${2:-120}
  for _ in $(seq 1 "$tries"); do
    if eval "$what" >/dev/null 2>&1; then return 0; fi
    sleep 0.25
  done
  echo "error: timed out waiting for: $what" >&2
  return 1
}

network() {
  # The bridge and one namespace per node, joined by a veth pair (no route off 10.87.0.0/24, no NAT).
  ip link add "$BRIDGE" type bridge
  ip addr add "$NET.1/24" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  local node ns veth
  for node in "${NODES[@]}"; do
    ns=sp-$node
    veth=spv$(node_index "$node")
    ip netns add "$ns"
    ip link add "$veth" type veth peer name eth0 netns "$ns"
    ip link set "$veth" master "$BRIDGE" up
    ip -n "$ns" addr add "$(node_addr "$node")/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
  done
}

start_node() {
  # slurmd in the node's network namespace, with the node's host name (a UTS namespace of its own).
  # nsenter, not `ip netns exec`: that one mounts a fresh /sys, without the cgroup file system slurmd needs.
  local node=$1
  mkdir -p "$DIR/state/d-$node"
  nsenter --net="/run/netns/sp-$node" unshare --uts \
    sh -c 'hostname "$0" && exec slurmd -N "$0" -f "$1"' "$node" "$CONF"
}

start() {
  [ -f "$CONF" ] || configure
  network
  runuser -u munge -- munged -S "$MUNGE_SOCKET" --key-file="$DIR/munge/munge.key" \
    --log-file="$DIR/munge/munged.log" --pid-file="$DIR/munge/munged.pid" --seed-file="$DIR/munge/munged.seed"
  wait_for "munge -S $MUNGE_SOCKET -n"
  slurmctld -f "$CONF"
  wait_for "scontrol ping | grep -q UP"
  local node
  for node in "${NODES[@]}"; do start_node "$node"; done
  wait_for "[ \$(sinfo -h -p cpu -t idle -N -o %N | sort -u | wc -l) = $NODE_COUNT ]" 240
}

health() {
  sinfo -N
  local i job jobs=()
  for i in "${!NODES[@]}"; do
    jobs+=("$(sbatch --parsable -p gpu --gpus=1 -w "${NODES[$i]}" -t 1 -o "$DIR/log/health-%j.out" --wrap hostname)")
  done
  for i in "${!NODES[@]}"; do
    job=${jobs[$i]}
    wait_for "grep -q 'JobId=$job .*JobState=COMPLETED' $DIR/log/jobcomp.txt" 240
    # The job ran in the node's own UTS namespace: it reports the node's host name.
    grep -qx "${NODES[$i]}" "$DIR/log/health-$job.out"
  done
  echo HEALTHY
}

kill_node() {
  # A node dies: SIGKILL to everything that runs on it (slurmd, slurmstepd and the jobs' processes).
  local node=${1:?usage: cluster.sh kill-node NODE} pids
  pids=$(ip netns pids "sp-$node" 2>/dev/null || true)
  if [ -n "$pids" ]; then
    # shellcheck disable=SC2086
    kill -9 $pids 2>/dev/null || true
  fi
  rm -f "$DIR/run/slurmd-$node.pid"
  echo "killed $node: $(echo "$pids" | wc -w) processes"
}

stop() {
  local pidfile pid link node
  # munged runs as user munge, so its PID file lives in the directory that user owns.
  for pidfile in "$DIR"/run/slurmd-*.pid "$DIR/run/slurmctld.pid" "$DIR/munge/munged.pid"; do
    pid=$(cat "$pidfile" 2>/dev/null || true)
    if [ -n "$pid" ] && kill "$pid" 2>/dev/null; then
      for _ in $(seq 1 50); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.2
      done
    fi
    rm -f "$pidfile"
  done
  for node in "${NODES[@]}"; do
    if ip netns list | grep -qw "sp-$node"; then
      kill_node "$node" >/dev/null
      ip netns del "sp-$node"
    fi
  done
  if ip link show "$BRIDGE" >/dev/null 2>&1; then ip link del "$BRIDGE"; fi
  for link in "$DEFAULT_CONF" "$(dirname "$DEFAULT_CONF")/gres.conf"; do
    if [ -L "$link" ]; then rm -f "$link"; fi
  done
}

up() {
  if ! command -v slurmctld >/dev/null || ! command -v ip >/dev/null; then install; fi
  configure
  start
  health
}

case "${1:-}" in
  install | configure | start | health | stop | up) "$1" ;;
  kill-node) kill_node "${2:-}" ;;
  start-node) start_node "${2:?usage: cluster.sh start-node NODE}" ;;
  *)
    echo "usage: $0 install|configure|start|health|stop|up|kill-node NODE|start-node NODE" >&2
    exit 2
    ;;
esac
