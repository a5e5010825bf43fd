"""The proxy's limits and path normalisation, as pure functions."""

import pytest

from raylite.serve._internal.http_limits import Limits, normalize_path


@pytest.mark.parametrize("raw, path", [
    (b"/", "/"),
    (b"/echo/a", "/echo/a"),
    (b"/echo/../x", "/x"),
    (b"/echo/%2e%2e/x", "/x"),
    (b"/echo/%2E%2E%2Fx", "/x"),
    (b"/echo/./a/./b", "/echo/a/b"),
    (b"/a/b/..", "/a/"),
    (b"/a/.", "/a/"),
    (b"/../../etc/passwd", "/etc/passwd"),
    (b"/..", "/"),
    (b"/a%20b/%C3%A9", "/a b/\u00e9"),
    (b"/a/...", "/a/..."),
    (b"http://example.com/echo/../x", "/x"),
    (b"https://example.com", "/"),
    (b"*", "*"),
])
def test_normalize_path(raw, path):
    assert normalize_path(raw) == path


def test_a_target_that_is_not_a_path_is_refused():
    assert normalize_path(b"echo") is None
    assert normalize_path(b"") is None


def test_limits_from_http_options_take_only_what_is_set():
    lim = Limits.from_options({"host": "0.0.0.0", "max_header_count": 7, "max_connections": None})
    assert lim.max_header_count == 7
    assert lim.max_connections == Limits().max_connections
    assert lim.max_header_size_bytes == 16 * 1024
