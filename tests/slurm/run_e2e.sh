#!/usr/bin/env bash
# The SLURM end-to-end test, by hand or from CI: install SLURM if needed, start a cluster of two compute
# nodes, each in its own network namespace (partitions cpu and gpu; tests/slurm/cluster.sh), run
# tests/test_slurm.py against it (one node is killed in the middle of it), and stop every daemon this script
# started (by PID) and remove the namespaces, whatever the outcome. Exit status: the test's.
#   bash tests/slurm/run_e2e.sh            (as root; PYTHON defaults to the project's .venv)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PYTHON=${PYTHON:-$ROOT/.venv/bin/python}
CLUSTER=$ROOT/tests/slurm/cluster.sh
export SLURM_CI_DIR=${SLURM_CI_DIR:-$ROOT/.slurm-ci}

if ! "$PYTHON" -c 'import snakemake_executor_plugin_slurm' 2>/dev/null; then
  echo "error: $PYTHON lacks snakemake-executor-plugin-slurm; pip install -e '.[slurm]'" >&2
  exit 1
fi

# A cluster from an earlier, interrupted run is stopped first so that this run owns every daemon.
"$CLUSTER" stop
trap '"$CLUSTER" stop' EXIT
start=$(date +%s)
# install (when SLURM is missing), configure, start, health
"$CLUSTER" up
echo "cluster up in $(($(date +%s) - start)) s"

cd "$ROOT"
status=0
"$PYTHON" -m pytest -m slurm tests/test_slurm.py -p no:cacheprovider -v "$@" || status=$?
echo "SLURM end-to-end: $([ $status = 0 ] && echo passed || echo FAILED) in $(($(date +%s) - start)) s"
exit $status
