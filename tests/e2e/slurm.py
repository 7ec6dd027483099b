#!/usr/bin/env python3
"""skt-run under a real Slurm: a local cluster of 6 virtual nodes (tools/cluster: slurmctld,
munged, one slurmd per node, each in its own IPC namespace). Inside `salloc --no-kill`, the daemon
takes its nodes from the allocation and the last two as spares; a node is killed for real (its
slurmd, its processes, its memory) and marked DOWN; the daemon sees it through Slurm's node state,
replaces it, relaunches with a rankfile, and the job ends with the result of a run without
failure; a second node uses the second spare; with no spare left, a clear failure (exit 5)."""

import os
import re
import subprocess
import sys
import tempfile
import threading

import harness

APP_ARGS = ["--iterations", "12", "--checkpoint-every", "3", "--bytes", "20000", "--verify-recovery"]


def main(argv):
    import argparse

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--run", required=True)
    parser.add_argument("--app", required=True)
    parser.add_argument("--shm", required=True)
    parser.add_argument("--cluster", required=True, help="tools/cluster")
    parser.add_argument("--mpirun", default="mpirun")
    parser.add_argument("--timeout", type=int, default=300)
    options = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("SKIP: a local Slurm needs root (slurmd runs as root)")
        return 77
    checks = harness.Checks()
    expect = checks.expect

    local = harness.Cluster(options.app, options.shm, options.mpirun, options.timeout)
    reference = local.reference(4, APP_ARGS)
    with tempfile.TemporaryDirectory() as state:
        env = dict(os.environ, **harness.MPI_ENV, SKT_GROUP_SIZE="2",
                   SKT_TOOLS_CLUSTER_DIR=os.path.join(state, "cluster"),
                   SLURM_CONF=os.path.join(state, "cluster", "slurm.conf"))
        started = subprocess.run([options.cluster, "start", "6"], env=env, capture_output=True, text=True)
        if started.returncode != 0:
            print(f"FAILED: tools/cluster start 6:\n{started.stdout}\n{started.stderr}", file=sys.stderr)
            return 1
        print("cluster of 6 virtual nodes started", flush=True)

        def kill(node):
            subprocess.run([options.cluster, "kill", node], env=env, check=True, capture_output=True)

        def daemon(nodes, job, pauses, victims, spares):
            command = ["salloc", "-N", str(nodes), "--no-kill", options.run, "--spares", str(spares),
                       "--job", job, "--ranklist-out", os.path.join(state, job + ".ranklist"),
                       "--shm-tool", options.shm, "--launcher", options.mpirun, "--",
                       options.app, *APP_ARGS, *sum((["--pause", p] for p in pauses), [])]
            process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                       text=True, env=env, start_new_session=True)
            timer = threading.Timer(options.timeout, process.kill)
            timer.start()
            lines, paused = [], 0
            for line in process.stdout:
                lines.append(line)
                if line.startswith("PAUSED"):
                    kill(victims[paused])
                    paused += 1
            process.wait()
            timer.cancel()
            return process.returncode, "".join(lines)

        try:
            code, out = daemon(6, "slurm-e2e-a", ["0:6", "1:9"], ["n2", "n4"], 2)
            expect(code == 0, f"two nodes killed, two spares: exit 0 (got {code})", out)
            expect(re.search(r"^RESULT " + reference, out, re.M) is not None,
                   "the result is that of a run without failure", out)
            expect("probe slurm" in out and "nodes from the Slurm allocation" in out,
                   "nodes from the allocation, probed through Slurm", out)
            expect("dead: n2" in out and "replacing node n2 by spare n5" in out,
                   "n2 seen DOWN in Slurm and replaced by n5", out)
            expect("dead: n4" in out and "replacing node n4 by spare n6" in out,
                   "n4 seen DOWN and replaced by n6", out)
            with open(os.path.join(state, "slurm-e2e-a.ranklist")) as f:
                ranklist = f.read().split()
            expect(ranklist == ["0", "n1", "1", "n5", "2", "n3", "3", "n6"],
                   f"final ranklist: {' '.join(ranklist)}")
            for t in re.findall(r"relaunched program ran ([\d.]+) s after the failure", out):
                print(f"     failure seen -> relaunched program running: {t} s")
            listed = subprocess.run(["salloc", "-N", "4", "srun", "--ntasks-per-node", "1", options.shm,
                                     "list", "--job", "slurm-e2e-a"], env=env, capture_output=True, text=True)
            expect(listed.returncode == 0 and not re.search(r"^\s*\d+\s+0x", listed.stdout, re.M),
                   "no segments of the job left on any live node", listed.stdout + listed.stderr)

            code, out = daemon(4, "slurm-e2e-b", ["0:6"], ["n3"], 0)
            expect(code == 5, f"a node killed with no spare: exit 5 (got {code})", out)
            expect("out of spares: 1 node dead (n3) but 0 live spares left" in out,
                   "the message names the dead node and says no spare is left", out)
        finally:
            subprocess.run([options.cluster, "stop"], env=env, capture_output=True)
    return harness.report_failures(checks.failures)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
