#!/usr/bin/env python3
"""The failure path against the workspace's size: a full checkpoint, the start (skt_init to the end
of skt_recover on a first launch) next to making as much shared memory ready the fastest way, and
the recovery after one node lost onto a cold spare and onto a warm one (skt-run's reserves), for
workspaces of 64 MiB to 1 GiB per rank. Runs bench-checkpoint once per size and configuration;
prints a table, writes recovery-size.csv and draws recovery-size.png into --out.

  bench/recovery_vs_size.py [--build build] [--mib 64,128,256,512,1024] [--configs 2:2:self-xor-1]

A configuration is RANKS:G:VARIANT (VARIANT mode-scheme-m). The shared-memory setting the run had
(transparent huge pages) is in the table's title: it decides what a first touch of a page costs.
"""

import argparse
import csv
import os
import pathlib
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__))))
import plot  # noqa: E402

COLUMNS = ["ranks", "G", "variant", "MiB", "ckpt_s", "start_s", "populate_s", "start/populate",
           "recover_cold_s", "cold/ckpt", "recover_warm_s", "warm/ckpt"]


def shared_memory_setting():
    try:
        line = pathlib.Path("/sys/kernel/mm/transparent_hugepage/shmem_enabled").read_text()
        return line[line.index("[") + 1:line.index("]")]
    except (OSError, ValueError):
        return "unknown"


def measure(build, ranks, group, variant, mib, work):
    csv_path = os.path.join(work, "recovery.csv")
    placement = ["--bind-to", "core"] if ranks <= os.cpu_count() else ["--oversubscribe"]
    done = subprocess.run(["mpirun", "-n", str(ranks), *placement, os.path.join(build, "bench", "bench-checkpoint"),
                           "--mib", str(mib), "--groups", str(group), "--variants", variant.replace("-", ":"),
                           "--repeats", "3", "--tables", "recovery", "--spares", "cold,warm",
                           "--recovery-csv", csv_path], capture_output=True, text=True, cwd=work)
    if done.returncode != 0:
        print(done.stdout[-2000:], done.stderr[-2000:], file=sys.stderr)
        return None
    with open(csv_path) as f:
        rows = {r["spare"]: r for r in csv.DictReader(f)}
    cold, warm = rows["cold"], rows["warm"]
    return {"ranks": ranks, "G": group, "variant": variant, "MiB": mib, "ckpt_s": cold["ckpt_s"],
            "start_s": cold["start_s"], "populate_s": cold["populate_s"],
            "start/populate": cold["start/populate"], "recover_cold_s": cold["recover_s"],
            "cold/ckpt": cold["recover/ckpt"], "recover_warm_s": warm["recover_s"],
            "warm/ckpt": f"{float(warm['recover_s']) / float(cold['ckpt_s']):.2f}"}


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", default="build")
    parser.add_argument("--mib", default="64,128,256,512,1024")
    parser.add_argument("--configs", default="2:2:self-xor-1")
    parser.add_argument("--out", default=".")
    o = parser.parse_args(argv)
    setting = shared_memory_setting()
    print(f"transparent huge pages for shared memory: {setting}")
    print(" ".join(f"{c:>14}" for c in COLUMNS), flush=True)
    results = []
    with tempfile.TemporaryDirectory() as work:
        for config in o.configs.split(","):
            ranks, group, variant = config.split(":")
            for mib in (int(m) for m in o.mib.split(",")):
                row = measure(os.path.abspath(o.build), int(ranks), int(group), variant, mib, work)
                if row is None:
                    continue
                results.append(row)
                print(" ".join(f"{str(row[c]):>14}" for c in COLUMNS), flush=True)
    out = pathlib.Path(o.out)
    with open(out / "recovery-size.csv", "w", newline="") as f:
        w = csv.DictWriter(f, COLUMNS)
        w.writeheader()
        w.writerows(results)
    groups = {}
    for r in results:
        key = f"{r['variant']} G={r['G']}"
        for label, column in (("checkpoint", "ckpt_s"), ("start", "start_s"),
                              ("populating the same memory", "populate_s"),
                              ("recovery, cold spare", "recover_cold_s"),
                              ("recovery, warm spare", "recover_warm_s")):
            groups.setdefault(f"{key}: {label}", []).append(f"{r['MiB']} {r[column]}")
    plot.line_plot(out / "recovery-size.png",
                   f"Checkpoint, start and recovery against the workspace (shared memory: {setting})",
                   "workspace per rank (MiB)", "seconds (slowest rank)", groups, "set logscale y")
    print(plot.written(out / "recovery-size.csv", out / "recovery-size.png"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
