#!/usr/bin/env bash
# The main job: installs what is missing, builds, and runs an MPI program on 4 virtual nodes of this
# host that checkpoints in memory, loses a node in the middle of a run, is relaunched with a spare
# node in its place, and finishes with exactly the result of a run without failure.
set -euo pipefail
source_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$source_dir/tools/lib/common.sh"

skt_ensure_packages
skt_mpi_environment
build_dir=${SKT_BUILD_DIR:-$source_dir/build}
skt_say "building in $build_dir"
skt_build "$source_dir" "$build_dir"
app=$build_dir/tests/e2e/skt-testapp
shm=$build_dir/tools/skt-shm
args=(--iterations 30 --checkpoint-every 5 --bytes 4000000 --regions 2 --verify-recovery)

# One rank per virtual node: SKT_NODE names each rank's failure domain.
launch() {
  local line=() node
  for node in "$@"; do line+=(-n 1 env "SKT_NODE=$node" "$app" "${args[@]}" ${crash:+--crash-at 17 --crash-rank 1} :); done
  unset 'line[${#line[@]}-1]'
  mpirun "${line[@]}"
}

job=demo-$$-$(date +%s)
export SKT_GROUP_SIZE=2 SKT_LOG=info
trap 'SKT_LOG=off "$shm" clean --job "$job" >/dev/null 2>&1 || true' EXIT

skt_say "1. a run without failure, for reference"
reference=$(SKT_JOB=$job-ref crash= launch n1 n2 n3 n4 2>/dev/null | awk '/^RESULT/ {print $2}')
echo "   RESULT $reference"

skt_say "2. the same run, checkpointing every 5 iterations; rank 1 on node n2 dies at iteration 17"
set +e
SKT_JOB=$job SKT_RESTART=0 crash=1 launch n1 n2 n3 n4 2>&1 | grep -E "checkpoint .* committed|crashing" | sed 's/^/   /'
set -e
echo "   the job is dead; its checkpoints are still in shared memory:"
"$shm" list --job "$job" | sed 's/^/   /'

skt_say "3. node n2 is lost: its memory goes with it"
"$shm" clean --job "$job" --node n2 | tail -1 | sed 's/^/   /'

skt_say "4. relaunch with spare node n5 in place of n2"
output=$(SKT_JOB=$job SKT_RESTART=1 crash= launch n1 n5 n3 n4 2>&1)
echo "$output" | grep -E "recovered|verified|RESULT" | sed 's/^/   /'
result=$(echo "$output" | awk '/^RESULT/ {print $2}')

if [ -n "$result" ] && [ "$result" = "$reference" ]; then
  skt_say "recovered: the result is identical to the run without failure ($result)"
else
  echo "demo FAILED: expected RESULT $reference, got '${result}'" >&2
  exit 1
fi
