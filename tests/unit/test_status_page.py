"""The status page (proxy/status_page.py) from hand-made snapshots: hostile names come out as
text, never markup; the bar draws the ranges it is given; the recent-activity ring and the
listener's paths; and the tiers view (tiering/status.py) answers Rx as ListOffsets EARLIEST does.
The page of a running proxy in a real browser: tests/integration/test_status_page.py."""

from __future__ import annotations

import io
import uuid
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from types import SimpleNamespace

from proxy.chain import BrokerSeen
from proxy.filters.metrics import listener_app
from proxy.status import ActivityRing
from proxy.status_page import (
    ArchiveRow,
    Bucket,
    BudgetState,
    StatusSnapshot,
    TierRequests,
    format_bytes,
    partition_bar,
    render,
    sparkline,
)
from tiering.model import TopicIdPartition
from tiering.read.reader import RemoteReader
from tiering.status import FROM_COPIER, PartitionTiers, tiers_view
from tiering.topic_owner import TieredBy

HOSTILE = ["<script>alert(1)</script>", "a\"b'c&d", "</td></tr><img src=x onerror=alert(1)>", "&amp;"]


class _Page(HTMLParser):
    """Every start tag, and the text of each ``td.topic`` and the ``data-topic`` attributes."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.topic_cells: list[str] = []
        self.data_topics: list[str] = []
        self._in_topic = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        attributes = dict(attrs)
        if "data-topic" in attributes:
            self.data_topics.append(attributes["data-topic"] or "")
        if tag == "td" and attributes.get("class") == "topic":
            self._in_topic = True
            self.topic_cells.append("")
        for name, _ in attrs:
            assert not name.startswith("on"), f"an event handler attribute {name!r} on <{tag}>"

    def handle_endtag(self, tag: str) -> None:
        if tag == "td":
            self._in_topic = False

    def handle_data(self, data: str) -> None:
        if self._in_topic:
            self.topic_cells[-1] += data


def _row(topic: str = "t", partition: int = 0, **changes: object) -> PartitionTiers:
    values: dict[str, object] = dict(rx=0, ry=599, lx=400, lz=1000, remote_start=0, segments=6, remote_bytes=60_000,
                                     lag=0, state="ENABLED retain 1", copied_here=True, offsets_from=FROM_COPIER)
    values.update(changes)
    return PartitionTiers(topic, partition, **values)  # type: ignore[arg-type]


def _snapshot(**changes: object) -> StatusSnapshot:
    values: dict[str, object] = dict(
        generated_at=1_700_000_000.0, bootstrap="127.0.0.1:19092", workers=1, worker_index=None,
        brokers=[BrokerSeen(1, 19093, True, True, 1_699_999_990.0), BrokerSeen(2, None, False, False, None)],
        tiering=True, partitions=[_row()], topics={"t": "ENABLED retain 1"},
        tier=TierRequests("file:///remote", {"GET": 10, "PUT": 4}, {"GET": 1}, 1000, 2000),
        activity=[Bucket(1_699_999_980.0, 10.0, {"read_bytes": 500, "store_requests": 3, "store_failures": 1}),
                  Bucket(1_699_999_990.0, 5.0, {"read_bytes": 100}, partial=True)],
        budgets=[BudgetState("proxy.response.buffer.max.bytes", 10, 20, 1 << 20, 0)])
    values.update(changes)
    return StatusSnapshot(**values)  # type: ignore[arg-type]


def _parsed(page: str) -> _Page:
    parser = _Page()
    parser.feed(page)
    parser.close()
    return parser


def test_hostile_names_come_out_as_text() -> None:
    rows = [_row(name, p) for p, name in enumerate(HOSTILE)]
    page = render(_snapshot(partitions=rows, topics={name: "ENABLED retain 1" for name in HOSTILE},
                            tier=TierRequests("s3://b/<script>", {"<GET>": 1}, {}, 0, 0),
                            budgets=[BudgetState("<script>x</script>", 0, 0, 0, 0)]))
    assert "<script" not in page and "<img" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "a&quot;b&#x27;c&amp;d" in page  # quotes escaped: safe inside attributes too
    parsed = _parsed(page)
    assert "script" not in parsed.tags and "img" not in parsed.tags
    # The browser reads back exactly the names: in the cells and in the attributes.
    assert sorted(parsed.topic_cells) == sorted(HOSTILE)
    assert set(parsed.data_topics) == set(HOSTILE)


def test_the_page_is_one_document_that_reloads_itself_and_loads_nothing() -> None:
    page = render(_snapshot())
    assert page.startswith("<!DOCTYPE html>")
    assert '<meta http-equiv="refresh" content="5">' in page
    assert "<script" not in page and "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")
    parsed = _parsed(page)
    assert parsed.tags.count("svg") >= 1 + 5 + 3 + 1  # the bar, the legend's swatches, sparklines, the tier's
    assert 'data-node="1" data-state="reachable"' in page and 'data-node="2" data-state="unreachable"' in page
    assert "no listener" in page and "not in the latest metadata" in page
    assert "One proxy process" in page


def test_archived_topics_are_listed_with_where_they_come_from() -> None:
    page = render(_snapshot(archives=[ArchiveRow("orders", "this remote tier", 3, 12, 5 << 20, 9000),
                                      ArchiveRow("<b>x</b>", "read replica of s3://a/t", 1, 1, 10, 5)]))
    assert '<section id="archives">' in page and "<b>x" not in page and "&lt;b&gt;x" in page
    assert "<code>orders</code></th><td>this remote tier</td>" in page and "5.0 MiB" in page
    assert '<section id="archives">' not in render(_snapshot())


def test_a_worker_says_what_its_page_shows() -> None:
    page = render(_snapshot(workers=4, worker_index=2))
    assert "Worker 2 of 4" in page and "what this worker process knows" in page


def test_tiering_off_says_so() -> None:
    page = render(_snapshot(tiering=False, partitions=[], topics={}, tier=None))
    assert "Tiering is off" in page


def _rects(svg: str) -> dict[str, list[tuple[float, float]]]:
    """class -> [(x, width)] of the bar's rectangles (the SVG must be well-formed XML)."""
    root = ET.fromstring(svg)
    found: dict[str, list[tuple[float, float]]] = {}
    for rect in root.iter("{http://www.w3.org/2000/svg}rect"):
        found.setdefault(rect.get("class", ""), []).append((float(rect.get("x", 0)), float(rect.get("width", 0))))
    return found


