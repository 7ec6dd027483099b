#!/usr/bin/env python3
"""skt-run on virtual nodes of this host: nodes killed (processes and memory) through skt-inject
at points the test program announces (--pause), replaced by spares, and the job finishes with the
result of a run without failure; out of spares ends with a clear message and exit code 5; a kill
during a checkpoint and during a recovery; SIGTERM is forwarded and keeps the checkpoints."""

import os
import re
import signal
import subprocess
import sys
import tempfile

import harness

APP_ARGS = ["--iterations", "12", "--checkpoint-every", "3", "--bytes", "20000", "--verify-recovery"]


class Daemon:
    def __init__(self, options, inject, run):
        self.options = options
        self.inject = inject
        self.run_tool = run

    def start(self, job, registry, nodes, spares, app_args, env=None, probe="local"):
        command = [self.run_tool, "--nodes", ",".join(nodes), "--spares", str(spares), "--probe", probe,
                   "--registry", registry, "--job", job, "--launcher", self.options.mpirun,
                   "--shm-tool", self.options.shm, "--ranklist-out", os.path.join(registry, "ranklist"),
                   "--", self.options.app, *app_args]
        full_env = dict(os.environ, **harness.MPI_ENV, SKT_GROUP_SIZE="2", **(env or {}))
        return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env=full_env, start_new_session=True)

    def kill_node(self, job, registry, node):
        subprocess.run([self.inject, "node", node, "--job", job, "--registry", registry], check=True,
                       capture_output=True, text=True)

    def drive(self, process, on_pause, timeout):
        """Reads the daemon's output; calls on_pause(n) at the n-th PAUSED line. Returns the output."""
        lines = []
        pauses = 0
        import threading
        timer = threading.Timer(timeout, lambda: os.killpg(process.pid, signal.SIGKILL))
        timer.start()
        try:
            for line in process.stdout:
                lines.append(line)
                if line.startswith("PAUSED"):
                    on_pause(pauses)
                    pauses += 1
            process.wait()
        finally:
            timer.cancel()
        return "".join(lines)


def result_of(output):
    m = re.search(r"^RESULT (\w+)", output, re.M)
    return m.group(1) if m else None


def two_losses_two_spares(d, cluster, checks, reference):
    job = cluster.new_job("d2")
    with tempfile.TemporaryDirectory() as registry:
        nodes = ["n1", "n2", "n3", "n4", "n5", "n6"]
        p = d.start(job, registry, nodes, 2, APP_ARGS + ["--pause", "0:6", "--pause", "1:9"])
        victims = ["n2", "n4"]
        out = d.drive(p, lambda k: d.kill_node(job, registry, victims[k]), d.options.timeout)
        checks.expect(p.returncode == 0, "two node losses, two spares: exit 0", out)
        checks.expect(result_of(out) == reference, "the result is that of a run without failure", out)
        checks.expect("replacing node n2 by spare n5" in out and "replacing node n4 by spare n6" in out,
                      "n2 replaced by n5, then n4 by n6", out)
        checks.expect("reports restored epoch 2" in out and "reports restored epoch 3" in out,
                      "the daemon logs the epochs the program restored (2, then 3)", out)
        with open(os.path.join(registry, "ranklist")) as f:
            ranklist = f.read().split()
        checks.expect(ranklist == ["0", "n1", "1", "n5", "2", "n3", "3", "n6"],
                      f"final ranklist keeps healthy ranks in place: {' '.join(ranklist)}")
        checks.expect(cluster.segment_count(job) == 0, "no segments left after success")
        times = re.findall(r"relaunched \(run \d\) ([\d.]+) s after the failure was seen", out)
        print(f"     failure seen -> relaunched: {', '.join(times)} s")
    cluster.clean(job)


