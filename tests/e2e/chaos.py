#!/usr/bin/env python3
"""Random failures under skt-run, as a cluster deals them out: SKT-HPL (N = 4608, 2x2, a checkpoint
every 8 of 48 panels) runs under skt-run on virtual nodes, in each trial one rank per node on n1-n4
with spares n5-n7, or two ranks per node on n1-n2 with spares n3-n4 (a node lost takes a rank of
each group). Each trial strikes one to three times at random moments of the run, its relaunches
and recoveries included, with a failure drawn from: a rank killed (its memory stays), a node lost
(its processes and its memory), a rank stopped (SIGSTOP: only silence), mpirun killed or sent
SIGTERM, skt-run itself killed or sent SIGTERM (then started again with the same command, as an
operator resumes it), a bit flipped in a rank's committed copy B or checksum C.

Every residual a run prints must be the one of the run without failure, and every trial must end
with skt-run's exit 0, its segments gone and no process of the job left; or, only where two of its
failures destroyed memory (a node, a flipped bit) and so may have struck one group twice between
two checkpoints (or during a rebuild), with the unrecoverable code 3; or, where a failure struck a
process once the work was done (its ranks in MPI_Finalize), with code 8, as skt-run documents. Anything else
(another residual, a failed check, another exit code, a trial that does not end) is reported with
the trial's seed, its failures and skt-run's output.

  tests/e2e/chaos.py --app build/hpl/skt-hpl --shm build/tools/skt-shm --run build/daemon/skt-run \
      --inject build/tools/skt-inject --hpldat hpl/HPL.dat [--trials 20] [--seed 1]
"""

import argparse
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time

import harness

RANKS = 4
# (nodes, spares, ranks per node)
LAYOUTS = [(["n1", "n2", "n3", "n4"], ["n5", "n6", "n7"], 1), (["n1", "n2"], ["n3", "n4"], 2)]
RESIDUAL = re.compile(r"^\|\|Ax-b\|\|\S*=\s*(\S+)\s+\.+\s+(PASSED|FAILED)", re.M)
KINDS = ["kill-rank", "lose-node", "stop-rank", "kill-mpirun", "term-mpirun", "kill-skt-run",
         "term-skt-run", "flip-B", "flip-C"]
MEMORY_LOST = {"lose-node", "flip-B", "flip-C"}
ENDS_A_PROCESS = {"kill-rank", "lose-node", "stop-rank", "kill-mpirun", "term-mpirun"}
# A flipped bit lands in the first 90 % of a rank's share of the matrix (N = 4608 on 4 ranks).
FLIP_BYTES = int(4608 * 4608 * 8 / RANKS * 0.9)


def signal_each(pids, sig):
    """Sends `sig` to each of `pids` that still exists; returns how many it reached."""
    reached = 0
    for pid in pids:
        try:
            os.kill(pid, sig)
            reached += 1
        except ProcessLookupError:
            pass
    return reached


def launchers_of(pid):
    """Pids of skt-run `pid`'s launcher (its child mpirun), as pgrep lists them."""
    listed = subprocess.run(["pgrep", "-P", str(pid), "-x", "mpirun|orterun|prterun"],
                            capture_output=True, text=True).stdout
    return [int(p) for p in listed.split()]


