"""WebSockets through `@serve.ingress(fastapi_app)`: the proxy carries the upgrade and every
message to a replica and back -- text and bytes, many messages, close codes both ways, a client
that vanishes, refusals, subprotocols, message size and flow control.

(No `from __future__ import annotations` here: the deployment classes below are pickled by
value, and FastAPI could not resolve string annotations such as "WebSocket" in the replica.)"""

import socket
import time

import httpx
import pytest
from fastapi import FastAPI, WebSocket, WebSocketDisconnect
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from tests.conftest import wait_for

app = FastAPI()


@app.websocket("/plain")
async def plain(ws: WebSocket) -> None:  # a module-level endpoint, not a method
    await ws.accept()
    await ws.send_text("plain " + await ws.receive_text())
    await ws.close()


@pytest.fixture(scope="module")
def echo(serve_instance):
    """(serve, ws base URL, handle) for an echo app at /ws that records how clients left."""
    serve, url = serve_instance

    @serve.deployment
    @serve.ingress(app)
    class Echo:
        def __init__(self) -> None:
            self.left: list[int] = []

        @app.websocket("/echo")
        async def echo(self, ws: WebSocket) -> None:
            await ws.accept()
            try:
                while True:
                    msg = await ws.receive()
                    if msg["type"] == "websocket.disconnect":
                        self.left.append(msg["code"])
                        return
                    if msg.get("text") is not None:
                        if msg["text"].startswith("close "):
                            await ws.close(code=int(msg["text"].split()[1]), reason="as asked")
                            return
                        await ws.send_text(msg["text"])
                    else:
                        await ws.send_bytes(msg["bytes"])
            except WebSocketDisconnect as e:
                self.left.append(e.code)

        @app.websocket("/slow-reader")
        async def slow_reader(self, ws: WebSocket) -> None:
            await ws.accept()
            got = []
            while len(got) < 200:
                got.append(await ws.receive_text())
                if len(got) % 50 == 0:
                    await asyncio_sleep(0.05)
            await ws.send_text(",".join(got))
            await ws.close()

        @app.websocket("/firehose")
        async def firehose(self, ws: WebSocket) -> None:
            await ws.accept()
            for i in range(500):
                await ws.send_text(str(i))
            await ws.close()

        @app.websocket("/refuse")
        async def refuse(self, ws: WebSocket) -> None:
            await ws.close(code=1008)

        @app.websocket("/proto")
        async def proto(self, ws: WebSocket) -> None:
            await ws.accept(subprotocol="v2" if "v2" in ws.scope["subprotocols"] else None)
            await ws.send_text(ws.scope["path"] + "?" + ws.scope["query_string"].decode())
            await ws.close()

        @app.get("/left")
        def get_left(self) -> list[int]:
            return self.left

    serve.run(Echo.bind(), name="ws", route_prefix="/ws")
    yield serve, "ws" + url[4:] + "/ws", url
    serve.delete("ws")


async def asyncio_sleep(s: float) -> None:
    import asyncio

    await asyncio.sleep(s)


def _left(url: str) -> list[int]:
    return httpx.get(f"{url}/ws/left", timeout=10).json()


def test_echo_text_and_bytes_many_messages(echo):
    _serve, ws_url, _url = echo
    with connect(f"{ws_url}/echo") as ws:
        for i in range(100):
            ws.send(f"message {i}")
            assert ws.recv() == f"message {i}"
        payload = bytes(range(256)) * 64
        ws.send(payload)
        assert ws.recv() == payload
        ws.send("x" * 300_000)  # larger than one read: several TCP segments, one message
        assert ws.recv() == "x" * 300_000


def test_close_codes_travel_both_ways(echo):
    _serve, ws_url, url = echo
    with connect(f"{ws_url}/echo") as ws:
        ws.send("close 4001")
        with pytest.raises(ConnectionClosed) as info:
            ws.recv()
    assert info.value.rcvd.code == 4001 and info.value.rcvd.reason == "as asked"
    n = len(_left(url))
    with connect(f"{ws_url}/echo") as ws:
        ws.send("hi")
        assert ws.recv() == "hi"
        ws.close(code=4321, reason="bye")
    wait_for(lambda: len(_left(url)) > n, timeout_s=10, what="the app to see the client's close")
    assert _left(url)[-1] == 4321


