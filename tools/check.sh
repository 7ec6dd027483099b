#!/usr/bin/env bash
# Installs what is missing, builds selfckpt in a fresh build directory and runs the whole test suite
# (unit, MPI and end-to-end). Exits non-zero on any failure. Safe to run again.
#   SKT_TOOLS_BUILD_DIR  where to build (default: build-check in the source tree); it is wiped first
set -euo pipefail
source_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$source_dir/tools/lib/common.sh"

skt_ensure_packages
skt_mpi_environment
build_dir=${SKT_TOOLS_BUILD_DIR:-$source_dir/build-check}
skt_say "building in a fresh $build_dir"
rm -rf "$build_dir"
skt_build "$source_dir" "$build_dir"
skt_say "running the test suite"
meson test -C "$build_dir" --print-errorlogs
skt_say "all tests passed"
