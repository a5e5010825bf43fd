"""Storage URIs shared by Data and Train: which filesystem holds a path, and errors that say why.

Resolution follows Ray: a ``pyarrow.fs.FileSystem`` for the schemes pyarrow knows (local,
``s3://``, ``gs://``, ``hdfs://``), fsspec for any other scheme it has a plugin for. So S3
works with the pyarrow that Data and Train install anyway (no s3fs needed), and reads its
settings from the usual variables: ``AWS_ENDPOINT_URL`` (an S3-compatible server),
``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``/``AWS_SESSION_TOKEN`` or ``AWS_PROFILE``,
``AWS_DEFAULT_REGION``. Train's storage code speaks fsspec's API, so a pyarrow filesystem is
handed to it wrapped (``fsspec_filesystem``).

S3 answers a missing bucket or refused credentials with codes buried in a long message
(``AWS Error NO_SUCH_BUCKET during ListObjectsV2 operation``); ``explain_storage_error``
turns them into errors that name the bucket and the setting to fix.
"""

from __future__ import annotations

import os
import re
from typing import Any

_MISSING_BUCKET = re.compile(
    r"NO_SUCH_BUCKET|NoSuchBucket|specified bucket does not exist|Bucket '[^']*' not found", re.I)
_REFUSED = re.compile(
    r"ACCESS_DENIED|AccessDenied|INVALID_ACCESS_KEY_ID|InvalidAccessKeyId|SIGNATURE_DOES_NOT_MATCH|"
    r"SignatureDoesNotMatch|EXPIRED_TOKEN|ExpiredToken|InvalidToken|HTTP status 403|\bForbidden\b", re.I)
_ARROW_SCHEMES = ("s3", "gs", "gcs", "hdfs", "viewfs")
_CODE = re.compile(r"AWS Error ([A-Z_]+)|\b(InvalidAccessKeyId|SignatureDoesNotMatch|AccessDenied|NoSuchBucket)\b")


def has_scheme(path: str) -> bool:
    return "://" in path and not path.startswith("file://")


def arrow_filesystem(path: str) -> tuple[Any, str]:
    """``(pyarrow filesystem, path inside it)`` for a local path or URI, as Ray resolves it."""
    import pyarrow.fs as pafs

    if path.startswith("file://"):
        path = path[len("file://"):]
    if not has_scheme(path):
        return pafs.LocalFileSystem(), os.path.abspath(os.path.expanduser(path))
    if path.split("://", 1)[0].lower() in _ARROW_SCHEMES:
        return pafs.FileSystem.from_uri(path)  # its errors are about this path: let them through
    try:
        return pafs.FileSystem.from_uri(path)
    except (ValueError, NotImplementedError, OSError):
        pass
    import fsspec  # a scheme pyarrow lacks: an fsspec plugin, seen through pyarrow

    fsspec_fs, inner = fsspec.core.url_to_fs(path)
    return pafs.PyFileSystem(pafs.FSSpecHandler(fsspec_fs)), inner


def fsspec_filesystem(path: str, filesystem: Any = None) -> tuple[Any, str]:
    """``(fsspec filesystem, path inside it)``: Train's view of a storage path.

    ``filesystem`` (``RunConfig.storage_filesystem``) may be a ``pyarrow.fs.FileSystem``
    (Ray's type) or an fsspec one; ``path`` is then a path inside it (a scheme is dropped)."""
    from fsspec.implementations.local import LocalFileSystem

    if filesystem is not None:
        inner = path.split("://", 1)[1] if has_scheme(path) else path
        return as_fsspec(filesystem), inner.rstrip("/") or "/"
    if not has_scheme(path):
        if path.startswith("file://"):
            path = path[len("file://"):]
        return LocalFileSystem(), os.path.abspath(os.path.expanduser(path))
    fs, inner = arrow_filesystem(path)
    return as_fsspec(fs), inner


def as_fsspec(filesystem: Any) -> Any:
    """An fsspec filesystem for ``filesystem`` (pyarrow ones are wrapped, local ones unwrapped)."""
    import pyarrow.fs as pafs
    from fsspec.implementations.arrow import ArrowFSWrapper
    from fsspec.implementations.local import LocalFileSystem

    if isinstance(filesystem, pafs.LocalFileSystem):
        return LocalFileSystem()
    if isinstance(filesystem, pafs.FileSystem):
        return ArrowFSWrapper(filesystem)
    return filesystem


def uri_scheme(filesystem: Any) -> str:
    """``"s3"``, ``"gs"``, ``"file"``, ...: the scheme a URI of a path on ``filesystem`` uses."""
    from fsspec.implementations.arrow import ArrowFSWrapper

    if isinstance(filesystem, ArrowFSWrapper):
        name = filesystem.fs.type_name
        return {"gcs": "gs", "local": "file"}.get(name, name)
    protocol = getattr(filesystem, "protocol", "file")
    protocol = protocol[0] if isinstance(protocol, (tuple, list)) else protocol
    return {"s3a": "s3", "gcs": "gs", "local": "file"}.get(protocol, protocol)


def bucket_of(uri: str) -> str:
    """``"bucket"`` of ``s3://bucket/key`` (or of ``bucket/key`` on an S3 filesystem)."""
    rest = uri.split("://", 1)[1] if "://" in uri else uri
    return rest.lstrip("/").split("/", 1)[0]


def explain_storage_error(uri: str, error: BaseException, doing: str, filesystem_arg: str) -> OSError | None:
    """A clear error for an S3 failure on ``uri`` (None when it is not one this explains).

    ``doing``: what was being done ("writing checkpoints to"); ``filesystem_arg``: the argument
    that takes an explicit filesystem (``storage_filesystem`` / ``filesystem``)."""
    text = str(error)
    if not (uri.startswith(("s3://", "s3a://")) or "AWS Error" in text):
        return None
    bucket = bucket_of(uri)
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    where = f" on the S3 server at {endpoint} (AWS_ENDPOINT_URL)" if endpoint else ""
    found = _CODE.search(text)
    code = (found.group(1) or found.group(2)) if found else ""
    if _MISSING_BUCKET.search(text):
        return FileNotFoundError(
            f"S3 bucket {bucket!r} does not exist{where}, so {doing} {uri} failed. Create the bucket "
            f"(e.g. `aws s3 mb s3://{bucket}`) or fix the path; a bucket on another S3-compatible "
            "server needs AWS_ENDPOINT_URL set to that server.")
    if _REFUSED.search(text):
        return PermissionError(
            f"S3 refused the credentials for bucket {bucket!r}{where} ({code or 'access denied'}), so "
            f"{doing} {uri} failed. Set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (plus "
            "AWS_SESSION_TOKEN for temporary keys), or AWS_PROFILE, to credentials that may use the "
            "bucket — in the driver's environment and on every node (raylite start inherits it) — "
            f"or pass {filesystem_arg}=pyarrow.fs.S3FileSystem(access_key=..., secret_key=...).")
    if not any(os.environ.get(v) for v in ("AWS_ACCESS_KEY_ID", "AWS_PROFILE", "AWS_WEB_IDENTITY_TOKEN_FILE")) \
            and ("HTTP status 500" in text or "INTERNAL_FAILURE" in text or "NETWORK_CONNECTION" in text):
        return PermissionError(
            f"{doing[:1].upper()}{doing[1:]} {uri} failed ({code or 'no answer'}) and no S3 credentials "
            "are set: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE), and "
            f"AWS_ENDPOINT_URL for an S3-compatible server. S3 said: {text[:300]}")
    return None
