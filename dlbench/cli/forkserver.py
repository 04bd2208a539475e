"""The warm-start server (``python -m dlbench.cli.forkserver SOCKET``): imports what dlbench commands use,
then forks one fresh process per command a client hands it (see :mod:`dlbench.cli.warmstart`).

The server stays single-threaded in Python and never runs a command, opens a store or touches a device
itself, so each fork starts from the state a new interpreter would reach by importing the same modules. The
forked command gets the client's standard streams, directory, environment, argument list and umask, a
session of its own, SIGTERM when the server dies (``PR_SET_PDEATHSIG``), and fresh random seeds. One lock
file per socket makes sure one server binds it; the server leaves when idle for ``DLBENCH_WARM_IDLE_S``."""

from __future__ import annotations

import contextlib
import fcntl
import importlib
import os
import pkgutil
import select
import signal
import socket
import struct
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from dlbench.cli.warmstart import (
    DEFAULT_IDLE_S,
    FORWARDED,
    IDLE_ENV,
    receive_message,
    send_message,
)
from dlbench.core import forking

#: A client is given this long to send its request once connected (it sends at once).
REQUEST_TIMEOUT_S = 5.0
#: A command whose client vanished (killed) gets SIGTERM, then SIGKILL after this long.
KILL_GRACE_S = 5.0
#: Signals a new command receives only once it has a new process's dispositions: until then it has the
#: server's, which would lose them (an ignored SIGINT when the server was started in the background, a
#: handler that wakes the server's loop). Blocked across the fork, they wait as pending.
HELD_AT_FORK = frozenset({*FORWARDED, signal.SIGCHLD})
#: Modules a command imports late (inside functions), imported here ahead of it.
LATE_IMPORTS = (
    "hydra._internal.config_loader_impl",
    "hydra._internal.core_plugins.basic_launcher",
    "hydra._internal.core_plugins.basic_sweeper",
    "hydra.core.plugins",
    "matplotlib.pyplot",
    "pandas",
    "onnx",
    "onnx.shape_inference",
    "torch",
)


def preload() -> list[str]:
    """Import every dlbench module and the libraries they import late; the modules that failed, by name."""
    import matplotlib

    matplotlib.use("Agg")  # what dlbench's plots use; no display is opened
    failed = []
    names = list(LATE_IMPORTS)
    import dlbench

    names += [m.name for m in pkgutil.walk_packages(dlbench.__path__, "dlbench.") if not m.name.endswith("__main__")]
    for name in names:
        try:
            importlib.import_module(name)
        except Exception:  # an optional extra not installed here: a command needing it imports it itself
            failed.append(name)
    from hydra.core.plugins import Plugins

    from dlbench.config import register_configs

    Plugins.instance()  # the scan for launchers and sweepers every Hydra command does first
    register_configs()
    return failed


def warm_up() -> None:
    """What every command does once before it does anything of its own, done here once: Hydra's override
    parser and config loading (a compose of the shipped config), matplotlib's fonts and renderer (a figure
    drawn to memory), and MLflow's schema migrations (a throwaway SQLite store, closed before any fork).
    No command's files, store or device are touched."""
    import io
    import tempfile

    import matplotlib.pyplot as plt
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from dlbench import CONF_DIR
    from dlbench.tracking.store import warm_up_tracking

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        compose("config", overrides=["+benchmark=conv", "batch_size=1"], return_hydra_config=True)
    GlobalHydra.instance().clear()
    figure, axes = plt.subplots()
    axes.barh(["a", "b"], [1.0, 2.0])
    axes.set_xscale("log")
    axes.set_title("warm-up")
    figure.savefig(io.BytesIO(), format="png")
    plt.close(figure)
    with tempfile.TemporaryDirectory(prefix="dlbench-warm-") as folder:
        warm_up_tracking(Path(folder))


@dataclass
class Command:
    pid: int
    conn: socket.socket
    kill_at: float | None = None


