#!/usr/bin/env python3
"""Segments are only ever used by the run they belong to: another job's segments on the same nodes,
segments left over from an earlier run, and a relaunch that does not match its checkpoint (sizes,
region names, group size, scheme, settings) are all refused without touching anything; a relaunch
while processes of an earlier launch still hold the segments waits, then refuses, naming them; a
launcher killed from outside takes its ranks with it (none writes on into the segments); two
relaunches started at once never both own a segment; a node back with the segments of an earlier
start of the job under its tag is rebuilt, not restored from them; with SKT_RESTART unset, a run
of another command under the tag of a killed run is refused; a relaunch that places the ranks on
the job's nodes in another order (shifted, or two ranks swapped) is refused with exit 2, naming
where each rank's checkpoint lies, with every segment kept, and the relaunch in the right order
restores it, also near its memory limit;
configuration errors stop every rank with exit code 2, and a first launch refused for its settings
leaves no segment behind; a group size above the job's size makes one group, with a warning; a job
that fits the machine only without another job's workspace not yet written is refused; a job
cancelled (SIGTERM through its launcher) in the middle of a checkpoint relaunches from a consistent
state; the members of an ensemble, contexts on parts of one launch under one tag, each keep their
own checkpoint."""

import os
import re
import signal
import sys
import threading
import time

import harness
from loss_patterns import APP_ARGS, crash_mid_run


def another_job_is_left_alone(cluster, checks, reference):
    a = cluster.new_job("iso-a")
    b = cluster.new_job("iso-b")
    nodes = [f"n{r}" for r in range(4)]
    try:
        crash_mid_run(cluster, nodes, {"SKT_JOB": a, "SKT_GROUP_SIZE": "2"}, 1)
        before = cluster.digests(a)
        other = cluster.launch(nodes, APP_ARGS, {"SKT_JOB": b, "SKT_GROUP_SIZE": "2", "SKT_RESTART": "0"})
        checks.expect(other.code == 0 and other.result == reference and other.epoch == 0,
                      "job B on the same nodes starts fresh and finishes", other)
        checks.expect(cluster.digests(a) == before and len(before) == 8,
                      "job A's 8 segments (a workspace and a checkpoint per rank) are untouched by "
                      "job B")
        again = cluster.launch(nodes, APP_ARGS + ["--verify-recovery"],
                               {"SKT_JOB": a, "SKT_GROUP_SIZE": "2", "SKT_RESTART": "1"})
        checks.expect(again.code == 0 and again.result == reference and again.epoch == 2,
                      "job A then recovers epoch 2 and finishes with the same result", again)
    finally:
        cluster.clean(a)
        cluster.clean(b)


def a_node_back_from_an_earlier_start(cluster, checks):
    """A node out of reach while its job was removed and started again under the same tag (a
    network partition, a node drained and returned: its memory kept), back in the job at its rank.
    The segments it kept are of the earlier start, another computation here (another seed), whose
    epoch 2 is not this start's epoch 2: the rank is rebuilt from its group as if lost, with a
    warning, and the job ends with its own result. Before, the rank restored the other start's
    data, a wrong result with exit 0 (the testapp's --verify-recovery catches it here)."""
    job = cluster.new_job("iso-back")
    env = {"SKT_JOB": job, "SKT_GROUP_SIZE": "2"}
    nodes = [f"n{r}" for r in range(4)]
    without_n1 = ["n0", "n4", "n2", "n3"]
    reference = cluster.reference(4, APP_ARGS + ["--seed", "2"])
    try:
        earlier = cluster.launch(nodes, APP_ARGS + ["--seed", "1", "--stop-after", "7"],
                                 dict(env, SKT_RESTART="0"))
        checks.expect(earlier.code == 0, "the earlier start stops after iteration 7, at epoch 2",
                      earlier)
        for node in ("n0", "n2", "n3"):  # the nodes the operator could reach; n1 kept its memory
            cluster.lose_node(job, node)
        again = cluster.launch(without_n1, APP_ARGS + ["--seed", "2", "--stop-after", "7"],
                               dict(env, SKT_RESTART="0"))
        checks.expect(again.code == 0,
                      "the job started again without n1 stops after iteration 7, at epoch 2", again)
        cluster.lose_node(job, "n4")
        back = cluster.launch(nodes, APP_ARGS + ["--seed", "2", "--verify-recovery"],
                              dict(env, SKT_RESTART="1"))
        checks.expect(back.code == 0 and back.result == reference and back.epoch == 2 and
                      "rank 1 on node n1 holds segments" in back.err and "earlier start" in back.err,
                      "n4 lost and n1 back in its place: rank 1 is rebuilt from its group, not taken "
                      "from the earlier start, and the job ends with its own result", back)
    finally:
        cluster.clean(job)


