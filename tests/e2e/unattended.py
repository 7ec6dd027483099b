#!/usr/bin/env python3
"""skt-run left alone by its operator, on virtual nodes of this host:

- watchdog: a rank stopped (SIGSTOP) is found silent, even when skt-run lost the ranks' hellos
  (stopped with its socket full as they started); a deadlock (every rank beats, none checkpoints)
  is found by the progress bound; the runs are ended and relaunched, and the job finishes right;
- resume: the same command after SIGTERM, SIGINT, or skt-run's own SIGKILL (which takes its run
  with it: no process of the job outlives it) resumes from the checkpoint; a second skt-run on a
  running job is refused and names the first; segments without skt-run's state are resumed;
- launch failures (a program missing on a node, mpirun's refusal) end with exit 7 and the
  launcher's reason, never retried, but a launcher killed, or silent, before any rank started is
  a crash, relaunched, and one failing after every rank exited takes the ranks' exit codes;
  refusals of the program that would repeat end with exit 2 (among them checkpoints the
  machine's memory cannot hold, of a workspace written early, refused before any checkpoint page
  is taken);
  virtual nodes oversubscribe by themselves;
- remote launches: through a stand-in for ssh that starts each node with an empty environment,
  every SKT_* variable still reaches the ranks (a crash on launch 0 is relaunched and restored);
- isolation: skt-inject marks nothing when it matched nothing; a node killed in one job is not
  dead for another job on the same nodes; --revive; a job's tag does not cover another's;
- a stopped launcher (SIGSTOP on mpirun mid-run) is continued after --silence, and the run goes
  on; a launcher that outlives every rank's exit (they report it) is ended after the bound, the
  ranks' exit codes the run's; a rank stopped after its last context ended, before MPI_Finalize,
  ends the run with exit 8 (the work ended), not a wait forever;
- skt-run's state on a full disk: refused before the job (exit 2, nothing launched); while the job
  runs, a warning, and a crash after it is still relaunched and restored;
- ended while finishing: the run ends after every rank finished, in the middle of removing the
  segments (a rank dies on its way out): the relaunch sees a completed job, not lost ranks, and
  runs it again to the same result;
- leftovers: a relaunch with more ranks than the checkpoint is refused and removes what it
  created; a resume with another number of nodes is refused before anything is launched;
- another command: the same --job given to another computation of the same sizes is refused
  before anything is launched (its checkpoint is of the first one), and --dry-run says so;
  --new-command resumes with a change that leaves the computation alone; a job that failed before
  its first checkpoint runs with another command;
- calls out of step: a rank that asks skt_need_checkpoint where the others checkpoint stops every
  rank with the same error naming who called what (exit 2, not retried; MPI had paired the calls'
  messages, or hung), and the corrected program resumes with --new-command from the checkpoint
  before;
- stalled again: a rank that waits in the program's own barrier where the others checkpoint, at
  every launch (a deadlock of the program): each hung run names the call each rank waits in, and
  the relaunch that stalls at the epoch the run before stalled at ends the job with exit 9 (it
  had been relaunched into the same hang until --max-restarts); the corrected program resumes;
- killed while creating: a rank killed while the pages of its new checkpoint segment are mapped
  (seconds for a large segment; where the OOM killer strikes) leaves a segment that skt-shm lists
  as the job's (the header comes first: one without it was listed by no tool and held its memory
  until the machine rebooted); the relaunch takes it as nothing, replaces it, and runs the job to
  the right result, leaving no segment;
- the operator's session ends: skt-run's output pipe loses its reader (ssh dropped, `| tee`
  ended), or, under nohup, skt-run gets the session's SIGHUP: the job goes on and finishes right,
  the output kept in the state directory (skt-run died of SIGPIPE, or stopped the job);
- state lost: skt-run without its state, given another computation under a stopped job's tag, has
  it refused by the program (exit 2, nothing changed; it restored the other's data, a wrong result
  with exit 0), and the command that wrote the checkpoint resumes it;
- a commit skt-run never heard (a job stopped before its first checkpoint, its tag then used by
  hand by another computation that checkpointed): the resume's first launch leaves the program to
  judge, which refuses the other's checkpoint (exit 2, nothing changed; it was restored into the
  first command's computation);
- a verdict after the work: a rank exits with 4 from MPI_Finalize on and mpirun ends the others
  there with that code: the run's exit is 4 (it was taken for unknown, exit 8)."""

import os
import re
import signal
import subprocess
import sys
import tempfile
import time

import harness
from harness import result_of

APP_ARGS = ["--iterations", "12", "--checkpoint-every", "3", "--bytes", "20000", "--verify-recovery"]
NODES = ["n1", "n2", "n3", "n4"]
BEAT_SECONDS = 1  # the library's Monitor::kBeatMilliseconds


def wait_for(path):
    """A line of shell that waits until `path` exists: a launcher held until the test says go."""
    return f'while [ ! -e "{path}" ]; do sleep 0.05; done'


def status_of(d, job):
    with open(os.path.join(d.state_dir(job), "state")) as f:
        return dict(line.split(" ", 1) for line in f.read().splitlines() if " " in line)


def killed_at_pause(cluster, job, args, env):
    """Runs the test program under mpirun by hand, as an operator may between skt-runs, and kills
    its process group (SIGKILL) at its first PAUSED line: the job's segments stay, with what it
    committed. Returns once no process holds them."""
    run = cluster.start(NODES, args, env)[0]
    for line in run.stdout:
        if line.startswith("PAUSED"):
            break
    os.killpg(run.pid, signal.SIGKILL)
    run.wait()
    cluster.wait_detached(job)


def stopped_rank(d, cluster, checks, reference):
    """SIGSTOP on one rank: no crash, no exit, only silence."""
    job = cluster.new_job("wstop")
    stopped = {}

    def on_line(line, _):
        if line.startswith("PAUSED"):
            pids = harness.processes_of(job, rank=2)
            stopped["pid"] = pids[0] if pids else None
            stopped["at"] = time.monotonic()
            if pids:
                os.kill(pids[0], signal.SIGSTOP)
        elif "the run is hung" in line and "seen" not in stopped:
            stopped["seen"] = time.monotonic()

    process = d.start(d.command(job, NODES, 0, APP_ARGS + ["--pause", "0:6"], extra=["--silence", "3"]))
    out = d.drive(process, on_line)
    checks.expect(stopped.get("pid") is not None, "found rank 2's process to stop", out)
    checks.expect(process.returncode == 0 and result_of(out) == reference,
                  "a stopped rank: the job finishes with the right result", out)
    checks.expect("the run is hung: rank 2 has been silent for" in out and "reports restored epoch 2" in out,
                  "the watchdog names the silent rank; the relaunch restores epoch 2", out)
    if "seen" in stopped:
        print(f"     SIGSTOP -> hang seen: {stopped['seen'] - stopped['at']:.2f} s (--silence 3)")
    checks.expect(stopped.get("pid") is None or not harness.running(stopped["pid"]),
                  "the stopped rank is gone (killed with its run)")
    cluster.clean(job)


