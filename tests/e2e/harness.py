"""Launching MPI jobs on virtual nodes of one host, for selfckpt's end-to-end tests.

A virtual node is a value of SKT_NODE: each rank gets its own through an MPMD launch line. A node
is lost by removing its segments (its memory) with skt-shm and relaunching its ranks under a new
node name, as a spare would take them.
"""

import atexit
import ctypes
import dataclasses
import errno
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid

MPI_ENV = {
    "OMPI_ALLOW_RUN_AS_ROOT": "1",
    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    "OMPI_MCA_rmaps_base_oversubscribe": "1",
    "OPENBLAS_NUM_THREADS": "1",
    # A second's wait between SIGTERM and SIGKILL after a rank dies (tests/meson.build says why).
    "OMPI_MCA_odls_base_sigkill_timeout": "0",
}

# Open MPI's shared-memory transport keeps a 4 MiB file per rank in /dev/shm, which a launcher
# killed with SIGKILL (as tests kill some) leaves behind: the launches of a test process use
# directories of their own, removed when it exits; one for the test's own launches, one for
# skt-run's, which must leave nothing in it.
TRANSPORT_VARIABLE = "OMPI_MCA_btl_vader_backing_directory"
_transport = {}


def transport_directory(user="test"):
    """The directory the launches of `user` ("test" or "skt-run") in this process keep Open MPI's
    shared-memory files in."""
    if user not in _transport:
        _transport[user] = tempfile.mkdtemp(prefix=f"skt-e2e-{user}-",
                                            dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
        atexit.register(shutil.rmtree, _transport[user], True)
    return _transport[user]


def daemon_env(**extra):
    """The environment for skt-run as an operator runs it: root allowed, but nothing that makes
    mpirun oversubscribe (skt-run must ask for it itself where it should), whatever the test
    runner set."""
    env = {k: v for k, v in os.environ.items() if k != "OMPI_MCA_rmaps_base_oversubscribe"}
    env.update({k: v for k, v in MPI_ENV.items() if k != "OMPI_MCA_rmaps_base_oversubscribe"})
    env.update(extra)
    return env


@dataclasses.dataclass
class Run:
    code: int  # exit code; -1 when the run hung and was killed
    out: str
    err: str

    @property
    def hung(self):
        return self.code == -1

    @property
    def result(self):
        m = re.search(r"^RESULT (\w+)", self.out, re.M)
        return m.group(1) if m else None

    @property
    def epoch(self):
        m = re.search(r"^recovered epoch (\d+)", self.out, re.M)
        return int(m.group(1)) if m else 0

    def describe(self):
        return f"exit {self.code}\n--- stdout\n{self.out[-3000:]}\n--- stderr\n{self.err[-3000:]}"


def state_of(pid):
    """A process's state letter (R, S, T stopped, Z a zombie...); None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


class Cluster:
    def __init__(self, app, shm, mpirun="mpirun", timeout=120, inject=None):
        self.app = app
        self.shm = shm
        self.mpirun = mpirun
        self.timeout = timeout
        self.inject_tool = inject

    @staticmethod
    def new_job(prefix):
        return f"{prefix}-{uuid.uuid4().hex[:10]}"

    def start(self, nodes, args=(), env=None, rank_env=None):
        """Starts the app with one rank per entry of `nodes` (rank_env adds variables to some ranks);
        returns the launcher's process and the environment it got."""
        command = [self.mpirun]
        for rank, node in enumerate(nodes):
            extra = [f"{k}={v}" for k, v in (rank_env or {}).get(rank, {}).items()]
            command += ["-n", "1", "env", f"SKT_NODE={node}", *extra, self.app, *args, ":"]
        command.pop()
        full_env = dict(os.environ)
        full_env.update(MPI_ENV)
        full_env[TRANSPORT_VARIABLE] = transport_directory()
        full_env.update(env or {})
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True, env=full_env, start_new_session=True)
        return process, full_env

    def launch(self, nodes, args=(), env=None, rank_env=None, wait_detached=True):
        """Runs the app with one rank per entry of `nodes`; rank_env adds variables to some ranks.
        Returns once its processes let go of the job's segments, unless `wait_detached` is false
        (another launch of the job holds them)."""
        process, full_env = self.start(nodes, args, env, rank_env)
        try:
            out, err = process.communicate(timeout=self.timeout)
            run = Run(process.returncode, out, err)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            out, err = process.communicate()
            run = Run(-1, out, err)
        if "SKT_JOB" in full_env and wait_detached:
            self.wait_detached(full_env["SKT_JOB"])
        return run

    def launch_held(self, nodes, args, env, act):
        """Runs the app, given --hold, until every rank has stopped itself; then calls act(),
        continues the ranks and waits for the run's end (killed after the timeout)."""
        process, full_env = self.start(nodes, args, env)
        timer = threading.Timer(self.timeout, lambda: os.killpg(process.pid, signal.SIGKILL))
        timer.start()
        try:
            out = []
            for line in process.stdout:
                out.append(line)
                if line.startswith("HELD"):
                    break
            ranks = [int(pid) for pid in subprocess.run(["pgrep", "-P", str(process.pid)],
                                                        capture_output=True, text=True).stdout.split()]
            while not all(state_of(pid) in ("T", None) for pid in ranks):
                time.sleep(0.01)
            act()
            for pid in ranks:
                os.kill(pid, signal.SIGCONT)
            rest, err = process.communicate()
        finally:
            timer.cancel()
        run = Run(-1 if process.returncode == -signal.SIGKILL else process.returncode,
                  "".join(out) + rest, err)
        self.wait_detached(full_env["SKT_JOB"])
        return run

    def attached(self, job):
        """Processes attached to each of the job's segments."""
        listed = self.shm_tool("list", "--job", job)
        # Columns: shmid key job rank node kind name bytes att [state]; names have no spaces.
        return [int(line.split()[8]) for line in listed.splitlines() if re.match(r"^\s*\d+\s+0x", line)]

    def wait_detached(self, job, timeout=None):
        """Returns once no process is attached to the job's segments: a rank that mpirun was still
        tearing down when it returned must not write into them while a test reads them."""
        deadline = time.monotonic() + (timeout or self.timeout)
        while time.monotonic() < deadline:
            if all(count == 0 for count in self.attached(job)):
                return
            time.sleep(0.05)
        raise RuntimeError(f"processes stayed attached to job {job}'s segments: "
                           f"{self.shm_tool('list', '--job', job)}")

    def reference(self, nranks, args, group_size=2):
        """RESULT of a run without faults on `nranks` fresh nodes."""
        job = self.new_job("ref")
        try:
            run = self.launch([f"n{r}" for r in range(nranks)], args,
                              {"SKT_JOB": job, "SKT_GROUP_SIZE": str(group_size), "SKT_RESTART": "0"})
        finally:
            self.clean(job)
        if run.code != 0 or not run.result:
            raise RuntimeError(f"reference run on {nranks} ranks failed: {run.describe()}")
        return run.result

    def shm_tool(self, *args):
        done = subprocess.run([self.shm, *args], capture_output=True, text=True, check=True)
        return done.stdout

    def inject(self, *args):
        """Runs skt-inject; returns the completed process."""
        return subprocess.run([self.inject_tool, *args], capture_output=True, text=True)

    def lose_node(self, job, node):
        """Destroys a node's memory: every segment of the job on it."""
        self.shm_tool("clean", "--job", job, "--node", node)

    def clean(self, job):
        self.shm_tool("clean", "--job", job)

    def segments(self, job):
        """The rows of skt-shm list for a job, split: shmid, key, job, rank, node, kind, name, bytes..."""
        text = self.shm_tool("list", "--job", job)
        return [line.split() for line in text.splitlines() if re.match(r"^\s*\d+\s", line)]

    def segment_count(self, job):
        return len(self.segments(job))

    def digests(self, job):
        """rank, kind, name → data digest, for every segment of a job."""
        text = self.shm_tool("inspect", "--job", job)
        found = {}
        current = None
        for line in text.splitlines():
            m = re.match(r"segment \d+ .*job '([^']*)' rank (\d+)/\d+ node '([^']*)' (\w+) '([^']*)'",
                         line)
            if m:
                current = (int(m.group(2)), m.group(4), m.group(5))
                continue
            m = re.search(r"data digest (\w+)", line)
            if m and current:
                found[current] = m.group(1)
        return found


