#!/usr/bin/env python3
"""The storage level (SKT_DRAIN_DIR): committed copies drained to files in the background, and
restored when memory cannot serve. Two members of one XOR group lost, the whole job gone with its
segments (other nodes), every rank relaunched on another's node, a rank killed in the middle of a drain, a damaged drained file, a drain
directory that cannot be written, or that is full, a relaunch with another number of ranks, a
first launch over an earlier run's drains, and skt-drain's list, verify and remove. Then drains
with their checksums to a directory per node (SKT_DRAIN_WRITE=copy+checksum, node-local disks): a
whole allocation lost with one node's disk and a damaged file on another (both rebuilt from their
groups' files), and a group that lost both its files (refused). Every
relaunch that restores must print the result of a run without failure (and, with
--verify-recovery, replay the computation to the restored iteration and compare byte for byte);
every one that cannot must say why, with the right exit code, and change nothing."""

import contextlib
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile

import harness

# Checkpoints at iterations 2, 4, 6, ... (epochs 1, 2, 3, ...); every second one is drained. A
# drained epoch is complete once every rank's file is written, at the latest when the next
# checkpoint begins (it waits for the drain): a crash at iteration 11 finds epoch 5 committed in
# memory and epoch 4 complete in storage, the older drained epoch 2 removed.
APP_ARGS = ["--iterations", "12", "--checkpoint-every", "2", "--bytes", "300000"]
NODES = [f"n{r}" for r in range(4)]  # G=2: groups {0,2} and {1,3}


@contextlib.contextmanager
def drained_job(cluster, drains, prefix):
    """A new job tag; its segments and drained epochs are removed at the end, whatever happened."""
    job = cluster.new_job(prefix)
    try:
        yield job
    finally:
        cluster.clean(job)
        drains.remove(job)


class Drains:
    def __init__(self, options, root):
        self.tool = options.drain
        self.root = root

    def env(self, job, **extra):
        return dict({"SKT_JOB": job, "SKT_GROUP_SIZE": "2", "SKT_DRAIN_DIR": self.root,
                     "SKT_DRAIN_EVERY": "2"}, **extra)

    def run(self, *args):
        return subprocess.run([self.tool, *args, "--dir", self.root], capture_output=True, text=True)

    def remove(self, job):
        self.run("remove", "--job", job)

    def epoch_file(self, job, epoch, rank):
        return os.path.join(self.root, job, f"epoch-{epoch:012d}", f"rank-{rank:06d}.skt")


def crashed_first_launch(cluster, drains, checks, job, nodes, extra_env=None, args=None):
    run = cluster.launch(nodes, args or APP_ARGS + ["--crash-at", "11", "--crash-rank", "1"],
                         drains.env(job, SKT_RESTART="0", **(extra_env or {})))
    checks.expect(run.code not in (0, 2, 3) and not run.hung, f"{job}: the first launch crashed", run)
    return run


def beyond_tolerance(cluster, drains, checks, reference):
    with drained_job(cluster, drains, "beyond") as job:
        nodes = list(NODES)
        crashed_first_launch(cluster, drains, checks, job, nodes)
        listed = drains.run("list", "--job", job).stdout
        checks.expect(re.search(r"\s4\s+complete\s+4\s", listed) and
                      not re.search(r"\s2\s+(in)?complete\s", listed),
                      "skt-drain list: epoch 4 complete on 4 ranks, the older epoch 2 removed", listed)
        for r in (1, 3):
            cluster.lose_node(job, nodes[r])
            nodes[r] += "x"
        run = cluster.launch(nodes, APP_ARGS + ["--verify-recovery"], drains.env(job, SKT_RESTART="1"))
        checks.expect(run.code == 0 and run.result == reference and run.epoch == 4,
                      "ranks 1 and 3 (one XOR group) lost: epoch 4 restored from storage, the same "
                      "result, replayed byte for byte", run)
        checks.expect("restoring drained epoch 4 from storage" in run.err and "group 1 lost" in run.err,
                      "the relaunch says memory could not serve (group 1 lost) and storage did", run)


