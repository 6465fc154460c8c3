"""Session-scoped fixtures of real Apache Kafka clusters (tests/kafka_cluster.py), each started on first
use and stopped at the end of the session. Registered by ``pytest_plugins`` in tests/conftest.py.

The first use of a Kafka version fetches its jars with Maven into ~/.cache/tiered-proxy (a one-off
line on stderr says so); a machine without java or mvn fails the fixture with the reason."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import pytest

from tests.kafka_cluster import (
    DEFAULT_VERSION,
    KAFKA_39,
    KafkaCluster,
    kafka_libs,
    start_native_tiered,
    start_secure,
    start_single,
    start_three,
)


def _cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, name: str,
             start: Callable[..., KafkaCluster], version: str) -> Iterator[KafkaCluster]:
    # The one-off "fetching Apache Kafka ..." line goes to the terminal, not into captured output.
    capture = request.config.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
        kafka_libs(version)
    cluster = start(tmp_path_factory.mktemp(name), version=version)
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def kafka(request: pytest.FixtureRequest,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    """Apache Kafka 4.4.0, one combined broker+controller, PLAINTEXT."""
    yield from _cluster(request, tmp_path_factory, f"kafka-{DEFAULT_VERSION}", start_single, DEFAULT_VERSION)


@pytest.fixture(scope="session")
def kafka39(request: pytest.FixtureRequest,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    """Apache Kafka 3.9.x (the newest 3.9 release served), one combined node, PLAINTEXT."""
    yield from _cluster(request, tmp_path_factory, f"kafka-{KAFKA_39}", start_single, KAFKA_39)


@pytest.fixture(scope="session")
def kafka_three(request: pytest.FixtureRequest,
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    """Apache Kafka 4.4.0, three combined broker+controller nodes (ids 1-3), replication factor 3,
    min.insync.replicas 2; ``stop_node``/``start_node`` take a node id."""
    yield from _cluster(request, tmp_path_factory, "kafka-three", start_three, DEFAULT_VERSION)


@pytest.fixture(scope="session")
def kafka_secure(request: pytest.FixtureRequest,
                 tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    """Apache Kafka 4.4.0 with SASL_PLAINTEXT (``port``), SASL_SSL and SSL listeners, SCRAM users
    ``admin`` (super user), ``alice`` and ``mallory`` (passwords in ``.users``), StandardAuthorizer."""
    yield from _cluster(request, tmp_path_factory, "kafka-secure", start_secure, DEFAULT_VERSION)


@pytest.fixture(scope="session")
def kafka_native_tiered(request: pytest.FixtureRequest,
                        tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    """Apache Kafka 4.4.0 with its own tiered storage on (LocalTieredStorage in ``remote_storage_dir``)."""
    yield from _cluster(request, tmp_path_factory, "kafka-native-tiered", start_native_tiered,
                        DEFAULT_VERSION)


@pytest.fixture(scope="session")
def kafka39_native_tiered(request: pytest.FixtureRequest,
                          tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    """Apache Kafka 3.9.x with its own tiered storage on (LocalTieredStorage in ``remote_storage_dir``)."""
    yield from _cluster(request, tmp_path_factory, f"kafka-{KAFKA_39}-native-tiered", start_native_tiered, KAFKA_39)
