"""The Data examples adapted from the user's documents run to completion."""

import os
import re
import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _run(name: str, tmp_path: Path) -> str:
    env = dict(os.environ, PYTHONPATH=str(EXAMPLES.parent), HF_HUB_OFFLINE="1")
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / name), str(tmp_path)], capture_output=True, text=True, timeout=240,
        env=env, cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc.stdout


def test_tokenize_stream_example(tmp_path):
    out = _run("data_tokenize_stream.py", tmp_path)
    assert "torch.Size([8, 512])" in out


def test_streaming_preprocessing_example_trains_on_every_row(tmp_path):
    out = _run("data_streaming_preprocessing.py", tmp_path)
    m = re.search(r"rank 0 saw (\d+) rows over 10 epochs; (\d+) rows per epoch", out)
    assert m, out
    seen, per_epoch = int(m.group(1)), int(m.group(2))
    assert seen == 10 * (per_epoch // 2)  # equal shards of the filtered rows, every epoch
