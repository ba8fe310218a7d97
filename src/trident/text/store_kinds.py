"""What kind of object-store failure an error is (a key of EXIT_CODES), the StoreError it becomes,
store_operation (a block of store calls whose failure is raised as one), and fsspec's event loop told
to drop the tracebacks of requests a store cut off: below storage.py, which uses both, and
store_errors.py (bucket checks, URLs on a command line)."""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from trident.text.schemes import is_remote

# sysexits(3) codes: none is used by trident otherwise (0, 1, 2, 3, 4, 75, 130)
EXIT_CODES = {"missing bucket": 66, "unreachable": 69, "failed": 74, "access denied": 77}
_UNREACHABLE = ("EndpointConnectionError", "ConnectTimeoutError", "ConnectionClosedError", "ReadTimeoutError",
                "ClientConnectorError", "ServerDisconnectedError", "ClientOSError", "ProxyConnectionError",
                "ServerTimeoutError")
_DENIED = ("NoCredentialsError", "PartialCredentialsError", "CredentialRetrievalError")
_HINTS = {"missing bucket": "create the bucket or correct the URL",
          "unreachable": "no answer from the store's endpoint (network, AWS_ENDPOINT_URL or FSSPEC_S3_ENDPOINT_URL)",
          "access denied": "the store refused these credentials (AWS_* variables, ~/.aws): trident lists, reads "
                           "and writes the buckets it is given",
          "failed": "the store failed the request; checkpoint.load=auto resumes from the last complete checkpoint"}


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
    stores = ("botocore.", "aiobotocore.", "aiohttp.", "s3fs.", "gcsfs.", "google.auth.", "google.api_core.")
    return any(isinstance(e, StoreError) or f"{type(e).__module__}.".startswith(stores) for e in _chain(error))


def store_failure_or(error: BaseException, *kinds: type) -> bool:
    """Whether `error` is an object store's failure or one of `kinds` (e.g. OSError: a full disk): what a
    side write or read (a diagnostic dump, a marker, a lock's release) lets pass; anything else is raised."""
    return isinstance(error, kinds) or from_a_store(error)


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