@dataclass
class Server:
    path: Path
    idle_s: float
    listener: socket.socket = field(init=False)
    lock_fd: int = field(init=False, default=-1)
    commands: dict[int, Command] = field(default_factory=dict)
    served: int = 0

    def bind(self) -> bool:
        """Take the socket's lock and bind it; False when another live server holds it."""
        self.lock_fd = os.open(self.path.with_suffix(".lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(self.lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        self.path.unlink(missing_ok=True)  # a server killed before it could clean up left its socket
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(self.path))
        self.listener.listen(64)
        return True

    def close(self) -> None:
        self.path.with_suffix(".ready").unlink(missing_ok=True)
        self.path.unlink(missing_ok=True)
        self.listener.close()
        os.close(self.lock_fd)

    def mark_ready(self) -> None:
        """Say that commands are now served at once: ``KEY.ready`` holds the server's pid."""
        self.path.with_suffix(".ready").write_text(f"{os.getpid()}\n")

    def serve(self) -> None:
        wake_read, wake_write = os.pipe()
        os.set_blocking(wake_write, False)
        signal.set_wakeup_fd(wake_write)
        signal.signal(signal.SIGCHLD, lambda signum, frame: None)
        signal.signal(signal.SIGTERM, lambda signum, frame: None)  # wakes the loop, which then leaves
        last_active = time.monotonic()
        stop = False
        while not (stop and not self.commands):
            conns = {command.conn.fileno(): command for command in self.commands.values()}
            listening = [] if stop else [self.listener]
            ready, _, _ = select.select([*listening, wake_read, *conns], [], [], 1.0)
            for item in ready:
                if item is self.listener:
                    self._accept(wake_read, wake_write)
                elif item == wake_read:
                    if signal.SIGTERM in os.read(wake_read, 4096) and not stop:
                        stop = True  # told to leave: take no new command, let the running ones finish
                        self.path.with_suffix(".ready").unlink(missing_ok=True)
                        self.path.unlink(missing_ok=True)
                else:
                    self._from_client(conns[item])
            self._reap()
            self._enforce_kills()
            if self.commands:
                last_active = time.monotonic()
            elif time.monotonic() - last_active > self.idle_s:
                stop = True
        self.close()

    def _accept(self, *wake_fds: int) -> None:
        conn, _ = self.listener.accept()
        pid, uid, gid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
        if uid != os.getuid():
            conn.close()
            return
        conn.settimeout(REQUEST_TIMEOUT_S)
        try:
            _, fds, _, _ = socket.recv_fds(conn, 1, 3)
        except OSError:
            conn.close()
            return
        try:
            request = receive_message(conn)
        except (OSError, EOFError, ValueError):
            request = None
        if request is None or len(fds) != 3:
            for fd in fds:
                os.close(fd)
            conn.close()
            return
        conn.settimeout(None)
        with _signals_held() as mask:
            pid = os.fork()
            if pid == 0:
                others = [c.conn.fileno() for c in self.commands.values()]
                close = [self.listener.fileno(), self.lock_fd, conn.fileno(), *wake_fds, *others]
                run_command(request, fds, close=close, mask=mask)
        for fd in fds:
            os.close(fd)
        self.served += 1
        print(f"served {self.served}: pid {pid} {request['argv']}", flush=True)
        self.commands[pid] = Command(pid, conn)
        try:
            send_message(conn, {"pid": pid})
        except OSError:
            self._client_gone(self.commands[pid])

    def _from_client(self, command: Command) -> None:
        try:
            message = receive_message(command.conn)
        except (OSError, EOFError, ValueError):
            self._client_gone(command)
            return
        with contextlib.suppress(ProcessLookupError, KeyError, ValueError):
            os.kill(command.pid, int(message["signal"]))

    def _client_gone(self, command: Command) -> None:
        """The client was killed: its command must not go on measuring for nobody."""
        if command.kill_at is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(command.pid, signal.SIGTERM)
            command.kill_at = time.monotonic() + KILL_GRACE_S

    def _enforce_kills(self) -> None:
        for command in self.commands.values():
            if command.kill_at is not None and time.monotonic() > command.kill_at:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(command.pid, signal.SIGKILL)

    def _reap(self) -> None:
        while self.commands:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            command = self.commands.pop(pid, None)
            if command is None:
                continue
            message = {"signal": os.WTERMSIG(status)} if os.WIFSIGNALED(status) else {"exit": os.WEXITSTATUS(status)}
            with contextlib.suppress(OSError):
                send_message(command.conn, message)
            command.conn.close()


@contextlib.contextmanager
def _signals_held() -> Iterator[set[signal.Signals]]:
    """Block :data:`HELD_AT_FORK` in this block; yields the mask to restore (a forked command restores it
    once its dispositions are its own, and what arrived meanwhile is delivered then)."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, HELD_AT_FORK)
    try:
        yield previous
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _die_with_parent() -> None:
    """SIGTERM this process when the server dies (Linux's PR_SET_PDEATHSIG), as a killed dlbench's runs end."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG


def run_command(request: dict, fds: list[int], close: list[int], mask: set[signal.Signals]) -> None:
    """In the forked child: become the client's command, run it, and exit with its status (never returns).
    Signals blocked at the fork are unblocked (``mask``) once the command's dispositions and streams are in place."""
    status = 1
    try:
        os.setsid()
        _die_with_parent()
        forking.mark_forked_from_server(forking.native_threads())
        forking.name_process("dlbench")
        forking.default_signals(bool(request.get("sigint_ignored", False)))
        for fd in close:
            with contextlib.suppress(OSError):
                os.close(fd)
        for number, fd in enumerate(fds):
            os.dup2(fd, number)
            os.close(fd)
        forking.fresh_standard_streams()
        # the dispositions are the command's and its streams the client's: a Ctrl-C sent meanwhile is raised here
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        os.chdir(request["cwd"])
        os.umask(int(request["umask"]))
        forking.replace_environment(request["env"])
        if sys.path and sys.path[0] == SERVER_START_DIR:
            sys.path[0] = request["cwd"]  # ``python -m`` searches the working directory first
        sys.argv = list(request["argv"])
        forking.fresh_seeds()
        from dlbench.cli import run_here

        run_here()
        status = 0
    except SystemExit as done:
        code = done.code
        if isinstance(code, str):
            print(code, file=sys.stderr)
            status = 1
        else:
            status = int(code or 0)
    except KeyboardInterrupt as err:  # before the command handles Ctrl-C itself (run_here does)
        from dlbench.cli import _interrupted

        status = _interrupted(err)
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(status)


SERVER_START_DIR = os.getcwd()


def idle_seconds(value: str) -> float:
    """``DLBENCH_WARM_IDLE_S``; the default where it is unset or not a positive number (the server's log says)."""
    try:
        seconds = float(value) if value.strip() else DEFAULT_IDLE_S
    except ValueError:
        seconds = -1.0
    if seconds <= 0:
        print(f"{IDLE_ENV}={value!r} is not a positive number of seconds: using {DEFAULT_IDLE_S:g}", flush=True)
        return DEFAULT_IDLE_S
    return seconds


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m dlbench.cli.forkserver SOCKET", file=sys.stderr)
        return 2
    path = Path(argv[0])
    server = Server(path, idle_seconds(os.environ.get(IDLE_ENV, "")))
    if not server.bind():
        return 0  # another server for this environment is up
    start = time.perf_counter()
    failed = preload()
    warm_up()
    server.mark_ready()
    print(f"server {os.getpid()} loaded in {time.perf_counter() - start:.1f} s; skipped: {failed}", flush=True)
    try:
        server.serve()
    finally:
        print(f"server {os.getpid()} leaves after {server.served} commands", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
