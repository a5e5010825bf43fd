"""The Kubernetes API client never hands the service-account token to anyone but the API
server (issue 33, finding 6): a redirect, to `http://` or anywhere, is an error naming it, and
the target never sees an `Authorization` header. Both servers listen on 127.0.0.1."""

from __future__ import annotations

import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from raylite.autoscaler.providers.kube_api import KubeAPI, KubernetesAPIError

from ..autoscaler.fake_kube import make_ca

TOKEN = "service-account-token-0123456789"


def _serve(handler, ssl_ctx=None):
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    if ssl_ctx is not None:
        server.socket = ssl_ctx.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def servers(tmp_path):
    seen: list[str] = []

    class Thief(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            seen.append(self.headers.get("Authorization", ""))
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *a):
            pass

    thief = _serve(Thief)
    cert, key, sa = make_ca(str(tmp_path), TOKEN)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert, key)
    target = {"to": ""}

    class Redirecting(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            self.send_response(302)
            self.send_header("Location", target["to"])
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *a):
            pass

    api = _serve(Redirecting, ctx)
    yield {"api": f"https://127.0.0.1:{api.server_address[1]}", "sa": sa, "seen": seen, "target": target,
           "thief_http": f"http://127.0.0.1:{thief.server_address[1]}/steal"}
    api.shutdown()
    thief.shutdown()


@pytest.mark.parametrize("where", ["http", "same-server"])
def test_a_redirect_is_refused_and_the_token_stays_home(servers, where):
    servers["target"]["to"] = servers["thief_http"] if where == "http" else servers["api"] + "/elsewhere"
    client = KubeAPI(servers["api"], servers["sa"])
    with pytest.raises(KubernetesAPIError, match="never follows a redirect") as e:
        client.get("/apis/ray.io/v1/namespaces/default/rayclusters/x")
    assert e.value.status == 302
    assert servers["seen"] == []


def test_plain_http_api_servers_are_refused(servers):
    with pytest.raises(KubernetesAPIError, match="https"):
        KubeAPI(servers["thief_http"].rsplit("/", 1)[0], servers["sa"])
