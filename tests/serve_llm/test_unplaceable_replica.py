"""The seed's TP=2 LLMConfig with Ray's default ingress (1 CPU) on two 1-CPU nodes: the replica's
two 1-CPU bundles can never be placed beside the ingress. The deploy fails at once, naming the
fix (the ingress's num_cpus: 0), instead of waiting UPDATING forever. No engine starts."""

from __future__ import annotations

import time

import pytest

from tests.serve.test_placement_group_waits import two_one_cpu_nodes  # noqa: F401 - fixture
from tests.serve_llm.conftest import free_port

pytestmark = pytest.mark.timeout(240)


def test_tp2_beside_a_default_ingress_on_two_one_cpu_nodes_fails_naming_the_fix(two_one_cpu_nodes):  # noqa: F811
    from raylite import serve
    from raylite.serve.llm import build_openai_app

    serve.start(http_options={"host": "127.0.0.1", "port": free_port(), "location": "HeadOnly"})
    config = {"model_loading_config": {"model_id": "tiny", "model_source": "/nonexistent/never-loaded"},
              "engine_kwargs": {"tensor_parallel_size": 2}}
    started = time.monotonic()
    with pytest.raises(RuntimeError) as err:
        serve.run(build_openai_app({"llm_configs": [config]}))
    text = str(err.value)
    assert "can never be placed" in text and "CPU=2" in text and "holds CPU=1" in text
    assert "ingress_deployment_config={'ray_actor_options': {'num_cpus': 0}}" in text
    assert time.monotonic() - started < 90