def arguments(argv, tools=(), timeout=120):
    """The options every e2e script takes, plus a required --<tool> path for each of `tools`."""
    import argparse

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--app", required=True, help="the test program")
    parser.add_argument("--shm", required=True, help="the skt-shm tool")
    for tool in tools:
        parser.add_argument(f"--{tool}", required=True, help=f"the skt-{tool} tool")
    parser.add_argument("--mpirun", default="mpirun")
    parser.add_argument("--timeout", type=int, default=timeout, help="seconds before a run counts as hung")
    parser.add_argument("--quick", action="store_true", help="a reduced set of cases")
    parser.add_argument("--case", action="append", metavar="NAME",
                        help="run only this case (repeatable); --case list names them")
    return parser.parse_args(argv)


def selected(options, cases):
    """The cases to run, in order, from `cases`, a list of (name, function of no argument): all of
    them, or those `--case` names. `--case list` prints the names and ends the script; an unknown
    name ends it with exit 2, naming the known ones. The functions may use what the script sets up
    after this call (a reference run): only those chosen run, once it is there."""
    names = [name for name, _ in cases]
    wanted = getattr(options, "case", None) or []
    if "list" in wanted:
        print("\n".join(names))
        sys.exit(0)
    unknown = [name for name in wanted if name not in names]
    if unknown:
        print(f"unknown case {', '.join(unknown)}; the cases: {', '.join(names)}", file=sys.stderr)
        sys.exit(2)
    return [function for name, function in cases if not wanted or name in wanted]


