#!/usr/bin/env python3
"""The baselines next to self-checkpoint: a node lost in the middle of a checkpoint update (the
flush, for self; the copy into the only copy, for single) is survived by self and double, and ends
single with the 'unrecoverable' code; a crash that loses no memory is survived by all three.
Checkpoints that find what changed survive the same failures with the result of full ones, and so
do checkpoints that declare what changed, even when the declared ranges miss most of each change
(lengths in elements where bytes are meant): the library finds what they missed and protects it.
And the memory self-checkpoint takes: 40 regions of uneven sizes cost two segments per rank and
within 1 % of the formula W + B + C + D = 2W·G/(G-1)."""

import os
import re
import signal
import sys

import harness
from loss_patterns import APP_ARGS


def failure_during_update(cluster, checks, reference, mode, memory_lost):
    job = cluster.new_job(f"mode-{mode}")
    nodes = [f"n{r}" for r in range(4)]
    env = {"SKT_JOB": job, "SKT_GROUP_SIZE": "2", "SKT_MODE": mode}
    what = f"{mode}: {'node lost' if memory_lost else 'crash'} in the middle of checkpoint 2's update"
    try:
        first = cluster.launch(nodes, APP_ARGS, dict(env, SKT_RESTART="0", SKT_FAULT="flush:1:2"))
        checks.expect(first.code not in (0, 2, 3) and not first.hung, f"{what}: the job died", first)
        if memory_lost:
            cluster.lose_node(job, nodes[1])
            nodes[1] += "x"
        run = cluster.launch(nodes, APP_ARGS + ["--verify-recovery"], dict(env, SKT_RESTART="1"))
        if mode == "single" and memory_lost:
            checks.expect(run.code == 3 and "single mode" in run.err,
                          f"{what}: unrecoverable (exit 3), and the message says why", run)
        else:
            checks.expect(run.code == 0 and run.result == reference,
                          f"{what}: recovered, same result (epoch {run.epoch})", run)
    finally:
        cluster.clean(job)


def changes_found_under_faults(cluster, checks):
    """Checkpoints that find what changed (the default) with a static region and windows that move,
    killed at the steps where a partial encoding or flush is under way: the relaunch must replay-
    verify and give the result of a run that checkpoints in full."""
    args = APP_ARGS + ["--regions", "3", "--static-first", "--touch-percent", "20"]
    nodes = [f"n{r}" for r in range(4)]
    for scheme, group_size, parity in (("xor", 2, 1), ("rs", 4, 2)):
        env = {"SKT_GROUP_SIZE": str(group_size), "SKT_SCHEME": scheme, "SKT_PARITY": str(parity)}
        full_job = cluster.new_job("full")
        try:
            full = cluster.launch(nodes, args, dict(env, SKT_JOB=full_job, SKT_RESTART="0",
                                                    SKT_FIND_CHANGES="0"))
        finally:
            cluster.clean(full_job)
        for fault, memory_lost in (("encode:1:3", True), ("flush:1:3", True), ("committed:2:3", False)):
            job = cluster.new_job("found")
            what = (f"changes found, {scheme} G = {group_size}: "
                    f"{'node lost' if memory_lost else 'crash'} at {fault}")
            try:
                run_nodes = list(nodes)
                first = cluster.launch(run_nodes, args, dict(env, SKT_JOB=job, SKT_RESTART="0",
                                                             SKT_FAULT=fault))
                checks.expect(first.code not in (0, 2, 3) and not first.hung, f"{what}: the job died",
                              first)
                if memory_lost:
                    victim = int(fault.split(":")[1])
                    cluster.lose_node(job, run_nodes[victim])
                    run_nodes[victim] += "x"
                run = cluster.launch(run_nodes, args + ["--verify-recovery"],
                                     dict(env, SKT_JOB=job, SKT_RESTART="1"))
                checks.expect(full.code == 0 and run.code == 0 and run.result == full.result
                              and "verified by replay" in run.out,
                              f"{what}: recovered (epoch {run.epoch}), verified, the result of full "
                              "checkpoints", run)
            finally:
                cluster.clean(job)


