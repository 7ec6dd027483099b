#!/usr/bin/env python3
"""SKT-HPL killed and relaunched: at every SKT_FAULT protocol step and in the middle of an
iteration (SKT_HPL_CRASH), by process crash (memory kept) and node loss (memory destroyed, rank
moved to a spare node), with xor and Reed-Solomon, for N a multiple of NB·P and NB·Q and for an N
that is not, with look-ahead depths 1, 2 and 3. The relaunch must restore a checkpoint, resume at
its panel, report the restore (every checkpoint comparing the workspace outside the ranges
skt-hpl declares, which must cover every change), and end PASSED with the very same residual as a run without faults
and without checkpoints (a restore is bit-exact, and a checkpoint changes no bit of the arithmetic:
the panels in flight are applied in the pieces the iterations after it would have used). And
netlib's own HPL.dat (864 tests on 4 ranks) runs whole, killed in the middle and relaunched: every test PASSED, as with netlib's xhpl. A loss
beyond what a group tolerates is refused (exit 3), naming the command that removes every part of
the job; with drains to storage, it resumes from the drained epoch. A relaunch
with HPL.dat edited (another process mapping, where every local matrix keeps its size; a finished
test changed) is refused. A test whose checkpoints the machine's memory (or the job's cgroup)
cannot hold is skipped before any page is taken, as netlib skips a test it cannot allocate, and
runs with --no-checkpoint; a relaunched test short of memory is refused, its checkpoints kept."""

import os
import re
import signal
import sys
import tempfile
import threading
import time

import harness

STEPS = ["stage", "encode", "encoded", "agreed", "flush", "committed", "recover", "mid"]
N, NB, EVERY = 256, 16, 4  # 16 panels, a checkpoint every 4: epochs at panels 4, 8 and 12
UNEVEN_N = 250  # 16 panels too, the last one 10 columns wide; local matrices of unequal sizes
# (scheme, parity, group size, P, Q, N, depth, steps)
CONFIGS = [("xor", 1, 2, 2, 2, N, 1, STEPS), ("rs", 2, 4, 2, 2, N, 1, ["encode", "flush", "recover", "mid"]),
           ("xor", 1, 2, 2, 2, UNEVEN_N, 2, ["encode", "flush", "committed", "mid"]),
           ("rs", 2, 4, 2, 2, UNEVEN_N, 3, ["flush", "mid"])]
FAULT_EPOCH = 2
MID_PANEL = 10  # between epochs 2 and 3
NETLIB_TESTS = 864  # netlib's testing/ptest/HPL.dat on 4 ranks; xhpl passes every one


def netlib_default():
    """netlib's testing/ptest/HPL.dat, as skt-hpl keeps it (kNetlibDefault in hpl/hpldat.cpp, the
    same bytes as the file in netlib's tarball): one copy in the tree."""
    source = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "hpl", "hpldat.cpp")
    with open(source) as f:
        return re.search(r'kNetlibDefault = R"\((.*?)\)";', f.read(), re.S).group(1)


def hpl_dat(n, nb, p, q, depth=1, threshold="16.0"):
    """One test of order n, or a test of each order in the list n."""
    ns = n if isinstance(n, list) else [n]
    values = [("HPL.out", "output file name"), ("6", "device out"), (str(len(ns)), "# of problems sizes (N)"),
              (" ".join(map(str, ns)), "Ns"), ("1", "# of NBs"), (str(nb), "NBs"), ("0", "PMAP"),
              ("1", "# of process grids"), (str(p), "Ps"), (str(q), "Qs"), (threshold, "threshold"),
              ("1", "# of panel fact"), ("2", "PFACTs"), ("1", "# of recursive stopping criterium"),
              ("4", "NBMINs"), ("1", "# of panels in recursion"), ("2", "NDIVs"),
              ("1", "# of recursive panel fact."), ("1", "RFACTs"), ("1", "# of broadcast"),
              ("1", "BCASTs"), ("1", "# of lookahead depth"), (str(depth), "DEPTHs"),
              ("2", "SWAP"), ("64", "swapping threshold"), ("0", "L1"), ("0", "U"),
              ("1", "Equilibration"), ("8", "memory alignment")]
    return "HPLinpack benchmark input file\nskt-hpl e2e\n" + "".join(f"{v:<12} {w}\n" for v, w in values)


def write_dats(tmp, files):
    """Writes each named HPL.dat text into tmp; returns the path of each name."""
    paths = {}
    for name, text in files.items():
        paths[name] = os.path.join(tmp, f"{name.replace(' ', '')}.dat")
        with open(paths[name], "w") as f:
            f.write(text)
    return paths


def residual_line(out):
    m = re.search(r"^\|\|Ax-b\|\|_oo.*$", out, re.M)
    return m.group(0) if m else None


def restored(out):
    m = re.search(r"^SKT: restored epoch (\d+) \(panel (\d+) of (\d+)\)", out, re.M)
    return (int(m.group(1)), int(m.group(2))) if m else None


def run_without_checkpoints(cluster, ranks, dat, name, env=None):
    """One launch of `dat` with --no-checkpoint on `ranks` virtual nodes, under a job of its own that
    is removed after it."""
    job = cluster.new_job(name)
    try:
        return cluster.launch([f"n{r}" for r in range(ranks)], ["--no-checkpoint", dat],
                              dict({"SKT_JOB": job, "SKT_RESTART": "0"}, **(env or {})))
    finally:
        cluster.clean(job)