def another_computation_under_the_tag(cluster, checks):
    """SKT_RESTART unset, as where the tag is set once for many runs (the default slurm-<job id>
    under a batch script of several steps, or SKT_JOB exported in a shell): a run of another
    command (another seed here) finds the checkpoint of a run that was killed. Nothing says it is a
    relaunch of that run: it is refused with exit 2, saying how to resume and how to run apart,
    and changes nothing. The same command, or SKT_RESTART=1, resumes. Before, the other command
    restored the killed run's data: a wrong result with exit 0. What a run of another command left
    before its first checkpoint (a crash at once, as a mistyped input gives) holds nothing of it:
    the command run next starts afresh over it (it was refused, as if it held a checkpoint)."""
    job = cluster.new_job("iso-cmd")
    env = {"SKT_JOB": job, "SKT_GROUP_SIZE": "2"}
    nodes = [f"n{r}" for r in range(4)]
    first = APP_ARGS + ["--seed", "1", "--verify-recovery"]
    other = APP_ARGS + ["--seed", "2", "--verify-recovery"]
    reference = cluster.reference(4, APP_ARGS + ["--seed", "1"])
    try:
        early = cluster.launch(nodes, other + ["--crash-at", "1", "--crash-rank", "1"], dict(env, SKT_RESTART="0"))
        checks.expect(early.code not in (0, 2, 3) and cluster.segment_count(job) > 0,
                      "a run of another command crashes before its first checkpoint, its segments left", early)
        after = cluster.launch(nodes, first, dict(env, SKT_FAULT="committed:1:2"))
        checks.expect(after.code not in (0, 2, 3) and "which hold no checkpoint" in after.err,
                      "the command run next under the tag (SKT_RESTART unset) takes them as nothing, says "
                      "so, and checkpoints until a crash after epoch 2", after)
        resumed = cluster.launch(nodes, first, env)
        checks.expect(resumed.code == 0 and resumed.result == reference and resumed.epoch == 2,
                      "its checkpoint is its own: the same command resumes epoch 2, right", resumed)
        cluster.clean(job)
        killed = cluster.launch(nodes, first, dict(env, SKT_RESTART="0", SKT_FAULT="flush:1:2"))
        checks.expect(killed.code not in (0, 2, 3) and not killed.hung,
                      "the first run is killed in the middle of its second checkpoint", killed)
        before = cluster.digests(job)
        refused = cluster.launch(nodes, other, env)
        checks.expect(refused.code == 2 and "written by another command" in refused.err and
                      "SKT_RESTART=1" in refused.err and "seed 2" in refused.err and
                      cluster.digests(job) == before,
                      "another command with SKT_RESTART unset is refused with exit 2, naming it, "
                      "and changes nothing", refused)
        resumed = cluster.launch(nodes, first, env)
        checks.expect(resumed.code == 0 and resumed.result == reference and resumed.epoch >= 1,
                      "the same command with SKT_RESTART unset resumes it, with the result of a "
                      "run without faults", resumed)
    finally:
        cluster.clean(job)


