"""Ray's environment variables that KubeRay sets in a pod, mapped onto `raylite start`'s settings.

With GCS fault tolerance on, KubeRay gives the head container (ray-operator/controllers/ray/
common/pod.go, configureGCSFaultTolerance):
- `RAY_REDIS_ADDRESS` (`HOST:PORT` or `redis://HOST:PORT`): where the head keeps its tables;
  here, `--persist redis://HOST:PORT` unless `--persist` is given;
- `REDIS_PASSWORD` / `REDIS_USERNAME` (also passed as `--redis-password=$REDIS_PASSWORD`): the
  Redis credentials, handed to the daemon through its environment, never its command line;
- `RAY_external_storage_namespace` (the RayCluster's UID, or the user's choice): the key
  prefix of this cluster in that Redis, so a restarted head pod finds its own tables;
and worker containers `RAY_GCS_RPC_SERVER_RECONNECT_TIMEOUT_S` (600): how long a node keeps
trying to reach a restarted head before it gives up.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, MutableMapping


def persist_from_env(persist: str, env: Mapping[str, str]) -> str:
    """`--persist` as given, else `redis://...` from RAY_REDIS_ADDRESS (head only)."""
    if persist:
        return persist
    address = env.get("RAY_REDIS_ADDRESS", "").strip()
    if not address:
        return ""
    address = address.split(",")[0].strip()  # Ray accepts a list of addresses; the first is the primary
    if "://" not in address:
        address = "redis://" + address
    return address


def daemon_env(head: bool, env: Mapping[str, str]) -> dict[str, str]:
    """RAYLITE_* settings for the node daemon from Ray's variables (those already set win)."""
    out: dict[str, str] = {}

    def put(name: str, value: str | None) -> None:
        if value and not env.get(name):
            out[name] = value

    if head:
        put("RAYLITE_REDIS_PASSWORD", env.get("REDIS_PASSWORD"))
        put("RAYLITE_REDIS_USERNAME", env.get("REDIS_USERNAME"))
        put("RAYLITE_PERSIST_NAMESPACE", env.get("RAY_external_storage_namespace"))
    put("RAYLITE_HEAD_RECONNECT_TIMEOUT_S", env.get("RAY_GCS_RPC_SERVER_RECONNECT_TIMEOUT_S"))
    return out


def apply(head: bool, persist: str, env: MutableMapping[str, str] | None = None) -> str:
    """Put the mapped settings into `env` (the CLI's environment, which the daemon inherits);
    return the `--persist` to use."""
    env = os.environ if env is None else env
    extra = daemon_env(head, env)
    if extra:
        env.update(extra)
        from raylite._core.config import reload_config

        reload_config()  # the daemon and this process see the same settings
    return persist_from_env(persist, env) if head else persist
