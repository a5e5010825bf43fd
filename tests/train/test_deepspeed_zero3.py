"""The seeds' T.5.3 pattern: DeepSpeed ZeRO stage 3 under TorchTrainer, with the optimizer and
the parameters offloaded to CPU, checkpoints through `train.report`, and a restore that resumes.

DeepSpeed runs on its CPU accelerator over the gloo group raylite sets up (no launcher, no
`init_distributed`): the same code runs on GPUs with `use_gpu=True` and NCCL. DeepSpeed's fused
CPU Adam needs a compiled extension, so the config asks for torch's Adam
(`torch_adam`, with `zero_force_ds_cpu_optimizer` off), as raylite's TorchTrainer docs say.

On CPU, DeepSpeed's communication backend JIT-compiles a shared-memory op (`deepspeed_shm_comm`,
50-125 s on 2 cores) under a lock file in torch's extension cache. Every rank waits on that lock
with no timeout, and a build killed half-way leaves the lock behind for good (a stale one in
`~/.cache/torch_extensions` hung both ranks of a CI run). So the test builds the op once, in a
subprocess with a deadline, into a directory it owns, and the ranks load it from there.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

import cloudpickle
import pytest

pytest.importorskip("deepspeed")
pytest.importorskip("transformers")

from raylite import train  # noqa: E402
from raylite.train import Checkpoint, RunConfig, ScalingConfig  # noqa: E402
from raylite.train.torch import TorchTrainer, prepare_model  # noqa: E402

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the loop is shipped by value

ZERO3 = {
    "train_micro_batch_size_per_gpu": 2,
    "gradient_accumulation_steps": 1,
    "zero_optimization": {
        "stage": 3,
        "offload_optimizer": {"device": "cpu", "pin_memory": True},
        "offload_param": {"device": "cpu", "pin_memory": True},
        "overlap_comm": True,
        "contiguous_gradients": True,
    },
    "optimizer": {"type": "Adam", "params": {"lr": 5e-3, "torch_adam": True}},
    "zero_force_ds_cpu_optimizer": False,
    "gradient_clipping": 1.0,
}


def zero3_loop(config):
    os.environ["TORCH_EXTENSIONS_DIR"] = config["extensions_dir"]  # the op the fixture built
    import deepspeed
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(config["model_dir"])
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=ZERO3)
    same = prepare_model(engine) is engine  # the engine partitions and places its own parameters
    start = 0
    checkpoint = train.get_checkpoint()
    if checkpoint:
        with checkpoint.as_directory() as d:
            _, client_state = engine.load_checkpoint(d, tag="zero3")
        start = client_state["epoch"] + 1
    ids = torch.randint(0, 64, (8, 16), generator=torch.Generator().manual_seed(1))
    for epoch in range(start, config["epochs"]):
        for i in range(0, 8, 2):
            loss = engine(input_ids=ids[i:i + 2], labels=ids[i:i + 2]).loss
            engine.backward(loss)
            engine.step()
        with tempfile.TemporaryDirectory() as d:
            engine.save_checkpoint(d, tag="zero3", client_state={"epoch": epoch})  # every rank its shard
            train.report({"loss": loss.item(), "epoch": epoch, "stage": engine.zero_optimization_stage(),
                          "offloads_params": bool(engine.zero_offload_param()),
                          "dp_world_size": engine.dp_world_size, "prepare_model_kept_engine": same},
                         checkpoint=Checkpoint.from_directory(d))


@pytest.fixture(scope="module")
def tiny_causal_lm(tmp_path_factory):
    from transformers import GPT2Config, GPT2LMHeadModel

    path = tmp_path_factory.mktemp("tiny-gpt2")
    config = GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=64, n_positions=32,
                        bos_token_id=0, eos_token_id=0)
    GPT2LMHeadModel(config).save_pretrained(path)
    return str(path)


BUILD_SHM_OP = """
from deepspeed.accelerator import get_accelerator
builder = get_accelerator().create_op_builder("ShareMemCommBuilder")
if builder is not None:
    builder.load()
"""


@pytest.fixture(scope="module")
def extensions_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("torch-extensions")
    env = {**os.environ, "TORCH_EXTENSIONS_DIR": str(path)}
    try:
        built = subprocess.run([sys.executable, "-c", BUILD_SHM_OP], env=env, capture_output=True,
                               text=True, timeout=360)
    except subprocess.TimeoutExpired:
        pytest.fail("building DeepSpeed's CPU shared-memory op took over 360 s")
    assert built.returncode == 0, f"building DeepSpeed's CPU shared-memory op failed:\n{built.stderr[-3000:]}"
    return str(path)


@pytest.mark.timeout(720)  # the op's build (fixture) and two trainings
def test_zero3_with_cpu_offload_trains_checkpoints_and_resumes(cluster, tiny_causal_lm, extensions_dir, tmp_path):
    def trainer(epochs, resume_from=None):
        return TorchTrainer(zero3_loop, train_loop_config={"model_dir": tiny_causal_lm, "epochs": epochs,
                                                           "extensions_dir": extensions_dir},
                            scaling_config=ScalingConfig(num_workers=2),
                            run_config=RunConfig(storage_path=str(tmp_path), name=f"zero3-{epochs}", verbose=0),
                            resume_from_checkpoint=resume_from)

    first = trainer(2).fit()
    df = first.metrics_dataframe
    assert list(df["epoch"]) == [0, 1]
    assert set(df["stage"]) == {3} and df["offloads_params"].all() and set(df["dp_world_size"]) == {2}
    assert df["prepare_model_kept_engine"].all()
    # both ranks' ZeRO-3 shards of parameters and optimizer state are in the one checkpoint
    shards = sorted(os.listdir(os.path.join(first.checkpoint.path, "zero3")))
    assert shards == sorted(f"zero_pp_rank_{r}_mp_rank_00_{kind}_states.pt"
                            for r in (0, 1) for kind in ("model", "optim"))

    resumed = trainer(4, resume_from=first.checkpoint).fit()
    assert list(resumed.metrics_dataframe["epoch"]) == [2, 3]  # went on from the checkpoint
    assert resumed.metrics_dataframe["loss"].iloc[-1] < df["loss"].iloc[0]