def crashed_after_epoch_2(cluster, job):
    """Runs `job` on n0..n3 in groups of 2 until rank 1 crashes after epoch 2; returns the nodes, the
    job's environment and its segments' digests."""
    nodes = [f"n{r}" for r in range(4)]
    env = {"SKT_JOB": job, "SKT_GROUP_SIZE": "2"}
    crash_mid_run(cluster, nodes, env, 1)
    return nodes, env, cluster.digests(job)


def ranks_placed_on_other_nodes(cluster, checks, reference):
    """The relaunch maps the ranks to the nodes differently: the job requeued on a shifted list of
    nodes, or another host order. A rank restores only from its own node. With every rank on a node
    that holds another's checkpoint, it is refused (exit 2) and changes nothing; before, it started
    afresh with exit 0, the checkpoint lost without a word and left holding the nodes' memory. Two
    ranks swapped are refused too, with every segment kept: they were rebuilt from their groups and
    the segments under the other rank removed, which in groups of 3 or more lost the checkpoint for
    good (exit 3, and again in the right order). The relaunch in the right order restores it."""
    job = cluster.new_job("iso-moved")
    try:
        _, env, before = crashed_after_epoch_2(cluster, job)
        shifted = cluster.launch(["n1", "n2", "n3", "n4"], APP_ARGS, dict(env, SKT_RESTART="1"))
        checks.expect(shifted.code == 2 and "rank 1's is on node n1, where this launch runs rank 0"
                      in shifted.err and "skt-shm clean" in shifted.err and
                      cluster.digests(job) == before and cluster.segment_count(job) == 8,
                      "every rank on the node of another's checkpoint: refused with exit 2, naming "
                      "where each checkpoint lies, and nothing changes", shifted)
        swapped = cluster.launch(["n1", "n0", "n2", "n3"], APP_ARGS, dict(env, SKT_RESTART="1"))
        checks.expect(swapped.code == 2 and "rank 0's is on node n0, where this launch runs rank 1"
                      in swapped.err and "rank 1's is on node n1, where this launch runs rank 0" in
                      swapped.err and "Nothing was changed or removed" in swapped.err and
                      cluster.digests(job) == before and cluster.segment_count(job) == 8,
                      "ranks 0 and 1 swapped: refused with exit 2, naming where each checkpoint "
                      "lies, and nothing changes", swapped)
        right = cluster.launch(["n0", "n1", "n2", "n3"], APP_ARGS + ["--verify-recovery"],
                               dict(env, SKT_RESTART="1"))
        checks.expect(right.code == 0 and right.result == reference and right.epoch == 2 and
                      cluster.segment_count(job) == 0,
                      "relaunched in the right order: epoch 2 restored, the reference result, no "
                      "segment left", right)
    finally:
        cluster.clean(job)


def swapped_in_a_group_of_four(cluster, checks):
    """Two ranks of one group of 4 swapped: more than the group could rebuild. They were rebuilt
    from the others, which failed, and the segments under the other rank were removed first: the
    checkpoint was lost (exit 3, and exit 3 again in the right order). Refused now, nothing lost."""
    job = cluster.new_job("iso-g4")
    env = {"SKT_JOB": job, "SKT_GROUP_SIZE": "4"}
    try:
        nodes = [f"n{r}" for r in range(4)]
        crash_mid_run(cluster, nodes, env, 1)
        before = cluster.digests(job)
        swapped = cluster.launch(["n1", "n0", "n2", "n3"], APP_ARGS, dict(env, SKT_RESTART="1"))
        checks.expect(swapped.code == 2 and "where this launch runs" in swapped.err and
                      cluster.digests(job) == before,
                      "two ranks of a group of 4 swapped: refused with exit 2, nothing changed", swapped)
        right = cluster.launch(nodes, APP_ARGS + ["--verify-recovery"], dict(env, SKT_RESTART="1"))
        checks.expect(right.code == 0 and right.epoch == 2, "and the right order restores epoch 2", right)
    finally:
        cluster.clean(job)


