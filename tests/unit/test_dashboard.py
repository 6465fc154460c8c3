"""The Grafana dashboard (compose/grafana/dashboards/tiered-proxy.json) asks only for metrics the
proxy exports, grouped by labels they carry. The exported names come from the real collectors
(proxy/filters/metrics.py over a real tiering service and tiered-reads filter, tiering's own
counters, prometheus_client's process collector), not from a list: a renamed metric breaks this
test, not an operator's dashboard."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from proxy.byte_budget import ByteBudget
from proxy.chain import CoreMetrics
from proxy.filters.metrics import PrometheusMetrics
from proxy.filters.tiered_reads import TieredReads
from tiering.config import TopicTiering
from tiering.copy.copier import PartitionCopier
from tiering.model import TopicIdPartition
from tiering.service import TieringService

DASHBOARD = Path(__file__).resolve().parents[2] / "compose" / "grafana" / "dashboards" / "tiered-proxy.json"
# How prometheus_client exposes each family type's samples (counters gain _total, histograms
# _bucket/_sum/_count; _created where it keeps creation times).
SUFFIXES = {"counter": ("_total", "_created"), "gauge": ("",), "histogram": ("_bucket", "_sum", "_count", "_created"),
            "summary": ("", "_sum", "_count", "_created"), "info": ("_info",), "untyped": ("",)}
PROMQL_WORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool",
                "offset", "inf", "nan"}


@pytest.fixture
def exported(tmp_path: Path) -> Iterator[dict[str, set[str]]]:
    """Every sample name the proxy's metrics endpoint can expose -> the label names seen on it."""
    tiering = TieringService.from_properties("127.0.0.1:9", {"proxy.data.dir": str(tmp_path)})
    assert tiering is not None
    reads = TieredReads(tiering, {})
    try:
        # One of every counter source, so that labelled families have samples to show their labels.
        core = CoreMetrics()
        core.budgets += [ByteBudget(1 << 20, "proxy.response.buffer.max.bytes"), reads.buffer]
        core.outcomes[(1, "rewritten")] += 1
        reads.by_topic.add("t", requests=1, bytes=10, errors=1)
        tiering.manager.metrics.add("t", copied_bytes=10, copy_requests=1, copy_errors=1, deleted_segments=1)
        tiering.storage.requests.sent("GET")
        tiering.storage.requests.failed("GET")
        manager = tiering.manager  # a copier, for the per-topic lag and size gauges
        tp = TopicIdPartition(uuid.uuid4(), "t", 0)
        manager.copiers[tp] = PartitionCopier(
            tp, 1, TopicTiering.resolve(manager.config, {}), rlmm=tiering.metadata, rsm=tiering.storage,
            spool_dir=tmp_path / "spool", metrics=manager.metrics, gaps=manager.gaps, fetch_max_bytes=1 << 20,
            backoff_max_ms=1000)
        metrics = PrometheusMetrics(("127.0.0.1", 0), tiering, reads, reads.reader)
        metrics.register(core)
        metrics.observe(1, "rewritten", 0.01)
        names: dict[str, set[str]] = {}
        for family in metrics.registry.collect():
            for suffix in SUFFIXES[family.type]:
                names.setdefault(family.name + suffix, set())
            for sample in family.samples:
                names.setdefault(sample.name, set()).update(sample.labels)
        yield names
    finally:
        reads.close()
        tiering.stop()


def _panels(dashboard: dict) -> Iterator[dict]:
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])  # collapsed rows hold theirs


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: label matchers, range selectors, strings
    and grouping clauses removed, then every identifier that is not a function or a keyword."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    text = re.sub(r"\{[^}]*\}", "", text)
    text = re.sub(r"\[[^\]]*\]", "", text)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    found = set()
    # Not inside a number or a duration (0.99, 5m).
    for match in re.finditer(r"(?<![A-Za-z0-9_:.])[A-Za-z_:][A-Za-z0-9_:]*", text):
        word, rest = match.group(), text[match.end():].lstrip()
        if rest.startswith("(") or word.lower() in PROMQL_WORDS:
            continue
        found.add(word)
    return found


def grouping_labels(expr: str) -> set[str]:
    return {label.strip() for group in re.findall(r"\b(?:by|without)\s*\(([^)]*)\)", expr)
            for label in group.split(",") if label.strip()}


def test_metric_names_are_found_in_promql() -> None:
    expr = ('histogram_quantile(0.99, sum by (le, api) (rate(tiered_proxy_request_latency_seconds_bucket'
            '{job=~"$job", api!="Fetch"}[$__rate_interval]))) - on (x) group_left foo:bar offset 5m')
    assert metric_names(expr) == {"tiered_proxy_request_latency_seconds_bucket", "foo:bar"}
    assert grouping_labels(expr) == {"le", "api"}


def test_every_panel_asks_for_exported_metrics(exported: dict[str, set[str]]) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    checked = 0
    for panel in _panels(dashboard):
        if panel["type"] in ("row", "text"):
            continue
        assert panel.get("targets"), f"panel {panel['title']!r} has no query"
        for target in panel["targets"]:
            names = metric_names(target["expr"])
            assert names, (panel["title"], target["expr"])
            for name in names:
                assert name in exported, f"panel {panel['title']!r} asks for {name}, which the proxy does not export"
                checked += 1
            # Grouping by a label the metric does not carry yields one unlabelled series, silently.
            carried = set.union(*(exported[n] for n in names)) | {"le", "job", "instance"}
            assert grouping_labels(target["expr"]) <= carried, (panel["title"], target["expr"], carried)
    assert checked >= 15
    for variable in dashboard["templating"]["list"]:
        (name,) = re.findall(r"label_values\((\w+),", variable["definition"])
        assert name in exported
    # What the issue asked the dashboard for is there.
    wanted = {"kafka_server_brokertopicmetrics_remotecopylagbytes", "kafka_server_brokertopicmetrics_remotefetchbytespersec_total",
              "tiered_proxy_bytes_out_total", "kafka_server_brokertopicmetrics_remotecopybytespersec_total",
              "tiered_proxy_remote_storage_requests_total", "tiered_proxy_remote_storage_request_failures_total",
              "tiered_proxy_buffered_bytes", "process_cpu_seconds_total", "process_resident_memory_bytes"}
    asked = {n for p in _panels(dashboard) for t in p.get("targets", []) for n in metric_names(t["expr"])}
    assert wanted <= asked, wanted - asked


def test_panels_use_the_provisioned_datasource_and_do_not_overlap() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    cells: set[tuple[int, int]] = set()
    for panel in _panels(dashboard):
        if "targets" in panel:
            assert panel["datasource"] == {"type": "prometheus", "uid": "prometheus"}, panel["title"]
        pos = panel["gridPos"]
        assert pos["x"] + pos["w"] <= 24
        mine = {(x, y) for x in range(pos["x"], pos["x"] + pos["w"]) for y in range(pos["y"], pos["y"] + pos["h"])}
        assert not mine & cells, f"panel {panel['title']!r} overlaps another"
        cells |= mine
    ids = [p["id"] for p in _panels(dashboard)]
    assert len(ids) == len(set(ids))
