"""`letta-gateway` command line."""

from __future__ import annotations

import argparse
import sys

from .errors import ConfigurationError
from .settings import Settings


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    try:
        Settings.from_env()
    except ConfigurationError as error:
        print(f"letta-gateway: {error}", file=sys.stderr)
        return 2
    uvicorn.run(
        "letta_gateway.asgi:app",
        host=args.host,
        port=args.port,
        workers=args.workers,
        log_level=args.log_level,
        access_log=False,
        timeout_keep_alive=75,
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="letta-gateway", description="OpenAI-compatible gateway for Letta agents")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run the gateway with uvicorn")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--workers", type=int, default=1)
    serve.add_argument("--log-level", default="warning")
    serve.set_defaults(run=_serve)
    from .keys_cli import add_parser

    add_parser(commands)
    args = parser.parse_args(argv)
    return int(args.run(args))


if __name__ == "__main__":
    raise SystemExit(main())
