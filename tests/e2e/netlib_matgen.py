#!/usr/bin/env python3
"""SKT-HPL generates the very matrix netlib HPL does: netlib's HPL_pdmatgen, built here from
netlib's source tarball with a small driver, and SKT-HPL's generator write each process's part of
[A|b] for several N, NB and grids; every entry must be equal bit for bit. Without the tarball the
test says so and is skipped (exit 77)."""

import argparse
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile

# (N, NB, P, Q): netlib's default file's sizes, uneven N, blocks larger than N, wide grids.
CASES = [(29, 1, 2, 2), (35, 4, 1, 4), (34, 3, 4, 1), (100, 7, 2, 3), (1000, 64, 2, 2),
         (257, 32, 3, 2), (5, 8, 1, 1), (1, 1, 2, 2)]
SEED = 100  # netlib's HPL_ISEED

DRIVER = r"""
#include "hpl.h"
/* One process's part of netlib's [A|b], raw doubles column-major without padding. */
int main(int argc, char **argv) {
  HPL_T_grid grid;
  int n, nb, mp, nq, seed;
  double *a;
  if (argc != 8) return 2;
  n = atoi(argv[1]); nb = atoi(argv[2]);
  grid.nprow = atoi(argv[3]); grid.npcol = atoi(argv[4]);
  grid.myrow = atoi(argv[5]); grid.mycol = atoi(argv[6]); seed = atoi(argv[7]);
  mp = HPL_numroc(n, nb, nb, grid.myrow, 0, grid.nprow);
  nq = HPL_numroc(n + 1, nb, nb, grid.mycol, 0, grid.npcol);
  a = calloc((size_t)(mp > 0 ? mp : 1) * (size_t)(nq > 0 ? nq : 1), sizeof(double));
  HPL_pdmatgen(&grid, n, n + 1, nb, a, mp > 0 ? mp : 1, seed);
  return fwrite(a, sizeof(double), (size_t)mp * nq, stdout) == (size_t)mp * nq ? 0 : 1;
}
"""

SOURCES = ["testing/pmatgen/HPL_pdmatgen.c"] + [
    f"testing/matgen/HPL_{name}.c" for name in ("rand", "setran", "jumpit", "xjumpm", "lmul", "ladd")
] + ["src/grid/HPL_grid_info.c", "src/pauxil/HPL_numroc.c", "src/pauxil/HPL_numrocI.c"]


def build_netlib(tarball, tmp, compiler):
    with tarfile.open(tarball) as t:
        t.extractall(tmp)
    top = next(os.path.join(tmp, d) for d in os.listdir(tmp)
               if os.path.isdir(os.path.join(tmp, d, "testing")))
    driver = os.path.join(tmp, "driver.c")
    with open(driver, "w") as f:
        f.write(DRIVER)
    exe = os.path.join(tmp, "netlib-matgen")
    subprocess.run([compiler, "-O2", "-I", os.path.join(top, "include"), "-o", exe, driver]
                   + [os.path.join(top, s) for s in SOURCES], check=True)
    return exe


def run_generator(exe, args):
    """One process's part as bytes; a failing generator's own words (a sanitizer's report too)
    go into the test log."""
    done = subprocess.run([exe] + args, capture_output=True)
    if done.returncode != 0:
        sys.stderr.write(done.stderr.decode(errors="replace"))
        raise SystemExit(f"FAILED: {' '.join([exe] + args)} exited with {done.returncode}")
    return done.stdout


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dump", required=True, help="skt-hpl-matgen")
    parser.add_argument("--netlib", default="", help="netlib HPL 2.3's source tarball")
    parser.add_argument("--source-root", default="", help="where to look for ../shared/peers")
    parser.add_argument("--mpicc", default="mpicc")
    names = [f"{n}:{nb}:{p}x{q}" for n, nb, p, q in CASES]
    parser.add_argument("--case", choices=names, action="append",
                        help="only this matrix, N:NB:PxQ (repeatable)")
    options = parser.parse_args(argv)
    cases = [c for c, name in zip(CASES, names) if not options.case or name in options.case]
    tarball = options.netlib or os.path.join(options.source_root, "..", "shared", "peers",
                                             "hpl-2.3.tar.gz")
    if not os.path.isfile(tarball):
        print(f"SKIPPED: no netlib HPL source tarball at {tarball} (configure with "
              "-Dnetlib_hpl=PATH to run this test)")
        return 77
    if shutil.which(options.mpicc) is None:
        print(f"SKIPPED: no {options.mpicc} to build netlib's generator")
        return 77
    failures = 0
    entries = 0
    with tempfile.TemporaryDirectory() as tmp:
        netlib = build_netlib(tarball, tmp, options.mpicc)
        for n, nb, p, q in cases:
            for myrow in range(p):
                for mycol in range(q):
                    args = [str(v) for v in (n, nb, p, q, myrow, mycol, SEED)]
                    theirs = run_generator(netlib, args)
                    ours = run_generator(options.dump, args)
                    entries += len(ours) // 8
                    if ours != theirs:
                        failures += 1
                        first = next((i // 8 for i in range(0, min(len(ours), len(theirs)), 8)
                                      if ours[i:i + 8] != theirs[i:i + 8]), min(len(ours), len(theirs)) // 8)
                        print(f"FAIL N={n} NB={nb} {p}x{q} process ({myrow},{mycol}): {len(ours) // 8} "
                              f"entries here, {len(theirs) // 8} from netlib, first difference at "
                              f"local entry {first}")
            print(f"ok   N={n} NB={nb} {p}x{q}: every process's part equal to netlib's"
                  if failures == 0 else f"     N={n} NB={nb} {p}x{q} done", flush=True)
    if entries == 0:
        print("FAILED: no entry was compared")
        return 1
    print(f"{entries} entries compared with netlib HPL_pdmatgen, {failures} processes differ")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