def an_ensemble_under_one_tag(cluster, checks):
    """An ensemble: one launch split into two computations (the testapp's --members 2: world ranks
    0 and 2, and 1 and 3), each with a context on its part of MPI_COMM_WORLD, both under the
    SKT_JOB the job's environment gives every rank. The ranks count from 0 in each context. Under
    one tag the two ranks 0 on one node took the same segment: the second member waited
    SKT_ATTACH_WAIT, then was refused with exit 2, blaming an earlier launch. A relaunch that placed
    each member's ranks on the other's nodes restored the other's checkpoint: both wrong, caught
    here by --verify-recovery, and with exit 0 by a program that does not replay. The context led
    by world rank 1 now has the sub-job tag JOB+w1."""
    args = APP_ARGS + ["--members", "2", "--verify-recovery"]
    reference = cluster.reference(4, args)
    job = cluster.new_job("iso-ens")
    env = {"SKT_JOB": job, "SKT_GROUP_SIZE": "2"}
    try:
        paired = cluster.launch(["n0", "n0", "n1", "n1"], args, dict(env, SKT_RESTART="0"))
        checks.expect(paired.code == 0 and paired.result == reference and
                      cluster.segment_count(job) == 0,
                      "two members with their ranks 0 on one node run at once, each its own "
                      "computation, and leave no segment", paired)
        # World rank 1 (member 1) is killed once every rank waits at its pause, past its epoch 2:
        # killed at any moment, it could take member 0 down before member 0's first checkpoint
        # (the members run apart), which would then rightly start afresh.
        process, _ = cluster.start(["n0", "n1", "n2", "n3"], args + ["--pause", "0:7"],
                                   dict(env, SKT_RESTART="0"))
        timer = threading.Timer(cluster.timeout, lambda: os.killpg(process.pid, signal.SIGKILL))
        timer.start()
        try:
            paused = process.stdout.readline()
            if paused.startswith("PAUSED"):
                for pid in harness.processes_of(job, rank=1):
                    os.kill(pid, signal.SIGKILL)
            out, err = process.communicate()
        finally:
            timer.cancel()
        first = harness.Run(process.returncode, paused + out, err)
        cluster.wait_detached(job)
        tags = sorted({row[2] for row in cluster.segments(job)})
        checks.expect(paused.startswith("PAUSED") and first.code not in (0, 2, 3) and
                      tags == [job, job + "+w1"],
                      f"world rank 1 killed after epoch 2, the members' checkpoints under {job} and "
                      f"{job}+w1", first)
        in_place = cluster.launch(["n0", "n1", "n2", "n3"], args, dict(env, SKT_RESTART="1"))
        checks.expect(in_place.code == 0 and in_place.result == reference and
                      "recovered epoch 2 at iteration 6 (member 1)" in in_place.out and
                      re.search(r"^recovered epoch \d+ at iteration \d+ \(member 0\)", in_place.out,
                                re.M) and cluster.segment_count(job) == 0,
                      "relaunched in place, each member restores its own checkpoint (member 1 its "
                      "epoch 2)", in_place)
        crash_args = args + ["--crash-at", "7", "--crash-rank", "1"]
        cluster.launch(["n0", "n1", "n2", "n3"], crash_args, dict(env, SKT_RESTART="0"))
        swapped = cluster.launch(["n1", "n0", "n3", "n2"], args, dict(env, SKT_RESTART="1"))
        checks.expect(swapped.code == 0 and swapped.result == reference,
                      "relaunched with each member's ranks on the other's nodes: neither restores "
                      "the other's checkpoint, and the result is the reference", swapped)
    finally:
        cluster.clean(job)


