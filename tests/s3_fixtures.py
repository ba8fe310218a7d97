"""A local S3 server for the object-storage tests: moto's server mode on a free 127.0.0.1 port,
started once per test process and stopped at its end, with the environment every rank inherits
(credentials, endpoint) pointing at it."""
from __future__ import annotations

import logging
import os
from contextlib import contextmanager

from trident.train.launch import free_port

BUCKET = "trident-test"
_ENV = {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_DEFAULT_REGION": "us-east-1"}


class LocalS3:
    """moto's S3 server in a thread; `url(name)` is a fresh prefix in its bucket."""

    def __init__(self) -> None:
        from moto.server import ThreadedMotoServer

        self.port = free_port()
        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
        self.saved = {key: os.environ.get(key) for key in [*_ENV, "AWS_ENDPOINT_URL", "FSSPEC_S3_ENDPOINT_URL"]}

    def start(self) -> "LocalS3":
        import fsspec
        import s3fs

        logging.getLogger("werkzeug").setLevel(logging.WARNING)  # not a line per request
        self.server.start()
        endpoint = f"http://127.0.0.1:{self.port}"
        os.environ.update(_ENV, AWS_ENDPOINT_URL=endpoint, FSSPEC_S3_ENDPOINT_URL=endpoint)
        fsspec.config.conf["s3"] = {"endpoint_url": endpoint}  # this process read the variables at import
        s3fs.S3FileSystem.clear_instance_cache()
        self.fs = fsspec.filesystem("s3")
        self.fs.mkdir(BUCKET)
        return self

    def pause(self) -> None:
        """Stop answering (the store goes away); the objects stay, in this process's moto backend."""
        self.server.stop()

    def restart(self) -> None:
        """Answer again on the same port, with the objects it held (the store is back)."""
        from moto.server import ThreadedMotoServer

        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
        self.server.start()

    @contextmanager
    def refusing_credentials(self):
        """For the block, every request is checked against moto's IAM, which knows no keys: the store
        refuses the credentials (403 InvalidAccessKeyId), as S3 refuses wrong ones."""
        from moto import settings

        saved, settings.INITIAL_NO_AUTH_ACTION_COUNT = settings.INITIAL_NO_AUTH_ACTION_COUNT, 0
        try:
            yield
        finally:
            settings.INITIAL_NO_AUTH_ACTION_COUNT = saved

    def url(self, name: str) -> str:
        return f"s3://{BUCKET}/{name}"

    def stop(self) -> None:
        import fsspec

        self.server.stop()
        fsspec.config.conf.pop("s3", None)
        for key, value in self.saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
