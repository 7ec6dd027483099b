#!/usr/bin/env python3
"""Segments are only ever used by the run they belong to: another job's segments on the same nodes,
segments left over from an earlier run, and a relaunch that does not match its checkpoint are all
refused without touching anything; configuration errors stop every rank with exit code 2."""

import sys

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
        checks.expect(cluster.digests(a) == before and len(before) == 16,
                      "job A's 16 segments are untouched by job B")
        again = cluster.launch(nodes, APP_ARGS + ["--verify-recovery"],
                               {"SKT_JOB": a, "SKT_GROUP_SIZE": "2", "SKT_RESTART": "1"})
        checks.expect(again.code == 0 and again.result == reference and again.epoch == 2,
                      "job A then recovers epoch 2 and finishes with the same result", again)
    finally:
        cluster.clean(a)
        cluster.clean(b)


def refused_relaunches_change_nothing(cluster, checks, reference):
    job = cluster.new_job("iso-c")
    nodes = [f"n{r}" for r in range(4)]
    env = {"SKT_JOB": job, "SKT_GROUP_SIZE": "2"}
    try:
        crash_mid_run(cluster, nodes, env, 1)
        before = cluster.digests(job)
        stale = cluster.launch(nodes, APP_ARGS, dict(env, SKT_RESTART="0"))
        checks.expect(stale.code == 2 and "earlier run" in stale.err and
                      f"skt-shm clean --job {job}" in stale.err,
                      "a first launch (SKT_RESTART=0) finding old segments stops with code 2", stale)
        resized = cluster.launch(nodes, ["--iterations", "12", "--checkpoint-every", "3", "--bytes",
                                         "30001"], dict(env, SKT_RESTART="1"))
        checks.expect(resized.code == 2 and "same regions with the same sizes" in resized.err,
                      "a relaunch with other region sizes stops with code 2", resized)
        regrouped = cluster.launch(nodes, APP_ARGS, dict(env, SKT_RESTART="1", SKT_GROUP_SIZE="4"))
        checks.expect(regrouped.code == 2 and "group size 2" in regrouped.err and
                      "group size 4" in regrouped.err,
                      "a relaunch with another group size stops with code 2", regrouped)
        checks.expect(cluster.digests(job) == before, "the refused relaunches changed no segment")
        good = cluster.launch(nodes, APP_ARGS + ["--verify-recovery"], dict(env, SKT_RESTART="1"))
        checks.expect(good.code == 0 and good.result == reference,
                      "the proper relaunch still recovers the same result", good)
    finally:
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
    finally:
        cluster.clean(job)


def main(argv):
    options = harness.arguments(argv)
    cluster = harness.Cluster(options.app, options.shm, options.mpirun, options.timeout)
    checks = harness.Checks()
    reference = cluster.reference(4, APP_ARGS)
    another_job_is_left_alone(cluster, checks, reference)
    refused_relaunches_change_nothing(cluster, checks, reference)
    configuration_errors(cluster, checks)
    return harness.report_failures(checks.failures)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
