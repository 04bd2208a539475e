"""Warm start: ``python -m dlbench`` hands its command to a server that has already imported Hydra, MLflow,
torch, onnx, pandas and matplotlib, and forks a fresh copy of itself to run it (the forkserver of
:mod:`dlbench.cli.forkserver`). This saves the 3-5 s of imports every command otherwise pays before its work
starts; the command itself runs exactly as in a new process: its own pid and process group, the caller's
working directory, environment, argument list, umask and terminal (the three standard streams are passed
over the socket), its exit status returned, Ctrl-C and SIGTERM forwarded.

This module is the client, and imports nothing beyond the standard library. A server serves one
environment: the same interpreter, search path, code (every source file's size and time), environment
variables (all but ``DLBENCH_*``, ``MLFLOW_*``, ``HYDRA_*``, which are read when a command runs, not when a
library is imported), CPU affinity, resource limits and control group; anything else gets a server of its
own. The first command of an environment runs here as before and starts the server when it is done (never
while it measures); the server ends after ``DLBENCH_WARM_IDLE_S`` seconds (default 600) without a command.

``DLBENCH_WARM=0`` turns it off; it is off by default inside a Slurm job (``DLBENCH_WARM=1`` turns it on)."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import stat
import struct
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

WARM_ENV = "DLBENCH_WARM"
DIR_ENV = "DLBENCH_WARM_DIR"
IDLE_ENV = "DLBENCH_WARM_IDLE_S"
DEFAULT_IDLE_S = 600.0

#: Read when a command runs, never when a library is imported: they do not tell two servers apart.
PER_COMMAND_PREFIXES = ("DLBENCH_", "MLFLOW_", "_MLFLOW_", "HYDRA_")
#: A shell's bookkeeping, different in every directory and subshell.
SHELL_VARIABLES = ("PWD", "OLDPWD", "SHLVL", "_")
#: The top-level packages the server imports before it forks: a working directory holding one of these names
#: would shadow it in a new process (``python -m`` searches the working directory first), so it runs cold.
PRELOADED = ("dlbench", "hydra_plugins", "hydra", "omegaconf", "mlflow", "sqlalchemy", "alembic", "torch",
             "numpy", "pandas", "onnx", "matplotlib", "yaml")  # fmt: skip
#: Source folders whose files a server's code fingerprint covers (beside this package).
SOURCE_FOLDERS = ("dlbench", "hydra_plugins")
#: Resource limits a command inherits from whoever started it (a server's fork inherits the server's).
LIMITS = ("RLIMIT_AS", "RLIMIT_DATA", "RLIMIT_NOFILE", "RLIMIT_CORE", "RLIMIT_STACK", "RLIMIT_NPROC", "RLIMIT_CPU",
          "RLIMIT_MEMLOCK")  # fmt: skip
#: Signals a client passes on to its command (the terminal sends them to the client only).
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
#: Longest path a Unix socket may have (108 bytes on Linux, with the terminating zero).
MAX_SOCKET_PATH = 107
#: A waiting client says why it waits after this many seconds (the server is still importing).
WAIT_NOTICE_S = 3.0

PROJECT_ROOT = Path(__file__).resolve().parent.parent.parent


def enabled(env: Mapping[str, str]) -> bool:
    """On unless ``DLBENCH_WARM=0``; inside a Slurm job only with ``DLBENCH_WARM=1`` (a server would outlive
    the job's step on a node that is not the user's); Linux only (file descriptors over a Unix socket)."""
    setting = env.get(WARM_ENV, "").strip().lower()
    if setting in ("0", "false", "no", "off"):
        return False
    if not sys.platform.startswith("linux") or not hasattr(socket, "send_fds"):
        return False
    return setting in ("1", "true", "yes", "on") or "SLURM_JOB_ID" not in env


def server_folder(env: Mapping[str, str]) -> Path:
    """Where the sockets live: ``DLBENCH_WARM_DIR``, else ``$XDG_RUNTIME_DIR/dlbench``, else
    ``/tmp/dlbench-warm-UID``; created private (0700) and refused unless it is this user's own folder."""
    if env.get(DIR_ENV):
        folder = Path(env[DIR_ENV])
    elif env.get("XDG_RUNTIME_DIR"):
        folder = Path(env["XDG_RUNTIME_DIR"]) / "dlbench"
    else:
        folder = Path("/tmp") / f"dlbench-warm-{os.getuid()}"  # noqa: S108 - private (0700), owner checked
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = folder.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise PermissionError(f"{folder} must be a folder of user {os.getuid()} that nobody else can open")
    return folder


def _sources() -> Iterator[Path]:
    for name in SOURCE_FOLDERS:
        yield from sorted((PROJECT_ROOT / name).rglob("*.py"))


