#!/usr/bin/env python3
"""`meson install` into a staging directory, then moved elsewhere (a relocated install, nothing
edited), and programs built outside the tree against it the ways people build:

- plain gcc/g++ with `pkg-config selfckpt` and their MPI's own pkg-config (ompi-c, ompi-cxx);
- the MPI compiler wrappers (mpicc, mpicxx, mpifort) with `pkg-config selfckpt` (selfckpt-fortran);
- CMake with find_package(selfckpt) in projects of every language mix: C only, C++ only, Fortran
  only (when built), and C + C++ (+ Fortran), the first three declaring cmake_minimum_required 3.0;
- static linking with `pkg-config --static`.

Each is run (without LD_LIBRARY_PATH: the library is found through the run path pkg-config and
CMake give) on two virtual nodes; the examples must give their in-tree plain builds' results. Also:
the shared library exports skt_* only, `pkg-config --cflags selfckpt` carries no private flags,
every program in bin is an skt-* (the examples go with their sources to share/selfckpt/examples),
and the C++ header said it needs C++17 where it was compiled as C++14. With --python, the module is
installed, and the installed heat2d.py imports it from there (PYTHONPATH the moved install's
directory) and gives its plain version's result."""

import os
import re
import shutil
import subprocess
import sys
import tempfile

import harness


def run(command, **kw):
    done = subprocess.run(command, capture_output=True, text=True, **kw)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)}: exit {done.returncode}\n{done.stdout}\n{done.stderr}")
    return done.stdout


def examples_directories(root):
    """Where under `root` the examples were installed (share/selfckpt/examples)."""
    return [d for d, _, _ in os.walk(root) if d.endswith(os.path.join("selfckpt", "examples"))]


def result(text):
    m = re.search(r"^RESULT \w+", text, re.M)
    return m.group(0) if m else None


