#!/usr/bin/env bash
# The main job: installs what is missing, builds, and runs SKT-HPL under the restart daemon skt-run
# on 4 virtual nodes of this host with 2 spares; node n2 is killed in the middle of the
# factorization (its processes and its memory); skt-run sees the failure, finds n2 dead, puts spare
# n5 in its place and relaunches; SKT-HPL resumes from the last in-memory checkpoint and passes
# HPL's residual check with the very residual of a run without failure.
set -euo pipefail
source_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$source_dir/tools/lib/common.sh"

skt_ensure_packages
skt_mpi_environment
build_dir=${SKT_TOOLS_BUILD_DIR:-$source_dir/build}
skt_say "building in $build_dir"
skt_build "$source_dir" "$build_dir"
build_dir=$(cd "$build_dir" && pwd)
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

# The reference: one rank per virtual node, SKT_NODE naming each rank's failure domain.
launch() {
  local line=() node
  for node in "$@"; do line+=(-n 1 env "SKT_NODE=$node" "$hpl" --checkpoint-every 8 "$work/HPL.dat" :); done
  unset 'line[${#line[@]}-1]'
  mpirun "${line[@]}"
}
residual() { grep -E '^\|\|Ax-b\|\|_oo' | head -1; }

export SKT_GROUP_SIZE=2
skt_say "1. SKT-HPL without failure, for reference"
if ! SKT_JOB=$job-ref SKT_RESTART=0 launch n1 n2 n3 n4 >"$work/ref.out" 2>&1; then
  echo "demo FAILED: the run without failure did not pass:" >&2
  tail -20 "$work/ref.out" >&2
  exit 1
fi
reference=$(residual <"$work/ref.out")
grep -E '^WR|PASSED|FAILED' "$work/ref.out" | sed 's/^/   /'

skt_say "2. the same run under skt-run on nodes n1-n4 with spares n5, n6; node n2 dies at panel 30 of 48"
# SKT_HPL_PAUSE holds every rank at panel 30 on the first launch, so that the node is killed there.
SKT_HPL_PAUSE=30 "$build_dir/daemon/skt-run" --nodes n1,n2,n3,n4,n5,n6 --spares 2 --probe local \
  --registry "$work/registry" --job "$job" --ranklist-out "$work/ranklist" \
  -- "$hpl" --checkpoint-every 8 "$work/HPL.dat" >"$work/run.out" 2>&1 &
daemon=$!
for _ in $(seq 600); do
  grep -q "SKT_HPL_PAUSE" "$work/run.out" && break
  kill -0 "$daemon" 2>/dev/null || break
  sleep 0.1
done
if ! grep -q "SKT_HPL_PAUSE" "$work/run.out"; then
  echo "demo FAILED: the run did not reach panel 30:" >&2
  tail -20 "$work/run.out" >&2
  exit 1
fi
"$build_dir/tools/skt-inject" node n2 --job "$job" --registry "$work/registry" | sed 's/^/   skt-inject: /'
set +e
wait "$daemon"
code=$?
set -e
grep -E '^\[skt-run|^WR|^SKT:|PASSED|FAILED' "$work/run.out" | grep -v "launched: " | sed 's/^/   /'
result=$(residual <"$work/run.out")

if [ "$code" -eq 0 ] && grep -q "SKT: restored epoch" "$work/run.out" && [ "$result" = "$reference" ]; then
  skt_say "recovered without a human: PASSED, with the same residual as the run without failure"
  echo "   final ranklist ($work/ranklist): $(tr '\n' ' ' <"$work/ranklist")"
else
  echo "demo FAILED (skt-run exit $code): expected '$reference', got '${result}'" >&2
  tail -30 "$work/run.out" >&2
  exit 1
fi
