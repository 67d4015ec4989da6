#!/usr/bin/env bash
# A single-node SLURM cluster on 127.0.0.1 for the end-to-end test (Debian/Ubuntu packages, run as root,
# no systemd needed). Verbs, usually in this order:
#   install    apt-get the packages (slurmctld slurmd slurm-client munge)
#   configure  write slurm.conf/gres.conf under $SLURM_CI_DIR (default: <project>/.slurm-ci)
#   start      start munged, slurmctld and slurmd (PIDs recorded under $SLURM_CI_DIR/run)
#   health     submit one batch job and wait for it; prints HEALTHY
#   stop       stop exactly the daemons `start` started, by PID, and remove the config link
#   up         configure + start + health (install first when the packages are missing)
#
# Two partitions on the same node: `cpu` (the default) and `gpu`. The node advertises two GPUs as a
# generic resource backed by two empty placeholder files ($DIR/dev/gpu0, gpu1): SLURM schedules `--gpus`/`--gres=gpu:N` requests and
# accounts for them exactly as on a real GPU node, but no device exists, so GPU jobs of the test run a
# model on the CPU. This keeps the routing real (sbatch --partition=gpu --gpus=1) without hardware.
#
# Without slurmdbd, `sacct` has no history: the workflow polls `squeue` (jobs stay visible for
# MinJobAge seconds after they end) and every finished job is appended to $SLURM_CI_DIR/log/jobcomp.txt
# (JobComp plugin), which the test reads to check partitions and final states.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
DIR=${SLURM_CI_DIR:-$ROOT/.slurm-ci}
CONF=$DIR/slurm.conf
MUNGE_SOCKET=$DIR/munge/munge.socket.2
# The job step that the Snakemake SLURM executor runs clears SLURM_* variables (SLURM_CONF included)
# before its inner `srun`, so the configuration must also be found at SLURM's default path.
DEFAULT_CONF=/etc/slurm/slurm.conf
NODE=$(hostname)
export SLURM_CONF=$CONF
trap 'echo "error: cluster.sh failed at line $LINENO: $BASH_COMMAND (logs: $DIR/log, $DIR/munge/munged.log)" >&2' ERR

install() {
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
    slurmctld slurmd slurm-client munge
}

configure() {
  mkdir -p "$DIR"/{munge,log,run,state/ctld,state/d,dev}
  touch "$DIR/dev/gpu0" "$DIR/dev/gpu1"
  chown munge:munge "$DIR/munge"
  chmod 755 "$DIR/munge"
  if [ ! -f "$DIR/munge/munge.key" ]; then
    # A fresh key for this cluster only (1024 random bytes, as `mungekey` would write).
    dd if=/dev/urandom of="$DIR/munge/munge.key" bs=1024 count=1 status=none
    chown munge:munge "$DIR/munge/munge.key"
    chmod 400 "$DIR/munge/munge.key"
  fi
  # A new cluster starts a new job completion log (the test reads it by job id).
  rm -f "$DIR/log/jobcomp.txt"
  local mem=$(($(free -m | awk '/^Mem:/{print $2}') - 1024))
  cat >"$CONF" <<EOF
ClusterName=stressprobe-ci
SlurmctldHost=$NODE(127.0.0.1)
SlurmUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$MUNGE_SOCKET
StateSaveLocation=$DIR/state/ctld
SlurmdSpoolDir=$DIR/state/d
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$DIR/log/jobcomp.txt
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
GresTypes=gpu
DefMemPerCPU=1000
MpiDefault=none
ReturnToService=2
# Finished jobs stay in squeue this long; the profile polls squeue (no slurmdbd), so keep it well above
# the executor's first status check.
MinJobAge=300
KillWait=5
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$(nproc) RealMemory=$mem Gres=gpu:2 State=UNKNOWN
PartitionName=cpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP
PartitionName=gpu Nodes=ALL Default=NO MaxTime=INFINITE State=UP
EOF
  cat >"$DIR/gres.conf" <<EOF
NodeName=$NODE Name=gpu File=$DIR/dev/gpu[0-1]
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

start() {
  [ -f "$CONF" ] || configure
  runuser -u munge -- munged -S "$MUNGE_SOCKET" --key-file="$DIR/munge/munge.key" \
    --log-file="$DIR/munge/munged.log" --pid-file="$DIR/munge/munged.pid" --seed-file="$DIR/munge/munged.seed"
  wait_for "munge -S $MUNGE_SOCKET -n"
  slurmctld -f "$CONF"
  wait_for "scontrol ping | grep -q UP"
  slurmd -f "$CONF"
  wait_for "sinfo -h -p cpu -o %T | grep -qx idle"
}

health() {
  sinfo
  local job
  job=$(sbatch --parsable -p gpu --gpus=1 -t 1 -o "$DIR/log/health-%j.out" --wrap 'echo ok')
  wait_for "grep -q 'JobId=$job .*JobState=COMPLETED' $DIR/log/jobcomp.txt" 240
  grep -qx ok "$DIR/log/health-$job.out"
  echo HEALTHY
}

stop() {
  local pidfile pid link
  # munged runs as user munge, so its PID file lives in the directory that user owns.
  for pidfile in "$DIR/run/slurmd.pid" "$DIR/run/slurmctld.pid" "$DIR/munge/munged.pid"; do
    pid=$(cat "$pidfile" 2>/dev/null || true)
    if [ -n "$pid" ] && kill "$pid" 2>/dev/null; then
      for _ in $(seq 1 50); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.2
      done
    fi
    rm -f "$pidfile"
  done
  for link in "$DEFAULT_CONF" "$(dirname "$DEFAULT_CONF")/gres.conf"; do
    if [ -L "$link" ]; then rm -f "$link"; fi
  done
}

up() {
  command -v slurmctld >/dev/null || install
  configure
  start
  health
}

case "${1:-}" in
  install | configure | start | health | stop | up) "$1" ;;
  *)
    echo "usage: $0 install|configure|start|health|stop|up" >&2
    exit 2
    ;;
esac
