"""The metrics filter: the Prometheus endpoint (``proxy.metrics.listen=HOST:PORT``) with
KIP-405/KIP-930/KIP-963 remote storage metrics under Kafka's names, and the proxy's own. It
declares no API: it observes every request's outcome and latency through the core, and reads the
counters the core, the tiering service and the tiered-reads filter keep anyway.

Kafka's JMX names become Prometheus names the way the common JMX exporter rules spell them:
``kafka.server:type=BrokerTopicMetrics,name=RemoteFetchBytesPerSec,topic=T`` is
``kafka_server_brokertopicmetrics_remotefetchbytespersec_total{topic="T"}`` (meters are counters;
take ``rate()``), gauges keep their name without ``_total``. Values are read from the counters the
proxy keeps anyway when Prometheus scrapes, so the request path pays only for the latency
histogram. The process's CPU seconds and resident memory (``process_*``, prometheus_client's
process collector, registered here as the proxy's registry is not the library's default) tell
workers apart by their endpoint.

The same listener serves the status page at ``/`` (``proxy/status.py`` gathers it,
``proxy/status_page.py`` renders it), built on the listener's own threads; ``/metrics`` serves the
metrics, as Prometheus asks by default. Any other path is a 404.
"""

from __future__ import annotations

import html
import logging
import socket
import threading
from collections.abc import Callable, Iterable, Iterator
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, Histogram, ProcessCollector, make_wsgi_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from protocol.apis import all_apis
from proxy.chain import Core, CoreMetrics, Filter
from proxy.status import RemoteReadCounters, StatusSource
from proxy.status_page import render
from tiering.cost import HOURS_PER_MONTH, Cost, Prices, TopicLabels, topic_label_max_from_config
from tiering.read.reader import RemoteReader
from tiering.service import TieringService
from tiering.status import segments_stored_bytes
from tiering.storage.api import BYTES_READ, BYTES_WRITTEN, KINDS, StorageRequests
from tiering.storage.object_layout import ObjectStorage
from tiering.topic_costs import TopicCosts

log = logging.getLogger(__name__)

TOPIC_METRICS = "kafka_server_brokertopicmetrics_"
# Seconds; proxy answers range from microseconds (local) to the remote read timeout.
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


def _archive_metrics(tiering: TieringService) -> Iterator:
    """The remote tier's own description (manifests written) and the archives read from one."""
    if tiering.manifests is not None:
        counters = tiering.manifests.counters
        yield CounterMetricFamily("tiered_proxy_manifest_writes", "Manifests of the remote tier written or deleted "
                                  "(one PUT or DELETE each)", value=counters.written)
        yield CounterMetricFamily("tiered_proxy_manifest_write_failures", "Manifest writes that failed (retried the "
                                  "next interval)", value=counters.failed)
    if not tiering.archives:
        return
    readings = CounterMetricFamily("tiered_proxy_archive_index_reads", "Readings of an archive's manifests",
                                   labels=["source"])
    failed = CounterMetricFamily("tiered_proxy_archive_index_read_failures", "Readings of an archive's manifests "
                                 "that failed (the last reading is served)", labels=["source"])
    topics = GaugeMetricFamily("tiered_proxy_archived_topics", "Topics served from an archive now", labels=["source"])
    for archive in tiering.archives:
        source = "own" if archive.keeps_data else "read-replica"
        readings.add_metric([source], archive.store.refreshes)
        failed.add_metric([source], archive.store.failures)
        topics.add_metric([source], len(archive.topics()))
    yield from (readings, failed, topics)
    if tiering.read_replica is not None:  # its requests, apart from the remote tier's own
        yield from _storage_request_metrics(tiering.read_replica.replica_of.split("?", 1)[0],
                                            tiering.read_replica.storage.requests)


def _storage_request_metrics(tier: str, counts: StorageRequests) -> Iterator:
    """Requests to the remote tier by kind, what an object store bills (every retry is one more)."""
    requests, failures, read, written = counts.snapshot()
    sent = CounterMetricFamily("tiered_proxy_remote_storage_requests", "Requests sent to the remote tier, by kind "
                               "(GET, PUT, DELETE, LIST), retries included", labels=["tier", "kind"])
    failed = CounterMetricFamily("tiered_proxy_remote_storage_request_failures", "Requests to the remote tier that "
                                 "failed: server errors, throttling, no answer", labels=["tier", "kind"])
    for kind, count in sorted(requests.items()):
        sent.add_metric([tier, kind], count)
        failed.add_metric([tier, kind], failures.get(kind, 0))
    moved = CounterMetricFamily("tiered_proxy_remote_storage_bytes", "Bytes read from and written to the remote "
                                "tier", labels=["tier", "direction"])
    moved.add_metric([tier, "read"], read)
    moved.add_metric([tier, "written"], written)
    yield from (sent, failed, moved)


