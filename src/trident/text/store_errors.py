"""Object-store failures as one line: which URL, which operation, what went wrong, and an exit code
fixed per kind of failure (docs/bad-input.md#object-stores).

`store_operation(url, what)` wraps the store calls of one operation (a checkpoint save, a metrics
upload, a data read) and turns a failure of the store itself into a StoreError; `check_buckets`
looks at every bucket a command names before it does any work; `store_error` classifies an error met
anywhere else. A missing object is not a store failure: callers report those themselves.
"""
from __future__ import annotations

import re
from contextlib import contextmanager
from typing import Iterable, Iterator

from trident.text.storage import is_remote, location, protocol

# sysexits(3) codes: none is used by trident otherwise (0, 1, 2, 3, 4, 75, 130)
EXIT_CODES = {"missing bucket": 66, "unreachable": 69, "failed": 74, "access denied": 77}
BUCKET_PROTOCOLS = ("s3", "s3a", "gs", "gcs")  # stores whose first path part is a bucket that must exist
_UNREACHABLE = ("EndpointConnectionError", "ConnectTimeoutError", "ConnectionClosedError", "ReadTimeoutError",
                "ClientConnectorError", "ServerDisconnectedError", "ClientOSError", "ProxyConnectionError",
                "ServerTimeoutError")
_DENIED = ("NoCredentialsError", "PartialCredentialsError", "CredentialRetrievalError")
_HINTS = {"missing bucket": "create the bucket or correct the URL",
          "unreachable": "no answer from the store's endpoint (network, AWS_ENDPOINT_URL or FSSPEC_S3_ENDPOINT_URL)",
          "access denied": "the store refused these credentials (AWS_* variables, ~/.aws): trident lists, reads "
                           "and writes the buckets it is given",
          "failed": "the store failed the request; checkpoint.load=auto resumes from the last complete checkpoint"}
_URL = re.compile(r"\b[a-z][a-z0-9+]*://[^\s,\]\['\"]+")


class StoreError(RuntimeError):
    """An object store failed an operation: `url`, `operation`, `kind` (a key of EXIT_CODES) and `code`."""

    def __init__(self, url: str, operation: str, kind: str, cause: str) -> None:
        self.url, self.operation, self.kind, self.code = url, operation, kind, EXIT_CODES[kind]
        super().__init__(f"{url}: {operation}: {kind} ({cause}); {_HINTS[kind]}")


def _chain(error: BaseException) -> Iterator[BaseException]:
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        yield error
        error = error.__cause__ or error.__context__


def failure_kind(error: BaseException, bucket_call: bool = False) -> str | None:
    """The kind of store failure `error` is, or None when it is not one (e.g. a missing object;
    with `bucket_call`, the call looked at a bucket itself, so 'not found' means the bucket)."""
    names = [type(e).__name__ for e in _chain(error)]
    text = " ".join(str(e) for e in _chain(error))
    if any(name in _UNREACHABLE for name in names) or isinstance(error, ConnectionError):
        return "unreachable"
    if any(name in _DENIED for name in names) or isinstance(error, PermissionError):
        return "access denied"
    if isinstance(error, FileNotFoundError):
        return "missing bucket" if bucket_call or "NoSuchBucket" in text or "bucket does not exist" in text else None
    if isinstance(error, OSError) or any(type(e).__module__.split(".")[0] in ("botocore", "aiohttp") for e in
                                         _chain(error)):
        return "failed"  # the store answered with an error of its own (5xx, throttling, a broken upload)
    return None


def _cause(error: BaseException) -> str:
    lines = (str(error) or type(error).__name__).strip().splitlines() or [""]
    return f"{type(error).__name__}: {lines[0]}"


def from_a_store(error: BaseException) -> bool:
    """Whether an object-store client raised `error` (or an error in its chain): a StoreError, botocore,
    aiohttp, s3fs, gcsfs."""
    stores = ("botocore", "aiobotocore", "aiohttp", "s3fs", "gcsfs", "google")
    return any(isinstance(e, StoreError) or type(e).__module__.split(".")[0] in stores for e in _chain(error))


def store_error(error: BaseException, url: str, operation: str, bucket_call: bool = False) -> StoreError | None:
    """`error` as a StoreError of `url` and `operation` (itself when it already is one), or None."""
    if isinstance(error, StoreError):
        return error
    kind = failure_kind(error, bucket_call)
    return StoreError(str(url), operation, kind, _cause(error)) if kind else None


@contextmanager
def store_operation(url, operation: str) -> Iterator[None]:
    """Run the block; a failure of the store behind a remote `url` is raised as a StoreError."""
    try:
        yield
    except Exception as error:
        converted = store_error(error, url, operation) if is_remote(url) else None
        if converted is None or converted is error:
            raise
        raise converted from error


_QUIET: list = []  # the fsspec event loop whose handler is installed


def quiet_cut_requests() -> None:
    """A request the store cut off also fails a helper task of aiohttp's that nobody awaits, which asyncio
    prints as a traceback ("Task exception was never retrieved"); the operation that made the request
    reports the failure as its one line, so fsspec's loop drops those (any other error is printed)."""
    from fsspec.asyn import get_loop

    loop = get_loop()
    if loop in _QUIET:
        return

    def handler(loop, context) -> None:
        error = context.get("exception")
        if error is None or not from_a_store(error):
            loop.default_exception_handler(context)

    loop.set_exception_handler(handler)
    _QUIET[:] = [loop]


def urls_in(values: Iterable) -> list[str]:
    """Every remote URL in command-line values (`--out s3://b/run`, `data.paths=[s3://b/x,s3://c/y]`)."""
    found = []
    for value in values:
        items = value if isinstance(value, (list, tuple)) else [value]
        for item in items:
            found += [url for url in _URL.findall(str(item)) if is_remote(url) and url not in found]
    return found


def check_buckets(urls: Iterable[str]) -> None:
    """Before any work: each bucket the URLs name exists and answers these credentials (one request a
    bucket); raises StoreError (missing bucket, access denied, unreachable) for the first that fails."""
    checked = set()
    for url in urls:
        if protocol(url) not in BUCKET_PROTOCOLS:
            continue
        path = location(url)
        bucket = path.path.split("/", 1)[0]
        if (protocol(url), bucket) in checked:
            continue
        checked.add((protocol(url), bucket))
        try:
            path.fs.info(bucket)
        except Exception as error:
            converted = store_error(error, url, f"checking bucket {bucket} before the run", bucket_call=True)
            if converted is None:
                raise
            raise converted from error
