#!/usr/bin/env python3
"""SKT-HPL with drains to storage against SKT-HPL without, in alternating runs: both take a
checkpoint every tenth of the panels (groups of 2, each rank its own virtual node); the drained
runs write every k-th committed checkpoint to --dir in the background (SKT_DRAIN_DIR,
SKT_DRAIN_EVERY). Prints a table, writes hpl-drain.csv, hpl-drain-runs.csv and hpl-drain.png.

  bench/hpl_drain.py --configs 12288:2x1 --drain-every 10,1 --dir /var/tmp/skt-bench-hpl
"""

import argparse
import datetime
import os
import pathlib
import shutil
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__))))
import hpl_netlib  # noqa: E402
import plot  # noqa: E402


def main(argv):
    here = pathlib.Path(__file__).resolve().parent
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", default=str(here.parent / "build"), help="the selfckpt build directory")
    parser.add_argument("--configs", type=lambda s: [hpl_netlib.parse_config(c) for c in s.split(",")],
                        default=[hpl_netlib.parse_config("12288:2x1")])
    parser.add_argument("--drain-every", default="10,1",
                        help="drain every k-th checkpoint, for each k of this list")
    parser.add_argument("--dir", default="/var/tmp/skt-bench-hpl-drain", help="the drain directory")
    parser.add_argument("--nb", type=int, default=192)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--out", default="", help="where the CSV and PNG go (default: bench/results/<date>)")
    parser.add_argument("--mpirun", default="mpirun")
    options = parser.parse_args(argv)
    build = pathlib.Path(options.build).resolve()
    options.skt = str(build / "hpl" / "skt-hpl")
    everies = [int(k) for k in options.drain_every.split(",")]
    work = build / "hpl-drain"
    work.mkdir(exist_ok=True)
    out = pathlib.Path(options.out or here / "results" / datetime.date.today().isoformat())
    out.mkdir(parents=True, exist_ok=True)
    plot.warn_if_missing()
    runner = hpl_netlib.Runner(options, work)
    records, summary = [], []
    for n, p, q, threads in options.configs:
        ranks = p * q
        if ranks < 2:
            sys.exit(f"{n}:{p}x{q}: drains need checkpoints, which need a group of 2 ranks")
        name = f"N={n} {p}x{q}" + (f" {threads}t" if threads > 1 else "")
        directory = work / f"run-{n}-{p}x{q}-{threads}t"
        directory.mkdir(exist_ok=True)
        (directory / "HPL.dat").write_text(hpl_netlib.hpl_dat(n, options.nb, p, q))
        every = max(1, -(-n // options.nb) // 10)
        variants = ["plain"] + [f"drain/{k}" for k in everies]
        gflops = {v: [] for v in variants}
        for pair in range(1, options.pairs + 1):
            order = variants if pair % 2 else list(reversed(variants))
            got = {}
            for what in order:
                job = f"bench-drain-{os.getpid()}-{pair}-{what.replace('/', '')}"
                env = {}
                if what != "plain":
                    env = {"SKT_DRAIN_DIR": options.dir, "SKT_DRAIN_EVERY": what.split("/")[1]}
                got[what] = runner.skt(directory, ranks, threads, every, job, env)
                shutil.rmtree(os.path.join(options.dir, job + "+t0"), ignore_errors=True)
                gflops[what].append(got[what][1])
                records.append({"config": name, "pair": pair, "run": what, "seconds": got[what][0],
                                "Gflops": got[what][1]})
            hpl_netlib.say(f"{name:<14} pair {pair}: " + "  ".join(
                f"{v} {got[v][1]:.2f} Gflops ({got[v][1] / got['plain'][1]:.3f})" for v in variants))
        for k in everies:
            v = f"drain/{k}"
            ratio = statistics.median(d / b for d, b in zip(gflops[v], gflops["plain"]))
            summary.append({"config": name, "checkpoint every": every, "drain every": k,
                            "pairs": options.pairs, "plain Gflops": statistics.median(gflops["plain"]),
                            "drained Gflops": statistics.median(gflops[v]), "drained/plain": ratio})
            hpl_netlib.say(f"{name:<14} a checkpoint every {every} panels, a drain every {k}: "
                           f"median drained/plain {ratio:.3f}")
    hpl_netlib.write_csv(out / "hpl-drain.csv", summary)
    hpl_netlib.write_csv(out / "hpl-drain-runs.csv", records)
    lines = [f'"{r["config"]}, drain every {r["drain every"]}" {r["plain Gflops"]:.2f} {r["drained Gflops"]:.2f}'
             for r in summary]
    plot.histogram(out / "hpl-drain.png", "SKT-HPL with a checkpoint every tenth of the panels (medians)",
                   "Gflops", lines, "set key outside right\nset yrange [0:*]",
                   "using 2:xtic(1) title 'without drains', '' using 3 title 'with drains to storage'")
    hpl_netlib.say(plot.written(out / "hpl-drain.csv", out / "hpl-drain-runs.csv", out / "hpl-drain.png"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