def test_a_client_that_vanishes_is_a_1006_disconnect(echo):
    _serve, ws_url, url = echo
    n = len(_left(url))
    ws = connect(f"{ws_url}/echo")
    ws.send("hi")
    assert ws.recv() == "hi"
    ws.socket.shutdown(socket.SHUT_RDWR)  # no closing handshake: the TCP connection just ends
    ws.socket.close()
    wait_for(lambda: len(_left(url)) > n, timeout_s=10, what="the app to see the disconnect")
    assert _left(url)[-1] == 1006


def test_refusal_and_unknown_routes_answer_http(echo):
    _serve, ws_url, url = echo
    with pytest.raises(InvalidStatus) as info:
        connect(f"{ws_url}/refuse")
    assert info.value.response.status_code == 403
    with pytest.raises(InvalidStatus) as info:
        connect(f"ws{url[4:]}/nowhere")
    assert info.value.response.status_code == 404
    # a plain HTTP request to a WebSocket route is still plain HTTP
    assert httpx.get(f"{url}/ws/left", timeout=10).status_code == 200


def test_subprotocol_path_and_query(echo):
    _serve, ws_url, _url = echo
    with connect(f"{ws_url}/proto?a=1", subprotocols=["v1", "v2"]) as ws:
        assert ws.subprotocol == "v2"
        assert ws.recv() == "/ws/proto?a=1"


def test_module_level_endpoint(echo):
    _serve, ws_url, _url = echo
    with connect(f"{ws_url}/plain") as ws:
        ws.send("there")
        assert ws.recv() == "plain there"


def test_flow_control_keeps_order_both_ways(echo):
    _serve, ws_url, _url = echo
    with connect(f"{ws_url}/slow-reader") as ws:
        for i in range(200):  # far more than the 32 in flight the proxy allows: it stops reading
            ws.send(str(i))
        assert ws.recv(timeout=30) == ",".join(str(i) for i in range(200))
    with connect(f"{ws_url}/firehose") as ws:
        got = []
        time.sleep(0.2)  # let the app run ahead: it must wait for credits, not fill memory
        for _ in range(500):
            got.append(ws.recv(timeout=30))
    assert got == [str(i) for i in range(500)]


def test_a_message_over_the_size_limit_closes_1009(serve_instance):
    serve, url = serve_instance
    small = FastAPI()

    @serve.deployment(max_request_body_size_bytes=1024)
    @serve.ingress(small)
    class Small:
        @small.websocket("/")
        async def echo(self, ws: WebSocket) -> None:
            await ws.accept()
            while True:
                await ws.send_text(await ws.receive_text())

    serve.run(Small.bind(), name="wsmall", route_prefix="/wsmall")
    with connect(f"ws{url[4:]}/wsmall/") as ws:
        ws.send("a" * 1000)
        assert ws.recv() == "a" * 1000
        ws.send("b" * 5000)
        with pytest.raises(ConnectionClosed) as info:
            ws.recv()
    assert info.value.rcvd is not None and info.value.rcvd.code == 1009  # "message too big", from the proxy
    serve.delete("wsmall")


def test_plain_deployment_refuses_websockets(serve_instance):
    serve, url = serve_instance

    @serve.deployment
    def hello(request) -> str:
        return "hello"

    serve.run(hello.bind(), name="nows", route_prefix="/nows")
    with pytest.raises(InvalidStatus) as info:
        connect(f"ws{url[4:]}/nows")
    assert info.value.response.status_code == 404
    assert b"@serve.ingress" in info.value.response.body
    serve.delete("nows")


def test_class_endpoint_at_the_root_route(serve_instance):
    """The shape of Ray's documentation example: a class-based echo at "/" on route "/"."""
    serve, url = serve_instance
    root = FastAPI()

    @serve.deployment
    @serve.ingress(root)
    class EchoServer:
        @root.websocket("/")
        async def echo(self, ws: WebSocket) -> None:
            await ws.accept()
            try:
                while True:
                    await ws.send_text(await ws.receive_text())
            except WebSocketDisconnect:
                pass

    serve.run(EchoServer.bind(), name="root", route_prefix="/")
    with connect(f"ws{url[4:]}") as ws:
        ws.send("Eureka!")
        assert ws.recv() == "Eureka!"
        ws.send("I've found it!")
        assert ws.recv() == "I've found it!"
    serve.delete("root")
