"""``write_images``: one image file per row, from a column of HxW(xC) uint8 arrays."""

from __future__ import annotations

import io
from collections.abc import Iterable
from typing import Any

import numpy as np

from raylite.data._connectors import require
from raylite.data.block import Block, BlockAccessor
from raylite.data.datasink import Datasink, TaskContext

_FORMATS = {"jpg": "JPEG", "jpeg": "JPEG", "tif": "TIFF", "tiff": "TIFF"}


class ImageDatasink(Datasink[list[str]]):
    """Rows' ``column`` as ``{write id}_{task}_{row}.{file_format}`` files under ``path``."""

    def __init__(self, path: str, column: str, file_format: str = "png", *, filesystem: Any = None,
                 try_create_dir: bool = True) -> None:
        from raylite.data._connectors.files import OutputDir

        require("PIL", "Pillow", "write_images")
        self.out = OutputDir(path, filesystem, try_create_dir)
        self.column, self.file_format = column, file_format.lower().lstrip(".")

    def get_name(self) -> str:
        return "Image"

    def on_write_start(self, schema: Any = None) -> None:
        self.out.create()

    def write(self, blocks: Iterable[Block], ctx: TaskContext) -> list[str]:
        from PIL import Image

        names = []
        n = 0
        for block in blocks:
            if self.column not in block.column_names:
                raise KeyError(f"write_images(column={self.column!r}): no such column; the dataset "
                               f"has {block.column_names}.")
            for row in BlockAccessor.for_block(block).iter_rows():
                image = np.asarray(row[self.column])
                if image.dtype != np.uint8:
                    raise ValueError(f"write_images: column {self.column!r} holds {image.dtype} "
                                     "arrays; images need uint8 (HxW or HxWxC).")
                buf = io.BytesIO()
                fmt = _FORMATS.get(self.file_format, self.file_format.upper())
                Image.fromarray(image).save(buf, format=fmt)
                name = self.out.file_name(ctx.task_idx, self.file_format, n)
                with self.out.open(name) as f:
                    f.write(buf.getvalue())
                names.append(name)
                n += 1
        return names