def words_lost(d, cluster, checks, reference):
    """skt-run stopped (Ctrl-Z) with its socket full while the ranks start (a flood here; a busy
    skt-run of many ranks fills it too): every hello is lost. Once skt-run hears again, a rank
    stopped is still found silent and the run relaunched. skt-run used to ignore the beats of
    contexts whose hello it had not heard, take the job's work for ended when the rank stopped, and
    end the run with exit 8, the job half done."""
    job = cluster.new_job("wdeaf")
    with tempfile.TemporaryDirectory() as tmp:
        go = os.path.join(tmp, "go")
        command = d.wrap_launcher(
            d.command(job, NODES, 0, APP_ARGS + ["--pause", "0:6"], extra=["--silence", "3"]),
            os.path.join(tmp, "mpirun-when-told"), wait_for(go), f'exec "{d.options.mpirun}" "$@"')
        seen = {}

        def ranks_with_segments():
            listed = cluster.shm_tool("list", "--job", job)
            return {line.split()[3] for line in listed.splitlines() if re.match(r"^\s*\d+\s+0x", line)}

        def on_line(line, _):
            if "launched (SKT_RESTART=0)" in line:
                os.kill(process.pid, signal.SIGSTOP)
                seen["full"] = harness.fill_udp_socket(process.pid)
                open(go, "w").close()
                # A rank says hello before it makes a segment.
                deadline = time.monotonic() + 60
                while len(ranks_with_segments()) < len(NODES) and time.monotonic() < deadline:
                    time.sleep(0.05)
                seen["lost"] = harness.udp_socket_of(process.pid)[1] - seen["full"]
                os.kill(process.pid, signal.SIGCONT)
            elif line.startswith("PAUSED") and "stopped" not in seen:
                # Two beats, so that skt-run has heard rank 2 since it listens again: a rank never
                # heard from is found by the startup bound instead, minutes later.
                time.sleep(2 * BEAT_SECONDS)
                pids = harness.processes_of(job, rank=2)
                if pids:
                    seen["stopped"] = pids[0]
                    os.kill(pids[0], signal.SIGSTOP)

        process = d.start(command)
        out = d.drive(process, on_line)
    checks.expect(seen.get("lost", 0) >= len(NODES),
                  f"the ranks' first words were lost ({seen.get('lost')} datagrams dropped)", out)
    checks.expect(process.returncode == 0 and result_of(out) == reference,
                  "their hellos lost, a rank stopped: the job finishes with the right result", out)
    checks.expect("the run is hung: rank 2 has been silent for" in out and "reports restored epoch 2" in out,
                  "the watchdog names the silent rank; the relaunch restores epoch 2", out)
    checks.expect(not harness.processes_of(job), "no process of the job is left (the stopped rank too)")
    cluster.clean(job)


def deadlock(d, cluster, checks, reference):
    """Every rank alive and beating, none checkpointing (the paused program): the progress bound
    from the job's own cadence, at least --progress-floor."""
    job = cluster.new_job("wlock")
    code, out = d.run(d.command(job, NODES, 0, APP_ARGS + ["--pause", "0:6"],
                                extra=["--progress-floor", "2"]))
    checks.expect(code == 0 and result_of(out) == reference,
                  "a run that stops checkpointing: ended, relaunched, right result", out)
    checks.expect(re.search(r"no checkpoint for [\d.]+ s, beyond its bound of 2.0 s \(3 x the [\d.]+ s seen "
                            r"between checkpoints, at least 2 s\)", out) is not None,
                  "the watchdog says the bound and where it comes from", out)
    cluster.clean(job)


def resume_after_signals(d, cluster, checks, reference):
    for sig in (signal.SIGTERM, signal.SIGINT):
        job = cluster.new_job("rsig")
        command = d.command(job, NODES, 0, APP_ARGS + ["--pause", "0:6"])
        second = {}
        process = d.start(command)

        def on_line(line, _):
            if line.startswith("PAUSED"):
                if sig == signal.SIGTERM:
                    # While it runs, the same command is refused, naming who drives the job.
                    done = subprocess.run(command, capture_output=True, text=True,
                                          env=harness.daemon_env(SKT_GROUP_SIZE="2"))
                    second["code"], second["out"] = done.returncode, done.stderr
                os.kill(process.pid, sig)

        out = d.drive(process, on_line)
        name = signal.Signals(sig).name
        if sig == signal.SIGTERM:
            checks.expect(second.get("code") == 2 and f"being run by another skt-run (pid {process.pid}"
                          in second.get("out", ""),
                          "a second skt-run on a running job: refused (exit 2), naming the first's pid",
                          second.get("out"))
        checks.expect(process.returncode == 128 + sig and "the same command resumes it" in out
                      and status_of(d, job)["status"] == "stopped",
                      f"{name}: exit {128 + sig}, state 'stopped', says the same command resumes it", out)
        code, out = d.run(command)
        checks.expect(code == 0 and result_of(out) == reference and "reports restored epoch 2" in out
                      and "resuming job" in out,
                      f"after {name}, the same command resumes from epoch 2 and finishes right", out)
        cluster.clean(job)

    # skt-run itself killed: its run must die with it, and the next skt-run takes the job back.
    job = cluster.new_job("rkill")
    command = d.command(job, NODES, 0, APP_ARGS + ["--pause", "0:6"])
    gone = {}
    process = d.start(command)

    def kill_daemon(line, _):
        if line.startswith("PAUSED"):
            os.kill(process.pid, signal.SIGKILL)
            gone["after"] = harness.wait_gone(job, 10)

    d.drive(process, kill_daemon)
    within = "" if gone.get("after") is None else f" within {gone['after']:.2f} s"
    checks.expect(gone.get("after") is not None,
                  f"skt-run SIGKILLed: its mpirun and every rank died with it{within}",
                  f"left: {harness.processes_of(job)}")
    code, out = d.run(command)
    checks.expect(code == 0 and result_of(out) == reference and "the skt-run of the last one died" in out
                  and "reports restored epoch 2" in out,
                  "after skt-run's death, the same command resumes from epoch 2 and finishes right", out)
    cluster.clean(job)

    # Segments without skt-run's state (lost, or the job first ran under mpirun by hand).
    job = cluster.new_job("rnostate")
    killed_at_pause(cluster, job, APP_ARGS + ["--pause", "0:6"],
                    {"SKT_JOB": job, "SKT_GROUP_SIZE": "2", "SKT_RESTART": "0"})
    # The same command: under SKT_RESTART=auto the program resumes only what it wrote.
    code, out = d.run(d.command(job, NODES, 0, APP_ARGS + ["--pause", "0:6"]))
    checks.expect(code == 0 and result_of(out) == reference and "resuming from them" in out
                  and "reports restored epoch 2" in out,
                  "segments skt-run has no state of: resumed from (epoch 2), right result", out)
    cluster.clean(job)


