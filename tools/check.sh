#!/usr/bin/env bash
# Installs what is missing, builds selfckpt in a fresh build directory and runs the whole test suite
# (unit, MPI and end-to-end). Exits non-zero on any failure. Safe to run again.
# Then the same suite again in an AddressSanitizer + UndefinedBehaviorSanitizer build, and each
# libFuzzer target for a short time (tools/fuzz.sh).
#   SKT_TOOLS_BUILD_DIR  where to build (default: build-check in the source tree); it is wiped first,
#                        and so are its -asan and -fuzz siblings
#   SKT_TOOLS_QUICK=1    the plain build's suite only
set -euo pipefail
source_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$source_dir/tools/lib/common.sh"

skt_ensure_packages iputils-ping cmake  # for the ping probe's test and the CMake package's
skt_mpi_environment
skt_check_free_memory
build_dir=${SKT_TOOLS_BUILD_DIR:-$source_dir/build-check}
skt_say "building in a fresh $build_dir"
rm -rf "$build_dir"
skt_build "$source_dir" "$build_dir"
skt_say "running the test suite"
meson test -C "$build_dir" --print-errorlogs
if [ "${SKT_TOOLS_QUICK:-0}" != 1 ]; then
  skt_say "the same suite under AddressSanitizer and UndefinedBehaviorSanitizer"
  rm -rf "$build_dir-asan"
  # At -O1 with line tables only (-g1), as ASan advises: at -O2 -g the sanitizers' instrumentation
  # made this build 30 of the check's 92 minutes on a half-speed machine (7.5 now, the suite no
  # slower). The stack traces keep their files and lines; no test runs the benchmarks. No Python
  # module: it would bring the sanitizers' runtime into an interpreter built without it.
  meson setup "$build_dir-asan" "$source_dir" --buildtype=custom -Doptimization=1 -Ddebug=false \
    -Dc_args=-g1 -Dcpp_args=-g1 -Dbench=false -Db_sanitize=address,undefined -Db_lundef=false \
    -Dpython=disabled >/dev/null
  meson compile -C "$build_dir-asan" >/dev/null
  # Open MPI's own allocations outlive MPI_Finalize: leak reports would be its, not ours.
  ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    meson test -C "$build_dir-asan" --print-errorlogs --timeout-multiplier 3
  skt_say "fuzzing each parser for 20 s"
  rm -rf "$build_dir-fuzz"
  SKT_TOOLS_FUZZ_DIR=$build_dir-fuzz "$source_dir/tools/fuzz.sh" 20
fi
skt_say "all tests passed"
