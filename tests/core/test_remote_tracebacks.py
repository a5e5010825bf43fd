"""A remote error's traceback names the user's file and shows the line's code, for functions
pickled by value (cloudpickle 3.1 renames their file `<dynamic-code>`): defined in `__main__`,
in a notebook cell (a file name only linecache knows, as IPython makes), and in a module
registered with `register_pickle_by_value`; raised in a task, an actor, a Data UDF, a Train
worker and a Serve replica. The driver is a script of its own, so `__main__` is the user's."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

USER_MODULE = '''
def mod_helper(x):
    return {"v": 10 // x}  # MODULE LINE
'''

DRIVER = '''
import linecache
import sys
import tempfile
import traceback

import cloudpickle

import raylite as ray

import user_mod

cloudpickle.register_pickle_by_value(user_mod)
CELL = "/tmp/ipykernel_4242/2718281828.py"  # a cell's name in IPython: no such file
CELL_SRC = """
def cell_helper(x):
    return 1 / x  # CELL LINE

def cell_task():
    return cell_helper(0)
"""
linecache.cache[CELL] = (len(CELL_SRC), None, CELL_SRC.splitlines(True), CELL)  # as IPython does
exec(compile(CELL_SRC, CELL, "exec"), globals())


def main_helper(x):
    return 1 / x  # MAIN LINE


KINDS = {
    "main": (lambda: main_helper(0), __file__, "# MAIN LINE"),
    "cell": (lambda: cell_task(), CELL, "# CELL LINE"),
    "module": (lambda: user_mod.mod_helper(0), user_mod.__file__, "# MODULE LINE"),
}


def check(where, kind, thunk):
    _fn, expect_file, expect_line = KINDS[kind]
    try:
        thunk()
    except Exception as e:  # noqa: BLE001
        text = str(e) + "".join(traceback.format_exception(e))
        if f'File "{expect_file}"' in text and expect_line in text:
            print(f"OK {where}/{kind}", flush=True)
        else:
            print(f"BAD {where}/{kind}:\\n{text[-3000:]}", flush=True)
    else:
        print(f"BAD {where}/{kind}: no error", flush=True)


@ray.remote
def task(fn):
    return fn()


@ray.remote
class Actor:
    def call(self, fn):
        return fn()


ray.init(num_cpus=3, include_dashboard=False)
for kind, (fn, _f, _l) in KINDS.items():
    check("task", kind, lambda fn=fn: ray.get(task.remote(fn)))
    actor = Actor.remote()
    check("actor", kind, lambda fn=fn, actor=actor: ray.get(actor.call.remote(fn)))

if "--libraries" in sys.argv:
    from raylite import serve
    from raylite.train import DataParallelTrainer, RunConfig, ScalingConfig

    fn = KINDS["cell"][0]
    check("data", "cell", lambda: ray.data.range(2, override_num_blocks=1).map(lambda r: fn()).take_all())

    def loop(config):
        fn()

    check("train", "cell", lambda: DataParallelTrainer(
        loop, scaling_config=ScalingConfig(num_workers=1),
        run_config=RunConfig(storage_path=tempfile.mkdtemp(), name="tb")).fit())

    @serve.deployment
    class Replica:
        def __call__(self):
            return fn()

    import socket

    with socket.socket() as s:  # not Serve's default 8000: another test may hold it
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    handle = serve.run(Replica.bind(), name="tb", route_prefix=None)
    check("serve", "cell", lambda: handle.remote().result())
    serve.shutdown()
ray.shutdown()
print("FINISHED", flush=True)
'''


def _run(tmp_path: Path, *args: str) -> str:
    (tmp_path / "user_mod.py").write_text(USER_MODULE)
    (tmp_path / "driver.py").write_text(textwrap.dedent(DRIVER))
    temp = tempfile.mkdtemp(prefix="rl-tb-", dir="/tmp")  # short: unix sockets
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{tmp_path}", "RAYLITE_TEMP_DIR": temp}
    for var in ("RAYLITE_ADDRESS", "RAY_ADDRESS"):
        env.pop(var, None)
    try:
        proc = subprocess.run([sys.executable, "driver.py", *args], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=240)
    finally:
        shutil.rmtree(temp, ignore_errors=True)
    out = proc.stdout
    assert proc.returncode == 0 and "FINISHED" in out, out[-3000:] + proc.stderr[-3000:]
    assert "BAD" not in out, out
    return out


def test_task_and_actor_tracebacks_show_the_users_file_and_line(tmp_path):
    out = _run(tmp_path)
    for where in ("task", "actor"):
        for kind in ("main", "cell", "module"):
            assert f"OK {where}/{kind}" in out, out


def test_data_train_serve_tracebacks_show_the_users_file_and_line(tmp_path):
    pytest.importorskip("pyarrow")
    out = _run(tmp_path, "--libraries")
    for where in ("data", "train", "serve"):
        assert f"OK {where}/cell" in out, out
