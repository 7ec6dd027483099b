#!/usr/bin/env python3
"""skt-run replacing nodes on virtual nodes of this host: nodes killed (processes and memory)
through skt-inject at points the test program announces (--pause), replaced by spares, and the job
finishes with the result of a run without failure; with no spare left, the ranks of dead nodes go
on the live ones, apart from their groups (three losses on 8 ranks, groups of 4), and a lost node
that answers again comes back among the spares after its quarantine (skt-run --status says so), and
a rank whose segments no live node has the memory for is placed nowhere (exit 5, the checkpoint kept);
out of spares
(--stop-at-last-spare, or every node dead) ends with a clear message and exit code 5; a kill during a checkpoint and during a recovery; the program's exit codes; a first
launch whose segments skt-shm cannot count (left to the program, SKT_RESTART=auto); probes of
the user's, of ping and of a failing Slurm; bad usage said in words; skt-inject's warning when
no skt-run reads the registry it marks; a probe program that hangs is ended at --probe-timeout
(its node dead), and the watchdog keeps watching while it runs.

skt-run runs here as an operator runs it: nothing in its environment makes mpirun oversubscribe
(harness.daemon_env)."""

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile

import harness
from harness import result_of

APP_ARGS = ["--iterations", "12", "--checkpoint-every", "3", "--bytes", "20000", "--verify-recovery"]


def two_losses_two_spares(d, cluster, checks, reference):
    job = cluster.new_job("d2")
    victims = ["n2", "n4"]
    code, out = d.run(d.command(job, ["n1", "n2", "n3", "n4", "n5", "n6"], 2,
                                APP_ARGS + ["--pause", "0:6", "--pause", "1:9"]),
                      on_pause=lambda k: d.kill_node(job, victims[k]))
    checks.expect(code == 0, "two node losses, two spares: exit 0", out)
    checks.expect(result_of(out) == reference, "the result is that of a run without failure", out)
    checks.expect("replacing node n2 by spare n5" in out and "replacing node n4 by spare n6" in out,
                  "n2 replaced by n5, then n4 by n6", out)
    checks.expect("reports restored epoch 2" in out and "reports restored epoch 3" in out,
                  "the daemon logs the epochs the program restored (2, then 3)", out)
    ranklist = d.ranklist(job)
    checks.expect(ranklist == ["n1", "n5", "n3", "n6"],
                  f"final ranklist keeps healthy ranks in place: {' '.join(ranklist)}")
    checks.expect(cluster.segment_count(job) == 0, "no segments left after success")
    times = re.findall(r"restored epoch \d+, ([\d.]+) s after the failure was seen", out)
    print(f"     failure seen -> program restored: {', '.join(times)} s")
    cluster.clean(job)


def warm_spare(d, cluster, checks):
    """Once the run has committed a checkpoint, skt-run reserves on its spare the memory of one
    node's ranks; the rank relaunched there takes it over (the library says so), and the result is
    that of a run without failure. With --cold-spares nothing is reserved."""
    reference = cluster.reference(2, APP_ARGS)
    for cold in (False, True):
        job = cluster.new_job("dw")

        def lose_n2(_):
            if not cold:
                # The reserving runs beside the run, from its first commit on: the node dies once
                # it is done (every rank waits at the pause meanwhile).
                for _ in range(2000):
                    if any(row[4] == "n3" and row[5] == "reserve" for row in cluster.segments(job)):
                        break
            d.kill_node(job, "n2")

        code, out = d.run(d.command(job, ["n1", "n2", "n3"], 1, APP_ARGS + ["--pause", "0:6"],
                                    ["--cold-spares"] if cold else []),
                          env={"SKT_LOG": "info"}, on_pause=lose_n2)
        what = "--cold-spares" if cold else "a warm spare"
        checks.expect(code == 0 and result_of(out) == reference,
                      f"{what}: n2 lost, relaunched on n3, exit 0 with the reference result", out)
        reserved = re.search(r"warm spares: [\d.]+ MiB reserved for 2 segments on each of n3", out)
        taken = "took over memory reserved for it on this node (a warm spare)" in out
        if cold:
            checks.expect(not reserved and not taken, "--cold-spares: nothing reserved, nothing taken", out)
        else:
            checks.expect(reserved is not None, "skt-run reserved n3's memory for both segments", out)
            checks.expect(taken, "the rank relaunched on n3 took over the memory reserved there", out)
        checks.expect(re.search(r"job '[^']+' recovered epoch \d+ in [\d.]+ s \(rank \d the slowest\): "
                                r"rank 1 \(node n3\) rebuilt from its group, [\d.]+ MiB in all"
                                + (r", 1 onto memory reserved ahead" if not cold else r";"), out) is not None,
                      f"{what}: rank 0 says, for the job, which rank was rebuilt where, and how much", out)
        checks.expect(cluster.segment_count(job) == 0, f"{what}: no segment, reserve or other, left")
        cluster.clean(job)


def other_job_with_a_plus_left_alone(d, cluster, checks, reference):
    """A job of its own whose tag begins with JOB+ (SKT_JOB=JOB+b, by hand) is not JOB's: when
    JOB completes under skt-run, which removes the tags its own ranks reported, JOB+b's segments
    stay."""
    job = cluster.new_job("dp")
    other = job + "+b"
    crashed = cluster.launch(["n1", "n2"], APP_ARGS + ["--crash-at", "7", "--crash-rank", "1"],
                             {"SKT_JOB": other, "SKT_GROUP_SIZE": "2", "SKT_RESTART": "0"})
    kept = cluster.segment_count(other)
    checks.expect(crashed.code not in (0, 2, 3) and kept > 0,
                  f"job {other} left its checkpoint ({kept} segments)", crashed)
    code, out = d.run(d.command(job, ["n1", "n2", "n3", "n4"], 0, APP_ARGS))
    checks.expect(code == 0 and result_of(out) == reference, f"job {job} completed under skt-run", out)
    left = [row for row in cluster.segments(job) if row[2] == other]
    checks.expect(len(left) == kept, f"{other}'s {kept} segments are left alone by {job}'s clean-up "
                  f"({len(left)} left)", out)
    cluster.clean(other)


