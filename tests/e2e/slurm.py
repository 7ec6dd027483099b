#!/usr/bin/env python3
"""skt-run under a real Slurm: a local cluster of 7 virtual nodes (tools/cluster: slurmctld,
munged, one slurmd per node, each with its own SysV IPC namespace and /dev/shm). Inside
`salloc --no-kill`, the daemon takes its nodes from the allocation and the last two as spares.

- 4 ranks on each node (16 ranks, groups of 4 across nodes): a node is killed for real (its
  slurmd, its processes, its memory) and marked DOWN; the daemon sees it through Slurm, moves its
  4 ranks to a spare, relaunches, and a second node goes the same way; the job ends with the
  result of a run without failure.
- A node drained in Slurm while its processes run (Slurm kills nothing, mpirun notices nothing):
  the daemon's periodic probe sees it, ends the run and replaces the node.
- A rank stops its node's MPI daemon (orted) mid-run: the ranks finish their work, close their
  contexts and then wait in MPI_Finalize for good. The daemon ends the run and says so (exit 8),
  rather than wait forever or do the finished work again.
- The job suspended in Slurm (scontrol suspend, as an operator or a preempting job does): every rank
  stops and goes silent, on purpose. The daemon waits for the resume instead of relaunching, even
  while the controller itself is frozen (SIGSTOP) and cannot say whether the job is suspended.
- The state directory lost after the job's second checkpoint (it was on a login node's disk, or
  the command is run again with another --state-dir): the same command counts the segments on
  the nodes and resumes them; another command under the job's tag, run before it, is refused
  (exit 2) and leaves them for it. skt-run used to launch with SKT_RESTART=0 there: the program
  refused the segments and told the operator to remove them, a checkpoint the same command could
  resume. A first launch over nodes without segments is still told SKT_RESTART=0. Resubmitted
  on an allocation that leaves out one of its nodes, each rank is placed on the node that holds
  its segments (in the allocation's order every one would be misplaced, which the library
  refuses), and the one whose node is left out is rebuilt by its group.
- A batch job requeued after its second checkpoint (same job id, so the same skt-run state) comes
  back on other nodes: skt-run resumes it there, moving the ranks of the node it lost, and the
  checkpoint is restored.
- With no spare left, a node killed for real: its rank goes on a live node (doubled up) and the
  job finishes with the right result; with --stop-at-last-spare, a clear failure (exit 5).
- Another number of ranks after a node killed for real: heat3d on 4 ranks of n6 and n7 dies at its
  seventh checkpoint, and SKT-HPL on a 2x2 grid there in the middle of its second test; n7 is
  killed; heat3d on 2 ranks (n1 and n6, HEAT3D_FROM) takes the grid from epoch 6, old ranks 0 and 1
  from n6's memory and 2 and 3 from their drained files, and ends with the uninterrupted run's
  result; skt-hpl on a 2x1 grid there (--from-job) continues the factorization, the matrix
  redistributed, and passes the residual check."""

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import harness
from hpl import MID_PANEL, NB, UNEVEN_N, hpl_dat, write_dats

APP_ARGS = ["--iterations", "12", "--checkpoint-every", "3", "--bytes", "20000", "--verify-recovery"]


# The cases, in the order they run, each on the nodes the ones before left alive.
CASES = ["node-drained-while-running", "stuck-in-mpi-finalize", "suspended-and-resumed", "state-lost",
         "requeued-elsewhere", "two-nodes-killed-two-spares", "out-of-spares", "reshaped-after-a-kill"]
HEAT3D_ARGS = ["40", "40", "40", "120", "10"]


