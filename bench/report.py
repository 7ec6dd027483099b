#!/usr/bin/env python3
"""Writes docs/benchmarks/report.md from what bench/report measured: tables from the CSV files, the PNG
plots, the fitted HPL efficiency and Daly interval (tools/skt-model), and the daemon's phase times;
each section names its command, the machine and the date."""

import csv
import datetime
import os
import re
import subprocess
import sys


def rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def table(records, columns):
    out = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    out += ["| " + " | ".join(str(r.get(c, "")) for c in columns) + " |" for r in records]
    return "\n".join(out)


def main(directory, target):
    d = directory
    with open(os.path.join(d, "machine.txt")) as f:
        machine = f.read().strip()
    with open(os.path.join(d, "commands.txt")) as f:
        commands = [line.strip() for line in f if line.strip()]

    def command(word):
        for c in commands:
            if word in c:
                when, _, what = c.partition(" ")
                root = os.path.dirname(os.path.dirname(os.path.abspath(d)))
                what = what.replace(root + "/", "")
                return f"Measured {when[:19].replace('T', ' ')}: `{what}`"
        return ""

    rel = os.path.relpath(d, os.path.dirname(target))
    md = [f"# Benchmarks\n",
          f"Written by `bench/report` on {datetime.date.today().isoformat()}; the run started {machine.replace(' on ', ', on ', 1)}. "
          "These machines are noisy (±10–25 % between repeats): compare ratios within one run.\n"]

    def measured(word, what, name, images):
        """A section: the command that measured it and what it shows, its CSV as a table, plots."""
        md.append(command(word) + what + "\n")
        records = rows(os.path.join(d, name + ".csv"))
        md.append(table(records, list(records[0].keys())))
        md.append("\n" + " ".join(f"![{i}]({rel}/{i}.png)" for i in images) + "\n")

    md.append("## Encoding and checkpoints\n")
    measured("bench-kernels", "", "kernels", ["kernels"])
    measured("bench-encode", "", "encode", ["encode"])
    measured("bench-checkpoint", " — checkpoint and recovery time by mode, scheme and group size; "
             "`mem_usable` is measured from the segments, `formula` is the usable fraction.",
             "checkpoint", ["checkpoint", "recovery", "memory"])
    measured("--tables changes", " — checkpoints that find what changed (`skt_checkpoint`): a third "
             "of each rank's workspace written once (a mesh), the rest changed between checkpoints; in "
             "full (`SKT_FIND_CHANGES=0`), finding the changes by comparing with the committed copy, "
             "and the same with the mesh marked static (`skt_mark_static`).",
             "checkpoint-changes", ["checkpoint-changes"])
    measured("bench-tracking", " — finding what changed: comparing the workspace with its copy, "
             "against the kernel's write tracking (userfaultfd write-protect, asynchronous, read with "
             "PAGEMAP_SCAN), which costs a fault in the program's time for the first write into each "
             "page.", "tracking", ["tracking"])

    md.append("## SKT-HPL\n")
    hpl = rows(os.path.join(d, "hpl.csv"))
    md.append(command("bench-hpl --n") + "\n")
    md.append(table(hpl, ["run", "what", "seconds", "Gflops", "ratio", "note"]))
    md.append(f"\n![hpl]({rel}/hpl.png)\n")
    # Efficiency against the DGEMM rate at several N, and its fit E(N) = N / (aN + b).
    points = []
    for name in sorted(os.listdir(d)):
        if re.fullmatch(r"hpl(-\d+)?\.csv", name):
            t = rows(os.path.join(d, name))
            n = re.search(r"N=(\d+)", open(os.path.join(d, name.replace(".csv", ".txt"))).readline())
            eff = [r for r in t if r["what"] == "SKT-HPL / DGEMM rate"]
            if n and eff:
                points.append((int(n.group(1)), float(eff[0]["ratio"])))
    points.sort()
    model = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools", "skt-model")
    if len(points) >= 2:
        fit = subprocess.run([sys.executable, model, "hpl-efficiency", "--points",
                              ",".join(f"{n}:{e}" for n, e in points), "--png", os.path.join(d, "model-hpl.png")],
                             capture_output=True, text=True, check=True).stdout
        md.append("SKT-HPL's efficiency (Gflops / DGEMM rate of the same processes) at each N, fitted by "
                  "`tools/skt-model hpl-efficiency` (eq. 2), and predicted for the memory left by each mode "
                  "(eq. 5, G = 16):\n\n```\n" + fit + "```\n")
        md.append(f"![hpl efficiency]({rel}/model-hpl.png)\n")
    ckpt = [r for r in hpl if r["run"] == "pair 1" and "every" in r["what"]]
    if ckpt:
        m = re.search(r"(\d+) checkpoints \(([\d.]+) s in them\)", ckpt[0]["note"])
        if m:
            cost = float(m.group(2)) / int(m.group(1))
            interval = subprocess.run([sys.executable, model, "interval", "--cost", f"{cost:.4f}", "--mtbf", "21600",
                                       "--restart", "2"], capture_output=True, text=True, check=True).stdout
            md.append(f"With the measured cost of one SKT-HPL checkpoint ({cost:.3f} s) and an MTBF of 6 h "
                      "(`tools/skt-model interval`):\n\n```\n" + interval + "```\n")

    if os.path.exists(os.path.join(d, "hpl-netlib.csv")):
        md.append("### Against netlib HPL 2.3\n")
        measured("hpl_netlib.py", " — netlib's `xhpl`, built from its source tarball outside the tree, "
                 "and `skt-hpl` without and with a checkpoint every tenth of the panels, on the same "
                 "HPL.dat (WR11C2R4, NB = 192), in alternating pairs: medians of the pairs' Gflops and "
                 "ratios; efficiency is Gflops / the DGEMM rate of the same processes; PDGESV (bench-hpl) "
                 "where N allows. Every run: `hpl-netlib-runs.csv`.", "hpl-netlib", ["hpl-netlib"])

    if os.path.exists(os.path.join(d, "drain.csv")):
        md.append("## Drains to storage\n")
        measured("bench-drain", " — each rank's committed copy written as a drained file (block CRCs, "
                 "sync, rename: the drain's own writer) against the same bytes written as a plain file "
                 "(`dd bs=1M conv=fdatasync`-like) into the same directory by the same ranks at once, "
                 "alternating; medians.", "drain", ["drain"])
        for name, what in (("drain-slowdown", "A memory-bound stencil checkpointed every 40 sweeps, run "
                            "alternately without drains and with a drain of every second checkpoint: of the "
                            "copy alone (one directory), and of the copy and its checksum (a directory per "
                            "node, as node-local disks; with groups of 2, C is as large as B); the "
                            "checkpoint time includes waiting for a drain still in flight; medians."),
                           ("drain-restore", "A relaunch's recovery: from memory after one node was lost "
                            "(its group rebuilds it), and from storage with every node's memory gone and the "
                            "page cache dropped (drained with checksums: and the last node's disk too, its "
                            "files rebuilt from its group's); both restore the same epoch, checked equal.")):
            if os.path.exists(os.path.join(d, name + ".csv")):
                records = rows(os.path.join(d, name + ".csv"))
                md.append(what + "\n")
                md.append(table(records, list(records[0].keys())) + "\n")
        if os.path.exists(os.path.join(d, "hpl-drain.csv")):
            measured("hpl_drain.py", " — SKT-HPL with a checkpoint every tenth of the panels, alternately "
                     "without drains and with a drain of every k-th checkpoint; medians of the pairs. Every "
                     "run: `hpl-drain-runs.csv`.", "hpl-drain", ["hpl-drain"])

    md.append("## The restart daemon\n")
    md.append(command("tools/demo.sh") + " — SKT-HPL under `skt-run` on 4 virtual nodes: node n2 killed, "
              "then rank 1 stopped.\n")
    with open(os.path.join(d, "demo.txt")) as f:
        demo = f.read()
    lines = [l.strip() for l in demo.splitlines()
             if re.search(r"skt-inject: \d|\[skt-run|recovered|stopped|hang was seen", l)]
    md.append("```\n" + "\n".join(lines) + "\n```\n")
    killed = re.search(r"skt-inject: (\d+):(\d+):([\d.]+) killed", demo)
    failed = re.search(r"\[skt-run (\d+):(\d+):([\d.]+) \+[\d.]+s\] run 1 failed", demo)
    restored = re.search(r"restored epoch \d+, ([\d.]+) s after the failure was seen", demo)
    if killed and failed and restored:
        sec = lambda m: int(m.group(1)) * 3600 + int(m.group(2)) * 60 + float(m.group(3))
        detect = sec(failed) - sec(killed)
        md.append(f"Node killed → mpirun's exit seen: {detect:.2f} s; failure seen → relaunched program "
                  f"restored: {float(restored.group(1)):.2f} s; in all {detect + float(restored.group(1)):.2f} s.\n")
    hang = re.search(r"the hang was seen ([\d.]+) s after the SIGSTOP", demo)
    if hang:
        md.append(f"Rank stopped (SIGSTOP) → hang seen by the watchdog: {hang.group(1)} s (--silence 10).\n")

    md.append("## The model\n")
    for name, title in (("model-memory", "Usable memory fraction (eq. 6–8)"),
                        ("model-reliability", "Probability that a 100 h run completes (eq. 11–16): the published "
                         "case, 160,000 processes, groups of 16, checkpoint and recovery 20 s, interval 13.6 min, "
                         "system MTBF 5 h")):
        md.append(f"{title}. {command(name)}\n")
        with open(os.path.join(d, name + ".txt")) as f:
            md.append("```\n" + f.read() + "```\n")
        md.append(f"![{name}]({rel}/{name}.png)\n")
    with open(target, "w") as f:
        f.write("\n".join(md))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