def continue_on_survivors(d, cluster, checks):
    """xor, groups of 4 on 8 ranks and 8 nodes, no spare: three nodes lost one after another, the
    third holding two ranks by then; each time the dead node's ranks go on live nodes that hold no
    other member of their group (by load alone, rank 0 would join rank 4, of its group, on n5), and
    the run ends with the result of a run without failure."""
    reference = cluster.reference(8, APP_ARGS, group_size=4)
    job = cluster.new_job("dc")
    nodes = [f"n{i}" for i in range(1, 9)]
    victims = ["n2", "n3", "n1"]
    code, out = d.run(d.command(job, nodes, 0, APP_ARGS + ["--pause", "0:4", "--pause", "1:7",
                                                           "--pause", "2:10"]),
                      env={"SKT_GROUP_SIZE": "4"}, on_pause=lambda k: d.kill_node(job, victims[k]))
    checks.expect(code == 0 and result_of(out) == reference,
                  "three nodes lost without a spare: exit 0 with the result of a run without failure", out)
    moves = re.findall(r"no spare left: rank (\d+) goes on node (\S+) beside ranks of the job", out)
    checks.expect(moves == [("1", "n1"), ("2", "n4"), ("0", "n6"), ("1", "n5")],
                  f"rank 1 to n1, rank 2 to n4, then ranks 0 and 1 to n6 and n5 ({moves})", out)
    checks.expect("could not be read" not in out, "skt-run read the groups from the checkpoints", out)
    checks.expect(len(re.findall(r"the memory checked: new segments can still take n\d [\d.]+ GiB", out)) == 3,
                  "before each doubling up, skt-run asked the live nodes what their memory could take", out)
    checks.expect(out.count("every group still has its members on distinct nodes") == 3,
                  "after each loss, the log says every group still has its members on distinct nodes", out)
    ranklist = d.ranklist(job)
    checks.expect(len(ranklist) == 8 and len(set(ranklist)) == 5 and not set(victims) & set(ranklist),
                  f"the final ranklist uses the 5 live nodes: {' '.join(ranklist)}")
    checks.expect("is on the same node" not in out, "no rank warns of a group member on its node", out)
    checks.expect(cluster.segment_count(job) == 0, "no segments left after success")
    cluster.clean(job)


def too_little_memory_to_double_up(d, cluster, checks, reference):
    """The nodes keep more free (--keep-free) than they have: n2 lost, its ranks go to the spare n5
    (a spare's memory is reserved ahead); n2 answers again but is not taken back, its memory short
    of one node's segments; n3 lost, no spare left, and its rank is placed nowhere: skt-run ends
    with exit 5 saying what each node could give, the survivors' checkpoints kept. With the memory
    there (no --keep-free) the same job resumes: it probes n3 and n2, the nodes of its layout and
    spares found dead before, n3's rank goes to n2 (which answers) rather than onto n3 (dead
    still), and the run ends with the result of a run without failure."""
    job = cluster.new_job("dm")
    nodes = ["n1", "n2", "n3", "n4", "n5"]

    def on_pause(k):
        if k == 1:
            subprocess.run([d.options.run, "--revive", "n2", "--job", job, "--registry", d.registry(job)],
                           check=True, capture_output=True)
        d.kill_node(job, ["n2", "n3"][k])

    code, out = d.run(d.command(job, nodes, 1, APP_ARGS + ["--pause", "0:4", "--pause", "1:7"],
                                ["--keep-free", "100000000", "--quarantine", "0"]), on_pause=on_pause)
    checks.expect(re.search(r"node n2 answers again but is not taken back: new segments can take 0\.0 MiB "
                            r"there \(skt-shm room, less --keep-free 1e\+08 MiB\), less than the [\d.]+ MiB of "
                            r"one node's segments of the job", out),
                  "n2 back, but its memory short of one node's segments: not taken back, saying so", out)
    offers = re.search(r"no spare left, and no live node has the memory for rank 2's segments "
                       r"\((\d+\.\d) MiB\): what they can still give is n1 0\.0 MiB, n5 0\.0 MiB, "
                       r"n4 0\.0 MiB", out)
    checks.expect(code == 5 and offers is not None and float(offers.group(1)) > 0,
                  f"no node with the room for n3's rank: exit 5, naming the rank's MiB and each node's "
                  f"(got {code})", out)
    kept = cluster.segment_count(job)
    checks.expect(kept > 0 and f"{kept} segments of job {job} are kept" in out,
                  f"the survivors' checkpoints are kept ({kept} segments)", out)
    # Without the pause, which changes nothing of the computation: --new-command.
    code, out = d.run(d.command(job, nodes, 1, APP_ARGS, ["--new-command"]))
    checks.expect(re.search(r"nodes n3,n2 found dead by an earlier launch, probed before resuming: dead "
                            r"still: n3", out) and "replacing node n3 by spare n2" in out,
                  "the resume probes the nodes found dead before: n3, dead still, is replaced by n2", out)
    checks.expect(code == 0 and result_of(out) == reference and "n3" not in d.ranklist(job),
                  "resumed with the memory there, without n3: exit 0 with the result of a run without "
                  f"failure (ranklist {' '.join(d.ranklist(job))})", out)
    cluster.clean(job)