def out_of_spares(d, cluster, checks):
    job = cluster.new_job("d0")
    with tempfile.TemporaryDirectory() as registry:
        p = d.start(job, registry, ["n1", "n2", "n3", "n4", "n5"], 1,
                    APP_ARGS + ["--pause", "0:6", "--pause", "1:9"])
        victims = ["n2", "n3"]
        out = d.drive(p, lambda k: d.kill_node(job, registry, victims[k]), d.options.timeout)
        checks.expect(p.returncode == 5, f"out of spares: exit 5 (got {p.returncode})", out)
        checks.expect("out of spares: 1 node dead (n3) but 0 live spares left" in out,
                      "the message says which node is dead and that no spare is left", out)
        checks.expect(cluster.segment_count(job) > 0, "the survivors' checkpoints are kept")
    cluster.clean(job)


def kill_during_checkpoint_and_recovery(d, cluster, checks, reference):
    # A rank dies in the middle of the flush of epoch 2 (a crash: the node stays): relaunched on the
    # same nodes. Then node n3 is lost, and on the relaunch the spare's rank dies in the middle of
    # the recovery: relaunched again, and the job finishes.
    job = cluster.new_job("dcr")
    with tempfile.TemporaryDirectory() as registry:
        p = d.start(job, registry, ["n1", "n2", "n3", "n4", "n5"], 1,
                    APP_ARGS + ["--pause", "1:7"], env={"SKT_FAULT": "flush:1:2:0"})
        out = d.drive(p, lambda k: d.kill_node(job, registry, "n3"), d.options.timeout)
        checks.expect(p.returncode == 0 and result_of(out) == reference,
                      "killed during a checkpoint, then a node lost: the result is right", out)
        checks.expect("every node is alive (a process crash)" in out and "replacing node n3 by spare n5" in out,
                      "a crash relaunches on the same nodes; a lost node is replaced", out)
    cluster.clean(job)
    job = cluster.new_job("drc")
    with tempfile.TemporaryDirectory() as registry:
        p = d.start(job, registry, ["n1", "n2", "n3", "n4", "n5"], 1,
                    APP_ARGS + ["--pause", "0:7"], env={"SKT_FAULT": "recover:2:2:1"})
        out = d.drive(p, lambda k: d.kill_node(job, registry, "n3"), d.options.timeout)
        checks.expect(p.returncode == 0 and result_of(out) == reference,
                      "a node lost, then the spare's rank killed during the recovery: the result is right", out)
        checks.expect(out.count("relaunched (run") == 2, "two relaunches", out)
    cluster.clean(job)


def sigterm_is_forwarded(d, cluster, checks):
    job = cluster.new_job("dsig")
    with tempfile.TemporaryDirectory() as registry:
        p = d.start(job, registry, ["n1", "n2", "n3"], 1, APP_ARGS + ["--pause", "0:6"])
        out = d.drive(p, lambda k: os.kill(p.pid, signal.SIGTERM), d.options.timeout)
        checks.expect(p.returncode == 128 + signal.SIGTERM, f"SIGTERM: exit 143 (got {p.returncode})", out)
        checks.expect("checkpoints are kept: relaunch with --job" in out, "says how to resume", out)
        checks.expect(cluster.segment_count(job) > 0, "the checkpoints are kept")
    cluster.clean(job)


