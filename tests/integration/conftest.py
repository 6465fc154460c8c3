from __future__ import annotations

from collections.abc import Iterator

import pytest

from proxy.embedded_broker import EmbeddedBroker, start_broker
from tests.history import History, tiered_history
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
def history_noida(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    """The noida-db that holds the tiered history (see tests/history.py), shared by the read tests."""
    broker = start_broker("noida", tmp_path_factory.mktemp("history-noida"))
    yield broker
    broker.stop()


@pytest.fixture(scope="session")
def history(history_noida: EmbeddedBroker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[History]:
    with tiered_history(history_noida, tmp_path_factory.mktemp("tiered-history")) as built:
        yield built
