"""`letta-gateway keys ...`: manage gateway keys in the local SQLite store or a deployed DynamoDB table."""

from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import UTC, datetime

from .credentials import SecretsManagerCredentials, local_key_secret
from .errors import ConfigurationError, GatewayError
from .settings import Settings
from .store import PendingBackend
from .store.keys import USAGE_FIELDS, KeyStore, ManagedKey, parse_duration


def add_parser(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    keys = commands.add_parser("keys", help="create, list, revoke gateway keys and show their usage")
    keys.add_argument("--table", help="DynamoDB state table (default: GATEWAY_STATE_TABLE, else local SQLite)")
    keys.add_argument("--state", help="SQLite state file (default: GATEWAY_STATE_PATH or .gateway/state.sqlite3)")
    keys.add_argument("--secret-id", help="Secrets Manager secret holding 'key_hashing_secret' (AWS deployments)")
    actions = keys.add_subparsers(dest="action", required=True)
    create = actions.add_parser("create", help="create a key and print it once")
    create.add_argument("--name", required=True)
    create.add_argument("--agents", default="", help="comma-separated agent ids or names it may use (default: all)")
    create.add_argument("--expires", help="lifetime, e.g. 30d, 12h (default: never)")
    create.add_argument("--rpm", type=int, help="requests per minute allowed")
    create.add_argument("--concurrency", type=int, help="requests in flight allowed")
    actions.add_parser("list", help="list keys (never shows them)")
    revoke = actions.add_parser("revoke", help="disable a key (effective within the gateway's key cache, <= 60 s)")
    revoke.add_argument("name")
    usage = actions.add_parser("usage", help="requests, tokens, tool pauses and errors per key per day")
    usage.add_argument("name", nargs="?")
    keys.set_defaults(run=run)


def _store(args: argparse.Namespace) -> KeyStore:
    env = dict(os.environ)
    if args.table:
        env["GATEWAY_STATE_TABLE"] = args.table
    if args.state:
        env["GATEWAY_STATE_PATH"] = args.state
    env.setdefault("GATEWAY_API_KEYS", "unused-by-the-keys-command")
    env.setdefault("LETTA_BASE_URL", "http://unused.invalid")
    settings = Settings.from_env(env)
    secret = local_key_secret(settings)
    secret_id = args.secret_id or settings.secret_id
    if secret is None and secret_id:
        fetched = SecretsManagerCredentials._powertools_fetch(secret_id)
        secret = fetched.get("key_hashing_secret") if isinstance(fetched, dict) else None
    if secret is None:
        raise ConfigurationError(
            "No key-hashing secret: set GATEWAY_KEY_SECRET or pass --secret-id (the deployment's secret with "
            "'key_hashing_secret')."
        )
    from .bootstrap import build_backend

    backend: PendingBackend = build_backend(settings)
    return KeyStore(backend, secret.encode())


def _when(epoch: int | None) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M UTC") if epoch else "never"


def _row(key: ManagedKey) -> dict[str, object]:
    return {
        "name": key.name,
        "key_id": key.key_id,
        "created": _when(key.created_at),
        "expires": _when(key.expires_at),
        "disabled": key.disabled,
        "agents": list(key.agents) or "all",
        "rpm": key.rpm,
        "concurrency": key.concurrency,
    }


def run(args: argparse.Namespace) -> int:
    try:
        store = _store(args)
        if args.action == "create":
            plaintext, key = store.create(
                args.name,
                agents=[a.strip() for a in args.agents.split(",")],
                expires_in=parse_duration(args.expires) if args.expires else None,
                rpm=args.rpm,
                concurrency=args.concurrency,
            )
            print(plaintext)
            print(f"created key {key.name!r} ({key.key_id}); it is shown only now", file=sys.stderr)
        elif args.action == "list":
            for key in store.list():
                print(json.dumps(_row(key)))
        elif args.action == "revoke":
            key = store.revoke(args.name)
            print(f"revoked {key.name!r} ({key.key_id}); gateways stop accepting it within their key cache TTL")
        elif args.action == "usage":
            keys = [store.get(args.name)] if args.name else store.list()
            print("\t".join(("name", "day", *USAGE_FIELDS)))
            for key in keys:
                for day, counters in store.usage(key.key_id):
                    print("\t".join((key.name, day, *(str(counters[f]) for f in USAGE_FIELDS))))
    except (ConfigurationError, GatewayError) as error:
        print(f"letta-gateway: {getattr(error, 'message', error)}", file=sys.stderr)
        return 2
    return 0
