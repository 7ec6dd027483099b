#!/usr/bin/env python3
"""`meson install` into a staging directory, then programs built outside the tree with nothing but
`pkg-config --cflags --libs selfckpt`: a C++ one using skt::allocator and the C example heat3d,
run under mpirun against the installed shared library (heat3d's result must equal the in-tree
plain build's). Also the static library with `pkg-config --static`."""

import os
import re
import subprocess
import sys
import tempfile

import harness


def run(command, **kw):
    done = subprocess.run(command, capture_output=True, text=True, **kw)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)}: exit {done.returncode}\n{done.stdout}\n{done.stderr}")
    return done.stdout


def main(argv):
    import argparse

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--build", required=True, help="the build directory")
    parser.add_argument("--source", required=True, help="the source directory")
    parser.add_argument("--mpirun", default="mpirun")
    parser.add_argument("--extra-flags", default="", help="compiler flags the build used (sanitizers)")
    options = parser.parse_args(argv)
    env = dict(os.environ, **harness.MPI_ENV, SKT_GROUP_SIZE="2")
    with tempfile.TemporaryDirectory() as stage:
        run(["meson", "install", "-C", options.build, "--destdir", stage, "--quiet"])
        pcs = [os.path.join(d, f) for d, _, fs in os.walk(stage) for f in fs if f == "selfckpt.pc"]
        if len(pcs) != 1:
            print(f"FAILED: expected one selfckpt.pc under {stage}, found {pcs}", file=sys.stderr)
            return 1
        for tool in ["skt-run", "skt-hpl", "skt-shm", "skt-inject", "heat3d", "cg"]:
            if not any(tool in fs for _, _, fs in os.walk(stage)):
                print(f"FAILED: {tool} is not installed", file=sys.stderr)
                return 1
        # The .pc names the install prefix; a copy of it points into the staging directory instead.
        with open(pcs[0]) as f:
            text = f.read()
        prefix = re.search(r"^prefix=(.*)$", text, re.M).group(1)
        pc_dir = os.path.join(stage, "pc")
        os.mkdir(pc_dir)
        with open(os.path.join(pc_dir, "selfckpt.pc"), "w") as f:
            f.write(text.replace(f"prefix={prefix}", f"prefix={stage}{prefix}", 1))
        pkg = ["pkg-config", "selfckpt"]
        pc_env = dict(env, PKG_CONFIG_PATH=pc_dir)
        extra = options.extra_flags.split()
        flags = run([*pkg, "--cflags", "--libs"], env=pc_env).split() + extra
        static_flags = run([*pkg, "--static", "--cflags", "--libs"], env=pc_env).split() + extra
        libdir = next(f[2:] for f in flags if f.startswith("-L"))
        print(f"pkg-config --cflags --libs selfckpt: {' '.join(flags)}")
        out = os.path.join(stage, "out")
        os.mkdir(out)
        run(["mpicxx", "-std=c++20", os.path.join(options.source, "tests/e2e/outside/vectors.cpp"),
             "-o", os.path.join(out, "vectors"), *flags], env=pc_env)
        run(["mpicc", "-DUSE_SELFCKPT", os.path.join(options.source, "examples/heat3d.c"),
             "-o", os.path.join(out, "heat3d"), *flags], env=pc_env)
        run(["mpicc", "-DUSE_SELFCKPT", os.path.join(options.source, "examples/heat3d.c"),
             "-o", os.path.join(out, "heat3d-static"),
             *sum((["-Wl,-Bstatic", f, "-Wl,-Bdynamic"] if f == "-lselfckpt" else [f] for f in static_flags), [])],
            env=pc_env)
        run_env = dict(env, LD_LIBRARY_PATH=libdir)
        args = ["24", "24", "24", "40", "10"]
        plain = run([options.mpirun, "-n", "2", os.path.join(options.build, "examples", "heat3d-plain"), *args], env=run_env)
        failures = []

        def on_own_nodes(job, program, *args):
            # One virtual node per rank, so that groups of 2 can form on one host.
            return [options.mpirun, "-n", "2", "sh", "-c", 'SKT_NODE=o$OMPI_COMM_WORLD_RANK exec "$0" "$@"',
                    program, *args], dict(run_env, SKT_JOB=job)

        for program in ["heat3d", "heat3d-static"]:
            command, job_env = on_own_nodes(f"outside-{program}-{os.getpid()}", os.path.join(out, program), *args)
            got = run(command, env=job_env)
            same = re.search(r"^RESULT \w+", got, re.M).group(0) == re.search(r"^RESULT \w+", plain, re.M).group(0)
            print(f"{'ok  ' if same else 'FAIL'} {program} built outside the tree gives the plain build's result")
            if not same:
                failures.append(f"{program}: {got} vs {plain}")
        command, job_env = on_own_nodes(f"outside-vectors-{os.getpid()}", os.path.join(out, "vectors"))
        got = run(command, env=job_env)
        ok = "rank 0: epoch 3, v[999] = 999" in got and "rank 1: epoch 3, v[999] = 1000" in got
        print(f"{'ok  ' if ok else 'FAIL'} a C++ program with skt::allocator built outside the tree runs")
        if not ok:
            failures.append(got)
        return harness.report_failures(failures)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