def relaunched_elsewhere(cluster, drains, checks, job, reference, what):
    """Every node's memory gone (a new allocation): the relaunch on other nodes restores epoch 4."""
    cluster.clean(job)
    others = [f"m{r}" for r in range(4)]
    run = cluster.launch(others, APP_ARGS + ["--verify-recovery"], drains.env(job, SKT_RESTART="1"))
    checks.expect(run.code == 0 and run.result == reference and run.epoch == 4, what, run)


def whole_job_elsewhere(cluster, drains, checks, reference):
    with drained_job(cluster, drains, "elsewhere") as job:
        crashed_first_launch(cluster, drains, checks, job, NODES)
        cluster.clean(job)  # every node's memory is gone: a new allocation
        checks.expect(cluster.segment_count(job) == 0, "no segment of the job is left")
        others = [f"m{r}" for r in range(4)]
        first = cluster.launch(others, APP_ARGS, drains.env(job, SKT_RESTART="0"))
        checks.expect(first.code == 2 and "SKT_RESTART=0" in first.err and "skt-drain remove" in first.err,
                      "a first launch (SKT_RESTART=0) over the drains of an earlier run is refused "
                      "(exit 2) and says how to remove them", first)
        cluster.clean(job)
        fewer = cluster.launch(others[:2], APP_ARGS, drains.env(job, SKT_RESTART="1"))
        checks.expect(fewer.code == 2 and "written by 4 ranks, this run has 2" in fewer.err,
                      "a relaunch on 2 ranks is refused (exit 2): the epoch was drained by 4", fewer)
        cluster.clean(job)
        other = cluster.launch(others, [("300008" if a == "300000" else a) for a in APP_ARGS],
                               drains.env(job, SKT_RESTART="1"))
        checks.expect(other.code == 2 and "differ from those of drained epoch 4" in other.err,
                      "a relaunch declaring other regions is refused (exit 2)", other)
        cluster.clean(job)
        unsaid = cluster.launch(others, APP_ARGS + ["--seed", "2"], drains.env(job))
        checks.expect(unsaid.code == 2 and "written by another command" in unsaid.err and
                      "skt-drain remove" in unsaid.err,
                      "another command with SKT_RESTART unset is refused (exit 2): the drained "
                      "epoch is of another computation", unsaid)
        cluster.clean(job)
        relaunched_elsewhere(cluster, drains, checks, job, reference,
                             "the whole job relaunched on other nodes with nothing in memory: epoch 4 "
                             "from storage, the same result")


def allocation_ends(cluster, drains, checks, reference):
    with drained_job(cluster, drains, "allocend") as job:
        # The program stops after iteration 8, whose checkpoint (epoch 4) is drained, and ends its
        # context keeping the checkpoints (skt_finalize(ctx, 0)): the drain in flight is finished
        # and completed. The allocation ends: every node's memory is gone.
        first = cluster.launch(NODES, APP_ARGS + ["--stop-after", "8"], drains.env(job, SKT_RESTART="0"))
        checks.expect(first.code == 0 and "STOPPED after iteration 8" in first.out,
                      "a program stopping after iteration 8 keeps its checkpoints and exits 0", first)
        relaunched_elsewhere(cluster, drains, checks, job, reference,
                             "its last epoch (4), drained at the very end, restores on other nodes: the "
                             "same result")