def named(functions, arguments):
    """(name, function) pairs for `selected`: each function's name with dashes, called with the
    first as many of what `arguments()` returns as it takes (the scripts' cases take cluster,
    checks, and the reference run when they use it). `arguments` is called when a case runs, late
    enough for what the script sets up after choosing (the reference run)."""
    return [(f.__name__.replace("_", "-"), lambda f=f: f(*arguments()[:f.__code__.co_argcount]))
            for f in functions]


class Checks:
    """Named expectations: each prints ok or FAIL; the failures, with their details, are kept for
    report_failures. A detail is a Run (described) or text (its end)."""

    def __init__(self):
        self.failures = []

    def expect(self, condition, what, detail=None):
        print(f"{'ok  ' if condition else 'FAIL'} {what}", flush=True)
        if not condition:
            text = detail.describe() if isinstance(detail, Run) else excerpt(detail or "")
            self.failures.append(what + ("\n" + text if text else ""))


def excerpt(output, tail=5000):
    """The end of a long output, after skt-run's own log lines from before it: what a failure
    report needs to say which run ended how, when the ranks' messages fill the end."""
    if len(output) <= tail:
        return output
    daemon = [line for line in output[:-tail].splitlines() if line.startswith("[skt-run ")]
    return "".join(line + "\n" for line in daemon) + "[...]\n" + output[-tail:]


def killed_as_expected(run, what):
    """None when a launch carrying a fault was killed by it; else ('hung' or 'wrong', why)."""
    if run.hung:
        return ("hung", f"{what} hung")
    if run.code in (0, 2, 3, 4):
        return ("wrong", f"{what} should have been killed: {run.describe()}")
    return None


# The C library, for the system calls Python does not wrap (SysV shared memory, namespaces).
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
libc.shmat.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
libc.shmdt.argtypes = [ctypes.c_void_p]


def meminfo(key):
    """Bytes of /proc/meminfo's `key` (MemAvailable: what new pages can still take, as the
    library's check of a job's memory reads it; MemTotal)."""
    with open("/proc/meminfo") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(key + ":"))


def memory_available():
    return meminfo("MemAvailable")