def test_the_bar_draws_each_range_in_order() -> None:
    row = _row(rx=100, ry=599, remote_start=100, lx=400, lz=1000, lost=((50, 99),), diverged=((600, 649),))
    rects = _rects(partition_bar(row, width=902))
    (remote,), (local,), (overlap,) = rects["remote"], rects["local"], rects["overlap"]
    (lost,), (diverged,) = rects["lost"], rects["diverged"]
    # Offsets 50..999 over 900 pixels (plus a pixel's margin): one offset is 0.947 pixels.
    assert lost[0] < remote[0] < local[0] and abs(local[0] - overlap[0]) < 0.2
    assert abs(overlap[0] + overlap[1] - (remote[0] + remote[1])) < 0.2  # the overlap ends with the remote tier
    assert remote[0] + remote[1] <= diverged[0] + 0.2 and local[0] + local[1] == 902 - 1
    assert abs(lost[1] - 50 * 900 / 950) < 0.2


def test_a_partition_with_nothing_tiered_and_unknown_log_draws_only_the_track() -> None:
    rects = _rects(partition_bar(_row(rx=None, ry=None, remote_start=None, lx=None, lz=None, segments=0)))
    assert set(rects) == {"track"}
    page = render(_snapshot(partitions=[_row(rx=None, ry=None, remote_start=None, lx=None, lz=None)]))
    assert '<td class="num rx">-</td>' in page


def test_sparkline_scales_rates_and_marks_the_partial_bucket() -> None:
    buckets = [Bucket(0, 10, {"x": 100, "e": 10}), Bucket(10, 10, {"x": 50}), Bucket(20, 2, {"x": 20}, partial=True)]
    svg = sparkline(buckets, "x", slots=6, colour="#000", error_key="e", width=60, height=22)
    root = ET.fromstring(svg)
    bars = [r for r in root.iter("{http://www.w3.org/2000/svg}rect")]
    heights = [float(r.get("height", 0)) for r in bars]
    # Rates 10/s, 1/s (errors), 5/s, 10/s: the first and the partial one are the tallest.
    assert heights == [20.0, 2.0, 10.0, 20.0]
    assert bars[-1].get("fill-opacity") == "0.5" and bars[0].get("fill-opacity") is None
    assert float(bars[0].get("x", 0)) == 30.5  # three empty slots on the left: newest at the right


def test_format_bytes() -> None:
    assert [format_bytes(n) for n in (0, 1023, 1024, 5 << 20)] == ["0 B", "1023 B", "1.0 KiB", "5.0 MiB"]


def test_the_ring_keeps_a_window_and_ends_with_a_partial_bucket() -> None:
    count = {"n": 0}

    def read() -> dict[str, int]:
        count["n"] += 7
        return {"reads": count["n"]}

    ring = ActivityRing(read, bucket_s=10, window_s=30)
    for _ in range(6):
        ring.sample()
    buckets = ring.buckets()
    assert len(buckets) == 4  # 30 s of 10 s buckets: 4 samples kept, 3 intervals, plus the partial one
    assert [b.values["reads"] for b in buckets] == [7, 7, 7, 7]
    assert [b.partial for b in buckets] == [False, False, False, True]