def node_comes_back(d, cluster, checks, reference):
    """No spare: n2 lost, its rank doubled up on n1; n2 then answers again (skt-run --revive) and,
    its quarantine over (--quarantine 0), goes back among the spares at the next failure, where it
    takes n3's rank; skt-run --status says why each node is where it is."""
    job = cluster.new_job("db")

    def on_pause(k):
        if k == 1:
            subprocess.run([d.options.run, "--revive", "n2", "--job", job, "--registry", d.registry(job)],
                           check=True, capture_output=True)
        d.kill_node(job, ["n2", "n3"][k])

    code, out = d.run(d.command(job, ["n1", "n2", "n3", "n4"], 0, APP_ARGS + ["--pause", "0:4", "--pause", "1:7"],
                                ["--quarantine", "0"]), on_pause=on_pause)
    checks.expect(code == 0 and result_of(out) == reference,
                  "n2 lost, back, and used again: exit 0 with the result of a run without failure", out)
    checks.expect("no spare left: rank 1 goes on node n1" in out, "n2's rank doubled up on n1", out)
    checks.expect("node n2 answers again, its quarantine over: back among the spares" in out and
                  "replacing node n3 by spare n2" in out,
                  "n2 came back among the spares, and took n3's rank at the next failure", out)
    checks.expect(d.ranklist(job) == ["n1", "n1", "n2", "n4"], f"final ranklist {' '.join(d.ranklist(job))}")
    status = subprocess.run([d.options.run, "--status", "--job", job, "--state-dir", d.state_dir(job)],
                            capture_output=True, text=True)
    lines = {line.split()[0]: " ".join(line.split()[1:]) for line in status.stdout.splitlines()[1:]}
    checks.expect(status.returncode == 0 and lines.get("n1") == "ranks 0,1" and
                  re.fullmatch(r"rank 2, came back \d+ s ago after 1 loss", lines.get("n2", "")) and
                  re.fullmatch(r"lost \d+ s ago \(1 loss\); its quarantine is over: .*", lines.get("n3", "")),
                  "skt-run --status: n1 holds ranks 0 and 1, n2 rank 2 since it came back, n3 lost",
                  status.stdout + status.stderr)
    cluster.clean(job)


def node_back_while_running(d, cluster, checks, reference):
    """No spare: n2 lost, its rank doubled up on n1; n2 answers again while the relaunch runs and,
    its quarantine over, goes back among the spares at skt-run's next probe (skt-run --status says
    so before any failure), with its warm-spare reserve; the next loss, n3's, takes it. n3 dies once
    skt-run says the reserve is made (the ranks wait at their pause meanwhile): that skt-run makes
    it unprompted while the run is up is what is tested, not how soon."""
    job = cluster.new_job("dw")
    seen = {}
    pauses = []
    reserve_made = re.compile(r"warm spares: [\d.]+ MiB reserved for \d+ segments? on each of n2 ")

    def status():
        done = subprocess.run([d.options.run, "--status", "--job", job, "--state-dir", d.state_dir(job)],
                              capture_output=True, text=True)
        return {line.split()[0]: " ".join(line.split()[1:]) for line in done.stdout.splitlines()[1:]}

    def on_line(line, _):
        if line.startswith("PAUSED"):
            pauses.append(line)
            if len(pauses) == 1:
                d.kill_node(job, "n2")
            elif len(pauses) == 2:
                subprocess.run([d.options.run, "--revive", "n2", "--job", job, "--registry", d.registry(job)],
                               check=True, capture_output=True)
                seen["n2"] = harness.wait_for(lambda: status().get("n2", "").startswith("spare"), 30)
                seen["status"] = status().get("n2", "")
        elif len(pauses) == 2 and reserve_made.search(line):
            d.kill_node(job, "n3")

    process = d.start(d.command(job, ["n1", "n2", "n3", "n4"], 0, APP_ARGS + ["--pause", "0:4", "--pause", "1:7"],
                                ["--quarantine", "0", "--probe-interval", "0.2"]))
    out = d.drive(process, on_line)
    code = process.returncode
    checks.expect(code == 0 and result_of(out) == reference,
                  "n2 lost, back while the run is up, used at the next loss: exit 0 with the result of a "
                  "run without failure", out)
    checks.expect(seen.get("n2") and re.fullmatch(r"spare, came back \d+ s ago after 1 loss", seen["status"]),
                  f"skt-run --status shows n2 a spare again before the next failure ({seen.get('status')!r})", out)
    back = out.find("node n2 answers again, its quarantine over: back among the spares")
    reserved = reserve_made.search(out)
    # n3's loss seen by the periodic probe ("node n3 dead while the run is up") or once the run
    # ended ("dead: n3"), whichever came first.
    lost = re.search(r"node n3 dead|dead: n3\b", out)
    checks.expect(0 <= back and reserved and lost and back < reserved.start() < lost.start(),
                  "n2 taken back, and its memory reserved, while the run was up, before n3's loss", out)
    checks.expect("replacing node n3 by spare n2" in out, "n3's rank went to n2", out)
    cluster.clean(job)


