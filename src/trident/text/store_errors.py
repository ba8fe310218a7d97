"""Object-store failures as one line: which URL, which operation, what went wrong, and an exit code
fixed per kind of failure (docs/bad-input.md#object-stores).

`store_operation(url, what)` wraps the store calls of one operation (a checkpoint save, a metrics
upload, a data read) and turns a failure of the store itself into a StoreError; `check_buckets`
looks at every bucket a command names before it does any work; `store_error` classifies an error met
anywhere else. A missing object is not a store failure: callers report those themselves.
"""
from __future__ import annotations

import re
from typing import Iterable

from trident.text.storage import is_remote, location, protocol
from trident.text.store_kinds import (  # noqa: F401 (public here too)
    EXIT_CODES, StoreError, failure_kind, from_a_store, store_error, store_failure_or, store_operation)

BUCKET_PROTOCOLS = ("s3", "s3a", "gs", "gcs")  # stores whose first path part is a bucket that must exist
_URL = re.compile(r"\b[a-z][a-z0-9+]*://[^\s,\]\['\"]+")


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