class UnwrittenSegment:
    """A SysV segment of `size` bytes that this process holds attached and never writes, as another
    job's workspace is before its program fills it: it takes no memory yet, and will. Marked for
    removal at once, so that it goes with this process whatever happens. `why_not` says why none
    could be made; then `with` holds nothing."""

    IPC_CREAT, IPC_RMID = 0o1000, 0

    def __init__(self, size):
        self.size = size
        self.address = None
        self.why_not = None if size > 0 else f"no room for a segment of {size} bytes"

    def __enter__(self):
        if self.why_not:
            return self
        shmid = libc.shmget(0, ctypes.c_size_t(self.size), self.IPC_CREAT | 0o600)
        if shmid < 0:
            self.why_not = f"shmget of {self.size} bytes: {os.strerror(ctypes.get_errno())}"
            return self
        address = libc.shmat(shmid, None, 0)
        libc.shmctl(shmid, self.IPC_RMID, None)
        if address in (None, ctypes.c_void_p(-1).value):
            self.why_not = f"shmat: {os.strerror(ctypes.get_errno())}"
        else:
            self.address = address
        return self

    def __exit__(self, *exc):
        if self.address is not None:
            libc.shmdt(self.address)
            self.address = None


class MemoryCgroup:
    """A memory cgroup limited to `limit` bytes, below the one this process is in, that this
    process (and so every process it starts) runs in while inside `with`: what a batch system's
    limit on a job (Slurm's --mem) does to its ranks. `why_not` says why none could be made (not
    root, no writable controller); then `with` changes nothing."""

    def __init__(self, limit):
        self.directory = None
        self.home = None
        self.why_not = None
        try:
            with open("/proc/self/cgroup") as f:
                lines = [line.rstrip("\n").split(":", 2) for line in f]
            v1 = next((path for _, controllers, path in lines if "memory" in controllers.split(",")), None)
            v2 = next((path for hierarchy, controllers, path in lines if hierarchy == "0" and not controllers), None)
            with open("/proc/self/mountinfo") as f:
                for line in f:
                    fields = line.split()
                    dash = fields.index("-")
                    kind, options = fields[dash + 1], fields[dash + 3].split(",")
                    if (v1 is not None and kind == "cgroup" and "memory" in options) or (v1 is None and kind == "cgroup2"):
                        root, mount, path = fields[3], fields[4], v1 if v1 is not None else v2
                        if root != "/" and path.startswith(root):
                            path = path[len(root):]
                        self.home = mount + path.rstrip("/")
                        self.unified = kind == "cgroup2"
                        break
            if self.home is None:
                self.why_not = "no memory cgroup is mounted"
                return
            self.directory = os.path.join(self.home, f"skt-e2e-{os.getpid()}")
            os.mkdir(self.directory)
            self.limit_to(limit)
        except OSError as e:
            self.why_not = f"cannot make a memory cgroup: {e}"
            if self.directory and os.path.isdir(self.directory):
                os.rmdir(self.directory)
            self.directory = None

    def limit_to(self, limit):
        with open(os.path.join(self.directory, "memory.max" if self.unified else "memory.limit_in_bytes"), "w") as f:
            f.write(str(limit))

    def usage(self):
        """The bytes charged to the cgroup: its processes' memory and the pages of the segments they
        wrote first, which stay charged to it after they exit."""
        with open(os.path.join(self.directory, "memory.current" if self.unified else "memory.usage_in_bytes")) as f:
            return int(f.read())

    def peak(self):
        """The most bytes charged to the cgroup at once since it was made (memory.peak, which
        kernels before 5.19 lack: then what is charged now)."""
        name = "memory.peak" if self.unified else "memory.max_usage_in_bytes"
        try:
            with open(os.path.join(self.directory, name)) as f:
                return int(f.read())
        except FileNotFoundError:
            return self.usage()

    def __enter__(self):
        if self.directory:
            with open(os.path.join(self.directory, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))
        return self

    def __exit__(self, *exc):
        if self.directory:
            with open(os.path.join(self.home, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))
            os.rmdir(self.directory)