def node_back_with_another_jobs_segments(d, cluster, checks, reference):
    """A node that comes back holding another job's segments is not taken back (their memory is
    what the job's ranks would need), the log says whose and how to remove them; once removed, the
    next failure takes it back."""
    job, other = cluster.new_job("dc"), cluster.new_job("dx")

    def on_pause(k):
        if k == 1:
            subprocess.run([d.options.run, "--revive", "n2", "--job", job, "--registry", d.registry(job)],
                           check=True, capture_output=True)
            cluster.shm_tool("reserve", "--job", other, "--bytes", "1048576", "--node", "n2")
        if k == 2:
            cluster.clean(other)
        d.kill_node(job, ["n2", "n3", "n4"][k])

    code, out = d.run(d.command(job, ["n1", "n2", "n3", "n4"], 0,
                                APP_ARGS + ["--pause", "0:4", "--pause", "1:7", "--pause", "2:10"],
                                ["--quarantine", "0"]), on_pause=on_pause)
    checks.expect(code == 0 and result_of(out) == reference,
                  "n2 lost, back with another job's segments, then without: exit 0 with the result "
                  "of a run without failure", out)
    checks.expect(f"node n2 answers again but is not taken back: it holds segments of another job, "
                  f"{other} (1.0 MiB)" in out and f"skt-shm clean --job {other} --node n2" in out,
                  "n2 back with another job's reserve: not taken back, the job and the command named",
                  out)
    checks.expect("replacing node n4 by spare n2" in out,
                  "once the other job's segments were removed, n2 came back and took n4's ranks", out)
    cluster.clean(other)
    cluster.clean(job)


def out_of_spares(d, cluster, checks):
    """--stop-at-last-spare: a node lost with no spare left ends the job with exit 5, its checkpoint
    kept; without it, a job whose every node died does."""
    job = cluster.new_job("d0")
    victims = ["n2", "n3"]
    code, out = d.run(d.command(job, ["n1", "n2", "n3", "n4", "n5"], 1,
                                APP_ARGS + ["--pause", "0:6", "--pause", "1:9"], ["--stop-at-last-spare"]),
                      on_pause=lambda k: d.kill_node(job, victims[k]))
    checks.expect(code == 5, f"out of spares: exit 5 (got {code})", out)
    checks.expect("out of spares: 1 node dead (n3) but 0 live spares left" in out,
                  "the message says which node is dead and that no spare is left", out)
    kept = cluster.segment_count(job)
    checks.expect(kept > 0 and f"{kept} segments of job {job} are kept: the same command resumes it" in out
                  and f"skt-shm clean --job {job} removes them" in out,
                  f"the survivors' checkpoints are kept, and the message counts them ({kept}) and says "
                  "how to resume or remove them", out)
    unread_registry_warning(d, job, checks)
    cluster.clean(job)
    job = cluster.new_job("d1")
    code, out = d.run(d.command(job, ["n1", "n2"], 0, APP_ARGS + ["--pause", "0:6", "--pause", "1:9"]),
                      on_pause=lambda k: d.kill_node(job, ["n2", "n1"][k]))
    checks.expect(code == 5 and "every node of the job is dead (n1) and no live spare is left" in out,
                  f"every node lost: exit 5, saying so (got {code})", out)
    cluster.clean(job)


def unread_registry_warning(d, job, checks):
    """skt-inject node without --registry marks the node in the default state directory, which an
    skt-run given --state-dir never reads: said, unless an skt-run keeps the job's state there."""
    with tempfile.TemporaryDirectory() as home:
        def inject(node):
            return subprocess.run([d.options.inject, "node", node, "--job", job], capture_output=True,
                                  text=True, env=dict(os.environ, XDG_STATE_HOME=home))
        unread = inject("n1")
        checks.expect(unread.returncode == 0 and
                      f"no skt-run keeps job {job}'s state in {home}/skt-run/{job}" in unread.stderr and
                      "give --registry DIR/registry" in unread.stderr,
                      "skt-inject node without --registry, no skt-run state in the default place: "
                      "the node is marked, and the warning says where an skt-run reads", unread.stderr)
        with open(os.path.join(home, "skt-run", job, "state"), "w") as f:
            f.write(f"job {job}\n")
        read = inject("n4")
        checks.expect(read.returncode == 0 and "no skt-run keeps" not in read.stderr and
                      "marked dead in " + os.path.join(home, "skt-run", job, "registry") in read.stdout,
                      "the same where an skt-run keeps the job's state: no warning", read.stdout + read.stderr)


def kill_during_checkpoint_and_recovery(d, cluster, checks, reference):
    # A rank dies in the middle of the flush of epoch 2 (a crash: the node stays): relaunched on the
    # same nodes. Then node n3 is lost, and on the relaunch the spare's rank dies in the middle of
    # the recovery: relaunched again, and the job finishes.
    job = cluster.new_job("dcr")
    code, out = d.run(d.command(job, ["n1", "n2", "n3", "n4", "n5"], 1, APP_ARGS + ["--pause", "1:7"]),
                      env={"SKT_FAULT": "flush:1:2:0"}, on_pause=lambda k: d.kill_node(job, "n3"))
    checks.expect(code == 0 and result_of(out) == reference,
                  "killed during a checkpoint, then a node lost: the result is right", out)
    checks.expect("every node is alive (a process crash" in out and "replacing node n3 by spare n5" in out,
                  "a crash relaunches on the same nodes; a lost node is replaced", out)
    cluster.clean(job)
    job = cluster.new_job("drc")
    code, out = d.run(d.command(job, ["n1", "n2", "n3", "n4", "n5"], 1, APP_ARGS + ["--pause", "0:7"]),
                      env={"SKT_FAULT": "recover:2:2:1"}, on_pause=lambda k: d.kill_node(job, "n3"))
    checks.expect(code == 0 and result_of(out) == reference,
                  "a node lost, then the spare's rank killed during the recovery: the result is right", out)
    checks.expect(out.count("relaunched (run") == 2, "two relaunches", out)
    cluster.clean(job)


