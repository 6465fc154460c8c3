"""Session-wide fixtures: real upstream brokers started on free loopback ports, stopped by PID."""

from __future__ import annotations

import logging
import sys
import uuid
from collections.abc import Iterator

import pytest

from proxy.embedded_broker import EmbeddedBroker, start_broker
from tests.integration.s3_server import SeaweedFS

pytest_plugins = ["tests.kafka_fixtures"]


@pytest.fixture(scope="session")
def _brokers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, EmbeddedBroker]]:
    started: dict[str, EmbeddedBroker] = {}
    yield started
    for broker in started.values():
        broker.stop()


def _broker(kind: str, brokers: dict[str, EmbeddedBroker], tmp_path_factory: pytest.TempPathFactory) -> EmbeddedBroker:
    # Started on first use, so a run that needs only one kind starts only that broker.
    if kind not in brokers:
        brokers[kind] = start_broker(kind, tmp_path_factory.mktemp(kind))
    return brokers[kind]


@pytest.fixture(scope="session")
def noida(_brokers, tmp_path_factory) -> EmbeddedBroker:
    return _broker("noida", _brokers, tmp_path_factory)


@pytest.fixture(scope="session")
def tansu(_brokers, tmp_path_factory) -> EmbeddedBroker:
    return _broker("tansu", _brokers, tmp_path_factory)


# The brokers behind the ``upstream`` fixture: Apache Kafka 4.4 (tests/kafka_fixtures.py) is the
# reference; noida-db, the demo's embedded broker, keeps a smoke set. Tansu has its own tests where
# it shows something Kafka does not (tests/UPSTREAMS.md).
UPSTREAMS = ("kafka", "noida")


@pytest.fixture(params=UPSTREAMS)
def upstream(request, _brokers, tmp_path_factory):
    """Each upstream broker in turn (one broker per kind per session)."""
    if request.param == "kafka":
        return request.getfixturevalue("kafka")
    return _broker(request.param, _brokers, tmp_path_factory)


@pytest.fixture
def unique_name() -> str:
    return f"t-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def own_noida(tmp_path_factory) -> Iterator[EmbeddedBroker]:
    """A noida-db for one test module alone. Tests that watch the proxy move a broker's log start
    need one: the session's shared proxies tier every tiered topic on the shared brokers too, and
    would trim it before the test read what the broker holds."""
    broker = start_broker("noida", tmp_path_factory.mktemp("own-noida"))
    yield broker
    broker.stop()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """py4j (the Spark tests') closes its connections from ``__del__`` while the interpreter shuts
    down, logging as it goes; a handler lock held by a thread frozen at exit then hung the test
    process for ever after its last test (seen once in CI). Its logger says nothing from here on."""
    # A level, not ``disabled``: it reaches py4j.clientserver and the other child loggers.
    logging.getLogger("py4j").setLevel(logging.CRITICAL + 1)


# pytest-xdist (two workers, ``--dist loadgroup`` in pyproject.toml): each worker starts its own
# session brokers, so a test file runs on one worker, and the files that read the tiered history
# (tests/history.py, a minute to build) share one group, scheduled first as the longest.
HISTORY_FIXTURES = {"history", "history44", "history39"}
# Session clusters that take 10-30 s to start: the tests that use one form one group, so that it
# starts on one worker only (a group per file started them on both).
SHARED_CLUSTERS = ("kafka_secure", "kafka_three", "kafka_native_tiered", "kafka39_native_tiered")


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook turns the group into the node id
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reads_history: set[str] = set()
    for item in items:
        if not HISTORY_FIXTURES.isdisjoint(getattr(item, "fixturenames", ())):
            reads_history.add(item.nodeid)
        if item.get_closest_marker("xdist_group") is None:
            names = getattr(item, "fixturenames", ())
            cluster = next((name for name in SHARED_CLUSTERS if name in names), None)
            item.add_marker(pytest.mark.xdist_group("history" if item.nodeid in reads_history
                                                    else cluster or item.nodeid.split("::")[0]))
    items.sort(key=lambda item: item.nodeid not in reads_history)


def pytest_sessionstart(session: pytest.Session) -> None:
    """Fetch the jars once, in the process that owns the terminal, before xdist's workers start
    (a worker's stderr is not shown, and its one progress line would be lost)."""
    config = session.config
    if hasattr(config, "workerinput") or not any("integration" in str(arg) for arg in config.args):
        return
    from tests.kafka_cluster import DEFAULT_VERSION, KAFKA_39, kafka_libs
    from tests.maven_jars import JarsUnavailable, spark_kafka_connector

    try:
        for version in (DEFAULT_VERSION, KAFKA_39):
            kafka_libs(version)
        import pyspark

        spark_kafka_connector(pyspark.__version__)
    except (JarsUnavailable, ImportError) as e:  # the fixtures fail with it, test by test
        print(f"cannot fetch the test jars: {e}", file=sys.stderr, flush=True)


@pytest.fixture(scope="session")
def seaweedfs(tmp_path_factory) -> Iterator[SeaweedFS]:
    """SeaweedFS, the S3 server of the tests (tests/integration/s3_server.py), for the session."""
    with SeaweedFS(tmp_path_factory.mktemp("seaweedfs")) as store:
        yield store


@pytest.fixture(scope="session")
def s3_endpoint(seaweedfs) -> str:
    """An S3 endpoint shared by the session's tests: each uses buckets of its own (new_bucket)."""
    return seaweedfs.gateway().endpoint
