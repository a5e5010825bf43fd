"""``read_audio``: one row per audio file, decoded with ``soundfile`` (libsndfile), as Ray does.

Each row holds ``amplitude`` (float32, shaped ``(channels, samples)``) and ``sample_rate``.
The decoder reads from memory, since libsndfile cannot read an Arrow stream; a file is
one block, so files of different lengths never have to share a tensor column.
"""

from __future__ import annotations

import io
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from raylite.data._connectors import require
from raylite.data.block import Block, to_arrow_array
from raylite.data.datasource import FileBasedDatasource

AUDIO_EXTENSIONS = ["mp3", "wav", "aac", "flac", "ogg", "m4a", "wma", "alac", "aiff", "pcm", "amr", "opus",
                    "ra", "rm", "au", "mid", "midi", "caf"]


class AudioDatasource(FileBasedDatasource):
    """Audio files through ``soundfile.read``."""

    _NAME = "ReadAudio"

    def __init__(self, paths: Any, **kwargs: Any) -> None:
        require("soundfile", "soundfile", "read_audio")
        super().__init__(paths, **kwargs)

    def _read_stream(self, f: Any, path: str) -> Iterator[Block]:
        import soundfile

        try:
            samples, sample_rate = soundfile.read(io.BytesIO(f.read()), always_2d=True, dtype="float32")
        except Exception as e:  # noqa: BLE001 - libsndfile's LibsndfileError and RuntimeError
            raise ValueError(f"read_audio: {path} could not be decoded by soundfile ({e}).") from e
        amplitude = np.ascontiguousarray(samples.T)[None]  # one row: (channels, samples)
        yield pa.table({"amplitude": to_arrow_array(amplitude, "amplitude"),
                        "sample_rate": pa.array([int(sample_rate)], pa.int64())})


def read_audio(paths: str | Sequence[str], *, filesystem: Any = None, arrow_open_stream_args: Any = None,
               partition_filter: Any = None, partitioning: Any = None, include_paths: bool = False,
               ignore_missing_paths: bool = False, file_extensions: list[str] | None = AUDIO_EXTENSIONS,
               shuffle: Any = None, concurrency: int | None = None, override_num_blocks: int | None = None,
               num_cpus: float | None = None, num_gpus: float | None = None, memory: float | None = None,
               ray_remote_args: dict[str, Any] | None = None, **kwargs: Any) -> Any:
    """Audio files (wav, flac, ogg, mp3, ...) as rows ``{"amplitude", "sample_rate"}``."""
    from raylite.data.read_api import read_datasource

    if partition_filter is not None or shuffle is not None or ignore_missing_paths or arrow_open_stream_args:
        raise NotImplementedError("read_audio(partition_filter=, shuffle=, ignore_missing_paths=, "
                                  "arrow_open_stream_args=) are not in raylite yet.")
    args = dict(ray_remote_args or {})
    args.update({k: v for k, v in (("num_cpus", num_cpus), ("num_gpus", num_gpus), ("memory", memory))
                 if v is not None})
    source = AudioDatasource(paths, filesystem=filesystem, file_extensions=file_extensions,
                             include_paths=include_paths, partitioning=partitioning)
    return read_datasource(source, override_num_blocks=override_num_blocks, ray_remote_args=args or None)