def launch_failures(d, cluster, checks, reference):
    job = cluster.new_job("lmiss")
    code, out = d.run(d.command(job, ["localhost"], 0, [], extra=["--launch", "hosts", "--probe", "local"],
                                program=["/nonexistent/skt-program"]))
    checks.expect(code == 7 and "it said:" in out and "Executable: /nonexistent/skt-program" in out.split("it said:")[1]
                  and "relaunched" not in out and "a launch failure is not a crash" in out,
                  f"a program missing on a node: exit 7 (got {code}) with mpirun's reason, no relaunch", out)
    checks.expect(status_of(d, job)["launches"] == "0", "a launch that failed is not counted as one")
    job = cluster.new_job("lrefuse")
    code, out = d.run(d.command(job, NODES, 0, APP_ARGS, extra=["--launcher-args=--no-such-option"]))
    checks.expect(code == 7 and "unknown option" in out and "relaunched" not in out,
                  f"mpirun's refusal: exit 7 (got {code}), its reason, no relaunch", out)
    job = cluster.new_job("lconf")
    code, out = d.run(d.command(job, NODES, 0, APP_ARGS), env={"SKT_CHUNK_SIZE": "1000"})
    checks.expect(code == 2 and "multiple of 64" in out and "relaunched" not in out
                  and f"no segment of job {job} is left" in out,
                  f"a configuration the program refuses: exit 2 (got {code}), not retried, and nothing left", out)
    job = cluster.new_job("lhuge")
    code, out = d.run(d.command(job, NODES, 0, APP_ARGS), env={"SKT_HUGE_PAGES": "true"})
    if code == 0:
        print("skip the resource refusal: this machine has huge pages reserved (vm.nr_hugepages)")
    else:
        checks.expect(code == 2 and "vm.nr_hugepages" in out and "relaunched" not in out
                      and f"no segment of job {job} is left" in out,
                      f"huge pages asked for, none reserved: exit 2 (got {code}), the setting named, not "
                      "retried, nothing left", out)
    # Sized for the machine without its checkpoint, as a benchmarker sizes a run: two ranks, each
    # workspace 0.35 of the memory available, written before skt_recover as programs do. Moved
    # into its segment whole, it was twice in memory and the OOM killer ended the job there; then
    # the kernel grants each rank's checkpoint segment alone, and together they would exhaust the
    # machine while their pages are mapped (the OOM killer then took mpirun, leaving the segments
    # holding all the memory). Every rank refuses before any checkpoint page is taken.
    job = cluster.new_job("lmem")
    sized = ["--iterations", "2", "--checkpoint-every", "1", "--regions", "1",
             "--bytes", str(harness.memory_available() * 35 // 100),
             "--scribble", "zero"]
    code, out = d.run(d.command(job, ["m1", "m2"], 0, sized), env={"SKT_MODE": "self"})
    checks.expect(code == 2 and "this machine cannot hold job" in out and "MemAvailable" in out
                  and "relaunched" not in out and f"no segment of job {job} is left" in out,
                  f"checkpoints beyond the machine's memory: exit 2 (got {code}), said, not retried, nothing "
                  "left", out)
    job = cluster.new_job("lover")
    code, out = d.run(d.command(job, NODES, 0, APP_ARGS, extra=["--ranks-per-node", "2"]))
    checks.expect(code == 0 and "--oversubscribe" in out,
                  "8 ranks on virtual nodes of a 2-core host: oversubscribed by skt-run itself", out)
    cluster.clean(job)


FAKE_SSH = """#!/bin/sh
# A stand-in for ssh: runs the command on this host as a login on node $host would, with an empty
# environment but for the node's own name and its own /tmp (and the sanitizers' settings of a
# sanitizer build, which belong to the machine, not to the job: without them the ranks would report
# Open MPI's leaks at exit and fail).
while [ $# -gt 0 ]; do case "$1" in -*) shift ;; *) break ;; esac; done
host=$1; shift
mkdir -p "{root}/$host"
exec env -i HOME="$HOME" PATH=/usr/bin:/bin TMPDIR="{root}/$host" SKT_NODE="$host" \
  ${ASAN_OPTIONS:+ASAN_OPTIONS="$ASAN_OPTIONS"} ${UBSAN_OPTIONS:+UBSAN_OPTIONS="$UBSAN_OPTIONS"} \
  sh -c "$*"
"""


def remote_environment(d, cluster, checks, reference):
    with tempfile.TemporaryDirectory() as root:
        agent = os.path.join(root, "fake-ssh")
        with open(agent, "w") as f:
            f.write(FAKE_SSH.replace("{root}", root))
        os.chmod(agent, 0o755)
        # The fake nodes are this host under other addresses: Open MPI's shared-memory topology
        # and TCP interfaces must not mix them up.
        launcher_args = (f"--mca plm_rsh_agent {agent} --mca rtc ^hwloc --mca btl_tcp_if_include lo "
                         "--mca oob_tcp_if_include lo")
        hosts = ["127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"]
        # First, that the stand-in does what it says: a variable of the caller's does not arrive.
        probe = subprocess.run([d.options.mpirun, *launcher_args.split(), "--host", "127.0.0.2", "-n", "1",
                                "sh", "-c", 'echo "seen: ${SKT_PROBE_VARIABLE:-nothing}"'],
                               capture_output=True, text=True, timeout=60,
                               env=harness.daemon_env(SKT_PROBE_VARIABLE="here"))
        checks.expect("seen: nothing" in probe.stdout,
                      "the stand-in for ssh starts the remote side with an empty environment",
                      probe.stdout + probe.stderr)
        job = cluster.new_job("remote")
        code, out = d.run(d.command(job, hosts, 0, APP_ARGS,
                                    extra=["--launch", "hosts", "--probe", "local", f"--launcher-args={launcher_args}"]),
                          env={"SKT_FAULT": "flush:1:2:0"})
        checks.expect(code == 0 and result_of(out) == reference, f"remote launch: exit 0, right result (got {code})",
                      out)
        checks.expect("relaunched (run 2, SKT_RESTART=1)" in out and "reports restored epoch 2" in out,
                      "SKT_FAULT, SKT_JOB, SKT_RESTART and SKT_MONITOR reached the remote ranks: the crash on "
                      "launch 0 happened, the relaunch restored epoch 2 and said so", out)
        cluster.clean(job)


def isolation(d, cluster, checks, reference):
    done = subprocess.run([d.options.inject, "node", "n2", "--job", "nosuch", "--registry", d.registry("nosuch")],
                          capture_output=True, text=True)
    checks.expect(done.returncode == 1 and "nothing done" in done.stderr
                  and not os.path.exists(os.path.join(d.registry("nosuch"), "n2.dead")),
                  "skt-inject on a job with nothing there: exit 1, marks nothing", done.stdout + done.stderr)

    # Jobs A and B side by side on the same virtual nodes; A loses n2.
    job_a, job_b = cluster.new_job("isoa"), cluster.new_job("isob")
    b = d.start(d.command(job_b, NODES + ["n5"], 1, APP_ARGS + ["--pause", "0:6"]))
    for line in b.stdout:
        if line.startswith("PAUSED"):
            break
    code, out = d.run(d.command(job_a, NODES + ["n5"], 1, APP_ARGS + ["--pause", "0:6"]),
                      on_pause=lambda k: d.kill_node(job_a, "n2"))
    checks.expect(code == 0 and result_of(out) == reference and "replacing node n2 by spare n5" in out,
                  "job A loses n2, replaced by its spare", out)
    # B crashes afterwards (its rank 1, on n2, killed): for B, n2 is alive.
    subprocess.run([d.options.inject, "rank", "1", "--job", job_b], check=True, capture_output=True)
    out = d.drive(b)
    checks.expect(b.returncode == 0 and result_of(out) == reference and "every node is alive" in out
                  and d.ranklist(job_b) == NODES,
                  "job B on the same nodes: n2 is not dead for it; relaunched in place, right result", out)
    done = subprocess.run([d.options.run, "--revive", "n2", "--state-dir", d.state_dir(job_a)],
                          capture_output=True, text=True)
    checks.expect(done.returncode == 0 and "node n2 marked alive" in done.stdout
                  and not os.path.exists(os.path.join(d.registry(job_a), "n2.dead")),
                  "skt-run --revive n2 undoes the mark", done.stdout + done.stderr)
    cluster.clean(job_a)
    cluster.clean(job_b)

    # A job's tag covers its sub-jobs (TAG+name), not another job whose tag starts alike.
    base = cluster.new_job("tag")
    other = base + ".2"
    killed_at_pause(cluster, other, APP_ARGS + ["--pause", "0:6"], {"SKT_JOB": other, "SKT_RESTART": "0"})
    before = cluster.segment_count(other)
    subprocess.run([d.options.shm, "clean", "--job", base], check=True, capture_output=True)
    checks.expect(before > 0 and cluster.segment_count(other) == before,
                  f"skt-shm clean --job {base} leaves job {other} alone")
    cluster.clean(other)


def leftovers(d, cluster, checks, reference):
    # The library: a relaunch with more ranks than the checkpoint is refused by every rank, and the
    # ranks that found nothing remove what they created.
    job = cluster.new_job("more")
    env = {"SKT_JOB": job, "SKT_GROUP_SIZE": "2"}
    killed_at_pause(cluster, job, APP_ARGS + ["--pause", "0:6"], dict(env, SKT_RESTART="0"))
    refused = cluster.launch(NODES + ["n5", "n6"], APP_ARGS, dict(env, SKT_RESTART="1"))
    listing = cluster.shm_tool("list", "--job", job)
    ranks = sorted({int(line.split()[3]) for line in listing.splitlines()[1:] if line.strip()})
    checks.expect(refused.code == 2 and "written by 4 ranks, this run has 6" in refused.err
                  and ranks == [0, 1, 2, 3],
                  f"6 ranks on a 4-rank checkpoint: refused (exit {refused.code}) by all, ranks 4 and 5 leave "
                  f"nothing (segments of ranks {ranks})", refused)
    ok = cluster.launch(NODES, APP_ARGS, dict(env, SKT_RESTART="1"))
    checks.expect(ok.code == 0 and ok.result == reference, "the 4-rank checkpoint is intact: resumed right", ok)
    cluster.clean(job)

    # skt-run: a resume with another number of nodes is refused before anything is launched.
    job = cluster.new_job("renodes")
    process = d.start(d.command(job, NODES, 0, APP_ARGS + ["--pause", "0:6"]))

    def stop(line, _):
        if line.startswith("PAUSED"):
            os.kill(process.pid, signal.SIGTERM)

    d.drive(process, stop)
    code, out = d.run(d.command(job, NODES + ["n5", "n6"], 0, APP_ARGS))
    checks.expect(code == 2 and "ran 4 ranks" in out and "launched" not in out,
                  "a resume with 6 nodes of a 4-rank job: refused before launching", out)
    code, out = d.run(d.command(job, NODES, 0, APP_ARGS + ["--pause", "0:6"]))
    checks.expect(code == 0 and result_of(out) == reference, "the right command then resumes it", out)
    cluster.clean(job)


def another_command(d, cluster, checks, reference):
    """The same --job given to another computation of the same sizes (another seed): resuming the
    first one's checkpoint into it would end with a wrong result and exit 0."""
    job = cluster.new_job("recmd")
    first = d.command(job, NODES, 0, APP_ARGS + ["--pause", "0:6"])
    process = d.start(first)

    def stop(line, _):
        if line.startswith("PAUSED"):
            os.kill(process.pid, signal.SIGTERM)

    d.drive(process, stop)
    other = d.command(job, NODES, 0, APP_ARGS + ["--pause", "0:6", "--seed", "7"])
    dry = subprocess.run(other[:1] + ["--dry-run"] + other[1:], capture_output=True, text=True,
                         env=harness.daemon_env(SKT_GROUP_SIZE="2"))
    checks.expect(dry.returncode == 0 and "would be refused: job " in dry.stdout and "--seed 7" in dry.stdout,
                  "--dry-run of a resume with another command says it would be refused", dry.stdout)
    code, out = d.run(other)
    checks.expect(code == 2 and "--seed 7" in out and "--new-command" in out and "launched" not in out,
                  f"a resume with another command (--seed 7): refused before launching (exit {code}), naming "
                  "both commands", out)
    code, out = d.run(d.command(job, NODES, 0, APP_ARGS, extra=["--new-command"]))
    checks.expect(code == 0 and result_of(out) == reference and "reports restored epoch 2" in out
                  and "(--new-command)" in out,
                  "--new-command resumes with a change that leaves the computation alone (no --pause): "
                  "restored epoch 2, right result", out)
    cluster.clean(job)

    # skt-run killed while its run holds checkpoints (its run dies with it, unrecorded): the next
    # skt-run still knows there is one, from the state written at the first commit.
    job = cluster.new_job("rekill")
    first = d.command(job, NODES, 0, APP_ARGS + ["--pause", "0:6"])
    process = d.start(first)
    recorded = {}

    def kill_daemon(line, _):
        if line.startswith("PAUSED"):
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and not recorded.get("yes"):
                recorded["yes"] = status_of(d, job).get("checkpointed") == "yes"
                time.sleep(0.05)
            os.kill(process.pid, signal.SIGKILL)
            harness.wait_gone(job, 10)

    d.drive(process, kill_daemon)
    checks.expect(recorded.get("yes"), "the state says 'checkpointed yes' while the first run holds checkpoints")
    code, out = d.run(d.command(job, NODES, 0, APP_ARGS + ["--pause", "0:6", "--seed", "7"]))
    checks.expect(code == 2 and "--seed 7" in out and "launched" not in out,
                  f"after skt-run's SIGKILL, a resume with another command: refused (exit {code})", out)
    code, out = d.run(first)
    checks.expect(code == 0 and result_of(out) == reference and "reports restored epoch 2" in out,
                  "and the first command resumes it from epoch 2, right result", out)
    cluster.clean(job)

    # Before any checkpoint there is nothing to restore: a job that failed at once (as one with a
    # mistyped input would) runs with the corrected command.
    job = cluster.new_job("reearly")
    code, out = d.run(d.command(job, NODES, 0, APP_ARGS + ["--crash-at", "1", "--crash-rank", "1"],
                                extra=["--max-restarts", "0"]))
    checks.expect(code == 6, f"a job whose rank crashes before its first checkpoint: exit {code}", out)
    code, out = d.run(d.command(job, NODES, 0, APP_ARGS))
    checks.expect(code == 0 and result_of(out) == reference and "last ran" not in out,
                  "then another command, with no checkpoint to restore: runs, right result", out)
    cluster.clean(job)


def calls_out_of_step(d, cluster, checks, reference):
    """Rank 2 decides by itself whether to checkpoint (it asks skt_need_checkpoint where the others
    call skt_checkpoint), from its second checkpoint on. MPI paired the two calls' messages, or
    hung; now every rank stops with the same error naming who called what (exit 2, not retried),
    the first checkpoint stands, and the corrected program resumes from it."""
    job = cluster.new_job("wsplit")
    code, out = d.run(d.command(job, NODES, 0, APP_ARGS + ["--asking-rank", "2", "--asking-after", "4"]),
                      env={"SKT_MTBF": "1000d"})
    checks.expect(code == 2 and "the ranks made different selfckpt calls at epoch 1: skt_checkpoint on ranks "
                  "0-1 and 3, skt_need_checkpoint on rank 2" in out and "checkpoint 1 stands" in out
                  and out.count("testapp rank") == len(NODES) and "relaunched" not in out
                  and "not relaunching" in out,
                  f"a rank asking where the others checkpoint: every rank says who called what, exit 2 (got "
                  f"{code}), not relaunched", out)
    code, out = d.run(d.command(job, NODES, 0, APP_ARGS, extra=["--new-command"]))
    checks.expect(code == 0 and result_of(out) == reference and "reports restored epoch 1" in out,
                  "the corrected program, resumed with --new-command: restored epoch 1, right result", out)
    checks.expect(cluster.segment_count(job) == 0, "no segment of the job is left")


def stalled_again(d, cluster, checks, reference):
    """Rank 2 waits in an MPI_Barrier of its own where the others checkpoint, from its second
    checkpoint on, at every launch: a deadlock of the program, which a relaunch repeats. skt-run
    ended each run as hung and relaunched it into the same hang until --max-restarts; now the hung
    run says which call each rank waits in, the relaunch that stalls at the epoch the run before
    stalled at ends the job (exit 9, the checkpoint kept), and the corrected program resumes."""
    job = cluster.new_job("wstall")
    code, out = d.run(d.command(job, NODES, 0, APP_ARGS + ["--waiting-rank", "2", "--waiting-after", "4"],
                                extra=["--hang-timeout", "3", "--max-restarts", "5"]))
    checks.expect(out.count("the selfckpt calls the ranks wait in for the others: skt_checkpoint on ranks 0-1 "
                            "and 3, none on rank 2") == 2,
                  "each hung run names the call the ranks wait in, and the rank elsewhere", out)
    checks.expect(code == 9 and out.count("relaunched (run") == 1
                  and "run 2 stalled at epoch 1 as the run before it did" in out
                  and "reports restored epoch 1" in out and "not relaunching" in out,
                  f"the relaunch that stalls at the same epoch ends the job: exit 9 (got {code}) after one "
                  "relaunch, not --max-restarts of them", out)
    state = status_of(d, job)
    checks.expect(state["status"] == "failed" and state.get("stalled-at") == "1",
                  f"the state says the job failed, stalled at epoch 1 (got {state})")
    code, out = d.run(d.command(job, NODES, 0, APP_ARGS, extra=["--new-command"]))
    checks.expect(code == 0 and result_of(out) == reference and "reports restored epoch 1" in out,
                  "the corrected program, resumed with --new-command: restored epoch 1, right result", out)
    checks.expect(cluster.segment_count(job) == 0, "no segment of the job is left")


def killed_while_creating(d, cluster, checks, reference):
    job = cluster.new_job("create")
    env = {"SKT_JOB": job, "SKT_GROUP_SIZE": "2"}
    first = cluster.launch(NODES, APP_ARGS, dict(env, SKT_RESTART="0", SKT_FAULT="create:1:0:0"))
    # Columns: shmid key job rank node kind name bytes att [state].
    listed = [line.split() for line in cluster.shm_tool("list", "--job", job).splitlines()
              if re.match(r"^\s*\d+\s+0x", line)]
    held = {(int(row[3]), row[5]) for row in listed}
    checks.expect(first.code != 0 and first.result is None and (1, "checkpoint") in held,
                  f"rank 1 killed while its checkpoint segment's pages are mapped: the segment is listed "
                  f"as the job's (segments by rank and kind: {sorted(held)})", first)
    again = cluster.launch(NODES, APP_ARGS, dict(env, SKT_RESTART="1"))
    checks.expect(again.code == 0 and again.result == reference
                  and "never written by a launch stopped while it created the segment" in again.err,
                  "the relaunch takes rank 1's segment as nothing, says why, and runs the job right", again)
    checks.expect(cluster.segment_count(job) == 0, "no segment of the job is left")
    cluster.clean(job)


def ended_while_finishing(d, cluster, checks, reference):
    job = cluster.new_job("wfinish")
    # Rank 1 dies once every rank recorded the job as finished, before it removes its segments;
    # mpirun then kills the others wherever they are in theirs. Rank 1's group partner, and both
    # ranks of the other group, may be gone: without the record that looks like two lost members.
    code, out = d.run(d.command(job, NODES, 0, APP_ARGS), env={"SKT_FAULT": "finalize:1:4:0"})
    results = re.findall(r"^RESULT (\w+)", out, re.M)
    checks.expect(code == 0 and results == [reference, reference],
                  "a run ended while its ranks removed their segments: relaunched, exit 0, the right "
                  f"result from both runs (got exit {code}, results {results})", out)
    checks.expect("job '" + job + "' completed after epoch 4 in an earlier run, which was ended while "
                  "removing its segments" in out and "lost" not in out,
                  "the relaunch says the job had completed and starts it afresh; no rank is called lost",
                  out)
    checks.expect(cluster.segment_count(job) == 0, "no segment of the job is left")


def stopped_launcher(d, cluster, checks, reference):
    """A rank stops its launcher (SIGSTOP) mid-run. The ranks go on, beating, to MPI_Finalize,
    which waits for the launcher; their last output waits in it. Every context said bye, so no
    rank is silent: skt-run used to wait forever."""
    job = cluster.new_job("wlstop")
    args = APP_ARGS + ["--crash-at", "5", "--crash-rank", "1", "--stop-launcher"]
    code, out = d.run(d.command(job, NODES, 0, args, extra=["--silence", "3"]))
    checks.expect("rank 1 stops its launcher at iteration 5" in out, "rank 1 stopped its launcher", out)
    checks.expect(code == 0 and result_of(out) == reference,
                  "a stopped launcher: the job finishes with the right result, printed", out)
    checks.expect(re.search(r"the launcher \(pid \d+\) has been stopped for \d+\.\d s; continuing it", out)
                  and "relaunched" not in out and "run 1 succeeded" in out,
                  "skt-run continues the launcher after --silence; the run goes on, not relaunched", out)
    checks.expect(cluster.segment_count(job) == 0, "no segment of the job is left")


def stopped_after_work(d, cluster, checks, reference):
    """A rank stopped (SIGSTOP; a node frozen does the same) after its context ended, before
    MPI_Finalize, the others waiting in it. No context was open, so nothing watched it, and skt-run
    waited forever. Its process beats until MPI_Finalize: silent, the run is ended with exit 8 (the
    work ended; a relaunch would do it again), the right result printed, nothing left."""
    job = cluster.new_job("wastop")
    args = APP_ARGS + ["--crash-rank", "1", "--stop-after-work"]
    code, out = d.run(d.command(job, NODES, 0, args, extra=["--silence", "3"]))
    checks.expect("testapp: rank 1 stops itself after its work" in out, "rank 1 stopped itself", out)
    checks.expect(code == 8 and result_of(out) == reference,
                  f"a rank stopped after its work: exit 8 after the right result (got exit {code})", out)
    checks.expect(re.search(r"rank 1 has been silent for \d+\.\d s since its last selfckpt context ended, "
                            r"before MPI_Finalize \(stopped, or its node frozen\): its exit code is unknown; "
                            r"ending the run", out)
                  and "relaunched (run" not in out and "not relaunching" in out,
                  "skt-run names the silent rank, ends the run and does not do the work again", out)
    checks.expect(not harness.processes_of(job), "no process of the job is left (the stopped rank too)")
    checks.expect(cluster.segment_count(job) == 0, "no segment of the job is left")


def launcher_outliving_ranks(d, cluster, checks, reference):
    """A launcher that does not end once every rank exited (here a wrapper that hangs after mpirun;
    a frozen mpirun does the same): ended after the bound, and the ranks' exit codes, which the
    library reports as each process exits, are the run's; the job is not run again."""
    job = cluster.new_job("wlhang")
    with tempfile.TemporaryDirectory() as tmp:
        command = d.wrap_launcher(
            d.command(job, NODES, 0, APP_ARGS, extra=["--progress-floor", "2"]),
            os.path.join(tmp, "mpirun-then-hang"), f'"{d.options.mpirun}" "$@"',
            'echo "mpirun-then-hang: mpirun exited $?; hanging" >&2', "exec sleep 100000")
        code, out = d.run(command)
    checks.expect("mpirun-then-hang: mpirun exited 0; hanging" in out, "the wrapper hung after mpirun", out)
    checks.expect(code == 0 and result_of(out) == reference and "run 1 succeeded" in out
                  and "relaunched" not in out,
                  "the job ends with exit 0 and the right result after one launch", out)
    checks.expect(re.search(r"every rank exited \d+\.\d s ago, but the launcher did not end within 2\.0 s "
                            r"\(frozen\?\); ending it \(what the ranks printed and it had not passed on is lost\): "
                            r"the run's exit is the ranks', 0", out),
                  "skt-run ends the launcher after --progress-floor and takes the ranks' exit codes", out)
    checks.expect(cluster.segment_count(job) == 0, "no segment of the job is left")


def launcher_ended_from_outside(d, cluster, checks, reference):
    """The launcher ends from outside, not by refusing the launch. Killed (SIGKILL: the OOM killer,
    an operator's kill) or interrupted without a word (Open MPI's mpirun exits 1, silent, on SIGTERM
    before its ranks start) before any rank started: a crash, relaunched; skt-run used to take it
    for a refusal and stop with exit 7, the job left for a human. Failing after every rank exited:
    the ranks' exit codes are the run's; skt-run used to relaunch it and do the work again."""
    with tempfile.TemporaryDirectory() as tmp:
        go = os.path.join(tmp, "go")

        def run(name, wrapper_lines, on_launch, ready=None):
            """`ready`: a file the wrapper makes once it may be signalled (its trap is set)."""
            job = cluster.new_job(name)
            command = d.wrap_launcher(d.command(job, NODES, 0, APP_ARGS), os.path.join(tmp, name),
                                      *wrapper_lines)

            def on_line(line, _):
                if "launched (SKT_RESTART=0)" in line:
                    deadline = time.monotonic() + 10
                    while ready and not os.path.exists(ready) and time.monotonic() < deadline:
                        time.sleep(0.01)
                    on_launch(subprocess.run(["pgrep", "-P", str(process.pid)], capture_output=True,
                                             text=True).stdout.split())
                    open(go, "w").close()

            if os.path.exists(go):
                os.unlink(go)
            process = d.start(command)
            out = d.drive(process, on_line)
            checks.expect(process.returncode == 0 and result_of(out) == reference,
                          f"{name}: the job finishes with the right result (exit {process.returncode})", out)
            checks.expect(cluster.segment_count(job) == 0, f"{name}: no segment of the job is left")
            return out

        wait_for_go = wait_for(go)
        signalled = []

        def send(sig):
            def to(launchers):
                for pid in launchers:
                    os.kill(int(pid), sig)
                    signalled.append(pid)
            return to

        out = run("lkill", [wait_for_go, f'exec "{d.options.mpirun}" "$@"'], send(signal.SIGKILL))
        checks.expect("its launcher was killed by signal 9 (Killed), not by skt-run" in out
                      and "relaunched (run 2, SKT_RESTART=1)" in out and "not a crash" not in out,
                      "a launcher killed before any rank started: a crash, relaunched", out)
        ready = os.path.join(tmp, "lterm-ready")
        out = run("lterm", ["trap 'exit 1' TERM", f': > "{ready}"', wait_for_go,
                            f'exec "{d.options.mpirun}" "$@"'], send(signal.SIGTERM), ready)
        checks.expect("failed before any rank started, the launcher silent (interrupted?) (exit 1)" in out
                      and "relaunched (run 2, SKT_RESTART=1)" in out and "not a crash" not in out,
                      "a launcher ended silently before any rank started: a crash, relaunched", out)
        checks.expect(len(signalled) == 2, f"each launcher was signalled before it started mpirun ({signalled})")
        out = run("lfail", [f'"{d.options.mpirun}" "$@"', 'echo "mpirun-then-fail: mpirun exited $?" >&2',
                            "exit 1"], lambda _: None)
        checks.expect("mpirun-then-fail: mpirun exited 0" in out
                      and "the launcher ended with exit 1, after every rank reported its exit: the run's "
                          "exit is the ranks', 0" in out and "relaunched" not in out,
                      "a launcher failing after every rank exited 0: the job succeeded, not run again", out)


def state_disk_full(d, cluster, checks, reference):
    """The disk that holds skt-run's state fills up: before the job, skt-run refuses it (exit 2, the
    file and the reason named, nothing launched); while it runs, skt-run warns and goes on, and a
    crash after that is relaunched and restored. skt-run used to end with exit 1, its run with it."""
    with harness.SmallDisk(64 * 1024) as disk:
        if disk.why_not:
            print(f"skip skt-run's state on a full disk: {disk.why_not}", flush=True)
            return
        job = cluster.new_job("wfull")
        state = os.path.join(disk.path, job)
        command = d.command(job, NODES, 0, APP_ARGS + ["--pause", "0:7"])
        command[command.index("--state-dir") + 1] = state
        os.makedirs(state)
        disk.fill()
        code, out = d.run(command)
        checks.expect(code == 2 and re.search(r"cannot write \S+/ranklist\.new: No space left on device; "
                                              r"nothing was launched: make that place writable", out),
                      "a full disk before the job: exit 2, the file and the reason named", out)
        checks.expect(not harness.processes_of(job) and cluster.segment_count(job) == 0
                      and sorted(os.listdir(state)) == ["lock"],
                      "nothing launched, no segment, no half-written file left", os.listdir(state))
        os.unlink(os.path.join(disk.path, "filler"))

        def fill_then_crash(_):
            disk.fill()
            pids = harness.processes_of(job, rank=2)
            if pids:
                os.kill(pids[0], signal.SIGKILL)

        code, out = d.run(command, on_pause=fill_then_crash)
        checks.expect(code == 0 and result_of(out) == reference and "reports restored epoch 2" in out,
                      "the disk full while the job runs, then a crash: relaunched, epoch 2 restored, "
                      "the right result, exit 0", out)
        checks.expect(re.search(r"warning: cannot write \S+/state\.new: No space left on device; going on "
                                r"without it", out),
                      "skt-run warns that it cannot record the job's state, and goes on", out)
        checks.expect(cluster.segment_count(job) == 0, "no segment of the job is left")
        cluster.clean(job)


def session_ended(d, cluster, checks, reference):
    """The operator's session ends while the job runs. Its output read by a pipe whose reader goes
    (the ssh connection that started skt-run drops, a `| tee` is ended): skt-run used to die of
    SIGPIPE at its next line, its run with it. Started under nohup, the SIGHUP of the session's end:
    skt-run used to stop the job, having replaced nohup's ignoring of it by its own handler. Both
    jobs must finish on their own, right, the first one's output in its state directory."""
    job = cluster.new_job("wgone")
    process = d.start(d.command(job, NODES, 0, APP_ARGS + ["--pause", "0:6"], extra=["--progress-floor", "2"]))
    before = []
    for line in process.stdout:
        before.append(line)
        if line.startswith("PAUSED"):
            break
    process.stdout.close()
    try:
        process.wait(timeout=d.options.timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    kept_path = os.path.join(d.state_dir(job), "output")
    kept = open(kept_path).read() if os.path.exists(kept_path) else ""
    checks.expect(process.returncode == 0 and result_of(kept) == reference and "reports restored epoch 2" in kept,
                  "its output's reader gone mid-run: skt-run goes on, relaunches the hung run, and the job "
                  "finishes right (exit 0), its output kept in the state directory",
                  f"exit {process.returncode}\n" + "".join(before) + "--- output file:\n" + kept)
    checks.expect(re.search(r"skt-run's standard (output|error) (is closed at the other end|could not be "
                            r"written \(Broken pipe\)): it goes on in this file", kept) is not None,
                  "the kept output says when and why it was diverted", kept)
    checks.expect(not harness.processes_of(job) and cluster.segment_count(job) == 0,
                  "no process or segment of the job is left")
    cluster.clean(job)

    job = cluster.new_job("whup")
    process = d.start(["nohup", *d.command(job, NODES, 0, APP_ARGS + ["--pause", "0:6"],
                                           extra=["--progress-floor", "2"])])

    def hang_up(line, _):
        if line.startswith("PAUSED"):
            os.kill(process.pid, signal.SIGHUP)  # nohup runs skt-run in its own process

    out = d.drive(process, hang_up)
    checks.expect(process.returncode == 0 and result_of(out) == reference and "reports restored epoch 2" in out,
                  "under nohup, the session's SIGHUP is ignored: the job finishes right", out)
    cluster.clean(job)


def state_lost(d, cluster, checks, reference):
    """A job stopped with its checkpoint kept, then skt-run without its state (the directory lost,
    another --state-dir, another user's XDG_STATE_HOME) given another computation under the same
    --job: skt-run resumed segments it had no state of with SKT_RESTART=1, which told the program
    to take them whatever command wrote them, and the other computation restored this one's data: a
    wrong result with exit 0. Now the program judges (SKT_RESTART=auto): it refuses another
    command's checkpoint (exit 2, nothing changed), and the command that wrote it resumes it."""
    job = cluster.new_job("wlost")
    first = d.command(job, NODES, 0, APP_ARGS + ["--pause", "0:6"])

    def stop(line, _):
        if line.startswith("PAUSED"):
            os.kill(process.pid, signal.SIGTERM)

    process = d.start(first)
    d.drive(process, stop)
    before = cluster.digests(job)
    checks.expect(process.returncode == 128 + signal.SIGTERM and before,
                  "the first run is stopped with its checkpoint kept")
    elsewhere = [d.options.run, *first[1:]]
    elsewhere[elsewhere.index("--state-dir") + 1] = d.state_dir(job) + "-elsewhere"
    other = list(elsewhere)
    other[other.index("--pause"):other.index("--pause") + 2] = ["--seed", "2"]
    dry = other[:other.index("--")] + ["--dry-run"] + other[other.index("--"):]
    done = subprocess.run(dry, capture_output=True, text=True, env=harness.daemon_env())
    checks.expect(done.returncode == 0 and "resumes the segments skt-run has no state of, if this "
                  "command wrote them" in done.stdout, "--dry-run says so", done.stdout + done.stderr)
    code, out = d.run(other)
    checks.expect(code == 2 and "written by another command" in out and "--seed 2" in out
                  and cluster.digests(job) == before and "the same command resumes it" not in out
                  and "with --new-command" in out,
                  "without its state, another computation under the job's tag is refused (exit 2), "
                  "changing nothing, and told how to resume", f"exit {code}\n{out}")
    code, out = d.run(elsewhere)
    checks.expect(code == 0 and result_of(out) == reference and "reports restored epoch 2" in out,
                  "the command that wrote the checkpoint resumes it there (epoch 2), right", out)
    cluster.clean(job)


def commit_unheard(d, cluster, checks, reference):
    """What happened to a job's segments while no skt-run watched. Its state says it has no
    checkpoint (stopped before its first one; skt-run killed before a commit's datagram reaches
    it, or a lost datagram, leaves the same), or says it has one (stopped after its second); then
    its segments are removed, as the program says to when another command meets them, and another
    computation (another seed) runs under mpirun by hand, checkpoints, and is killed. The original
    command under skt-run resumed with SKT_RESTART=1, which told the program to take the
    checkpoint whatever command wrote it: the other computation's data, a wrong result with exit
    0. Now a resume leaves the program to judge (SKT_RESTART=auto): another command's checkpoint
    is refused (exit 2, nothing changed); once it is removed, the original command runs right."""
    for pause, says in (("0:2", "no checkpoint"), ("0:6", "a checkpoint")):
        job = cluster.new_job("wunheard")
        first = d.command(job, NODES, 0, APP_ARGS + ["--pause", pause])

        def stop(line, _):
            if line.startswith("PAUSED"):
                os.kill(process.pid, signal.SIGTERM)

        process = d.start(first)
        d.drive(process, stop)
        state = status_of(d, job)
        checks.expect(process.returncode == 128 + signal.SIGTERM and state["status"] == "stopped"
                      and ("checkpointed" in state) == (pause == "0:6"),
                      f"the job is stopped after iteration {pause[2:]}: its state says it has {says}", state)
        cluster.clean(job)
        killed_at_pause(cluster, job, APP_ARGS + ["--seed", "2", "--pause", "0:6"],
                        {"SKT_JOB": job, "SKT_GROUP_SIZE": "2"})
        before = cluster.digests(job)
        dry = first[:first.index("--")] + ["--dry-run"] + first[first.index("--"):]
        done = subprocess.run(dry, capture_output=True, text=True, env=harness.daemon_env())
        checks.expect(done.returncode == 0 and "if this command wrote its checkpoint" in done.stdout,
                      "--dry-run says the resume is the program's to judge", done.stdout + done.stderr)
        code, out = d.run(first)
        checks.expect(code == 2 and "written by another command" in out and "launched (SKT_RESTART=auto)" in out
                      and cluster.digests(job) == before and "with --new-command" in out,
                      f"the state saying {says}, the original command on a checkpoint another computation "
                      "wrote by hand: refused (exit 2), nothing changed, and told how to resume",
                      f"exit {code}\n{out}")
        cluster.clean(job)
        code, out = d.run(d.command(job, NODES, 0, APP_ARGS))
        checks.expect(code == 0 and result_of(out) == reference,
                      "once that checkpoint is removed, the original command runs right", out)
        cluster.clean(job)


def verdict_after_work(d, cluster, checks, reference):
    """The program's own verdict after its work: its replay finds the restored data wrong (ranges
    declared in elements, the check of declared ranges off, a crash after a commit), the ranks exit
    with 4 from MPI_Finalize on, and Open MPI's mpirun, at the first of them, ends the others there
    and exits with that code. skt-run took the run's exit for unknown (exit 8); it is the program's
    verdict, 4."""
    job = cluster.new_job("wverdict")
    code, out = d.run(d.command(job, NODES, 0, APP_ARGS + ["--regions", "3", "--declare", "elements"]),
                      env={"SKT_CHECK_DECLARED": "off", "SKT_FAULT": "committed:2:3"})
    # Whether mpirun ends the other ranks before they report their exit is a race: with every
    # report in, the ranks' codes were the run's already (4); without, skt-run said 8.
    checks.expect(code == 4 and "RECOVERY MISMATCH" in out and "the result failed verification" in out,
                  "a rank's verdict passed on by the launcher is the run's exit (4), not unknown (8)", out)
    cluster.clean(job)


def main(argv):
    options = harness.arguments(argv, tools=("run", "inject"), timeout=180)
    cluster = harness.Cluster(options.app, options.shm, options.mpirun, options.timeout)
    checks = harness.Checks()
    chosen = harness.selected(options, harness.named(
        [stopped_rank, words_lost, deadlock, resume_after_signals, launch_failures, remote_environment,
         isolation, ended_while_finishing, leftovers, another_command, calls_out_of_step, stalled_again,
         killed_while_creating, stopped_launcher, stopped_after_work, launcher_outliving_ranks,
         launcher_ended_from_outside, state_disk_full, session_ended, state_lost, commit_unheard,
         verdict_after_work],
        lambda: (d, cluster, checks, reference)))
    reference = cluster.reference(4, APP_ARGS)
    with tempfile.TemporaryDirectory() as root:
        d = harness.SktRun(options, root)
        for case in chosen:
            case()
        left = os.listdir(harness.transport_directory("skt-run"))
        checks.expect(not left, "every launch's Open MPI shared-memory files were removed, those of the runs "
                      f"skt-run ended with SIGKILL too (left: {' '.join(left) or 'none'})")
    return harness.report_failures(checks.failures)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
