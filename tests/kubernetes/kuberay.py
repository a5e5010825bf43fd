"""KubeRay's side of the contract, as the operator writes it: commands, environment, probes.

Each function produces the exact strings KubeRay puts into a pod spec, from the same inputs
(rayStartParams, the head service's name, the RayJob's fields), following KubeRay's source
(paths below are in github.com/ray-project/kuberay). docs/kubernetes.md lists them too.
"""

from __future__ import annotations

import json

HEAD_PORT = 6379  # utils.DefaultGcsServerPort
DASHBOARD_PORT = 8265  # utils.DefaultDashboardPort
AGENT_PORT = 52365  # utils.DefaultDashboardAgentListenPort
METRICS_PORT = 8080  # utils.DefaultMetricsPort
SERVE_PORT = 8000  # utils.DefaultServingPort

# ray-operator/controllers/ray/utils/constant.go: BaseWgetHealthCommand and the probe paths
WGET_PROBE = "wget --tries 1 -T {timeout} -q -O- http://localhost:{port}/{path} | grep success"


def head_service_fqdn(cluster: str, namespace: str) -> str:
    """utils.GenerateFQDNServiceName: `<cluster>-head-svc.<namespace>.svc.cluster.local`."""
    return f"{cluster}-head-svc.{namespace}.svc.cluster.local"


def complete_params(params: dict[str, str], node_type: str, fqdn: str = "") -> dict[str, str]:
    """common/pod.go setMissingRayStartParams: what KubeRay adds to the user's rayStartParams."""
    out = dict(params)
    if node_type == "worker":
        out.setdefault("address", f"{fqdn}:{HEAD_PORT}")
    else:
        out.setdefault("dashboard-host", "0.0.0.0")
    out.setdefault("metrics-export-port", str(METRICS_PORT))
    out["block"] = "true"
    out.setdefault("dashboard-agent-listen-port", str(AGENT_PORT))
    return out


def convert_param_map(params: dict[str, str]) -> str:
    """common/pod.go convertParamMap: sorted keys, ` --key=value ` (true/false values become a
    bare flag or nothing, except for log-color and include-dashboard)."""
    flags = []
    for key in sorted(params):
        value = params[key]
        if value.lower() in ("true", "false") and key not in ("log-color", "include-dashboard"):
            if value.lower() == "true":
                flags.append(f" --{key} ")
        else:
            flags.append(f" --{key}={value} ")
    return "".join(flags)


def ray_start_command(node_type: str, params: dict[str, str], *, num_cpus: int, memory_bytes: int,
                      fqdn: str = "") -> str:
    """common/pod.go generateRayStartCommand (num-cpus and memory from the container's limits)."""
    p = complete_params(params, node_type, fqdn)
    p.setdefault("num-cpus", str(num_cpus))
    p.setdefault("memory", str(memory_bytes))
    return ("ray start --head " if node_type == "head" else "ray start ") + convert_param_map(p)


def container_args(start_cmd: str) -> str:
    """common/pod.go BuildPod: `ulimit -n ${RAY_START_ULIMIT_OPEN_FILES:-65536}; <ray start ...>`,
    run as `/bin/bash -lc -- <args>` (utils.GetContainerCommand)."""
    return f"ulimit -n ${{RAY_START_ULIMIT_OPEN_FILES:-65536}}; {start_cmd}"


def container_env(node_type: str, *, cluster: str, namespace: str, pod_name: str, group: str,
                  start_cmd: str, service: bool = False) -> dict[str, str]:
    """common/pod.go setContainerEnvVars (the values a Downward API would fill in, filled in)."""
    fqdn = head_service_fqdn(cluster, namespace)
    ip = "127.0.0.1" if node_type == "head" else fqdn  # utils.LOCAL_HOST for the head
    env = {}
    if node_type == "worker":
        env["FQ_RAY_IP"] = fqdn
        env["RAY_IP"] = f"{cluster}-head-svc"
    env.update({
        "RAY_CLUSTER_NAME": cluster,
        "RAY_CLOUD_INSTANCE_ID": pod_name,
        "RAY_NODE_TYPE_NAME": group,
        "KUBERAY_GEN_RAY_START_CMD": start_cmd,
        "RAY_PORT": str(HEAD_PORT),
        "RAY_ADDRESS": f"{ip}:{HEAD_PORT}",
        "RAY_USAGE_STATS_KUBERAY_IN_USE": "1",
        "RAY_DASHBOARD_ENABLE_K8S_DISK_USAGE": "1",
    })
    if node_type == "head":
        env["RAY_USAGE_STATS_EXTRA_TAGS"] = f"kuberay_version=v1.5.0;kuberay_crd={'RayService' if service else 'RayCluster'}"
    if service:
        env.update({"RAY_TIMEOUT_MS_TASK_WAIT_FOR_DEATH_INFO": "0",
                    "RAY_GCS_SERVER_REQUEST_TIMEOUT_SECONDS": "5", "RAY_SERVE_KV_TIMEOUT_S": "5"})
    return env


def gcs_ft_env(node_type: str, *, redis_address: str, redis_password: str, storage_namespace: str) -> dict[str, str]:
    """common/pod.go configureGCSFaultTolerance (gcsFaultToleranceOptions with a password Secret)."""
    if node_type == "worker":
        return {"RAY_GCS_RPC_SERVER_RECONNECT_TIMEOUT_S": "600"}
    return {"RAY_external_storage_namespace": storage_namespace, "RAY_REDIS_ADDRESS": redis_address,
            "REDIS_PASSWORD": redis_password}


