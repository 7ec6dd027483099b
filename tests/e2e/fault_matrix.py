#!/usr/bin/env python3
"""The protocol fault matrix. For each configuration (scheme, parity m, group size G), each protocol
step (every SKT_FAULT step, plus 'mid': a crash between two checkpoints), each position of the
first lost member in its group, and each kind of failure, a job is failed and relaunched with
spares in place of lost nodes. The relaunch must restore what was checkpointed exactly (and print
the same result as a run without faults; under sum a rebuilt member may differ by rounding, so the
relaunch instead replays the computation and finds every restored value within the scheme's
bound), or refuse with exit code 3 where refusing is right. Anything else is 'wrong' or 'hung'.

What the test program does (section 1):
  crash    the member's process dies at the step, its memory stays; with m > 1, m-1 more members
           of its group lose their nodes at the same moment;
  node     the member and m-1 more lose their nodes (processes and memory);
  beyond   m+1 members lose their nodes: more than the scheme tolerates: refused, the survivors'
           segments untouched.
For the 'recover' step the first failure is a crash between checkpoints and the same member is
killed again in the middle of the recovery that follows; a third launch must succeed. For the
'rebuild' and 'rebuilder' steps the member's node is lost between checkpoints, and the recovery
that follows is killed while the group rebuilds it (before it decides the epoch): in the member
being rebuilt, or in the survivor next to it in its group; a third launch must succeed.

What real programs and operators do (section 2), at every step:
  launcher the member kills mpirun (SIGKILL): every rank must die with it, none may write into
           the segments the relaunch takes over;
  throw    the member fails with an error in a collective phase (stage, encode, encoded,
           recover): every rank must end with the same error, none may hang;
  zero     after a crash, the relaunched program zero-fills every region before recovering;
  random   the same with arbitrary data (both: exact, or refused with the rule in the message);
  flipB, flipC, flipW, flipD
           after a crash, one bit flips in the committed copy, its checksum, the workspace, or
           the other checksum area of another member of the group: mended from the group, exact;
  flipnode the member's node is lost and a bit flips in another member: exact, or refused;
  pair     two ranks per node, and the member's node (both ranks) is lost.

  tools/fault-matrix [--full | --quick] [--scheme xor|sum|rs ...] [--section 1|2]
      (the reduced matrix runs in CI; --full runs them all; --quick, for the sanitizers' build,
      which takes twice as long per case: the reduced matrix's xor and Reed-Solomon configurations,
      and section 2 at half its steps, each throwing step among them)
"""

import sys

import harness

STEPS = ["stage", "encode", "encoded", "agreed", "flush", "committed", "recover", "rebuild",
         "rebuilder", "mid"]
# In the rebuild of a lost member, before the epoch is decided: the member being rebuilt dies
# (rebuild), or a survivor rebuilding it (rebuilder). Only a node loss has a member to rebuild.
REBUILD_STEPS = {"rebuild", "rebuilder"}
THROWING_STEPS = {"stage", "encode", "encoded", "recover"}
# (scheme, parity, group size, ranks)
FULL = [("xor", 1, 2, 4), ("xor", 1, 4, 8), ("xor", 1, 8, 8), ("sum", 1, 2, 4), ("sum", 1, 4, 8),
        ("sum", 1, 8, 8), ("rs", 1, 4, 8), ("rs", 2, 4, 8), ("rs", 2, 8, 8), ("rs", 3, 8, 8)]
REDUCED = [("xor", 1, 2, 4), ("xor", 1, 4, 8), ("sum", 1, 4, 8), ("rs", 2, 4, 8)]
# Section 2: what programs and operators do.
EXTRA_KINDS = ["launcher", "throw", "zero", "random", "flipB", "flipC", "flipW", "flipD", "flipnode",
               "pair"]
EXTRA_FULL = [("xor", 1, 2, 4), ("xor", 1, 4, 8), ("rs", 2, 4, 8), ("sum", 1, 4, 8)]
EXTRA_REDUCED = [("xor", 1, 4, 8)]
QUICK = [("xor", 1, 4, 8), ("rs", 2, 4, 8)]
# Before the agreement (throwing, stage and encoded), after it (flush), in a recovery, between two.
EXTRA_QUICK_STEPS = ["stage", "encoded", "flush", "recover", "mid"]
APP_ARGS = ["--iterations", "12", "--checkpoint-every", "3", "--bytes", "20000", "--regions", "2"]
FAULT_EPOCH = 2  # the second checkpoint, at iteration 6
MID_ITERATION = 7  # between the second and the third checkpoint


