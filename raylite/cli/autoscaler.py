"""`raylite kuberay-autoscaler` (KubeRay's autoscaler sidecar runs `ray kuberay-autoscaler`) and
`raylite autoscaler --config FILE` (the local provider). Both run the autoscaler's loop in the
foreground until stopped; the autoscaler package loads on first use."""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import threading

import click


def _default_address() -> str:
    """What the KubeRay sidecar reaches: RAY_ADDRESS; else the head whose address file is in
    the temp dir (KubeRay mounts the head container's /tmp/ray into the sidecar too; the
    token file named there is then read as well); else this pod's IP (the sidecar shares the
    head pod's network) on the head's port 6379."""
    from raylite._core.cluster import files as CF
    from raylite._core.config import env_address, get_config

    env = env_address(("RAY_ADDRESS",))
    if env:
        return env
    info = CF.read_address_file(get_config().temp_dir)
    if info and info.get("address"):
        return str(info["address"])
    try:
        ip = socket.gethostbyname(socket.gethostname())
    except OSError:
        ip = "127.0.0.1"
    return f"{ip}:6379"


def _run(autoscaler, interval_s: float, once: bool) -> None:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *a: stop.set())
    signal.signal(signal.SIGINT, lambda *a: stop.set())
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        autoscaler.run(interval_s, stop, rounds=1 if once else None)
    finally:
        autoscaler.close()


@click.command("kuberay-autoscaler")
@click.option("--cluster-name", required=True, help="metadata.name of the RayCluster.")
@click.option("--cluster-namespace", required=True, help="Namespace of the RayCluster.")
@click.option("--address", default=None, help="HOST:PORT of the head (default: RAY_ADDRESS, else this "
              "pod's IP:6379).")
@click.option("--interval-s", type=float, default=5.0, show_default=True, help="Seconds between rounds.")
@click.option("--kube-api-server", default=None, help="https:// URL of the Kubernetes API (default: "
              "in-cluster, from KUBERNETES_SERVICE_HOST/PORT).")
@click.option("--service-account-dir", default="/var/run/secrets/kubernetes.io/serviceaccount",
              show_default=True, help="Where the service account's `token` and `ca.crt` are.")
@click.option("--once", is_flag=True, help="Run one round and exit.")
def kuberay_autoscaler(cluster_name: str, cluster_namespace: str, address: str | None, interval_s: float,
                       kube_api_server: str | None, service_account_dir: str, once: bool) -> None:
    """Scale a KubeRay RayCluster's worker groups to the head's demand (the autoscaler sidecar)."""
    from raylite.autoscaler.autoscaler import Autoscaler
    from raylite.autoscaler.providers.kube_api import KubeAPI, KubernetesAPIError
    from raylite.autoscaler.providers.kuberay import KubeRayProvider

    try:
        api = KubeAPI(kube_api_server, service_account_dir)
    except KubernetesAPIError as e:
        raise click.ClickException(str(e)) from e
    provider = KubeRayProvider(cluster_name, cluster_namespace, api, os.environ.get("KUBERAY_CRD_VER") or "v1")
    _run(Autoscaler(provider, address=address or _default_address()), interval_s, once)


@click.command("autoscaler")
@click.option("--config", "config_path", required=True, help="YAML or JSON file: head_address, "
              "available_node_types (resources, min_workers, max_workers, worker_ips).")
@click.option("--address", default=None, help="HOST:PORT of the head (default: the config's head_address).")
@click.option("--interval-s", type=float, default=5.0, show_default=True, help="Seconds between rounds.")
@click.option("--once", is_flag=True, help="Run one round and exit.")
def autoscaler(config_path: str, address: str | None, interval_s: float, once: bool) -> None:
    """Autoscale a cluster by starting and stopping node daemons on the config's hosts."""
    import yaml

    from raylite.autoscaler.autoscaler import Autoscaler
    from raylite.autoscaler.providers.local import LocalProvider, load_config

    try:
        with open(config_path) as f:
            config = load_config(yaml.safe_load(f))
    except (OSError, ValueError, yaml.YAMLError) as e:
        raise click.ClickException(f"{config_path}: {e}") from e
    provider = LocalProvider(config)
    try:
        _run(Autoscaler(provider, address=address or config.head_address), interval_s, once)
    finally:
        if not once:
            provider.shutdown()