def _cost_metrics(requests: StorageRequests, costs: TopicCosts, labels: TopicLabels) -> Iterator:
    """Per topic (at most ``proxy.metrics.topic.label.max`` labels, the rest summed under
    ``other``): requests and bytes since start, and the last hour's cost and a month projected."""
    sent = CounterMetricFamily("tiered_proxy_remote_topic_requests", "Requests sent to the remote tier for a topic, "
                               "by kind (GET, PUT, DELETE, LIST), retries included", labels=["topic", "kind"])
    moved = CounterMetricFamily("tiered_proxy_remote_topic_bytes", "Bytes read from and written to the remote tier "
                                "for a topic", labels=["topic", "direction"])
    counted: dict[str, dict[str, int]] = {}
    for topic, counts in requests.by_topic().items():  # labels go to the topics that asked first
        into = counted.setdefault(labels.label(topic), {})
        for key, n in counts.items():
            into[key] = into.get(key, 0) + n
    for label, counts in counted.items():
        for kind in KINDS:
            sent.add_metric([label, kind], counts.get(kind, 0))
        moved.add_metric([label, "read"], counts.get(BYTES_READ, 0))
        moved.add_metric([label, "written"], counts.get(BYTES_WRITTEN, 0))
    currency = costs.prices.currency
    priced = GaugeMetricFamily("tiered_proxy_remote_topic_cost", "A topic's remote-tier cost: its requests and "
                               "bytes in the last hour and one hour of its storage (window=hour), and a month "
                               "projected as that hour x 730 (window=month), in the configured prices' currency",
                               labels=["topic", "window", "part", "currency"])
    hours: dict[str, Cost] = {}
    for c in costs.table():
        label = labels.label(c.topic)
        hours[label] = hours.get(label, Cost()) + c.hour
    for label, hour in hours.items():
        for window, figure in (("hour", hour), ("month", hour.scaled(HOURS_PER_MONTH))):
            for part in ("requests", "transfer", "storage"):
                priced.add_metric([label, window, part, currency], getattr(figure, part))
    window = GaugeMetricFamily("tiered_proxy_remote_cost_window_seconds", "Seconds of requests the last hour's "
                               "costs count (less than 3600 while the process is younger)", value=costs.window_s())
    folded = GaugeMetricFamily("tiered_proxy_remote_topics_in_other", "Topics past proxy.metrics.topic.label.max, "
                               "summed under topic=\"other\"", value=labels.folded)
    yield from (sent, moved, priced, window, folded)


def _object_stores(tiering: TieringService) -> list[ObjectStorage]:
    stores = [tiering.storage] + [a.storage for a in tiering.archives if a.storage is not tiering.storage]
    return [s for s in stores if isinstance(s, ObjectStorage)]