def server_key(env: Mapping[str, str]) -> str:
    """What a server must share with the command it runs, as a short hash (the socket's name)."""
    digest = hashlib.sha256()

    def add(*values: object) -> None:
        digest.update(json.dumps(values, default=str).encode())
        digest.update(b"\0")

    add(sys.executable, sys.version, os.getuid(), os.getgid(), os.getgroups())
    add(sorted((k, v) for k, v in env.items() if not k.startswith(PER_COMMAND_PREFIXES) and k not in SHELL_VARIABLES))
    add(sys.path[1:], sys.flags)
    for entry in sys.path[1:]:  # a package installed or removed changes its folder's time
        try:
            add(entry, os.stat(entry).st_mtime_ns)
        except OSError:
            add(entry, None)
    for path in _sources():
        info = path.stat()
        add(str(path), info.st_size, info.st_mtime_ns)
    add(sorted(os.sched_getaffinity(0)), os.getpriority(os.PRIO_PROCESS, 0))
    add([resource_limit(name) for name in LIMITS])
    try:
        add(Path("/proc/self/cgroup").read_text())
    except OSError:
        add(None)
    return digest.hexdigest()[:20]


def resource_limit(name: str) -> tuple[int, int] | None:
    import resource

    number = getattr(resource, name, None)
    return None if number is None else resource.getrlimit(number)


def shadows_preloaded(cwd: Path) -> bool:
    """Whether ``python -m`` started here would import one of :data:`PRELOADED` from the working directory
    instead of from where the server found it (this repository's root is fine: the server imports from it)."""
    if cwd.resolve() == PROJECT_ROOT:
        return False
    return any((cwd / name).exists() or (cwd / f"{name}.py").exists() for name in PRELOADED)


def send_message(sock: socket.socket, message: Mapping[str, object]) -> None:
    body = json.dumps(message).encode()
    sock.sendall(struct.pack("!I", len(body)) + body)


def receive_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data


def receive_message(sock: socket.socket) -> dict:
    (size,) = struct.unpack("!I", receive_exactly(sock, 4))
    return json.loads(receive_exactly(sock, size))


class Client:
    """One command handed to a server: the request, the signals passed on, the exit status back."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.command_pid = 0
        self._pending: list[int] = []

    def _forward(self, signum: int, frame: object) -> None:
        if self.command_pid:
            try:
                send_message(self.sock, {"signal": signum})
            except OSError:
                pass
        else:  # the command has not started yet: it gets the signal as soon as it has
            self._pending.append(signum)

    def _stop(self, signum: int, frame: object) -> None:
        """Ctrl-Z: stop the command as the terminal would stop a process of its own, then this client; when
        the shell continues the client (``fg``, ``bg``), continue the command. Before the command has started
        there is nothing to stop yet: the client stops with it as soon as it has."""
        if not self.command_pid:
            self._pending.append(signal.SIGTSTP)
            return
        self._forward(signal.SIGSTOP, frame)
        signal.signal(signal.SIGTSTP, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTSTP)  # stops here until SIGCONT
        signal.signal(signal.SIGTSTP, self._stop)
        self._forward(signal.SIGCONT, frame)

    def run(self, argv: list[str]) -> int:
        sigint_ignored = signal.getsignal(signal.SIGINT) == signal.SIG_IGN
        request = {"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ), "umask": _umask(),
                   "sigint_ignored": sigint_ignored}  # fmt: skip
        for signum in FORWARDED:
            if signal.getsignal(signum) != signal.SIG_IGN:
                signal.signal(signum, self._forward)
        if signal.getsignal(signal.SIGTSTP) != signal.SIG_IGN:
            signal.signal(signal.SIGTSTP, self._stop)
        socket.send_fds(self.sock, [b"R"], [0, 1, 2])
        send_message(self.sock, request)
        self.sock.settimeout(WAIT_NOTICE_S)
        try:
            started = receive_message(self.sock)
        except TimeoutError:
            print("dlbench: waiting for the warm-start server to finish loading (DLBENCH_WARM=0 runs without it)",
                  file=sys.stderr, flush=True)  # fmt: skip
            self.sock.settimeout(None)
            started = receive_message(self.sock)
        self.sock.settimeout(None)
        self.command_pid = int(started["pid"])
        for signum in self._pending:
            if signum == signal.SIGTSTP:
                self._stop(signum, None)
            else:
                send_message(self.sock, {"signal": signum})
        while True:
            try:
                ended = receive_message(self.sock)
                break
            except InterruptedError:
                continue
        if "signal" in ended:
            end_by_signal(int(ended["signal"]))
        return int(ended["exit"])


def end_by_signal(signum: int) -> None:
    """Die of the signal that ended the command, so that whoever started dlbench sees what a process of its
    own would have shown (a Python parent: returncode -signum; a shell: 128 + signum)."""
    sys.stdout.flush()
    sys.stderr.flush()
    if signum not in (signal.SIGKILL, signal.SIGSTOP):  # these two have no handler to reset
        signal.signal(signum, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [signum])
    os.kill(os.getpid(), signum)
    os._exit(128 + signum)  # a signal whose default action is not to end the process


def standard_streams_open() -> bool:
    """Descriptors 0-2 can be passed (a command started with one closed runs here, as it would run)."""
    try:
        for fd in (0, 1, 2):
            os.fstat(fd)
    except OSError:
        return False
    return True


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def socket_path(env: Mapping[str, str]) -> Path | None:
    """The socket of this environment's server; None where warm start does not apply."""
    if not enabled(env) or shadows_preloaded(Path.cwd()):
        return None
    try:
        path = server_folder(env) / f"{server_key(env)}.sock"
    except OSError:
        return None
    return path if len(str(path)) <= MAX_SOCKET_PATH else None