class IpcNamespace:
    """A SysV IPC namespace of its own that this process (and so every process it starts) runs in
    while inside `with`, with the kernel's segment limits (`sysctls`: name under /proc/sys/kernel
    to value) that an operator's node may have. The machine's segments and limits are untouched,
    and the namespace's segments vanish with it. `why_not` says why none could be made (not root,
    no unshare); then `with` changes nothing."""

    CLONE_NEWIPC = 0x08000000

    def __init__(self, sysctls):
        self.sysctls = sysctls
        self.home = None
        self.why_not = None
        try:
            self.home = os.open("/proc/self/ns/ipc", os.O_RDONLY)
        except OSError as e:
            self.why_not = f"cannot open this process's IPC namespace: {e}"

    def set(self, name, value):
        with open(f"/proc/sys/kernel/{name}", "w") as f:
            f.write(str(value))

    def __enter__(self):
        if self.why_not is not None:
            return self
        if libc.unshare(self.CLONE_NEWIPC) != 0:
            self.why_not = f"cannot make an IPC namespace: {os.strerror(ctypes.get_errno())}"
            return self
        try:
            for name, value in self.sysctls.items():
                self.set(name, value)
        except OSError as e:
            self.leave()
            self.why_not = f"cannot set the namespace's limits: {e}"
        return self

    def __exit__(self, *exc):
        if self.why_not is None:
            self.leave()
        if self.home is not None:
            os.close(self.home)
            self.home = None

    def leave(self):
        if libc.setns(self.home, self.CLONE_NEWIPC) != 0:
            raise RuntimeError("cannot return to this process's IPC namespace")


class SmallDisk:
    """A file system of `size` bytes (tmpfs) mounted on a new directory while inside `with`, that
    fill() fills to the last byte, as an operator's home or scratch directory fills up. `why_not`
    says why none could be mounted (not root); then `path` is None."""

    def __init__(self, size):
        self.size = size
        self.path = None
        self.why_not = None

    def __enter__(self):
        path = tempfile.mkdtemp(prefix="skt-small-disk-")
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={self.size}", "tmpfs", path],
                                 capture_output=True, text=True)
        if mounted.returncode != 0:
            os.rmdir(path)
            self.why_not = f"cannot mount a tmpfs: {mounted.stderr.strip()}"
        else:
            self.path = path
        return self

    def fill(self):
        try:
            with open(os.path.join(self.path, "filler"), "ab") as f:
                while True:
                    f.write(b"\0" * 4096)
                    f.flush()
        except OSError as e:
            if e.errno != errno.ENOSPC:
                raise

    def __exit__(self, *exc):
        if self.path is not None:
            subprocess.run(["umount", self.path], check=True)
            os.rmdir(self.path)


def report_failures(failures):
    for f in failures:
        print(f"FAILED: {f}", file=sys.stderr)
    return 1 if failures else 0