class ProxyCollector(Collector):
    def __init__(self, core: CoreMetrics, tiering: TieringService | None, reads: RemoteReadCounters | None,
                 costs: TopicCosts | None = None, labels: TopicLabels | None = None) -> None:
        self.core = core
        self.tiering = tiering
        self.reads = reads
        self.costs = costs
        self.labels = labels or TopicLabels()

    def collect(self) -> Iterator:
        yield from self._proxy_metrics()
        if self.tiering is not None:
            yield from self._remote_metrics()

    def _proxy_metrics(self) -> Iterator:
        m = self.core
        yield GaugeMetricFamily("tiered_proxy_connections", "Open client connections", value=m.connections_open)
        yield CounterMetricFamily("tiered_proxy_connections", "Client connections accepted", value=m.connections_total)
        yield CounterMetricFamily("tiered_proxy_protocol_errors", "Client connections closed for malformed requests",
                                  value=m.protocol_errors)
        yield CounterMetricFamily("tiered_proxy_upstream_errors", "Client connections closed because of the broker",
                                  value=m.upstream_errors)
        yield CounterMetricFamily("tiered_proxy_bytes_in", "Bytes of client requests", value=m.bytes_in)
        yield CounterMetricFamily("tiered_proxy_bytes_out", "Bytes of responses to clients", value=m.bytes_out)
        requests = CounterMetricFamily("tiered_proxy_requests", "Client requests by API and outcome",
                                       labels=["api", "outcome"])
        names = {key: spec.name for key, spec in all_apis().items()}
        for (api_key, outcome), count in sorted(m.outcomes.items()):
            requests.add_metric([names.get(api_key, str(api_key)), outcome], count)
        yield requests
        held = GaugeMetricFamily("tiered_proxy_buffered_bytes", "Bytes of answers held for clients, by the "
                                 "setting that bounds them", labels=["budget"])
        peak = GaugeMetricFamily("tiered_proxy_buffered_bytes_peak", "Most bytes held at once", labels=["budget"])
        waits = CounterMetricFamily("tiered_proxy_buffer_waits", "Answers that waited for room", labels=["budget"])
        for budget in m.budgets:
            held.add_metric([budget.name], budget.used)
            peak.add_metric([budget.name], budget.peak)
            waits.add_metric([budget.name], budget.waits)
        yield from (held, peak, waits)

    def _remote_metrics(self) -> Iterator:
        tiering = self.tiering
        assert tiering is not None
        reads = self.reads
        fetch = reads.by_topic.snapshot() if reads is not None else {}
        copy = tiering.manager.metrics.by_topic()
        for name, help_text, source, key in (
            ("remotefetchbytespersec", "Bytes read from remote storage", fetch, "bytes"),
            ("remotefetchrequestspersec", "Remote storage read requests", fetch, "requests"),
            ("remotefetcherrorspersec", "Remote storage read errors", fetch, "errors"),
            ("remotecopybytespersec", "Bytes copied to remote storage", copy, "copied_bytes"),
            ("remotecopyrequestspersec", "Remote storage copy requests", copy, "copy_requests"),
            ("remotecopyerrorspersec", "Remote storage copy errors", copy, "copy_errors"),
            ("remotedeleterequestspersec", "Remote segment deletions", copy, "deleted_segments"),
        ):
            family = CounterMetricFamily(TOPIC_METRICS + name, help_text, labels=["topic"])
            for topic, counts in sorted(source.items()):
                family.add_metric([topic], counts.get(key, 0))
            yield family
        lag_bytes = GaugeMetricFamily(TOPIC_METRICS + "remotecopylagbytes",
                                      "Bytes below the last stable offset not yet copied (estimated from the "
                                      "remote segments' bytes per offset)", labels=["topic"])
        lag_segments = GaugeMetricFamily(TOPIC_METRICS + "remotecopylagsegments",
                                         "Segments' worth of data below the last stable offset not yet copied",
                                         labels=["topic"])
        size = GaugeMetricFamily(TOPIC_METRICS + "remotelogsizebytes", "Bytes of copied remote segments",
                                 labels=["topic"])
        for topic, (lag_b, lag_s, size_b) in sorted(tiering.manager.topic_sizes().items()):
            lag_bytes.add_metric([topic], lag_b)
            lag_segments.add_metric([topic], lag_s)
            size.add_metric([topic], size_b)
        stored = GaugeMetricFamily("tiered_proxy_remote_stored_bytes", "Bytes the copied remote segments take in the "
                                   "remote tier (compressed, encrypted, indexes included)", labels=["topic"])
        stored_by_topic: dict[str, int] = {}
        for tp in list(tiering.manager.copiers):
            stored_by_topic[tp.topic] = stored_by_topic.get(tp.topic, 0) + segments_stored_bytes(
                tiering.metadata.copied_segments(tp))
        for topic, stored_b in sorted(stored_by_topic.items()):
            stored.add_metric([topic], stored_b)
        yield from (lag_bytes, lag_segments, size, stored)
        if isinstance(tiering.storage, ObjectStorage):
            yield CounterMetricFamily("tiered_proxy_remote_integrity_failures", "Remote objects refused because "
                                      "they are not what was written (checksum, authentication, key)",
                                      value=sum(s.at_rest.integrity_failures for s in _object_stores(tiering)))
        yield CounterMetricFamily("tiered_proxy_tiering_rounds", "Rounds of the remote log manager finished",
                                  value=tiering.manager.rounds)
        yield GaugeMetricFamily("tiered_proxy_tiering_round_seconds", "Seconds the last finished round took",
                                value=tiering.manager.last_round_s)
        copy_quota = tiering.manager.copy_quota
        yield CounterMetricFamily("tiered_proxy_remote_copy_throttled", "Segment copies held back by the copy quota "
                                  "(remote.log.manager.copy.max.bytes.per.second)", value=copy_quota.throttled)
        yield CounterMetricFamily("tiered_proxy_remote_copy_throttle_seconds",
                                  "Time segment copies waited for the copy quota", value=copy_quota.throttled_s)
        if reads is not None:
            queued, busy, threads = reads.pool_state()
            yield GaugeMetricFamily("kafka_log_remote_remotestoragethreadpool_remotelogreadertaskqueuesize",
                                    "Remote reads waiting for a reader thread", value=queued)
            yield GaugeMetricFamily("kafka_log_remote_remotestoragethreadpool_remotelogreaderavgidlepercent",
                                    "Share of reader threads idle", value=1 - busy / threads if threads else 1)
            yield CounterMetricFamily("tiered_proxy_tiered_storage_not_available",
                                      "Remote reads that failed or timed out (TIERED_STORAGE_NOT_AVAILABLE)",
                                      value=reads.not_available)
            yield CounterMetricFamily("tiered_proxy_remote_fetch_throttled",
                                      "Fetches whose remote reads were left out, over the remote fetch quota "
                                      "(remote.log.manager.fetch.max.bytes.per.second)", value=reads.fetch_quota.throttled)
            yield CounterMetricFamily("tiered_proxy_remote_fetch_throttle_seconds",
                                      "Time remote reads would have had to wait for the remote fetch quota",
                                      value=reads.fetch_quota.throttled_s)
            yield CounterMetricFamily("tiered_proxy_remote_reads_beside_broker",
                                      "Fetch partitions read from the remote tier while the broker was asked, not "
                                      "after it answered (offsets below its log start as last seen or not seen "
                                      "yet, or remote-preferred)", value=reads.read_beside_broker)
            yield CounterMetricFamily("tiered_proxy_remote_read_log_end_questions",
                                      "Questions to the brokers of the log ends of partitions answered from the "
                                      "remote tier (where the Fetch's own answer had none)",
                                      value=reads.log_end_questions)
        yield from _storage_request_metrics(tiering.storage_uri.split("?", 1)[0], tiering.storage.requests)
        if self.costs is not None:
            yield from _cost_metrics(tiering.storage.requests, self.costs, self.labels)
        yield from _archive_metrics(tiering)
        busy, pool = tiering.manager.pool_state()
        yield GaugeMetricFamily("kafka_log_remote_remotelogmanager_remotelogmanagertasksavgidlepercent",
                                "Share of remote log manager threads idle", value=1 - busy / pool if pool else 1)
        totals = tiering.manager.metrics.snapshot()
        yield CounterMetricFamily("tiered_proxy_data_loss_gaps", "Ranges the brokers deleted before they were tiered",
                                  value=totals["data_loss_gaps"])
        yield CounterMetricFamily("tiered_proxy_data_loss_offsets", "Offsets the brokers deleted before they were tiered",
                                  value=totals["data_loss_offsets"])
        yield CounterMetricFamily("tiered_proxy_leader_changes", "Leader changes a copier followed (it checked its "
                                  "partition's leader-epoch lineage again)", value=totals["leader_changes"])
        yield CounterMetricFamily("tiered_proxy_log_divergences", "Remote ranges cut back because the cluster's log "
                                  "replaced them (unclean leader election)", value=totals["divergences"])
        yield CounterMetricFamily("tiered_proxy_diverged_offsets", "Offsets cut back from the remote tier because the "
                                  "cluster's log replaced them", value=totals["diverged_offsets"])
        yield CounterMetricFamily("tiered_proxy_local_log_start_moves", "DeleteRecords sent for local retention",
                                  value=totals["local_log_start_moves"])
        yield CounterMetricFamily("tiered_proxy_delete_records_failures", "DeleteRecords for local retention that "
                                  "failed on the connection (a leader lost mid-request, or brokers that cannot)",
                                  value=totals["delete_records_failures"])
        yield CounterMetricFamily("tiered_proxy_local_retention_off", "Partitions whose local retention was turned "
                                  "off: their brokers refused DeleteRecords every time or do not offer it",
                                  value=totals["local_retention_off"])
        yield CounterMetricFamily("tiered_proxy_copier_fenced", "Copiers stopped because a newer owner fenced their "
                                  "metadata writes (this instance had stalled past its group session)",
                                  value=totals["fenced"])


