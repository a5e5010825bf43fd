"""Return values become HTTP bodies as in Ray Serve: FastAPI's jsonable_encoder rules plus Serve's
own encoders, compact JSON, text for str/bytes and an empty body for None."""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import json
import pathlib
import uuid
from collections import deque

import pytest

from raylite.serve._internal.http_util import encode_result, takes_request
from raylite.serve._internal.json_encoding import encode_body, to_jsonable


class Color(enum.Enum):
    RED = "red"


@dataclasses.dataclass
class Point:
    x: int
    y: float
    tags: list


def _values() -> list:
    from pydantic import BaseModel, Field
    from starlette.datastructures import Headers, QueryParams

    class Item(BaseModel):
        name: str
        price: float = Field(alias="cost")
        when: datetime.date

    return [
        {"a": 1, "b": [1, 2.5, None, True]},
        QueryParams("a=b&c=d"),
        Headers({"x-one": "1"}),
        Item(name="pen", cost=1.5, when=datetime.date(2024, 1, 2)),
        Point(1, 2.0, ["t"]),
        Color.RED,
        pathlib.PurePosixPath("/tmp/x"),
        (1, 2), {3}, frozenset({4}), deque([5]),
        datetime.datetime(2024, 5, 6, 7, 8, 9), datetime.timedelta(seconds=90),
        decimal.Decimal("3"), decimal.Decimal("3.25"), uuid.UUID(int=7),
        {"_sa_state": 1, "_keep": 2, 3: "int key"},
        {"nested": [Point(0, 0.5, []), {"when": datetime.time(1, 2)}]},
    ]


@pytest.mark.parametrize("index", range(18))
def test_to_jsonable_matches_fastapi(index):
    fastapi_encoders = pytest.importorskip("fastapi.encoders")
    value = _values()[index]
    assert to_jsonable(value) == fastapi_encoders.jsonable_encoder(value)


def test_serve_extra_encoders_numpy_pandas_and_exceptions():
    np = pytest.importorskip("numpy")
    pd = pytest.importorskip("pandas")
    assert to_jsonable(np.arange(3, dtype=np.int32)) == [0, 1, 2]
    assert to_jsonable(np.array([0.5], dtype=np.float32)) == [0.5]
    assert to_jsonable({"n": np.int64(4), "f": np.float64(0.25)}) == {"n": 4, "f": 0.25}
    assert to_jsonable(pd.DataFrame({"a": [1, 2]})) == [{"a": 1}, {"a": 2}]
    assert to_jsonable(ValueError("boom")) == "boom"


def test_bodies_and_content_types_follow_ray():
    from starlette.datastructures import QueryParams

    assert encode_body(None) == ([(b"content-type", b"text/plain")], b"")
    assert encode_body(b"\x00raw") == ([(b"content-type", b"text/plain")], b"\x00raw")
    assert encode_body("héllo") == ([(b"content-type", b"text/plain; charset=utf-8")], "héllo".encode())
    headers, body = encode_body({"a": [1, 2], "b": "x"})
    assert headers == [(b"content-type", b"application/json")]
    assert body == b'{"a":[1,2],"b":"x"}'  # compact, as Ray writes it
    assert encode_body(QueryParams("a=b&c=d"))[1] == b'{"a":"b","c":"d"}'
    assert encode_body(7)[1] == b"7"


def test_a_value_that_cannot_be_encoded_is_a_500_naming_its_type():
    status, _, body = encode_result(object(), "Dep")
    assert status == 500 and b"object" in body and b"Dep" in body


def test_takes_request_counts_parameters_like_ray():
    def none():
        return 1

    def one(request):
        return request

    def star(*args):
        return args

    class NoArg:
        def __call__(self):
            return 1

    class OneArg:
        def __call__(self, request):
            return request

    assert not takes_request(none)
    assert takes_request(one) and takes_request(star)
    assert not takes_request(NoArg()) and takes_request(OneArg())
    assert json.loads(encode_body([Color.RED])[1]) == ["red"]


@pytest.mark.parametrize("index", range(18))
def test_body_bytes_match_ray_for_every_kind_of_value(index):
    """encode_body's fast path (plain json.dumps) and its walk give Ray's exact bytes."""
    fastapi_encoders = pytest.importorskip("fastapi.encoders")
    value = _values()[index]
    wanted = json.dumps(fastapi_encoders.jsonable_encoder(value), separators=(",", ":")).encode()
    assert encode_body(value)[1] == wanted
    nested = {"outer": [value], "_sa_hidden": 1}
    wanted = json.dumps(fastapi_encoders.jsonable_encoder(nested), separators=(",", ":")).encode()
    assert encode_body(nested)[1] == wanted


def test_errors_answer_like_ray():
    import pickle

    from raylite.serve._internal.http_util import error_reply
    from raylite.serve.exceptions import BackPressureError, DeploymentUnavailableError

    shed = BackPressureError(num_queued_requests=2, max_queued_requests=2, deployment="D", status_code=429,
                             retry_after_s=1.2)
    status, headers, body = error_reply(pickle.loads(pickle.dumps(shed)))
    assert status == 429 and (b"retry-after", b"2") in headers and b"backpressure" in body
    assert error_reply(BackPressureError(deployment="D"))[0] == 503
    assert error_reply(DeploymentUnavailableError("gone"))[0] == 503
    status, _, body = error_reply(ValueError("bad input"))
    assert status == 500 and body == b"ValueError: bad input"
