#!/usr/bin/env python3
"""What another local user can do to a job, tried as a second user created here (root only; skipped
otherwise):
  segments   a job's segments are mode 0600 and owned by the caller: the other user can neither
             attach to them nor remove them, and skt-shm run by that user neither lists nor
             cleans them;
  drains     a job directory another user made in a shared drain root, with an epoch in it: refused,
             never restored; the job's own drains are 0700 and 0600;
  transport-directory
             the directory of the ranks' shared-memory transport that skt-run makes on virtual
             nodes: its own, 0700, whatever the other user made in /dev/shm beforehand;
  monitor    datagrams the other user forges to skt-run's monitor port (the job's tag read from
             /proc, the port from /proc/net/udp), saying every rank exited 0, are ignored: the
             run is not taken for a success.

  security.py --app A --shm S --run R --inject I [--case NAME]"""

import os
import pwd
import re
import shutil
import subprocess
import sys
import tempfile

import harness

USER = "skt-test-other"
ATTEMPT = r"""
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
shmid = int(sys.argv[1])
attached = libc.shmat(shmid, None, 0)
attach_errno = ctypes.get_errno()
removed = libc.shmctl(shmid, 0, None)  # IPC_RMID
remove_errno = ctypes.get_errno()
print(f"attach {'ok' if attached not in (None, ctypes.c_void_p(-1).value) else 'refused'} {attach_errno}")
print(f"remove {'ok' if removed == 0 else 'refused'} {remove_errno}")
"""


FORGE = r"""
import socket, sys
port, job, ranks = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
out = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for rank in range(ranks):
    for line in (f"skt1 {job} {rank} 0 {4000 + rank} finalize 0 0\n",
                 f"skt1 {job} {rank} 0 {4000 + rank} exit 0 0\n"):
        out.sendto(line.encode(), ("127.0.0.1", port))
print("sent")
"""


def as_other_user(d, options):
    """The command prefix that runs as the other user, and a copy of the tool it may run."""
    os.chmod(d, 0o755)
    tool = os.path.join(d, "skt-shm")
    shutil.copy(options.shm, tool)
    os.chmod(tool, 0o755)
    return [shutil.which("runuser") or "/usr/sbin/runuser", "-u", USER, "--"], tool


def skt_run_pid(job):
    """The skt-run of `job`, as another user finds it (its command line is public)."""
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                words = f.read().split(b"\0")
        except OSError:
            continue
        if words and words[0].endswith(b"skt-run") and job.encode() in words:
            return int(entry)
    return None


