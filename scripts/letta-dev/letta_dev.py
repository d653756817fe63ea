#!/usr/bin/env python3
"""letta-dev: install and run a real Letta 0.16.8 server stack on loopback for end-to-end tests.

Stdlib only; runs with the system python3 (3.11+). Both a CLI and an importable module:

    python3 scripts/letta-dev/letta_dev.py install      # idempotent, ~1 s when already installed
    python3 scripts/letta-dev/letta_dev.py up [--fresh] # Postgres + Redis + scripted model + Letta
    python3 scripts/letta-dev/letta_dev.py status
    python3 scripts/letta-dev/letta_dev.py demo-agent [--name NAME] [--parallel]
    python3 scripts/letta-dev/letta_dev.py down

    import letta_dev
    letta_dev.install(); stack = letta_dev.up(); ...; letta_dev.down()

Everything lives under $LETTA_DEV_HOME (default ~/.cache/letta-gateway/letta-dev):
    venv/                 the Letta server's own virtualenv (~1.2 GB)
    run/stack.json        what is running (URLs, ports, PIDs, logs)
    run/pgdata/           Postgres data directory (owned by the non-root Postgres user)
    run/letta-home/       HOME / LETTA_DIR of the Letta server
    run/logs/             one log file per process
See README.md next to this file.
"""
from __future__ import annotations

import argparse
import contextlib
import errno
import fcntl
import hashlib
import json
import os
import pwd
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Iterator

HERE = Path(__file__).resolve().parent
CONSTRAINTS_FILE = HERE / "constraints.txt"
FAKE_MODEL_SCRIPT = HERE / "fake_model.py"

LETTA_VERSION = "0.16.8"
PACKAGES = [
    f"letta[server,redis]=={LETTA_VERSION}",
    "asyncpg",
    "pg8000",
    "pgvector",
    "pgserver==0.1.4",
]
STAMP_NAME = ".letta-dev-stamp"
LOOPBACK = "127.0.0.1"
PG_DB_USER = "letta"
PG_DB_NAME = "letta"
STACK_VERSION = 1
COMPONENTS = ("postgres", "redis", "model", "letta")


class LettaDevError(RuntimeError):
    """A clear, user-facing failure of install/up/down."""


# --------------------------------------------------------------------------------------------
# configuration & paths


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError as exc:
        raise LettaDevError(f"{name} must be an integer, got {raw!r}") from exc


def dev_home() -> Path:
    raw = os.environ.get("LETTA_DEV_HOME", "").strip()
    base = Path(raw).expanduser() if raw else Path.home() / ".cache" / "letta-gateway" / "letta-dev"
    return base.absolute()


class _Paths:
    def __init__(self, home: Path) -> None:
        self.home = home
        self.venv = home / "venv"
        self.python = self.venv / "bin" / "python"
        self.letta_bin = self.venv / "bin" / "letta"
        self.stamp = self.venv / STAMP_NAME
        self.run = home / "run"
        self.logs = self.run / "logs"
        self.pgdata = self.run / "pgdata"
        self.letta_home = self.run / "letta-home"
        self.redis_dir = self.run / "redis"
        self.stack = self.run / "stack.json"
        self.lock = home / ".lock"
        self.schema_marker = self.run / "schema.ok"
        self.encryption_key = self.run / "encryption.key"
        self.model_log = self.logs / "model-requests.jsonl"
        self.ports = self.run / "ports.json"


def _paths() -> _Paths:
    return _Paths(dev_home())


def _pg_os_user() -> str:
    return os.environ.get("LETTA_DEV_PG_USER", "").strip() or "letta-dev-pg"


def _model_id() -> str:
    return os.environ.get("LETTA_DEV_MODEL_ID", "").strip() or "fake-model"


def _is_root() -> bool:
    return os.geteuid() == 0


# --------------------------------------------------------------------------------------------
# small helpers


def _say(msg: str) -> None:
    print(f"[letta-dev] {msg}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def _step(name: str, timings: dict[str, float] | None = None) -> Iterator[None]:
    t0 = time.monotonic()
    _say(f"{name} ...")
    ok = False
    try:
        yield
        ok = True
    finally:
        dt = time.monotonic() - t0
        if timings is not None:
            timings[name] = round(dt, 2)
        _say(f"{name}: {'done' if ok else 'FAILED'} in {dt:.1f}s")


def _tail(path: Path | str | None, lines: int = 40) -> str:
    if not path:
        return ""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 64 * 1024))
            data = fh.read().decode("utf-8", "replace")
    except OSError:
        return f"(no log at {path})"
    all_lines = data.splitlines()
    # only the latest run: _spawn_detached writes a "===== <time> $ <argv>" header per start
    starts = [i for i, line in enumerate(all_lines) if line.startswith("===== ")]
    if starts:
        all_lines = all_lines[starts[-1]:]
    return "\n".join(all_lines[-lines:])


