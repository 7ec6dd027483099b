#!/usr/bin/env python3
"""The protocol fault matrix: a middle rank is killed at every SKT_FAULT step, by process crash
(its memory kept) or node loss (its memory destroyed and its rank moved to a spare node), for
several group sizes and schemes; the relaunched job must restore exactly what was checkpointed and
finish with the same result as a run without faults. With Reed-Solomon m=2, a second member of the
victim's group loses its node at the same moment (in 'node' mode both lose theirs).

For the 'recover' step the first failure is a crash in the middle of the computation, and the same
rank is killed again in the middle of the recovery that follows; a third launch must succeed.
"""

import sys

import harness

STEPS = ["stage", "encode", "encoded", "agreed", "flush", "committed", "recover"]
# (scheme, parity, group size, ranks, members lost at once)
CONFIGS = [("xor", 1, 2, 4, 1), ("xor", 1, 3, 6, 1), ("xor", 1, 4, 8, 1), ("xor", 1, 8, 8, 1),
           ("rs", 2, 4, 8, 2)]
QUICK = [("xor", 1, 2, 4, 1), ("rs", 2, 4, 8, 2)]
APP_ARGS = ["--iterations", "12", "--checkpoint-every", "3", "--bytes", "20000", "--regions", "2"]
FAULT_EPOCH = 2  # the second checkpoint, at iteration 6


def expected_epochs(step, mode):
    """Epochs the relaunch may restore. A crashed rank keeps its record, so the epoch is exact; after
    a node loss, survivors killed by mpirun before they recorded the agreement fall back one."""
    if step in ("stage", "encode", "encoded"):
        return {FAULT_EPOCH - 1}
    if mode == "crash" or step == "recover":
        return {FAULT_EPOCH}
    return {FAULT_EPOCH - 1, FAULT_EPOCH}


def run_case(cluster, config, step, mode, reference):
    """Returns (status, detail) with status 'exact', 'wrong' or 'hung'."""
    scheme, parity, group_size, nranks, losses = config
    victim = nranks // 2 - 1
    # Groups are dealt round-robin over nodes, so rank + nranks/G is in the same group.
    mates = [victim + k * (nranks // group_size) for k in range(1, losses)]
    job = cluster.new_job(f"fm{scheme}{group_size}{step[:3]}{mode[0]}")
    nodes = [f"n{r}" for r in range(nranks)]
    env = {"SKT_JOB": job, "SKT_GROUP_SIZE": str(group_size), "SKT_SCHEME": scheme,
           "SKT_PARITY": str(parity)}

    def lose_victim():
        for r in ([victim] if mode == "node" else []) + mates:
            cluster.lose_node(job, nodes[r])
            nodes[r] += "x"

    def expect_killed(run, what):
        if run.hung:
            return ("hung", f"{what} hung")
        if run.code in (0, 2, 3, 4):
            return ("wrong", f"{what} should have been killed: {run.describe()}")
        return None

    try:
        if step == "recover":
            first = cluster.launch(nodes, APP_ARGS + ["--crash-at", str(3 * FAULT_EPOCH + 1),
                                                      "--crash-rank", str(victim)],
                                   dict(env, SKT_RESTART="0"))
            bad = expect_killed(first, "the first launch")
            if bad:
                return bad
            lose_victim()
            second = cluster.launch(nodes, APP_ARGS, dict(env, SKT_RESTART="1",
                                                          SKT_FAULT=f"recover:{victim}:{FAULT_EPOCH}"))
            bad = expect_killed(second, "the launch failing during recovery")
            if bad:
                return bad
            lose_victim()
            restart = "2"
        else:
            first = cluster.launch(nodes, APP_ARGS, dict(env, SKT_RESTART="0",
                                                         SKT_FAULT=f"{step}:{victim}:{FAULT_EPOCH}"))
            bad = expect_killed(first, "the faulty launch")
            if bad:
                return bad
            lose_victim()
            restart = "1"
        final = cluster.launch(nodes, APP_ARGS + ["--verify-recovery"], dict(env, SKT_RESTART=restart))
        if final.hung:
            return ("hung", "the relaunch hung")
        if final.code != 0 or final.result != reference:
            return ("wrong", f"relaunch: expected RESULT {reference}: {final.describe()}")
        if final.epoch not in expected_epochs(step, mode):
            return ("wrong", f"restored epoch {final.epoch}, expected {expected_epochs(step, mode)}")
        if cluster.segment_count(job) != 0:
            return ("wrong", "segments left behind after a successful run")
        return ("exact", f"epoch {final.epoch}")
    finally:
        cluster.clean(job)


def main(argv):
    options = harness.arguments(argv)
    cluster = harness.Cluster(options.app, options.shm, options.mpirun, options.timeout)
    configs = QUICK if options.quick else CONFIGS
    references = {n: cluster.reference(n, APP_ARGS) for n in {c[3] for c in configs}}

    counts = {"exact": 0, "wrong": 0, "hung": 0}
    failures = []
    print(f"{'scheme':<6} {'m':>2} {'group':>5} {'ranks':>5} {'lost':>4} {'step':<10} "
          f"{'crash':<10} {'node loss':<10}")
    for config in configs:
        scheme, parity, group_size, nranks, losses = config
        for step in STEPS:
            cells = []
            for mode in ("crash", "node"):
                status, detail = run_case(cluster, config, step, mode, references[nranks])
                counts[status] += 1
                cells.append("ok " + detail.split()[-1] if status == "exact" else status.upper())
                if status != "exact":
                    failures.append(f"{scheme} m={parity} G={group_size} step={step} {mode}: {detail}")
            print(f"{scheme:<6} {parity:>2} {group_size:>5} {nranks:>5} {losses:>4} {step:<10} "
                  f"{cells[0]:<10} {cells[1]:<10}", flush=True)
    total = sum(counts.values())
    print(f"cases run {total}, recovered exactly {counts['exact']}, wrong {counts['wrong']}, "
          f"hung {counts['hung']}")
    return harness.report_failures(failures)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
