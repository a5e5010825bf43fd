"""A RayJob: KubeRay's submitter pod runs `ray job status || ray job submit --no-wait ...; ray job
logs --follow` (common/job.go BuildJobSubmitCommand); the job runs tasks on both pods and
SUCCEEDS, and a second run of the submitter (a restarted submitter pod) does not resubmit."""

from __future__ import annotations

import json
import os
import urllib.request

import pytest

from .conftest import RAY_IMPORT, RayClusterPods, auth_env
from .kuberay import DASHBOARD_PORT, sidecar_submitter_command, submitter_command

pytestmark = pytest.mark.slow

JOB_SCRIPT = RAY_IMPORT + """
import os
from raylite.util.scheduling_strategies import NodeAffinitySchedulingStrategy
ray.init()
with open(f"/tmp/job-runs-{os.environ['KR_MARK']}.txt", "a") as f:  # how many times this job's entrypoint ran
    f.write("run\\n")
@ray.remote(num_cpus=1)
def where():
    return ray.util.get_node_ip_address(), os.environ.get("KR_MARK")
nodes = [n["NodeID"] for n in ray.nodes() if n["Alive"]]
out = ray.get([where.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n, soft=False)).remote()
               for n in nodes])
print("JOB-RESULT", sorted(ip for ip, _ in out), sorted({m for _, m in out}))
"""


@pytest.fixture(scope="module")
def cluster(hosts, tmp_path_factory):
    c = RayClusterPods(hosts, str(tmp_path_factory.mktemp("rayjob")))
    try:
        c.start_head()
        c.start_worker(0)
        c.wait_ready(timeout_s=30.0)
        with open(os.path.join(c.head.tmp, "job.py"), "w") as f:  # the image's (or a ConfigMap's) script
            f.write(JOB_SCRIPT)
        yield c
    finally:
        c.stop()


def _job_info(cluster, job_id: str) -> dict:
    req = urllib.request.Request(f"http://{cluster.head.ip}:{DASHBOARD_PORT}/api/jobs/{job_id}",
                                 headers={"Authorization": f"Bearer {cluster.token}"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


def test_submitter_runs_the_job_to_succeeded_and_never_resubmits(cluster, hosts):
    job_id = "rayjob-kr-abc12"
    address = f"{cluster.fqdn}:{DASHBOARD_PORT}"  # RayJob.Status.DashboardURL
    cmd = submitter_command(address, job_id, "python /tmp/job.py", runtime_env={"env_vars": {"KR_MARK": "m1"}},
                            entrypoint_num_cpus=0.5)
    # the submitter is a K8s Job's pod: a pod of its own, resolving the head service by DNS
    submitter = cluster.pod("rayjob-kr-submitter", hosts[2])
    env = auth_env(cluster.token)  # KubeRay gives the submitter the token too
    first = submitter.run(cmd, env, timeout=240)
    assert first.returncode == 0, first.stdout + first.stderr + cluster.logs()
    info = _job_info(cluster, job_id)
    assert info["status"] == "SUCCEEDED", info
    assert info["entrypoint_num_cpus"] == 0.5
    assert f"JOB-RESULT {sorted([cluster.head.ip, cluster.workers[0].ip])} ['m1']" in first.stdout
    # the submitter pod restarts (K8s Job backoff): the same command finds the job and only follows it
    second = submitter.run(cmd, env, timeout=120)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "JOB-RESULT" in second.stdout  # `ray job logs --follow` printed the finished job's output
    with open(os.path.join(cluster.head.tmp, "job-runs-m1.txt")) as f:
        assert f.read().count("run") == 1  # the entrypoint ran once
    assert _job_info(cluster, job_id)["status"] == "SUCCEEDED"
    status = submitter.run(f"ray job status --address http://{address} {job_id}", env, timeout=60)
    assert status.returncode == 0 and "SUCCEEDED" in status.stdout, status.stdout + status.stderr


def test_status_of_an_unknown_submission_fails_so_the_submitter_submits(cluster, hosts):
    submitter = cluster.pod("rayjob-kr-submitter2", hosts[2])
    env = auth_env(cluster.token)
    out = submitter.run(f"ray job status --address http://{cluster.fqdn}:{DASHBOARD_PORT} no-such-job", env,
                        timeout=60)
    assert out.returncode != 0


def test_sidecar_submitter_waits_for_the_workers_then_runs_the_job(cluster):
    """SidecarMode: the submitter runs in the head pod, waits for gcs_healthz and for
    RAY_EXPECTED_MIN_WORKERS ALIVE workers in /nodes?view=summary, then submits and waits."""
    job_id = "rayjob-kr-sidecar"
    cmd = sidecar_submitter_command(job_id, "python /tmp/job.py", runtime_env={"env_vars": {"KR_MARK": "s1"}})
    env = {**auth_env(cluster.token), "RAY_EXPECTED_MIN_WORKERS": "1"}
    out = cluster.head.run(cmd, env, timeout=240)
    assert out.returncode == 0, out.stdout + out.stderr + cluster.logs()
    assert "All expected nodes are registered." in out.stdout
    assert f"JOB-RESULT {sorted([cluster.head.ip, cluster.workers[0].ip])} ['s1']" in out.stdout
    assert _job_info(cluster, job_id)["status"] == "SUCCEEDED"
