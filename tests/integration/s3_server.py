"""An S3 endpoint for tests: moto's real HTTP server on a loopback port.

Import the fixture into a test module (``from tests.integration.s3_server import s3_endpoint``);
buckets live for the whole session, so tests use buckets of their own (:func:`new_bucket`).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import botocore.config
import pytest
from moto.server import ThreadedMotoServer

# moto accepts any credentials; passing them to each client keeps the process environment alone.
DUMMY_CREDENTIALS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}
REGION = "us-east-1"


class MotoS3:
    """A moto server that can be stopped and started again on the same port (its stored objects
    live in the process, so they survive a restart)."""

    def __init__(self, port: int = 0) -> None:
        self.port = port
        self._server: ThreadedMotoServer | None = None

    def start(self) -> None:
        # Werkzeug logs every request to stderr; keep test output readable.
        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
        server.start()
        # Port 0 lets the kernel pick a free port with no race; pin it for restarts.
        self.port = server.get_host_and_port()[1]
        self._server = server

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()  # closes the listening socket too: new connections are refused
            self._server = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def s3_client(endpoint: str) -> Any:
    """A plain boto3 client for test setup and inspection (no retries: failures should show)."""
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name=REGION,
        config=botocore.config.Config(
            s3={"addressing_style": "path"}, retries={"mode": "standard", "total_max_attempts": 1}
        ),
        **DUMMY_CREDENTIALS,
    )


def new_bucket(endpoint: str) -> str:
    name = f"tier-{uuid.uuid4().hex[:12]}"
    s3_client(endpoint).create_bucket(Bucket=name)
    return name


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    server = MotoS3()
    server.start()
    yield server.endpoint
    server.stop()