def probes_and_exit_codes(d, cluster, checks, reference):
    # A probe program of the user's: a node is dead when the registry says so.
    job = cluster.new_job("dcmd")
    os.makedirs(d.registry(job))
    probe = harness.write_script(os.path.join(d.state_dir(job), "probe"),
                                 f"test ! -e '{d.registry(job)}'/\"$1\".dead")
    code, out = d.run(d.command(job, ["n1", "n2", "n3", "n4", "n5"], 1, APP_ARGS + ["--pause", "0:6"],
                                extra=["--probe", f"cmd:{probe}"]),
                      on_pause=lambda k: d.kill_node(job, "n4"))
    checks.expect(code == 0 and result_of(out) == reference and "replacing node n4 by spare n5" in out,
                  "--probe cmd:PROGRAM finds the dead node", out)
    cluster.clean(job)
    # One rank killed (skt-inject rank): a crash, relaunched on the same nodes.
    job = cluster.new_job("drank")

    def kill_rank(_):
        subprocess.run([d.options.inject, "rank", "2", "--job", job], check=True, capture_output=True)

    code, out = d.run(d.command(job, ["n1", "n2", "n3", "n4"], 0, APP_ARGS + ["--pause", "0:9"]),
                      on_pause=kill_rank)
    checks.expect(code == 0 and result_of(out) == reference and "every node is alive" in out,
                  "skt-inject rank: relaunched on the same nodes, right result", out)
    cluster.clean(job)
    # The program's exit codes, from a program that does not use selfckpt at all.
    for program, expected, words in [
        (["sh", "-c", "exit 3"], 3, "unrecoverable"),
        (["sh", "-c", "exit 4"], 4, "failed verification"),
        (["sh", "-c", "kill -9 $$"], 6, "--max-restarts 1 reached"),
    ]:
        job = cluster.new_job("dcode")
        code, out = d.run(d.command(job, ["n1", "n2"], 0, [], extra=["--max-restarts", "1"], program=program))
        relaunches = out.count("relaunched (run")
        checks.expect(code == expected and words in out and relaunches == (1 if expected == 6 else 0),
                      f"a program ending with {program[-1]!r}: exit {expected}, '{words}', "
                      f"{relaunches} relaunch(es)", out)
    # skt-shm failing (a broken install): a job without a state cannot know whether its nodes keep
    # segments of an earlier run, so its first launch leaves them to the program.
    job = cluster.new_job("dnoshm")
    command = d.command(job, ["n1", "n2", "n3", "n4"], 0, APP_ARGS)
    command[command.index("--shm-tool") + 1] = "/bin/false"
    code, out = d.run(command)
    checks.expect(code == 0 and result_of(out) == reference and "could not count its segments" in out
                  and "launched (SKT_RESTART=auto)" in out
                  and "the program found no checkpoint and started afresh" in out,
                  f"segments that cannot be counted: the first launch gets SKT_RESTART=auto, finds "
                  f"none and runs to the right result (got {code})", out)
    cluster.clean(job)


def hanging_probe(d, cluster, checks, reference):
    """A probe program that does not answer for a node (ssh to a frozen node, a hung mount):
    skt-run neither waits for it for good nor goes blind while it waits."""
    job = cluster.new_job("dhang")
    os.makedirs(d.state_dir(job))
    hanging = os.path.join(d.state_dir(job), "hanging")
    probe = harness.write_script(os.path.join(d.state_dir(job), "probe"),
                                 f"[ \"$1\" = n2 ] && [ -e '{hanging}' ] && exec sleep 1001.5", "exit 0")
    open(hanging, "w").close()
    code, out = d.run(d.command(job, ["n1", "n2", "n3", "n4", "n5"], 1, APP_ARGS + ["--pause", "0:6"],
                                extra=["--probe", f"cmd:{probe}", "--probe-interval", "1",
                                       "--probe-timeout", "2"]))
    checks.expect(code == 0 and result_of(out) == reference and
                  "n2 (its probe did not answer within 2 s, --probe-timeout)" in out and
                  "replacing node n2 by spare n5" in out,
                  "a node whose probe does not answer within --probe-timeout counts as dead, said so: "
                  "replaced, right result", out)
    left = subprocess.run(["pgrep", "-f", "sleep 1001.5"], capture_output=True, text=True).stdout.split()
    checks.expect(not left, "the probe that did not answer was killed, and what it started", left)
    cluster.clean(job)

    # A probe hanging for a minute while a rank stops: the watchdog still finds the silence, and
    # the probe answers once the hang is seen.
    job = cluster.new_job("dhang2")
    os.makedirs(d.state_dir(job))
    probe = harness.write_script(os.path.join(d.state_dir(job), "probe"),
                                 f"[ \"$1\" = n2 ] && while [ -e '{hanging}' ]; do sleep 0.05; done", "exit 0")
    open(hanging, "w").close()

    def on_line(line, _):
        if line.startswith("PAUSED"):
            for pid in harness.processes_of(job, rank=2)[:1]:
                os.kill(pid, signal.SIGSTOP)
        elif "the run is hung" in line and os.path.exists(hanging):
            os.remove(hanging)

    process = d.start(d.command(job, ["n1", "n2", "n3", "n4"], 0, APP_ARGS + ["--pause", "0:6"],
                                extra=["--probe", f"cmd:{probe}", "--probe-interval", "1",
                                       "--probe-timeout", "60", "--silence", "2"]))
    out = d.drive(process, on_line)
    checks.expect(process.returncode == 0 and result_of(out) == reference and
                  "the run is hung: rank 2 has been silent for" in out,
                  "a stopped rank found by the watchdog while a probe hangs; relaunched, right result",
                  out)
    cluster.clean(job)


