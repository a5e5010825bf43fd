"""``read_webdataset`` / ``write_webdataset``: samples as groups of files in tar shards.

WebDataset's convention: a tar member ``dir/0001.jpg`` belongs to the sample whose
``__key__`` is ``dir/0001`` (everything before the first dot of the file name) and
fills its ``jpg`` field. Reading yields one row per sample; with ``decoder=True``
(the default, as in Ray) fields are decoded by extension (text, class labels, JSON,
``.npy``, images to HxWxC arrays); other extensions stay bytes. Writing does the
reverse, one tar shard per write task, encoding by the field's extension.
"""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa

from raylite.data.block import Block, batch_to_block
from raylite.data.datasink import Datasink, TaskContext
from raylite.data.datasource import FileBasedDatasource

TEXT = {"txt", "text", "transcript"}
INTS = {"cls", "cls2", "class", "count", "index", "inx", "id"}
JSON = {"json", "jsn"}
IMAGES = {"png", "jpg", "jpeg", "ppm", "pgm", "pbm", "pnm", "bmp", "tif", "tiff", "gif", "webp"}
_PIL_FORMAT = {"jpg": "JPEG", "jpeg": "JPEG", "tif": "TIFF", "tiff": "TIFF"}


def split_member(name: str) -> tuple[str, str]:
    """``a/b/0001.seg.png`` -> (``a/b/0001``, ``seg.png``)."""
    directory, _, base = name.rpartition("/")
    stem, dot, ext = base.partition(".")
    key = f"{directory}/{stem}" if directory else stem
    return key, ext.lower() if dot else ""


def decode_field(ext: str, data: bytes) -> Any:
    last = ext.rsplit(".", 1)[-1]
    if last in TEXT:
        return data.decode("utf-8")
    if last in INTS:
        return int(data.decode().strip())
    if last in JSON:
        return json.loads(data)
    if last == "npy":
        return np.load(io.BytesIO(data), allow_pickle=False)
    if last in IMAGES:
        from raylite.data._connectors import require

        require("PIL", "Pillow", "read_webdataset's image decoding")
        from PIL import Image

        return np.asarray(Image.open(io.BytesIO(data)))
    return data


def encode_field(ext: str, value: Any) -> bytes:
    last = ext.rsplit(".", 1)[-1]
    if isinstance(value, bytes):
        return value
    if last in IMAGES and isinstance(value, np.ndarray):
        from PIL import Image

        buf = io.BytesIO()
        Image.fromarray(value).save(buf, format=_PIL_FORMAT.get(last, last.upper()))
        return buf.getvalue()
    if last == "npy" or isinstance(value, np.ndarray):
        buf = io.BytesIO()
        np.save(buf, np.asarray(value), allow_pickle=False)
        return buf.getvalue()
    if last in JSON or isinstance(value, (dict, list)):
        return json.dumps(value).encode()
    return str(value).encode("utf-8")


def _as_list(value: Any) -> list[Any] | None:
    if value is None or value is True or value is False:
        return None
    return value if isinstance(value, list) else [value]


def _selected(fields: dict[str, Any], fileselect: Any, suffixes: Any) -> dict[str, Any]:
    for rule in (fileselect, suffixes):
        if rule is None:
            continue
        if callable(rule):
            fields = {k: v for k, v in fields.items() if rule(k)}
        else:
            fields = {k: v for k, v in fields.items() if k in set(rule)}
    return fields


class WebDatasetDatasource(FileBasedDatasource):
    """One read task per tar shard (or group of small shards); one row per sample."""

    _NAME = "ReadWebDataset"

    def _read_stream(self, f: Any, path: str) -> Iterator[Block]:
        decoder = self.reader_args.get("decoder", True)
        fileselect = self.reader_args.get("fileselect")
        suffixes = self.reader_args.get("suffixes")
        filerename = self.reader_args.get("filerename")
        rows: list[dict[str, Any]] = []
        samples: dict[str, dict[str, Any]] = {}
        try:
            tar = tarfile.open(fileobj=io.BytesIO(f.read()), mode="r:*")
        except tarfile.TarError as e:
            raise ValueError(f"not a tar shard ({e})") from e
        with tar:
            for member in tar:
                if not member.isfile() or member.name.split("/")[-1].startswith("."):
                    continue
                key, ext = split_member(member.name)
                if not ext:
                    continue
                if callable(filerename):
                    ext = filerename(ext)
                data = tar.extractfile(member).read()  # type: ignore[union-attr]  # a file member
                samples.setdefault(key, {"__key__": key})[ext] = data
        for key, fields in samples.items():
            fields = {"__key__": key, **_selected({k: v for k, v in fields.items() if k != "__key__"},
                                                   fileselect, suffixes)}
            rows.append(self._decode(fields, decoder))
        if rows:
            yield batch_to_block(_columns(rows), where="read_webdataset")

    @staticmethod
    def _decode(fields: dict[str, Any], decoder: Any) -> dict[str, Any]:
        if not decoder:
            return fields
        out = {k: (v if k == "__key__" else decode_field(k, v)) for k, v in fields.items()}
        for fn in _as_list(decoder) or []:
            if callable(fn):
                out = fn(out)
        return out


def _columns(rows: list[dict[str, Any]]) -> dict[str, Any]:
    names: list[str] = []
    for row in rows:
        names.extend(n for n in row if n not in names)
    out: dict[str, Any] = {}
    for name in names:
        values = [row.get(name) for row in rows]
        arrays = [v for v in values if isinstance(v, np.ndarray)]
        if arrays and len(arrays) == len(values) and len({a.shape for a in arrays}) == 1:
            out[name] = np.stack(arrays)
        else:
            out[name] = values
    return out


class WebDatasetDatasink(Datasink[list[str]]):
    """One ``.tar`` shard per write task in directory ``path``."""

    def __init__(self, path: str, *, filesystem: Any = None, try_create_dir: bool = True,
                 encoder: bool | Callable[[dict[str, Any]], dict[str, Any]] | list[Any] | None = True) -> None:
        from raylite.data._connectors.files import OutputDir

        self.out = OutputDir(path, filesystem, try_create_dir)
        self.encoder = encoder

    def get_name(self) -> str:
        return "WebDataset"

    def on_write_start(self, schema: pa.Schema | None = None) -> None:
        self.out.create()

    def _encode(self, row: dict[str, Any]) -> dict[str, bytes]:
        for fn in _as_list(self.encoder) or []:
            if callable(fn):
                row = fn(row)
        return {k: encode_field(k, v) for k, v in row.items() if k != "__key__" and v is not None}

    def write(self, blocks: Iterable[Block], ctx: TaskContext) -> list[str]:
        from raylite.data.block import BlockAccessor

        rows = [row for block in blocks for row in BlockAccessor.for_block(block).iter_rows()]
        if not rows:
            return []
        name = self.out.file_name(ctx.task_idx, "tar")
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            for i, row in enumerate(rows):
                key = str(row.get("__key__") or f"{ctx.task_idx:06d}_{i:06d}")
                for ext, data in self._encode(dict(row)).items():
                    info = tarfile.TarInfo(f"{key}.{ext}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
        with self.out.open(name) as f:
            f.write(buf.getvalue())
        return [name]
