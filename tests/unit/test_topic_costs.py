"""Each topic's last hour of remote-tier cost in a proxy (tiering/topic_costs.py) over a real store
and metadata store, as the metrics, the status page and ``describe --cost`` show it: the same
figures in each, the topics past ``proxy.metrics.topic.label.max`` summed under ``other``, and
names on the page as text. The live proxy: tests/integration/test_cost_per_topic.py."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from protocol.apis import DESCRIBE_LOG_DIRS, LIST_OFFSETS
from protocol.message_codec import codec
from proxy.describe import _remote_log_dir, format_costs
from proxy.filters.metrics import _cost_metrics
from proxy.status import cost_rows
from proxy.status_page import StatusSnapshot, cost_cells, render
from tests.unit.test_describe_errors import _Answers
from tests.unit.test_status_page import HOSTILE, _parsed
from tests.unit.test_storage_local import segment_data
from tiering.cost import GB, OTHER, TAG_TOPIC_COST, Prices, TopicLabels, money
from tiering.metadata.journal_store import FileMetadataStore
from tiering.model import (
    IndexType,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from tiering.storage.local_folder import LocalFolderStorage
from tiering.topic_costs import TopicCosts

TOPICS = ["busy", "quiet", "late"]


def _tier(store: LocalFolderStorage, metadata: FileMetadataStore, topic: str) -> RemoteLogSegmentMetadata:
    tp = TopicIdPartition(uuid.uuid5(uuid.NAMESPACE_DNS, topic), topic, 0)
    segment = RemoteLogSegmentMetadata(RemoteLogSegmentId.generate(tp), 0, 9, 0, 1, 0, 1024, ((0, 0),))
    metadata.add_remote_log_segment_metadata(segment)
    custom = store.copy_log_segment_data(segment, segment_data())
    metadata.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(
        segment.segment_id, 1, RemoteLogSegmentState.COPY_SEGMENT_FINISHED, 1, custom))
    return dataclasses.replace(segment, custom_metadata=custom)


@pytest.fixture
def costs(tmp_path: Path) -> Iterator[TopicCosts]:
    store = LocalFolderStorage(tmp_path / "remote")
    with FileMetadataStore(tmp_path / "metadata") as metadata:
        busy = _tier(store, metadata, "busy")
        _tier(store, metadata, "quiet")
        _tier(store, metadata, "late")
        for _ in range(3):
            store.fetch_log_segment(busy, 0)
        store.fetch_index(busy, IndexType.OFFSET)
        store.write_object("manifest-of-nothing", b"x")  # no topic
        yield TopicCosts.from_config(store.requests, metadata, {"remote.log.storage.price.get.per.1000": "4",
                                                                "remote.log.storage.price.storage.gb.month": "730"})


def test_each_topic_is_priced_from_its_own_requests_and_bytes(costs: TopicCosts) -> None:
    table = {c.topic: c for c in costs.table()}
    assert list(table) == TOPICS  # in the order they first sent a request
    busy, quiet = table["busy"], table["quiet"]
    assert busy.counts["GET"] == 4 and "GET" not in quiet.counts
    assert busy.counts["PUT"] == quiet.counts["PUT"] == 6
    assert busy.hour.requests == pytest.approx((4 * 4 + 6 * 0.005) / 1000)
    assert quiet.hour.requests == pytest.approx(6 * 0.005 / 1000)
    # Stored: the segment's data (in the clear in a local folder), an hour at 730 per GB-month.
    assert busy.stored_bytes == 1024 and busy.hour.storage == pytest.approx(1024 / GB)
    assert busy.month.total == pytest.approx(busy.hour.total * 730)
    assert 0 < costs.window_s() <= 3600


def test_the_metrics_show_the_figures_with_at_most_the_cap_of_topic_labels(costs: TopicCosts) -> None:
    families = {f.name: f for f in _cost_metrics(costs.requests, costs, TopicLabels(2))}
    requests = {(s.labels["topic"], s.labels["kind"]): s.value for s in families["tiered_proxy_remote_topic_requests"].samples
                if s.name.endswith("_total")}
    assert requests[("busy", "GET")] == 4 and requests[("quiet", "PUT")] == 6
    assert {topic for topic, _ in requests} == {"busy", "quiet", OTHER}  # "late" came third: other
    assert requests[(OTHER, "PUT")] == 6
    cost = {(s.labels["topic"], s.labels["window"], s.labels["part"]): s.value
            for s in families["tiered_proxy_remote_topic_cost"].samples}
    table = {c.topic: c for c in costs.table()}
    assert cost[("busy", "hour", "requests")] == table["busy"].hour.requests
    assert cost[("busy", "month", "storage")] == pytest.approx(table["busy"].month.storage)
    assert cost[(OTHER, "hour", "storage")] == table["late"].hour.storage
    assert {s.labels["currency"] for s in families["tiered_proxy_remote_topic_cost"].samples} == {"USD"}
    assert families["tiered_proxy_remote_topics_in_other"].samples[0].value == 1
    written = {s.labels["topic"]: s.value for s in families["tiered_proxy_remote_topic_bytes"].samples
               if s.labels["direction"] == "written" and s.name.endswith("_total")}
    assert written["busy"] == written["quiet"] > 0


def test_the_page_and_describe_print_the_same_figures(costs: TopicCosts) -> None:
    rows = cost_rows(costs.table(), TopicLabels(2))
    assert [r.topic for r in rows] == ["busy", "quiet", OTHER]  # costliest first, other last
    page = render(StatusSnapshot(0.0, "p:1", 1, None, [], True, costs=rows, prices=costs.prices,
                                 cost_window_s=costs.window_s()))
    section = page[page.index('<section id="costs">'):]
    assert "Remote tier cost per topic (USD)" in section and "the last hour x 730" in section
    busy = next(r for r in rows if r.topic == "busy")
    cells = "".join(f'<td class="num {cls}">{text}</td>' for cls, text in cost_cells(busy))
    assert f'<tr class="cost" data-topic="busy"><td class="topic">busy</td>{cells}</tr>' in section
    table = format_costs(rows).splitlines()
    assert table[0].split() == ["TOPIC", "GET", "PUT", "DELETE", "LIST", "BYTES-READ", "BYTES-WRITTEN",
                                "STORED-BYTES", "REQUESTS", "TRANSFER", "STORAGE", "HOUR", "MONTH(x730)"]
    assert table[1].split() == ["busy", *(text for _, text in cost_cells(busy))]
    assert money(busy.hour.total) in table[1]


def test_hostile_names_in_the_cost_table_are_text(costs: TopicCosts) -> None:
    rows = [dataclasses.replace(costs.table()[0], topic=name) for name in HOSTILE]
    page = render(StatusSnapshot(0.0, "p:1", 1, None, [], True, costs=rows, prices=Prices(currency="EUR")))
    assert "<script" not in page and "<img" not in page
    parsed = _parsed(page)
    assert sorted(parsed.topic_cells) == sorted(HOSTILE) and set(parsed.data_topics) == set(HOSTILE)


def test_a_topics_hour_reaches_describe_through_the_remote_log_dir(costs: TopicCosts) -> None:
    log_dir = {"error_code": 0, "log_dir": "remote:file:///r", "total_bytes": 0, "usable_bytes": -1,
               "is_cordoned": False, "topics": [
                   {"name": t, "partitions": [], "_unknown_tags": costs.tags(t)} for t in (*TOPICS, "never")]}
    response = codec("DescribeLogDirsResponse", 4)
    wire = response.encode({"throttle_time_ms": 0, "error_code": 0, "results": [log_dir]})
    client = _Answers({DESCRIBE_LOG_DIRS: response.decode(wire)}, {LIST_OFFSETS: (1, 10), DESCRIBE_LOG_DIRS: (1, 4)})
    found: dict = {}
    _remote_log_dir(client, 1, "proxy:1", found)  # type: ignore[arg-type]
    for sent in costs.table():
        got = found[sent.topic]
        assert (got.counts, got.stored_bytes, got.hour, got.currency) == (
            {k: sent.counts.get(k, 0) for k in got.counts}, sent.stored_bytes, sent.hour, "USD")
    assert found["never"].hour.total == 0 and found["never"].stored_bytes == 0
    assert set(costs.tags("busy")) == {TAG_TOPIC_COST}
