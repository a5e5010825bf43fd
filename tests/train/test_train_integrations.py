"""Framework integrations inside TorchTrainer workers: transformers.Trainer (Lightning runs
in examples/train_lightning.py, see test_train_examples.py)."""

from __future__ import annotations

import os
import sys

import cloudpickle
import pytest

from raylite.train import RunConfig, ScalingConfig
from raylite.train.torch import TorchTrainer

pytestmark = pytest.mark.usefixtures("cluster")
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def hf_loop(config):
    import numpy as np
    import transformers

    import raylite.train.huggingface.transformers as rt_hf
    from raylite import train

    model = transformers.GPT2LMHeadModel(
        transformers.GPT2Config(
            vocab_size=16, n_positions=16, n_embd=16, n_layer=1, n_head=2, bos_token_id=0, eos_token_id=0
        )
    )
    shard = train.get_dataset_shard("train")
    args = transformers.TrainingArguments(
        output_dir=config["output_dir"],
        per_device_train_batch_size=4,
        max_steps=config["steps"],
        save_steps=config["steps"] // 2,
        logging_steps=1,
        learning_rate=5e-3,
        use_cpu=True,
        report_to=[],
        disable_tqdm=True,
    )

    trainer = transformers.Trainer(
        model=model,
        args=args,
        train_dataset=shard,
        callbacks=[rt_hf.RayTrainReportCallback()],
    )
    trainer = rt_hf.prepare_trainer(trainer)
    out = trainer.train()
    assert np.isfinite(out.training_loss)
    # The trainer ran distributed over raylite's process group, not one process each.
    assert trainer.args.world_size == train.get_context().get_world_size()


@pytest.mark.slow
def test_transformers_trainer_reports_checkpoints(tmp_path):
    pytest.importorskip("transformers")
    rdata = pytest.importorskip("raylite.data")
    ds = rdata.from_items([{"input_ids": [(i + j) % 16 for j in range(8)], "labels": [(i + j) % 16 for j in range(8)]} for i in range(64)])
    result = TorchTrainer(
        hf_loop,
        train_loop_config={"output_dir": str(tmp_path / "hf_out"), "steps": 6},
        scaling_config=ScalingConfig(num_workers=2),
        datasets={"train": ds},
        run_config=RunConfig(storage_path=str(tmp_path), name="hf", verbose=0),
    ).fit()
    df = result.metrics_dataframe
    assert list(df["step"]) == [3, 6]
    assert "loss" in df and df["loss"].notna().all()
    with result.checkpoint.as_directory() as d:
        files = os.listdir(d)
    assert "model.safetensors" in files and "trainer_state.json" in files


def deepspeed_loop():
    import deepspeed
    import torch

    from raylite import train

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    config = {
        "train_micro_batch_size_per_gpu": 4,
        "optimizer": {"type": "Adam", "params": {"lr": 0.01, "torch_adam": True}},
        "zero_optimization": {"stage": 1},
    }
    # No init_distributed / launcher: the process group and RANK/WORLD_SIZE are raylite's.
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
    x = torch.randn(64, 8)
    y = x.sum(1, keepdim=True)
    for _ in range(3):
        for i in range(0, 64, 4):
            loss = torch.nn.functional.mse_loss(engine(x[i : i + 4]), y[i : i + 4])
            engine.backward(loss)
            engine.step()
        train.report({"loss": loss.item(), "dp_world_size": engine.dp_world_size})


@pytest.mark.slow
def test_deepspeed_initialize_finds_the_process_group(tmp_path):
    pytest.importorskip("deepspeed")
    result = TorchTrainer(
        deepspeed_loop,
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(storage_path=str(tmp_path), name="ds", verbose=0),
    ).fit()
    df = result.metrics_dataframe
    assert list(df["dp_world_size"]) == [2, 2, 2]
    assert df["loss"].iloc[-1] < df["loss"].iloc[0]
