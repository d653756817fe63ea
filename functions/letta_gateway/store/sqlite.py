"""Embedded SQLite backend for local runs: one file, safe across several worker processes (WAL + immediate
transactions), one connection per thread."""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from dataclasses import replace

from .base import Changes, ConditionFailed, Expect, PendingRecord, holds, record_from_dict, record_to_dict

PENDING_SK = "pending"
MARKER_SK = "marker"


_WRITE_LOCKS: dict[str, threading.Lock] = {}


class SQLiteBackend:
    def __init__(self, path: str) -> None:
        self.path = path
        self._local = threading.local()
        # Threads of one process take turns before asking SQLite for its write lock: SQLite's own busy handler
        # sleeps in steps of up to 100 ms, which would dominate latency under concurrency.
        self._write_lock = _WRITE_LOCKS.setdefault(os.path.abspath(path), threading.Lock())
        if path != ":memory:":
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with self._connect() as conn:
            conn.execute(
                "CREATE TABLE IF NOT EXISTS items (pk TEXT NOT NULL, sk TEXT NOT NULL, body TEXT NOT NULL, "
                "PRIMARY KEY (pk, sk))"
            )

    def _connect(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.path, timeout=30, isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            self._local.conn = conn
        return conn

    def put(self, record: PendingRecord) -> None:
        body = json.dumps(record_to_dict(record))
        with self._write_lock:
            self._put(body, record)

    def _put(self, body: str, record: PendingRecord) -> None:
        self._connect().execute(
            "INSERT INTO items (pk, sk, body) VALUES (?, ?, ?) ON CONFLICT (pk, sk) DO UPDATE SET body = excluded.body",
            (record.thread_key, PENDING_SK, body),
        )

    def _read(self, conn: sqlite3.Connection, key: str) -> PendingRecord | None:
        row = conn.execute("SELECT body FROM items WHERE pk = ? AND sk = ?", (key, PENDING_SK)).fetchone()
        return record_from_dict(json.loads(row[0])) if row else None

    def get(self, key: str) -> PendingRecord | None:
        return self._read(self._connect(), key)

    def transition(self, key: str, expect: Expect, changes: Changes) -> PendingRecord:
        with self._write_lock:
            return self._transition(key, expect, changes)

    def _transition(self, key: str, expect: Expect, changes: Changes) -> PendingRecord:
        conn = self._connect()
        conn.execute("BEGIN IMMEDIATE")
        try:
            current = self._read(conn, key)
            if not holds(current, expect):
                raise ConditionFailed(current)
            assert current is not None
            new = replace(
                current,
                status=changes.status,
                updated_at=changes.updated_at,
                resume_run_id=changes.resume_run_id if changes.resume_run_id is not None else current.resume_run_id,
            )
            conn.execute(
                "UPDATE items SET body = ? WHERE pk = ? AND sk = ?",
                (json.dumps(record_to_dict(new)), key, PENDING_SK),
            )
            conn.execute("COMMIT")
            return new
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    # ------------------------------------------------------------------------------------------- markers

    def create_marker(self, key: str, body: dict[str, object], expires_at: int, now: int) -> dict[str, object] | None:
        with self._write_lock:
            conn = self._connect()
            conn.execute("BEGIN IMMEDIATE")
            try:
                row = conn.execute("SELECT body FROM items WHERE pk = ? AND sk = ?", (key, MARKER_SK)).fetchone()
                if row is not None:
                    existing = json.loads(row[0])
                    if existing["expires_at"] > now:
                        conn.execute("COMMIT")
                        return existing["body"]  # type: ignore[no-any-return]
                self._write_marker(conn, key, body, expires_at)
                conn.execute("COMMIT")
                return None
            except BaseException:
                conn.execute("ROLLBACK")
                raise

    def put_marker(self, key: str, body: dict[str, object], expires_at: int) -> None:
        with self._write_lock:
            self._write_marker(self._connect(), key, body, expires_at)

    def delete_marker(self, key: str) -> None:
        with self._write_lock:
            self._connect().execute("DELETE FROM items WHERE pk = ? AND sk = ?", (key, MARKER_SK))

    @staticmethod
    def _write_marker(conn: sqlite3.Connection, key: str, body: dict[str, object], expires_at: int) -> None:
        conn.execute(
            "INSERT INTO items (pk, sk, body) VALUES (?, ?, ?) ON CONFLICT (pk, sk) DO UPDATE SET body = excluded.body",
            (key, MARKER_SK, json.dumps({"body": body, "expires_at": expires_at})),
        )

    # ------------------------------------------------------------------------------------------- plain items

    def get_item(self, pk: str, sk: str) -> dict[str, object] | None:
        row = self._connect().execute("SELECT body FROM items WHERE pk = ? AND sk = ?", (pk, sk)).fetchone()
        return json.loads(row[0]) if row else None  # type: ignore[no-any-return]

    def put_item(self, pk: str, sk: str, body: dict[str, object], *, only_if_absent: bool = False) -> bool:
        verb = "INSERT OR IGNORE" if only_if_absent else "INSERT OR REPLACE"
        with self._write_lock:
            cursor = self._connect().execute(
                f"{verb} INTO items (pk, sk, body) VALUES (?, ?, ?)", (pk, sk, json.dumps(body))
            )
        return cursor.rowcount == 1

    def query_items(self, pk: str) -> list[tuple[str, dict[str, object]]]:
        rows = self._connect().execute("SELECT sk, body FROM items WHERE pk = ? ORDER BY sk", (pk,)).fetchall()
        return [(sk, json.loads(body)) for sk, body in rows]

    def increment(self, pk: str, sk: str, counters: dict[str, int], expires_at: int | None = None) -> dict[str, int]:
        with self._write_lock:
            conn = self._connect()
            conn.execute("BEGIN IMMEDIATE")
            try:
                row = conn.execute("SELECT body FROM items WHERE pk = ? AND sk = ?", (pk, sk)).fetchone()
                body = json.loads(row[0]) if row else {}
                for name, value in counters.items():
                    body[name] = int(body.get(name, 0)) + value
                if expires_at is not None:
                    body["expires_at"] = expires_at
                conn.execute("INSERT OR REPLACE INTO items (pk, sk, body) VALUES (?, ?, ?)", (pk, sk, json.dumps(body)))
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        return {name: body[name] for name in counters}