def shifted_nodes(cluster, drains, checks, reference):
    """The relaunch runs every rank on the node of the next one (a requeue that lost the first node
    of its list): no rank can restore from memory. Where storage holds the epoch memory committed,
    storage serves, saying why memory could not, and what memory held under other ranks is removed:
    only the node left out keeps its segments. Where memory committed a newer epoch than storage
    holds, the relaunch is refused with every segment kept, and the right placement restores it."""
    with drained_job(cluster, drains, "shifted") as job:
        first = cluster.launch(NODES, APP_ARGS + ["--stop-after", "8"], drains.env(job, SKT_RESTART="0"))
        checks.expect(first.code == 0 and "STOPPED after iteration 8" in first.out,
                      "a program stopping after iteration 8 (epoch 4, drained) keeps its checkpoints", first)
        run = cluster.launch(["n1", "n2", "n3", "n4"], APP_ARGS + ["--verify-recovery"],
                             drains.env(job, SKT_RESTART="1"))
        checks.expect(run.code == 0 and run.result == reference and run.epoch == 4 and
                      "not where it places the ranks" in run.err and
                      "restoring drained epoch 4 from storage" in run.err,
                      "every rank on the next one's node, storage as new as memory: epoch 4 restored "
                      "from storage, saying why memory could not serve, with the same result", run)
        checks.expect(cluster.segment_count(job) == 2 and "are removed" in run.err,
                      "the segments left under other ranks are removed: only n0's 2 stay", run)
    with drained_job(cluster, drains, "newer") as job:
        crashed_first_launch(cluster, drains, checks, job, NODES)  # epoch 5 committed, 4 drained
        kept = cluster.segment_count(job)
        run = cluster.launch(["n1", "n2", "n3", "n4"], APP_ARGS, drains.env(job, SKT_RESTART="1"))
        checks.expect(run.code == 2 and "not where it places the ranks" in run.err and
                      "holds epoch 4, older than their epoch 5" in run.err and
                      cluster.segment_count(job) == kept,
                      "every rank on the next one's node, memory newer than storage: refused (exit 2), "
                      "every segment kept", run)
        again = cluster.launch(NODES, APP_ARGS + ["--verify-recovery"], drains.env(job, SKT_RESTART="1"))
        checks.expect(again.code == 0 and again.result == reference and again.epoch == 5,
                      "then each rank on its own node: epoch 5 from memory, the same result", again)


def killed_mid_drain(cluster, drains, checks, reference):
    with drained_job(cluster, drains, "middrain") as job:
        nodes = list(NODES)
        # Rank 1 dies while it writes its file of epoch 4; epoch 2 is the last complete one.
        first = cluster.launch(nodes, APP_ARGS, drains.env(job, SKT_RESTART="0", SKT_FAULT="drain:1:4"))
        checks.expect(first.code not in (0, 2, 3) and not first.hung,
                      "rank 1 killed in the middle of draining epoch 4", first)
        epoch4 = os.path.dirname(drains.epoch_file(job, 4, 1))
        checks.expect(not os.path.exists(os.path.join(epoch4, "MANIFEST")) and
                      not os.path.exists(drains.epoch_file(job, 4, 1)),
                      "epoch 4 has no manifest and rank 1's file never got its name")
        for r in (1, 3):
            cluster.lose_node(job, nodes[r])
            nodes[r] += "x"
        run = cluster.launch(nodes, APP_ARGS + ["--verify-recovery"], drains.env(job, SKT_RESTART="1"))
        checks.expect(run.code == 0 and run.result == reference and run.epoch == 2,
                      "then one group lost: the previous complete epoch (2) is restored, the same "
                      "result", run)


