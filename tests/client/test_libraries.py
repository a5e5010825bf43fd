"""Data, Train and Serve driven from a ray:// program: they use only the public API, which
the Ray Client's RemoteClient serves (client_remote.py)."""

from __future__ import annotations

import json
import sys
import urllib.request

import cloudpickle
import pytest

from .conftest import free_port

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def test_data_pipeline(ray_client):
    ray = ray_client
    import raylite.data as rd

    ds = rd.range(200, override_num_blocks=4).map_batches(lambda b: {"id": b["id"], "sq": b["id"] ** 2})
    ds = ds.filter(lambda row: row["id"] % 2 == 0)
    rows = ds.take_all()
    assert len(rows) == 100 and {r["sq"] for r in rows} == {i * i for i in range(0, 200, 2)}
    assert ds.sum("sq") == sum(i * i for i in range(0, 200, 2))
    assert ray.is_initialized()


def train_loop(config):
    import torch

    import raylite.train.torch as rt
    from raylite import train

    torch.manual_seed(0)
    x = torch.randn(64, 3)
    y = x @ torch.tensor([[1.0], [-1.0], [2.0]])
    model = rt.prepare_model(torch.nn.Linear(3, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(config["epochs"]):
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        train.report({"loss": loss.item(), "epoch": epoch,
                      "world": train.get_context().get_world_size()})


@pytest.mark.slow
def test_train_torch_two_cpu_workers(ray_client, tmp_path):
    pytest.importorskip("torch")
    from raylite.train import RunConfig, ScalingConfig
    from raylite.train.torch import TorchTrainer

    result = TorchTrainer(
        train_loop, train_loop_config={"epochs": 5},
        scaling_config=ScalingConfig(num_workers=2, use_gpu=False),
        run_config=RunConfig(storage_path=str(tmp_path), name="client-ddp", verbose=0),
    ).fit()
    assert result.error is None
    losses = list(result.metrics_dataframe["loss"].dropna())
    assert len(losses) == 5 and losses[-1] < losses[0]
    assert result.metrics["world"] == 2


@pytest.mark.slow
def test_serve_deployment_answers_http(ray_client):
    pytest.importorskip("httptools")
    from raylite import serve

    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    try:
        @serve.deployment
        class Greeter:
            def __init__(self, greeting):
                self.greeting = greeting

            async def __call__(self, request):
                return {"text": f"{self.greeting}, {request.query_params.get('name')}"}

        serve.run(Greeter.bind("hello"), name="greet", route_prefix="/greet")
        # the request comes from this machine, the cluster's host, as a browser there would send it
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/greet?name=laptop", timeout=30) as r:
            assert r.status == 200 and json.loads(r.read()) == {"text": "hello, laptop"}
        assert serve.status().applications["greet"].status == "RUNNING"
    finally:
        serve.shutdown()