class SktRun:
    """skt-run as an operator runs it: on virtual nodes of this host, each job with its state
    directory under `root`, in daemon_env(). Output is standard output and error together."""

    def __init__(self, options, root):
        self.options = options
        self.root = root

    def state_dir(self, job):
        return os.path.join(self.root, job)

    def registry(self, job):
        return os.path.join(self.state_dir(job), "registry")

    def command(self, job, nodes, spares, app_args, extra=(), program=None):
        """spares=None leaves --spares out (for --spare-nodes, which it may not be combined with)."""
        spare_count = [] if spares is None else ["--spares", str(spares)]
        return [self.options.run, "--nodes", ",".join(nodes), *spare_count, "--job", job,
                "--state-dir", self.state_dir(job), "--launcher", self.options.mpirun,
                "--shm-tool", self.options.shm, *extra, "--", *(program or [self.options.app]),
                *app_args]

    @staticmethod
    def wrap_launcher(command, path, *lines):
        """Makes `command` launch through a shell script of `lines` written at `path` (the real
        mpirun is the script's to call), as a site's wrapper or a misbehaving launcher would."""
        write_script(path, *lines)
        command[command.index("--launcher") + 1] = path
        return command

    @staticmethod
    def start(command, env=None):
        return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env=daemon_env(**{"SKT_GROUP_SIZE": "2",
                                                  TRANSPORT_VARIABLE: transport_directory("skt-run"),
                                                  **(env or {})}),
                                start_new_session=True)

    def drive(self, process, on_line=None, timeout=None):
        """Reads the output to its end; calls on_line(line, lines so far) for every line. Kills the
        whole session after `timeout`. Returns the output."""
        import threading
        lines = []
        timer = threading.Timer(timeout or self.options.timeout,
                                lambda: os.killpg(process.pid, signal.SIGKILL))
        timer.start()
        try:
            for line in process.stdout:
                lines.append(line)
                if on_line:
                    on_line(line, lines)
            process.wait()
        finally:
            timer.cancel()
        return "".join(lines)

    def run(self, command, env=None, on_pause=None, timeout=None):
        """Runs skt-run to its end; on_pause(n) at the n-th PAUSED line. Returns (code, output)."""
        pauses = []

        def on_line(line, _):
            if line.startswith("PAUSED") and on_pause:
                on_pause(len(pauses))
                pauses.append(line)

        process = self.start(command, env)
        out = self.drive(process, on_line, timeout)
        return process.returncode, out

    def kill_node(self, job, node):
        subprocess.run([self.options.inject, "node", node, "--job", job, "--registry", self.registry(job)],
                       check=True, capture_output=True, text=True)

    def ranklist(self, job):
        """The nodes of the job's ranks, in rank order, as skt-run last wrote them."""
        with open(os.path.join(self.state_dir(job), "ranklist")) as f:
            return f.read().split()[1::2]


def result_of(output):
    m = re.search(r"^RESULT (\w+)", output, re.M)
    return m.group(1) if m else None


def write_script(path, *lines):
    """An executable shell script of `lines` at `path` (a probe, a launcher wrapper); returns path."""
    with open(path, "w") as f:
        f.write("#!/bin/sh\n" + "".join(line + "\n" for line in lines))
    os.chmod(path, 0o755)
    return path


def processes_of(job, rank=None):
    """Pids of the processes started with SKT_JOB=job (and OMPI_COMM_WORLD_RANK=rank if given)."""
    wanted = {f"SKT_JOB={job}".encode()}
    if rank is not None:
        wanted.add(f"OMPI_COMM_WORLD_RANK={rank}".encode())
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                variables = set(f.read().split(b"\0"))
        except OSError:
            continue
        if wanted <= variables:
            found.append(int(entry))
    return found


def udp_socket_of(pid):
    """(port, datagrams dropped) of the one UDP socket of process pid."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[len("socket:["):-1])
    with open(f"/proc/{pid}/net/udp") as f:
        for line in f.read().splitlines()[1:]:
            fields = line.split()
            if fields[9] in inodes:
                return int(fields[1].split(":")[1], 16), int(fields[12])
    raise RuntimeError(f"process {pid} has no UDP socket")


def fill_udp_socket(pid):
    """Sends junk to the UDP socket of a process that does not read it (stopped) until the kernel
    drops what comes: whatever is sent to it next is lost. Returns the datagrams dropped so far."""
    port, dropped = udp_socket_of(pid)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        while True:
            for _ in range(10000):
                s.sendto(b"not a selfckpt datagram", ("127.0.0.1", port))
            _, now_dropped = udp_socket_of(pid)
            if now_dropped > dropped:
                return now_dropped


def running(pid):
    """Whether a process exists and is not a zombie (an exited process nobody reaped yet)."""
    return state_of(pid) not in (None, "Z")


def wait_gone(job, timeout):
    """Seconds until no process of the job is left; None if some outlive `timeout`."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if not processes_of(job):
            return time.monotonic() - start
        time.sleep(0.05)
    return None


def wait_for(condition, timeout):
    """Whether `condition()` came true within `timeout` seconds (asked every 0.1 s)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return condition()
