#!/usr/bin/env bash
# The main job: installs what is missing, builds, and runs SKT-HPL on 4 virtual nodes of this host;
# node n2 dies in the middle of the factorization (its process killed, its memory destroyed); the
# job is relaunched with spare node n5 in its place, resumes from the last in-memory checkpoint, and
# passes HPL's residual check with the very residual of a run without failure.
set -euo pipefail
source_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$source_dir/tools/lib/common.sh"

skt_ensure_packages
skt_mpi_environment
build_dir=${SKT_BUILD_DIR:-$source_dir/build}
skt_say "building in $build_dir"
skt_build "$source_dir" "$build_dir"
hpl=$build_dir/hpl/skt-hpl
shm=$build_dir/tools/skt-shm
work=$(mktemp -d)
job=demo-$$-$(date +%s)
trap 'SKT_LOG=off "$shm" clean --job "$job" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT

# N=4608, NB=96 on a 2x2 grid: 48 panels, a checkpoint every 8.
cat >"$work/HPL.dat" <<'DAT'
HPLinpack benchmark input file
selfckpt demo
HPL.out      output file name (if any)
6            device out (6=stdout,7=stderr,file)
1            # of problems sizes (N)
4608         Ns
1            # of NBs
96           NBs
0            PMAP process mapping (0=Row-,1=Column-major)
1            # of process grids (P x Q)
2            Ps
2            Qs
16.0         threshold
1            # of panel fact
2            PFACTs (0=left, 1=Crout, 2=Right)
1            # of recursive stopping criterium
4            NBMINs (>= 1)
1            # of panels in recursion
2            NDIVs
1            # of recursive panel fact.
1            RFACTs (0=left, 1=Crout, 2=Right)
1            # of broadcast
1            BCASTs (0=1rg,1=1rM,2=2rg,3=2rM,4=Lng,5=LnM)
1            # of lookahead depth
1            DEPTHs (>=0)
2            SWAP (0=bin-exch,1=long,2=mix)
64           swapping threshold
0            L1 in (0=transposed,1=no-transposed) form
0            U  in (0=transposed,1=no-transposed) form
1            Equilibration (0=no,1=yes)
8            memory alignment in double (> 0)
DAT

# One rank per virtual node: SKT_NODE names each rank's failure domain.
launch() {
  local line=() node
  for node in "$@"; do line+=(-n 1 env "SKT_NODE=$node" "$hpl" --checkpoint-every 8 "$work/HPL.dat" :); done
  unset 'line[${#line[@]}-1]'
  mpirun "${line[@]}"
}
residual() { grep -E '^\|\|Ax-b\|\|_oo' | head -1; }

export SKT_GROUP_SIZE=2
skt_say "1. SKT-HPL without failure, for reference"
reference=$(SKT_JOB=$job-ref SKT_RESTART=0 launch n1 n2 n3 n4 2>/dev/null | tee "$work/ref.out" | residual)
grep -E '^WR|PASSED|FAILED' "$work/ref.out" | sed 's/^/   /'

skt_say "2. the same run; rank 1 on node n2 dies in the middle of panel 30 (of 48)"
set +e
SKT_JOB=$job SKT_RESTART=0 SKT_HPL_CRASH=30:1 launch n1 n2 n3 n4 >"$work/crash.out" 2>&1
set -e
grep -E "SKT_HPL_CRASH" "$work/crash.out" | sed 's/^/   /'
echo "   the job is dead; its checkpoint is still in shared memory:"
"$shm" list --job "$job" | grep -E "shmid|checkpoint" | sed 's/^/   /'

skt_say "3. node n2 is lost: its memory goes with it"
"$shm" clean --job "$job" --node n2 | tail -1 | sed 's/^/   /'

skt_say "4. relaunch with spare node n5 in place of n2"
SKT_JOB=$job SKT_RESTART=1 launch n1 n5 n3 n4 >"$work/relaunch.out" 2>&1 || true
grep -E '^WR|^SKT:|PASSED|FAILED' "$work/relaunch.out" | sed 's/^/   /'
result=$(residual <"$work/relaunch.out")

if grep -q "SKT: restored epoch" "$work/relaunch.out" && [ -n "$result" ] && [ "$result" = "$reference" ]; then
  skt_say "recovered: PASSED, with the same residual as the run without failure"
else
  echo "demo FAILED: expected '$reference', got '${result}'" >&2
  tail -20 "$work/relaunch.out" >&2
  exit 1
fi
