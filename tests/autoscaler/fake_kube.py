"""A small fake Kubernetes API server for the KubeRay autoscaler's tests: HTTPS with a
self-signed certificate made here, a bearer-token check, GET of one RayCluster and of its pods
by label selector, and PATCH of the RayCluster with `application/json-patch+json`.

The test plays KubeRay's operator through `FakeKube`: it reads the RayCluster, creates and
deletes pod objects (and the worker processes behind them) as replicas and workersToDelete say.
"""

from __future__ import annotations

import copy
import datetime
import ipaddress
import json
import os
import ssl
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def make_ca(directory: str, token: str) -> tuple[str, str, str]:
    """A self-signed certificate for 127.0.0.1 (cert, key) and a service-account dir with
    `token` and `ca.crt` (the same certificate: it signs itself)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fake-kube-apiserver")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(hours=2))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    os.makedirs(directory, exist_ok=True)
    cert_path, key_path = os.path.join(directory, "server.crt"), os.path.join(directory, "server.key")
    with open(cert_path, "wb") as f:
        f.write(cert.public_bytes(serialization.Encoding.PEM))
    with open(key_path, "wb") as f:
        f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()))
    sa = os.path.join(directory, "serviceaccount")
    os.makedirs(sa, exist_ok=True)
    with open(os.path.join(sa, "ca.crt"), "wb") as f:
        f.write(cert.public_bytes(serialization.Encoding.PEM))
    with open(os.path.join(sa, "token"), "w") as f:
        f.write(token + "\n")
    return cert_path, key_path, sa


def apply_json_patch(doc: Any, ops: list[dict[str, Any]]) -> Any:
    """RFC 6902 `replace` and `add` (all the autoscaler sends); anything else is refused."""
    doc = copy.deepcopy(doc)
    for op in ops:
        parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        parent = doc
        for p in parts[:-1]:
            parent = parent[int(p)] if isinstance(parent, list) else parent[p]
        last = parts[-1]
        if op["op"] == "replace":
            if isinstance(parent, list):
                parent[int(last)] = op["value"]
            elif last not in parent:
                raise KeyError(f"replace of a missing member {op['path']}")
            else:
                parent[last] = op["value"]
        elif op["op"] == "add":
            if isinstance(parent, list):
                parent.insert(len(parent) if last == "-" else int(last), op["value"])
            else:
                parent[last] = op["value"]
        else:
            raise ValueError(f"unsupported op {op['op']}")
    return doc


class FakeKube:
    def __init__(self, raycluster: dict[str, Any], token: str, cert: str, key: str) -> None:
        self.raycluster = raycluster
        self.pods: dict[str, dict[str, Any]] = {}
        self.patches: list[list[dict[str, Any]]] = []
        self.refused = 0
        self.lock = threading.Lock()
        self.token = token
        kube = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a: Any) -> None:
                pass

            def _reply(self, code: int, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _authorized(self) -> bool:
                if self.headers.get("Authorization") != f"Bearer {kube.token}":
                    with kube.lock:
                        kube.refused += 1
                    self._reply(401, {"kind": "Status", "status": "Failure", "reason": "Unauthorized"})
                    return False
                return True

            def do_GET(self) -> None:  # noqa: N802
                if not self._authorized():
                    return
                url = urllib.parse.urlsplit(self.path)
                ns, name = kube.raycluster["metadata"]["namespace"], kube.raycluster["metadata"]["name"]
                with kube.lock:
                    if url.path == f"/apis/ray.io/v1/namespaces/{ns}/rayclusters/{name}":
                        return self._reply(200, kube.raycluster)
                    if url.path == f"/api/v1/namespaces/{ns}/pods":
                        selector = urllib.parse.parse_qs(url.query).get("labelSelector", [""])[0]
                        want = dict(s.split("=", 1) for s in selector.split(",") if s)
                        items = [p for p in kube.pods.values()
                                 if all(p["metadata"]["labels"].get(k) == v for k, v in want.items())]
                        return self._reply(200, {"kind": "PodList", "items": items})
                self._reply(404, {"kind": "Status", "reason": "NotFound"})

            def do_PATCH(self) -> None:  # noqa: N802
                if not self._authorized():
                    return
                ns, name = kube.raycluster["metadata"]["namespace"], kube.raycluster["metadata"]["name"]
                if self.path != f"/apis/ray.io/v1/namespaces/{ns}/rayclusters/{name}":
                    return self._reply(404, {"kind": "Status", "reason": "NotFound"})
                if self.headers.get("Content-Type") != "application/json-patch+json":
                    return self._reply(415, {"kind": "Status", "reason": "UnsupportedMediaType"})
                ops = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                with kube.lock:
                    try:
                        kube.raycluster = apply_json_patch(kube.raycluster, ops)
                    except (KeyError, ValueError, IndexError) as e:
                        return self._reply(422, {"kind": "Status", "reason": "Invalid", "message": str(e)})
                    kube.patches.append(ops)
                    return self._reply(200, kube.raycluster)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert, key)
        self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
        self.url = f"https://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def group(self, name: str) -> dict[str, Any]:
        with self.lock:
            return copy.deepcopy(next(g for g in self.raycluster["spec"]["workerGroupSpecs"] if g["groupName"] == name))

    def add_pod(self, name: str, group: str, ip: str) -> None:
        cluster = self.raycluster["metadata"]["name"]
        with self.lock:
            self.pods[name] = {"metadata": {"name": name, "labels": {
                "ray.io/cluster": cluster, "ray.io/node-type": "worker", "ray.io/group": group}},
                "status": {"phase": "Running", "podIP": ip,
                           "containerStatuses": [{"state": {"running": {}}}]}}

    def delete_pod(self, name: str) -> None:
        """The operator deleted the pod: it leaves the list and the workersToDelete entry."""
        with self.lock:
            self.pods.pop(name, None)
            for g in self.raycluster["spec"]["workerGroupSpecs"]:
                strategy = g.get("scaleStrategy") or {}
                if name in (strategy.get("workersToDelete") or []):
                    strategy["workersToDelete"] = [n for n in strategy["workersToDelete"] if n != name]