def run_case(cluster, config, step, mode, dat, reference):
    """Returns (status, detail): 'exact', 'wrong' or 'hung'."""
    scheme, parity, group_size, p, q, _, _, _ = config
    nranks = p * q
    victim = 1
    mates = [victim + k * (nranks // group_size) for k in range(1, parity)]
    job = cluster.new_job(f"hpl{scheme}{step[:3]}{mode[0]}")
    nodes = [f"n{r}" for r in range(nranks)]
    # Every checkpoint compares the workspace outside the ranges skt-hpl declares: one it missed
    # would be unprotected.
    env = {"SKT_JOB": job, "SKT_GROUP_SIZE": str(group_size), "SKT_SCHEME": scheme,
           "SKT_PARITY": str(parity), "SKT_CHECK_DECLARED": "all"}
    args = ["--checkpoint-every", str(EVERY), dat]

    def lose():
        for r in ([victim] if mode == "node" else []) + mates:
            cluster.lose_node(job, nodes[r])
            nodes[r] += "x"

    try:
        if step in ("mid", "recover"):
            first_env = dict(env, SKT_RESTART="0", SKT_HPL_CRASH=f"{MID_PANEL}:{victim}")
        else:
            first_env = dict(env, SKT_RESTART="0", SKT_FAULT=f"{step}:{victim}:{FAULT_EPOCH}")
        bad = harness.killed_as_expected(cluster.launch(nodes, args, first_env), "the faulty launch")
        if bad:
            return bad
        lose()
        restart = 1
        if step == "recover":
            # Killed again while restoring: the next launch still finds a checkpoint.
            bad = harness.killed_as_expected(cluster.launch(nodes, args, dict(env, SKT_RESTART="1",
                                                          SKT_FAULT=f"recover:{victim}:{FAULT_EPOCH}")),
                         "the launch failing during recovery")
            if bad:
                return bad
            lose()
            restart = 2
        # The crash variable stays set: a relaunch must not crash again.
        final = cluster.launch(nodes, args, dict(env, SKT_RESTART=str(restart),
                                                 SKT_HPL_CRASH=f"{MID_PANEL}:{victim}"))
        if final.hung:
            return ("hung", "the relaunch hung")
        if final.code != 0 or "PASSED" not in final.out:
            return ("wrong", f"relaunch did not pass: {final.describe()}")
        if "outside the ranges it declared" in final.err:
            return ("wrong", f"skt-hpl's declared ranges missed a change: {final.describe()}")
        if residual_line(final.out) != reference:
            return ("wrong", f"residual {residual_line(final.out)!r}, expected {reference!r}")
        where = restored(final.out)
        if where is None:
            return ("wrong", f"no restore reported: {final.describe()}")
        epoch, panel = where
        if panel != epoch * EVERY or not 1 <= epoch <= 3:
            return ("wrong", f"restored epoch {epoch} at panel {panel}")
        if step in ("stage", "encode", "encoded") and epoch != FAULT_EPOCH - 1:
            return ("wrong", f"a fault before the agreement restored epoch {epoch}")
        if "time lost" not in final.out or "uninterrupted computation" not in final.out:
            return ("wrong", f"the restart report is incomplete: {final.describe()}")
        if cluster.segment_count(job) != 0:
            return ("wrong", "segments left behind after a successful run")
        return ("exact", f"epoch {epoch}")
    finally:
        cluster.clean(job)


def declared_ranges_cover_every_change(cluster, config, dat, reference, failures):
    """A run with checkpoints and no fault, each incremental one (all but the first) comparing the
    workspace with the committed copy outside the ranges skt-hpl declares: none may have changed."""
    scheme, parity, group_size, p, q, _, _, _ = config
    job = cluster.new_job("hpldecl")
    try:
        run = cluster.launch([f"n{r}" for r in range(p * q)], ["--checkpoint-every", str(EVERY), dat],
                             {"SKT_JOB": job, "SKT_RESTART": "0", "SKT_GROUP_SIZE": str(group_size),
                              "SKT_SCHEME": scheme, "SKT_PARITY": str(parity), "SKT_CHECK_DECLARED": "all"})
    finally:
        cluster.clean(job)
    report(run.code == 0 and "PASSED" in run.out and residual_line(run.out) == reference
           and "outside the ranges it declared" not in run.err,
           "checkpoints comparing the workspace outside skt-hpl's declared ranges find no change there, "
           "and the residual is the reference's", run, failures)


def report(ok, what, run, failures):
    print(f"{'ok  ' if ok else 'FAIL'} {what}", flush=True)
    if not ok:
        failures.append(f"{what}: {run.describe()}")


def bad_input(cluster, tmp, failures):
    """Refusals with exit code 2 and a message that says what to change, before anything runs; a
    refused relaunch of a job with a checkpoint leaves its segments as they were."""
    good = hpl_dat(N, NB, 2, 2)
    malformed = good.replace(f"{N:<12} Ns", "twelve       Ns")
    cases = [
        ("a malformed line", malformed, 4, "bad.dat:6: 'twelve' is not an integer"),
        ("a truncated file", "\n".join(good.splitlines()[:12]) + "\n", 4, "bad.dat:13: missing line"),
        ("an output file in a directory that does not exist",
         good.replace("HPL.out      output file name", "no-such-dir/HPL.out output file name")
             .replace("6            device out", "8            device out"), 4,
         "cannot open no-such-dir/HPL.out, the output file that HPL.dat names (device out 8): "
         "No such file or directory"),
    ]
    for what, text, nranks, words in cases:
        dat = os.path.join(tmp, "bad.dat")
        with open(dat, "w") as f:
            f.write(text)
        job = cluster.new_job("hplbad")
        try:
            run = cluster.launch([f"n{r}" for r in range(nranks)], [dat], {"SKT_JOB": job, "SKT_RESTART": "0"})
            ok = run.code == 2 and words in run.out + run.err and cluster.segment_count(job) == 0
            print(f"{'ok  ' if ok else 'FAIL'} {what}: exit 2, says '{words}', no segment created", flush=True)
            if not ok:
                failures.append(f"{what}: {run.describe()}")
        finally:
            cluster.clean(job)

    # What each rank reads from its own command line and environment is agreed before anything
    # runs: options that differ between ranks are refused on every rank, not left to hang the
    # first checkpoint one rank takes alone; a job tag on rank 0 only (an mpirun -x that reached
    # only the first program) is rank 0's for all.
    dat = os.path.join(tmp, "HPL.dat")
    nodes = [f"n{r}" for r in range(4)]
    job = cluster.new_job("hpldiffer")
    try:
        run = cluster.launch(nodes, [dat], {"SKT_JOB": job, "SKT_GROUP_SIZE": "2", "SKT_RESTART": "0",
                                            "SKT_HPL_CHECKPOINT_EVERY": "2"},
                             rank_env={3: {"SKT_HPL_CHECKPOINT_EVERY": "3"}})
        report(run.code == 2 and not run.hung and "the options differ between ranks: rank 3 has "
               "[checkpoint every=3" in run.err and cluster.segment_count(job) == 0,
               "options that differ between ranks: exit 2 on every rank, naming the rank and both "
               "settings, no segment created", run, failures)
    finally:
        cluster.clean(job)
    job = cluster.new_job("hplonetag")
    try:
        run = cluster.launch(nodes, ["--no-checkpoint", dat], {"SKT_RESTART": "0"},
                             rank_env={0: {"SKT_JOB": job}})
        report(run.code == 0 and not run.hung and "PASSED" in run.out,
               "SKT_JOB given to rank 0 only: every rank takes rank 0's tag and the run passes", run,
               failures)
    finally:
        cluster.clean(job)

    # A job with a checkpoint, relaunched with a bad file: its segments stay as they were.
    dat = os.path.join(tmp, "HPL.dat")
    job = cluster.new_job("hplkeep")
    nodes = [f"n{r}" for r in range(4)]
    env = {"SKT_JOB": job, "SKT_GROUP_SIZE": "2"}
    try:
        cluster.launch(nodes, ["--checkpoint-every", str(EVERY), dat],
                       dict(env, SKT_RESTART="0", SKT_HPL_CRASH=f"{MID_PANEL}:1"))
        before = cluster.digests(job)
        bad = os.path.join(tmp, "bad.dat")
        with open(bad, "w") as f:
            f.write(malformed)
        run = cluster.launch(nodes, ["--checkpoint-every", str(EVERY), bad], dict(env, SKT_RESTART="1"))
        ok = run.code == 2 and len(before) > 0 and cluster.digests(job) == before
        print(f"{'ok  ' if ok else 'FAIL'} a relaunch refused for its HPL.dat leaves the job's "
              f"{len(before)} segments untouched", flush=True)
        if not ok:
            failures.append(f"refused relaunch: {run.describe()}")
    finally:
        cluster.clean(job)


def edited_between_launches(cluster, tmp, failures):
    """A job of two tests (N = 64, then 255, NB = 16 on 2x2) killed in the second and relaunched
    with HPL.dat edited: the process mapping (PMAP) changed with no residual check asked (at N = 255
    every rank's local matrix has the same size in both mappings, so the library's size check
    passes: before this was refused, ranks 1 and 2 resumed each other's matrix and the run ended
    with exit 0), or the finished first test's N changed (it was reprinted as N = 64 and N = 96
    never ran). Each is refused with exit 2. Relaunched with the original file, the job resumes and
    passes with the residuals of a run without faults. And the interrupted test's own check refuses
    the PMAP change where the record of the job's tests was removed."""
    def two_tests(first_n, pmap="0", threshold="16.0"):
        text = hpl_dat(255, NB, 2, 2, threshold=threshold).replace("0            PMAP", f"{pmap}            PMAP")
        return text.replace("1            # of problems sizes (N)", "2            # of problems sizes (N)").replace(
            "255          Ns", f"{first_n} 255       Ns")
    path = write_dats(tmp, {"original": two_tests(64), "pmap": two_tests(64, pmap="1", threshold="-1.0"),
                            "first N": two_tests(96)})
    nodes = [f"n{r}" for r in range(4)]
    run = run_without_checkpoints(cluster, len(nodes), path["original"], "hplref")
    reference = re.findall(r"^\|\|Ax-b\|\|_oo.*$", run.out, re.M)
    job = cluster.new_job("hpledit")
    env = {"SKT_JOB": job, "SKT_GROUP_SIZE": "2"}
    args = ["--checkpoint-every", str(EVERY)]
    try:
        # Test 1 has 4 panels: panel 10 is the second test's.
        first = cluster.launch(nodes, args + [path["original"]],
                               dict(env, SKT_RESTART="0", SKT_HPL_CRASH=f"{MID_PANEL}:1"))
        refused = {name: cluster.launch(nodes, args + [path[name]], dict(env, SKT_RESTART="1"))
                   for name in ("pmap", "first N")}
        words = "is not what this job was first launched with"
        for name, run in refused.items():
            report(run.code == 2 and not run.hung and words in run.err,
                   f"relaunched with HPL.dat's {name} changed: refused with exit 2, '{words}'", run, failures)
        final = cluster.launch(nodes, args + [path["original"]], dict(env, SKT_RESTART="1"))
    finally:
        cluster.clean(job)
    residuals = re.findall(r"^\|\|Ax-b\|\|_oo.*$", final.out, re.M)
    report(first.code != 0 and len(reference) == 2 and final.code == 0 and restored(final.out) is not None
           and residuals == reference,
           "relaunched with the original HPL.dat: resumed, both tests with the residuals of the run "
           "without faults", final, failures)
    # The interrupted test's own check: a one-test job whose record of tests was removed by hand.
    path = write_dats(tmp, {"original": hpl_dat(255, NB, 2, 2),
                            "pmap": hpl_dat(255, NB, 2, 2).replace("0            PMAP", "1            PMAP")})
    job = cluster.new_job("hpledit1")
    env = {"SKT_JOB": job, "SKT_GROUP_SIZE": "2"}
    try:
        cluster.launch(nodes, args + [path["original"]], dict(env, SKT_RESTART="0", SKT_HPL_CRASH=f"{MID_PANEL}:1"))
        cluster.shm_tool("clean", "--job", f"{job}+hpl")
        alone = cluster.launch(nodes, args + [path["pmap"]], dict(env, SKT_RESTART="1"))
    finally:
        cluster.clean(job)
    report(alone.code == 2 and not alone.hung and "another test of HPL.dat" in alone.err,
           "the record of the job's tests removed by hand, PMAP changed: the test's own check "
           "refuses, exit 2", alone, failures)


def skipped_for_memory(out, n, nb):
    """Whether the HPL output says, as netlib HPL does, that the test of order n was skipped for its
    memory."""
    return re.search(rf"^HPL ERROR: N={n} NB={nb} P=2 Q=1: Memory allocation failed for A, x and b\. "
                     rf"Skip\.", out, re.M) is not None


def tally(out):
    """(passed, skipped) of the HPL summary."""
    passed = re.search(r"^\s+(\d+) tests completed and passed residual checks", out, re.M)
    skipped = re.search(r"^\s+(\d+) tests skipped because of illegal input values", out, re.M)
    return (int(passed.group(1)) if passed else None, int(skipped.group(1)) if skipped else None)


def too_large_among_others(cluster, tmp, failures):
    """A benchmarker's sweep of N, its largest sized for the machine without checkpoints: two ranks,
    that matrix two fifths of the memory available, its checkpoints three times that in self mode.
    Each rank's checkpoint segment alone is granted by the kernel; together they would exhaust the
    machine while mapped (the OOM killer took mpirun, and the segments held all the memory). netlib
    HPL skips a test whose memory it cannot allocate and runs the rest: so does SKT-HPL, before the
    test's matrix is generated, saying why and what would run it, leaving nothing of it; the tests
    around it pass, exit 0. Before, the whole run ended there with exit 2. An N beyond any
    machine's addresses is skipped the same way, with checkpoints and without."""
    large = int((harness.memory_available() * 2 / 5 / 8) ** 0.5)  # N·N doubles: two fifths of it
    beyond = 8_000_000  # 256 TB of matrix per rank: more than a process can address
    path = write_dats(tmp, {"sweep": hpl_dat([UNEVEN_N, large, beyond, UNEVEN_N], NB, 2, 1),
                            "beyond": hpl_dat([UNEVEN_N, beyond, UNEVEN_N], NB, 2, 1)})
    job = cluster.new_job("hplmem")
    env = {"SKT_JOB": job, "SKT_GROUP_SIZE": "2", "SKT_MODE": "self", "SKT_RESTART": "0"}
    try:
        sweep = cluster.launch(["n0", "n1"], [path["sweep"]], env)
        left = cluster.segment_count(job)
    finally:
        cluster.clean(job)
    report(sweep.code == 0 and tally(sweep.out) == (2, 2) and skipped_for_memory(sweep.out, large, NB)
           and skipped_for_memory(sweep.out, beyond, NB) and "this machine cannot hold job" in sweep.out
           and "--no-checkpoint runs this test in the memory netlib HPL takes" in sweep.out and not left,
           f"Ns {UNEVEN_N}, {large} (checkpoints beyond the machine's memory), {beyond} and {UNEVEN_N} on "
           "2 ranks: the two large ones skipped as netlib skips them, saying why, the others PASSED, "
           "exit 0, nothing left", sweep, failures)
    plain = run_without_checkpoints(cluster, 2, path["beyond"], "hplmemp")
    report(plain.code == 0 and tally(plain.out) == (2, 1) and skipped_for_memory(plain.out, beyond, NB)
           and "cannot allocate" in plain.out and "--no-checkpoint runs" not in plain.out,
           f"Ns {UNEVEN_N}, {beyond} and {UNEVEN_N} with --no-checkpoint: {beyond} skipped, the others "
           "PASSED, exit 0", plain, failures)


def short_of_memory_on_resume(cluster, tmp, failures):
    """A test interrupted after checkpoints, relaunched where its memory cannot be had: the rank of a
    lost node, moved to a spare, in a memory cgroup without room for its segments (the others keep
    theirs). Skipping the test there would throw its progress away, so the run ends instead, with
    exit 2 and the reason, the checkpoints of the others kept; relaunched with the memory, the test
    restores its last checkpoint and passes."""
    n, nb, every, crash_panel = 6000, 192, 8, 26  # 32 panels: killed after epoch 3, at panel 24
    path = write_dats(tmp, {"resume": hpl_dat(n, nb, 2, 1)})["resume"]
    cgroup = harness.MemoryCgroup(1 << 40)
    if cgroup.why_not:
        print(f"skip a relaunch short of memory: {cgroup.why_not}", flush=True)
        return
    job = cluster.new_job("hplres")
    env = {"SKT_JOB": job, "SKT_GROUP_SIZE": "2", "SKT_MODE": "self"}
    args = ["--checkpoint-every", str(every), path]
    try:
        with cgroup:
            first = cluster.launch(["n0", "n1"], args, dict(env, SKT_RESTART="0",
                                                             SKT_HPL_CRASH=f"{crash_panel}:1"))
            rank_bytes = sum(int(row[7]) for row in cluster.segments(job) if row[3] == "1")
            cluster.lose_node(job, "n1")
            # Room for half of what the moved rank makes again: its processes fit, its segments not.
            cgroup.limit_to(cgroup.usage() + rank_bytes // 2)
            short = cluster.launch(["n0", "n1x"], args, dict(env, SKT_RESTART="1"))
            kept = cluster.segment_count(f"{job}+t0")
        final = cluster.launch(["n0", "n1x"], args, dict(env, SKT_RESTART="1"))
    finally:
        cluster.clean(job)
    bad = harness.killed_as_expected(first, f"the launch killed at panel {crash_panel}")
    if bad:
        failures.append(bad[1])
        return
    report(short.code == 2 and not short.hung and "the memory cgroup" in short.err
           and "Skip" not in short.out and kept > 0,
           f"N = {n}, node n1 lost after epoch 3, the relaunch in a cgroup without room for the moved "
           "rank's segments: exit 2, the cgroup named, not skipped, the other rank's checkpoint kept",
           short, failures)
    report(final.code == 0 and "PASSED" in final.out and restored(final.out) == (3, 24),
           "relaunched with the memory: restores epoch 3 (panel 24) and passes", final, failures)


def progress_lines(cluster, tmp, failures):
    """A long test says how far it is, on stderr, where HPL's output (which scripts parse) is
    untouched: here every panel (--progress at a microsecond), killed in the middle and relaunched,
    the relaunch counting from the panel it restored."""
    path = write_dats(tmp, {"progress": hpl_dat(UNEVEN_N, NB, 2, 1)})["progress"]
    job = cluster.new_job("hplprog")
    env = {"SKT_JOB": job, "SKT_GROUP_SIZE": "2", "SKT_HPL_PROGRESS": "0.000001"}
    args = ["--checkpoint-every", str(EVERY), path]
    try:
        first = cluster.launch(["n0", "n1"], args, dict(env, SKT_RESTART="0", SKT_HPL_CRASH=f"{MID_PANEL}:1"))
        final = cluster.launch(["n0", "n1"], args, dict(env, SKT_RESTART="1"))
    finally:
        cluster.clean(job)
    line = r"^skt-hpl: N=250 NB=16 2x1: panel (\d+) of 16, (\d+) % of the flops done, \d+ s"
    before = [int(p) for p, _ in re.findall(line, first.err, re.M)]
    after = re.findall(line + r" since the restore at panel (\d+)", final.err, re.M)
    restored_at = restored(final.out)
    report(before[:MID_PANEL] == list(range(MID_PANEL)) and "skt-hpl: N=" not in first.out + final.out
           and restored_at is not None and after
           and [int(p) for p, _, _ in after] == list(range(restored_at[1], 16))
           and all(int(r) == restored_at[1] for _, _, r in after)
           and [int(s) for _, s, _ in after] == sorted(int(s) for _, s, _ in after),
           "progress on stderr at every panel (none in HPL's output); after the relaunch from the "
           "panel restored, 'since the restore'", final, failures)


def memory_cgroup_for(case):
    """A memory cgroup for `case`, not limited yet, and the environment its runs take; no cgroup
    where none can be made, the case then said to be skipped. AddressSanitizer keeps up to 256 MiB
    per process of freed memory in quarantine, which the panels' buffers of a large run fill and a
    small one does not: not the program's memory, so it is kept small there."""
    cgroup = harness.MemoryCgroup(1 << 40)
    if cgroup.why_not:
        print(f"skip {case}: {cgroup.why_not}", flush=True)
        return None, {}
    asan = os.environ.get("ASAN_OPTIONS")
    return cgroup, {"ASAN_OPTIONS": f"{asan}:quarantine_size_mb=8"} if asan else {}


def limited_by_cgroup(cluster, tmp, failures):
    """A job given less memory than the machine has: its ranks in a memory cgroup, as Slurm's --mem
    puts them, with room for what a small run of the job took at its peak and 0.6 GiB more, and a
    matrix of 0.3 GiB, whose checkpoint segments in self mode take three times that. The machine
    holds it; the cgroup does not, and the kernel killed a rank midway (exit 137, the segments
    left). With checkpoints, that test is skipped, naming the cgroup and its limit, nothing of it
    left, and the next test passes. With --no-checkpoint it runs in the memory netlib HPL takes,
    within the same cgroup, and passes; before, it was refused, the matrix kept with a committed
    copy beside it where no checkpoint was ever taken. (The room is measured, not fixed: a build
    with AddressSanitizer takes more memory of its own than a plain one. The small run's peak varies
    by 0.1 GiB from run to run, and with 0.45 GiB more the kernel once killed the run without
    checkpoints under AddressSanitizer: twice the matrix leaves 0.3 GiB either way.)"""
    matrix = int(0.3 * (1 << 30))
    n = int((matrix / 8) ** 0.5)
    path = write_dats(tmp, {"large": hpl_dat([n, UNEVEN_N], 192, 2, 1), "plain": hpl_dat(n, 192, 2, 1),
                            "small": hpl_dat(UNEVEN_N, NB, 2, 1)})
    cgroup, sanitizer = memory_cgroup_for("a job in a memory cgroup")
    if cgroup is None:
        return
    job = cluster.new_job("hplcg")
    env = dict({"SKT_JOB": job, "SKT_GROUP_SIZE": "2", "SKT_MODE": "self", "SKT_RESTART": "0"}, **sanitizer)
    with cgroup:
        small = run_without_checkpoints(cluster, 2, path["small"], "hplcgs", sanitizer)
        limit = cgroup.peak() + matrix * 2
        cgroup.limit_to(limit)
        try:
            large = cluster.launch(["n0", "n1"], [path["large"]], env)
            left = cluster.segment_count(job)
        finally:
            cluster.clean(job)
        plain = run_without_checkpoints(cluster, 2, path["plain"], "hplcgp", sanitizer)
    if small.code != 0:
        failures.append(f"the small run that measures the job's own memory: {small.describe()}")
        return
    room = f"{limit / (1 << 30):.1f} GiB"
    report(large.code == 0 and tally(large.out) == (1, 1) and skipped_for_memory(large.out, n, 192)
           and "the memory cgroup" in large.out and f"of its limit of {room}" in large.out and not left,
           f"N = {n} on 2 ranks in a memory cgroup of {room}: skipped, the cgroup and its limit named, "
           f"nothing of it left; N = {UNEVEN_N} after it passes", large, failures)
    report(plain.code == 0 and "PASSED" in plain.out,
           f"N = {n} with --no-checkpoint in the same cgroup: runs and passes", plain, failures)


def shared_segments():
    """(key, id, creator's pid) of every SysV segment of this IPC namespace, from /proc/sysvipc/shm."""
    with open("/proc/sysvipc/shm") as f:
        return [(fields[0], int(fields[1]), int(fields[4])) for fields in map(str.split, list(f)[1:])]


def segments_of_session(session):
    """The SysV segments (id: key) whose creator runs in process session `session` (a launch
    started in a session of its own)."""
    found = {}
    for key, shmid, cpid in shared_segments():
        try:
            if os.getsid(cpid) == session:
                found[shmid] = key
        except OSError:
            pass  # its creator is gone
    return found


def ctrl_c_without_a_job_tag(cluster, tmp, failures):
    """A benchmarker's plain mpirun of skt-hpl, with checkpoints and no SKT_JOB (nor Slurm): no
    relaunch can name the job, so nothing of it can ever be resumed. Stopped with Ctrl-C (SIGINT to
    mpirun) in the middle of the test, every segment it made goes with its processes: they are
    marked for removal from the start (key 0, as ipcs shows them). Until now skt-hpl named such a
    job after its pid and the time, and the segments stayed, the whole matrix with its
    checkpoints, holding the machine's memory until someone ran skt-shm clean."""
    if "SKT_JOB" in os.environ or "SLURM_JOB_ID" in os.environ:
        print("skip Ctrl-C without a job tag: the environment names a job", flush=True)
        return
    path = write_dats(tmp, {"untagged": hpl_dat(1536, NB, 2, 1)})["untagged"]
    process, _ = cluster.start(["n0", "n1"], ["--checkpoint-every", "2", path],
                               {"SKT_GROUP_SIZE": "2", "SKT_HPL_PAUSE": "6"})
    timer = threading.Timer(cluster.timeout, lambda: os.killpg(process.pid, signal.SIGKILL))
    timer.start()
    paused, made = False, {}
    try:
        for line in process.stdout:
            if line.startswith("SKT_HPL_PAUSE"):
                paused = True
                break
        made = segments_of_session(process.pid)
        process.send_signal(signal.SIGINT)
        out, err = process.communicate()
    finally:
        timer.cancel()
    deadline = time.monotonic() + cluster.timeout
    left = dict(made)
    while time.monotonic() < deadline:
        ids = {shmid for _, shmid, _ in shared_segments()}
        left = {i: k for i, k in made.items() if i in ids}
        if not left:
            break
        time.sleep(0.05)
    report(paused and len(made) >= 4 and all(int(k, 16) == 0 for k in made.values()) and not left,
           f"skt-hpl with checkpoints and no job tag, Ctrl-C at panel 6: its {len(made)} segments marked "
           f"for removal from the start, none left ({len(left)})", harness.Run(process.returncode, out, err),
           failures)


def suggested_n_runs(cluster, tmp, failures):
    """What a benchmarker does first: ask for the largest N (--suggest-n, no size given: the memory
    the job has, here a memory cgroup's, as Slurm's --mem makes it) and run it there. The N of the
    self row runs with checkpoints and passes, not skipped; in a smaller cgroup, the none row's
    runs with --no-checkpoint and passes too. Until now --suggest-n needed --mem-per-node, and given
    the cgroup's limit it counted the checksums of groups of 4 for a grid of two ranks (the library
    makes one group of 2, whose checksums take three times as much), nothing for the program beside
    its matrix, and the whole memory for the none row: the N it gave was skipped, or killed. The
    cgroup of the self row is large enough (2 GiB over a small run's peak) that groups of 4 there
    give an N whose checkpoints it cannot hold."""
    path = write_dats(tmp, {"sized": hpl_dat(UNEVEN_N, 192, 2, 1)})["sized"]
    cgroup, sanitizer = memory_cgroup_for("sizing N for a memory cgroup")
    if cgroup is None:
        return
    job = cluster.new_job("hplsz")
    env = dict({"SKT_JOB": job, "SKT_GROUP_SIZE": "4", "SKT_MODE": "self", "SKT_RESTART": "0"}, **sanitizer)

    def suggested(mode, limit):
        cgroup.limit_to(limit)
        run = cluster.launch(["n0"], ["--suggest-n", path], sanitizer)
        row = re.search(rf"^\s+2\s+1\s+192\s+2\s+{mode}\s+\S+\s+\S+\s+(\d+)\s", run.out, re.M)
        if run.code != 0 or row is None or row.group(1) == "0":
            failures.append(f"--suggest-n in a memory cgroup of {limit >> 20} MiB gives an N for 2x1 in "
                            f"mode {mode}: {run.describe()}")
            return None
        return int(row.group(1))

    with cgroup:
        small = run_without_checkpoints(cluster, 2, path, "hplszs", sanitizer)
        if small.code != 0:
            failures.append(f"the small run that measures the job's own memory: {small.describe()}")
            return
        large, smaller = cgroup.peak() + (2 << 30), cgroup.peak() + (384 << 20)
        n_self = suggested("self", large)
        if n_self is None:
            return
        try:
            checkpointed = cluster.launch(["n0", "n1"], [write_dats(tmp, {"self": hpl_dat(n_self, 192, 2, 1)})["self"]], env)
            left = cluster.segment_count(job)
        finally:
            cluster.clean(job)
        n_none = suggested("none", smaller)
        if n_none is None:
            return
        plain = run_without_checkpoints(cluster, 2, write_dats(tmp, {"none": hpl_dat(n_none, 192, 2, 1)})["none"],
                                        "hplszn", sanitizer)
    # Groups of at most 4 for two ranks: the library says so once, though skt-hpl opens a context for
    # its record of the run and another for the test.
    told = (checkpointed.out + checkpointed.err).count("SKT_GROUP_SIZE) is 4 but the job has 2 ranks")
    report(checkpointed.code == 0 and tally(checkpointed.out) == (1, 0) and not left and told == 1,
           f"the N --suggest-n gives for self mode in a memory cgroup of {large >> 20} MiB ({n_self}): "
           f"runs with checkpoints and passes, nothing left, the group size's warning given once ({told})",
           checkpointed, failures)
    report(plain.code == 0 and tally(plain.out) == (1, 0),
           f"the N it gives for none in one of {smaller >> 20} MiB ({n_none}): runs with --no-checkpoint "
           "there and passes", plain, failures)


def limited_by_segment_limits(cluster, tmp, failures):
    """A node whose kernel limits SysV shared memory (kernel.shmall, in pages) below what the job
    asks: room for both workspaces and one rank's checkpoint segment, not the other's, so one rank
    fails while another has made its segments. Every rank stops with exit 2 and the same message,
    naming the limit and how to raise it; nothing of the test is left. With the limit raised, the
    job relaunched runs and passes. In an IPC namespace of its own: the machine's limits stay as
    they are."""
    n = 2000
    workspace_pages = n * n * 8 // 2 // 4096  # per rank on 2x1
    # The checkpoint segments in self mode take about three workspaces: both workspaces and one
    # rank's checkpoint segment fit, both ranks' do not.
    limit = int(6.5 * workspace_pages)
    path = write_dats(tmp, {"limited": hpl_dat(n, NB, 2, 1)})["limited"]
    namespace = harness.IpcNamespace({"shmall": limit})
    job = cluster.new_job("hplshm")
    env = {"SKT_JOB": job, "SKT_GROUP_SIZE": "2", "SKT_MODE": "self", "SKT_RESTART": "0"}
    with namespace:
        if namespace.why_not:
            print(f"skip a job beyond the kernel's segment limits: {namespace.why_not}", flush=True)
            return
        try:
            # With Open MPI's own second between SIGTERM and SIGKILL (the tests shorten it to
            # nothing): the rank that fails a moment after the first must still say why.
            limited = cluster.launch(["n0", "n1"], [path], dict(env, OMPI_MCA_odls_base_sigkill_timeout="1"))
            left = cluster.segment_count(f"{job}+t0")
            namespace.set("shmall", 1 << 40)
            raised = cluster.launch(["n0", "n1"], [path], dict(env, SKT_RESTART="1"))
        finally:
            cluster.clean(job)
    told = set(re.findall(rf"^skt-hpl rank (\d+): rank \d+ \(node n\d\): shmget of \d+ bytes failed: "
                          rf"No space left on device; the kernel's segment limits are reached: "
                          rf"kernel.shmmni = \d+ segments, kernel.shmall = {limit} pages; raise them "
                          rf"with sysctl", limited.err, re.M))
    report(limited.code == 2 and not limited.hung and told == {"0", "1"} and not left,
           f"kernel.shmall = {limit} pages, room for one rank's checkpoint segment of two: exit 2, "
           "every rank with the same message naming the limit, nothing of the test left", limited,
           failures)
    report(raised.code == 0 and "PASSED" in raised.out,
           "the limit raised, the job relaunched runs and passes", raised, failures)


def paused_then_lost(cluster, job, args, env, manifests=()):
    """Runs the job until every rank waits at panel 10 (SKT_HPL_PAUSE) and the drained epochs'
    `manifests` exist, kills it, and destroys the memory of both members of one XOR group (ranks 1
    and 3). Returns the nodes to relaunch on and whether the manifests appeared."""
    nodes = [f"n{r}" for r in range(4)]
    process, _ = cluster.start(nodes, args, dict(env, SKT_RESTART="0", SKT_HPL_PAUSE="10"))
    timer = threading.Timer(cluster.timeout, lambda: os.killpg(process.pid, signal.SIGKILL))
    timer.start()
    try:
        for line in process.stdout:
            if line.startswith("SKT_HPL_PAUSE"):
                break
        deadline = time.monotonic() + cluster.timeout
        while not all(map(os.path.exists, manifests)) and time.monotonic() < deadline:
            time.sleep(0.05)
        drained = all(map(os.path.exists, manifests))
    finally:
        timer.cancel()
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
    cluster.wait_detached(job + "+t0")
    for r in (1, 3):
        cluster.lose_node(job, nodes[r])
        nodes[r] += "x"
    return nodes, drained


def beyond_tolerance(cluster, dat, reference, tmp, failures):
    """Both members of one XOR group lost with their nodes in the middle of panel 10. Without
    drains: refused with exit 3, and the command skt-hpl names removes every part of the job (the
    library names only the part whose context failed). With a drain to storage at every checkpoint:
    memory cannot serve, storage can; the ranks are held at panel 10 until the drained epochs are
    complete (the test's epoch 2, panel 8, and the run's own context), and the relaunch resumes from
    epoch 2 and passes with the residual of the run without faults."""
    args = ["--checkpoint-every", str(EVERY), dat]
    job = cluster.new_job("hpllost")
    env = {"SKT_JOB": job, "SKT_GROUP_SIZE": "2"}
    try:
        nodes, _ = paused_then_lost(cluster, job, args, env)
        refused = cluster.launch(nodes, args, dict(env, SKT_RESTART="1"))
        kept = cluster.segment_count(job)
        advice = f"skt-shm clean --job {job} removes them all"
        if advice in refused.err:
            cluster.shm_tool("clean", "--job", job)
        left = cluster.segment_count(job)
    finally:
        cluster.clean(job)
    ok = refused.code == 3 and advice in refused.err and kept > 0 and left == 0
    print(f"{'ok  ' if ok else 'FAIL'} one XOR group's two nodes lost, no drains: refused with exit 3; "
          f"the command skt-hpl names removes all {kept} segments of the job's parts", flush=True)
    if not ok:
        failures.append(f"beyond tolerance without drains ({kept} segments kept, {left} left after the "
                        f"named command): relaunch {refused.describe()}")

    job = cluster.new_job("hpldrain")
    drains = os.path.join(tmp, "drains")
    env = {"SKT_JOB": job, "SKT_GROUP_SIZE": "2", "SKT_DRAIN_DIR": drains, "SKT_DRAIN_EVERY": "1"}
    manifests = [os.path.join(drains, f"{job}+t0", "epoch-000000000002", "MANIFEST"),
                 os.path.join(drains, f"{job}+hpl", "epoch-000000000001", "MANIFEST")]
    try:
        nodes, drained = paused_then_lost(cluster, job, args, env, manifests)
        final = cluster.launch(nodes, args, dict(env, SKT_RESTART="1"))
    finally:
        cluster.clean(job)
    ok = (drained and final.code == 0 and "PASSED" in final.out
          and residual_line(final.out) == reference and restored(final.out) == (2, 2 * EVERY)
          and "from storage" in final.err)
    print(f"{'ok  ' if ok else 'FAIL'} one XOR group's two nodes lost, drains on: resumed from storage "
          f"at epoch 2 (panel {2 * EVERY}), PASSED with the reference residual", flush=True)
    if not ok:
        failures.append(f"beyond tolerance with drains (drained: {drained}): relaunch {final.describe()}")


def netlib_like(cluster, tmp, failures):
    """What netlib HPL runs, SKT-HPL runs: a grid larger than the job is skipped in netlib's words
    and counted, the rest runs; a negative threshold means no residual check; codes out of range
    run as xhpl's defaults, with a warning; and netlib's own
    HPL.dat, with checkpoints, killed in the middle and relaunched, passes every test."""
    dat = os.path.join(tmp, "grids.dat")
    text = hpl_dat(UNEVEN_N, NB, 2, 2).replace("1            # of process grids", "2            # of process grids")
    text = text.replace("2            Ps", "2 2          Ps").replace("2            Qs", "4 2          Qs")
    with open(dat, "w") as f:
        f.write(text)
    run = run_without_checkpoints(cluster, 4, dat, "hplgrid")
    ok = (run.code == 0 and "Need at least 8 processes for these tests" in run.out
          and re.search(r"^\s+1 tests completed and passed", run.out, re.M)
          and re.search(r"^\s+1 tests skipped because of illegal input values", run.out, re.M))
    print(f"{'ok  ' if ok else 'FAIL'} a 2x4 grid on 4 ranks is skipped in netlib's words and counted; "
          "the 2x2 test runs and passes", flush=True)
    if not ok:
        failures.append(f"grid larger than the job: {run.describe()}")

    with open(dat, "w") as f:
        f.write(hpl_dat(UNEVEN_N, NB, 2, 2, threshold="-1.0"))
    run = run_without_checkpoints(cluster, 4, dat, "hplnochk")
    ok = run.code == 0 and "Ax-b" not in run.out and re.search(r"^\s+1 tests completed without checking", run.out, re.M)
    print(f"{'ok  ' if ok else 'FAIL'} a negative threshold: no residual check, "
          "'1 tests completed without checking'", flush=True)
    if not ok:
        failures.append(f"negative threshold: {run.describe()}")

    # Codes out of range that xhpl runs as its defaults (files written for other HPLs): PFACT 3 and
    # RFACT 7 as Right, BCAST 6 as 1ringM, equilibration 9 as on: the same variant code, a warning.
    text = hpl_dat(UNEVEN_N, NB, 2, 2).replace("2            PFACTs", "3            PFACTs")
    text = text.replace("1            RFACTs", "7            RFACTs").replace("1            BCASTs", "6            BCASTs")
    text = text.replace("1            Equilibration", "9            Equilibration")
    with open(dat, "w") as f:
        f.write(text)
    run = run_without_checkpoints(cluster, 4, dat, "hplcodes")
    ok = (run.code == 0 and re.search(rf"^WR11R2R4\s+{UNEVEN_N}\s", run.out, re.M) and "PASSED" in run.out
          and "grids.dat:23: BCAST code 6 is not one of 0 to 5: netlib HPL runs it as 1 (1ringM)" in run.err
          and "grids.dat:30: Equilibration 9 is neither 0 nor 1" in run.err)
    report(ok, "codes xhpl replaces by its defaults (PFACT 3, RFACT 7, BCAST 6, equilibration 9) run "
           "as xhpl runs them, WR11R2R4, with a warning naming each line", run, failures)

    dat = os.path.join(tmp, "netlib.dat")
    with open(dat, "w") as f:
        f.write(netlib_default())
    job = cluster.new_job("hplnetlib")
    nodes = [f"n{r}" for r in range(4)]
    env = {"SKT_JOB": job, "SKT_GROUP_SIZE": "2"}
    args = ["--checkpoint-every", "2", dat]
    try:
        # A rank dies in the middle of panel 5 of the first test (N = 29, NB = 1: 29 panels).
        first = cluster.launch(nodes, args, dict(env, SKT_RESTART="0", SKT_HPL_CRASH="5:1"))
        cluster.lose_node(job, nodes[1])
        nodes[1] += "x"
        final = cluster.launch(nodes, args, dict(env, SKT_RESTART="1", SKT_HPL_CRASH="5:1"))
    finally:
        cluster.clean(job)
    rows = len(re.findall(r"^W[RC]\d", final.out, re.M))
    passed = len(re.findall(r"\.\.\.\.\.\. PASSED$", final.out, re.M))
    # Its tiny local matrices (a few rows, a block of 1 to 4) take every call into the BLAS to its
    # edge: the BLAS says "parameter number ... had an illegal value" and carries on.
    ok = (first.code != 0 and final.code == 0 and rows == NETLIB_TESTS and passed == NETLIB_TESTS
          and "illegal value" not in first.out + first.err + final.out + final.err
          and restored(final.out) is not None
          and re.search(rf"^\s+{NETLIB_TESTS} tests completed and passed residual checks", final.out, re.M))
    print(f"{'ok  ' if ok else 'FAIL'} netlib's HPL.dat with checkpoints, a rank lost with its node in "
          f"the middle of a test and the job relaunched: {rows} rows, {passed} PASSED "
          f"(xhpl: {NETLIB_TESTS}), no call refused by the BLAS", flush=True)
    if not ok:
        failures.append(f"netlib's HPL.dat: first {first.describe()}; relaunch {final.describe()}")


def another_grid(cluster, tmp, failures):
    """2x2 -> 2x1 with no spare left: a job of two tests on 4 ranks finishes the first and dies in
    the middle of the second. skt-hpl on 2 nodes, HPL.dat with a 2x1 grid and --from-job, reports
    the finished test as the job printed it, continues the second from the job's last epoch with
    the matrix redistributed, and passes the residual check: after n2 and n3 lost their memory, with
    old ranks 0 and 1 read from memory where their epoch is the drained one and the rest from the
    drained files; and, with no drain at all, from the memory of a job that ran doubled up on two
    nodes (as skt-run leaves it when no spare is left). A first try with another test than the job
    ran is refused (exit 2) and leaves nothing; the old job serves the next try."""
    paths = write_dats(tmp, {"grid22": hpl_dat([64, UNEVEN_N], NB, 2, 2),
                             "grid21": hpl_dat([64, UNEVEN_N], NB, 2, 1),
                             "grid21 other": hpl_dat([64, N], NB, 2, 1)})
    drains = os.path.join(tmp, "drains-another-grid")
    # (the old run's nodes, nodes whose memory is then lost, storage, how many old ranks memory serves)
    for old_nodes, lost, storage, in_memory in ((["n0", "n1", "n2", "n3"], ["n2", "n3"],
                                                 {"SKT_DRAIN_DIR": drains}, "[0-4]"),
                                                (["n0", "n0", "n1", "n1"], [], {}, "4")):
        old, new = cluster.new_job("hplgrid22"), cluster.new_job("hplgrid21")
        where = f"old run on {','.join(old_nodes)}" + (f", {' and '.join(lost)} lost" if lost else "") + (
            "" if storage else ", no drain")
        try:
            died = cluster.launch(old_nodes, ["--checkpoint-every", "4", paths["grid22"]],
                                  {"SKT_JOB": old, "SKT_RESTART": "0", "SKT_GROUP_SIZE": "2",
                                   "SKT_HPL_CRASH": f"{MID_PANEL}:1", **storage})
            for node in lost:
                cluster.lose_node(old, node)
            env = {"SKT_JOB": new, **storage}
            if lost:
                other = cluster.launch(["n0", "n1"], ["--from-job", old, paths["grid21 other"]], env)
                report(died.code != 0 and other.code == 2 and "ran another test than N=256 NB=16" in other.err
                       and cluster.segment_count(new) == 0,
                       f"{where}: another test than the job ran (N=256 for 250) is refused, exit 2, "
                       "leaving no segment", other, failures)
            run = cluster.launch(["n0", "n1"], ["--from-job", old, paths["grid21"]], env)
            moved = re.search(r"^SKT: continued on the 2x1 grid from epoch (\d+) of job \S+\+t1, which "
                              rf"ran on the 2x2 grid \(({in_memory}) of its ranks read from memory, \d "
                              r"from drained files\), at panel (\d+) of 16, the matrix redistributed",
                              run.out, re.M)
            report(died.code != 0 and run.code == 0 and moved is not None
                   and int(moved.group(3)) == 4 * int(moved.group(1))
                   and len(re.findall(r"\.\.\.\.\.\. PASSED$", run.out, re.M)) == 2
                   and re.search(r"^WR\S+\s+64\s+16\s+2\s+2\s", run.out, re.M)
                   and re.search(rf"^WR\S+\s+{UNEVEN_N}\s+16\s+2\s+1\s", run.out, re.M),
                   f"{where}; on n0,n1, 2x1 with --from-job: the finished 2x2 test reported as it ran, "
                   f"the second continued from the job's last epoch on the new grid "
                   f"({moved.group(2) if moved else '?'} old ranks from memory), both PASSED",
                   run, failures)
        finally:
            cluster.clean(old)
            cluster.clean(new)


def blocks_wider_than_the_matrix(cluster, tmp, failures):
    """NB above N is one block, as in netlib HPL: its work buffers are a panel's actual width. With
    NB = 20000 at N = 512 on 4 ranks they took NB x NB doubles (3.2 GB) per rank and more (the
    kernel's OOM killer at N = 4608), and NB = 100000 ended in std::bad_alloc, exit 1, which
    skt-run relaunched. Each passes now, with checkpoints."""
    paths = write_dats(tmp, {f"wide {nb}": hpl_dat(512, nb, 2, 2) for nb in (20000, 100000)})
    for nb, dat in zip((20000, 100000), paths.values()):
        job = cluster.new_job("hplwide")
        try:
            run = cluster.launch([f"n{r}" for r in range(4)], ["--checkpoint-every", "1", dat],
                                 {"SKT_JOB": job, "SKT_RESTART": "0"})
        finally:
            cluster.clean(job)
        report(run.code == 0 and "PASSED" in run.out and re.search(rf"^WR\S+\s+512\s+{nb}\s", run.out, re.M),
               f"N=512 NB={nb} on 2x2: one block, PASSED, exit 0", run, failures)


def as_it_comes(cluster, tmp, failures):
    """skt-hpl with no checkpoint option, as a benchmarker first runs it: its checkpoints every
    tenth of a test's panels (here every panel, a test of 16), a node lost in the middle, the same
    command relaunched resumes where the last one left off and passes with the residual of a run
    without checkpoints (until 2026-12-01 it took none: the relaunch started the test afresh)."""
    dat = write_dats(tmp, {"plain": hpl_dat(UNEVEN_N, NB, 2, 1)})["plain"]
    nodes = ["n0", "n1"]
    reference = residual_line(run_without_checkpoints(cluster, 2, dat, "hplplainref").out)
    job = cluster.new_job("hplplain")
    env = {"SKT_JOB": job, "SKT_GROUP_SIZE": "2"}
    try:
        first = cluster.launch(nodes, [dat], dict(env, SKT_RESTART="0", SKT_HPL_CRASH=f"{MID_PANEL}:1"))
        bad = harness.killed_as_expected(first, "the launch killed at panel 10")
        cluster.lose_node(job, nodes[1])
        nodes[1] += "x"
        final = cluster.launch(nodes, [dat], dict(env, SKT_RESTART="1"))
    finally:
        cluster.clean(job)
    where = restored(final.out)
    report(not bad and final.code == 0 and reference is not None and residual_line(final.out) == reference
           and where == (MID_PANEL, MID_PANEL),
           f"no checkpoint option: a checkpoint at every panel of 16, node n1 lost in panel {MID_PANEL}, "
           f"the relaunch restores panel {MID_PANEL} and passes with the reference residual", final, failures)


def blas_threads(cluster, tmp, failures):
    """Two ranks not bound to cores of their own, each OpenBLAS with a thread per core of the host:
    named once, with the setting; one thread per rank says nothing."""
    if (os.cpu_count() or 1) < 2:
        print("skip BLAS threads beyond the cores: two ranks need two cores here", flush=True)
        return
    dat = write_dats(tmp, {"threads": hpl_dat(UNEVEN_N, NB, 2, 1)})["threads"]
    runs = {}
    # Ranks not bound (OpenBLAS starts no more threads than the cores a process may run on).
    for threads in (str(os.cpu_count()), "1"):
        runs[threads] = run_without_checkpoints(cluster, 2, dat, "hplthr", {
            "OPENBLAS_NUM_THREADS": threads, "OMPI_MCA_hwloc_base_binding_policy": "none"})
    many, one = runs[str(os.cpu_count())], runs["1"]
    report(many.code == 0 and "PASSED" in many.out and many.err.count("threads in the 2 ranks on this host") == 1
           and "OPENBLAS_NUM_THREADS=" in many.err and one.code == 0 and "threads in the" not in one.err,
           "more BLAS threads than cores on the host: one warning naming OPENBLAS_NUM_THREADS; one "
           "thread per rank: none", many, failures)


def use_partition_sensitive_blas():
    """OpenBLAS's Haswell kernels round a column differently at the edge of a product than inside
    it, so any run whose products are split differently (by a checkpoint, by when a broadcast
    arrives) gives a different residual; its AVX-512 kernels, which it picks on this machine by
    itself, round the same however a product is split, and would hide such a difference."""
    with open("/proc/cpuinfo") as f:
        flags = set(next((line for line in f if line.startswith("flags")), "").split())
    if {"avx2", "fma"} <= flags:
        os.environ["OPENBLAS_CORETYPE"] = "Haswell"


def main(argv):
    options = harness.arguments(argv)
    use_partition_sensitive_blas()
    cluster = harness.Cluster(options.app, options.shm, options.mpirun, options.timeout)
    counts = {"exact": 0, "wrong": 0, "hung": 0}
    failures = []

    def faults(config):
        """The fault cases of one configuration: at each step, a crash and a node loss."""
        scheme, parity, group_size, p, q, n, depth, steps = config
        dat = os.path.join(tmp, f"HPL-{n}-{depth}.dat")
        with open(dat, "w") as f:
            f.write(hpl_dat(n, NB, p, q, depth))
        run = run_without_checkpoints(cluster, p * q, dat, "hplref")
        reference = residual_line(run.out)
        if run.code != 0 or "PASSED" not in run.out or reference is None:
            failures.append(f"the run without faults: {run.describe()}")
            return
        print(f"{scheme} m={parity} G={group_size} grid {p}x{q}, N={n} NB={NB} depth {depth}: {reference}")
        declared_ranges_cover_every_change(cluster, config, dat, reference, failures)
        if config is CONFIGS[0]:
            beyond_tolerance(cluster, dat, reference, tmp, failures)
        for step in steps if not options.quick else steps[-2:]:
            cells = []
            for mode in ("crash", "node"):
                status, detail = run_case(cluster, config, step, mode, dat, reference)
                counts[status] += 1
                cells.append("ok " + detail.split()[-1] if status == "exact" else status.upper())
                if status != "exact":
                    failures.append(f"{scheme} G={group_size} step={step} {mode}: {detail}")
            print(f"  {step:<10} crash {cells[0]:<10} node loss {cells[1]:<10}", flush=True)

    chosen = harness.selected(options, harness.named(
        [bad_input, edited_between_launches, too_large_among_others, short_of_memory_on_resume,
         limited_by_cgroup, suggested_n_runs, ctrl_c_without_a_job_tag, limited_by_segment_limits,
         progress_lines, netlib_like, as_it_comes, blocks_wider_than_the_matrix, blas_threads,
         another_grid],
        lambda: (cluster, tmp, failures)) + [
        (f"faults-{c[0]}-m{c[1]}-G{c[2]}-N{c[5]}", lambda c=c: faults(c)) for c in CONFIGS])
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "HPL.dat"), "w") as f:
            f.write(hpl_dat(N, NB, 2, 2))
        for case in chosen:
            case()
    total = sum(counts.values())
    print(f"cases run {total}, passed with the reference residual {counts['exact']}, "
          f"wrong {counts['wrong']}, hung {counts['hung']}")
    return harness.report_failures(failures)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
