"""``tiered-proxy describe``'s one-line errors for answers no live broker gives on demand (a
partition's ListOffsets error, a leaderless partition, a failed log dir, a broker too old for
LATEST_TIERED), over canned answers; the live paths are in tests/integration/test_operator_errors.py."""

from __future__ import annotations

from typing import Any

import pytest

from protocol.apis import DESCRIBE_LOG_DIRS, LIST_OFFSETS, METADATA
from proxy.describe import DescribeError, _remote_log_dir, _topics, describe


class _Answers:
    """A BrokerClient stand-in answering each API with a canned body, for the error paths no live
    proxy produces on demand."""

    def __init__(self, answers: dict[int, dict[str, Any]], versions: dict[int, tuple[int, int]]) -> None:
        self.answers, self.versions = answers, versions
        self.brokers = {1: ("127.0.0.1", 1)}

    def supported(self, node_id: int, api_key: int) -> tuple[int, int] | None:
        return self.versions.get(api_key)

    def request(self, node_id: int | None, api_key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        return self.answers[api_key]

    def metadata(self, topics: list[str] | None = None) -> dict[str, Any]:
        return {}  # learns the brokers in the real client; they are fixed here

    def close(self) -> None:
        pass


def test_describe_names_the_api_partition_and_error(monkeypatch: pytest.MonkeyPatch) -> None:
    versions = {METADATA: (0, 12), LIST_OFFSETS: (1, 10), DESCRIBE_LOG_DIRS: (1, 4)}
    log_dirs = {"error_code": 0, "results": [{"error_code": 0, "log_dir": "remote:file:///r", "topics": []}]}
    metadata = {"topics": [{"error_code": 0, "name": "t", "is_internal": False, "partitions": [
        {"error_code": 0, "partition_index": 0, "leader_id": 1}]}]}
    offsets = {"topics": [{"name": "t", "partitions": [{"partition_index": 0, "error_code": 6, "offset": -1}]}]}
    client = _Answers({DESCRIBE_LOG_DIRS: log_dirs, METADATA: metadata, LIST_OFFSETS: offsets}, versions)
    monkeypatch.setattr("proxy.describe.BrokerClient", lambda _bootstrap, security=None: client)
    with pytest.raises(DescribeError, match=r"^ListOffsets EARLIEST \(-2\) for t-0: NOT_LEADER_OR_FOLLOWER$"):
        describe("proxy:1", "t")
    no_leader = {"topics": [{"error_code": 0, "name": "t", "is_internal": False, "partitions": [
        {"error_code": 5, "partition_index": 3, "leader_id": -1}]}]}
    with pytest.raises(DescribeError, match=r"^Metadata for t-3: LEADER_NOT_AVAILABLE$"):
        _topics(_Answers({METADATA: no_leader}, versions), 1, None)  # type: ignore[arg-type]
    failed_dir = {"error_code": 0, "results": [{"error_code": 57, "log_dir": "remote:file:///r", "topics": []}]}
    with pytest.raises(DescribeError, match=r"^DescribeLogDirs remote:file:///r: LOG_DIR_NOT_FOUND$"):
        _remote_log_dir(_Answers({DESCRIBE_LOG_DIRS: failed_dir}, versions), 1, "proxy:1")  # type: ignore[arg-type]
    old_list_offsets = {**versions, LIST_OFFSETS: (0, 8)}  # a broker older than KIP-405's LATEST_TIERED
    with pytest.raises(DescribeError, match="answers as a Kafka broker, not as tiered-proxy"):
        _remote_log_dir(_Answers({DESCRIBE_LOG_DIRS: log_dirs}, old_list_offsets), 1, "b:1")  # type: ignore[arg-type]

