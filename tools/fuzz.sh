#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan, UBSan) and runs each for a bounded time on a copy of
# its seed corpus (tests/fuzz/corpus/<target>); fails on any crash, leak or sanitizer report.
#   tools/fuzz.sh [SECONDS per target, default 30]
# Environment: SKT_TOOLS_FUZZ_DIR, the build directory (default build-fuzz in the source tree).
set -euo pipefail
source_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$source_dir/tools/lib/common.sh"
seconds=${1:-30}
[[ "$seconds" =~ ^[0-9]+$ ]] || { echo "usage: tools/fuzz.sh [SECONDS]" >&2; exit 2; }
skt_ensure_packages clang libclang-rt-14-dev
build=${SKT_TOOLS_FUZZ_DIR:-$source_dir/build-fuzz}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The build's output is kept quiet unless it fails: this is the project's only clang build, and
# what clang refuses (GCC accepted it) must reach the log of a CI run.
quietly() {
  "$@" >"$work/build.log" 2>&1 || {
    echo "   clang build failed: $*" >&2
    { grep -iE "error|failed" -A4 "$work/build.log" || tail -20 "$work/build.log"; } | head -40 >&2
    return 1
  }
}
if [ ! -f "$build/build.ninja" ]; then
  CC=clang CXX=clang++ quietly meson setup "$build" "$source_dir" -Dfuzz=true -Dtests=false \
    -Db_sanitize=address,undefined -Db_lundef=false --buildtype=debugoptimized
fi
quietly meson compile -C "$build" tests/fuzz/hpldat_fuzz tests/fuzz/config_fuzz \
  tests/fuzz/header_fuzz tests/fuzz/monitor_fuzz tests/fuzz/manifest_fuzz
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 ASAN_OPTIONS=detect_leaks=1
status=0
for target in hpldat config header monitor manifest; do
  mkdir -p "$work/$target"
  cp "$source_dir/tests/fuzz/corpus/$target/"* "$work/$target/" 2>/dev/null || true
  skt_say "fuzzing $target for $seconds s"
  if "$build/tests/fuzz/${target}_fuzz" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
      -artifact_prefix="$work/$target-" "$work/$target" >"$work/$target.log" 2>&1; then
    echo "   $target: $(grep -E "^Done [0-9]+ runs" "$work/$target.log"), no crash"
  else
    status=1
    echo "   $target: FAILED" >&2
    grep -E "ERROR|SUMMARY|runtime error|Test unit written" -A3 "$work/$target.log" | head -30 >&2
  fi
done
exit $status
