"""Durable head tables (`raylite start --head --persist ...`), so a restarted head recovers.

The head writes through on every change of the tables it must not forget: nodes,
actors (named and detached ones included), placement groups, the key-value store
and jobs. Each row is a msgpack value under a bytes key. Two backends sit behind
one small interface: SQLite (stdlib, embedded; the default) and Redis (for users who
run one; needs the `redis` package).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from typing import Any

import msgpack

TABLES = ("nodes", "actors", "named", "pgs", "kv", "jobs")


class Persistence:
    """put/delete/load rows of the head's tables; implementations must be durable on return."""

    def put(self, table: str, key: bytes, value: Any) -> None:
        raise NotImplementedError

    def delete(self, table: str, key: bytes) -> None:
        raise NotImplementedError

    def load(self, table: str) -> Iterator[tuple[bytes, Any]]:
        raise NotImplementedError

    def close(self) -> None:
        pass


def _pack(value: Any) -> bytes:
    return msgpack.packb(value, use_bin_type=True)


def _unpack(data: bytes) -> Any:
    return msgpack.unpackb(data, raw=False, strict_map_key=False)


class SqlitePersistence(Persistence):
    """One file, one table per head table; WAL so each write is one cheap fsync."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        for t in TABLES:
            self._db.execute(f"CREATE TABLE IF NOT EXISTS {t} (k BLOB PRIMARY KEY, v BLOB NOT NULL)")

    def put(self, table: str, key: bytes, value: Any) -> None:
        self._db.execute(f"INSERT OR REPLACE INTO {_check(table)} (k, v) VALUES (?, ?)", (key, _pack(value)))

    def delete(self, table: str, key: bytes) -> None:
        self._db.execute(f"DELETE FROM {_check(table)} WHERE k = ?", (key,))

    def load(self, table: str) -> Iterator[tuple[bytes, Any]]:
        for k, v in self._db.execute(f"SELECT k, v FROM {_check(table)}").fetchall():
            yield bytes(k), _unpack(v)

    def close(self) -> None:
        self._db.close()


class RedisPersistence(Persistence):
    """One Redis hash per table, under a per-cluster prefix."""

    def __init__(self, host: str, port: int, prefix: str = "raylite", *, username: str = "",
                 password: str = "") -> None:
        try:
            import redis  # type: ignore
        except ImportError as e:
            raise RuntimeError("--persist redis://... needs the `redis` package, which comes with raylite's redis extra: "
                               "pip install 'raylite[redis]'") from e
        self._r = redis.Redis(host=host, port=port, username=username or None, password=password or None)
        self._r.ping()
        self._prefix = prefix

    def _key(self, table: str) -> str:
        return f"{self._prefix}:{_check(table)}"

    def put(self, table: str, key: bytes, value: Any) -> None:
        self._r.hset(self._key(table), key, _pack(value))

    def delete(self, table: str, key: bytes) -> None:
        self._r.hdel(self._key(table), key)

    def load(self, table: str) -> Iterator[tuple[bytes, Any]]:
        for k, v in self._r.hgetall(self._key(table)).items():
            yield bytes(k), _unpack(v)

    def close(self) -> None:
        self._r.close()


def _check(table: str) -> str:
    if table not in TABLES:
        raise ValueError(f"unknown head table {table!r}")
    return table


def open_persistence(spec: str, *, redis_username: str = "", redis_password: str = "",
                     namespace: str = "") -> Persistence | None:
    """'' -> None; 'sqlite:PATH' -> SQLite; 'redis://[USER:PASSWORD@]HOST:PORT' -> Redis.

    Credentials in the URL win over `redis_username`/`redis_password` (which come from
    RAYLITE_REDIS_USERNAME/_PASSWORD, kept off the command line where `ps` shows it).
    `namespace` (RAYLITE_PERSIST_NAMESPACE) separates clusters that share one Redis."""
    if not spec:
        return None
    if spec.startswith("sqlite:"):
        return SqlitePersistence(spec[len("sqlite:"):])
    if spec.startswith("redis://"):
        rest = spec[len("redis://"):].rstrip("/")
        auth, _, hostport = rest.rpartition("@")
        if auth:
            user, sep, password = auth.partition(":")
            redis_username, redis_password = (user, password) if sep else ("", user)
        host, _, port = hostport.partition(":")
        return RedisPersistence(host or "127.0.0.1", int(port or 6379), username=redis_username,
                                password=redis_password,
                                prefix=f"raylite:{namespace}" if namespace else "raylite")
    raise ValueError(f"--persist takes sqlite:PATH or redis://[USER:PASSWORD@]HOST:PORT, not {spec!r}")
