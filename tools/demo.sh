#!/usr/bin/env bash
# The main job: installs what is missing, builds, and runs SKT-HPL under the restart daemon skt-run
# on 4 virtual nodes of this host with 2 spares; node n2 is killed in the middle of the
# factorization (its processes and its memory); skt-run sees the failure, finds n2 dead, puts spare
# n5 in its place and relaunches; SKT-HPL resumes from the last in-memory checkpoint and passes
# HPL's residual check with the very residual of a run without failure. Then a rank is stopped
# (SIGSTOP: no crash, only silence): skt-run's watchdog finds it with its default settings, ends
# the run and relaunches it, with the same residual again.
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

# hpl/HPL.dat: N=4608, NB=96 on a 2x2 grid, 48 panels; a checkpoint every 8.
hpldat=$source_dir/hpl/HPL.dat

# The reference: one rank per virtual node, SKT_NODE naming each rank's failure domain.
launch() {
  local line=() node
  for node in "$@"; do line+=(-n 1 env "SKT_NODE=$node" "$hpl" --checkpoint-every 8 "$hpldat" :); done
  unset 'line[${#line[@]}-1]'
  mpirun --oversubscribe "${line[@]}"
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
# skt-run in the background on job $1, its output in $2; returns once every rank waits at panel 30.
# SKT_HPL_PAUSE holds every rank there on the first launch, so that the failure comes there.
start_paused() {
  SKT_HPL_PAUSE=30 "$build_dir/daemon/skt-run" --nodes n1,n2,n3,n4,n5,n6 --spares 2 --job "$1" \
    --state-dir "$work/$1" -- "$hpl" --checkpoint-every 8 "$hpldat" >"$2" 2>&1 &
  daemon=$!
  for _ in $(seq 600); do
    grep -q "^SKT_HPL_PAUSE: every rank waits" "$2" && return 0
    kill -0 "$daemon" 2>/dev/null || break
    sleep 0.1
  done
  echo "demo FAILED: the run did not reach panel 30:" >&2
  tail -20 "$2" >&2
  exit 1
}

# Waits for skt-run, shows what it said, and checks the residual against the reference's.
finish() {
  local out=$1 what=$2 code result
  set +e
  wait "$daemon"
  code=$?
  set -e
  grep -E '^\[skt-run|^WR|^SKT:|PASSED|FAILED' "$out" | grep -v "\] launched (" | sed 's/^/   /'
  result=$(residual <"$out")
  if [ "$code" -eq 0 ] && grep -q "SKT: restored epoch" "$out" && [ "$result" = "$reference" ]; then
    skt_say "$what: PASSED, with the same residual as the run without failure"
  else
    echo "demo FAILED (skt-run exit $code): expected '$reference', got '${result}'" >&2
    tail -30 "$out" >&2
    exit 1
  fi
}

start_paused "$job" "$work/run.out"
"$build_dir/tools/skt-inject" node n2 --job "$job" --registry "$work/$job/registry" |
  sed 's/^/   skt-inject: /'
finish "$work/run.out" "recovered from a node loss without a human"
echo "   final ranklist ($work/$job/ranklist): $(cut -d' ' -f2 "$work/$job/ranklist" | tr '\n' ' ')"

skt_say "3. again, and rank 1 is stopped at panel 30 (SIGSTOP): it neither dies nor speaks"
stopped_job=$job-stop
start_paused "$stopped_job" "$work/stop.out"
# Its process: the one started with this job's SKT_JOB and rank 1 (grep fails on the /proc entries
# of processes that end meanwhile: that is no error here).
rank1=$({ grep -lz "^SKT_JOB=$stopped_job\$" /proc/[0-9]*/environ 2>/dev/null || true; } |
  { xargs -r grep -lz '^OMPI_COMM_WORLD_RANK=1$' 2>/dev/null || true; } | head -1 | cut -d/ -f3)
[ -n "$rank1" ] || { echo "demo FAILED: rank 1's process not found" >&2; exit 1; }
stopped_at=$(date +%s.%N)
kill -STOP "$rank1"
echo "   rank 1 (pid $rank1) stopped"
# Polled every 0.1 s: the time until skt-run says the run is hung.
for _ in $(seq 600); do
  grep -q "the run is hung" "$work/stop.out" && break
  sleep 0.1
done
seen_at=$(date +%s.%N)
finish "$work/stop.out" "a stopped rank found by the watchdog and relaunched without a human"
echo "   the hang was seen $(awk -v a="$stopped_at" -v b="$seen_at" 'BEGIN { printf "%.1f", b - a }') s" \
  "after the SIGSTOP (--silence 10, the default)"