def ranks_swapped_within_a_memory_limit(cluster, checks):
    """The swap above for a job that takes most of its memory limit (a memory cgroup, as Slurm's --mem
    sets): refused for the placement (not for memory), nothing made or removed, and the relaunch
    in the right order restores within the limit."""
    job = cluster.new_job("iso-tight")
    args = ["--iterations", "5", "--checkpoint-every", "1", "--regions", "1", "--bytes", str(128 << 20)]
    env = {"SKT_JOB": job, "SKT_GROUP_SIZE": "2"}
    cgroup = harness.MemoryCgroup(1 << 40)
    if cgroup.why_not:
        print(f"skip a relaunch of swapped ranks within a memory limit: {cgroup.why_not}", flush=True)
        return
    reference = cluster.reference(4, args)
    try:
        with cgroup:
            first = cluster.launch([f"n{r}" for r in range(4)],
                                   args + ["--crash-at", "3", "--crash-rank", "1"], dict(env, SKT_RESTART="0"))
            checks.expect(first.code not in (0, 2, 3) and not first.hung,
                          "a job of 4 ranks of 128 MiB crashes after epoch 2", first)
            # Room for one rank's segments beside the job's: not for the two rebuilt beside the
            # two left under the other ranks, which hold the memory of two ranks.
            rank_bytes = sum(int(row[7]) for row in cluster.segments(job) if row[3] == "0")
            cgroup.limit_to(cgroup.usage() + rank_bytes)
            before = cluster.digests(job)
            swapped = cluster.launch(["n1", "n0", "n2", "n3"], args, dict(env, SKT_RESTART="1"))
            kept = cluster.digests(job) == before
            right = cluster.launch([f"n{r}" for r in range(4)], args, dict(env, SKT_RESTART="1"))
        checks.expect(swapped.code == 2 and "where this launch runs" in swapped.err and kept,
                      f"ranks 0 and 1 swapped, in a cgroup with room for one rank's {rank_bytes >> 20} "
                      "MiB of segments more: refused for the placement, nothing changed", swapped)
        checks.expect(right.code == 0 and right.result == reference and right.epoch == 2 and
                      cluster.segment_count(job) == 0,
                      "relaunched in the right order within the limit: epoch 2 and the reference "
                      "result", right)
    finally:
        cluster.clean(job)


def refused_relaunches_change_nothing(cluster, checks, reference):
    job = cluster.new_job("iso-c")
    try:
        nodes, env, before = crashed_after_epoch_2(cluster, job)
        stale = cluster.launch(nodes, APP_ARGS, dict(env, SKT_RESTART="0"))
        checks.expect(stale.code == 2 and "earlier run" in stale.err and
                      f"skt-shm clean --job {job}" in stale.err,
                      "a first launch (SKT_RESTART=0) finding old segments stops with code 2", stale)
        resized = cluster.launch(nodes, ["--iterations", "12", "--checkpoint-every", "3", "--bytes",
                                         "30001"], dict(env, SKT_RESTART="1"))
        checks.expect(resized.code == 2 and "same regions, with the same names and sizes" in resized.err
                      and "region 'data0' has 30000 bytes in the checkpoint but 30001" in resized.err,
                      "a relaunch with other region sizes stops with code 2, naming the first region "
                      "and both sizes", resized)
        regrouped = cluster.launch(nodes, APP_ARGS, dict(env, SKT_RESTART="1", SKT_GROUP_SIZE="4"))
        checks.expect(regrouped.code == 2 and "group size 2" in regrouped.err and
                      "group size 4" in regrouped.err,
                      "a relaunch with another group size stops with code 2", regrouped)
        renamed = cluster.launch(nodes, APP_ARGS + ["--regions", "3"], dict(env, SKT_RESTART="1"))
        checks.expect(renamed.code == 2 and "same regions" in renamed.err,
                      "a relaunch declaring other regions stops with code 2", renamed)
        rescheme = cluster.launch(nodes, APP_ARGS, dict(env, SKT_RESTART="1", SKT_SCHEME="rs"))
        checks.expect(rescheme.code == 2 and "scheme xor" in rescheme.err and "scheme rs" in rescheme.err,
                      "a relaunch with another scheme stops with code 2, naming both", rescheme)
        for variables, words in [({"SKT_GROUPSIZE": "2"}, "unknown"), ({"SKT_CHUNK_SIZE": "lots"}, "SKT_CHUNK_SIZE"),
                                 ({"SKT_SCHEME": "rs", "SKT_PARITY": "2"}, "SKT_PARITY")]:
            bad = cluster.launch(nodes, APP_ARGS, dict(env, SKT_RESTART="1", **variables))
            checks.expect(bad.code == 2 and words in bad.err,
                          f"a relaunch with {variables} stops with code 2, saying '{words}'", bad)
        checks.expect(cluster.digests(job) == before, "the refused relaunches changed no segment")
        good = cluster.launch(nodes, APP_ARGS + ["--verify-recovery"], dict(env, SKT_RESTART="1"))
        checks.expect(good.code == 0 and good.result == reference,
                      "the proper relaunch still recovers the same result", good)
    finally:
        cluster.clean(job)