def fresh_if_unrecoverable(d, cluster, checks, reference):
    # Rank 1 dies at the second checkpoint; the probe then finds n2 and n4 dead (both members of
    # group 1 with G = 2) and destroys their memory: the relaunch exits 3, and the daemon, asked to,
    # starts the job afresh; that launch dies the same way (same fault on launch 0), is relaunched
    # on the same nodes, and finishes.
    job = cluster.new_job("dfresh")
    os.makedirs(d.registry(job))
    probe = harness.write_script(
        os.path.join(d.state_dir(job), "probe"),
        f"""test -e '{d.registry(job)}'/"$1".dead && exit 1""",
        f"""case "$1" in n2|n4) '{d.options.inject}' node "$1" --job {job} --registry '{d.registry(job)}' >/dev/null; exit 1;; esac""",
        "exit 0")
    code, out = d.run(d.command(job, ["n1", "n2", "n3", "n4", "n5", "n6"], 2, APP_ARGS,
                                extra=["--probe", f"cmd:{probe}", "--fresh-if-unrecoverable"]),
                      env={"SKT_FAULT": "stage:1:2:0"})
    checks.expect(code == 0 and result_of(out) == reference,
                  "--fresh-if-unrecoverable: after exit 3 the job starts afresh and finishes right", out)
    checks.expect("starting afresh" in out and "dead: n2,n4" in out,
                  "the daemon says it starts afresh after both members of a group were lost", out)
    cluster.clean(job)


def storage_beyond_tolerance(d, cluster, checks, reference):
    # As above, both members of group 1 die (n2 and n4), but the job drains every second committed
    # epoch to storage: the relaunch on two spares restores epoch 2 (completed at the latest when
    # epoch 3's checkpoint began, at iteration 9) and finishes, without --fresh-if-unrecoverable
    # and without starting afresh.
    job = cluster.new_job("dstore")
    drains = os.path.join(d.root, job + "-drains")
    victims = ["n2", "n4"]

    def kill_both(_):
        for node in victims:
            d.kill_node(job, node)

    code, out = d.run(d.command(job, ["n1", "n2", "n3", "n4", "n5", "n6"], 2,
                                APP_ARGS + ["--pause", "0:10"]),
                      env={"SKT_DRAIN_DIR": drains, "SKT_DRAIN_EVERY": "2"}, on_pause=kill_both)
    checks.expect(code == 0 and result_of(out) == reference,
                  "one group's two nodes lost with drains: skt-run relaunches, the job finishes right",
                  out)
    checks.expect("reports restored epoch 2 from storage" in out and "starting afresh" not in out,
                  "the daemon logs that epoch 2 came from storage", out)
    checks.expect(not os.path.exists(os.path.join(drains, job)),
                  "the job's drained epochs are removed once it succeeded", out)
    cluster.clean(job)


def state_lost_drains_left(d, cluster, checks, reference):
    # skt-run is stopped at iteration 10 (epoch 2 drained); then the allocation ends: every node's
    # memory and skt-run's state directory are gone, the drains are not. skt-run on other nodes
    # finds them, resumes (SKT_RESTART=1) rather than starting afresh (which the program would
    # refuse over the drains), and the program restores epoch 2 from storage.
    state_lost_drains_left_of(d, cluster, checks, reference, None)
    # The same with a program that derives its context's tag from SKT_JOB, as skt-hpl does
    # (JOB+hpl, JOB+t0): its drains are a sub-job's, which skt-run neither counted (it started
    # afresh, and the program refused the drains with exit 2) nor removed.
    state_lost_drains_left_of(d, cluster, checks, reference, "part")


def state_lost_drains_left_of(d, cluster, checks, reference, sub_job):
    job = cluster.new_job("dlost")
    tag = f"{job}+{sub_job}" if sub_job else job
    program = None
    if sub_job:
        program = ["sh", "-c", f'SKT_JOB="$SKT_JOB+{sub_job}" exec "$0" "$@"', d.options.app]
    env = {"SKT_DRAIN_DIR": os.path.join(d.root, job + "-drains"), "SKT_DRAIN_EVERY": "2"}

    def stop_daemon(pauses):
        if pauses == 0:
            found = subprocess.run(["pgrep", "-f", f"^{d.options.run} .*--job {job} "],
                                   capture_output=True, text=True).stdout.split()
            for pid in found:
                os.kill(int(pid), signal.SIGTERM)

    code, out = d.run(d.command(job, ["n1", "n2", "n3", "n4"], None, APP_ARGS + ["--pause", "0:10"],
                                program=program), env=env, on_pause=stop_daemon)
    what = f"the drains of {tag}" if sub_job else "its state"
    checks.expect(code == 128 + signal.SIGTERM and "stopped by signal" in out and
                  os.path.isdir(os.path.join(env["SKT_DRAIN_DIR"], tag)),
                  f"{what}: skt-run stopped at iteration 10 (exit 143), epochs drained under {tag}",
                  out)
    cluster.clean(job)
    shutil.rmtree(d.state_dir(job))
    # The same command: under SKT_RESTART=auto the program resumes only what it wrote.
    code, out = d.run(d.command(job, ["m1", "m2", "m3", "m4"], None, APP_ARGS + ["--pause", "0:10"],
                                program=program), env=env)
    checks.expect(code == 0 and result_of(out) == reference and
                  "resuming from it" in out and "reports restored epoch 2 from storage" in out,
                  f"{what}: skt-run's state and every node's memory lost, the drains kept: skt-run "
                  "on other nodes resumes from storage (epoch 2), the same result", out)
    checks.expect(not os.listdir(env["SKT_DRAIN_DIR"]),
                  f"{what}: the drains are removed once the job succeeded", out)
    cluster.clean(job)