def probes_and_exit_codes(d, cluster, checks, reference):
    # A probe program of the user's: a node is dead when the registry says so.
    job = cluster.new_job("dcmd")
    with tempfile.TemporaryDirectory() as registry:
        probe = os.path.join(registry, "probe")
        with open(probe, "w") as f:
            f.write(f"#!/bin/sh\ntest ! -e '{registry}'/\"$1\".dead\n")
        os.chmod(probe, 0o755)
        p = d.start(job, registry, ["n1", "n2", "n3", "n4", "n5"], 1, APP_ARGS + ["--pause", "0:6"],
                    probe=f"cmd:{probe}")
        out = d.drive(p, lambda k: d.kill_node(job, registry, "n4"), d.options.timeout)
        checks.expect(p.returncode == 0 and result_of(out) == reference and "replacing node n4 by spare n5" in out,
                      "--probe cmd:PROGRAM finds the dead node", out)
    cluster.clean(job)
    # One rank killed (skt-inject rank): a crash, relaunched on the same nodes.
    job = cluster.new_job("drank")
    with tempfile.TemporaryDirectory() as registry:
        p = d.start(job, registry, ["n1", "n2", "n3", "n4"], 0, APP_ARGS + ["--pause", "0:9"])

        def kill_rank(_):
            subprocess.run([d.inject, "rank", "2", "--job", job], check=True, capture_output=True)

        out = d.drive(p, kill_rank, d.options.timeout)
        checks.expect(p.returncode == 0 and result_of(out) == reference and "every node is alive" in out,
                      "skt-inject rank: relaunched on the same nodes, right result", out)
    cluster.clean(job)
    with tempfile.TemporaryDirectory() as registry:
        for program, code, words in [
            (["sh", "-c", "exit 3"], 3, "unrecoverable"),
            (["sh", "-c", "exit 4"], 4, "failed verification"),
            (["sh", "-c", "kill -9 $$"], 6, "--max-restarts 1 reached"),
        ]:
            done = subprocess.run([d.run_tool, "--nodes", "n1,n2", "--probe", "local", "--registry", registry,
                                   "--max-restarts", "1", "--launcher", d.options.mpirun,
                                   "--ranklist-out", os.path.join(registry, "r"), "--", *program],
                                  capture_output=True, text=True, env=dict(os.environ, **harness.MPI_ENV))
            relaunches = done.stderr.count("relaunched (run")
            checks.expect(done.returncode == code and words in done.stderr and relaunches == (1 if code == 6 else 0),
                          f"a program ending with {program[-1]!r}: exit {code}, '{words}', {relaunches} relaunch(es)",
                          done.stdout + done.stderr)


def fresh_if_unrecoverable(d, cluster, checks, reference):
    # Rank 1 dies at the second checkpoint; the probe then finds n2 and n4 dead (both members of
    # group 1 with G = 2) and destroys their memory: the relaunch exits 3, and the daemon, asked to,
    # starts the job afresh; that launch dies the same way (same fault on launch 0), is relaunched
    # on the same nodes, and finishes.
    job = cluster.new_job("dfresh")
    with tempfile.TemporaryDirectory() as registry:
        probe = os.path.join(registry, "probe")
        with open(probe, "w") as f:
            f.write(f"""#!/bin/sh
test -e '{registry}'/"$1".dead && exit 1
case "$1" in n2|n4) '{d.inject}' node "$1" --job {job} --registry '{registry}' >/dev/null; exit 1;; esac
exit 0
""")
        os.chmod(probe, 0o755)
        command = [d.run_tool, "--nodes", "n1,n2,n3,n4,n5,n6", "--spares", "2", "--probe", f"cmd:{probe}",
                   "--job", job, "--launcher", d.options.mpirun, "--shm-tool", d.options.shm,
                   "--ranklist-out", os.path.join(registry, "ranklist"), "--fresh-if-unrecoverable", "--",
                   d.options.app, *APP_ARGS]
        done = subprocess.run(command, capture_output=True, text=True, timeout=d.options.timeout,
                              env=dict(os.environ, **harness.MPI_ENV, SKT_GROUP_SIZE="2", SKT_FAULT="stage:1:2:0"))
        out = done.stdout + done.stderr
        checks.expect(done.returncode == 0 and result_of(done.stdout) == reference,
                      "--fresh-if-unrecoverable: after exit 3 the job starts afresh and finishes right", out)
        checks.expect("starting afresh" in out and "dead: n2,n4" in out,
                      "the daemon says it starts afresh after both members of a group were lost", out)
    cluster.clean(job)


def ping_probe(d, checks):
    # A name that does not resolve does not answer ping; localhost does.
    import shutil
    if shutil.which("ping") is None:
        print("skip the ping probe: ping is not installed (iputils-ping)")
        return
    with tempfile.TemporaryDirectory() as registry:
        done = subprocess.run([d.run_tool, "--nodes", "localhost,gone.invalid", "--spare-nodes", "127.0.0.1",
                               "--probe", "ping", "--launcher", d.options.mpirun, "--max-restarts", "1",
                               "--ranklist-out", os.path.join(registry, "r"), "--",
                               "sh", "-c", 'test "$SKT_RESTART" = 1 || kill -9 $$'],
                              capture_output=True, text=True, env=dict(os.environ, **harness.MPI_ENV))
        checks.expect(done.returncode == 0 and "dead: gone.invalid" in done.stderr
                      and "replacing node gone.invalid by spare 127.0.0.1" in done.stderr,
                      "--probe ping: an unreachable node is replaced", done.stdout + done.stderr)


