"""A minimal Kubernetes API client: GET and JSON-patch over TLS, as a pod's service account.

In a pod, the API server is at https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT and
the service account's token and CA are mounted at /var/run/secrets/kubernetes.io/serviceaccount/
(`token`, `ca.crt`). Only TLS verified against that CA is spoken: no plain HTTP, no skipping the
check. The token is re-read on each call (Kubernetes rotates projected tokens). A redirect is
never followed: urllib's default handler would resend the `Authorization` header to wherever
the answer points, `http://` included, handing the service-account token to that host; the
Kubernetes API never redirects its clients, so a redirect is an error naming its target.
"""

from __future__ import annotations

import json
import os
import ssl
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
TIMEOUT_S = 10.0


class KubernetesAPIError(RuntimeError):
    """The API server refused or failed a call; `status` is its HTTP status (0: unreachable)."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):  # noqa: ANN001, ANN201
        raise KubernetesAPIError(f"{req.get_method()} {req.selector}: the Kubernetes API answered HTTP {code}, a "
                                 f"redirect to {newurl!r}; raylite never follows a redirect with the "
                                 "service-account token. Point it at the API server itself.", code)


class KubeAPI:
    def __init__(self, server: str | None = None, service_account_dir: str = SERVICE_ACCOUNT_DIR) -> None:
        if server is None:
            host = os.environ.get("KUBERNETES_SERVICE_HOST")
            port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
            if not host:
                raise KubernetesAPIError("KUBERNETES_SERVICE_HOST is not set: `kuberay-autoscaler` runs inside a "
                                         "Kubernetes pod (KubeRay's autoscaler sidecar), or pass the API server's URL")
            server = f"https://{'[' + host + ']' if ':' in host else host}:{port}"
        if not server.startswith("https://"):
            raise KubernetesAPIError(f"the Kubernetes API server must be reached over https://, not {server!r}")
        self.server = server.rstrip("/")
        self.token_path = os.path.join(service_account_dir, "token")
        ca = os.path.join(service_account_dir, "ca.crt")
        if not os.path.exists(ca) or not os.path.exists(self.token_path):
            raise KubernetesAPIError(f"no service-account token and CA in {service_account_dir} (expected `token` "
                                     "and `ca.crt`): give the pod a service account (KubeRay's autoscaler RBAC)")
        self.ssl = ssl.create_default_context(cafile=ca)
        self._opener = urllib.request.build_opener(urllib.request.HTTPSHandler(context=self.ssl), _NoRedirects)

    def _token(self) -> str:
        with open(self.token_path) as f:
            return f.read().strip()

    def request(self, method: str, path: str, body: Any = None, content_type: str = "application/json") -> Any:
        data = None if body is None else json.dumps(body).encode()
        url = self.server + path
        if not url.startswith("https://"):
            raise KubernetesAPIError(f"refusing to send the service-account token to {url!r}: https only")
        req = urllib.request.Request(url, data=data, method=method)
        req.add_header("Authorization", "Bearer " + self._token())
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", content_type)
        try:
            with self._opener.open(req, timeout=TIMEOUT_S) as resp:  # https only, no redirects
                return json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as e:
            detail = e.read()[:500].decode(errors="replace")
            raise KubernetesAPIError(f"{method} {path}: HTTP {e.code} from the Kubernetes API: {detail}", e.code) from e
        except (urllib.error.URLError, OSError) as e:
            raise KubernetesAPIError(f"{method} {path}: cannot reach the Kubernetes API at {self.server}: {e}") from e

    def get(self, path: str) -> Any:
        return self.request("GET", path)

    def json_patch(self, path: str, ops: list[dict[str, Any]]) -> Any:
        return self.request("PATCH", path, ops, "application/json-patch+json")


def quote(value: str) -> str:
    return urllib.parse.quote(value, safe="")
