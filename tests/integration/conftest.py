from __future__ import annotations

from collections.abc import Iterator

import pytest

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
