"""Real services on this machine, for the cluster tests and bench/slurm_sweep.py: a one-node Slurm cluster
(munged, slurmctld, slurmd) and a PostgreSQL cluster behind an ``mlflow server``, each configured in a
temporary directory of its own and always stopped again, with nothing of it left running."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from types import TracebackType

import psutil

SLURM_TOOLS = ("slurmctld", "slurmd", "munged", "mungekey", "sbatch", "srun", "squeue", "scancel", "scontrol")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _tail(path: Path, chars: int = 2000) -> str:
    try:
        return f"--- {path.name} ---\n{path.read_text(errors='replace')[-chars:]}"
    except OSError:
        return f"--- {path.name}: none ---"


def _stop(process: subprocess.Popen, grace_s: float = 20) -> None:
    """SIGTERM to the process group a daemon was started in (its own), SIGKILL when it does not go."""
    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=grace_s)
    except ProcessLookupError:
        pass


def _processes_under(root: Path) -> list[psutil.Process]:
    """Live processes whose command line names ``root`` (every daemon here is started with its paths)."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        try:
            if str(root) in " ".join(proc.info["cmdline"] or []) and proc.info["status"] != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


class ServiceError(RuntimeError):
    """A service did not come up; the message holds the tails of its logs."""


class _Service:
    root: Path

    def start(self) -> _Service:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> _Service:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType) -> None:
        self.stop()


