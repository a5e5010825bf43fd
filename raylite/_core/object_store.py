"""The node's shared-memory object store: one file per object under /dev/shm.

Writers (the creating process) write the file and report it sealed; readers on
the node map it read-only, so `get()` returns views into shared memory. Freeing
unlinks the file: mappings that readers still hold stay valid (the kernel keeps
the pages until the last one is gone), so views outliving their ref are safe.
This class does the accounting; it has no sockets.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from dataclasses import dataclass


@dataclass
class StoredObject:
    size: int
    owner_address: str
    where: str = "shm"  # "shm" | "spilled"


class ObjectStore:
    def __init__(self, directory: str, capacity_bytes: int) -> None:
        self.directory = directory
        self.capacity_bytes = capacity_bytes
        self.objects: dict[bytes, StoredObject] = {}
        self.used_bytes = 0
        os.makedirs(directory, mode=0o700, exist_ok=True)

    def path(self, object_id: bytes) -> str:
        return os.path.join(self.directory, object_id.hex())

    def sealed(self, object_id: bytes, size: int, owner_address: str) -> None:
        if object_id in self.objects:
            return
        self.objects[object_id] = StoredObject(size, owner_address)
        self.used_bytes += size

    def free(self, object_id: bytes) -> None:
        obj = self.objects.pop(object_id, None)
        if obj is not None:
            self.used_bytes -= obj.size
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path(object_id))

    def read_range(self, object_id: bytes, offset: int, length: int) -> tuple[int, bytes] | None:
        try:
            with open(self.path(object_id), "rb") as f:
                total = os.fstat(f.fileno()).st_size
                f.seek(offset)
                return total, f.read(length)
        except FileNotFoundError:
            return None

    def listing(self) -> list:
        return [[oid, o.size, o.owner_address, o.where] for oid, o in self.objects.items()]

    def destroy(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)