class Trial:
    """One skt-run job struck by `faults`, (seconds after the start, kind) each; `rng` draws the
    rank, node, byte and bit struck."""

    def __init__(self, options, root, name, faults, rng, layout):
        self.options = options
        self.job = harness.Cluster.new_job(name)
        self.faults = faults
        self.rng = rng
        self.nodes, spares, per_node = layout
        self.d = harness.SktRun(options, root)
        self.command = self.d.command(
            self.job, self.nodes + spares, len(spares), [options.hpldat],
            # --startup: a rank stopped before its first word is waited for that long.
            extra=["--ranks-per-node", str(per_node), "--silence", "3", "--startup", "30",
                   "--probe-interval", "1", "--max-restarts", "20"],
            program=[options.app, "--checkpoint-every", "8", "--progress", "0"])
        self.output = []
        self.done = []  # what each fault did, for the report
        self.process = None

    def start(self):
        self.process = self.d.start(self.command, {"SKT_LOG": "warn"})
        reader = threading.Thread(target=self._read, args=(self.process,), daemon=True)
        reader.start()
        self.reader = reader

    def _read(self, process):
        for line in process.stdout:
            self.output.append(line)

    def restart(self, sig):
        """skt-run ended by `sig` (alone, as the OOM killer or an operator would), then resumed."""
        os.kill(self.process.pid, sig)
        self.process.wait()
        self.reader.join()
        self.output.append(f"[chaos] skt-run ended by signal {sig} (exit {self.process.returncode}); "
                           "the same command again\n")
        self.start()

    def strike(self, kind):
        """Deals one failure; returns what it did (or why nothing)."""
        if kind in ("kill-skt-run", "term-skt-run"):
            self.restart(signal.SIGKILL if kind == "kill-skt-run" else signal.SIGTERM)
            return kind
        if kind in ("kill-mpirun", "term-mpirun"):
            sig = signal.SIGKILL if kind == "kill-mpirun" else signal.SIGTERM
            return kind if signal_each(launchers_of(self.process.pid), sig) else f"{kind}: no launcher up"
        if kind == "lose-node":
            node = self.rng.choice(self.d.ranklist(self.job)) if os.path.exists(
                os.path.join(self.d.state_dir(self.job), "ranklist")) else self.rng.choice(self.nodes)
            done = subprocess.run([self.options.inject, "node", node, "--job", self.job, "--registry",
                                   self.d.registry(self.job)], capture_output=True, text=True)
            return f"lose-node {node}" + ("" if done.returncode == 0 else f": {done.stderr.strip()}")
        rank = self.rng.randrange(RANKS)
        if kind == "kill-rank":
            done = subprocess.run([self.options.inject, "rank", str(rank), "--job", self.job],
                                  capture_output=True, text=True)
            return f"kill-rank {rank}" + ("" if done.returncode == 0 else f": {done.stderr.strip()}")
        if kind == "stop-rank":
            stopped = signal_each(harness.processes_of(self.job, rank), signal.SIGSTOP)
            return f"stop-rank {rank}" + ("" if stopped else ": no process")
        area = kind[-1]
        offset = self.rng.randrange(FLIP_BYTES)
        done = subprocess.run([self.options.inject, "flip", "--job", self.job + "+t0", "--rank", str(rank),
                               "--area", area, "--byte", str(offset), "--bit", str(self.rng.randrange(8))],
                              capture_output=True, text=True)
        return f"flip {area} rank {rank} byte {offset}" + (
            "" if done.returncode == 0 else f": {done.stderr.strip().splitlines()[-1]}")

    def run(self):
        start = time.monotonic()
        self.start()
        for at, kind in self.faults:
            time.sleep(max(0.0, start + at - time.monotonic()))
            if self.process.poll() is not None:
                self.done.append(f"{at:.1f} s {kind}: skt-run had ended")
                continue
            self.done.append(f"{at:.1f} s {self.strike(kind)}")
        try:
            self.process.wait(timeout=self.options.timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
            self.reader.join()
            return None
        self.reader.join()
        return self.process.returncode

    def text(self):
        return "".join(self.output)


def judge(trial, code, reference):
    """None when the trial ended as it must; else what is wrong."""
    out = trial.text()
    lost = sum(1 for _, kind in trial.faults if kind in MEMORY_LOST)
    if code is None:
        return f"did not end within {trial.options.timeout} s"
    found = RESIDUAL.findall(out)
    wrong = [r for r in found if r != reference]
    if wrong:
        return f"a run printed the residual {wrong[0]}, expected {reference}: WRONG ANSWER"
    if code == 0:
        if not found:
            return "exit 0 without a residual"
        if harness.processes_of(trial.job):
            return "exit 0, but processes of the job are left"
        listed = subprocess.run([trial.options.shm, "list"], capture_output=True, text=True).stdout
        if trial.job in listed:
            return "exit 0, but segments of the job are left"
        return None
    if code == 3 and lost >= 2 and "unrecoverable" in out.lower():
        return None
    if code == 8 and found and "the program's work ended" in out and any(
            kind in ENDS_A_PROCESS for _, kind in trial.faults):
        return None  # struck once the work was done, its ranks on their way out: a relaunch would redo it
    return f"exit {code}" + (" (refused after fewer than two losses of memory)" if code == 3 else "")


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for tool in ("app", "shm", "run", "inject"):
        parser.add_argument(f"--{tool}", required=True, help=f"the {tool} program (app: skt-hpl)")
    parser.add_argument("--hpldat", required=True, help="hpl/HPL.dat (N = 4608, 2x2)")
    parser.add_argument("--mpirun", default="mpirun")
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--first", type=int, default=0, help="the number of the first trial (to rerun one)")
    parser.add_argument("--logs", help="a directory for the output of every trial that did not pass")
    parser.add_argument("--timeout", type=int, default=300, help="seconds a trial may take")
    options = parser.parse_args(argv)
    if options.trials < 1:
        parser.error("--trials: give at least 1")
    if not os.path.isfile(options.hpldat):
        parser.error(f"--hpldat {options.hpldat}: no such file (hpl/HPL.dat in the source tree)")
    options.hpldat = os.path.abspath(options.hpldat)

    failures = []
    with tempfile.TemporaryDirectory() as root:
        clean = Trial(options, root, "chaos-ref", [], random.Random(0), LAYOUTS[0])
        began = time.monotonic()
        code = clean.run()
        length = time.monotonic() - began
        found = RESIDUAL.findall(clean.text())
        if code != 0 or not found:
            print(f"the run without failure did not pass (exit {code}):\n{harness.excerpt(clean.text())}",
                  file=sys.stderr)
            return 1
        reference = found[-1]
        print(f"reference: residual {reference[0]} {reference[1]}, skt-run's run {length:.1f} s; "
              f"{options.trials} trials, seed {options.seed}", flush=True)
        tally = {}
        for t in range(options.first, options.first + options.trials):
            rng = random.Random(f"{options.seed}:{t}")
            # Anywhere from the launch to the end of a run without failure (its set-up, the solve,
            # the verification), and so in whatever relaunches and recoveries earlier strikes caused.
            faults = sorted((round(rng.uniform(0.2, length), 1), rng.choice(KINDS))
                            for _ in range(rng.randint(1, 3)))
            layout = rng.choice(LAYOUTS)
            trial = Trial(options, root, f"chaos{t}", faults, rng, layout)
            began = time.monotonic()
            code = trial.run()
            verdict = judge(trial, code, reference)
            outcome = "FAILED" if verdict is not None else (
                "passed" if code == 0 else f"ended (exit {code})")
            tally[outcome] = tally.get(outcome, 0) + 1
            relaunches = len(re.findall(r"\] relaunched \(run", trial.text()))
            print(f"trial {t} ({len(layout[0])} nodes): {outcome} after {time.monotonic() - began:.1f} s; "
                  f"{'; '.join(trial.done)}; {relaunches} relaunches", flush=True)
            if options.logs and outcome != "passed":
                os.makedirs(options.logs, exist_ok=True)
                with open(os.path.join(options.logs, f"trial-{options.seed}-{t}.log"), "w") as f:
                    f.write(f"{'; '.join(trial.done)}\n{trial.text()}")
            if verdict is not None:
                failures.append(f"trial {t} (seed {options.seed}): {verdict}; failures: {'; '.join(trial.done)}")
                print(harness.excerpt(trial.text()), file=sys.stderr)
            subprocess.run([options.shm, "clean", "--job", trial.job, "--force"], capture_output=True)
        print("summary: " + ", ".join(f"{v} {k}" for k, v in sorted(tally.items())), flush=True)
    return harness.report_failures(failures)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
