"""raylite on a real GPU: detection of the card's type, device assignment, torch on CUDA in
tasks, actors, Train (NCCL), Serve and Data, and the seeds' GPU samples with one worker."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import cloudpickle
import pytest

import raylite as ray
from raylite._core import accelerators

from ..cluster.conftest import free_port

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # loops and UDFs ship by value

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "examples")


def _card_types() -> list[str]:
    out = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, check=True).stdout
    first = accelerators.parse_nvidia_smi(out)[0]
    return accelerators.gpu_type_names(first.name, first.memory_mib)


def test_the_cards_type_and_count_are_detected(gpu_cluster):
    import torch

    res = ray.cluster_resources()
    assert res["GPU"] == torch.cuda.device_count()
    types = _card_types()
    assert types, "nvidia-smi named a card raylite cannot name"
    for name in types:
        assert res[f"accelerator_type:{name}"] == 1


def test_accelerator_type_places_work_on_the_card(gpu_cluster):
    @ray.remote(num_gpus=1, accelerator_type=_card_types()[0])
    def name():
        import torch

        return torch.cuda.get_device_name(0)

    assert ray.get(name.remote(), timeout=120)


def test_a_gpu_task_and_actor_see_their_device_and_compute_on_it(gpu_cluster):
    @ray.remote(num_gpus=1)
    def matmul():
        import torch

        x = torch.ones(256, 256, device="cuda")
        return os.environ["CUDA_VISIBLE_DEVICES"], ray.get_gpu_ids(), float((x @ x)[0, 0])

    @ray.remote(num_gpus=1)
    class OnGpu:
        def info(self):
            import torch

            return os.environ["CUDA_VISIBLE_DEVICES"], torch.cuda.device_count(), torch.cuda.is_available()

    visible, ids, value = ray.get(matmul.remote(), timeout=120)
    assert value == 256.0 and visible == ",".join(str(i) for i in ids) and len(ids) == 1
    actor = OnGpu.remote()
    visible, count, available = ray.get(actor.info.remote(), timeout=120)
    assert available and count == 1 and visible.isdigit()
    ray.kill(actor)


def test_two_half_gpu_actors_share_one_device(gpu_cluster):
    @ray.remote(num_gpus=0.5)
    class Half:
        def work(self):
            import torch

            x = torch.randn(512, 512, device="cuda")
            return os.environ["CUDA_VISIBLE_DEVICES"], float((x @ x).abs().sum()) > 0

    a, b = Half.remote(), Half.remote()
    (dev_a, ok_a), (dev_b, ok_b) = ray.get([a.work.remote(), b.work.remote()], timeout=120)
    assert ok_a and ok_b and dev_a == dev_b  # packed onto one device, both computing
    ray.kill(a)
    ray.kill(b)


def nccl_loop():
    import torch
    import torch.distributed as dist

    from raylite import train
    from raylite.train.torch import get_device, prepare_model

    device = get_device()
    model = prepare_model(torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(64, 8, device=device)
    y = x.sum(1, keepdim=True)
    for _ in range(20):
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    train.report({"loss": loss.item(), "device": str(device), "backend": dist.get_backend()})


def test_torch_trainer_trains_on_one_gpu_worker_over_nccl(gpu_cluster, tmp_path):
    from raylite.train import RunConfig, ScalingConfig
    from raylite.train.torch import TorchTrainer

    result = TorchTrainer(nccl_loop, scaling_config=ScalingConfig(num_workers=1, use_gpu=True),
                          run_config=RunConfig(storage_path=str(tmp_path), name="nccl", verbose=0)).fit()
    assert result.metrics["device"].startswith("cuda")
    assert result.metrics["backend"] == "nccl"
    assert result.metrics["loss"] < 1.0


def test_serve_deployment_serves_a_torch_model_on_the_gpu(gpu_cluster):
    import httpx

    from raylite import serve

    @serve.deployment(ray_actor_options={"num_gpus": 1})
    class Doubler:
        def __init__(self):
            import torch

            self.device = torch.device("cuda")
            self.weight = torch.full((1,), 2.0, device=self.device)

        async def __call__(self, request):
            import torch

            value = float((await request.json())["x"])
            out = torch.tensor([value], device=self.device) * self.weight
            return {"y": float(out.item()), "device": str(out.device)}

    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    serve.run(Doubler.bind(), route_prefix="/double", name="gpu-app")
    reply = httpx.post(f"http://127.0.0.1:{port}/double", json={"x": 21}, timeout=60).json()
    assert reply == {"y": 42.0, "device": "cuda:0"}
    serve.shutdown()


def test_data_map_batches_runs_on_a_gpu_actor_pool(gpu_cluster):
    import numpy as np

    class OnGpu:
        def __init__(self):
            import torch

            self.torch = torch

        def __call__(self, batch):
            t = self.torch.as_tensor(batch["id"], device="cuda") * 2
            return {"id": batch["id"], "doubled": t.cpu().numpy(), "device": np.array([str(t.device)] * len(t))}

    rows = ray.data.range(64).map_batches(OnGpu, num_gpus=1, concurrency=1, batch_size=16).take_all()
    assert sorted(r["doubled"] for r in rows) == [2 * i for i in range(64)]
    assert {r["device"] for r in rows} == {"cuda:0"}


SEED_SAMPLES = ["train_quickstart.py", "train_fashion_mnist.py", "train_lightning.py", "train_recipe.py",
                "train_cluster_checkpoints.py", "train_llm_sft.py"]


@pytest.mark.parametrize("example", SEED_SAMPLES)
def test_the_seeds_samples_run_on_one_gpu_worker(example, tmp_path):
    """Each example is the seed's sample with use_gpu=False; here it runs as the seed wrote it
    (use_gpu=True), on one worker, in a fresh process with its own local cluster."""
    if ray.is_initialized():
        ray.shutdown()
    source = open(os.path.join(EXAMPLES, example)).read()
    source = source.replace("use_gpu=False", "use_gpu=True")
    source = re.sub(r"num_workers=\d+", "num_workers=1", source)
    script = tmp_path / example
    script.write_text(source)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                         cwd=str(tmp_path), env=dict(os.environ, PYTHONPATH=os.pathsep.join(
                             [os.path.dirname(os.path.dirname(ray.__file__)), os.environ.get("PYTHONPATH", "")])))
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]


def lightning_deepspeed_loop():
    import lightning.pytorch as pl
    import torch

    from raylite.train.lightning import (
        RayDeepSpeedStrategy,
        RayLightningEnvironment,
        RayTrainReportCallback,
        prepare_trainer,
    )

    class Tiny(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(8, 1)

        def training_step(self, batch, _):
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.layer(x), y)
            self.log("loss", loss)
            return loss

        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters(), lr=0.01)

    x = torch.randn(64, 8)
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True)), batch_size=8)
    trainer = pl.Trainer(max_epochs=2, devices="auto", accelerator="auto",
                         strategy=RayDeepSpeedStrategy(stage=2), plugins=[RayLightningEnvironment()],
                         callbacks=[RayTrainReportCallback()], enable_progress_bar=False, logger=False)
    prepare_trainer(trainer).fit(Tiny(), data)


def test_lightning_ray_deepspeed_strategy_on_the_gpu(gpu_cluster, tmp_path):
    pytest.importorskip("deepspeed")
    from raylite.train import RunConfig, ScalingConfig
    from raylite.train.torch import TorchTrainer

    result = TorchTrainer(lightning_deepspeed_loop, scaling_config=ScalingConfig(num_workers=1, use_gpu=True),
                          run_config=RunConfig(storage_path=str(tmp_path), name="pl-ds", verbose=0)).fit()
    assert result.error is None and "loss" in result.metrics


def _why_no_gpu_vllm() -> str:
    import importlib.metadata
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        return "vllm is not installed on this GPU machine (pip install vllm)"
    if "cpu" in importlib.metadata.version("vllm"):
        return "the installed vllm is a CPU build"
    if importlib.util.find_spec("transformers") is None:
        return "transformers is not installed (the tiny model is built with it)"
    return ""


def _environ_of(pid: int) -> dict[str, str]:
    try:
        raw = open(f"/proc/{pid}/environ", "rb").read()
    except OSError:  # gone or not ours
        return {}
    pairs = (item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, v in pairs}


def test_serve_llm_runs_the_tiny_model_on_its_bundles_gpu(gpu_cluster, tmp_path):
    """vLLM on the GPU of the replica's placement-group bundle: its processes see exactly
    the device raylite assigned for that bundle (one id), and it answers."""
    if _why_no_gpu_vllm():
        pytest.skip(_why_no_gpu_vllm())
    import httpx

    from raylite import serve
    from raylite.serve.llm import LLMConfig, build_openai_app
    from tests.serve_llm.tiny_model import build_tiny_llama

    model = build_tiny_llama(str(tmp_path / "tiny"))
    config = LLMConfig(
        model_loading_config={"model_id": "tiny", "model_source": model},
        engine_kwargs={"tensor_parallel_size": 1, "max_model_len": 256, "enforce_eager": True,
                       "gpu_memory_utilization": 0.3, "max_num_seqs": 4},
        placement_group_config={"bundle_per_worker": {"GPU": 1}})
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    try:
        serve.run(build_openai_app({"llm_configs": [config]}), name="llm-gpu")
        reply = httpx.post(f"http://127.0.0.1:{port}/v1/completions", timeout=300, json={
            "model": "tiny", "prompt": "Hello", "max_tokens": 8, "temperature": 0})
        assert reply.status_code == 200, reply.text
        assert reply.json()["usage"]["completion_tokens"] == 8
        handle = serve.get_deployment_handle("LLMServer:tiny", app_name="llm-gpu")
        procs = handle.engine_processes.remote().result(timeout_s=60)
        [pids] = procs.values()
        visible = {_environ_of(p).get("CUDA_VISIBLE_DEVICES") for p in pids[1:]} - {None}
        assert len(visible) == 1, visible  # vLLM's processes: one device, the same for all
        assert next(iter(visible)).isdigit()
    finally:
        serve.shutdown()