class LocalSlurm(_Service):
    """A one-node Slurm cluster on this machine: munged with its own key and socket, slurmctld and slurmd on
    127.0.0.1 with free ports, the machine's CPUs and memory as ``slurmd -C`` reports them, no cgroups
    (``proctrack/linuxproc``, ``task/none``) and no accounting; configuration, state, spool and logs in a
    temporary directory. :attr:`env` points the Slurm commands (and jobs) at it."""

    def __init__(self, log_dir: Path | None = None, kill_wait_s: int = 30) -> None:
        # a short path: slurmd's step sockets live in the spool and Unix socket paths are capped at 107 bytes
        self.root = Path(tempfile.mkdtemp(prefix="dlbench-slurm-"))
        self.log_dir = log_dir
        self.kill_wait_s = kill_wait_s
        self.conf = self.root / "slurm.conf"
        self.node = ""
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}
        self._daemons: dict[str, subprocess.Popen] = {}
        self._job_processes: set[int] = set()

    @staticmethod
    def missing() -> str:
        """Why this machine cannot run the cluster ("" when it can)."""
        absent = [tool for tool in SLURM_TOOLS if shutil.which(tool) is None]
        if absent:
            return f"Slurm/MUNGE not installed ({', '.join(absent)} missing): apt-get install slurm-wlm munge"
        if os.geteuid() != 0:
            return "the local Slurm cluster needs root: slurmd starts each job as the user who submitted it"
        return ""

    def command(self, *args: str, timeout: float = 60, check: bool = True) -> subprocess.CompletedProcess[str]:
        """A Slurm command (``squeue``, ``scancel``, ...) against this cluster."""
        return subprocess.run(args, env=self.env, capture_output=True, text=True, timeout=timeout, check=check)

    def _write_config(self) -> None:
        node_line = subprocess.run(["slurmd", "-C"], capture_output=True, text=True, check=True).stdout.splitlines()[0]
        self.node = node_line.split()[0].split("=", 1)[1]
        (self.root / "plugstack.conf").write_text("")
        for folder in ("state", "spool"):
            (self.root / folder).mkdir()
        self.conf.write_text(
            "\n".join(
                [
                    "ClusterName=dlbench-test",
                    f"SlurmctldHost={self.node}(127.0.0.1)",
                    f"SlurmctldPort={free_port()}",
                    f"SlurmdPort={free_port()}",
                    "SlurmUser=root",
                    "SlurmdUser=root",
                    "AuthType=auth/munge",
                    "CredType=cred/munge",
                    f"AuthInfo=socket={self.root / 'munge.socket'}",
                    f"StateSaveLocation={self.root / 'state'}",
                    f"SlurmdSpoolDir={self.root / 'spool'}",
                    f"SlurmctldPidFile={self.root / 'slurmctld.pid'}",
                    f"SlurmdPidFile={self.root / 'slurmd.pid'}",
                    f"SlurmctldLogFile={self.root / 'slurmctld.log'}",
                    f"SlurmdLogFile={self.root / 'slurmd.log'}",
                    f"PlugStackConfig={self.root / 'plugstack.conf'}",
                    "ProctrackType=proctrack/linuxproc",
                    "TaskPlugin=task/none",
                    "JobAcctGatherType=jobacct_gather/none",
                    "AccountingStorageType=accounting_storage/none",
                    "JobCompType=jobcomp/none",
                    "SchedulerType=sched/backfill",
                    "SelectType=select/cons_tres",
                    "SelectTypeParameters=CR_Core",
                    "MpiDefault=none",
                    "ReturnToService=2",
                    f"KillWait={self.kill_wait_s}",
                    "SlurmctldTimeout=30",
                    "SlurmdTimeout=60",
                    f"{node_line} NodeAddr=127.0.0.1 State=UNKNOWN",
                    "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
                    "",
                ]
            )
        )

    def _daemon(self, name: str, *args: str) -> None:
        log = (self.root / f"{name}.out").open("w")
        self._daemons[name] = subprocess.Popen(
            [name, *args], stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=self.root
        )
        log.close()

    def _logs(self) -> str:
        names = ("munged.log", "munged.out", "slurmctld.log", "slurmctld.out", "slurmd.log", "slurmd.out")
        return "\n".join(_tail(self.root / name) for name in names)

    def start(self) -> LocalSlurm:
        self.root.chmod(0o755)  # munged serves its socket only from a directory everyone may enter
        self._write_config()
        key = self.root / "munge.key"
        subprocess.run(["mungekey", "--create", f"--keyfile={key}"], check=True, capture_output=True)
        self._daemon(
            "munged", "--foreground", f"--socket={self.root / 'munge.socket'}", f"--key-file={key}",
            f"--pid-file={self.root / 'munged.pid'}", f"--log-file={self.root / 'munged.log'}",
            f"--seed-file={self.root / 'munged.seed'}",
        )  # fmt: skip
        deadline = time.monotonic() + 30
        while not (self.root / "munge.socket").exists():
            if self._daemons["munged"].poll() is not None or time.monotonic() > deadline:
                raise ServiceError(f"munged did not start\n{self._logs()}")
            time.sleep(0.1)
        self._daemon("slurmctld", "-D", "-i", "-f", str(self.conf))
        self._daemon("slurmd", "-D", "-f", str(self.conf))
        deadline = time.monotonic() + 60
        while True:
            state = self.command("sinfo", "-h", "-n", self.node, "-o", "%T", check=False).stdout.strip()
            if state == "idle":
                return self
            dead = [name for name, process in self._daemons.items() if process.poll() is not None]
            if dead or time.monotonic() > deadline:
                raise ServiceError(f"Slurm did not come up (node {state!r}, exited: {dead})\n{self._logs()}")
            time.sleep(0.5)

    def jobs(self) -> list[str]:
        """Ids of the jobs the controller still knows as pending or running."""
        out = self.command("squeue", "-h", "-o", "%i", check=False).stdout
        return [line.strip() for line in out.splitlines() if line.strip()]

    def stop(self) -> None:
        """Cancel every job, stop slurmd, slurmctld and munged, kill what their jobs left, remove the folder.
        Raises when anything of this cluster is still alive afterwards."""
        try:
            if "slurmctld" in self._daemons and self._daemons["slurmctld"].poll() is None:
                if self.jobs():
                    self.command("scancel", "--user", pwd.getpwuid(os.getuid()).pw_name, check=False)
                    deadline = time.monotonic() + self.kill_wait_s + 30
                    while self.jobs() and time.monotonic() < deadline:
                        time.sleep(0.5)
            if "slurmd" in self._daemons:
                try:  # job steps re-parent away from slurmd: remember them while it still has them
                    children = psutil.Process(self._daemons["slurmd"].pid).children(recursive=True)
                    self._job_processes.update(child.pid for child in children)
                except psutil.NoSuchProcess:
                    pass
            for name in ("slurmd", "slurmctld", "munged"):
                if name in self._daemons:
                    _stop(self._daemons[name])
            for pid in self._job_processes:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            left = _processes_under(self.root)
            if left:
                raise ServiceError(f"still running after stop: {[p.info['cmdline'] for p in left]}")
        finally:
            if self.log_dir is not None:
                self.log_dir.mkdir(parents=True, exist_ok=True)
                for log in self.root.glob("*.log"):
                    shutil.copy(log, self.log_dir / log.name)
            shutil.rmtree(self.root, ignore_errors=True)


def _postgres_bin() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