def main(argv):
    import argparse

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--run", required=True)
    parser.add_argument("--app", required=True)
    parser.add_argument("--shm", required=True)
    parser.add_argument("--cluster", required=True, help="tools/cluster")
    parser.add_argument("--heat3d", required=True, help="the built examples/heat3d (heat3d-plain beside it)")
    parser.add_argument("--hpl", required=True, help="the built skt-hpl")
    parser.add_argument("--mpirun", default="mpirun")
    parser.add_argument("--timeout", type=int, default=300)
    parser.add_argument("--case", choices=CASES + ["list"], action="append",
                        help="run only this case (repeatable); --case list names them")
    options = parser.parse_args(argv)
    if "list" in (options.case or []):
        print("\n".join(CASES))
        return 0
    if os.geteuid() != 0:
        print("SKIP: a local Slurm needs root (slurmd runs as root)")
        return 77
    checks = harness.Checks()
    expect = checks.expect

    local = harness.Cluster(options.app, options.shm, options.mpirun, options.timeout)
    reference_16 = local.reference(16, APP_ARGS, group_size=4)
    reference_4 = local.reference(4, APP_ARGS)
    with tempfile.TemporaryDirectory() as state:
        env = harness.daemon_env(SKT_TOOLS_CLUSTER_DIR=os.path.join(state, "cluster"),
                                 SLURM_CONF=os.path.join(state, "cluster", "slurm.conf"))
        # n7 serves the last case alone: Slurm gives the others the lowest-numbered idle nodes.
        started = subprocess.run([options.cluster, "start", "7"], env=env, capture_output=True, text=True)
        if started.returncode != 0:
            print(f"FAILED: tools/cluster start 7:\n{started.stdout}\n{started.stderr}", file=sys.stderr)
            return 1
        print("cluster of 7 virtual nodes started", flush=True)

        def kill(node):
            subprocess.run([options.cluster, "kill", node], env=env, check=True, capture_output=True)

        def drain(node):
            subprocess.run(["scontrol", "update", f"NodeName={node}", "State=DRAIN", "Reason=skt-test"],
                           env=env, check=True, capture_output=True)

        def daemon(nodes, job, pauses, on_pause, spares, ranks_per_node=1, group_size=2, extra=(),
                   app_extra=(), on_line=None, nodelist=None):
            # The virtual nodes have 2 CPUs each: 4 ranks on one is more than its slots, which
            # mpirun refuses unless told.
            launcher_args = ["--launcher-args=--oversubscribe"] if ranks_per_node > 2 else []
            which = ["-w", nodelist] if nodelist else []
            command = ["salloc", "-N", str(nodes), *which, "--no-kill", options.run, "--spares", str(spares),
                       "--ranks-per-node", str(ranks_per_node), "--job", job,
                       "--state-dir", os.path.join(state, job), "--shm-tool", options.shm,
                       "--launcher", options.mpirun, *launcher_args, *extra, "--",
                       options.app, *APP_ARGS, *app_extra, *sum((["--pause", p] for p in pauses), [])]
            process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                       text=True, env=dict(env, SKT_GROUP_SIZE=str(group_size)),
                                       start_new_session=True)
            # On timeout, everything salloc started (skt-run and its launcher are process groups of
            # their own in salloc's session), or the output would never end.
            timer = threading.Timer(options.timeout, lambda: subprocess.run(
                ["pkill", "-KILL", "-s", str(process.pid)], capture_output=True))
            timer.start()
            lines, paused = [], 0
            for line in process.stdout:
                lines.append(line)
                if on_line is not None:
                    on_line(line)
                if line.startswith("PAUSED"):
                    on_pause(paused)
                    paused += 1
            process.wait()
            timer.cancel()
            return process.returncode, "".join(lines)

        def state_lost():
            job, nodes = "slurm-e2e-lost", "n[1-4]"
            stop = lambda k: subprocess.run(["pkill", "-TERM", "-x", "skt-run"], capture_output=True)
            code, out = daemon(4, job, ["0:6"], stop, 0, nodelist=nodes)
            expect("launched (SKT_RESTART=0)" in out and "segments of job" not in out
                   and "stopped by signal 15" in out,
                   "a first launch on nodes without segments of the job: SKT_RESTART=0; stopped "
                   "after epoch 2", out)
            shutil.rmtree(os.path.join(state, job))
            code, out = daemon(4, job, ["0:6"], None, 0, app_extra=["--seed", "2"], nodelist=nodes)
            expect(code == 2 and "8 segments of job slurm-e2e-lost exist from an earlier run" in out
                   and "has a checkpoint written by another command" in out
                   and "resume it with the command that wrote it" in out and "RESULT" not in out,
                   f"state lost, another command: refused with exit 2 (got {code})", out)
            shutil.rmtree(os.path.join(state, job))
            code, out = daemon(4, job, ["0:6"], None, 0, nodelist=nodes)
            expect(code == 0 and re.search(r"^RESULT " + reference_4, out, re.M) is not None
                   and "launched (SKT_RESTART=auto)" in out
                   and re.search(r"the program reports restored epoch 2\b", out),
                   f"state lost, the same command: the segments on the nodes counted and epoch 2 "
                   f"restored, right result (got {code})", out)

            # Resubmitted on other nodes: ranks 0-2's segments on n3-n5, rank 3's on n6, which the
            # new allocation n1-n5 leaves out. In the allocation's order every rank would be
            # misplaced (the library refused that, exit 2).
            job = "slurm-e2e-moved"
            code, out = daemon(4, job, ["0:6"], stop, 0, nodelist="n[3-6]")
            shutil.rmtree(os.path.join(state, job))
            code, out = daemon(5, job, ["0:6"], None, 1, nodelist="n[1-5]")
            expect(code == 0 and re.search(r"^RESULT " + reference_4, out, re.M) is not None
                   and "ranks placed on the nodes that hold their segments: n3,n4,n5,n1" in out
                   and "node (the node of rank 3) of the last launch is not in the Slurm allocation: "
                       "its ranks move to n1" in out
                   and re.search(r"the program reports restored epoch 2\b", out),
                   f"state lost, resubmitted on other nodes: each rank placed where its segments "
                   f"are, rank 3's rebuilt by its group, epoch 2 restored, right result (got {code})",
                   out)
            subprocess.run(["salloc", "-w", "n6", "srun", options.shm, "clean", "--job", job],
                           env=env, capture_output=True)

        def requeued_elsewhere():
            """A batch job requeued (scontrol requeue; a preemption or a failed node with --requeue
            does the same) after its second checkpoint comes back under the same job id, so the
            same state, on the nodes Slurm picks, here n2..n6 (n1 excluded): skt-run must resume
            it there, not launch on the nodes it had."""
            output = os.path.join(state, "requeue.out")
            script = os.path.join(state, "requeue.sh")
            with open(script, "w") as f:
                f.write("#!/bin/sh\n" + " ".join(shlex.quote(w) for w in [
                    options.run, "--spares", "1", "--state-dir", os.path.join(state, "requeue"),
                    "--shm-tool", options.shm, "--launcher", options.mpirun, "--",
                    options.app, *APP_ARGS, "--pause", "0:6"]) + "\necho \"skt-run exit $?\"\n")
            os.chmod(script, 0o755)
            submitted = subprocess.run(["sbatch", "--parsable", "-N", "5", "-w", "n[1-5]", "--no-kill",
                                        "--requeue", "--open-mode=append", "-o", output, script],
                                       env=dict(env, SKT_GROUP_SIZE="2"), capture_output=True, text=True,
                                       check=True)
            job = submitted.stdout.strip().split(";")[0]

            def read():
                return open(output).read() if os.path.exists(output) else ""

            def wait(what, done):
                deadline = time.monotonic() + options.timeout
                while not done():
                    if time.monotonic() > deadline:
                        subprocess.run(["scancel", job], env=env, capture_output=True)
                        raise RuntimeError(f"requeued job: timed out waiting for {what}:\n{read()}")
                    time.sleep(0.2)

            def squeue(field):
                return subprocess.run(["squeue", "-h", "-j", job, "-o", field], env=env,
                                      capture_output=True, text=True).stdout.strip()

            wait("its first launch to pause", lambda: "PAUSED" in read())
            scontrol = lambda *words: subprocess.run(["scontrol", *words], env=env, capture_output=True)
            scontrol("requeuehold", job)
            wait("the requeue", lambda: squeue("%T") == "PENDING")
            scontrol("update", f"JobId={job}", "ReqNodeList=", "ExcNodeList=n1")
            scontrol("release", job)
            scontrol("update", f"JobId={job}", "StartTime=now")  # else Slurm delays a requeue
            wait("the requeued job to end", lambda: squeue("%i") == "")
            out = read()
            # The first skt-run and its shell die with the requeue: the exit is the second one's.
            ended = re.findall(r"^skt-run exit (\d+)$", out, re.M)
            return (int(ended[-1]) if ended and "resuming job" in out else -1), out

        def node_drained_while_running():
            code, out = daemon(5, "slurm-e2e-probe", ["0:6"], lambda k: drain("n3"), 1,
                               extra=["--probe-interval", "1"])
            expect(code == 0 and re.search(r"^RESULT " + reference_4, out, re.M) is not None,
                   f"a node drained while its ranks run: exit 0, right result (got {code})", out)
            expect("probe: node n3 dead while the run is up; ending it" in out
                   and "replacing node n3 by spare n5" in out,
                   "the periodic probe saw n3 leave service (Slurm kills nothing on a drained node, "
                   "mpirun notices nothing), ended the run and replaced the node", out)

            # n3's slurmd lives: it comes back, and the next job may use it.
            subprocess.run(["scontrol", "update", "NodeName=n3", "State=RESUME"], env=env,
                           capture_output=True)

        def stuck_in_mpi_finalize():
            # Rank 1's own line saying so may be held in the orted it stops: not looked for.
            code, out = daemon(4, "slurm-e2e-finalize", [], None, 0, extra=["--hang-timeout", "5"],
                               app_extra=["--crash-at", "5", "--crash-rank", "1", "--stop-launcher"])
            expect(code == 8 and re.search(r"^RESULT " + reference_4, out, re.M) is not None,
                   f"ranks stuck in MPI_Finalize after their work: exit 8 after the right result "
                   f"(got {code})", out)
            expect(re.search(r"every rank reached MPI_Finalize \d+\.\d s ago, but rank \d+ has not left it "
                             r"within 5\.0 s \(a frozen MPI daemon or node\?\)", out)
                   and "its exit code is unknown: see its output; not relaunching" in out
                   and "relaunched" not in out,
                   "the daemon names the ranks stuck in MPI_Finalize and does not do the work again", out)

        def suspended_and_resumed():
            allocation = []
            with open(os.path.join(state, "cluster", "slurmctld.pid")) as f:
                controller = int(f.read())

            def thaw_and_resume():
                if allocation:
                    os.kill(controller, signal.SIGCONT)
                    subprocess.run(["scontrol", "resume", allocation[0]], env=env, capture_output=True)
                    allocation.clear()

            # Should skt-run never say that Slurm is silent, the controller thaws all the same.
            thaw_anyway = threading.Timer(60, thaw_and_resume)

            def freeze_then_resume(line):
                # Once skt-run has seen the silence (either way it takes it), the controller is
                # frozen; once skt-run says that Slurm no longer answers, it thaws and resumes the job.
                granted = re.match(r"salloc: Granted job allocation (\d+)", line)
                if granted:
                    allocation.append(granted.group(1))
                if allocation and "is suspended (scontrol suspend" in line:
                    os.kill(controller, signal.SIGSTOP)
                    thaw_anyway.start()
                elif "the run is hung" in line or "Slurm did not say whether job" in line:
                    thaw_and_resume()

            try:
                code, out = daemon(4, "slurm-e2e-suspend", [], None, 0,
                                   extra=["--silence", "3", "--probe-timeout", "2"],
                                   app_extra=["--crash-at", "5", "--crash-rank", "0", "--suspend-job"],
                                   on_line=freeze_then_resume)
            finally:
                thaw_anyway.cancel()
                os.kill(controller, signal.SIGCONT)
            expect(code == 0 and re.search(r"^RESULT " + reference_4, out, re.M) is not None,
                   f"a job suspended in Slurm and resumed: exit 0, right result (got {code})", out)
            expect(re.search(r"has been silent for \d+\.\d s \(stopped, or its node frozen\), but Slurm job "
                             r"\d+ is suspended \(scontrol suspend, or preemption\)", out)
                   and re.search(r"Slurm job \d+ resumed, \d+\.\d s after skt-run found it suspended; "
                                 r"watching its ranks again", out)
                   and "relaunched" not in out,
                   "the daemon waited for the resume, and did not relaunch the suspended job", out)
            expect(re.search(r"Slurm did not say whether job \d+ is still suspended \(squeue did not answer "
                             r"within 2 s, --probe-timeout\); it stays suspended for skt-run", out),
                   "with the controller frozen, squeue's silence was bounded by --probe-timeout and "
                   "not taken for a resume", out)

        def requeued_onto_other_nodes():
            code, out = requeued_elsewhere()
            expect(code == 0 and re.search(r"^RESULT " + reference_4, out, re.M) is not None,
                   f"a job requeued onto other nodes: exit 0, right result (got {code})", out)
            expect("node n1 of the last launch is not in the Slurm allocation: its ranks move to n5" in out
                   and re.search(r"the program reports restored epoch 2\b", out)
                   and "failed to launch" not in out,
                   "the requeued job resumed on its new allocation: n1's rank moved to a new node, the "
                   "others kept theirs and their segments, and the checkpoint was restored", out)

        def two_nodes_killed_two_spares():
            victims = ["n2", "n4"]
            code, out = daemon(6, "slurm-e2e-a", ["0:6", "1:9"], lambda k: kill(victims[k]), 2,
                               ranks_per_node=4, group_size=4)
            expect(code == 0, f"4 ranks per node, two nodes killed, two spares: exit 0 (got {code})", out)
            expect(re.search(r"^RESULT " + reference_16, out, re.M) is not None,
                   "16 ranks: the result is that of a run without failure, bit for bit", out)
            expect("probe slurm" in out and "nodes from the Slurm allocation" in out,
                   "nodes from the allocation, probed through Slurm", out)
            expect("dead: n2" in out and "replacing node n2 by spare n5" in out,
                   "n2 seen DOWN in Slurm and replaced by n5", out)
            expect("dead: n4" in out and "replacing node n4 by spare n6" in out,
                   "n4 seen DOWN and replaced by n6", out)
            with open(os.path.join(state, "slurm-e2e-a", "ranklist")) as f:
                ranklist = f.read().split()[1::2]
            expect(ranklist == ["n1"] * 4 + ["n5"] * 4 + ["n3"] * 4 + ["n6"] * 4,
                   f"final ranklist: the 4 ranks of each dead node moved together: {' '.join(ranklist)}")
            for t in re.findall(r"restored epoch \d+, ([\d.]+) s after the failure", out):
                print(f"     failure seen -> 16 ranks restored: {t} s")
            listed = subprocess.run(["salloc", "-N", "4", "srun", "--ntasks-per-node", "1", options.shm,
                                     "list", "--job", "slurm-e2e-a"], env=env, capture_output=True, text=True)
            expect(listed.returncode == 0 and not re.search(r"^\s*\d+\s+0x", listed.stdout, re.M),
                   "no segments of the job left on any live node", listed.stdout + listed.stderr)

        def out_of_spares():
            # n1, n3, n5 and n6 are left (and n7, kept for the next case), with 2 CPUs each: a node
            # killed with no spare, its rank goes on a live node beside another, and the job goes on.
            code, out = daemon(4, "slurm-e2e-b", ["0:6"], lambda k: kill("n3"), 0, nodelist="n1,n3,n5,n6")
            expect(code == 0 and re.search(r"^RESULT " + reference_4, out, re.M) is not None and
                   re.search(r"no spare left: rank \d goes on node n\d beside ranks of the job", out),
                   f"a node killed with no spare: its rank doubled up on a live node, the result of a "
                   f"run without failure (got {code})", out)
            expect(re.search(r"the memory checked: new segments can still take n\d [\d.]+ GiB", out),
                   "skt-run asked the live nodes their memory (skt-shm room through srun) before doubling up", out)
            # n1, n5 and n6 are left: --stop-at-last-spare ends such a job.
            code, out = daemon(3, "slurm-e2e-c", ["0:6"], lambda k: kill("n5"), 0, nodelist="n1,n5,n6",
                               extra=["--stop-at-last-spare"])
            expect(code == 5, f"--stop-at-last-spare, a node killed with no spare: exit 5 (got {code})", out)
            expect("out of spares: 1 node dead (n5) but 0 live spares left" in out,
                   "the message names the dead node and says no spare is left", out)

        def reshaped_after_a_kill():
            plain = subprocess.run([options.mpirun, "-n", "4", options.heat3d + "-plain", *HEAT3D_ARGS],
                                   env=dict(os.environ, **harness.MPI_ENV), capture_output=True, text=True)
            reference = harness.result_of(plain.stdout)
            drains = os.path.join(state, "heat3d-drains")
            os.makedirs(drains, exist_ok=True)
            common = dict(env, SKT_GROUP_SIZE="2", SKT_DRAIN_DIR=drains, OPENBLAS_NUM_THREADS="1")

            def mpirun(nodes, ranks, program, **variables):
                count = nodes.count(",") + 1
                per_node = str(ranks // count)
                try:
                    return subprocess.run(["salloc", "-w", nodes, "-N", str(count), "--ntasks-per-node", per_node,
                                           options.mpirun, "-n", str(ranks), "--map-by", f"ppr:{per_node}:node",
                                           *program],
                                          env=dict(common, **variables), capture_output=True, text=True,
                                          timeout=options.timeout)
                except subprocess.TimeoutExpired as e:
                    return subprocess.CompletedProcess(e.cmd, -9, e.stdout or "",
                                                       (e.stderr or "") + f"\ntimed out after {e.timeout} s")

            heat3d = [options.heat3d, *HEAT3D_ARGS]
            died = mpirun("n6,n7", 4, heat3d, SKT_JOB="slurm-e2e-heat4", SKT_FAULT="stage:1:7:0")
            expect(died.returncode != 0 and harness.result_of(died.stdout) is None
                   and "SKT_FAULT: killing this process at step 'stage' of epoch 7" in died.stderr,
                   "heat3d on 4 ranks of n6 and n7 dies at its seventh checkpoint", died.stdout + died.stderr)
            dats = write_dats(state, {"grid22": hpl_dat([64, UNEVEN_N], NB, 2, 2),
                                      "grid21": hpl_dat([64, UNEVEN_N], NB, 2, 1)})
            hpl_died = mpirun("n6,n7", 4, [options.hpl, "--checkpoint-every", "4", dats["grid22"]],
                              SKT_JOB="slurm-e2e-hpl22", SKT_RESTART="0", SKT_HPL_CRASH=f"{MID_PANEL}:1")
            expect(hpl_died.returncode != 0 and "PASSED" in hpl_died.stdout,
                   "skt-hpl on a 2x2 grid of n6 and n7 passes its first test and dies in its second",
                   hpl_died.stdout + hpl_died.stderr)
            kill("n7")
            run = mpirun("n1,n6", 2, heat3d, SKT_JOB="slurm-e2e-heat2", HEAT3D_FROM="slurm-e2e-heat4")
            said = "resumed from epoch 6 of job 'slurm-e2e-heat4' (4 ranks, 2 of them in memory) at step 60"
            expect(run.returncode == 0 and reference is not None and harness.result_of(run.stdout) == reference
                   and said in run.stdout + run.stderr,
                   f"n7 killed for real, heat3d on 2 ranks of n1 and n6: '{said}', the uninterrupted run's "
                   f"result ({reference})", run.stdout + run.stderr)
            run = mpirun("n1,n6", 2, [options.hpl, "--from-job", "slurm-e2e-hpl22", dats["grid21"]],
                         SKT_JOB="slurm-e2e-hpl21")
            moved = re.search(r"^SKT: continued on the 2x1 grid from epoch \d+ of job slurm-e2e-hpl22\+t1, which "
                              r"ran on the 2x2 grid \([0-4] of its ranks read from memory, \d from drained files\), "
                              r"at panel \d+ of 16, the matrix redistributed", run.stdout, re.M)
            expect(run.returncode == 0 and moved is not None
                   and len(re.findall(r"\.\.\.\.\.\. PASSED$", run.stdout, re.M)) == 2,
                   f"n7 killed for real, skt-hpl on a 2x1 grid of n1 and n6 with --from-job: "
                   f"'{moved.group(0) if moved else 'continued on the 2x1 grid ...'}', both tests PASSED",
                   run.stdout + run.stderr)
            for job in ("slurm-e2e-heat4", "slurm-e2e-hpl22"):
                subprocess.run(["salloc", "-w", "n6", "srun", options.shm, "clean", "--job", job],
                               env=env, capture_output=True)

        cases = [node_drained_while_running, stuck_in_mpi_finalize, suspended_and_resumed, state_lost,
                 requeued_onto_other_nodes, two_nodes_killed_two_spares, out_of_spares, reshaped_after_a_kill]
        chosen = harness.selected(options, list(zip(CASES, cases)))
        try:
            for case in chosen:
                case()
        finally:
            subprocess.run([options.cluster, "stop"], env=env, capture_output=True)
    return harness.report_failures(checks.failures)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