def _run(
    cmd: list[str],
    *,
    timeout: float,
    log: Path,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    check: bool = True,
    what: str | None = None,
    new_session: bool = False,
) -> int:
    """Run a command to completion with its output appended to `log`; bounded by `timeout`."""
    log.parent.mkdir(parents=True, exist_ok=True)
    label = what or " ".join(cmd[:3])
    with open(log, "ab") as fh:
        fh.write(f"\n$ {' '.join(cmd)}\n".encode())
        fh.flush()
        try:
            proc = subprocess.run(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=fh,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=str(cwd) if cwd else None,
                timeout=timeout,
                start_new_session=new_session,
            )
        except subprocess.TimeoutExpired as exc:
            raise LettaDevError(f"{label}: timed out after {timeout:.0f}s. Log {log}:\n{_tail(log)}") from exc
        except FileNotFoundError as exc:
            raise LettaDevError(f"{label}: command not found: {cmd[0]}") from exc
    if check and proc.returncode != 0:
        raise LettaDevError(f"{label}: exit code {proc.returncode}. Log {log}:\n{_tail(log)}")
    return proc.returncode


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        # like the servers themselves: connections of a previous run in TIME_WAIT don't block the port
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((LOOPBACK, port))
        except OSError:
            return False
    return True


def _pick_port(env_name: str, taken: set[int], previous: int | None = None) -> int:
    fixed = _env_int(env_name, 0)
    if fixed:
        if not _port_free(fixed):
            raise LettaDevError(f"{env_name}={fixed}: port is already in use on {LOOPBACK}")
        taken.add(fixed)
        return fixed
    if previous and previous not in taken and _port_free(previous):
        taken.add(previous)
        return previous
    for _ in range(50):
        port = _free_port()
        if port not in taken:
            taken.add(port)
            return port
    raise LettaDevError("could not find a free port on 127.0.0.1")


