#!/usr/bin/env python3
"""skt-shm verify scrubs a job's committed checkpoint. A job of 8 ranks in groups of 4 crashes
after its second checkpoint and leaves its segments; then:

  - verify, by one process and by one process per virtual node (the chunks then travel over MPI as
    they would between real nodes), finds every group clean, and changes nothing;
  - a bit flipped in one rank's committed copy B is located by the block CRCs and reported with its
    row, the rank and the region byte it belongs to (exit 1); flipped back, clean again; a bit
    flipped in a checksum C is reported too;
  - --repair rebuilds damaged items from their rows (bit for bit but under sum), after which
    verify finds everything clean; two damaged items of one xor row are refused, untouched;
  - with a node's memory gone, its group is reported as not verifiable (exit 2), the other clean;
  - a job killed while it overwrites B (flush) is reported as not verifiable, not as corrupt;

for xor, rs m=2, the double mode (the committed copy alternates) and sum (doubles).
"""

import os
import re
import subprocess
import sys

import harness

APP_ARGS = ["--iterations", "8", "--checkpoint-every", "3", "--bytes", "40000"]
NRANKS = 8
GROUP = 4


def main(argv):
    options = harness.arguments(argv, tools=("inject",))
    cluster = harness.Cluster(options.app, options.shm, options.mpirun, options.timeout)
    checks = harness.Checks()
    expect = checks.expect
    env_mpi = dict(os.environ, **harness.MPI_ENV)

    def verify(job, per_node=None, *extra):
        if per_node:
            command = [options.mpirun]
            for node in per_node:
                command += ["-n", "1", options.shm, "verify", "--job", job, "--node", node, *extra, ":"]
            command.pop()
        else:
            command = [options.shm, "verify", "--job", job, *extra]
        done = subprocess.run(command, capture_output=True, text=True, env=env_mpi, timeout=options.timeout)
        return done.returncode, done.stdout + done.stderr

    def inject(*args):
        done = subprocess.run([options.inject, "flip", *args], capture_output=True, text=True)
        return done.returncode, done.stdout + done.stderr

    configs = [({"SKT_SCHEME": "xor"}, []), ({"SKT_SCHEME": "rs", "SKT_PARITY": "2"}, []),
               ({"SKT_SCHEME": "xor", "SKT_MODE": "double"}, []), ({"SKT_SCHEME": "sum"}, ["--doubles"])]
    def damage_found_and_repaired(settings, extra):
        name = " ".join(f"{k}={v}" for k, v in settings.items())
        job = cluster.new_job("vfy")
        nodes = [f"n{r}" for r in range(NRANKS)]
        env = dict(settings, SKT_JOB=job, SKT_GROUP_SIZE=str(GROUP))
        try:
            run = cluster.launch(nodes, APP_ARGS + extra + ["--crash-at", "7", "--crash-rank", "1"], env)
            expect(run.code not in (0, 2, 3, 4), f"{name}: the job crashed after its second checkpoint", run)
            before = cluster.digests(job)

            code, out = verify(job)
            expect(code == 0 and "2 groups: 2 clean, 0 corrupt" in out and "epoch 2: clean" in out,
                   f"{name}: one process: both groups clean at epoch 2", out)
            code, out = verify(job, nodes)
            expect(code == 0 and "2 groups: 2 clean, 0 corrupt" in out,
                   f"{name}: one process per node: both groups clean", out)
            expect(cluster.digests(job) == before, f"{name}: verify changed nothing")

            # Rank 5 is in group 1 (ranks 1 3 5 7); byte 5000 of its copy is in its first region.
            code, out = inject("--job", job, "--rank", "5", "--byte", "5000", "--bit", "2")
            where = re.search(r"\((region '[^']+' byte \d+)\)", out)
            expect(code == 0 and where, f"{name}: a bit of rank 5's committed copy flipped", out)
            code, out = verify(job, nodes)
            located = out
            region = where.group(1).rsplit(" byte ", 1)[0] if where else "?"
            expect(code == 1 and re.search(r"group 1 .*CORRUPT: 1 item of .* does not match its CRCs", out) and
                   re.search(rf"rank 5, its committed copy: {re.escape(region)} bytes? \d+", out) and
                   (settings.get("SKT_SCHEME") == "sum" or f"rank 5, its committed copy: {where.group(1)}" in out) and
                   "group 0 " in out and "1 clean, 1 corrupt" in out,
                   f"{name}: the flipped bit is located in group 1 at rank 5's {where.group(1) if where else '?'}",
                   out)
            inject("--job", job, "--rank", "5", "--byte", "5000", "--bit", "2")
            code, out = verify(job)
            expect(code == 0, f"{name}: flipped back, clean again", out)

            code, out = inject("--job", job, "--rank", "2", "--byte", "100", "--area", "C")
            code, out = verify(job)
            expect(code == 1 and re.search(r"group 0 .*CORRUPT", out) and "rank 2, its checksum chunk" in out,
                   f"{name}: a bit flipped in rank 2's checksum is reported", out)
            inject("--job", job, "--rank", "2", "--byte", "100", "--area", "C")

            # Damage in both groups, repaired offline from the groups, one process per node.
            inject("--job", job, "--rank", "5", "--byte", "5000", "--bit", "2")
            inject("--job", job, "--rank", "2", "--byte", "100", "--area", "C")
            code, out = verify(job, nodes, "--repair")
            expect(code == 0 and out.count("repaired 1 item from the group") == 2 and
                   "2 groups: 2 clean, 0 corrupt" in out,
                   f"{name}: --repair rebuilds both items and verifies both groups clean", out)
            code, out = verify(job)
            exact = settings.get("SKT_SCHEME") != "sum"
            expect(code == 0 and (not exact or cluster.digests(job) == before),
                   f"{name}: after the repair, clean{' and bit for bit as before' if exact else ''}", out)

            # Two items of one row beyond what the code tolerates: refused, nothing written. The
            # row of rank 5's damaged byte has its checksum at member row mod G, chunk row div G.
            row = re.search(r"row (\d+): rank 5, its committed copy", located)
            if settings.get("SKT_PARITY") != "2" and row:
                holder = [1, 3, 5, 7][int(row.group(1)) % GROUP]
                checksum_byte = str(int(row.group(1)) // GROUP * 262144 + 100)
                inject("--job", job, "--rank", "5", "--byte", "5000", "--bit", "2")
                inject("--job", job, "--rank", str(holder), "--byte", checksum_byte, "--area", "C")
                damaged = cluster.digests(job)
                code, out = verify(job, None, "--repair")
                expect(code == 1 and f"not repaired: row {row.group(1)} lost 2 items" in out and
                       cluster.digests(job) == damaged,
                       f"{name}: two damaged items of one row are not repaired, and left untouched", out)
                inject("--job", job, "--rank", "5", "--byte", "5000", "--bit", "2")
                inject("--job", job, "--rank", str(holder), "--byte", checksum_byte, "--area", "C")

            cluster.lose_node(job, "n3")
            code, out = verify(job)
            expect(code == 2 and re.search(r"group 1 .*not verified: .*rank\(s\) 3 were not found", out) and
                   "1 clean, 0 corrupt, 1 not verified" in out,
                   f"{name}: with node n3's memory gone, group 1 is not verifiable and group 0 clean", out)
        finally:
            cluster.clean(job)

    def interrupted_flush():
        job = cluster.new_job("vfy")
        try:
            run = cluster.launch([f"n{r}" for r in range(NRANKS)], APP_ARGS,
                                 {"SKT_JOB": job, "SKT_GROUP_SIZE": str(GROUP), "SKT_FAULT": "flush:6:2"})
            expect(run.code not in (0, 2, 3, 4), "a job killed in the middle of overwriting B", run)
            code, out = verify(job)
            expect(code == 2 and re.search(r"rank 6 is writing epoch 2", out) and "0 corrupt" in out,
                   "the interrupted flush is reported as not verifiable, not as corruption", out)
        finally:
            cluster.clean(job)

    def no_segments():
        code, out = verify("vfy-none")
        expect(code == 2 and "no checkpoint segments" in out, "a job with no segments: exit 2", out)

    scheme_name = lambda settings: "-".join(v.lower() for v in settings.values())
    for case in harness.selected(options, [
            (f"damage-{scheme_name(settings)}", lambda s=settings, e=extra: damage_found_and_repaired(s, e))
            for settings, extra in configs] + [("interrupted-flush", interrupted_flush),
                                               ("no-segments", no_segments)]):
        case()
    return harness.report_failures(checks.failures)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
