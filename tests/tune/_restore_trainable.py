"""The trainable of the SIGKILL-restore test, importable by the killed driver and the test.

Each trial counts to 4, checkpointing each step. Trial x=1 stops after step 2 until the
release file exists, so the test can kill the driver while that trial is mid-run."""

import json
import os
import tempfile
import time

from raylite import tune
from raylite.tune import Checkpoint


def counting(config):
    step, starts = 0, 0
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as d:
            state = json.load(open(os.path.join(d, "state.json")))
        step, starts = state["step"], state["starts"] + 1
    while step < 4:
        step += 1
        d = tempfile.mkdtemp()
        json.dump({"step": step, "starts": starts}, open(os.path.join(d, "state.json"), "w"))
        tune.report({"step": step, "resumed_from": starts and step},
                    checkpoint=Checkpoint.from_directory(d))
        if config["x"] == 1 and step == 2:
            while not os.path.exists(config["release"]):
                time.sleep(0.05)