def damaged_file(cluster, drains, checks):
    with drained_job(cluster, drains, "damaged") as job:
        nodes = list(NODES)
        crashed_first_launch(cluster, drains, checks, job, nodes)
        victim = drains.epoch_file(job, 4, 3)
        with open(victim, "r+b") as f:
            f.seek(os.path.getsize(victim) - 1000)
            byte = f.read(1)
            f.seek(-1, os.SEEK_CUR)
            f.write(bytes([byte[0] ^ 0x10]))
        verify = drains.run("verify", "--job", job)
        checks.expect(verify.returncode == 1 and "rank     3: DAMAGED" in verify.stdout and
                      "does not match its CRC" in verify.stdout,
                      "skt-drain verify finds the flipped bit in rank 3's file (exit 1)",
                      verify.stdout + verify.stderr)
        for r in (1, 3):
            cluster.lose_node(job, nodes[r])
            nodes[r] += "x"
        survivors = cluster.digests(job)
        run = cluster.launch(nodes, APP_ARGS, drains.env(job, SKT_RESTART="1"))
        checks.expect(run.code == 3 and run.result is None and "rank-000003.skt is damaged" in run.err
                      and "group 1 lost" in run.err,
                      "one group lost and rank 3's drained file damaged: refused as unrecoverable "
                      "(exit 3), naming the file and the lost group, no result", run)
        checks.expect(cluster.digests(job) == survivors and len(survivors) > 0,
                      f"the survivors' {len(survivors)} segments are untouched by the refusal")


def unwritable_and_full(cluster, drains, checks, reference, root):
    with drained_job(cluster, drains, "nowrite") as job:
        blocker = os.path.join(root, "a-file")
        with open(blocker, "w") as f:
            f.write("not a directory\n")
        run = cluster.launch(NODES, APP_ARGS, drains.env(job, SKT_RESTART="0",
                                                         SKT_DRAIN_DIR=os.path.join(blocker, "drains")))
        reports = run.err.count("the drain of epoch")
        checks.expect(run.code == 0 and run.result == reference and reports == 1 and
                      "Not a directory" in run.err,
                      "a drain directory that cannot be created: the run ends with the same result, "
                      "the error reported once, clearly", run)
    if os.geteuid() != 0:
        print("skip a full disk: making a device like /dev/full needs root")
        return
    with drained_job(cluster, drains, "full") as job:
        # Rank 0's file of epoch 2 is a device that is always full, like /dev/full: made in
        # place, since the library follows no symbolic link in a drain.
        part = drains.epoch_file(job, 2, 0) + ".part"
        os.makedirs(os.path.dirname(part), mode=0o700)
        full = os.stat("/dev/full").st_rdev
        os.mknod(part, 0o600 | stat.S_IFCHR, full)
        run = cluster.launch(NODES, APP_ARGS + ["--crash-at", "11", "--crash-rank", "2"],
                             drains.env(job, SKT_RESTART="0"))
        checks.expect(run.code not in (0, 2, 3) and run.err.count("the drain of epoch 2") == 1 and
                      "No space left on device" in run.err,
                      "a full disk for epoch 2: reported once (then the run crashed as staged)", run)
        listed = drains.run("list", "--job", job).stdout
        checks.expect(re.search(r"\s4\s+complete\s", listed) and
                      not re.search(r"\s2\s+(in)?complete\s", listed),
                      "the next drain (epoch 4) completed; nothing of epoch 2 is kept", listed)
        nodes = list(NODES)
        for r in (0, 2):
            cluster.lose_node(job, nodes[r])
            nodes[r] += "x"
        again = cluster.launch(nodes, APP_ARGS + ["--verify-recovery"], drains.env(job, SKT_RESTART="1"))
        checks.expect(again.code == 0 and again.result == reference and again.epoch == 4,
                      "then group 0 lost: epoch 4 from storage, the same result", again)


class NodeDrains(Drains):
    """Drains with checksums to a directory per virtual node, as node-local disks."""

    def __init__(self, options, root):
        super().__init__(options, os.path.join(root, "local-{node}"))

    def env(self, job, **extra):
        return super().env(job, SKT_DRAIN_WRITE="copy+checksum", **extra)

    def run(self, *args, node="n0"):
        return subprocess.run([self.tool, *args, "--dir", self.root, "--node", node],
                              capture_output=True, text=True)

    def remove(self, job):
        for node in NODES + [n + "x" for n in NODES]:  # the nodes and their replacements
            self.run("remove", "--job", job, node=node)

    def node_dir(self, node):
        return self.root.replace("{node}", node)

    def epoch_file(self, job, epoch, rank, node=None):
        return os.path.join(self.node_dir(node or NODES[rank]), job, f"epoch-{epoch:012d}",
                            f"rank-{rank:06d}.skt")