def node_local_drains_fresh(d, cluster, checks, reference):
    # As in fresh_if_unrecoverable, but the job drains every committed epoch to node-local disks (a
    # directory per node, checksums drained): n2 and n4 are gone with their disks, so no rank holds
    # a file of group 1 and no level can serve (exit 3). skt-run, asked to start afresh, removes the
    # job's drains on every node first: a file left on a surviving node would make that first
    # launch refuse to start (exit 2).
    job = cluster.new_job("dlocal")
    drains = os.path.join(d.root, job + "-{node}")
    os.makedirs(d.registry(job))
    probe = harness.write_script(
        os.path.join(d.state_dir(job), "probe"),
        f"""test -e '{d.registry(job)}'/"$1".dead && exit 1""",
        f"""case "$1" in n2|n4) '{d.options.inject}' node "$1" --job {job} --registry '{d.registry(job)}' >/dev/null""",
        f"""  rm -rf '{drains.replace("{node}", "")}'"$1"; exit 1;; esac""",
        "exit 0")
    code, out = d.run(d.command(job, ["n1", "n2", "n3", "n4", "n5", "n6"], 2, APP_ARGS,
                                extra=["--probe", f"cmd:{probe}", "--fresh-if-unrecoverable"]),
                      env={"SKT_FAULT": "stage:1:2:0", "SKT_DRAIN_DIR": drains,
                           "SKT_DRAIN_WRITE": "copy+checksum", "SKT_DRAIN_EVERY": "1"})
    checks.expect(code == 0 and result_of(out) == reference and "starting afresh" in out and
                  "no rank of group 1 holds a file" in out,
                  "node-local drains, one group's two nodes lost with their disks: neither level "
                  "can serve, skt-run starts afresh and the job finishes right", out)
    checks.expect("removed the job's drained epochs" in out and "SKT_RESTART=0 says" not in out,
                  "the drains were removed on every node before the fresh start, which accepted it",
                  out)
    left = [os.path.join(dirpath, f) for node in ["n1", "n2", "n3", "n4", "n5", "n6"]
            for dirpath, _, files in os.walk(drains.replace("{node}", node)) for f in files]
    checks.expect(not left, "no drained file of the job is left on any node", str(left))
    cluster.clean(job)


def ping_probe(d, cluster, checks):
    # A name that does not resolve does not answer ping; localhost does.
    if shutil.which("ping") is None:
        print("skip the ping probe: ping is not installed (iputils-ping)")
        return
    job = cluster.new_job("dping")
    code, out = d.run(d.command(job, ["localhost", "gone.invalid"], None, [],
                                extra=["--spare-nodes", "127.0.0.1", "--probe", "ping", "--max-restarts", "1"],
                                program=["sh", "-c", 'test "$SKT_RESTART" = 1 || kill -9 $$']))
    checks.expect(code == 0 and "dead: gone.invalid" in out
                  and "replacing node gone.invalid by spare 127.0.0.1" in out,
                  "--probe ping: an unreachable node is replaced", out)


def slurm_commands_failing(d, cluster, checks):
    """--probe slurm where scontrol fails (here a stand-in that exits 1): the failure is said, and
    the job is relaunched on the same nodes rather than taken for 'every node alive' silently."""
    with tempfile.TemporaryDirectory() as bin_dir:
        fake = os.path.join(bin_dir, "scontrol")
        with open(fake, "w") as f:
            f.write("#!/bin/sh\necho 'slurm_load_node error: Unable to contact slurm controller' >&2\nexit 1\n")
        os.chmod(fake, 0o755)
        job = cluster.new_job("dslurm")
        code, out = d.run(d.command(job, ["n1", "n2"], 0, [], extra=["--probe", "slurm", "--max-restarts", "1"],
                                    program=["sh", "-c", 'test "$SKT_RESTART" = 1 || kill -9 $$']),
                          env={"PATH": bin_dir + ":" + os.environ["PATH"]})
        checks.expect(code == 0 and "probe failed: scontrol show node failed (exit 1)" in out
                      and "relaunching on the same nodes" in out,
                      "--probe slurm with scontrol failing: said, and relaunched on the same nodes", out)


