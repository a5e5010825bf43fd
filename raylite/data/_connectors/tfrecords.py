"""``read_tfrecords`` / ``write_tfrecords`` without TensorFlow: the formats written out by hand.

A TFRecord file is a sequence of records ``uint64 length | uint32 masked CRC32C of
the length | data | uint32 masked CRC32C of the data``; each record here is a
``tf.train.Example`` protobuf (``features`` -> map of name -> ``bytes_list`` |
``float_list`` | ``int64_list``). Both are small enough to encode and decode directly,
so neither TensorFlow nor generated protobuf classes are needed (Ray's reader also
runs without TensorFlow). As in Ray, a feature with one value in every row becomes a
scalar column and one with several becomes a list column; ints are int64, floats
float32 (a float_list's precision), bytes stay binary (``bytes`` -> ``binary``).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa

from raylite.data.block import Block
from raylite.data.datasink import Datasink, TaskContext
from raylite.data.datasource import FileBasedDatasource

# ------------------------------------------------------------------ CRC32C (Castagnoli)


def _crc_table() -> list[int]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc_table()


def crc32c(data: bytes) -> int:
    try:
        import google_crc32c  # fast path where installed

        return int(google_crc32c.value(data))
    except ImportError:
        pass
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc(data: bytes) -> int:
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def iter_records(data: bytes, path: str, verify: bool = True) -> Iterator[bytes]:
    offset = 0
    while offset < len(data):
        if offset + 12 > len(data):
            raise ValueError(f"{path}: truncated TFRecord header at byte {offset}.")
        header = data[offset:offset + 8]
        (length,) = struct.unpack("<Q", header)
        (length_crc,) = struct.unpack("<I", data[offset + 8:offset + 12])
        if verify and masked_crc(header) != length_crc:
            raise ValueError(f"{path}: corrupt TFRecord length at byte {offset} (CRC mismatch); "
                             "is this a TFRecord file?")
        start, end = offset + 12, offset + 12 + length
        if end + 4 > len(data):
            raise ValueError(f"{path}: truncated TFRecord at byte {offset}.")
        yield data[start:end]
        offset = end + 4


def frame_record(payload: bytes) -> bytes:
    header = struct.pack("<Q", len(payload))
    return header + struct.pack("<I", masked_crc(header)) + payload + struct.pack("<I", masked_crc(payload))


# ------------------------------------------------------------------ protobuf wire format


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


def _fields(data: bytes) -> Iterator[tuple[int, int, Any]]:
    """(field number, wire type, value) of one message; value is bytes for length-delimited."""
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(data, pos)
        elif wire == 2:
            length, pos = _varint(data, pos)
            value, pos = data[pos:pos + length], pos + length
        elif wire == 5:
            value, pos = data[pos:pos + 4], pos + 4
        elif wire == 1:
            value, pos = data[pos:pos + 8], pos + 8
        else:
            raise ValueError(f"unsupported protobuf wire type {wire} in a tf.train.Example")
        yield number, wire, value


def _signed64(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def _decode_feature(data: bytes) -> tuple[str, list[Any]]:
    for number, _, value in _fields(data):  # Feature: 1 bytes_list, 2 float_list, 3 int64_list
        if number == 1:
            return "bytes", [v for n, _, v in _fields(value) if n == 1]
        if number == 2:
            out: list[float] = []
            for n, wire, v in _fields(value):
                if n == 1:
                    out.extend(np.frombuffer(v, "<f4").tolist() if wire == 2 else struct.unpack("<f", v))
            return "float", out
        if number == 3:
            ints: list[int] = []
            for n, wire, v in _fields(value):
                if n != 1:
                    continue
                if wire == 2:
                    pos = 0
                    while pos < len(v):
                        x, pos = _varint(v, pos)
                        ints.append(_signed64(x))
                else:
                    ints.append(_signed64(v))
            return "int", ints
    return "bytes", []


def decode_example(data: bytes) -> dict[str, tuple[str, list[Any]]]:
    out = {}
    for number, _, features in _fields(data):  # Example: 1 features
        if number != 1:
            continue
        for n, _, entry in _fields(features):  # Features: 1 map entry (key 1, value 2)
            if n != 1:
                continue
            name, feature = "", b""
            for k, _, v in _fields(entry):
                if k == 1:
                    name = v.decode()
                elif k == 2:
                    feature = v
            out[name] = _decode_feature(feature)
    return out


def _key(number: int, wire: int) -> bytes:
    return _enc_varint((number << 3) | wire)


def _enc_varint(v: int) -> bytes:
    v &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _delimited(number: int, payload: bytes) -> bytes:
    return _key(number, 2) + _enc_varint(len(payload)) + payload


def encode_feature(kind: str, values: list[Any]) -> bytes:
    if kind == "bytes":
        inner = b"".join(_delimited(1, v) for v in values)
        return _delimited(1, inner)
    if kind == "float":
        return _delimited(2, _delimited(1, np.asarray(values, "<f4").tobytes()) if values else b"")
    packed = b"".join(_enc_varint(int(v)) for v in values)
    return _delimited(3, _delimited(1, packed) if values else b"")


def encode_example(features: dict[str, tuple[str, list[Any]]]) -> bytes:
    entries = b"".join(
        _delimited(1, _delimited(1, name.encode()) + _delimited(2, encode_feature(kind, values)))
        for name, (kind, values) in features.items()
    )
    return _delimited(1, entries)


# ------------------------------------------------------------------ rows <-> Arrow

_ARROW = {"bytes": pa.binary(), "float": pa.float32(), "int": pa.int64()}


def examples_to_table(examples: list[dict[str, tuple[str, list[Any]]]]) -> pa.Table:
    names: list[str] = []
    kinds: dict[str, str] = {}
    for ex in examples:
        for name, (kind, values) in ex.items():
            if name not in kinds:
                names.append(name)
                kinds[name] = kind
            elif values and kinds[name] != kind:
                raise ValueError(f"TFRecord feature {name!r} is {kinds[name]} in one example and "
                                 f"{kind} in another.")
    columns = {}
    for name in names:
        values = [ex[name][1] if name in ex else None for ex in examples]
        scalar = all(v is not None and len(v) == 1 for v in values)
        typ = _ARROW[kinds[name]]
        if scalar:
            columns[name] = pa.array([v[0] for v in values], typ)
        else:
            columns[name] = pa.array(values, pa.list_(typ))
    return pa.table(columns)


def _kind_of(typ: pa.DataType) -> str:
    if pa.types.is_list(typ) or pa.types.is_large_list(typ) or pa.types.is_fixed_size_list(typ):
        typ = typ.value_type
    if pa.types.is_integer(typ) or pa.types.is_boolean(typ):
        return "int"
    if pa.types.is_floating(typ):
        return "float"
    if pa.types.is_binary(typ) or pa.types.is_large_binary(typ) or pa.types.is_string(typ) \
            or pa.types.is_large_string(typ):
        return "bytes"
    raise ValueError(f"write_tfrecords: a column of type {typ} has no tf.train.Feature kind "
                     "(ints, floats, bytes/strings and lists of them do).")


def table_to_examples(table: pa.Table) -> Iterator[bytes]:
    kinds = {name: _kind_of(table.schema.field(name).type) for name in table.column_names}
    columns = {name: table.column(name).to_pylist() for name in table.column_names}
    for i in range(table.num_rows):
        features = {}
        for name, kind in kinds.items():
            value = columns[name][i]
            values = [] if value is None else (list(value) if isinstance(value, (list, tuple)) else [value])
            if kind == "bytes":
                values = [v.encode() if isinstance(v, str) else bytes(v) for v in values]
            features[name] = (kind, values)
        yield encode_example(features)


class TFRecordDatasource(FileBasedDatasource):
    """One read task per file (or group of small files); rows from its tf.train.Examples."""

    _NAME = "ReadTFRecord"

    def _read_stream(self, f: Any, path: str) -> Iterator[Block]:
        examples = [decode_example(r) for r in iter_records(f.read(), path)]
        if examples:
            yield examples_to_table(examples)


def write_tfrecord_file(table: pa.Table, out: Any) -> None:
    for payload in table_to_examples(table):
        out.write(frame_record(payload))


class TFRecordDatasink(Datasink[list[str]]):
    """One ``.tfrecords`` file per write task in directory ``path``."""

    def __init__(self, path: str, *, filesystem: Any = None, try_create_dir: bool = True) -> None:
        from raylite.data._connectors.files import OutputDir

        self.out = OutputDir(path, filesystem, try_create_dir)

    def get_name(self) -> str:
        return "TFRecord"

    def on_write_start(self, schema: pa.Schema | None = None) -> None:
        self.out.create()

    def write(self, blocks: Iterable[Block], ctx: TaskContext) -> list[str]:
        tables = [b for b in blocks if b.num_rows]
        if not tables:
            return []
        name = self.out.file_name(ctx.task_idx, "tfrecords")
        with self.out.open(name) as f:
            for table in tables:
                write_tfrecord_file(table, f)
        return [name]