def node_local(cluster, options, checks, reference, root):
    drains = NodeDrains(options, root)
    with drained_job(cluster, drains, "nodelocal") as job:
        crashed_first_launch(cluster, drains, checks, job, NODES)
        files = [drains.epoch_file(job, 4, r) for r in range(4)]
        older = [drains.epoch_file(job, 2, r) for r in range(4)]
        checks.expect(all(map(os.path.exists, files)) and not any(map(os.path.exists, older)),
                      "each node's directory holds its rank's file of epoch 4; epoch 2's are removed")
        listed = drains.run("list", "--job", job, node="n2").stdout
        checks.expect(re.search(r"\s4\s+copy\+checksum\s+1 f\s", listed),
                      "skt-drain list on node n2: epoch 4, drained with checksums, one file here",
                      listed)
        # The allocation is lost (every node's memory), node n3 with its disk; rank 2's file on
        # n2 has a flipped bit in its checksum part.
        cluster.clean(job)
        shutil.rmtree(drains.node_dir("n3"))
        with open(files[2], "r+b") as f:
            f.seek(os.path.getsize(files[2]) - 10)
            byte = f.read(1)
            f.seek(-1, os.SEEK_CUR)
            f.write(bytes([byte[0] ^ 0x04]))
        verify = drains.run("verify", "--job", job, node="n2")
        checks.expect(verify.returncode == 1 and "DAMAGED" in verify.stdout and
                      "of the checksum" in verify.stdout,
                      "skt-drain verify on node n2 finds the flipped bit in the checksum (exit 1)",
                      verify.stdout + verify.stderr)
        nodes = ["n0", "n1", "n2", "n3x"]

        def contents():
            return [open(f, "rb").read() for f in files[:3]]

        before = contents()
        other = cluster.launch(nodes, [("300008" if a == "300000" else a) for a in APP_ARGS],
                               drains.env(job, SKT_RESTART="1"))
        checks.expect(other.code == 2 and "differ from those of drained epoch 4" in other.err and
                      contents() == before,
                      "a relaunch declaring other regions is refused (exit 2), and changes no file",
                      other)
        cluster.clean(job)
        unsaid = cluster.launch(nodes, APP_ARGS + ["--seed", "2"], drains.env(job))
        checks.expect(unsaid.code == 2 and "written by another command" in unsaid.err and
                      "on every node" in unsaid.err and contents() == before,
                      "another command with SKT_RESTART unset is refused (exit 2) from the nodes' "
                      "files too, and changes no file", unsaid)
        cluster.clean(job)
        run = cluster.launch(nodes, APP_ARGS + ["--verify-recovery"], drains.env(job, SKT_RESTART="1"))
        checks.expect(run.code == 0 and run.result == reference and run.epoch == 4,
                      "memory gone everywhere, n3's disk gone, rank 2's file damaged: epoch 4 "
                      "restored from storage, the same result, replayed byte for byte", run)
        checks.expect("rank-000002.skt is damaged" in run.err and
                      "rebuilt from their groups' files, for want of a whole file of their own: "
                      "ranks 2, 3" in run.err,
                      "the relaunch names the damaged file and the ranks rebuilt from their groups",
                      run)
    with drained_job(cluster, drains, "nodelost") as job:
        crashed_first_launch(cluster, drains, checks, job, NODES)
        cluster.clean(job)
        for node in ("n1", "n3"):
            shutil.rmtree(drains.node_dir(node))
        run = cluster.launch(["n0", "n1x", "n2", "n3x"], APP_ARGS, drains.env(job, SKT_RESTART="1"))
        checks.expect(run.code == 3 and run.result is None and "storage cannot serve either" in run.err
                      and "no rank of group 1 holds a file" in run.err,
                      "both nodes of group 1 lost with their disks: refused as unrecoverable (exit 3), "
                      "saying why, no result", run)
    # Reed-Solomon rebuilds from its files too: one group of 4 tolerating two losses, both n1's and
    # n3's disks gone. Groups of one rank have no parity: with every disk there, they restore.
    for code, lost_disks in (({"SKT_SCHEME": "rs", "SKT_PARITY": "2", "SKT_GROUP_SIZE": "4"},
                              ("n1", "n3")),
                             ({"SKT_SCHEME": "xor", "SKT_GROUP_SIZE": "1"}, ())):
        with drained_job(cluster, drains, "nodecode") as job:
            crashed_first_launch(cluster, drains, checks, job, NODES, extra_env=code)
            cluster.clean(job)
            for node in lost_disks:
                shutil.rmtree(drains.node_dir(node))
            nodes = [n + "x" if n in lost_disks else n for n in NODES]
            run = cluster.launch(nodes, APP_ARGS + ["--verify-recovery"],
                                 drains.env(job, SKT_RESTART="1", **code))
            checks.expect(run.code == 0 and run.result == reference and run.epoch == 4,
                          f"scheme {code['SKT_SCHEME']}, groups of {code['SKT_GROUP_SIZE']}, memory "
                          f"gone and the disks of {', '.join(lost_disks) or 'no node'} too: epoch 4 "
                          "restored from the groups' files, the same result, replayed byte for "
                          "byte", run)
    refused = cluster.launch(NODES, APP_ARGS, dict(Drains(options, drains.root).env("bad-config"),
                                                   SKT_RESTART="0"))
    checks.expect(refused.code == 2 and "SKT_DRAIN_WRITE=copy+checksum" in refused.err,
                  "a directory per node without the checksums drained is refused (exit 2), naming "
                  "the setting", refused)