def one_launch_at_a_time(cluster, checks, reference):
    """A job paused in the middle of its run still holds its segments: a relaunch of the same job
    waits (SKT_ATTACH_WAIT) and is refused with code 2, saying who holds them. Then mpirun is
    killed from outside (SIGKILL, as an operator or a failing node would): its ranks die with it at
    once, and the next relaunch recovers."""
    job = cluster.new_job("iso-own")
    nodes = [f"n{r}" for r in range(4)]
    env = {"SKT_JOB": job, "SKT_GROUP_SIZE": "2"}
    first, _ = cluster.start(nodes, APP_ARGS + ["--pause", "0:7"], dict(env, SKT_RESTART="0"))
    try:
        line = first.stdout.readline()
        checks.expect(line.startswith("PAUSED"), "the first launch runs and pauses after iteration 7", line)
        second = cluster.launch(nodes, APP_ARGS, dict(env, SKT_RESTART="1", SKT_ATTACH_WAIT="1s"),
                                wait_detached=False)
        checks.expect(second.code == 2 and f"job '{job}'" in second.err and
                      "still attached by 1 live process" in second.err and "Waited 1 s" in second.err,
                      "a relaunch while the first launch runs waits 1 s, then stops with code 2 naming the "
                      "job and the live process", second)
        os.kill(first.pid, signal.SIGKILL)  # mpirun only: its ranks must not outlive it
        first.communicate()
        start = time.monotonic()
        try:
            cluster.wait_detached(job, timeout=10)
            gone = time.monotonic() - start
            checks.expect(True, f"mpirun killed: every rank died with it within {gone:.2f} s")
        except RuntimeError as e:
            checks.expect(False, "mpirun killed: every rank died with it", str(e))
        again = cluster.launch(nodes, APP_ARGS + ["--verify-recovery"], dict(env, SKT_RESTART="1"))
        checks.expect(again.code == 0 and again.result == reference and again.epoch == 2,
                      "the relaunch then recovers epoch 2 and finishes with the same result", again)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
            first.communicate()
        cluster.clean(job)


