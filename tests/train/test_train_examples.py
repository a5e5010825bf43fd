"""Run every Train example adapted from the user's documents, as a user would."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_example(name: str, tmp_path, timeout_s: int = 240) -> str:
    env = dict(os.environ)
    env.update(
        TMPDIR=str(tmp_path),  # the examples keep their runs under tempfile.gettempdir()
        HOME=str(tmp_path),  # default storage_path is ~/raylite_results
        PYTHONPATH=os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH", "")) if p),
    )
    proc = subprocess.run(
        [sys.executable, os.path.join(ROOT, "examples", name)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    assert proc.returncode == 0, f"{name} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    return proc.stdout


def test_quickstart_four_workers_on_a_small_machine(tmp_path):
    out = run_example("train_quickstart.py", tmp_path)
    assert "Final loss: 1.0" in out
    assert "starting 4 worker(s)" in out


def test_fashion_mnist(tmp_path):
    out = run_example("train_fashion_mnist.py", tmp_path)
    run_dir = tmp_path / "ray_results" / "fashion_mnist_run"
    assert sorted(p for p in os.listdir(run_dir) if p.startswith("checkpoint_")) == [
        "checkpoint_000000",
        "checkpoint_000001",
        "checkpoint_000002",
    ]
    assert (run_dir / "checkpoint_000002" / "model.pt").exists()
    assert "Checkpoint: Checkpoint(filesystem=local" in out


def test_cluster_walkthrough_with_rank0_checkpoints(tmp_path):
    out = run_example("train_cluster_checkpoints.py", tmp_path)
    assert "Final loss:" in out and "Best checkpoint path: Checkpoint(" in out
    assert "checkpoint_000004" in out  # best (most recent) of five rank-0 checkpoints


@pytest.mark.slow
def test_recipe_from_dict_fault_tolerance_and_restore(tmp_path):
    out = run_example("train_recipe.py", tmp_path)
    assert "Survived a worker loss: True; epochs seen: [0, 1, 2, 3, 4]" in out
    assert "Restored run continued to epoch 6" in out
    run_dir = tmp_path / "ray_results" / "recipe_experiment"
    assert len([p for p in os.listdir(run_dir) if p.startswith("checkpoint_")]) == 3


@pytest.mark.slow
def test_lightning(tmp_path):
    pytest.importorskip("lightning")
    out = run_example("train_lightning.py", tmp_path)
    line = next(x for x in out.splitlines() if x.startswith("Lightning train_loss per epoch"))
    losses = eval(line.split(":", 1)[1])  # noqa: S307 - our own example's output
    assert len(losses) == 3 and losses[-1] < losses[0]
    assert (tmp_path / "raylite_results" / "lightning_example" / "checkpoint_000002" / "checkpoint.ckpt").exists()


@pytest.mark.slow
def test_llm_sft_with_data_and_deepspeed_style(tmp_path):
    pytest.importorskip("transformers")
    pytest.importorskip("raylite.data")
    out = run_example("train_llm_sft.py", tmp_path)
    assert "tokenized batch: (8, 16)" in out
    assert "Final loss:" in out
    line = next(x for x in out.splitlines() if x.startswith("Loss per epoch:"))
    losses = eval(line.split(":", 1)[1])  # noqa: S307 - our own example's output
    assert len(losses) == 3 and all(loss > 0 for loss in losses)  # each epoch trained on batches
    assert "DeepSpeed-style run: model DistributedDataParallel" in out