def tool_usage(drains, checks):
    bare = subprocess.run([drains.tool, "list"], capture_output=True, text=True,
                          env={k: v for k, v in os.environ.items() if k != "SKT_DRAIN_DIR"})
    checks.expect(bare.returncode == 2 and "give --dir or set SKT_DRAIN_DIR" in bare.stderr,
                  "skt-drain without a directory says what to give (exit 2)", bare.stderr)
    missing = drains.run("verify", "--job", "nothing-here")
    checks.expect(missing.returncode == 2 and "holds no complete drained epoch" in missing.stderr,
                  "skt-drain verify of a job with no drain: exit 2 and why", missing.stderr)


def main(argv):
    import argparse

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--drain", required=True, help="the skt-drain tool")
    own, rest = parser.parse_known_args(argv)
    options = harness.arguments(rest)
    options.drain = own.drain
    cluster = harness.Cluster(options.app, options.shm, options.mpirun, options.timeout)
    checks = harness.Checks()
    chosen = harness.selected(options, harness.named(
        [beyond_tolerance, whole_job_elsewhere, allocation_ends, shifted_nodes, killed_mid_drain, damaged_file,
         unwritable_and_full], lambda: (cluster, drains, checks, reference, root)) + [
        ("node-local", lambda: node_local(cluster, options, checks, reference, root)),
        ("tool-usage", lambda: tool_usage(drains, checks))])
    root = tempfile.mkdtemp(prefix="skt-drain-e2e-")
    try:
        drains = Drains(options, root)
        reference = cluster.reference(4, APP_ARGS)
        for case in chosen:
            case()
        leftover = [d for d in os.listdir(root) if d != "a-file" and
                    not (d.startswith("local-") and not os.listdir(os.path.join(root, d)))]
        checks.expect(not leftover, "every job's drains were removed", str(leftover))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return harness.report_failures(checks.failures)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