def resumed_twice_at_once(cluster, checks, reference):
    """An operator runs the resume command twice at once (two terminals, a job script submitted
    twice): both launches look for the crashed job's segments together, and at most one may own
    each. Each launch ends with the result of a run without faults (the later one after the first
    finished and removed the segments, starting afresh), or is refused with code 2 naming the live
    processes that hold them (each launch took some ranks' segments); never a run on segments that
    another launch writes. If neither recovered, the next relaunch does."""
    job = cluster.new_job("iso-twice")
    nodes = [f"n{r}" for r in range(4)]
    env = {"SKT_JOB": job, "SKT_GROUP_SIZE": "2"}
    started = []
    try:
        first = crash_mid_run(cluster, nodes, env, 1)
        checks.expect(first.code not in (0, 2, 3) and not first.hung, "the first launch crashed", first)
        resume = dict(env, SKT_RESTART="1", SKT_ATTACH_WAIT="2s")
        started = [cluster.start(nodes, APP_ARGS, resume)[0] for _ in range(2)]
        runs = []
        for process in started:
            out, err = process.communicate(timeout=cluster.timeout)
            runs.append(harness.Run(process.returncode, out, err))
        cluster.wait_detached(job)
        for i, run in enumerate(runs):
            checks.expect((run.code == 0 and run.result == reference)
                          or (run.code == 2 and "still attached by" in run.err),
                          f"resume {i + 1} of two started at once: exit {run.code}, the result of a "
                          "run without faults or a refusal naming the processes that hold the segments", run)
        if not any(run.code == 0 and run.epoch == 2 for run in runs):
            again = cluster.launch(nodes, APP_ARGS, resume)
            checks.expect(again.code == 0 and again.result == reference and again.epoch == 2,
                          "neither recovered: the next relaunch recovers epoch 2 and finishes with the "
                          "same result", again)
    finally:
        for process in started:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.communicate()
        cluster.clean(job)


def configuration_errors(cluster, checks):
    job = cluster.new_job("iso-d")
    try:
        nodes = [f"n{r}" for r in range(4)]
        bad = cluster.launch(nodes, APP_ARGS, {"SKT_JOB": job, "SKT_GROUP_SIZE": "0"})
        checks.expect(bad.code == 2 and "SKT_GROUP_SIZE" in bad.err and "from 1 to 64" in bad.err,
                      "SKT_GROUP_SIZE=0 stops every rank with code 2", bad)
        one_host = cluster.launch(["host"] * 4, APP_ARGS, {"SKT_JOB": job, "SKT_GROUP_SIZE": "2"})
        checks.expect(one_host.code == 2 and "SKT_NODE" in one_host.err,
                      "groups on a single node are refused, naming SKT_NODE", one_host)
        mixed = cluster.launch(nodes, APP_ARGS, {"SKT_JOB": job, "SKT_GROUP_SIZE": "2"},
                               rank_env={2: {"SKT_GROUP_SIZE": "4"}})
        checks.expect(mixed.code == 2 and "differs between ranks" in mixed.err,
                      "settings that differ between ranks are refused", mixed)
        # As `mpirun -x SKT_JOB=... prog : prog` does: the variable reaches the first program only.
        # Those without a name took part in a broadcast the others never entered: a hang.
        named_once = cluster.launch(nodes, APP_ARGS, {"SKT_GROUP_SIZE": "2"}, rank_env={0: {"SKT_JOB": job}})
        checks.expect(named_once.code == 2 and not named_once.hung and "differs between ranks" in named_once.err
                      and "-x NAME" in named_once.err,
                      "SKT_JOB given to one rank only is refused on every rank, naming mpirun -x", named_once)
        wide = cluster.launch(nodes, APP_ARGS, {"SKT_JOB": job, "SKT_GROUP_SIZE": "4", "SKT_SCHEME": "rs",
                                                "SKT_PARITY": "4"})
        checks.expect(wide.code == 2 and "SKT_PARITY" in wide.err and "SKT_GROUP_SIZE) is 4" in wide.err,
                      "m = 4 parity chunks in groups of 4 is refused, naming both settings", wide)
        checks.expect(cluster.segment_count(job) == 0, "the refused first launches left no segment behind",
                      cluster.shm_tool("list", "--job", job))
        good = cluster.launch(nodes, APP_ARGS, {"SKT_JOB": job, "SKT_GROUP_SIZE": "2", "SKT_RESTART": "0"})
        checks.expect(good.code == 0, "so the corrected first launch of the same job starts", good)
        # A group size is an upper bound: larger than the job, the job is one group, and says so.
        too_big = cluster.launch(nodes, APP_ARGS, {"SKT_JOB": job, "SKT_GROUP_SIZE": "8"})
        checks.expect(too_big.code == 0 and "SKT_GROUP_SIZE) is 8 but the job has 4 ranks: one group of 4"
                      in too_big.err, "a group size larger than the job: one group of 4, with a warning", too_big)
    finally:
        cluster.clean(job)