def main(argv):
    import argparse

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--build", required=True, help="the build directory")
    parser.add_argument("--source", required=True, help="the source directory")
    parser.add_argument("--mpirun", default="mpirun")
    parser.add_argument("--extra-flags", default="", help="compiler flags the build used (sanitizers)")
    parser.add_argument("--python", help="the python3 the module was built for (when it was)")
    parser.add_argument("--case", choices=["pkg-config", "cmake", "python"], action="append",
                        help="after the install and its layout, only these programs (repeatable): built "
                             "with pkg-config, with CMake, or the Python module")
    options = parser.parse_args(argv)
    chosen = lambda case: not options.case or case in options.case
    env = dict(os.environ, **harness.MPI_ENV, SKT_GROUP_SIZE="2")
    env.pop("LD_LIBRARY_PATH", None)
    checks = harness.Checks()
    extra = options.extra_flags.split()
    examples = os.path.join(options.source, "examples")
    outside = os.path.join(options.source, "tests/e2e/outside")
    fortran = os.path.exists(os.path.join(options.build, "examples", "jacobi2d"))

    with tempfile.TemporaryDirectory() as work:
        stage = os.path.join(work, "stage")
        run(["meson", "install", "-C", options.build, "--destdir", stage, "--quiet"])
        pcs = [os.path.join(d, f) for d, _, fs in os.walk(stage) for f in fs if f == "selfckpt.pc"]
        if len(pcs) != 1:
            print(f"FAILED: expected one selfckpt.pc under {stage}, found {pcs}", file=sys.stderr)
            return 1
        for tool in ["skt-run", "skt-hpl", "skt-shm", "skt-inject", "skt-drain"]:
            checks.expect(any(tool in files for _, _, files in os.walk(stage)), f"{tool} is installed")
        bins = [f for d, _, fs in os.walk(stage) if os.path.basename(d) == "bin" for f in fs]
        checks.expect(bins and all(f.startswith("skt-") for f in bins),
                      f"every program in bin is an skt-* ({', '.join(sorted(bins))})")
        examples_installed = examples_directories(stage)
        wanted = ["heat3d", "heat3d.c", "cg", "cg.cpp"] + (["jacobi2d", "jacobi2d.F90"] if fortran else [])
        checks.expect(len(examples_installed) == 1 and
                      all(os.path.exists(os.path.join(examples_installed[0], f)) for f in wanted),
                      f"the examples and their sources are in share/selfckpt/examples ({', '.join(wanted)})")
        # The install prefix (e.g. /usr/local) moves to another directory as a whole.
        libdir = os.path.dirname(os.path.dirname(pcs[0]))  # <prefix>/<libdir>
        prefix_in_stage = libdir
        while not os.path.isdir(os.path.join(prefix_in_stage, "include")):
            prefix_in_stage = os.path.dirname(prefix_in_stage)
        prefix = os.path.join(work, "moved", "selfckpt")
        os.makedirs(os.path.dirname(prefix))
        shutil.move(prefix_in_stage, prefix)
        libdir = prefix + libdir[len(prefix_in_stage):]
        pc_env = dict(env, PKG_CONFIG_PATH=os.path.join(libdir, "pkgconfig"))

        exported = run(["nm", "-D", "--defined-only", os.path.join(libdir, "libselfckpt.so")]).split("\n")
        names = [line.split()[-1] for line in exported if line.strip()]
        checks.expect(names and all(n.startswith("skt_") for n in names),
                      f"libselfckpt.so exports skt_* only ({len(names)} symbols)",
                      " ".join(n for n in names if not n.startswith("skt_")))
        def normalized(flags):
            # pkg-config gives ${pcfiledir}/../../../include: the same directory.
            return [re.sub(r"(/[^ ]*)", lambda m: os.path.normpath(m.group(1)), f) for f in flags]

        cflags = normalized(run(["pkg-config", "--cflags", "selfckpt"], env=pc_env).split())
        libs = normalized(run(["pkg-config", "--libs", "selfckpt"], env=pc_env).split())
        print(f"pkg-config --cflags --libs selfckpt: {' '.join(cflags + libs)}")
        checks.expect(cflags == [f"-I{os.path.join(prefix, 'include')}"],
                      "--cflags: the relocated include directory, and nothing private", " ".join(cflags))
        checks.expect(f"-L{libdir}" in libs and f"-Wl,-rpath,{libdir}" in libs,
                      "--libs: the relocated library, with its run path", " ".join(libs))

        out = os.path.join(work, "out")
        os.mkdir(out)

        def build(name, command):
            try:
                run([*command, *extra], env=pc_env)
                return True
            except RuntimeError as e:
                checks.expect(False, f"{name} builds", str(e))
                return False

        def pc(*packages, static=False):
            return run(["pkg-config", *(["--static"] if static else []), "--cflags", "--libs", *packages],
                       env=pc_env).split()

        static_flags = sum((["-Wl,-Bstatic", f, "-Wl,-Bdynamic"] if f == "-lselfckpt" else [f]
                            for f in pc("selfckpt", static=True)), [])
        heat3d = os.path.join(examples, "heat3d.c")
        programs = {
            "heat3d, gcc + pkg-config selfckpt ompi-c":
                ["gcc", "-DUSE_SELFCKPT", heat3d, "-o", os.path.join(out, "heat3d-gcc"), *pc("selfckpt", "ompi-c")],
            "heat3d, mpicc + pkg-config selfckpt":
                ["mpicc", "-DUSE_SELFCKPT", heat3d, "-o", os.path.join(out, "heat3d-mpicc"), *pc("selfckpt")],
            "heat3d, static, mpicc + pkg-config --static selfckpt":
                ["mpicc", "-DUSE_SELFCKPT", heat3d, "-o", os.path.join(out, "heat3d-static"), *static_flags],
            "vectors, g++ + pkg-config selfckpt ompi-cxx":
                ["g++", "-std=c++20", os.path.join(outside, "vectors.cpp"), "-o", os.path.join(out, "vectors-gxx"),
                 *pc("selfckpt", "ompi-cxx")],
            "vectors, mpicxx + pkg-config selfckpt":
                ["mpicxx", "-std=c++20", os.path.join(outside, "vectors.cpp"), "-o",
                 os.path.join(out, "vectors-mpicxx"), *pc("selfckpt")],
        }
        if fortran:
            programs["jacobi2d, mpifort + pkg-config selfckpt-fortran"] = [
                "mpifort", "-DUSE_SELFCKPT", os.path.join(examples, "jacobi2d.F90"), "-o",
                os.path.join(out, "jacobi2d-mpifort"), *pc("selfckpt-fortran")]
        if not chosen("pkg-config"):
            programs = {}
        built = {name: build(name, command) for name, command in programs.items()}

        if chosen("pkg-config"):
            too_old = subprocess.run(["g++", "-std=c++14", "-c", "-x", "c++", "-", "-o", os.devnull,
                                      *pc("selfckpt", "ompi-cxx")], input="#include <selfckpt/selfckpt.hpp>\n",
                                     capture_output=True, text=True, env=pc_env)
            checks.expect(too_old.returncode != 0 and "selfckpt.hpp needs C++17" in too_old.stderr,
                          "the C++ header compiled as C++14 says it needs C++17", too_old.stderr[-600:])

        # A CMake project of each language mix: (name, directory, its programs).
        projects = [("C and C++" + (" and Fortran" if fortran else ""), outside,
                     ["heat3d", "vectors"] + (["jacobi2d"] if fortran else [])),
                    ("C only", os.path.join(outside, "c"), ["heat3d"]),
                    ("C++ only", os.path.join(outside, "cxx"), ["vectors"])]
        if fortran:
            projects.append(("Fortran only", os.path.join(outside, "fortran"), ["jacobi2d"]))
        cmake_built = []
        if not chosen("cmake"):
            projects = []
        elif shutil.which("cmake") is None:
            checks.expect(False, "cmake is installed (Debian: cmake)")
            projects = []
        for number, (kind, directory, names) in enumerate(projects):
            cmake_build = os.path.join(work, f"cmake-{number}")
            what = f"CMake, {kind}: find_package(selfckpt) from the relocated install, and the build"
            try:
                flags = " ".join(extra)
                run(["cmake", "-S", directory, "-B", cmake_build, f"-DCMAKE_PREFIX_PATH={prefix}",
                     f"-DEXAMPLES={examples}", f"-DOUTSIDE={outside}", f"-DWITH_FORTRAN={'ON' if fortran else 'OFF'}",
                     f"-DCMAKE_C_FLAGS={flags}", f"-DCMAKE_CXX_FLAGS={flags}", f"-DCMAKE_EXE_LINKER_FLAGS={flags}"],
                    env=env)
                run(["cmake", "--build", cmake_build], env=env)
                checks.expect(True, what)
                cmake_built += [(f"{name}, CMake {kind}", os.path.join(cmake_build, name)) for name in names]
            except RuntimeError as e:
                checks.expect(False, what, str(e))

        def on_own_nodes(job, program, *args, **more_env):
            # One virtual node per rank, so that groups of 2 can form on one host.
            return run([options.mpirun, "--oversubscribe", "-n", "2", "sh", "-c",
                        'SKT_NODE=o$OMPI_COMM_WORLD_RANK exec "$0" "$@"', program, *args],
                       env=dict(env, SKT_JOB=job, **more_env))

        heat_args = ["24", "24", "24", "40", "10"]
        jacobi_args = ["48", "48", "60", "10"]
        plain = {
            "heat3d": result(run([options.mpirun, "--oversubscribe", "-n", "2",
                                  os.path.join(options.build, "examples", "heat3d-plain"), *heat_args], env=env)),
        }
        if fortran:
            plain["jacobi2d"] = result(run([options.mpirun, "--oversubscribe", "-n", "2",
                                            os.path.join(options.build, "examples", "jacobi2d-plain"),
                                            *jacobi_args], env=env))
        to_run = [(name, os.path.join(out, command[command.index("-o") + 1])) for name, command in programs.items()
                  if built[name]]
        to_run += cmake_built
        for name, program in to_run:
            example = name.split(",")[0]
            job = f"outside-{re.sub(r'[^a-z0-9]+', '-', name)}-{os.getpid()}"[:48]
            try:
                got = on_own_nodes(job, program, *({"heat3d": heat_args, "jacobi2d": jacobi_args}.get(example, [])))
            except RuntimeError as e:
                checks.expect(False, f"{name}: runs", str(e))
                continue
            if example == "vectors":
                ok = "rank 0: epoch 3, v[999] = 999, cells[99] = 0" in got and "rank 1: epoch 3, v[999] = 1000" in got
                checks.expect(ok, f"{name}: runs (scoped, named and unnamed allocations; default context)", got)
            else:
                checks.expect(result(got) == plain[example] and plain[example] is not None,
                              f"{name}: the plain build's result", got)
        if options.python and chosen("python"):
            installed_python(options, prefix, on_own_nodes, env, checks)
    return harness.report_failures(checks.failures)