def _tcp_open(port: int, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((LOOPBACK, port), timeout=timeout):
            return True
    except OSError:
        return False


_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never use env proxies for loopback


def _http(method: str, url: str, body: Any = None, timeout: float = 30.0) -> tuple[int, Any]:
    """Minimal JSON HTTP client for loopback URLs. Returns (status, parsed JSON or text)."""
    host = urllib.parse.urlsplit(url).hostname or ""
    if host not in ("127.0.0.1", "localhost", "::1"):
        raise LettaDevError(f"refusing non-loopback URL {url}")
    data = None
    headers = {"Accept": "application/json"}
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    req = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with _OPENER.open(req, timeout=timeout) as resp:
            status, raw = resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        status, raw = exc.code, exc.read()
    text = raw.decode("utf-8", "replace")
    try:
        return status, json.loads(text) if text else None
    except ValueError:
        return status, text


def _http_ok(url: str, timeout: float = 2.0) -> bool:
    try:
        status, _ = _http("GET", url, timeout=timeout)
    except (OSError, LettaDevError):
        return False
    return status == 200


def _wait_until(what: str, probe, timeout: float, *, pid: int | None = None, log: Path | None = None,
                interval: float = 0.25) -> float:
    """Poll `probe()` until true; fail fast if `pid` dies; bounded by `timeout`. Returns seconds waited."""
    t0 = time.monotonic()
    deadline = t0 + timeout
    while True:
        if probe():
            return time.monotonic() - t0
        if pid is not None and not _pid_alive(pid):
            raise LettaDevError(f"{what}: process {pid} exited before becoming ready. Log {log}:\n{_tail(log)}")
        if time.monotonic() >= deadline:
            raise LettaDevError(f"{what}: not ready after {timeout:.0f}s. Log {log}:\n{_tail(log)}")
        time.sleep(interval)


# --------------------------------------------------------------------------------------------
# processes


def _proc_stat(pid: int) -> tuple[str, int, int] | None:
    """(state, pgid, starttime ticks) from /proc/<pid>/stat, or None if gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    rest = raw[raw.rfind(")") + 2:].split()
    # rest[0]=state, [2]=pgrp, [19]=starttime (fields 3, 5, 22 of the full line)
    try:
        return rest[0], int(rest[2]), int(rest[19])
    except (IndexError, ValueError):
        return None


def _pid_alive(pid: int | None) -> bool:
    if not pid or pid <= 0:
        return False
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)  # reap if it happens to be our own child
    st = _proc_stat(pid)
    return st is not None and st[0] not in ("Z", "X")


def _proc_start(pid: int) -> int | None:
    st = _proc_stat(pid)
    return st[2] if st else None


def _same_process(pid: int | None, start: int | None) -> bool:
    """Alive and (if we know its start time) still the process we started, not a reused PID."""
    if not _pid_alive(pid):
        return False
    if start is None:
        return True
    return _proc_start(pid) == start  # type: ignore[arg-type]


_LAUNCHER = r"""
import json, os, subprocess, sys
spec = json.load(sys.stdin)
log = open(spec["log"], "ab", buffering=0)
p = subprocess.Popen(spec["argv"], cwd=spec["cwd"], env=spec["env"], stdin=subprocess.DEVNULL,
                     stdout=log, stderr=subprocess.STDOUT, start_new_session=True, close_fds=True)
sys.stdout.write(str(p.pid))
sys.stdout.flush()
os._exit(0)
"""


def _spawn_detached(argv: list[str], *, log: Path, env: dict[str, str], cwd: Path) -> int:
    """Start argv in its own session, detached from us (double fork through a tiny launcher), so it
    keeps running after the caller exits and never becomes the caller's zombie. Returns its PID."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as fh:
        fh.write(f"\n===== {time.strftime('%Y-%m-%d %H:%M:%S')} $ {' '.join(argv)}\n".encode())
    spec = {"argv": argv, "env": env, "cwd": str(cwd), "log": str(log)}
    try:
        out = subprocess.run([sys.executable, "-c", _LAUNCHER], input=json.dumps(spec).encode(),
                             capture_output=True, timeout=30, env={"PATH": os.environ.get("PATH", "")})
    except subprocess.TimeoutExpired as exc:
        raise LettaDevError(f"launcher timed out starting {argv[0]}") from exc
    if out.returncode != 0 or not out.stdout.strip().isdigit():
        raise LettaDevError(f"could not start {argv[0]}: {out.stderr.decode(errors='replace')[-2000:]}")
    return int(out.stdout.strip())


def _terminate(name: str, pid: int | None, start: int | None, grace: float = 15.0) -> bool:
    """TERM the process (and its process group if it leads one), KILL after `grace`. True if it was running."""
    if not pid or not _same_process(pid, start):
        return False
    st = _proc_stat(pid)
    group = st is not None and st[1] == pid

    def send(sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if group:
                os.killpg(pid, sig)
            else:
                os.kill(pid, sig)

    send(signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if not _pid_alive(pid):
            _say(f"stopped {name} (pid {pid})")
            return True
        time.sleep(0.1)
    _say(f"{name} (pid {pid}) ignored SIGTERM for {grace:.0f}s: sending SIGKILL")
    send(signal.SIGKILL)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and _pid_alive(pid):
        time.sleep(0.1)
    if _pid_alive(pid):
        raise LettaDevError(f"could not stop {name} (pid {pid})")
    return True


@contextlib.contextmanager
def _locked(timeout: float = 600.0) -> Iterator[None]:
    """Serialise install/up/down between processes (e.g. parallel pytest workers)."""
    p = _paths()
    p.home.mkdir(parents=True, exist_ok=True)
    with open(p.lock, "a+") as fh:
        deadline = time.monotonic() + timeout
        waited = False
        while True:
            try:
                fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
                if time.monotonic() >= deadline:
                    raise LettaDevError(f"another letta-dev command holds {p.lock} for more than {timeout:.0f}s")
                if not waited:
                    _say(f"waiting for another letta-dev command (lock {p.lock}) ...")
                    waited = True
                time.sleep(0.5)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


# --------------------------------------------------------------------------------------------
# install


def _stamp_value() -> str:
    h = hashlib.sha256()
    h.update(CONSTRAINTS_FILE.read_bytes())
    h.update(b"\0")
    h.update("\n".join(PACKAGES).encode())
    return h.hexdigest()


def _venv_ready(p: _Paths) -> bool:
    try:
        stamp = p.stamp.read_text().strip()
    except OSError:
        return False
    return stamp == _stamp_value() and p.python.exists() and p.letta_bin.exists()


def _base_python() -> str:
    override = os.environ.get("LETTA_DEV_PYTHON", "").strip()
    if override:
        return override
    if sys.version_info < (3, 11) or sys.version_info >= (3, 14):
        raise LettaDevError(
            f"Letta {LETTA_VERSION} needs Python 3.11-3.13 for its venv; this is {sys.version.split()[0]}. "
            "Run with python3.11+ or set LETTA_DEV_PYTHON to such an interpreter."
        )
    return sys.executable


def _ensure_venv(p: _Paths, timings: dict[str, float]) -> None:
    if _venv_ready(p):
        _say(f"server venv up to date ({p.venv})")
        return
    if not CONSTRAINTS_FILE.exists():
        raise LettaDevError(f"missing constraints file {CONSTRAINTS_FILE}")
    log = p.logs / "install.log"
    if p.stamp.exists():
        # Built from different inputs: start over so no stale pin survives.
        with _step("remove outdated venv", timings):
            shutil.rmtree(p.venv)
    if not p.python.exists():
        if p.venv.exists():
            shutil.rmtree(p.venv)
        with _step("create venv", timings):
            _run([_base_python(), "-m", "venv", str(p.venv)], timeout=300, log=log, what="python -m venv")
    pip_env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1", PYTHONNOUSERSITE="1")
    with _step("upgrade pip in venv", timings):
        _run([str(p.python), "-m", "pip", "install", "--upgrade", "pip"], timeout=600, log=log,
             env=pip_env, what="pip install --upgrade pip")
    with _step(f"pip install letta {LETTA_VERSION} (+asyncpg pg8000 pgvector pgserver), log {log}", timings):
        _run([str(p.python), "-m", "pip", "install", "-c", str(CONSTRAINTS_FILE), *PACKAGES],
             timeout=1800, log=log, env=pip_env, what="pip install letta")
    if not p.letta_bin.exists():
        raise LettaDevError(f"pip finished but {p.letta_bin} is missing. Log {log}:\n{_tail(log)}")
    p.stamp.write_text(_stamp_value() + "\n")


def _redis_server_bin() -> str | None:
    found = shutil.which("redis-server")
    if found:
        return found
    for cand in ("/usr/bin/redis-server", "/usr/sbin/redis-server", "/usr/local/bin/redis-server"):
        if os.access(cand, os.X_OK):
            return cand
    return None


def _apt_candidate(pkg: str) -> bool:
    try:
        out = subprocess.run(["apt-cache", "policy", pkg], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return False
    for line in out.splitlines():
        line = line.strip()
        if line.startswith("Candidate:"):
            return "(none)" not in line
    return False


def _ensure_redis(p: _Paths, timings: dict[str, float]) -> None:
    if _redis_server_bin():
        _say(f"redis-server present ({_redis_server_bin()})")
        return
    if not shutil.which("apt-get"):
        raise LettaDevError("redis-server is not installed and apt-get is not available")
    if not _is_root():
        raise LettaDevError("redis-server is not installed; run `apt-get install redis-server` as root (or run install as root)")
    log = p.logs / "install-apt.log"
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    policy = Path("/usr/sbin/policy-rc.d")
    created_policy = False
    if not policy.exists():
        # keep the package's init script from starting a system-wide redis on port 6379
        policy.write_text("#!/bin/sh\nexit 101\n")
        policy.chmod(0o755)
        created_policy = True
    try:
        updated = False
        if not _apt_candidate("redis-server"):
            with _step("apt-get update", timings):
                _run(["apt-get", "update"], timeout=600, log=log, env=env, what="apt-get update")
            updated = True
        with _step("apt-get install redis-server", timings):
            cmd = ["apt-get", "install", "-y", "--no-install-recommends", "redis-server"]
            rc = _run(cmd, timeout=900, log=log, env=env, check=updated, what="apt-get install redis-server")
            if rc != 0:  # stale package lists: refresh once and retry
                _run(["apt-get", "update"], timeout=600, log=log, env=env, what="apt-get update")
                _run(cmd, timeout=900, log=log, env=env, what="apt-get install redis-server")
    finally:
        if created_policy:
            with contextlib.suppress(OSError):
                policy.unlink()
    if not _redis_server_bin():
        raise LettaDevError(f"redis-server still missing after apt-get install. Log {log}:\n{_tail(log)}")


def _ensure_pg_user(p: _Paths, timings: dict[str, float]) -> None:
    if not _is_root():
        return  # Postgres runs as the invoking (non-root) user
    user = _pg_os_user()
    try:
        pwd.getpwnam(user)
        return
    except KeyError:
        pass
    with _step(f"create system user {user} for Postgres", timings):
        _run(["useradd", "--system", "--user-group", "--no-create-home", "--home-dir", "/nonexistent",
              "--shell", "/usr/sbin/nologin", user], timeout=60, log=p.logs / "install.log", what="useradd")


def _pg_bin_dir(p: _Paths) -> Path:
    found = sorted(p.venv.glob("lib/python3*/site-packages/pgserver/pginstall/bin"))
    if not found:
        raise LettaDevError(f"pgserver's Postgres binaries not found in {p.venv}; run `letta_dev.py install`")
    return found[0]


def _as_pg_user(cmd: list[str]) -> list[str]:
    if _is_root():
        return ["runuser", "-u", _pg_os_user(), "--", *cmd]
    return cmd


def _ensure_pg_access(p: _Paths) -> None:
    """The Postgres user must be able to traverse down to the venv binaries and the run dir.
    When LETTA_DEV_HOME lives under a private home (e.g. /root, mode 700) grant search-only (o+x)
    permission on the ancestors that lack it: nobody can list them, only pass through."""
    if not _is_root():
        return
    targets = [p.run, _pg_bin_dir(p)]
    user = pwd.getpwnam(_pg_os_user())
    for target in targets:
        chain = [target, *target.parents]
        for d in reversed(chain):
            try:
                st = d.stat()
            except OSError:
                continue
            if st.st_uid == user.pw_uid or st.st_mode & stat.S_IXOTH:
                continue
            d.chmod(st.st_mode | stat.S_IXOTH)
            _say(f"granted search permission (o+x) on {d} so {user.pw_name} can reach {target}")


def install() -> dict[str, Any]:
    """Idempotent: server venv, redis-server (apt), Postgres system user. Returns timings."""
    t0 = time.monotonic()
    p = _paths()
    timings: dict[str, float] = {}
    with _locked():
        p.logs.mkdir(parents=True, exist_ok=True)
        _ensure_venv(p, timings)
        _ensure_redis(p, timings)
        _ensure_pg_user(p, timings)
        _ensure_pg_access(p)
    total = round(time.monotonic() - t0, 2)
    _say(f"install complete in {total:.1f}s")
    return {"venv": str(p.venv), "seconds": total, "timings": timings}


# --------------------------------------------------------------------------------------------
# stack state


def _read_stack() -> dict[str, Any] | None:
    p = _paths()
    try:
        return json.loads(p.stack.read_text())
    except (OSError, ValueError):
        return None


def _write_stack(stack: dict[str, Any]) -> None:
    p = _paths()
    p.run.mkdir(parents=True, exist_ok=True)
    tmp = p.stack.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(stack, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, p.stack)


def _redis_ping(port: int, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((LOOPBACK, port), timeout=timeout) as s:
            s.sendall(b"PING\r\n")
            return s.recv(64).startswith(b"+PONG")
    except OSError:
        return False


def _component_up(stack: dict[str, Any], name: str) -> bool:
    pid = (stack.get("pids") or {}).get(name)
    start = (stack.get("proc_start") or {}).get(name)
    port = (stack.get("ports") or {}).get(name)
    if not _same_process(pid, start) or not port:
        return False
    if name == "postgres":
        return _tcp_open(port)
    if name == "redis":
        return _redis_ping(port)
    if name == "model":
        return _http_ok(f"http://{LOOPBACK}:{port}/v1/models")
    if name == "letta":
        return _http_ok(f"http://{LOOPBACK}:{port}/v1/health/", timeout=5.0)
    return False


def _stack_healthy(stack: dict[str, Any]) -> bool:
    return stack.get("version") == STACK_VERSION and all(_component_up(stack, c) for c in COMPONENTS)


# --------------------------------------------------------------------------------------------
# up


_SCHEMA_SCRIPT = r"""
import json, os, sys, time
t0 = time.monotonic()
uri = os.environ["LETTA_PG_URI"]
port = int(os.environ["LETTA_DEV_PG_PORT"])
db_user, db_name = os.environ["LETTA_DEV_PG_DB_USER"], os.environ["LETTA_DEV_PG_DB_NAME"]

import pg8000.dbapi
conn = pg8000.dbapi.connect(user=db_user, host="127.0.0.1", port=port, database="postgres", timeout=30)
conn.autocommit = True
cur = conn.cursor()
cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (db_name,))
if not cur.fetchall():
    cur.execute('CREATE DATABASE "%s"' % db_name)
conn.close()

# LETTA_PG_URI is already in the environment, so letta's settings see Postgres from the first import.
import letta.orm  # registers every ORM model (not letta.orm.job_messages: stale, breaks configure_mappers)
from sqlalchemy import create_engine, text
from sqlalchemy.orm import configure_mappers
from letta.database_utils import get_database_uri_for_context
from letta.orm.base import Base

configure_mappers()
engine = create_engine(get_database_uri_for_context(uri, "sync"))
with engine.begin() as c:
    c.execute(text("CREATE EXTENSION IF NOT EXISTS vector"))
    Base.metadata.create_all(c)
    c.execute(text("CREATE SEQUENCE IF NOT EXISTS message_seq_id"))
    c.execute(text("ALTER TABLE messages ALTER COLUMN sequence_id SET DEFAULT nextval('message_seq_id')"))
    c.execute(text("ALTER TABLE archives_agents ALTER COLUMN created_at SET DEFAULT now()"))
    n = c.execute(text("SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'")).scalar()
engine.dispose()
print(json.dumps({"tables": n, "seconds": round(time.monotonic() - t0, 2)}))
"""


def _server_env(p: _Paths, extra: dict[str, str]) -> dict[str, str]:
    """A clean environment for the Letta server: no inherited provider keys, proxies or venvs."""
    env = {
        "PATH": f"{p.venv / 'bin'}:{os.environ.get('PATH', '/usr/local/bin:/usr/bin:/bin')}",
        "HOME": str(p.letta_home),
        "LETTA_DIR": str(p.letta_home / ".letta"),
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "TZ": "UTC",
        "PYTHONUNBUFFERED": "1",
        "PYTHONNOUSERSITE": "1",
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
        "TMPDIR": os.environ.get("TMPDIR", "/tmp"),
    }
    for k, v in os.environ.items():  # let a developer pass Letta settings through (LETTA_DEBUG, ...)
        if k.startswith("LETTA_") and not k.startswith("LETTA_DEV_") and k not in ("LETTA_BASE_URL",):
            env[k] = v
    env.update(extra)
    return env


def _encryption_key(p: _Paths) -> str:
    override = os.environ.get("LETTA_DEV_ENCRYPTION_KEY", "").strip()
    if override:
        return override
    try:
        key = p.encryption_key.read_text().strip()
        if key:
            return key
    except OSError:
        pass
    key = secrets.token_urlsafe(32)
    p.encryption_key.write_text(key + "\n")
    p.encryption_key.chmod(0o600)
    return key


def _stop_postgres(p: _Paths, stack: dict[str, Any] | None) -> bool:
    """Stop the Postgres of our pgdata (found via stack.json or postmaster.pid). True if one ran."""
    pidfile = p.pgdata / "postmaster.pid"
    pid = None
    with contextlib.suppress(OSError, ValueError, IndexError):
        pid = int(pidfile.read_text().splitlines()[0])
    if not pid and stack:
        pid = (stack.get("pids") or {}).get("postgres")
    if not pid or not _pid_alive(pid):
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
    except OSError:
        return False
    if not cmdline.endswith(b"postgres"):
        return False  # stale postmaster.pid whose PID now belongs to something else
    try:
        bindir = _pg_bin_dir(p)
        _run(_as_pg_user([str(bindir / "pg_ctl"), "stop", "-D", str(p.pgdata), "-m", "fast", "-w", "-t", "30"]),
             timeout=45, log=p.logs / "postgres-ctl.log", what="pg_ctl stop", check=False)
    except LettaDevError as exc:
        _say(f"pg_ctl stop failed ({exc}); killing postgres")
    if _pid_alive(pid):
        _terminate("postgres", pid, None, grace=10)
    else:
        _say(f"stopped postgres (pid {pid})")
    return True


def _down_locked(quiet: bool = False) -> bool:
    p = _paths()
    stack = _read_stack()
    any_stopped = False
    if stack:
        pids = stack.get("pids") or {}
        starts = stack.get("proc_start") or {}
        for name in ("letta", "model", "redis"):
            if _terminate(name, pids.get(name), starts.get(name)):
                any_stopped = True
    if p.pgdata.exists() and _stop_postgres(p, stack):
        any_stopped = True
    with contextlib.suppress(FileNotFoundError):
        p.stack.unlink()
    if not any_stopped and not quiet:
        _say("nothing was running")
    return any_stopped


def _wipe_data(p: _Paths) -> None:
    for d in (p.pgdata, p.letta_home, p.redis_dir, p.logs):
        if d.exists():
            shutil.rmtree(d)
    for f in (p.schema_marker, p.encryption_key, p.stack, p.ports):
        with contextlib.suppress(FileNotFoundError):
            f.unlink()


def _start_postgres(p: _Paths, stack: dict[str, Any], timings: dict[str, float]) -> bool:
    """initdb on first use, then pg_ctl start. Returns True if the cluster was freshly created."""
    bindir = _pg_bin_dir(p)
    user = _pg_os_user()
    created = False
    log = p.logs / "postgres.log"
    if not (p.pgdata / "PG_VERSION").exists():
        with _step("initdb", timings):
            if p.pgdata.exists():
                shutil.rmtree(p.pgdata)  # half-made by an interrupted initdb
            p.pgdata.mkdir(parents=True)
            p.pgdata.chmod(0o700)
            if _is_root():
                shutil.chown(p.pgdata, user, user)
            _run(_as_pg_user([str(bindir / "initdb"), "-D", str(p.pgdata), "--auth=trust", "-U", PG_DB_USER,
                              "-E", "UTF8", "--locale=C"]),
                 timeout=180, log=p.logs / "initdb.log", what="initdb")
            # Loopback TCP only; a throw-away test database does not need crash safety.
            with open(p.pgdata / "postgresql.conf", "a") as fh:
                fh.write("\n# letta-dev\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = ''\n"
                         "fsync = off\nsynchronous_commit = off\nfull_page_writes = off\n"
                         "max_connections = 200\n")
            with contextlib.suppress(FileNotFoundError):
                p.schema_marker.unlink()
        created = True
    else:
        _stop_postgres(p, None)  # an orphan from a lost stack.json would hold the data dir
    log.touch()
    if _is_root():
        shutil.chown(log, user, user)
    port = stack["ports"]["postgres"]
    with _step(f"start postgres on {LOOPBACK}:{port}", timings):
        _run(_as_pg_user([str(bindir / "pg_ctl"), "start", "-D", str(p.pgdata), "-l", str(log),
                          "-o", f"-p {port} -c listen_addresses={LOOPBACK}", "-w", "-t", "60"]),
             timeout=75, log=p.logs / "postgres-ctl.log", what="pg_ctl start", new_session=True)
        pid = int((p.pgdata / "postmaster.pid").read_text().splitlines()[0])
        stack["pids"]["postgres"] = pid
        stack["proc_start"]["postgres"] = _proc_start(pid)
        _write_stack(stack)
        _wait_until("postgres", lambda: _tcp_open(port), 30, pid=pid, log=log)
    return created


def _ensure_schema(p: _Paths, stack: dict[str, Any], timings: dict[str, float]) -> None:
    if p.schema_marker.exists():
        _say("schema already created")
        return
    log = p.logs / "schema.log"
    env = _server_env(p, {
        "LETTA_PG_URI": stack["pg_uri"],
        "LETTA_DEV_PG_PORT": str(stack["ports"]["postgres"]),
        "LETTA_DEV_PG_DB_USER": PG_DB_USER,
        "LETTA_DEV_PG_DB_NAME": PG_DB_NAME,
        "LETTA_ENCRYPTION_KEY": _encryption_key(p),
    })
    with _step("create database schema", timings):
        _run([str(p.python), "-c", _SCHEMA_SCRIPT], timeout=180, log=log, env=env, cwd=p.letta_home,
             what="schema creation")
    p.schema_marker.write_text(time.strftime("%Y-%m-%dT%H:%M:%S") + "\n")


def _start_redis(p: _Paths, stack: dict[str, Any], timings: dict[str, float]) -> None:
    redis_bin = _redis_server_bin()
    if not redis_bin:
        raise LettaDevError("redis-server not found; run `letta_dev.py install`")
    port = stack["ports"]["redis"]
    p.redis_dir.mkdir(parents=True, exist_ok=True)
    log = Path(stack["logs"]["redis"])
    with _step(f"start redis on {LOOPBACK}:{port}", timings):
        argv = [redis_bin, "--bind", LOOPBACK, "--port", str(port), "--save", "", "--appendonly", "no",
                "--protected-mode", "yes", "--daemonize", "no", "--dir", str(p.redis_dir), "--logfile", ""]
        pid = _spawn_detached(argv, log=log, env={"PATH": "/usr/bin:/bin"}, cwd=p.redis_dir)
        stack["pids"]["redis"] = pid
        stack["proc_start"]["redis"] = _proc_start(pid)
        _write_stack(stack)
        _wait_until("redis", lambda: _redis_ping(port), 20, pid=pid, log=log)


def _start_model(p: _Paths, stack: dict[str, Any], timings: dict[str, float]) -> None:
    port = stack["ports"]["model"]
    log = Path(stack["logs"]["model"])
    req_log = Path(stack["model_request_log"])
    req_log.write_text("")  # a new model server starts a new request log
    with _step(f"start scripted model server on {LOOPBACK}:{port}", timings):
        argv = [sys.executable, str(FAKE_MODEL_SCRIPT), "--host", LOOPBACK, "--port", str(port),
                "--model-id", stack["model_id"], "--request-log", str(req_log)]
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONUNBUFFERED": "1", "LANG": "C.UTF-8"}
        pid = _spawn_detached(argv, log=log, env=env, cwd=p.run)
        stack["pids"]["model"] = pid
        stack["proc_start"]["model"] = _proc_start(pid)
        _write_stack(stack)
        _wait_until("model server", lambda: _http_ok(f"{stack['model_base_url']}/models"), 20, pid=pid, log=log)


def _start_letta(p: _Paths, stack: dict[str, Any], timings: dict[str, float]) -> None:
    port = stack["ports"]["letta"]
    log = Path(stack["logs"]["letta"])
    (p.letta_home / ".letta").mkdir(parents=True, exist_ok=True)
    env = _server_env(p, {
        "LETTA_PG_URI": stack["pg_uri"],
        "LETTA_REDIS_HOST": LOOPBACK,
        "LETTA_REDIS_PORT": str(stack["ports"]["redis"]),
        "OPENAI_BASE_URL": stack["model_base_url"],
        "OPENAI_API_KEY": "letta-dev-unused",
        "LETTA_ENCRYPTION_KEY": _encryption_key(p),
    })
    timeout = float(_env_int("LETTA_DEV_LETTA_TIMEOUT", 120))
    with _step(f"start letta server on {LOOPBACK}:{port} (wait <= {timeout:.0f}s)", timings):
        argv = [str(p.letta_bin), "server", "--host", LOOPBACK, "--port", str(port)]
        pid = _spawn_detached(argv, log=log, env=env, cwd=p.letta_home)
        stack["pids"]["letta"] = pid
        stack["proc_start"]["letta"] = _proc_start(pid)
        _write_stack(stack)
        _wait_until("letta server (GET /v1/health/)",
                    lambda: _http_ok(f"{stack['letta_base_url']}/v1/health/", timeout=3.0),
                    timeout, pid=pid, log=log, interval=0.5)

    def model_registered() -> bool:
        try:
            status, body = _http("GET", f"{stack['letta_base_url']}/v1/models/", timeout=10)
        except OSError:
            return False
        return status == 200 and any(
            isinstance(m, dict) and m.get("handle") == stack["model_handle"] for m in (body or []))

    _wait_until(f"letta model list to contain {stack['model_handle']}", model_registered, 30,
                pid=pid, log=log, interval=1.0)


def _choose_ports(p: _Paths) -> dict[str, int]:
    """Free loopback ports, sticky per data directory. Letta stores the model server's URL
    (OPENAI_BASE_URL at first start) in its database and in every agent's llm_config, so the model
    port in particular must stay the same for as long as the data lives."""
    try:
        previous = json.loads(p.ports.read_text())
    except (OSError, ValueError):
        previous = {}
    taken: set[int] = set()
    ports = {
        "model": _pick_port("LETTA_DEV_MODEL_PORT", taken, previous.get("model")),
        "postgres": _pick_port("LETTA_DEV_PG_PORT", taken, previous.get("postgres")),
        "redis": _pick_port("LETTA_DEV_REDIS_PORT", taken, previous.get("redis")),
        "letta": _pick_port("LETTA_DEV_LETTA_PORT", taken, previous.get("letta")),
    }
    if previous.get("model") and ports["model"] != previous["model"] and p.schema_marker.exists():
        _say(f"WARNING: the scripted model moves from port {previous['model']} to {ports['model']}: "
             "Letta remembers the old URL for the models and agents it already knows, so their LLM calls "
             "will fail with a connection error. Use `up --fresh` to start over.")
    p.ports.write_text(json.dumps(ports) + "\n")
    return ports


def up(fresh: bool = False) -> dict[str, Any]:
    """Start (or reuse) the whole stack; returns the stack.json content."""
    p = _paths()
    with _locked():
        if fresh:
            _down_locked(quiet=True)
            _wipe_data(p)
            _say(f"wiped data under {p.run}")
        else:
            old = _read_stack()
            if old and _stack_healthy(old):
                _say(f"stack already up and healthy: reusing it (letta {old['letta_base_url']})")
                return old
            if old:
                _say("previous stack is only partly up: restarting all of it")
            _down_locked(quiet=True)
        if not _venv_ready(p):
            raise LettaDevError(f"Letta venv missing or outdated at {p.venv}; "
                                f"run `python3 {Path(__file__).resolve()} install` first")
        if not FAKE_MODEL_SCRIPT.exists():
            raise LettaDevError(f"missing {FAKE_MODEL_SCRIPT}")
        for d in (p.run, p.logs, p.letta_home):
            d.mkdir(parents=True, exist_ok=True)
        if _is_root():
            try:
                pwd.getpwnam(_pg_os_user())
            except KeyError:
                raise LettaDevError(f"system user {_pg_os_user()} missing; run `letta_dev.py install`") from None
        _ensure_pg_access(p)

        t0 = time.monotonic()
        timings: dict[str, float] = {}
        ports = _choose_ports(p)
        model_id = _model_id()
        stack: dict[str, Any] = {
            "version": STACK_VERSION,
            "home": str(p.home),
            "run_dir": str(p.run),
            "venv": str(p.venv),
            "letta_version": LETTA_VERSION,
            "letta_base_url": f"http://{LOOPBACK}:{ports['letta']}",
            "model_base_url": f"http://{LOOPBACK}:{ports['model']}/v1",
            "model_id": model_id,
            "model_handle": f"openai-proxy/{model_id}",
            "model_request_log": str(p.model_log),
            "pg_uri": f"postgresql://{PG_DB_USER}@{LOOPBACK}:{ports['postgres']}/{PG_DB_NAME}",
            "pg_data": str(p.pgdata),
            "pg_os_user": _pg_os_user() if _is_root() else pwd.getpwuid(os.geteuid()).pw_name,
            "redis_host": LOOPBACK,
            "redis_port": ports["redis"],
            "ports": ports,
            "pids": {},
            "proc_start": {},
            "logs": {
                "postgres": str(p.logs / "postgres.log"),
                "schema": str(p.logs / "schema.log"),
                "redis": str(p.logs / "redis.log"),
                "model": str(p.logs / "model.log"),
                "letta": str(p.logs / "letta.log"),
            },
            "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "timings": timings,
        }
        _write_stack(stack)
        try:
            _start_postgres(p, stack, timings)
            _ensure_schema(p, stack, timings)
            _start_redis(p, stack, timings)
            _start_model(p, stack, timings)
            _start_letta(p, stack, timings)
        except BaseException:
            _say("start failed: stopping what was started")
            with contextlib.suppress(Exception):
                _down_locked(quiet=True)
            raise
        stack["up_seconds"] = round(time.monotonic() - t0, 2)
        _write_stack(stack)
        _say(f"stack up in {stack['up_seconds']:.1f}s; state in {p.stack}")
        return stack


def down() -> bool:
    """Stop everything recorded in stack.json (and our Postgres). Safe to call repeatedly."""
    with _locked():
        return _down_locked()


def status() -> dict[str, Any]:
    """{component: {"up": bool, "pid": int, "port": int}} plus the stack file path."""
    stack = _read_stack()
    result: dict[str, Any] = {"stack_file": str(_paths().stack), "components": {}}
    if not stack:
        return result
    for name in COMPONENTS:
        result["components"][name] = {
            "up": _component_up(stack, name),
            "pid": (stack.get("pids") or {}).get(name),
            "port": (stack.get("ports") or {}).get(name),
        }
    result["letta_base_url"] = stack.get("letta_base_url")
    result["model_handle"] = stack.get("model_handle")
    return result


# --------------------------------------------------------------------------------------------
# agents & model log


def create_agent(base_url: str, name: str, parallel: bool = False, model: str | None = None) -> dict[str, Any]:
    """Find the agent called `name`, or create it on the scripted model. With parallel=True the agent
    gets model_settings.parallel_tool_calls=true (patched in if an existing agent lacks it)."""
    base = base_url.rstrip("/")
    if model is None:
        stack = _read_stack()
        model = (stack or {}).get("model_handle") or f"openai-proxy/{_model_id()}"
    settings = {"provider_type": "openai", "parallel_tool_calls": True}
    query = urllib.parse.urlencode({"name": name, "limit": 50})
    status_code, found = _http("GET", f"{base}/v1/agents/?{query}")
    if status_code != 200:
        raise LettaDevError(f"GET /v1/agents/ failed: {status_code} {str(found)[:500]}")
    for agent in found or []:
        if agent.get("name") == name:
            llm = agent.get("llm_config") or {}
            if parallel and not llm.get("parallel_tool_calls"):
                sc, agent = _http("PATCH", f"{base}/v1/agents/{agent['id']}", {"model_settings": settings})
                if sc != 200:
                    raise LettaDevError(f"PATCH /v1/agents/{{id}} failed: {sc} {str(agent)[:500]}")
            return agent
    body: dict[str, Any] = {"name": name, "model": model, "tags": ["letta-dev"]}
    if parallel:
        body["model_settings"] = settings
    sc, agent = _http("POST", f"{base}/v1/agents/", body, timeout=60)
    if sc != 200 or not isinstance(agent, dict):
        raise LettaDevError(f"POST /v1/agents/ failed: {sc} {str(agent)[:1000]}")
    return agent


def model_requests(stack: dict[str, Any]) -> list[dict[str, Any]]:
    """Every request body the scripted model received (POST /v1/chat/completions), oldest first."""
    path = stack.get("model_request_log")
    if not path:
        return []
    out: list[dict[str, Any]] = []
    try:
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                line = line.strip()
                if not line:
                    continue
                with contextlib.suppress(ValueError):
                    out.append(json.loads(line))
    except FileNotFoundError:
        return []
    return out


# --------------------------------------------------------------------------------------------
# CLI


def _main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="letta_dev.py", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("install", help="create the Letta venv, install redis-server and the Postgres user")
    up_p = sub.add_parser("up", help="start (or reuse) postgres, redis, the scripted model and letta")
    up_p.add_argument("--fresh", action="store_true", help="wipe all data first")
    sub.add_parser("down", help="stop everything")
    sub.add_parser("status", help="show what is running")
    da = sub.add_parser("demo-agent", help="create (or find) an agent on the scripted model")
    da.add_argument("--name", default="letta-dev-demo")
    da.add_argument("--parallel", action="store_true", help="enable parallel tool calls")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "install":
            install()
        elif args.cmd == "up":
            stack = up(fresh=args.fresh)
            print(f"LETTA_DEV_STACK={_paths().stack}")
            print(f"LETTA_MODEL_HANDLE={stack['model_handle']}")
            print(f"LETTA_BASE_URL={stack['letta_base_url']}")
        elif args.cmd == "down":
            down()
        elif args.cmd == "status":
            st = status()
            comps = st["components"]
            if not comps:
                print(f"not running (no {st['stack_file']})")
                return 1
            for name, info in comps.items():
                print(f"{name:9s} {'up  ' if info['up'] else 'DOWN'} pid={info['pid']} port={info['port']}")
            print(f"LETTA_BASE_URL={st.get('letta_base_url')}")
            return 0 if all(i["up"] for i in comps.values()) else 1
        elif args.cmd == "demo-agent":
            stack = _read_stack()
            if not stack:
                raise LettaDevError("stack is not up; run `letta_dev.py up` first")
            agent = create_agent(stack["letta_base_url"], args.name, parallel=args.parallel,
                                 model=stack["model_handle"])
            llm = agent.get("llm_config") or {}
            print(f"agent_id={agent['id']}")
            print(f"name={agent['name']}")
            print(f"parallel_tool_calls={str(bool(llm.get('parallel_tool_calls'))).lower()}")
    except LettaDevError as exc:
        print(f"letta-dev: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("letta-dev: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(_main())
