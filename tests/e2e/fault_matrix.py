#!/usr/bin/env python3
"""The protocol fault matrix. For each configuration (scheme, parity m, group size G), each protocol
step (every SKT_FAULT step, plus 'mid': a crash between two checkpoints), each position of the
first lost member in its group, and each kind of loss:

  crash    the member's process dies at the step, its memory stays; with m > 1, m-1 more members
           of its group lose their nodes at the same moment;
  node     the member and m-1 more lose their nodes (processes and memory);
  beyond   m+1 members lose their nodes: more than the scheme tolerates;

the job is relaunched with spares in place of lost nodes. Within the tolerance the relaunch must
restore what was checkpointed and print the same result as a run without faults ('exact'); under
the sum scheme (regions of doubles) a rebuilt member may differ by rounding, so the relaunch must
instead find, by replaying the computation, every restored value within the scheme's bound
('bound');
beyond it, it must stop with exit code 3, a message naming the group, print no result, and leave
the survivors' segments untouched ('refused'). For the 'recover' step the first failure is a crash
between checkpoints and the same member is killed again in the middle of the recovery that
follows; a third launch must succeed. Anything else is 'wrong' or 'hung'.

  tools/fault-matrix [--full] [--scheme xor|sum|rs ...]
      (the reduced matrix runs in CI; --full runs them all; --scheme keeps one scheme's)
"""

import sys

import harness

STEPS = ["stage", "encode", "encoded", "agreed", "flush", "committed", "recover", "mid"]
# (scheme, parity, group size, ranks)
FULL = [("xor", 1, 2, 4), ("xor", 1, 4, 8), ("xor", 1, 8, 8), ("sum", 1, 2, 4), ("sum", 1, 4, 8),
        ("sum", 1, 8, 8), ("rs", 1, 4, 8), ("rs", 2, 4, 8), ("rs", 2, 8, 8), ("rs", 3, 8, 8)]
REDUCED = [("xor", 1, 2, 4), ("xor", 1, 4, 8), ("sum", 1, 4, 8), ("rs", 2, 4, 8)]
APP_ARGS = ["--iterations", "12", "--checkpoint-every", "3", "--bytes", "20000", "--regions", "2"]
FAULT_EPOCH = 2  # the second checkpoint, at iteration 6
MID_ITERATION = 7  # between the second and the third checkpoint


def expected_epochs(step, kind):
    """Epochs the relaunch may restore. A crashed rank keeps its record, so the epoch is exact; after
    a node loss, survivors killed by mpirun before they recorded the agreement fall back one."""
    if step in ("stage", "encode", "encoded"):
        return {FAULT_EPOCH - 1}
    if kind == "crash" or step in ("recover", "mid"):
        return {FAULT_EPOCH}
    return {FAULT_EPOCH - 1, FAULT_EPOCH}


def app_args(scheme):
    return APP_ARGS + (["--doubles"] if scheme == "sum" else [])