def bad_input(d, checks):
    app = d.options.app
    for args, code, words in [
        (["--nodes", "n1,n1", "--", app], 2, "listed twice"),
        (["--nodes", "", "--", app], 2, "no nodes"),
        (["--nodes", "n1,n2", "--spares", "2", "--", app], 2, "at least one must run"),
        (["--nodes", "n1", "--", "/nonexistent/program"], 2, "not found"),
        (["--nodes", "n1", "--launcher", "/nonexistent/mpirun", "--", app], 7, "launcher"),
        (["--nodes", "n1", "--probe", "radar", "--", app], 2, "expected slurm, ping, local"),
        (["--nodes", "n1;reboot", "--", app], 2, "not a node name"),
        (["--nodes", "n1,n 2", "--", app], 2, "separated by commas, without spaces"),
        (["--nodes", "n1", "--ranks-per-node", "0", "--", app], 2, "every node runs at least one rank"),
        (["--nodes", "n1,n2", "--spares", "-1", "--", app], 2, "cannot be negative"),
        (["--nodes", "n1", "--job", "x" * 49, "--", app], 2, "a job tag is 1 to 48"),
        (["--nodes", "n1", "--job", "a+b", "--", app], 2, "a job tag is 1 to 48"),
        (["--nodes", "n1", "--silence", "-3", "--", app], 2, "give a finite number of seconds, 0 or more"),
        (["--nodes", "n1", "--probe-timeout", "0", "--", app], 2, "give a positive number of seconds"),
        (["--nodes", "n1", "--launch", "ssh", "--", app], 2, "expected auto, local or hosts"),
        (["--nodes", "n1"], 2, "no program"),
    ]:
        done = subprocess.run([d.options.run, *args], capture_output=True, text=True, env=harness.daemon_env())
        checks.expect(done.returncode == code and words in done.stderr and "Run with --help" not in done.stderr,
                      f"skt-run {' '.join(a if a else repr(a) for a in args[:-2] or args)}: exit {code}, "
                      f"says '{words}'", done.stdout + done.stderr)
    for tool, args in [(d.options.shm, ["list", "--rank", "x"]), (d.options.shm, ["frobnicate"]),
                       (d.options.inject, ["node"]), (d.options.inject, ["rank", "-1", "--job", "j"])]:
        done = subprocess.run([tool, *args], capture_output=True, text=True)
        checks.expect(done.returncode == 2, f"{os.path.basename(tool)} {' '.join(args)}: usage error, exit 2",
                      done.stdout + done.stderr)
    with tempfile.TemporaryDirectory() as state:
        done = subprocess.run([d.options.run, "--nodes", "n1,n2,n3", "--spares", "1", "--ranks-per-node", "2",
                               "--job", "dry", "--state-dir", state + "/dry", "--dry-run", "--", app,
                               "--iterations", "3"], capture_output=True, text=True)
        checks.expect(done.returncode == 0 and "-n 2 env SKT_NODE=n1" in done.stdout and "SKT_NODE=n3" not in done.stdout
                      and "--oversubscribe" in done.stdout and not os.path.exists(state + "/dry"),
                      "--dry-run prints the launch line (oversubscribed virtual nodes, spares left out) and "
                      "creates nothing", done.stdout + done.stderr)
        # A job with a state resumes: the launch shown is the resume's, on the nodes given now.
        os.makedirs(state + "/dry2")
        saved = ("job dry2\nstatus stopped\nlaunches 1\nranklist n1 n1 n2 n2\nspares n3\ncadence 0.000\n"
                 "note stopped by signal 15\n")
        with open(state + "/dry2/state", "w") as f:
            f.write(saved)
        done = subprocess.run([d.options.run, "--nodes", "n2,n3,n4", "--spares", "1", "--ranks-per-node", "2", "--job",
                               "dry2", "--state-dir", state + "/dry2", "--dry-run", "--", app],
                              capture_output=True, text=True)
        with open(state + "/dry2/state") as f:
            unchanged = f.read() == saved
        checks.expect(done.returncode == 0 and "-n 2 env SKT_NODE=n3" in done.stdout and "SKT_NODE=n1" not in done.stdout
                      and "(resumes after 1 launch, if this command wrote its checkpoint), 4 ranks on n3,n2, spares: n4"
                      in done.stdout
                      and "node n1 of the last launch is not in --nodes: its ranks move to n3" in done.stderr
                      and unchanged,
                      "--dry-run of a stopped job shows its resume: the ranks of n1, no longer given, on n3; "
                      "the state untouched", done.stdout + done.stderr)
        done = subprocess.run([d.options.run, "--nodes", "n2", "--ranks-per-node", "4", "--job", "dry2",
                               "--state-dir", state + "/dry2", "--dry-run", "--", app], capture_output=True, text=True)
        checks.expect(done.returncode == 5 and "cannot resume job dry2 on the nodes of --nodes (n2): 1 node of the "
                      "last launch (n1) is not given now, and 0 other nodes are" in done.stderr,
                      "a resume on too few nodes: exit 5, naming the node no longer given", done.stdout + done.stderr)
        done = subprocess.run([d.options.run, "--hostfile", "/dev/null", "--job", "dry", "--dry-run", "--", app],
                              capture_output=True, text=True)
        checks.expect(done.returncode == 2 and "no node" in done.stderr.lower(),
                      "an empty hostfile is refused", done.stdout + done.stderr)


def main(argv):
    options = harness.arguments(argv, tools=("run", "inject"), timeout=180)
    cluster = harness.Cluster(options.app, options.shm, options.mpirun, options.timeout)
    checks = harness.Checks()
    chosen = harness.selected(options, [("bad-input", lambda: bad_input(d, checks))] + harness.named(
        [slurm_commands_failing, two_losses_two_spares, warm_spare, other_job_with_a_plus_left_alone,
         continue_on_survivors, too_little_memory_to_double_up, node_comes_back, node_back_while_running,
         node_back_with_another_jobs_segments, out_of_spares, kill_during_checkpoint_and_recovery, probes_and_exit_codes, hanging_probe,
         fresh_if_unrecoverable, storage_beyond_tolerance, node_local_drains_fresh, state_lost_drains_left,
         ping_probe],
        lambda: (d, cluster, checks, reference)))
    reference = cluster.reference(4, APP_ARGS)
    with tempfile.TemporaryDirectory() as root:
        d = harness.SktRun(options, root)
        for case in chosen:
            case()
    return harness.report_failures(checks.failures)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