def declared_ranges_under_faults(cluster, checks):
    """Checkpoints that declare what the iterations since the last one rewrote (skt_checkpoint_dirty),
    exactly or with each length in 8-byte elements where bytes are meant, the slip that leaves seven
    eighths of every change undeclared. A node lost at a partial encoding or flush, or a crash after
    a commit: the relaunch must replay-verify and give the result of full checkpoints. The library
    compares the workspace with the committed copy outside the declared ranges (the first
    incremental call of a run whole, then a sample; SKT_CHECK_DECLARED=all: every call) and protects
    what changed all the same, saying so. With the check off, the same slip restores stale bytes,
    which the replay finds: the check is what protects the program."""
    args = APP_ARGS + ["--regions", "3", "--touch-percent", "20"]
    nodes = [f"n{r}" for r in range(4)]
    env = {"SKT_GROUP_SIZE": "2"}
    full_job = cluster.new_job("full")
    try:
        full = cluster.launch(nodes, args, dict(env, SKT_JOB=full_job, SKT_RESTART="0", SKT_FIND_CHANGES="0"))
    finally:
        cluster.clean(full_job)
    warning = "changed bytes outside the ranges it declared"
    for declare, check, fault, memory_lost in (("bytes", "sample", "flush:1:3", True),
                                               ("elements", "sample", "encode:1:3", True),
                                               ("elements", "sample", "committed:2:3", False),
                                               ("elements", "all", "flush:1:3", True),
                                               ("elements", "off", "committed:2:3", False)):
        job = cluster.new_job("declared")
        what = (f"declared in {declare}, SKT_CHECK_DECLARED={check}: "
                f"{'node lost' if memory_lost else 'crash'} at {fault}")
        run_env = dict(env, SKT_JOB=job, SKT_CHECK_DECLARED=check)
        try:
            run_nodes = list(nodes)
            first = cluster.launch(run_nodes, args + ["--declare", declare],
                                   dict(run_env, SKT_RESTART="0", SKT_FAULT=fault))
            checks.expect(first.code not in (0, 2, 3) and not first.hung, f"{what}: the job died", first)
            slipped = declare == "elements" and check != "off"
            checks.expect(first.err.count(warning) == (len(nodes) if slipped else 0),
                          f"{what}: {'every rank says' if slipped else 'nothing says'} that bytes changed "
                          "outside the declared ranges", first)
            if memory_lost:
                victim = int(fault.split(":")[1])
                cluster.lose_node(job, run_nodes[victim])
                run_nodes[victim] += "x"
            run = cluster.launch(run_nodes, args + ["--declare", declare, "--verify-recovery"],
                                 dict(run_env, SKT_RESTART="1"))
            if check == "off":
                checks.expect(run.code == 4 and "RECOVERY MISMATCH" in run.err,
                              f"{what}: the undeclared bytes come back stale, and the replay says so (exit 4)",
                              run)
            else:
                checks.expect(full.code == 0 and run.code == 0 and run.result == full.result
                              and "verified by replay" in run.out,
                              f"{what}: recovered (epoch {run.epoch}), verified, the result of full checkpoints",
                              run)
        finally:
            cluster.clean(job)


def memory_per_rank(cluster, checks):
    for group_size in (2, 4):
        job = cluster.new_job(f"mem{group_size}")
        try:
            run = cluster.launch([f"n{r}" for r in range(4)],
                                 ["--iterations", "3", "--checkpoint-every", "3", "--bytes", "1000000",
                                  "--regions", "40", "--uneven", "--report-memory"],
                                 {"SKT_JOB": job, "SKT_GROUP_SIZE": str(group_size), "SKT_RESTART": "0"})
            lines = re.findall(r"^MEMORY rank \d+ .*$", run.out, re.M)
            ratios = [int(re.search(r"shm_segments (\d+)", l).group(1)) /
                      float(re.search(r"formula_2WG/\(G-1\) ([\d.]+)", l).group(1)) for l in lines]
            checks.expect(run.code == 0 and len(ratios) == 4 and max(ratios) <= 1.01,
                          f"40 uneven regions, G = {group_size}: shared memory / 2WG/(G-1) = "
                          f"{max(ratios, default=0):.4f} (at most 1.01)", run)
        finally:
            cluster.clean(job)
    # While a job runs, each rank has exactly two segments, however many regions it has.
    job = cluster.new_job("segs")
    process, _ = cluster.start([f"n{r}" for r in range(4)],
                               ["--iterations", "6", "--checkpoint-every", "3", "--bytes", "20000", "--regions",
                                "40", "--pause", "0:3"],
                               {"SKT_JOB": job, "SKT_GROUP_SIZE": "2", "SKT_RESTART": "0"})
    try:
        for line in process.stdout:
            if line.startswith("PAUSED"):
                break
        listing = cluster.shm_tool("list", "--job", job).splitlines()[1:]
        per_rank = {}
        for line in listing:
            rank = int(line.split()[3])
            per_rank[rank] = per_rank.get(rank, 0) + 1
        checks.expect(per_rank == {0: 2, 1: 2, 2: 2, 3: 2},
                      f"40 regions: 2 segments per rank ({per_rank})", "\n".join(listing))
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        cluster.wait_detached(job)
        cluster.clean(job)


def main(argv):
    options = harness.arguments(argv)
    cluster = harness.Cluster(options.app, options.shm, options.mpirun, options.timeout)
    checks = harness.Checks()
    updates = [(f"failure-during-update-{mode}-{'memory-lost' if lost else 'crash'}",
                lambda mode=mode, lost=lost: failure_during_update(cluster, checks, reference, mode, lost))
               for mode in ("self", "double", "single") for lost in (True, False)]
    chosen = harness.selected(options, updates + harness.named(
        [changes_found_under_faults, declared_ranges_under_faults, memory_per_rank], lambda: (cluster, checks)))
    if any(case in chosen for _, case in updates):
        reference = cluster.reference(4, APP_ARGS)
    for case in chosen:
        case()
    return harness.report_failures(checks.failures)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