class LocalPostgres(_Service):
    """A PostgreSQL cluster in a temporary directory, run by an unprivileged user (``postgres``, created when
    absent, when this runs as root), listening on 127.0.0.1 only, with password (SCRAM) logins over TCP and
    the database ``mlflow`` of the user ``dlbench``. :attr:`uri` carries no password; :attr:`pgpass` is a
    password file for it, the way a tracking server keeps its database password."""

    USER, PASSWORD, DATABASE = "dlbench", "bench-pw-4711", "mlflow"

    def __init__(self) -> None:
        self.bin = _postgres_bin()
        self.root = Path(tempfile.mkdtemp(prefix="dlbench-pg-"))
        self.port = 0
        self.os_user = pwd.getpwuid(os.getuid()).pw_name
        self._started = False

    @staticmethod
    def missing() -> str:
        if _postgres_bin() is None:
            return "PostgreSQL not installed (initdb/pg_ctl missing): apt-get install postgresql"
        return ""

    @property
    def uri(self) -> str:
        return f"postgresql://{self.USER}@127.0.0.1:{self.port}/{self.DATABASE}"

    def uri_with_password(self, password: str) -> str:
        return f"postgresql://{self.USER}:{password}@127.0.0.1:{self.port}/{self.DATABASE}"

    @property
    def pgpass(self) -> Path:
        return self.root / "pgpass"

    def _as_owner(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        assert self.bin is not None
        kwargs: dict = {}
        if os.geteuid() == 0:  # PostgreSQL refuses to run as root
            kwargs = {"user": self.os_user, "group": pwd.getpwnam(self.os_user).pw_gid, "extra_groups": []}
        return subprocess.run(
            [str(self.bin / args[0]), *args[1:]], cwd=self.root, capture_output=True, text=True, timeout=120,
            check=check, **kwargs,
        )  # fmt: skip

    def start(self) -> LocalPostgres:
        if os.geteuid() == 0:
            try:
                pwd.getpwnam("postgres")
            except KeyError:
                subprocess.run(["useradd", "--system", "--no-create-home", "postgres"], check=True)
            self.os_user = "postgres"
            shutil.chown(self.root, self.os_user)
        self.port = free_port()
        password_file = self.root / "initdb-password"
        password_file.write_text(self.PASSWORD + "\n")
        shutil.chown(password_file, self.os_user)
        self._as_owner(
            "initdb", "-D", str(self.root / "data"), "-U", self.USER, f"--pwfile={password_file}",
            "--auth-local=trust", "--auth-host=scram-sha-256", "-E", "UTF8",
        )  # fmt: skip
        password_file.unlink()
        options = f"-c listen_addresses=127.0.0.1 -p {self.port} -c unix_socket_directories={self.root}"
        started = self._as_owner(
            "pg_ctl", "-D", str(self.root / "data"), "-o", options, "-l", str(self.root / "postgres.log"), "-w",
            "start", check=False,
        )  # fmt: skip
        self._started = True
        if started.returncode != 0:
            raise ServiceError(f"PostgreSQL did not start: {started.stderr}\n{_tail(self.root / 'postgres.log')}")
        self._as_owner("createdb", "-h", str(self.root), "-p", str(self.port), "-U", self.USER, self.DATABASE)
        self.pgpass.write_text(f"127.0.0.1:{self.port}:{self.DATABASE}:{self.USER}:{self.PASSWORD}\n")
        self.pgpass.chmod(0o600)
        return self

    def stop(self) -> None:
        try:
            if self._started:
                data = str(self.root / "data")
                stopped = self._as_owner("pg_ctl", "-D", data, "-m", "fast", "-w", "stop", check=False)
                if stopped.returncode != 0 and (self.root / "data" / "postmaster.pid").exists():
                    pid = int((self.root / "data" / "postmaster.pid").read_text().split()[0])
                    os.kill(pid, signal.SIGKILL)
            left = _processes_under(self.root)
            if left:
                raise ServiceError(f"still running after stop: {[p.info['cmdline'] for p in left]}")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


class MlflowServer(_Service):
    """``mlflow server`` on a free port of 127.0.0.1 with the given backend store, serving artifacts itself
    (clients upload them through it into ``artifacts``); ``extra_env`` reaches the server only."""

    def __init__(self, backend_uri: str, root: Path, extra_env: dict[str, str] | None = None) -> None:
        self.backend_uri = backend_uri
        self.root = root
        self.artifacts = root / "artifacts"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.extra_env = extra_env or {}
        self._process: subprocess.Popen | None = None

    def start(self) -> MlflowServer:
        self.root.mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "DLBENCH_"))}
        log = (self.root / "server.log").open("w")
        self._process = subprocess.Popen(
            [
                *(sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(self.port)),
                *("--workers", "1", "--backend-store-uri", self.backend_uri),
                *("--artifacts-destination", str(self.artifacts), "--serve-artifacts"),
            ],
            stdout=log, stderr=subprocess.STDOUT, env={**env, **self.extra_env}, start_new_session=True,
        )  # fmt: skip
        log.close()
        deadline = time.monotonic() + 300
        while True:
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=5) as response:
                    if response.status == 200:
                        return self
            except OSError:
                pass
            if self._process.poll() is not None or time.monotonic() > deadline:
                raise ServiceError(f"mlflow server did not come up\n{_tail(self.root / 'server.log', 4000)}")
            time.sleep(1)

    def stop(self) -> None:
        if self._process is not None:
            _stop(self._process, grace_s=30)
