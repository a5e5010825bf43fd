"""A Train trainer as the trainable: each trial is a distributed training run whose
train_loop_config comes from the param_space, and whose reports are the trial's results."""

import pytest

from raylite import train, tune
from raylite.train import ScalingConfig
from raylite.train.torch import TorchTrainer


def _loop(config):
    import torch

    torch.manual_seed(0)
    model = torch.nn.Linear(1, 1)
    opt = torch.optim.SGD(model.parameters(), lr=config["lr"])
    x = torch.linspace(0, 1, 16).unsqueeze(1)
    for _ in range(config["epochs"]):
        loss = ((model(x) - 2 * x) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        train.report({"loss": loss.item(), "world": train.get_context().get_world_size()})


@pytest.mark.slow  # two trials x two torch workers: about a minute on 2 loaded cores
def test_torch_trainer_as_trainable(cluster, storage):
    trainer = TorchTrainer(_loop, scaling_config=ScalingConfig(num_workers=2),
                           train_loop_config={"lr": 0.1, "epochs": 3})
    grid = tune.Tuner(
        trainer,
        param_space={"train_loop_config": {"lr": tune.grid_search([0.001, 0.5])}},
        tune_config=tune.TuneConfig(metric="loss", mode="min"),
        run_config=tune.RunConfig(storage_path=storage, verbose=0),
    ).fit()
    assert grid.num_errors == 0 and len(grid) == 2
    for result in grid:
        assert result.metrics["training_iteration"] == 3 and result.metrics["world"] == 2
    assert grid.get_best_result().config["train_loop_config"]["lr"] == 0.5
