#!/usr/bin/env python3
"""Checkpoint and recovery of two builds side by side: bench-checkpoint's table (full checkpoint
against memcpy, recovery against checkpoint after one node lost, or as many as each code
tolerates) for each configuration, the two builds alternating run after run, and the medians.

  bench/compare_recovery.py --base OLD/build --head build [--runs 5] [--configs ...] [--out DIR]

A configuration is RANKS:MIB:G:VARIANT[:lose], VARIANT mode-scheme-m (self-xor-1), ':lose' to lose
m nodes of the group instead of one (only the head build can). Prints a table of medians and each
ratio's spread, and writes compare-recovery.csv into --out.
"""

import argparse
import csv
import os
import statistics
import subprocess
import sys
import tempfile

DEFAULT_CONFIGS = [
    "2:128:2:self-xor-1", "2:128:2:self-rs-1", "2:512:2:self-xor-1", "2:512:2:self-rs-1",
    "4:128:4:self-xor-1", "4:128:4:self-rs-1", "4:512:4:self-xor-1", "4:512:4:self-rs-1",
    "4:256:4:self-rs-2:lose", "4:256:4:self-xor-1",
]


def run_bench(build, ranks, mib, group, variant, lose, head, work):
    """One bench-checkpoint run: (ckpt_s, ckpt/memcpy, recover_s, recover/ckpt), or None."""
    csv_path = os.path.join(work, "checkpoint.csv")
    command = ["mpirun", "-n", str(ranks)]
    command += ["--bind-to", "core"] if ranks <= os.cpu_count() else ["--oversubscribe"]
    command += [os.path.join(build, "bench", "bench-checkpoint"), "--mib", str(mib), "--groups",
                str(group), "--variants", variant.replace("-", ":"), "--repeats", "3", "--csv", csv_path]
    if head:
        command += ["--tables", "recovery" if lose else "checkpoint",
                    "--recovery-csv", os.path.join(work, "recovery.csv")]
        if lose:
            command.append("--lose-tolerated")
    elif lose:
        return None
    done = subprocess.run(command, capture_output=True, text=True, cwd=work)
    if done.returncode != 0:
        print(done.stdout[-2000:], done.stderr[-2000:], file=sys.stderr)
        return None
    with open(os.path.join(work, "recovery.csv" if lose else "checkpoint.csv")) as f:
        row = next(csv.DictReader(f))
    return (float(row["ckpt_s"]), float(row.get("ckpt/memcpy", "nan")), float(row["recover_s"]),
            float(row["recover/ckpt"]))


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", required=True, help="the build directory of the commit before")
    parser.add_argument("--head", required=True, help="the build directory of this commit")
    parser.add_argument("--runs", type=int, default=5, help="alternating runs of each build")
    parser.add_argument("--configs", default=",".join(DEFAULT_CONFIGS))
    parser.add_argument("--out", default=".")
    o = parser.parse_args(argv)
    rows = []
    print(f"{'configuration':<24} {'build':<5} {'ckpt_s':>8} {'ckpt/memcpy':>11} {'recover_s':>9} "
          f"{'recover/ckpt':>12} {'spread':>13}", flush=True)
    for config in o.configs.split(","):
        parts = config.split(":")
        ranks, mib, group, variant = int(parts[0]), int(parts[1]), int(parts[2]), parts[3]
        lose = len(parts) > 4 and parts[4] == "lose"
        samples = {"base": [], "head": []}
        with tempfile.TemporaryDirectory() as work:
            for run in range(o.runs):
                order = ("base", "head") if run % 2 == 0 else ("head", "base")
                for which in order:
                    build = o.base if which == "base" else o.head
                    got = run_bench(build, ranks, mib, group, variant, lose, which == "head", work)
                    if got:
                        samples[which].append(got)
        for which in ("base", "head"):
            s = samples[which]
            if not s:
                print(f"{config:<24} {which:<5} {'-':>8}", flush=True)
                continue
            median = [statistics.median(x[i] for x in s) for i in range(4)]
            ratios = sorted(x[3] for x in s)
            spread = f"{ratios[0]:.2f}-{ratios[-1]:.2f}"
            print(f"{config:<24} {which:<5} {median[0]:>8.4f} {median[1]:>11.2f} {median[2]:>9.4f} "
                  f"{median[3]:>12.2f} {spread:>13}", flush=True)
            rows.append([config, which, len(s), *[f"{m:.4f}" for m in median], spread])
    os.makedirs(o.out, exist_ok=True)
    with open(os.path.join(o.out, "compare-recovery.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["configuration", "build", "runs", "ckpt_s", "ckpt_per_memcpy", "recover_s",
                    "recover_per_ckpt", "recover_per_ckpt_spread"])
        w.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
