"""code_pickling: a function pickled by value comes back with its real file name, and its lines
readable through linecache where no such file exists (a notebook cell, another machine)."""

from __future__ import annotations

import linecache
import pickle
import traceback

import cloudpickle

from raylite._core import code_pickling

code_pickling.install()

FAKE = "/nonexistent/raylite-cell-31415.py"
SRC = "x = 1\n\ndef boom(n):\n    return n / 0  # THE LINE\n"


def _cell_function():
    linecache.cache[FAKE] = (len(SRC), None, SRC.splitlines(True), FAKE)
    ns = {"__name__": "__main__"}
    exec(compile(SRC, FAKE, "exec"), ns)
    return ns["boom"]


def test_file_name_and_lines_survive_a_round_trip_without_the_file():
    payload = cloudpickle.dumps(_cell_function())
    linecache.cache.pop(FAKE)  # the process that unpickles has never seen the cell
    boom = pickle.loads(payload)
    assert boom.__code__.co_filename == FAKE
    try:
        boom(1)
    except ZeroDivisionError as e:
        text = "".join(traceback.format_exception(e))
    assert f'File "{FAKE}", line 4, in boom' in text
    assert "return n / 0  # THE LINE" in text
    assert linecache.getline(FAKE, 1) == "\n"  # lines outside the function stay blank, not made up


def test_a_file_that_exists_is_read_from_disk_not_overridden(tmp_path):
    path = tmp_path / "real.py"
    path.write_text("def f():\n    return 'disk'\n")
    assert code_pickling.source_lines(compile(path.read_text(), str(path), "exec").co_consts[0])[0] == 1
    code_pickling.remember(str(path), 1, ["stale\n", "stale\n"])
    assert linecache.getline(str(path), 2).strip() == "return 'disk'"


def test_payload_is_the_same_for_the_same_function():
    fn = _cell_function()
    assert cloudpickle.dumps(fn) == cloudpickle.dumps(fn)  # export ids hash it
