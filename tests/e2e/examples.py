#!/usr/bin/env python3
"""The examples (heat3d in C, cg in C++, jacobi2d in Fortran, heat2d in Python) under skt-run on
local virtual nodes: a rank dies at a step of the second checkpoint
(every protocol step: SKT_FAULT=<step>) and its node with it: the probe, a script of this test,
destroys the node's memory (skt-inject) and reports it dead. The daemon puts a spare in its place,
the example resumes from its first or second checkpoint, and its result is identical, bit for bit,
to that of the plain MPI build run without faults. With xor at every step, and with Reed-Solomon
(m = 2) at two. cg checkpoints when skt_need_checkpoint says so: with SKT_MTBF=1s its Daly
interval is a fraction of a second, well under the run's few seconds, so a second checkpoint
comes.

heat3d also restarts on another number of ranks (HEAT3D_FROM, through skt_epoch_read): a job dies
at its seventh checkpoint, and heat3d on another number of ranks takes the grid from its sixth
epoch and ends with the uninterrupted run's result: 4 ranks to 2 on two of the old nodes after the
other two lost their memory (old ranks 0 and 1 read from memory, 2 and 3 from their drained files),
2 to 4 (from memory), 4 to 2 on other nodes (from the files), and 4 ranks doubled up on two nodes
to 2 without any drain (from memory); heat2d (Python, selfckpt.Epoch) and jacobi2d (Fortran)
the first two. A first try with another grid is refused, naming what
differs, and the old job's epoch serves the next."""

import os
import re
import subprocess
import sys
import tempfile

import harness
from harness import result_of

# jacobi2d is the Fortran one (use selfckpt), built when the library was built with Fortran.
EXAMPLES = {"heat3d": ["40", "40", "40", "120", "10"], "cg": ["64", "300"],
            "jacobi2d": ["96", "96", "200", "10"], "heat2d": ["64", "48", "120", "10"]}
SCHEMES = [("xor", 1, 2), ("rs", 2, 4)]
STEPS = {"xor": ["stage", "encode", "encoded", "agreed", "flush", "committed"], "rs": ["stage", "flush"]}


def command(options, name, plain):
    """The example's command line: a built program, or heat2d.py under the Python that has the
    module (--python), its plain version with --plain."""
    if name == "heat2d":
        return [options.python, options.heat2d] + (["--plain"] if plain else [])
    return [os.path.join(options.bin, name + ("-plain" if plain else ""))]


def one_failure(options, expect, name, args, reference, scheme, parity, group_size, step):
    job = harness.Cluster.new_job(f"ex{name}{scheme}")
    with tempfile.TemporaryDirectory() as registry:
        probe = os.path.join(registry, "probe")
        with open(probe, "w") as f:
            f.write(f"""#!/bin/sh
# The node of the rank that died loses its memory too, once; dead nodes stay dead.
test -e '{registry}'/"$1".dead && exit 1
if [ "$1" = n2 ] && [ ! -e '{registry}'/lost ]; then
  touch '{registry}'/lost
  '{options.inject}' node n2 --job {job} --registry '{registry}' >/dev/null
  exit 1
fi
exit 0
""")
        os.chmod(probe, 0o755)
        run = subprocess.run(
            [options.run, "--nodes", "n1,n2,n3,n4,n5", "--spares", "1", "--probe", f"cmd:{probe}",
             "--job", job, "--launcher", options.mpirun, "--shm-tool", options.shm,
             "--state-dir", os.path.join(registry, "state"), "--",
             *command(options, name, False), *args],
            env=harness.daemon_env(SKT_GROUP_SIZE=str(group_size), SKT_SCHEME=scheme, SKT_PARITY=str(parity),
                                   SKT_FAULT=f"{step}:1:2:0", SKT_MTBF="1s"),
            capture_output=True, text=True, timeout=options.timeout)
        out = run.stdout + run.stderr
        expect(run.returncode == 0 and result_of(run.stdout) == reference,
               f"{name} {scheme} m={parity}: node n2 lost at step '{step}' of the second checkpoint, result "
               f"identical to the plain build's ({reference})", out)
        restored = re.search(r"reports restored epoch (\d+)", out)
        # Before the job-wide agreement the second checkpoint is lost; after it, either may come back.
        allowed = {"1"} if step in ("stage", "encode", "encoded") else {"1", "2"}
        expect("replacing node n2 by spare n5" in out and restored and restored.group(1) in allowed,
               f"{name} {scheme} step {step}: n2 replaced by n5, epoch {'/'.join(sorted(allowed))} restored", out)
    subprocess.run([options.shm, "clean", "--job", job], capture_output=True)


