"""Serve an ASGI app (default `letta_gateway.asgi:app`) with uvicorn, one worker, under pyinstrument
(sampling every 1 ms by default).

SIGUSR1 starts sampling, SIGUSR2 stops it and writes `<out>.txt` (pyinstrument's call tree) and `<out>.json`
(self time grouped by package and the top functions by self time), so only the load window is profiled.
The event-loop thread is sampled (async_mode disabled: wall-clock stacks of the loop thread), so time waiting in
`epoll` is idle time and is reported separately.

Usage: python bench/profiled_server.py --port P --out PATH [--app module:attr] [--interval 0.0002]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from collections import defaultdict
from typing import Any

PACKAGE_ALIASES = {"h11": "h11", "httpcore": "httpcore", "httpx": "httpx", "anyio": "anyio"}


def package_of(path: str | None) -> str:
    if not path:
        return "<builtin>"
    norm = path.replace("\\", "/")
    for marker in ("/site-packages/", "/dist-packages/"):
        if marker in norm:
            rest = norm.split(marker, 1)[1]
            return rest.split("/", 1)[0].removesuffix(".py")
    if "/functions/letta_gateway/" in norm:
        return "letta_gateway"
    if "/bench/" in norm:
        return "bench"
    if "/lib/python3" in norm:
        rest = norm.split("/lib/python3", 1)[1].split("/", 1)[1]
        return "stdlib:" + rest.split("/", 1)[0].removesuffix(".py")
    return norm.rsplit("/", 1)[-1]


def summarise(session: Any) -> dict[str, Any]:
    root = session.root_frame()
    by_package: dict[str, float] = defaultdict(float)
    by_function: dict[str, float] = defaultdict(float)
    cumulative: dict[str, float] = defaultdict(float)
    idle = 0.0
    total = root.time if root is not None else 0.0

    def walk(frame: Any, owner: str) -> None:
        nonlocal idle
        if frame.is_synthetic:
            return
        path = frame.file_path
        package = package_of(path) if path and not path.startswith("<") else owner
        self_time = frame.total_self_time
        name = (
            f"{frame.function} ({package})"
            if not path or path.startswith("<")
            else (f"{frame.function} ({package_of(path)}:{os.path.basename(path)}:{frame.line_no})")
        )
        builtin = not path or path.startswith("<")
        if builtin and frame.function.rsplit(".", 1)[-1] in ("poll", "select"):
            idle += self_time
        else:
            by_package[package] += self_time
            by_function[name] += self_time
        if package == "letta_gateway" and not builtin:
            cumulative[f"{frame.function} ({os.path.basename(path)}:{frame.line_no})"] += frame.time
        for child in frame.children:
            walk(child, package)

    if root is not None:
        walk(root, "<root>")
    busy = total - idle
    return {
        "wall_s": total,
        "idle_s": idle,
        "busy_s": busy,
        "samples": session.sample_count,
        "by_package": sorted(by_package.items(), key=lambda kv: -kv[1]),
        "top_functions": sorted(by_function.items(), key=lambda kv: -kv[1])[:40],
        "gateway_cumulative": sorted(cumulative.items(), key=lambda kv: -kv[1])[:40],
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--app", default="letta_gateway.asgi:app")
    parser.add_argument("--interval", type=float, default=0.001)
    args = parser.parse_args()

    import uvicorn
    from pyinstrument import Profiler

    profiler = Profiler(interval=args.interval, async_mode="disabled")

    def start(*_: object) -> None:
        if not profiler.is_running:
            profiler.start()

    def stop(*_: object) -> None:
        if not profiler.is_running:
            return
        session = profiler.stop()
        with open(args.out + ".txt", "w", encoding="utf-8") as fh:
            fh.write(profiler.output_text(unicode=False, color=False, show_all=False))
        with open(args.out + ".json", "w", encoding="utf-8") as fh:
            json.dump(summarise(session), fh, indent=1)
        print("PROFILE_WRITTEN", flush=True)

    signal.signal(signal.SIGUSR1, start)
    signal.signal(signal.SIGUSR2, stop)
    uvicorn.run(
        args.app,
        host="127.0.0.1",
        port=args.port,
        log_level="warning",
        access_log=False,
        lifespan="off",
        timeout_keep_alive=75,
    )
    sys.exit(0)


if __name__ == "__main__":
    main()
