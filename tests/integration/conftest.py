from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.history import History, tiered_history
from tests.kafka_cluster import start_single
from tests.proxy_process import ProxyProcess, start_proxy


@pytest.fixture(scope="session")
def _proxies(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, ProxyProcess]]:
    started: dict[str, ProxyProcess] = {}
    yield started
    for proxy in started.values():
        proxy.stop()


@pytest.fixture
def proxy(upstream, _proxies: dict[str, ProxyProcess], tmp_path_factory: pytest.TempPathFactory) -> ProxyProcess:
    """A `tiered-proxy serve` process in front of ``upstream``, shared by the session's tests."""
    key = upstream.bootstrap
    running = _proxies.get(key)
    if running is None or running.process.poll() is not None:
        running = start_proxy(upstream.bootstrap, tmp_path_factory.mktemp(f"proxy-{upstream.kind}"))
        _proxies[key] = running
    return running


@pytest.fixture(scope="session")
def history44(tmp_path_factory: pytest.TempPathFactory) -> Iterator[History]:
    """The tiered history (tests/history.py) on an Apache Kafka 4.4 of its own, shared by the read
    tests (built on the session's shared broker after the other families had used it, its
    read-back fell short of what was produced: kept apart until that is understood)."""
    broker = start_single(tmp_path_factory.mktemp("history-kafka"))
    try:
        with tiered_history(broker, tmp_path_factory.mktemp("tiered-history")) as built:
            yield built
    finally:
        broker.stop()


@pytest.fixture(scope="session")
def history39(kafka39, tmp_path_factory: pytest.TempPathFactory) -> Iterator[History]:
    """The same history on Apache Kafka 3.9, for the tiering core's read tests
    (tests/integration/test_tiered_reads.py runs on both)."""
    with tiered_history(kafka39, tmp_path_factory.mktemp("tiered-history-39")) as built:
        yield built


@pytest.fixture(scope="session")
def history(history44: History) -> History:
    """The tiered history on the reference broker, Apache Kafka 4.4."""
    return history44