def run_warm(argv: list[str]) -> int | None:
    """Run the command in this environment's server and return its exit status; None when there is no
    server (one is started when this process exits) or warm start does not apply: the caller runs it."""
    path = socket_path(os.environ)
    if path is None or not standard_streams_open():
        return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(str(path))
    except OSError:
        sock.close()
        import atexit

        atexit.register(start_server, path)
        return None
    client = Client(sock)
    try:
        return client.run(argv)
    except (EOFError, OSError, ValueError):  # the server went away, or said something this client cannot read
        if client.command_pid:
            # the command was started and its server is gone: the command got SIGTERM with it (its runs end
            # KILLED); running it again here would measure it twice
            print(f"dlbench: the warm-start server ended while the command (pid {client.command_pid}) ran; "
                  f"see {path.with_suffix('.log')}", file=sys.stderr)  # fmt: skip
            return 1
        # the server ended before it forked (killed, or failed to load): nothing ran, so run it here
        print(f"dlbench: the warm-start server at {path} did not take the command; running it here",
              file=sys.stderr)  # fmt: skip
        return None
    finally:
        sock.close()


def start_server(path: Path) -> None:
    """Start the server for ``path`` in the background: its own session, its output in ``KEY.log`` beside it."""
    with open(path.with_suffix(".log"), "ab") as log:  # noqa: PTH123
        subprocess.Popen(  # noqa: S603 - an argument list, never a shell
            [sys.executable, "-m", "dlbench.cli.forkserver", str(path)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            cwd=Path.cwd(),
            start_new_session=True,
            close_fds=True,
        )


def ready_servers(env: Mapping[str, str]) -> dict[Path, int]:
    """Running servers in this user's folder: socket -> pid (from ``KEY.ready``)."""
    servers = {}
    for ready in sorted(server_folder(env).glob("*.ready")):
        try:
            pid = int(ready.read_text().strip())
            os.kill(pid, 0)
        except (OSError, ValueError):
            continue
        servers[ready.with_suffix(".sock")] = pid
    return servers


def start_and_wait(env: Mapping[str, str], timeout_s: float = 180.0) -> Path:
    """Start this environment's server unless it runs, and return its socket once it serves."""
    import time

    path = socket_path(env)
    if path is None:
        raise SystemExit("warm start does not apply here (DLBENCH_WARM=0, a Slurm job, or a working directory "
                         "that holds a package of the same name as one dlbench imports)")  # fmt: skip
    if path not in ready_servers(env):
        start_server(path)
    deadline = time.monotonic() + timeout_s
    while path not in ready_servers(env):
        if time.monotonic() > deadline:
            log = path.with_suffix(".log")
            raise SystemExit(f"the warm-start server did not get ready in {timeout_s:.0f} s; see {log}")
        time.sleep(0.1)
    return path


def stop_servers(env: Mapping[str, str], timeout_s: float = 60.0) -> list[int]:
    """SIGTERM every server of this user (each lets its running commands finish) and wait for them to end."""
    import time

    pids = list(ready_servers(env).values())
    for pid in pids:
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    for pid in pids:
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.05)
    return pids


def main(argv: list[str]) -> int:
    """``python -m dlbench.cli.warmstart {start,stop,status}``: manage this user's warm-start servers."""
    usage = "usage: python -m dlbench.cli.warmstart {start,stop,status}"
    if argv[:1] == ["start"] and len(argv) == 1:
        print(f"serving at {start_and_wait(os.environ)}")
    elif argv[:1] == ["stop"] and len(argv) == 1:
        pids = stop_servers(os.environ)
        print(f"stopped {len(pids)} warm-start server(s)" + (f": pid {', '.join(map(str, pids))}" if pids else ""))
    elif argv[:1] == ["status"] and len(argv) == 1:
        mine = socket_path(os.environ)
        servers = ready_servers(os.environ)
        for path, pid in servers.items():
            print(f"pid {pid}  {path}" + ("  (this environment)" if path == mine else ""))
        if not servers:
            print(f"no warm-start server in {server_folder(os.environ)}")
    else:
        print(usage, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