# The status page forbids everything but its own inline style and the empty icon: nothing it
# prints can run or load anything, whatever a name smuggled in.
_PAGE_HEADERS = [("Content-Type", "text/html; charset=utf-8"), ("Cache-Control", "no-store"),
                 ("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; img-src data:"),
                 ("X-Content-Type-Options", "nosniff"), ("Referrer-Policy", "no-referrer")]

Wsgi = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def listener_app(metrics: Wsgi, page: Callable[[], str]) -> Wsgi:
    """``/``: the status page; ``/metrics``: Prometheus; anything else 404."""

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO") or "/"
        if path == "/metrics":
            return metrics(environ, start_response)
        if path in ("/", "/index.html"):
            try:
                body, status = page().encode(), "200 OK"
            except Exception as exc:  # the page must never take the metrics down with it
                log.exception("status page failed")
                # The kind of failure only: its text may name paths no client should learn (the log has it).
                body = (f"<!DOCTYPE html><title>error</title><p>status page failed ({html.escape(type(exc).__name__)}); "
                        "see the proxy's log").encode()
                status = "500 Internal Server Error"
            start_response(status, [*_PAGE_HEADERS, ("Content-Length", str(len(body)))])
            return [body] if environ.get("REQUEST_METHOD") != "HEAD" else []
        body = b"not found: the status page is at /, the metrics at /metrics\n"
        start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8"),
                                         ("Content-Length", str(len(body)))])
        return [body]

    return app


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True  # a slow scraper never holds the proxy's exit


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Every scrape would be a line on stderr."""


def serve_http(host: str, port: int, app: Wsgi) -> WSGIServer:
    """A threaded WSGI server on ``host:port`` (IPv6 too), answering from its own threads."""
    family = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]
    server_class = type("_FamilyServer", (_Server,), {"address_family": family})
    server = make_server(host, port, app, server_class, handler_class=_QuietHandler)
    threading.Thread(target=server.serve_forever, name="metrics-http", daemon=True).start()
    return server


class PrometheusMetrics(Filter):
    name = "metrics"

    def __init__(self, listen: tuple[str, int], tiering: TieringService | None,
                 reads: RemoteReadCounters | None, reader: RemoteReader | None = None) -> None:
        self.listen = listen
        self.tiering = tiering
        self.reads = reads
        self.reader = reader  # the remote reader ListOffsets answers with, for the status page
        self.registry = CollectorRegistry()
        self.latency = Histogram("tiered_proxy_request_latency_seconds",
                                 "From a request's arrival to its response being written, by API",
                                 ["api"], buckets=LATENCY_BUCKETS, registry=self.registry)
        self._children: dict[int, Any] = {}
        self._names = {key: spec.name for key, spec in all_apis().items()}
        self.server: WSGIServer | None = None
        self.status: StatusSource | None = None
        # Per-topic costs (the prices and the label cap are the configuration's from ``start``),
        # and the topics with labels of their own, shared by the metrics and the status page.
        self.costs = TopicCosts(tiering.storage.requests, tiering.metadata, Prices()) if tiering is not None else None
        self.labels = TopicLabels()

    def register(self, core: CoreMetrics) -> None:
        """The collectors read at each scrape (apart from ``start`` so tests can list them)."""
        self.registry.register(ProxyCollector(core, self.tiering, self.reads, self.costs, self.labels))
        ProcessCollector(registry=self.registry)

    def configure(self, props: dict[str, str]) -> None:
        """The prices (``remote.log.storage.price.*``) and the label cap from the configuration;
        a CostConfigError (a configuration error) names a key whose value cannot work."""
        if self.costs is not None:
            self.costs.prices = Prices.from_config(props)
        self.labels.limit = topic_label_max_from_config(props)

    def start(self, core: Core) -> None:
        self.configure(core.config.extra)
        self.register(core.metrics)
        core.on_request_done(self.observe)
        self.status = StatusSource(core, self.tiering, self.reads, self.reader, costs=self.costs, labels=self.labels)
        status = self.status
        host, port = self.listen
        try:
            self.server = serve_http(host, port, listener_app(make_wsgi_app(self.registry),
                                                              lambda: render(status.snapshot())))
        except OSError as e:
            raise OSError(f"cannot serve metrics on {host}:{port} (proxy.metrics.listen): {e.strerror or e}") from None
        status.start()
        log.info("Prometheus metrics on http://%s:%d/metrics, status page on http://%s:%d/", host,
                 self.port, host, self.port)

    @property
    def port(self) -> int:
        """The bound port (``proxy.metrics.listen`` may say 0)."""
        assert self.server is not None
        return self.server.server_port

    def observe(self, api_key: int, outcome: str, seconds: float) -> None:
        child = self._children.get(api_key)
        if child is None:
            child = self._children[api_key] = self.latency.labels(self._names.get(api_key, str(api_key)))
        child.observe(seconds)

    def close(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None
        if self.status is not None:
            self.status.close()
            self.status = None