def udp_port_of(pid):
    """The port of the UDP socket process `pid` listens on, as another user finds it."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        target = os.readlink(f"/proc/{pid}/fd/{fd}")
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    with open("/proc/net/udp") as f:
        for line in f.readlines()[1:]:
            fields = line.split()
            if fields[9] in inodes:
                return int(fields[1].split(":")[1], 16)
    return None


def monitor(options, cluster, checks):
    """Forged datagrams saying every rank exited 0 do not end the run as a success."""
    job = cluster.new_job("secm")
    with tempfile.TemporaryDirectory() as root, tempfile.TemporaryDirectory() as d:
        other, _ = as_other_user(d, options)
        script = os.path.join(d, "forge.py")
        with open(script, "w") as f:
            f.write(FORGE)
        os.chmod(script, 0o644)
        runner = harness.SktRun(options, root)
        forged = []

        def forge(_):
            port = udp_port_of(skt_run_pid(job))
            sent = subprocess.run([*other, "/usr/bin/python3", script, str(port), job, "2"], capture_output=True,
                                  text=True, env={"PATH": "/usr/bin:/bin"}, cwd=d)
            forged.append(sent.stdout.strip() == "sent")
            runner.kill_node(job, "n2")

        code, out = runner.run(runner.command(job, ["n1", "n2", "n3"], 1, ["--iterations", "9", "--checkpoint-every",
                                                                          "3", "--pause", "0:4"]),
                               on_pause=forge)
        checks.expect(forged == [True], "the other user sent each rank's 'finalize' and 'exit 0' to skt-run's port")
        checks.expect("not signed by this launch's ranks" in out, "skt-run says it ignores them", out)
        checks.expect("run 1 succeeded" not in out and "replacing node n2 by spare n3" in out and code == 0
                      and harness.result_of(out) is not None,
                      "the run is not taken for a success: n2's loss is seen, the job relaunched and finished",
                      out)
        cluster.clean(job)


def transport_directory(options, cluster, checks):
    """The directory skt-run gives the ranks' shared-memory transport on virtual nodes is its own,
    made 0700: not one another user made beforehand under the name the next launch would take."""
    job = cluster.new_job("sect")
    with tempfile.TemporaryDirectory() as root, tempfile.TemporaryDirectory() as d:
        other, _ = as_other_user(d, options)
        runner = harness.SktRun(options, root)
        planted = []
        used = []

        def transport_of_ranks():
            found = set()
            for rank_pid in harness.processes_of(job):
                with open(f"/proc/{rank_pid}/environ", "rb") as f:
                    for entry in f.read().split(b"\0"):
                        if entry.startswith(b"OMPI_MCA_btl_vader_backing_directory="):
                            found.add(entry.split(b"=", 1)[1].decode())
            return found

        def at_pause(k):
            pid = skt_run_pid(job)
            if k == 0:
                # The other user makes the directory that launch 2 would have taken (mode 777), in
                # the directory the transport's backing files go to (/dev/shm unless set).
                base = os.path.dirname(next(iter(transport_of_ranks())))
                os.chmod(base, 0o1777)  # as /dev/shm is
                path = f"{base}/skt-run.{pid}.2"
                made = subprocess.run([*other, "/usr/bin/python3", "-c",
                                       f"import os; os.mkdir({path!r}); os.chmod({path!r}, 0o777)"],
                                      capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"}, cwd=d)
                planted.append(made.returncode == 0 and path)
                runner.kill_node(job, "n2")
            else:
                for path in transport_of_ranks():
                    st = os.stat(path)
                    used.append((path, st.st_uid == os.geteuid() and st.st_mode & 0o777 == 0o700))
                runner.kill_node(job, "n1")

        code, out = runner.run(runner.command(job, ["n1", "n2", "n3", "n4"], 2,
                                              ["--iterations", "9", "--checkpoint-every", "3", "--pause", "0:4",
                                               "--pause", "1:5"]), on_pause=at_pause)
        checks.expect(planted and planted[0], "the other user made /dev/shm/skt-run.<pid>.2, mode 777", out)
        checks.expect(used and planted and all(path != planted[0] and own for path, own in used),
                      f"launch 2's ranks use a directory of skt-run's own, 0700 ({used})", out)
        checks.expect(code == 0 and harness.result_of(out) is not None, "the job finished", out)
        if planted and planted[0]:
            shutil.rmtree(planted[0], ignore_errors=True)
        cluster.clean(job)


def drains(options, cluster, checks):
    """Drains under a shared root (mode 1777) are the job's user's alone: a job directory another
    user made there first, with an epoch of its own in it, is refused (exit 2, naming it), never
    restored; the job's own directories and files are 0700 and 0600."""
    job = cluster.new_job("secd")
    args = ["--iterations", "6", "--checkpoint-every", "3"]
    with tempfile.TemporaryDirectory() as d:
        other, _ = as_other_user(d, options)
        root = os.path.join(d, "drains")
        os.mkdir(root)
        os.chmod(root, 0o1777)
        planted = os.path.join(root, job)
        epoch = os.path.join(planted, "epoch-000000000003")
        made = subprocess.run([*other, "/usr/bin/python3", "-c",
                               f"import os; os.makedirs({epoch!r}); os.chmod({planted!r}, 0o777); "
                               f"open(os.path.join({epoch!r}, 'MANIFEST'), 'w').write('forged')"],
                              capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"}, cwd=d)
        checks.expect(made.returncode == 0, "the other user made the job's drain directory and an epoch in it",
                      made.stderr)
        env = {"SKT_JOB": job, "SKT_GROUP_SIZE": "2", "SKT_DRAIN_DIR": root}
        refused = cluster.launch(["n0", "n1"], args, env)
        checks.expect(refused.code == 2 and f"{planted} belongs to uid" in refused.err,
                      "the job refuses it: exit 2, naming the directory and its owner", refused.describe())
        shutil.rmtree(planted)
        crashed = cluster.launch(["n0", "n1"], args + ["--crash-at", "5", "--crash-rank", "1"], env)
        modes = {}
        for top, dirs, files in os.walk(os.path.join(root, job)):
            for name in dirs + files:
                path = os.path.join(top, name)
                modes[path] = (os.stat(path).st_mode & 0o777, os.path.isdir(path))
        modes[os.path.join(root, job)] = (os.stat(os.path.join(root, job)).st_mode & 0o777, True)
        checks.expect(crashed.code not in (0, 2, 3) and len(modes) > 2 and
                      all(mode == (0o700 if is_dir else 0o600) for mode, is_dir in modes.values()),
                      f"its own drains: directories 0700, files 0600 ({len(modes)} of them)",
                      f"{modes} {crashed.describe()}")
        final = cluster.launch(["n0", "n1"], args + ["--verify-recovery"], dict(env, SKT_RESTART="1"))
        checks.expect(final.code == 0 and final.epoch == 1, "and its relaunch restores them", final.describe())
        cluster.clean(job)


def segments(options, cluster, checks):
    """A job's segments: not attached, removed, listed nor cleaned by another user."""
    expect = checks.expect
    job = cluster.new_job("sec")
    try:
        # A job that crashes leaves its segments behind.
        run = cluster.launch(["n0", "n1"], ["--iterations", "6", "--checkpoint-every", "3", "--crash-at", "4",
                                            "--crash-rank", "1"], {"SKT_JOB": job, "SKT_GROUP_SIZE": "2"})
        expect(run.code not in (0, 2, 3), "the job crashed and left its segments", run.describe())
        listed = cluster.shm_tool("list", "--job", job)
        shmids = [int(m.group(1)) for m in re.finditer(r"^\s*(\d+)\s+0x", listed, re.M)]
        expect(len(shmids) > 0, f"{len(shmids)} segments of the job", listed)
        ipcs = subprocess.run(["ipcs", "-m"], capture_output=True, text=True).stdout
        modes = {int(l.split()[1]): (l.split()[2], l.split()[3]) for l in ipcs.splitlines()
                 if re.match(r"^0x[0-9a-f]+\s+\d+", l)}
        expect(all(modes.get(s) == ("root", "600") for s in shmids),
               "every segment is owned by the caller with mode 600", ipcs)
        with tempfile.TemporaryDirectory() as d:
            other, tool = as_other_user(d, options)
            script = os.path.join(d, "attempt.py")
            with open(script, "w") as f:
                f.write(ATTEMPT)
            os.chmod(script, 0o644)
            # The system's interpreter: the user running the tests may have one the other cannot read.
            python = "/usr/bin/python3"
            env = {"PATH": "/usr/bin:/bin", "SKT_LOG": "off"}
            for shmid in shmids[:3]:
                tried = subprocess.run([*other, python, script, str(shmid)], capture_output=True,
                                       text=True, env=env, cwd=d)
                expect("attach refused 13" in tried.stdout and "remove refused 1" in tried.stdout,
                       f"the other user cannot attach (EACCES) or remove (EPERM) segment {shmid}",
                       tried.stdout + tried.stderr)
            seen = subprocess.run([*other, tool, "list"], capture_output=True, text=True, env=env, cwd=d)
            expect(seen.returncode == 0 and job not in seen.stdout,
                   "skt-shm run by the other user does not list them", seen.stdout + seen.stderr)
            cleaned = subprocess.run([*other, tool, "clean", "--job", job], capture_output=True, text=True,
                                     env=env, cwd=d)
            expect("0 segments removed" in cleaned.stdout, "skt-shm clean run by the other user removes none",
                   cleaned.stdout + cleaned.stderr)
        after = cluster.shm_tool("list", "--job", job)
        still = [int(m.group(1)) for m in re.finditer(r"^\s*(\d+)\s+0x", after, re.M)]
        expect(sorted(still) == sorted(shmids), "every segment is still there")
        # And the owner's relaunch recovers from them.
        final = cluster.launch(["n0", "n1"], ["--iterations", "6", "--checkpoint-every", "3", "--verify-recovery"],
                               {"SKT_JOB": job, "SKT_GROUP_SIZE": "2", "SKT_RESTART": "1"})
        expect(final.code == 0 and final.epoch == 1, "the owner's relaunch restores epoch 1", final.describe())
    finally:
        cluster.clean(job)


CASES = {"segments": segments, "drains": drains, "monitor": monitor,
         "transport-directory": transport_directory}


def main(argv):
    import argparse

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for tool in ("app", "shm", "run", "inject"):
        parser.add_argument(f"--{tool}", required=True)
    parser.add_argument("--mpirun", default="mpirun")
    parser.add_argument("--timeout", type=int, default=120)
    parser.add_argument("--case", choices=sorted(CASES), action="append", help="only this case (repeatable)")
    options = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("SKIP: needs root to create a second user")
        return 77
    checks = harness.Checks()
    created = False
    try:
        pwd.getpwnam(USER)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", USER], check=True)
        created = True
    cluster = harness.Cluster(options.app, options.shm, options.mpirun, options.timeout)
    try:
        for name in options.case or CASES:
            print(f"-- {name}", flush=True)
            CASES[name](options, cluster, checks)
    finally:
        if created:
            subprocess.run(["userdel", USER], capture_output=True)
    return harness.report_failures(checks.failures)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
