#!/usr/bin/env python3
"""The baselines next to self-checkpoint: a node lost in the middle of a checkpoint update (the
flush, for self; the copy into the only copy, for single) is survived by self and double, and ends
single with the 'unrecoverable' code; a crash that loses no memory is survived by all three."""

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


def main(argv):
    options = harness.arguments(argv)
    cluster = harness.Cluster(options.app, options.shm, options.mpirun, options.timeout)
    checks = harness.Checks()
    reference = cluster.reference(4, APP_ARGS)
    for mode in ("self", "double", "single"):
        for memory_lost in (True, False):
            failure_during_update(cluster, checks, reference, mode, memory_lost)
    return harness.report_failures(checks.failures)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