# heat3d from N ranks to M: (the old run's nodes, the new run's, the old nodes whose memory is lost,
# whether the old run drains, how many old ranks are read from memory).
RESHAPES = [(["n0", "n1", "n2", "n3"], ["n0", "n1"], ["n2", "n3"], True, 2),
            (["n0", "n1"], ["n0", "n1", "n2", "n3"], [], True, 2),
            (["n0", "n1", "n2", "n3"], ["m0", "m1"], [], True, 0),
            (["n0", "n0", "n1", "n1"], ["n0", "n1"], [], False, 4)]


def reshape(options, expect, name, args, reference, scenarios):
    """heat3d (or heat2d) from N ranks to M: see the module's description."""
    program = command(options, name, False)
    cluster = harness.Cluster(program[0], options.shm, options.mpirun, options.timeout)
    args = program[1:] + args
    split = len(program) - 1 + {"heat3d": 2, "heat2d": 1, "jacobi2d": 0}[name]  # the split axis
    variable = name.upper() + "_FROM"
    for old_nodes, new_nodes, lost, drains, in_memory in scenarios:
        with tempfile.TemporaryDirectory() as drain_dir:
            old_n, new_n = len(old_nodes), len(new_nodes)
            old, new = cluster.new_job(f"{name}-{old_n}"), cluster.new_job(f"{name}-{new_n}")
            storage = {"SKT_DRAIN_DIR": drain_dir} if drains else {}
            died = cluster.launch(old_nodes, args, env={"SKT_JOB": old, "SKT_FAULT": "stage:1:7:0",
                                                        "SKT_GROUP_SIZE": "2", **storage})
            for node in lost:
                cluster.lose_node(old, node)
            where = (f"{name} {old_n} ranks on {','.join(old_nodes)} to {new_n} on "
                     f"{','.join(new_nodes)}{', ' + ' and '.join(lost) + ' lost' if lost else ''}"
                     f"{'' if drains else ', no drain'}")
            expect(died.code != 0 and died.result is None,
                   f"{where}: the old run dies at its seventh checkpoint", died.describe())
            env = {"SKT_JOB": new, variable: old, **storage}
            if lost:
                other = list(args)
                other[split] = str(int(other[split]) + 8)
                wrong = cluster.launch(new_nodes, other, env=env)
                expect(wrong.code == 2 and "ran another grid" in wrong.err
                       and cluster.segment_count(new) == 0,
                       f"{where}, another grid than the old job's: refused (exit 2), naming the "
                       "sizes, leaving no segment of its own", wrong.describe())
            run = cluster.launch(new_nodes, args, env=env)
            said = (f"resumed from epoch 6 of job '{old}' ({old_n} ranks, {in_memory} of them in memory) "
                    "at step 60")
            expect(run.code == 0 and run.result == reference and said in run.out,
                   f"{where}: '{said}', result identical to the uninterrupted run's ({reference})",
                   run.describe())
            cluster.clean(old)
            cluster.clean(new)


def main(argv):
    import argparse

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--run", required=True)
    parser.add_argument("--inject", required=True)
    parser.add_argument("--shm", required=True)
    parser.add_argument("--bin", required=True, help="the directory of the built examples")
    parser.add_argument("--mpirun", default="mpirun")
    parser.add_argument("--python", help="a python3 with numpy and mpi4py, for heat2d.py")
    parser.add_argument("--python-path", help="the directory of the built module (import selfckpt)")
    parser.add_argument("--heat2d", help="examples/heat2d.py")
    parser.add_argument("--timeout", type=int, default=300)
    parser.add_argument("--example", choices=sorted(EXAMPLES), help="only this example")
    options = parser.parse_args(argv)
    if options.python_path:
        # Every rank's interpreter finds the module; mpirun passes its environment on.
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [options.python_path,
                                                                 os.environ.get("PYTHONPATH")]))
    env = dict(os.environ, **harness.MPI_ENV)
    checks = harness.Checks()
    expect = checks.expect

    for name, args in EXAMPLES.items():
        if options.example and name != options.example:
            continue
        if name == "jacobi2d" and not os.path.exists(os.path.join(options.bin, name)):
            print("skip jacobi2d: the library was built without Fortran")
            continue
        if name == "heat2d" and not options.python:
            print("skip heat2d: the library was built without the Python module")
            continue
        plain = subprocess.run([options.mpirun, "-n", "4", *command(options, name, True), *args],
                               env=env, capture_output=True, text=True, timeout=options.timeout)
        reference = result_of(plain.stdout)
        expect(plain.returncode == 0 and reference is not None, f"{name}: the plain MPI build runs",
               plain.stdout + plain.stderr)
        if name in ("heat3d", "heat2d", "jacobi2d"):
            reshape(options, expect, name, args, reference, RESHAPES if name == "heat3d" else RESHAPES[:2])
        for scheme, parity, group_size in SCHEMES:
            for step in STEPS[scheme]:
                one_failure(options, expect, name, args, reference, scheme, parity, group_size, step)
    return harness.report_failures(checks.failures)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
