#!/usr/bin/env python3
"""SKT-HPL against netlib HPL 2.3, side by side on the same HPL.dat, in alternating pairs.

Builds netlib's xhpl from its source tarball (never kept in the tree: in --work), then for each
configuration runs, pair after pair and alternating which goes first: xhpl, skt-hpl without
checkpoints, and skt-hpl with a checkpoint every tenth of the panels (groups of 2, each rank its own
virtual node). Next to them: the DGEMM rate of the same processes and ScaLAPACK's PDGESV (bench-hpl),
the second peer. Prints a table, writes hpl-netlib.csv and hpl-netlib.png into --out.

  bench/hpl_netlib.py --netlib ../shared/peers/hpl-2.3.tar.gz --configs 12288:2x1,12288:1x2
A configuration is N:PxQ, optionally :Tt for T OpenBLAS threads per rank (12288:1x1:2t).
"""

import argparse
import csv
import datetime
import os
import pathlib
import re
import shutil
import statistics
import subprocess
import sys
import tarfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__))))
import plot  # noqa: E402

ROW = re.compile(r"^(W[RC]\S+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.eE+-]+)\s*$", re.M)


def hpl_dat(n, nb, p, q):
    """The variant of netlib's own file: Crout recursion, right-looking panels, NBMIN 4, NDIV 2,
    the modified ring, look-ahead 1, mixed swap at 64 columns (WR11C2R4)."""
    values = [("HPL.out", "output file name (if any)"), ("6", "device out"), ("1", "# of problems sizes (N)"),
              (n, "Ns"), ("1", "# of NBs"), (nb, "NBs"), ("0", "PMAP process mapping"),
              ("1", "# of process grids (P x Q)"), (p, "Ps"), (q, "Qs"), ("16.0", "threshold"),
              ("1", "# of panel fact"), ("2", "PFACTs"), ("1", "# of recursive stopping criterium"),
              ("4", "NBMINs"), ("1", "# of panels in recursion"), ("2", "NDIVs"),
              ("1", "# of recursive panel fact."), ("1", "RFACTs"), ("1", "# of broadcast"),
              ("1", "BCASTs"), ("1", "# of lookahead depth"), ("1", "DEPTHs"), ("2", "SWAP"),
              ("64", "swapping threshold"), ("0", "L1 in (0=transposed,1=no-transposed) form"),
              ("0", "U  in (0=transposed,1=no-transposed) form"), ("1", "Equilibration"),
              ("8", "memory alignment in double")]
    return "HPLinpack benchmark input file\nbench/hpl_netlib.py\n" + "".join(
        f"{str(v):<12} {w}\n" for v, w in values)


def write_csv(path, records):
    """Records (dicts with the same keys) as CSV, numbers with 4 decimals."""
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(records[0].keys()))
        writer.writeheader()
        for r in records:
            writer.writerow({k: (f"{v:.4f}" if isinstance(v, float) else v) for k, v in r.items()})


def say(text):
    print(text, flush=True)


