"""A local cluster started from a thread other than the main one lives as long as the driver.

Each test runs a fresh driver script in a subprocess, so the cluster is really started by
the first call (auto-init) from the thread the test names, as a user's program would.
Linux's parent-death signal fires when the creating *thread* exits; these tests fail when
the node daemon is tied to that thread instead of the driver process.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import process_gone, wait_for

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run(tmp_path, source: str, timeout_s: float = 120) -> subprocess.CompletedProcess:
    script = tmp_path / "driver.py"
    script.write_text(textwrap.dedent(source))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in [_ROOT, os.environ.get("PYTHONPATH", "")] if p))
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=timeout_s, cwd=str(tmp_path), env=env)


_TASKS_FROM_THREAD = """
    import threading
    import raylite as ray

    @ray.remote
    def f(x):
        return x + 1

    out = []
    t = threading.Thread(target=lambda: out.append(ray.get(f.remote(1))))
    t.start()
    t.join()
    out.append(ray.get(f.remote(2)))          # the thread that started the cluster has exited
    out.append(sum(ray.get([f.remote(i) for i in range(10)])))
    print("RESULT", out, flush=True)
"""


def test_tasks_after_the_starting_thread_exits(tmp_path):
    """The issue's snippet, run twice in a row (a second run right after the first)."""
    for _ in range(2):
        out = _run(tmp_path, _TASKS_FROM_THREAD)
        assert out.returncode == 0, out.stderr[-3000:]
        assert "RESULT [2, 3, 55]" in out.stdout


def test_init_from_an_asyncio_coroutine(tmp_path):
    out = _run(tmp_path, """
        import asyncio
        import threading
        import raylite as ray

        @ray.remote
        def f(x):
            return x * 2

        async def main():
            ray.init(num_cpus=2)
            return [await f.remote(3), await asyncio.wrap_future(f.remote(4).future())]

        # the coroutine runs on a loop in a thread that ends before the next call
        box = []
        t = threading.Thread(target=lambda: box.append(asyncio.run(main())))
        t.start()
        t.join()
        @ray.remote
        class Counter:
            def add(self, x):
                return x + 1

        c = Counter.remote()  # an actor needs the node daemon, not just a cached worker lease
        print("RESULT", box[0], ray.get(f.remote(5)), ray.get(c.add.remote(6)), ray.put(7) is not None,
              flush=True)
    """)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "RESULT [6, 8] 10 7 True" in out.stdout


def test_driver_killed_takes_its_thread_started_cluster_down(tmp_path):
    """SIGKILL to a driver whose cluster a thread started: the node daemon and workers go."""
    script = tmp_path / "driver.py"
    script.write_text(textwrap.dedent("""
        import os, threading, time
        import raylite as ray
        from raylite._core import runtime

        @ray.remote
        def f():
            return os.getpid()

        box = []
        t = threading.Thread(target=lambda: box.append(ray.get(f.remote())))
        t.start()
        t.join()
        print(runtime.driver().process.pid, box[0], flush=True)
        time.sleep(600)
    """))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in [_ROOT, os.environ.get("PYTHONPATH", "")] if p))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        pids = [int(p) for p in proc.stdout.readline().split()]
        assert len(pids) == 2, "the driver did not report its node and worker"
        assert all(not process_gone(p) for p in pids)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    wait_for(lambda: all(process_gone(p) for p in pids), timeout_s=30, what="the node daemon and worker to exit")


def test_data_pipeline_without_init(tmp_path):
    """Seed 003's shape with no init(): Data's prefetch thread starts the cluster."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    data = tmp_path / "pairs"
    data.mkdir()
    for i in range(2):
        pq.write_table(pa.table({"instruction": [f"row {i}-{j}" for j in range(600)]}), data / f"{i}.parquet")
    out = _run(tmp_path, f"""
        import raylite as ray
        import raylite.data

        def tokenize_batch(batch):
            batch["n"] = batch["instruction"].str.len()
            return batch

        ds = ray.data.read_parquet({str(data)!r})
        tokenized = ds.map_batches(tokenize_batch, batch_format="pandas", batch_size=256, num_cpus=1)
        rows = []
        for _ in range(2):
            rows.append(sum(len(b["n"]) for b in tokenized.iter_batches(batch_size=100)))
        print("RESULT", rows, tokenized.count(), flush=True)
    """, timeout_s=180)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "RESULT [1200, 1200] 1200" in out.stdout


@pytest.mark.slow
def test_train_started_in_a_thread_without_init(tmp_path):
    out = _run(tmp_path, f"""
        import threading
        import raylite as ray
        from raylite import train
        from raylite.train import RunConfig, ScalingConfig
        from raylite.train.torch import TorchTrainer

        def loop(config):
            import torch
            model = train.torch.prepare_model(torch.nn.Linear(2, 1))
            loss = model(torch.ones(4, 2)).sum()
            loss.backward()
            train.report({{"rank": train.get_context().get_world_rank(), "done": 1}})

        def fit():
            trainer = TorchTrainer(loop, scaling_config=ScalingConfig(num_workers=2, use_gpu=False),
                                   run_config=RunConfig(storage_path={str(tmp_path)!r}, name="t", verbose=0))
            box.append(trainer.fit())

        box = []
        t = threading.Thread(target=fit)
        t.start()
        t.join()
        assert box[0].error is None, box[0].error

        @ray.remote
        def after():
            return "alive"

        print("RESULT", box[0].metrics["done"], ray.get(after.remote()), flush=True)
    """, timeout_s=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "RESULT 1 alive" in out.stdout
