#!/usr/bin/env python3
"""Segments belong to their user: a job's segments are mode 0600 and owned by the caller; a second
user (created here) can neither attach to them nor remove them, and skt-shm run by that user
neither lists nor cleans them. Root only (it creates the user); skipped otherwise."""

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


def main(argv):
    options = harness.arguments(argv)
    if os.geteuid() != 0:
        print("SKIP: needs root to create a second user")
        return 77
    checks = harness.Checks()
    expect = checks.expect

    created = False
    try:
        pwd.getpwnam(USER)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", USER], check=True)
        created = True
    cluster = harness.Cluster(options.app, options.shm, options.mpirun, options.timeout)
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
            os.chmod(d, 0o755)
            tool = os.path.join(d, "skt-shm")
            shutil.copy(options.shm, tool)
            os.chmod(tool, 0o755)
            script = os.path.join(d, "attempt.py")
            with open(script, "w") as f:
                f.write(ATTEMPT)
            os.chmod(script, 0o644)
            other = [shutil.which("runuser") or "/usr/sbin/runuser", "-u", USER, "--"]
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
        if created:
            subprocess.run(["userdel", USER], capture_output=True)
    return harness.report_failures(checks.failures)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