def slurm_commands_failing(d, checks):
    """--probe slurm where scontrol fails (here a stand-in that exits 1): the failure is said, and
    the job is relaunched on the same nodes rather than taken for 'every node alive' silently."""
    with tempfile.TemporaryDirectory() as bin_dir:
        fake = os.path.join(bin_dir, "scontrol")
        with open(fake, "w") as f:
            f.write("#!/bin/sh\necho 'slurm_load_node error: Unable to contact slurm controller' >&2\nexit 1\n")
        os.chmod(fake, 0o755)
        done = subprocess.run([d.run_tool, "--nodes", "n1,n2", "--probe", "slurm", "--launcher", d.options.mpirun,
                               "--max-restarts", "1", "--ranklist-out", os.path.join(bin_dir, "r"), "--",
                               "sh", "-c", 'test "$SKT_RESTART" = 1 || kill -9 $$'],
                              capture_output=True, text=True,
                              env=dict(os.environ, **harness.MPI_ENV, PATH=bin_dir + ":" + os.environ["PATH"]))
        checks.expect(done.returncode == 0 and "probe failed: scontrol show node failed (exit 1)" in done.stderr
                      and "relaunching on the same nodes" in done.stderr,
                      "--probe slurm with scontrol failing: said, and relaunched on the same nodes",
                      done.stdout + done.stderr)


def bad_input(d, checks):
    for args, code, words in [
        (["--nodes", "n1,n1", "--", d.options.app], 2, "listed twice"),
        (["--nodes", "", "--", d.options.app], 2, "no nodes"),
        (["--nodes", "n1,n2", "--spares", "2", "--", d.options.app], 2, "at least one must run"),
        (["--nodes", "n1", "--", "/nonexistent/program"], 2, "not found"),
        (["--nodes", "n1", "--launcher", "/nonexistent/mpirun", "--", d.options.app], 7, "launcher"),
        (["--nodes", "n1", "--probe", "radar", "--", d.options.app], 2, "expected slurm, ping, local"),
        (["--nodes", "n1;reboot", "--", d.options.app], 2, "not a node name"),
    ]:
        done = subprocess.run([d.run_tool, *args], capture_output=True, text=True)
        checks.expect(done.returncode == code and words in done.stderr,
                      f"skt-run {' '.join(args[:-2])}: exit {code}, says '{words}'",
                      done.stdout + done.stderr)
    done = subprocess.run([d.run_tool, "--nodes", "n1,n2,n3", "--spares", "1", "--ranks-per-node", "2",
                           "--job", "dry", "--dry-run", "--", d.options.app, "--iterations", "3"],
                          capture_output=True, text=True)
    checks.expect(done.returncode == 0 and "-n 2 env SKT_NODE=n1" in done.stdout and "SKT_NODE=n3" not in done.stdout,
                  "--dry-run prints the launch line, spares left out", done.stdout + done.stderr)


def main(argv):
    options = harness.arguments(argv, tools=("run", "inject"), timeout=180)
    cluster = harness.Cluster(options.app, options.shm, options.mpirun, options.timeout)
    d = Daemon(options, options.inject, options.run)
    checks = harness.Checks()
    reference = cluster.reference(4, APP_ARGS)
    bad_input(d, checks)
    slurm_commands_failing(d, checks)
    two_losses_two_spares(d, cluster, checks, reference)
    out_of_spares(d, cluster, checks)
    kill_during_checkpoint_and_recovery(d, cluster, checks, reference)
    sigterm_is_forwarded(d, cluster, checks)
    probes_and_exit_codes(d, cluster, checks, reference)
    fresh_if_unrecoverable(d, cluster, checks, reference)
    ping_probe(d, checks)
    return harness.report_failures(checks.failures)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