def expected_epochs(step, kind):
    """Epochs the relaunch may restore. A crashed rank keeps its record, so the epoch is exact; after
    a node loss, survivors killed by mpirun before they recorded the agreement fall back one."""
    if step in ("stage", "encode", "encoded"):
        return {FAULT_EPOCH - 1}
    if kind in ("crash",) or step in ("recover", "mid") or step in REBUILD_STEPS:
        return {FAULT_EPOCH}
    return {FAULT_EPOCH - 1, FAULT_EPOCH}


def app_args(scheme):
    return APP_ARGS + (["--doubles"] if scheme == "sum" else [])


def members_of_group0(nranks, group_size):
    # Groups are dealt round-robin over nodes: group 0 is ranks 0, n/G, 2n/G, ...
    return [k * (nranks // group_size) for k in range(group_size)]


class Case:
    """One failed and relaunched job."""

    def __init__(self, cluster, config, step, position, tag):
        self.cluster = cluster
        self.scheme, self.parity, self.group_size, self.nranks = config
        self.step = step
        self.group = members_of_group0(self.nranks, self.group_size)
        self.victim = self.group[position % self.group_size]
        self.partner = self.group[(position + 1) % self.group_size]
        self.job = cluster.new_job(tag)
        self.nodes = [f"n{r}" for r in range(self.nranks)]
        self.env = {"SKT_JOB": self.job, "SKT_GROUP_SIZE": str(self.group_size), "SKT_SCHEME": self.scheme,
                    "SKT_PARITY": str(self.parity)}
        self.args = app_args(self.scheme)

    def launch(self, restart, extra_args=(), **env):
        return self.cluster.launch(self.nodes, self.args + list(extra_args),
                                   dict(self.env, SKT_RESTART=str(restart), **env))

    def fail(self, how="kill"):
        """The first launch, failing at the step; returns ('hung'|'wrong', why) or None."""
        if self.step in ("mid", "recover") or self.step in REBUILD_STEPS:
            crash = ["--crash-at", str(MID_ITERATION), "--crash-rank", str(self.victim)]
            if how == "launcher" and self.step == "mid":
                crash.append("--crash-launcher")
            first = self.launch(0, crash)
        else:
            first = self.launch(0, SKT_FAULT=f"{self.step}:{self.victim}:{FAULT_EPOCH}:0:{how}")
        return harness.killed_as_expected(first, "the faulty launch")

    def lose(self, rank):
        node = self.nodes[rank]
        self.cluster.lose_node(self.job, node)
        for r in range(self.nranks):
            if self.nodes[r] == node:
                self.nodes[r] = node + "x"

    def relaunch(self, restart, extra_args=()):
        return self.launch(restart, ["--verify-recovery", *extra_args])

    def judge(self, final, reference, epochs, may_refuse=False, refusal_text="lost"):
        """'exact', 'bound' or 'refused'; or 'wrong'/'hung' with why."""
        if final.hung:
            return ("hung", "the relaunch hung")
        if may_refuse and final.code == 3 and final.result is None and refusal_text in final.err:
            return ("refused", "exit 3")
        within_bound = self.scheme == "sum" and final.code == 0 and final.epoch > 0 and \
            "recovered data verified by replay" in final.out
        if final.code != 0 or (final.result != reference and not within_bound):
            return ("wrong", f"relaunch: expected RESULT {reference}: {final.describe()}")
        if epochs and final.epoch not in epochs:
            return ("wrong", f"restored epoch {final.epoch}, expected {epochs}")
        if self.cluster.segment_count(self.job) != 0:
            return ("wrong", "segments left behind after a successful run")
        return ("exact" if final.result == reference else "bound", f"epoch {final.epoch}")

    def clean(self):
        self.cluster.clean(self.job)


def run_case(cluster, config, step, kind, position, reference):
    """Section 1: returns (status, detail) with status 'exact', 'bound', 'refused', 'wrong' or 'hung'."""
    scheme, parity, group_size, nranks = config
    case = Case(cluster, config, step, position, f"fm{scheme}{parity}{group_size}{step[:3]}{kind[0]}{position}")
    losses = parity + 1 if kind == "beyond" else parity
    lost = [case.group[(position + k) % group_size] for k in range(losses)]
    try:
        bad = case.fail()
        if bad:
            return bad
        for r in (lost if kind != "crash" else lost[1:]):
            case.lose(r)
        restart = 1
        if step in REBUILD_STEPS:
            dying = case.victim if step == "rebuild" else case.partner
            second = case.launch(1, SKT_FAULT=f"rebuild:{dying}:{FAULT_EPOCH}:1")
            bad = harness.killed_as_expected(second, "the launch failing during the rebuild")
            if bad:
                return bad
            restart = 2
        if step == "recover" and kind != "beyond":
            second = case.launch(1, SKT_FAULT=f"recover:{case.victim}:{FAULT_EPOCH}:1")
            bad = harness.killed_as_expected(second, "the launch failing during recovery")
            if bad:
                return bad
            if kind == "node":
                case.lose(case.victim)
            restart = 2
        survivors = {k: v for k, v in cluster.digests(case.job).items() if k[0] not in lost}
        final = case.relaunch(restart)
        if final.hung:
            return ("hung", "the relaunch hung")
        if kind == "beyond":
            after = {k: v for k, v in cluster.digests(case.job).items() if k[0] not in lost}
            if final.code == 3 and final.result is None and "lost" in final.err and after == survivors:
                return ("refused", "exit 3")
            return ("wrong", f"beyond the tolerance: expected exit 3 and untouched survivors: {final.describe()}")
        return case.judge(final, reference, expected_epochs(step, kind))
    finally:
        case.clean()


def run_extra(cluster, config, step, kind, position, reference):
    """Section 2: returns (status, detail), or None where the kind does not apply to the step."""
    scheme, parity, group_size, nranks = config
    if kind == "throw" and step not in THROWING_STEPS:
        return None
    if step in REBUILD_STEPS:
        return None  # section 1's, with a node lost; here a member crashes, and nothing is rebuilt
    if kind == "flipD" and step in ("stage", "encode"):
        return None  # D is being written there: nothing of it is used
    case = Case(cluster, config, step, position, f"fx{scheme}{group_size}{step[:3]}{kind[:5]}")
    any_epoch = {FAULT_EPOCH - 1, FAULT_EPOCH}
    try:
        if kind == "pair":
            # Two ranks per node: ranks 2k and 2k+1 share node k, in different groups.
            case.nodes = [f"n{r // 2}" for r in range(nranks)]
        if kind == "launcher":
            bad = case.fail("launcher")
            if bad:
                return bad
            if step == "recover":
                second = case.launch(1, SKT_FAULT=f"recover:{case.victim}:{FAULT_EPOCH}:1:launcher")
                bad = harness.killed_as_expected(second, "the launch whose launcher died during recovery")
                if bad:
                    return bad
            return case.judge(case.relaunch(2 if step == "recover" else 1), reference, any_epoch)
        if kind == "throw":
            restart = 0
            if step == "recover":
                bad = case.fail()
                if bad:
                    return bad
                restart = 1
            failing = case.launch(restart, SKT_FAULT=f"{step}:{case.victim}:{FAULT_EPOCH}:{restart}:throw")
            if failing.hung:
                return ("hung", "the launch with a failing rank hung")
            errors = [line for line in failing.err.splitlines() if "selfckpt error:" in line]
            messages = {line.split("selfckpt error:", 1)[1] for line in errors}
            if failing.code != 1 or len(errors) != nranks or len(messages) != 1 or \
                    "SKT_FAULT: an injected failure" not in failing.err:
                return ("wrong", f"expected the same error on all {nranks} ranks (exit 1): {failing.describe()}")
            return case.judge(case.relaunch(restart + 1), reference, any_epoch)
        bad = case.fail()
        if bad:
            return bad
        restart = 1
        if step == "recover":
            second = case.launch(1, SKT_FAULT=f"recover:{case.victim}:{FAULT_EPOCH}:1")
            bad = harness.killed_as_expected(second, "the launch failing during recovery")
            if bad:
                return bad
            restart = 2
        if kind in ("zero", "random"):
            return case.judge(case.relaunch(restart, ["--scribble", kind]), reference, any_epoch,
                              may_refuse=True, refusal_text="do not write into regions before skt_recover")
        if kind.startswith("flip"):
            if kind == "flipnode":
                case.lose(case.victim)
            area = {"flipB": "B", "flipC": "C", "flipW": "W", "flipD": "D", "flipnode": "B"}[kind]
            flipped = cluster.inject("flip", "--job", case.job, "--rank", str(case.partner), "--byte", "100",
                                     "--bit", "3", "--area", area)
            if flipped.returncode != 0:
                return ("wrong", f"the bit could not be flipped: {flipped.stdout}{flipped.stderr}")
            return case.judge(case.relaunch(restart), reference, any_epoch, may_refuse=kind == "flipnode",
                              refusal_text="cannot rebuild row")
        if kind == "pair":
            case.lose(case.victim)
            return case.judge(case.relaunch(restart), reference, any_epoch)
        raise ValueError(kind)
    finally:
        case.clean()


def main(argv):
    import argparse

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--app", required=True, help="the test program")
    parser.add_argument("--shm", required=True, help="the skt-shm tool")
    parser.add_argument("--inject", required=True, help="the skt-inject tool")
    parser.add_argument("--mpirun", default="mpirun")
    parser.add_argument("--timeout", type=int, default=120, help="seconds before a run counts as hung")
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--full", action="store_true", help="every configuration, position and kind")
    size.add_argument("--quick", action="store_true",
                      help="xor and rs only, section 2 at half its steps (the sanitizers' build)")
    parser.add_argument("--scheme", choices=["xor", "sum", "rs"], action="append",
                        help="only this scheme's configurations (repeatable)")
    parser.add_argument("--section", choices=["1", "2"], action="append",
                        help="only this section (repeatable; default both)")
    parser.add_argument("--step", choices=STEPS, action="append",
                        help="only this step (repeatable): with --scheme and --kind, one case by name")
    parser.add_argument("--kind", choices=["crash", "node", "beyond"] + EXTRA_KINDS, action="append",
                        help="only this kind of fault (repeatable)")
    options = parser.parse_args(argv)
    chosen = lambda steps: [s for s in steps if not options.step or s in options.step]
    skipped = lambda kind: options.kind and kind not in options.kind
    cluster = harness.Cluster(options.app, options.shm, options.mpirun, options.timeout, options.inject)
    sections = options.section or ["1", "2"]
    wanted = lambda configs: [c for c in configs if not options.scheme or c[0] in options.scheme]
    configs = wanted(FULL if options.full else QUICK if options.quick else REDUCED) if "1" in sections else []
    extra_steps = chosen(EXTRA_QUICK_STEPS if options.quick else STEPS)
    extras = wanted(EXTRA_FULL if options.full else EXTRA_REDUCED) if "2" in sections else []
    references = {}
    for c in configs + extras:
        key = (c[0] == "sum", c[3])
        if key not in references:
            references[key] = cluster.reference(c[3], app_args("sum" if key[0] else "xor"))

    counts = {"exact": 0, "bound": 0, "refused": 0, "wrong": 0, "hung": 0}
    failures = []

    def record(status, detail, what):
        counts[status] += 1
        if status in ("wrong", "hung"):
            failures.append(f"{what}: {detail}")
        return {"exact": "ok " + detail.split()[-1], "bound": "~ok " + detail.split()[-1],
                "refused": "refused"}.get(status, status.upper())

    if configs:
        print("1. the test program: crash, node loss, loss beyond the tolerance")
        print(f"{'scheme':<6} {'m':>2} {'G':>3} {'pos':>3} {'step':<10} {'crash':<9} {'node':<9} {'beyond':<9}")
    for config in configs:
        scheme, parity, group_size, nranks = config
        # Reduced: the middle member only, and beyond the tolerance at three steps.
        positions = range(group_size) if options.full and group_size <= 4 else \
            sorted({0, group_size // 2, group_size - 1}) if options.full else [group_size // 2]
        for position in positions:
            for step in chosen(STEPS):
                cells = []
                for kind in ("crash", "node", "beyond"):
                    if (kind == "beyond" and not options.full and step not in ("encode", "flush", "mid")) or \
                            (step in REBUILD_STEPS and kind != "node") or skipped(kind):
                        cells.append("-")
                        continue
                    status, detail = run_case(cluster, config, step, kind, position,
                                              references[(scheme == "sum", nranks)])
                    cells.append(record(status, detail, f"{scheme} m={parity} G={group_size} pos={position} "
                                                        f"step={step} {kind}"))
                print(f"{scheme:<6} {parity:>2} {group_size:>3} {position:>3} {step:<10} {cells[0]:<9} {cells[1]:<9} "
                      f"{cells[2]:<9}", flush=True)
    if extras:
        print("2. what programs and operators do")
        print(f"{'scheme':<6} {'m':>2} {'G':>3} {'step':<10} " + " ".join(f"{k:<9}" for k in EXTRA_KINDS))
    for config in extras:
        scheme, parity, group_size, nranks = config
        for step in extra_steps:
            cells = []
            for kind in EXTRA_KINDS:
                outcome = None if skipped(kind) else run_extra(cluster, config, step, kind, group_size // 2,
                                    references[(scheme == "sum", nranks)])
                if outcome is None:
                    cells.append("-")
                    continue
                status, detail = outcome
                cells.append(record(status, detail, f"{scheme} m={parity} G={group_size} step={step} {kind}"))
            print(f"{scheme:<6} {parity:>2} {group_size:>3} {step:<10} " + " ".join(f"{c:<9}" for c in cells),
                  flush=True)
    total = sum(counts.values())
    print(f"cases run {total}, recovered exactly {counts['exact']}, recovered within the sum bound "
          f"{counts['bound']}, refused cleanly {counts['refused']}, wrong {counts['wrong']}, hung {counts['hung']}")
    return harness.report_failures(failures)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
