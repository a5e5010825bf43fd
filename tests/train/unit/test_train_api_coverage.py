"""Issue 5 API entries not covered elsewhere: the context getters, unlimited failures,
resume_from_checkpoint, ScalingConfig/TorchConfig options and the loop helpers' switches."""

import os
import tempfile

import pytest
import torch
from train_fakes import ThreadWorkerGroup

import raylite.train.torch as rt
from raylite import train
from raylite.train import Checkpoint, CheckpointConfig, FailureConfig, ScalingConfig
from raylite.train._internal.controller import RunSpec, TrainController
from raylite.train._internal.storage import StorageContext
from raylite.train.torch import TorchConfig, TorchTrainer


def _run(fn, tmp_path, n=2, failure=None, resume=None, name="api"):
    storage = StorageContext.create(str(tmp_path), name)
    storage.validate_writable()
    spec = RunSpec("TorchTrainer", fn, None, n, storage, CheckpointConfig(), failure or FailureConfig(),
                   verbose=0, poll_timeout_s=0.2, resume_from_checkpoint=resume)
    ctrl = TrainController(spec, lambda: ThreadWorkerGroup(n))
    return ctrl, ctrl.run()


def test_context_getters(tmp_path):
    seen = {}

    def loop():
        ctx = train.get_context()
        seen[ctx.get_world_rank()] = (
            ctx.get_local_rank(), ctx.get_local_world_size(), ctx.get_node_rank(), ctx.get_world_size(),
            ctx.get_experiment_name(), ctx.get_trial_name(), ctx.get_storage().experiment_path,
        )

    _run(loop, tmp_path, name="ctx")
    path = str(tmp_path / "ctx")
    assert seen == {0: (0, 2, 0, 2, "ctx", "ctx", path), 1: (1, 2, 0, 2, "ctx", "ctx", path)}


def test_max_failures_minus_one_restarts_until_success(tmp_path):
    attempts = []

    def loop():
        if train.get_context().get_world_rank() == 0:
            attempts.append(1)
            if len(attempts) < 4:
                raise RuntimeError(f"flaky {len(attempts)}")
        train.report({"ok": 1})

    ctrl, result = _run(loop, tmp_path, failure=FailureConfig(max_failures=-1))
    assert result.error is None and len(attempts) == 4 and ctrl.state.failures == 3


def test_resume_from_checkpoint_is_the_first_get_checkpoint(tmp_path):
    d = tempfile.mkdtemp()
    with open(os.path.join(d, "step.txt"), "w") as f:
        f.write("41")
    got = []

    def loop():
        with train.get_checkpoint().as_directory() as ckpt_dir:
            got.append(int(open(os.path.join(ckpt_dir, "step.txt")).read()))

    _run(loop, tmp_path, resume=Checkpoint.from_directory(d))
    assert got == [41, 41]


def test_scaling_and_torch_config_options():
    sc = ScalingConfig(num_workers=2, accelerator_type="A100", trainer_resources={"CPU": 1},
                       placement_strategy="SPREAD", resources_per_worker={"CPU": 2})
    assert sc.additional_resources_per_worker == {"accelerator_type:A100": 0.001}
    assert sc.as_placement_group_factory() == [{"CPU": 2.0, "accelerator_type:A100": 0.001}] * 2
    with pytest.raises(ValueError, match="placement_strategy"):
        ScalingConfig(placement_strategy="RANDOM")
    trainer = TorchTrainer(lambda: None, torch_config=TorchConfig(backend="gloo", timeout_s=12))
    backend = trainer._backend_factory()(type("M", (), {"node_ip": "10.0.0.1", "free_port": 29501})())
    assert (backend.backend, backend.master_addr, backend.master_port, backend.timeout_s) == (
        "gloo", "10.0.0.1", 29501, 12.0)
    with pytest.raises(TypeError, match="TorchConfig"):
        TorchTrainer(lambda: None, torch_config={"backend": "gloo"})


def test_loop_helper_switches_outside_a_run():
    model = torch.nn.Linear(2, 1)
    assert rt.prepare_model(model, parallel_strategy=None) is model
    assert rt.prepare_model(model, move_to_device=False) is model
    loader = torch.utils.data.DataLoader(list(range(6)), batch_size=2, shuffle=True)
    assert rt.prepare_data_loader(loader, add_dist_sampler=False, move_to_device=False) is loader
    assert rt.get_devices() == [rt.get_device()]
    rt.enable_reproducibility(7)
    try:
        a = torch.rand(3)
        rt.enable_reproducibility(7)
        assert torch.equal(a, torch.rand(3))
    finally:
        torch.use_deterministic_algorithms(False)


def test_integration_names_are_kept():
    """Users' Lightning / transformers code imports these names unchanged."""
    lightning = pytest.importorskip("lightning")
    assert lightning
    import raylite.train.lightning as rl

    for name in ("RayDDPStrategy", "RayFSDPStrategy", "RayDeepSpeedStrategy", "RayLightningEnvironment",
                 "RayTrainReportCallback", "prepare_trainer"):
        assert getattr(rl, name) is not None, name
    pytest.importorskip("transformers")
    from raylite.train.huggingface.transformers import RayTrainReportCallback, prepare_trainer

    assert RayTrainReportCallback and prepare_trainer