def build_xhpl(tarball, work):
    """netlib's documented build: autoreconf, configure with mpicc and OpenBLAS, make."""
    top = work / "hpl"
    xhpl = top / "testing" / "xhpl"
    if xhpl.exists():
        return xhpl
    say(f"building netlib HPL from {tarball} in {work} (about a minute)")
    work.mkdir(parents=True, exist_ok=True)
    with tarfile.open(tarball) as t:
        t.extractall(work)
    env = dict(os.environ, CC="mpicc", MPICC="mpicc", CFLAGS="-O3 -march=native", LIBS="-lopenblas")
    for command in (["autoreconf", "-fi"], ["./configure"], ["make", f"-j{os.cpu_count() or 1}"]):
        done = subprocess.run(command, cwd=top, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"netlib build failed at {' '.join(command)}:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return xhpl


class Runner:
    def __init__(self, options, work):
        self.options = options
        self.work = work

    def mpirun(self, ranks, threads):
        # One core per single-threaded rank; threads of one rank need the cores free to move.
        if threads > 1:
            bind = ["--bind-to", "none"]
        elif ranks <= (os.cpu_count() or 1):
            bind = ["--bind-to", "core"]
        else:
            bind = ["--oversubscribe"]
        return [self.options.mpirun, *bind, "-x", f"OPENBLAS_NUM_THREADS={threads}"]

    def run(self, command, cwd, env=None):
        done = subprocess.run(command, cwd=cwd, capture_output=True, text=True,
                              env=dict(os.environ, **(env or {})))
        found = ROW.search(done.stdout)
        if done.returncode != 0 or found is None or "PASSED" not in done.stdout:
            sys.exit(f"{' '.join(command)} failed (exit {done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
        return float(found.group(6)), float(found.group(7))

    def xhpl(self, xhpl, directory, ranks, threads):
        return self.run(self.mpirun(ranks, threads) + ["-n", str(ranks), str(xhpl)], directory)

    def skt(self, directory, ranks, threads, every, job, extra_env=None):
        base = self.mpirun(ranks, threads)
        args = ["--no-checkpoint"] if every == 0 else ["--checkpoint-every", str(every)]
        command = list(base)
        for r in range(ranks):  # each rank its own virtual node, so groups of 2 protect something
            # Each program its own OPENBLAS_NUM_THREADS: mpirun's -x NAME=value reaches only the
            # first program of a colon-separated launch (its ranks bound to one core each ran with
            # one thread all the same: OpenBLAS counts the cores it may use).
            command += ["-n", "1", "env", f"SKT_NODE=v{r}", f"OPENBLAS_NUM_THREADS={threads}",
                        self.options.skt] + args + ["HPL.dat"]
            if r + 1 < ranks:
                command.append(":")
        env = {"SKT_JOB": job, "SKT_GROUP_SIZE": "2" if ranks >= 2 else "1", "SKT_LOG": "warn"}
        return self.run(command, directory, dict(env, **(extra_env or {})))

    def bench_hpl(self, n, p, q, threads, parts):
        command = self.mpirun(p * q, threads) + ["-n", str(p * q), self.options.bench_hpl, "--n", str(n),
                                                   "--nb", str(self.options.nb), "--p", str(p), "--q", str(q),
                                                   "--pairs", "1", "--parts", parts,
                                                   "--csv", str(self.work / "bench-hpl.csv")]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"bench-hpl failed:\n{done.stdout}\n{done.stderr}")
        table = plot.rows(self.work / "bench-hpl.csv")
        dgemm = next(float(r["Gflops"]) for r in table if r["run"] == "dgemm")
        pdgesv = [float(r["Gflops"]) for r in table if r["what"] == "PDGESV"]
        return dgemm, (pdgesv[0] if pdgesv else None)


def parse_config(text):
    m = re.fullmatch(r"(\d+):(\d+)x(\d+)(?::(\d+)t)?", text)
    if not m:
        raise argparse.ArgumentTypeError(f"'{text}' is not N:PxQ or N:PxQ:Tt")
    return int(m.group(1)), int(m.group(2)), int(m.group(3)), int(m.group(4) or 1)


def main(argv):
    here = pathlib.Path(__file__).resolve().parent
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--netlib", default=str(here.parent.parent / "shared" / "peers" / "hpl-2.3.tar.gz"),
                        help="netlib HPL 2.3 source tarball (default: ../shared/peers/hpl-2.3.tar.gz)")
    parser.add_argument("--build", default=str(here.parent / "build"), help="the selfckpt build directory")
    parser.add_argument("--work", default="", help="where netlib is built and runs happen (default: BUILD/netlib-hpl)")
    parser.add_argument("--configs", type=lambda s: [parse_config(c) for c in s.split(",")],
                        default=[parse_config("12288:2x1"), parse_config("12288:1x2")])
    parser.add_argument("--nb", type=int, default=192)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--pdgesv-max-n", type=int, default=12288,
                        help="run PDGESV only up to this N (it is slow)")
    parser.add_argument("--out", default="", help="where the CSV and PNG go (default: bench/results/<date>)")
    parser.add_argument("--mpirun", default="mpirun")
    options = parser.parse_args(argv)
    build = pathlib.Path(options.build).resolve()
    options.skt = str(build / "hpl" / "skt-hpl")
    options.bench_hpl = str(build / "bench" / "bench-hpl")
    if not os.path.isfile(options.netlib):
        sys.exit(f"no netlib HPL source tarball at {options.netlib}: give --netlib PATH")
    for tool in ("autoreconf", "mpicc", "make"):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} is missing (Debian: autoconf automake libtool libopenmpi-dev make)")
    work = pathlib.Path(options.work or build / "netlib-hpl").resolve()
    out = pathlib.Path(options.out or here / "results" / datetime.date.today().isoformat())
    out.mkdir(parents=True, exist_ok=True)
    plot.warn_if_missing()
    xhpl = build_xhpl(options.netlib, work)
    runner = Runner(options, work)
    records, summary = [], []
    say(f"{'config':<18} {'pair':>4}  {'netlib Gflops':>13} {'SKT-HPL':>10} {'ratio':>6} "
        f"{'SKT ckpt':>10} {'ratio':>6}")
    for n, p, q, threads in options.configs:
        ranks = p * q
        name = f"N={n} {p}x{q}" + (f" {threads}t" if threads > 1 else "")
        directory = work / f"run-{n}-{p}x{q}-{threads}t"
        directory.mkdir(exist_ok=True)
        (directory / "HPL.dat").write_text(hpl_dat(n, options.nb, p, q))
        panels = -(-n // options.nb)
        every = max(1, panels // 10) if ranks >= 2 else 0
        netlib_g, skt_g, ckpt_g = [], [], []
        for pair in range(1, options.pairs + 1):
            order = ["netlib", "skt", "ckpt"] if pair % 2 else ["ckpt", "skt", "netlib"]
            got = {}
            for what in order:
                if what == "netlib":
                    got[what] = runner.xhpl(xhpl, directory, ranks, threads)
                elif what == "skt":
                    got[what] = runner.skt(directory, ranks, threads, 0, f"bench-netlib-{os.getpid()}-{pair}")
                elif every > 0:
                    got[what] = runner.skt(directory, ranks, threads, every, f"bench-netlib-{os.getpid()}-{pair}c")
            netlib_g.append(got["netlib"][1])
            skt_g.append(got["skt"][1])
            ckpt = got.get("ckpt")
            if ckpt:
                ckpt_g.append(ckpt[1])
            for what, (seconds, gflops) in got.items():
                records.append({"config": name, "pair": pair, "run": what, "seconds": seconds, "Gflops": gflops})
            say(f"{name:<18} {pair:>4}  {got['netlib'][1]:>13.2f} {got['skt'][1]:>10.2f} "
                f"{got['skt'][1] / got['netlib'][1]:>6.3f} "
                + (f"{ckpt[1]:>10.2f} {ckpt[1] / got['netlib'][1]:>6.3f}" if ckpt else f"{'-':>10} {'-':>6}"))
        parts = "dgemm,compare" if n <= options.pdgesv_max_n else "dgemm"
        dgemm, pdgesv = runner.bench_hpl(n, p, q, threads, parts)
        ratio = statistics.median(s / t for s, t in zip(skt_g, netlib_g))
        ckpt_ratio = statistics.median(c / t for c, t in zip(ckpt_g, netlib_g)) if ckpt_g else None
        row = {"config": name, "pairs": options.pairs, "netlib Gflops": statistics.median(netlib_g),
               "SKT-HPL Gflops": statistics.median(skt_g), "SKT/netlib": ratio,
               "SKT ckpt Gflops": statistics.median(ckpt_g) if ckpt_g else "",
               "ckpt/netlib": ckpt_ratio if ckpt_ratio else "", "checkpoint every": every or "",
               "DGEMM Gflops": dgemm, "SKT efficiency": statistics.median(skt_g) / dgemm,
               "netlib efficiency": statistics.median(netlib_g) / dgemm,
               "PDGESV Gflops": pdgesv if pdgesv else ""}
        summary.append(row)
        say(f"{name:<18} median SKT/netlib {ratio:.3f}"
            + (f", with checkpoints every {every} panels {ckpt_ratio:.3f}" if ckpt_ratio else "")
            + f"; DGEMM {dgemm:.2f} Gflops: efficiency SKT {row['SKT efficiency']:.3f}, "
              f"netlib {row['netlib efficiency']:.3f}" + (f"; PDGESV {pdgesv:.2f} Gflops" if pdgesv else ""))
    write_csv(out / "hpl-netlib.csv", summary)
    write_csv(out / "hpl-netlib-runs.csv", records)
    lines = [f'"{r["config"]}" {r["netlib Gflops"]:.2f} {r["SKT-HPL Gflops"]:.2f} '
             f'{r["SKT ckpt Gflops"] or 0:.2f} {r["DGEMM Gflops"]:.2f}' for r in summary]
    plot.histogram(out / "hpl-netlib.png", "SKT-HPL and netlib HPL 2.3 (medians), and the DGEMM rate",
                   "Gflops", lines, "set key outside right\nset yrange [0:*]\nset xtics rotate by -25",
                   "using 2:xtic(1) title 'netlib HPL 2.3', '' using 3 title 'SKT-HPL', "
                   "'' using 4 title 'SKT-HPL, a checkpoint every tenth', '' using 5 title 'DGEMM rate'")
    say(plot.written(out / "hpl-netlib.csv", out / "hpl-netlib-runs.csv", out / "hpl-netlib.png"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