def probe_commands(node_type: str, *, serve_worker: bool = False) -> str:
    """common/pod.go initLivenessAndReadinessProbe: the exec probe (bash -c), joined with &&."""
    cmds = [WGET_PROBE.format(timeout=1, port=AGENT_PORT, path="api/local_raylet_healthz")]
    if node_type == "head":
        cmds.append(WGET_PROBE.format(timeout=10, port=DASHBOARD_PORT, path="api/gcs_healthz"))
    if serve_worker:
        cmds.append(WGET_PROBE.format(timeout=10, port=SERVE_PORT, path="-/healthz"))
    return " && ".join(cmds)


HTTP_PROBE_PATH = "/api/healthz"  # utils.RayNodeHealthPath (Ray >= 2.53: an httpGet probe)


def wait_gcs_ready_script(fqdn: str, port: int = HEAD_PORT) -> str:
    """common/pod.go DefaultWorkerPodTemplate: the `wait-gcs-ready` init container's loop."""
    return f"""
SECONDS=0
while true; do
  if (( SECONDS <= 120 )); then
    if ray health-check --address {fqdn}:{port} > /dev/null 2>&1; then
      echo "GCS is ready."
      break
    fi
    echo "$SECONDS seconds elapsed: Waiting for GCS to be ready."
  else
    if ray health-check --address {fqdn}:{port}; then
      echo "GCS is ready. Any error messages above can be safely ignored."
      break
    fi
    echo "$SECONDS seconds elapsed: Still waiting for GCS to be ready."
  fi
  sleep 5
done
"""


def _quote(text: str) -> str:
    """Go's strconv.Quote for the ASCII strings used here."""
    return json.dumps(text)


def submitter_command(address: str, job_id: str, entrypoint: str, *, runtime_env: dict | None = None,
                      metadata: dict | None = None, entrypoint_num_cpus: float = 0) -> str:
    """common/job.go BuildJobSubmitCommand (K8sJobMode), joined with spaces as the submitter
    container runs it (`/bin/bash -lc -- <command>`)."""
    if not address.startswith("http://"):
        address = "http://" + address
    cmd = ["if", "!", "ray", "job", "status", "--address", address, job_id, ">/dev/null", "2>&1", ";", "then",
           "ray", "job", "submit", "--address", address, "--no-wait"]
    if runtime_env:
        cmd += ["--runtime-env-json", _quote(json.dumps(runtime_env, separators=(",", ":")))]
    if metadata:
        cmd += ["--metadata-json", _quote(json.dumps(metadata, separators=(",", ":")))]
    cmd += ["--submission-id", job_id]
    if entrypoint_num_cpus > 0:
        cmd += ["--entrypoint-num-cpus", f"{entrypoint_num_cpus:f}"]
    cmd += ["--", entrypoint, ";", "fi", ";", "ray", "job", "logs", "--address", address, "--follow", job_id]
    return " ".join(cmd)


def sidecar_submitter_command(job_id: str, entrypoint: str, *, runtime_env: dict | None = None,
                              address: str = f"http://127.0.0.1:{DASHBOARD_PORT}") -> str:
    """common/job.go BuildJobSubmitCommand (SidecarMode): in the head pod, wait for the head's
    gcs_healthz, then (with RAY_EXPECTED_MIN_WORKERS) for that many ALIVE workers in
    `/nodes?view=summary`, then `ray job submit` (which waits for the job)."""
    health = WGET_PROBE.format(timeout=10, port=DASHBOARD_PORT, path="api/gcs_healthz")
    count = ("\"$(python3 -c \"import urllib.request,json,os; req=urllib.request.Request('" + address
             + "/nodes?view=summary'); t=os.environ.get('RAY_AUTH_TOKEN',''); t and req.add_header("
             "'x-ray-authorization','Bearer '+t); d=json.loads(urllib.request.urlopen(req,timeout=5).read()); "
             "print(len([n for n in d.get('data',{}).get('summary',[]) if n.get('raylet',{}).get('state')"
             "=='ALIVE']))\" 2>/dev/null || echo 0)\"")
    cmd = ["until", health, ">/dev/null", "2>&1", ";",
           "do", "echo", _quote(f"Waiting for Ray Dashboard GCS to become healthy at {address} ..."), ";",
           "sleep", "2", ";", "done", ";",
           "if", "[", "-n", "\"$RAY_EXPECTED_MIN_WORKERS\"", "]", "&&", "[", "\"$RAY_EXPECTED_MIN_WORKERS\"",
           "-gt", "\"0\"", "]", ";", "then",
           "EXPECTED_NODES=$(($RAY_EXPECTED_MIN_WORKERS + 1))", ";",
           "echo", _quote("Waiting for $EXPECTED_NODES nodes (1 head + $RAY_EXPECTED_MIN_WORKERS workers) to register..."),
           ";", "until", "[", count, "-ge", "\"$EXPECTED_NODES\"", "]", ";",
           "do", "echo", _quote("Waiting for Ray nodes to register. Expected: $EXPECTED_NODES ..."), ";",
           "sleep", "2", ";", "done", ";",
           "echo", _quote("All expected nodes are registered."), ";", "fi", ";",
           "ray", "job", "submit", "--address", address]
    if runtime_env:
        cmd += ["--runtime-env-json", _quote(json.dumps(runtime_env, separators=(",", ":")))]
    cmd += ["--submission-id", job_id, "--", entrypoint, ";"]
    return " ".join(cmd)
