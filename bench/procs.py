"""Child processes for the benchmarks: loopback ports, readiness, CPU pinning, RSS / CPU-time sampling, and a
registry that stops every process it started (SIGTERM, then SIGKILL), also on failure or interruption."""

from __future__ import annotations

import atexit
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def functions_dir() -> str:
    """The gateway code under test: functions/ of this checkout, or BENCH_FUNCTIONS (e.g. a patched copy)."""
    return os.environ.get("BENCH_FUNCTIONS") or str(ROOT / "functions")


def child_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    paths = [functions_dir(), str(ROOT), str(BENCH)]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


def cpu_count() -> int:
    return len(os.sched_getaffinity(0))


class Processes:
    """Every process started through here is stopped by `stop_all` (registered with atexit and signals)."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.procs: list[tuple[str, subprocess.Popen[bytes]]] = []
        atexit.register(self.stop_all)
        for sig in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, self._on_signal)

    def _on_signal(self, signum: int, _frame: object) -> None:
        self.stop_all()
        raise SystemExit(128 + signum)

    def start(
        self,
        name: str,
        argv: Sequence[str],
        *,
        env: dict[str, str] | None = None,
        cpus: set[int] | None = None,
        stdout_pipe: bool = False,
    ) -> subprocess.Popen[bytes]:
        cmd = list(argv)
        if cpus is not None and shutil.which("taskset") and cpu_count() > 1:
            cmd = ["taskset", "-c", ",".join(str(c) for c in sorted(cpus)), *cmd]
        log = open(self.log_dir / f"{name}.log", "ab")
        proc = subprocess.Popen(
            cmd,
            env=env or child_env(),
            cwd=str(ROOT),
            stdout=subprocess.PIPE if stdout_pipe else log,
            stderr=log,
            stdin=subprocess.DEVNULL,
        )
        log.close()
        self.procs.append((name, proc))
        return proc

    def stop(self, proc: subprocess.Popen[bytes], timeout: float = 8.0) -> None:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        if proc.stdout is not None:
            proc.stdout.close()
        self.procs = [(n, p) for n, p in self.procs if p is not proc]

    def stop_all(self) -> None:
        for _name, proc in list(self.procs):
            try:
                self.stop(proc)
            except Exception:
                pass


def wait_http(url: str, proc: subprocess.Popen[bytes] | None = None, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process for {url} exited with {proc.returncode}")
        try:
            r = httpx.get(url, timeout=2.0)
            if r.status_code < 500:
                return
        except httpx.HTTPError as error:
            last = error
        time.sleep(0.05)
    raise RuntimeError(f"{url} not ready after {timeout}s ({last!r})")


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    raise RuntimeError("no VmRSS")


def cpu_seconds(pid: int) -> float:
    """user + system CPU seconds of a process (all its threads)."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
        data = fh.read()
    fields = data.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def python() -> str:
    return sys.executable


class CpuWatch:
    """How much CPU other processes on the machine used: machine busy time (/proc/stat) minus this process, its
    reaped children and its live children. The benchmark cannot stop them; it reports them."""

    def __init__(self, registry: Processes) -> None:
        self.registry = registry

    def _machine_busy(self) -> float:
        with open("/proc/stat", encoding="ascii") as fh:
            fields = [int(x) for x in fh.readline().split()[1:]]
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
        return (sum(fields[:8]) - idle) / CLK_TCK

    def _mine(self) -> float:
        me = resource.getrusage(resource.RUSAGE_SELF)
        kids = resource.getrusage(resource.RUSAGE_CHILDREN)
        total = me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime
        for _name, proc in list(self.registry.procs):
            try:
                total += cpu_seconds(proc.pid)
            except (OSError, IndexError, ValueError):
                pass
        return total

    def snapshot(self) -> tuple[float, float, float]:
        return time.perf_counter(), self._machine_busy(), self._mine()

    @staticmethod
    def foreign(a: tuple[float, float, float], b: tuple[float, float, float]) -> float:
        """Average CPU use of other processes between two snapshots, in cores (1.0 = one core fully busy)."""
        wall = b[0] - a[0]
        if wall <= 0:
            return 0.0
        return max(0.0, ((b[1] - a[1]) - (b[2] - a[2])) / wall)
