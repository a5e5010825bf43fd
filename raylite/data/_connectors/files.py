"""The output directory that file-writing connectors (TFRecord, WebDataset, images) share."""

from __future__ import annotations

import uuid
from typing import Any

from raylite.data._internal.filesystem import filesystem_for
from raylite.util._storage import explain_storage_error


class OutputDir:
    """``path`` on its filesystem; file names ``{write id}_{task:06d}_{n:06d}.{ext}`` sort in
    dataset order, as the built-in writers' do."""

    def __init__(self, path: str, filesystem: Any = None, try_create_dir: bool = True) -> None:
        self.uri = path
        self.fs, self.path = filesystem_for(path, filesystem)
        self.try_create_dir = try_create_dir
        self.write_id = uuid.uuid4().hex[:16]

    def create(self) -> None:
        if not self.try_create_dir:
            return
        try:
            self.fs.create_dir(self.path, recursive=True)
        except OSError as e:
            raise explain_storage_error(self.uri, e, "writing to", "filesystem") or e

    def file_name(self, task_idx: int, ext: str, n: int = 0) -> str:
        return f"{self.write_id}_{task_idx:06d}_{n:06d}.{ext}"

    def full(self, name: str) -> str:
        return f"{self.path.rstrip('/')}/{name}"

    def open(self, name: str) -> Any:
        try:
            return self.fs.open_output_stream(self.full(name))
        except OSError as e:
            raise explain_storage_error(self.uri, e, "writing to", "filesystem") or e