def members_of_group0(nranks, group_size):
    # Groups are dealt round-robin over nodes: group 0 is ranks 0, n/G, 2n/G, ...
    return [k * (nranks // group_size) for k in range(group_size)]


def run_case(cluster, config, step, kind, position, reference):
    """Returns (status, detail) with status 'exact', 'bound', 'refused', 'wrong' or 'hung'."""
    scheme, parity, group_size, nranks = config
    args = app_args(scheme)
    group = members_of_group0(nranks, group_size)
    losses = parity + 1 if kind == "beyond" else parity
    lost = [group[(position + k) % group_size] for k in range(losses)]
    victim = lost[0]
    job = cluster.new_job(f"fm{scheme}{parity}{group_size}{step[:3]}{kind[0]}{position}")
    nodes = [f"n{r}" for r in range(nranks)]
    env = {"SKT_JOB": job, "SKT_GROUP_SIZE": str(group_size), "SKT_SCHEME": scheme, "SKT_PARITY": str(parity)}

    def lose_nodes():
        for r in lost if kind != "crash" else lost[1:]:
            cluster.lose_node(job, nodes[r])
            nodes[r] += "x"

    crash_mid = ["--crash-at", str(MID_ITERATION), "--crash-rank", str(victim)]
    try:
        if step in ("mid", "recover"):
            first = cluster.launch(nodes, args + crash_mid, dict(env, SKT_RESTART="0"))
        else:
            first = cluster.launch(nodes, args, dict(env, SKT_RESTART="0",
                                                         SKT_FAULT=f"{step}:{victim}:{FAULT_EPOCH}"))
        bad = harness.killed_as_expected(first, "the faulty launch")
        if bad:
            return bad
        lose_nodes()
        restart = "1"
        if step == "recover" and kind != "beyond":
            second = cluster.launch(nodes, args, dict(env, SKT_RESTART="1",
                                                          SKT_FAULT=f"recover:{victim}:{FAULT_EPOCH}"))
            bad = harness.killed_as_expected(second, "the launch failing during recovery")
            if bad:
                return bad
            if kind == "node":
                cluster.lose_node(job, nodes[victim])
                nodes[victim] += "y"
            restart = "2"
        survivors = {k: v for k, v in cluster.digests(job).items() if k[0] not in lost}
        final = cluster.launch(nodes, args + ["--verify-recovery"], dict(env, SKT_RESTART=restart))
        if final.hung:
            return ("hung", "the relaunch hung")
        if kind == "beyond":
            after = {k: v for k, v in cluster.digests(job).items() if k[0] not in lost}
            if final.code == 3 and final.result is None and "lost" in final.err and after == survivors:
                return ("refused", "exit 3")
            return ("wrong", f"beyond the tolerance: expected exit 3 and untouched survivors: {final.describe()}")
        # The replay vouches for every restored value (bit for bit, or within sum's bound).
        within_bound = scheme == "sum" and final.code == 0 and final.epoch > 0 and \
            "recovered data verified by replay" in final.out
        if final.code != 0 or (final.result != reference and not within_bound):
            return ("wrong", f"relaunch: expected RESULT {reference}: {final.describe()}")
        if final.epoch not in expected_epochs(step, kind):
            return ("wrong", f"restored epoch {final.epoch}, expected {expected_epochs(step, kind)}")
        if cluster.segment_count(job) != 0:
            return ("wrong", "segments left behind after a successful run")
        return ("exact" if final.result == reference else "bound", f"epoch {final.epoch}")
    finally:
        cluster.clean(job)


def main(argv):
    import argparse

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--app", required=True, help="the test program")
    parser.add_argument("--shm", required=True, help="the skt-shm tool")
    parser.add_argument("--mpirun", default="mpirun")
    parser.add_argument("--timeout", type=int, default=120, help="seconds before a run counts as hung")
    parser.add_argument("--full", action="store_true", help="every configuration, position and kind")
    parser.add_argument("--scheme", choices=["xor", "sum", "rs"], action="append",
                        help="only this scheme's configurations (repeatable)")
    options = parser.parse_args(argv)
    cluster = harness.Cluster(options.app, options.shm, options.mpirun, options.timeout)
    configs = [c for c in (FULL if options.full else REDUCED) if not options.scheme or c[0] in options.scheme]
    references = {(c[0] == "sum", c[3]): None for c in configs}
    for doubles, n in references:
        references[(doubles, n)] = cluster.reference(n, app_args("sum" if doubles else "xor"))

    counts = {"exact": 0, "bound": 0, "refused": 0, "wrong": 0, "hung": 0}
    failures = []
    print(f"{'scheme':<6} {'m':>2} {'G':>3} {'pos':>3} {'step':<10} {'crash':<9} {'node':<9} {'beyond':<9}")
    for config in configs:
        scheme, parity, group_size, nranks = config
        # Reduced: the middle member only, and beyond the tolerance at three steps.
        positions = range(group_size) if options.full and group_size <= 4 else \
            sorted({0, group_size // 2, group_size - 1}) if options.full else [group_size // 2]
        for position in positions:
            for step in STEPS:
                cells = []
                for kind in ("crash", "node", "beyond"):
                    if kind == "beyond" and not options.full and step not in ("encode", "flush", "mid"):
                        cells.append("-")
                        continue
                    status, detail = run_case(cluster, config, step, kind, position,
                                              references[(scheme == "sum", nranks)])
                    counts[status] += 1
                    cells.append({"exact": "ok " + detail.split()[-1], "bound": "~ok " + detail.split()[-1],
                                  "refused": "refused"}.get(status, status.upper()))
                    if status in ("wrong", "hung"):
                        failures.append(f"{scheme} m={parity} G={group_size} pos={position} step={step} {kind}: {detail}")
                print(f"{scheme:<6} {parity:>2} {group_size:>3} {position:>3} {step:<10} {cells[0]:<9} {cells[1]:<9} "
                      f"{cells[2]:<9}", flush=True)
    total = sum(counts.values())
    print(f"cases run {total}, recovered exactly {counts['exact']}, recovered within the sum bound "
          f"{counts['bound']}, refused cleanly {counts['refused']}, wrong {counts['wrong']}, hung {counts['hung']}")
    return harness.report_failures(failures)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
