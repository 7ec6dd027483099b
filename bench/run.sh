#!/usr/bin/env bash
# Runs the benchmarks side by side on this machine and writes tables, CSV and PNG plots into a
# dated directory: local kernels, group encoding, checkpoint and recovery through the library.
#   bench/run.sh [--ranks N] [--mib M] [--out DIR] [--hpl N] [--netlib TARBALL [--netlib-configs C]]
# Defaults: 16 ranks (oversubscribed on small machines), 32 MiB per rank, bench/results/<date>.
# --hpl N adds bench-hpl on 2 ranks bound to cores, 2x1, NB=192 (N=12288 takes about 12 minutes).
# --netlib TARBALL adds SKT-HPL against netlib HPL 2.3 built from that source tarball
# (bench/hpl_netlib.py; configurations N:PxQ[:Tt], default 12288:2x1,12288:1x2).
set -euo pipefail
source_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$source_dir/tools/lib/common.sh"
ranks=16
mib=32
out=""
hpl_n=""
netlib=""
netlib_configs="12288:2x1,12288:1x2"
while [ $# -gt 0 ]; do
  case "$1" in
    --ranks) ranks=$2; shift 2 ;;
    --mib) mib=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --hpl) hpl_n=$2; shift 2 ;;
    --netlib) netlib=$2; shift 2 ;;
    --netlib-configs) netlib_configs=$2; shift 2 ;;
    -h|--help) sed -n '2,8p' "$0"; exit 0 ;;
    *) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
skt_ensure_packages gnuplot-nox ${netlib:+autoconf automake libtool}
skt_mpi_environment
build_dir=${SKT_TOOLS_BUILD_DIR:-$source_dir/build}
skt_build "$source_dir" "$build_dir" >/dev/null
out=${out:-$source_dir/bench/results/$(date +%Y-%m-%d)}
mkdir -p "$out"
bin=$build_dir/bench
groups=""
for g in 2 4 8 16; do
  if [ "$g" -le "$ranks" ]; then groups+="${groups:+,}$g"; fi
done
{
  echo "# $(date -Iseconds) on $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo); $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
  skt_say "local kernels (one core)"
  "$bin/bench-kernels" --csv "$out/kernels.csv"
  skt_say "group encoding: $ranks ranks, $mib MiB each"
  mpirun --oversubscribe -n "$ranks" "$bin/bench-encode" --mib "$mib" --groups "$groups" --csv "$out/encode.csv"
  skt_say "checkpoint and recovery: $ranks ranks, $mib MiB each"
  mpirun --oversubscribe -n "$ranks" "$bin/bench-checkpoint" --mib "$mib" --groups "$groups" --csv "$out/checkpoint.csv" \
    --changes-csv "$out/checkpoint-changes.csv"
  skt_say "finding what changed: comparing with the committed copy vs the kernel's write tracking"
  "$bin/bench-tracking" --mib 256 --csv "$out/tracking.csv"
  skt_say "drains to storage: bandwidth against a plain write, slowdown, recovery from storage"
  mpirun -n 2 --bind-to core "$bin/bench-drain" --mib "$((mib * 8))" --dir "${SKT_BENCH_DRAIN_DIR:-/var/tmp/skt-bench-drain}" \
    --csv "$out/drain.csv" --slowdown-csv "$out/drain-slowdown.csv" --restore-csv "$out/drain-restore.csv"
  if [ -n "$hpl_n" ]; then
    skt_say "SKT-HPL vs PDGESV and DGEMM, checkpoint overhead and traffic: N=$hpl_n, 2 ranks"
    mpirun -n 2 --bind-to core "$bin/bench-hpl" --n "$hpl_n" --csv "$out/hpl.csv"
  fi
  if [ -n "$netlib" ]; then
    skt_say "SKT-HPL against netlib HPL 2.3 ($netlib_configs), alternating pairs"
    python3 "$source_dir/bench/hpl_netlib.py" --netlib "$netlib" --build "$build_dir" \
      --configs "$netlib_configs" --out "$out"
  fi
} 2>&1 | tee "$out/tables.txt"
python3 "$source_dir/bench/plot.py" "$out"