def test_the_listener_serves_the_page_at_root_and_metrics_at_metrics() -> None:
    def metrics(environ: dict, start_response) -> list[bytes]:
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"metrics"]

    def call(path: str, page=lambda: "<p>page</p>") -> tuple[str, dict[str, str], bytes]:
        seen: dict[str, object] = {}

        def start_response(status: str, headers: list[tuple[str, str]]) -> None:
            seen["status"], seen["headers"] = status, dict(headers)

        body = b"".join(listener_app(metrics, page)({"PATH_INFO": path, "REQUEST_METHOD": "GET",
                                                      "wsgi.errors": io.StringIO()}, start_response))
        return str(seen["status"]), seen["headers"], body  # type: ignore[return-value]

    status, headers, body = call("/")
    assert status == "200 OK" and body == b"<p>page</p>" and headers["Content-Type"].startswith("text/html")
    assert "default-src 'none'" in headers["Content-Security-Policy"]
    assert call("/metrics")[2] == b"metrics"
    assert call("/other")[0].startswith("404")

    def broken() -> str:
        raise RuntimeError("<boom>")

    status, _, body = call("/", broken)
    assert status.startswith("500") and b"RuntimeError" in body and b"boom" not in body
    assert call("/metrics", broken)[2] == b"metrics"  # the page failing never takes the metrics down


def _segment(start: int, end: int, size: int = 100) -> SimpleNamespace:
    return SimpleNamespace(start_offset=start, end_offset=end, segment_size_bytes=size, segment_leader_epochs=[],
                           custom_metadata=None)


def test_tiers_view_answers_rx_as_list_offsets_earliest_does() -> None:
    """EARLIEST answers the remote log start only where it is below the brokers' log start: a
    partition whose remote retention ran ahead of the brokers' shows the brokers' (as describe
    does); the bar still draws where the remote tier starts."""
    topic_id = uuid.uuid4()
    behind, ahead, idle = (TopicIdPartition(topic_id, "t", p) for p in range(3))
    segments = {behind: [_segment(0, 99), _segment(100, 199)], ahead: [_segment(300, 399)], idle: []}
    metadata = SimpleNamespace(
        readable_partitions=lambda: [behind, ahead], copied_segments=lambda tp: segments[tp],
        remote_log_start_offset=lambda tp: 0, data_loss=lambda tp: [(5, 6)] if tp == behind else [],
        divergences=lambda tp: [], topic_tiering_states=dict,
        topic_tiering_state=lambda name: SimpleNamespace(state=SimpleNamespace(name="ENABLED"), deleted=False,
                                                         disable_policy=SimpleNamespace(config_value="retain"),
                                                         tiered_epoch=3))
    copier = SimpleNamespace(tiered_epoch=3, log_start=150, high_watermark=500)
    manager = SimpleNamespace(copiers={behind: copier, ahead: copier, idle: SimpleNamespace(
        tiered_epoch=None, log_start=-1, high_watermark=-1)}, lag=lambda: {behind: 7, ahead: 0, idle: 0},
        brokers_hold=frozenset({"theirs"}), tiered_by=lambda name: TieredBy.BROKERS if name == "theirs" else TieredBy.PROXY)
    service = SimpleNamespace(metadata=metadata, manager=manager)
    asked: list[list[tuple[str, int]]] = []
    brokers = SimpleNamespace(offsets=lambda wanted: asked.append(list(wanted)) or {("t", 2): (40, 41)})
    view = tiers_view(service, RemoteReader(metadata, None), brokers)  # type: ignore[arg-type]
    rows = {r.partition: r for r in view.partitions}
    assert (rows[0].rx, rows[0].ry, rows[0].lx, rows[0].lz, rows[0].segments, rows[0].remote_bytes) == \
        (0, 199, 150, 500, 2, 200)
    assert (rows[0].lag, rows[0].lost_offsets, rows[0].state, rows[0].tiered_by) == (7, 2, "ENABLED retain 3", "proxy")
    assert (rows[1].rx, rows[1].remote_start, rows[1].ry) == (150, 300, 399)  # EARLIEST: the brokers' log start
    # Not readable, its copier not copying: the brokers are asked for its log offsets.
    assert (rows[2].rx, rows[2].ry, rows[2].lx, rows[2].lz, rows[2].offsets_from) == (None, None, 40, 41, "brokers")
    assert asked == [[("t", 2)]]
    # A topic the brokers tier is listed, with no partitions here.
    assert view.topics == {"t": "ENABLED retain 3", "theirs": "ENABLED retain 3"}
    assert view.owners == {"t": "proxy", "theirs": "brokers"}