def installed_python(options, prefix, on_own_nodes, env, checks):
    """The module in the moved install, and the installed heat2d.py on it against its plain run."""
    modules = [os.path.join(d, f) for d, _, fs in os.walk(prefix) for f in fs
               if f.startswith("selfckpt.") and f.endswith(".so")]
    checks.expect(len(modules) == 1, f"the Python module is installed ({', '.join(modules) or 'none'})")
    examples = examples_directories(prefix)
    heat2d = os.path.join(examples[0], "heat2d.py") if examples else ""
    checks.expect(os.path.exists(heat2d), "heat2d.py is installed with the examples")
    if len(modules) != 1 or not os.path.exists(heat2d):
        return
    path = os.path.dirname(modules[0])
    args = ["32", "24", "30", "10"]
    try:
        plain = result(run([options.mpirun, "--oversubscribe", "-n", "2", options.python, heat2d, *args,
                            "--plain"], env=env))
        got = on_own_nodes(f"outside-heat2d-{os.getpid()}", options.python, heat2d, *args, PYTHONPATH=path)
    except RuntimeError as e:
        checks.expect(False, "heat2d.py: import selfckpt from the moved install, and run", str(e))
        return
    checks.expect(plain is not None and result(got) == plain,
                  f"heat2d.py: import selfckpt from the moved install ({os.path.relpath(path, prefix)}), and "
                  "the plain version's result", got)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