def beside_a_job_still_writing(cluster, checks):
    job = cluster.new_job("iso-e")
    nodes = [f"n{r}" for r in range(4)]
    env = {"SKT_JOB": job, "SKT_GROUP_SIZE": "2", "SKT_RESTART": "0"}
    # Four ranks of 64 MiB: with their checkpoints they take more than 768 MiB, and 256 MiB is left
    # them beside a job whose workspace is attached and not yet written (its program fills it as
    # it computes). Before, the check counted only MemAvailable, which those pages are not out of
    # yet: both jobs passed it, and the kernel would kill one of them as they wrote.
    args = ["--iterations", "2", "--checkpoint-every", "1", "--regions", "1", "--bytes", str(64 << 20)]
    left = 256 << 20
    try:
        with harness.UnwrittenSegment(harness.memory_available() - harness.meminfo("MemTotal") // 32
                                      - left) as other:
            if other.why_not:
                print(f"skip a job beside another's unwritten workspace: {other.why_not}", flush=True)
                return
            refused = cluster.launch(nodes, args, env)
        checks.expect(refused.code == 2 and "this machine cannot hold job" in refused.err
                      and "shared memory segments that other jobs and programs here hold" in refused.err,
                      "beside another job's workspace not yet written, a job that fits only without it "
                      "is refused with code 2, naming it", refused)
        checks.expect(cluster.segment_count(job) == 0, "and leaves no segment behind",
                      cluster.shm_tool("list", "--job", job))
        ran = cluster.launch(nodes, args, env)
        checks.expect(ran.code == 0 and ran.result is not None,
                      "the same job runs once the other job is gone", ran)
    finally:
        cluster.clean(job)


def cancelled_during_a_checkpoint(cluster, checks, reference):
    """SIGTERM to the launcher (what scancel does) while rank 1 is half way through a step of the
    second checkpoint: every rank is terminated there, and the relaunch restores a whole epoch."""
    for step, epochs in [("encode", {1}), ("flush", {1, 2}), ("committed", {2})]:
        job = cluster.new_job("iso-t")
        nodes = [f"n{r}" for r in range(4)]
        env = {"SKT_JOB": job, "SKT_GROUP_SIZE": "2"}
        try:
            first = cluster.launch(nodes, APP_ARGS, dict(env, SKT_RESTART="0", SKT_FAULT=f"{step}:1:2:0:term"))
            checks.expect(first.code not in (0, 2, 3, 4) and not first.hung and "terminating the launcher" in first.err,
                          f"{step}: the job was cancelled with SIGTERM during its second checkpoint", first)
            again = cluster.launch(nodes, APP_ARGS + ["--verify-recovery"], dict(env, SKT_RESTART="1"))
            checks.expect(again.code == 0 and again.result == reference and again.epoch in epochs,
                          f"{step}: the relaunch restores epoch {again.epoch} (of {sorted(epochs)}) "
                          "and finishes with the same result", again)
        finally:
            cluster.clean(job)


def main(argv):
    options = harness.arguments(argv)
    cluster = harness.Cluster(options.app, options.shm, options.mpirun, options.timeout)
    checks = harness.Checks()
    chosen = harness.selected(options, harness.named(
        [another_job_is_left_alone, a_node_back_from_an_earlier_start, another_computation_under_the_tag,
         ranks_placed_on_other_nodes, ranks_swapped_within_a_memory_limit, swapped_in_a_group_of_four,
         an_ensemble_under_one_tag, refused_relaunches_change_nothing, one_launch_at_a_time,
         resumed_twice_at_once, configuration_errors, beside_a_job_still_writing,
         cancelled_during_a_checkpoint],
        lambda: (cluster, checks, reference)))
    reference = cluster.reference(4, APP_ARGS)
    for case in chosen:
        case()
    return harness.report_failures(checks.failures)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
