"""``read_sql`` / ``write_sql`` over any DB-API 2 connection (sqlite3, psycopg2, ...).

As in Ray: ``connection_factory`` makes a connection inside each task (connections
do not pickle); without ``shard_keys`` one task runs the query; with them, and a
database that has ``MOD``/``ABS`` and the hash function (``shard_hash_fn``, MD5 by
default; e.g. ``hashtext`` on PostgreSQL), each of N tasks reads the rows whose key
hashes to its shard. A database that cannot shard that way falls back to one task,
with the reason logged. Errors from the database (a bad statement, a missing table)
are raised at read time naming the statement.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pyarrow as pa

from raylite.data.block import Block, BlockMetadata
from raylite.data.datasink import Datasink, TaskContext
from raylite.data.datasource import Datasource, ReadTask

logger = logging.getLogger(__name__)
MIN_ROWS_PER_READ_TASK = 50


def _check(obj: Any, attrs: tuple[str, ...], what: str) -> None:
    for attr in attrs:
        if not hasattr(obj, attr):
            raise ValueError(
                f"The {what} made by connection_factory has no {attr!r} method, which the Python "
                "DB API 2 (PEP 249) requires; pass a factory returning a DB API 2 connection, "
                "e.g. lambda: sqlite3.connect(path)."
            )


@contextlib.contextmanager
def connect(factory: Callable[[], Any]) -> Iterator[Any]:
    """A cursor on a fresh connection; commit on success, roll back on error, always close."""
    connection = factory()
    _check(connection, ("close", "commit", "cursor"), "connection")
    try:
        cursor = connection.cursor()
        _check(cursor, ("execute", "executemany", "fetchall", "description"), "cursor")
        yield cursor
        connection.commit()
    except Exception:
        with contextlib.suppress(Exception):
            connection.rollback()
        raise
    finally:
        connection.close()


def execute(cursor: Any, sql: str, params: Any = None) -> None:
    try:
        cursor.execute(sql) if params is None else cursor.execute(sql, params)
    except Exception as e:
        # the driver's own exception type (sqlite3.OperationalError ...) so callers can catch it
        note = f"while running {sql!r}"
        if hasattr(e, "add_note"):
            e.add_note(note)
        raise


def cursor_to_table(cursor: Any) -> pa.Table:
    rows = cursor.fetchall()
    names = [d[0] for d in cursor.description or []]
    return pa.table({name: [row[i] for row in rows] for i, name in enumerate(names)})


class SQLDatasource(Datasource):
    """The rows of one query, in one task or in hash shards of ``shard_keys``."""

    def __init__(self, sql: str, connection_factory: Callable[[], Any], *, shard_keys: list[str] | None = None,
                 shard_hash_fn: str = "MD5", sql_params: Any = None) -> None:
        if not isinstance(sql, str) or not sql.strip():
            raise ValueError("read_sql(sql=...) needs a SELECT statement as a string.")
        if not callable(connection_factory):
            raise TypeError("read_sql(connection_factory=...) needs a function returning a DB API 2 "
                            "connection, e.g. lambda: sqlite3.connect(path).")
        self.sql, self.factory, self.params = sql, connection_factory, sql_params
        self.hash_fn = shard_hash_fn
        if shard_keys and len(shard_keys) > 1:
            self.key_expr: str | None = f"CONCAT({','.join(shard_keys)})"
        else:
            self.key_expr = shard_keys[0] if shard_keys else None

    def get_name(self) -> str:
        return "ReadSQL"

    def _shard_sql(self, index: int, count: int) -> str:
        return (f"SELECT * FROM ({self.sql}) AS T "
                f"WHERE MOD(ABS({self.hash_fn}({self.key_expr})), {count}) = {index}")

    def _can_shard(self, count: int) -> bool:
        if count <= 1 or self.key_expr is None:
            return False
        try:
            with connect(self.factory) as cursor:
                execute(cursor, f"SELECT COUNT(1) FROM ({self._shard_sql(0, count)}) AS S", self.params)
            return True
        except Exception as e:  # noqa: BLE001 - any database error means: cannot shard here
            logger.info("read_sql: the database cannot shard by %s (%s); reading in one task.",
                        self.key_expr, e)
            return False

    def get_read_tasks(self, parallelism: int) -> list[ReadTask]:
        if not self._can_shard(parallelism):
            return [ReadTask(_SQLRead(self.sql, self.factory, self.params), BlockMetadata(None, 0))]
        with connect(self.factory) as cursor:
            execute(cursor, f"SELECT COUNT(*) FROM ({self.sql}) AS T", self.params)
            total = int(cursor.fetchall()[0][0])
        if total == 0:
            return []
        count = max(1, min(parallelism, math.ceil(total / MIN_ROWS_PER_READ_TASK)))
        return [ReadTask(_SQLRead(self._shard_sql(i, count), self.factory, self.params),
                         BlockMetadata(None, 0)) for i in range(count)]


class _SQLRead:
    def __init__(self, sql: str, factory: Callable[[], Any], params: Any) -> None:
        self.sql, self.factory, self.params = sql, factory, params

    def __call__(self) -> list[pa.Table]:
        with connect(self.factory) as cursor:
            execute(cursor, self.sql, self.params)
            return [cursor_to_table(cursor)]


class SQLDatasink(Datasink[None]):
    """``executemany(sql, rows)`` per write task, committed by that task."""

    def __init__(self, sql: str, connection_factory: Callable[[], Any]) -> None:
        if not isinstance(sql, str) or "?" not in sql and "%s" not in sql and ":" not in sql:
            raise ValueError(
                f"write_sql(sql={sql!r}) needs an INSERT with one placeholder per column, e.g. "
                "'INSERT INTO t VALUES (?, ?)' (sqlite3) or '... VALUES (%s, %s)' (psycopg2)."
            )
        self.sql, self.factory = sql, connection_factory

    def get_name(self) -> str:
        return "SQL"

    def write(self, blocks: Iterable[Block], ctx: TaskContext) -> None:
        with connect(self.factory) as cursor:
            for block in blocks:
                if block.num_rows == 0:
                    continue
                columns = [block.column(i).to_pylist() for i in range(block.num_columns)]
                rows = list(zip(*columns))
                try:
                    cursor.executemany(self.sql, rows)
                except Exception as e:
                    if hasattr(e, "add_note"):
                        e.add_note(f"while running {self.sql!r} on rows of columns {block.column_names}")
                    raise
