"""The proxy's features, one filter each (see ``proxy/chain.py``), and the chain built from the
configuration at start-up. Requests pass the filters in this order; the broker's answers come
back through the response hooks they registered in the reverse order:

1. ``metrics``: the Prometheus endpoint and the status page; observes every request (declares
   no API). With ``proxy.metrics.listen``.
2. ``request-validation``: every request parsed against Kafka's schema. With
   ``proxy.request.validation=true`` (the default).
3. ``address-rewriting``: the proxy's listeners in every answer that names a broker. Always.
4. ``fetch-sessions``: clients' fetch sessions end at the proxy; the broker gets sessionless full
   fetches. With tiering.
5. ``archived-topics``: topics the cluster no longer has, served read-only from the remote tier,
   and another cluster's, from its remote tier (a read replica). With ``proxy.archived.topics`` or
   ``proxy.read.replica.remote.log.storage.uri``. Then ``archived-group-offsets``: consumer groups'
   offsets in them, kept in the metadata store.
6. ``tiered-reads``: Fetch across both tiers; then ``tiered-offsets``: ListOffsets and
   OffsetForLeaderEpoch across both tiers. With tiering.
7. ``broker-configs``: the tiered-storage broker configs the proxy owns, shown in place of the
   brokers' and refused to their alterations. With tiering.
8. ``topic-admin``: tiering through Kafka's admin APIs (topic configs, DeleteRecords,
   DeleteTopics, the remote log dir in DescribeLogDirs). With tiering.

Only this module (and the entry points that call it) knows the filters; filters never import one
another: what one needs of another (the remote reader, the read counters) is handed over here.
"""

from __future__ import annotations

from proxy.archive_sources import ArchiveSource
from proxy.chain import Filter
from proxy.config import ProxyConfig
from proxy.filters.address_rewriting import AddressRewriting
from proxy.filters.archived_offsets import ArchivedGroupOffsets
from proxy.filters.archived_topics import ArchivedTopics
from proxy.filters.broker_configs import BrokerConfigs
from proxy.filters.fetch_sessions import FetchSessions
from proxy.filters.metrics import PrometheusMetrics
from proxy.filters.remote_log_dirs import RemoteLogDirs
from proxy.filters.tiered_offsets import TieredOffsets
from proxy.filters.tiered_reads import TieredReads
from proxy.filters.topic_admin import TopicAdmin
from proxy.filters.validation import RequestValidation
from tiering.service import TieringService


def build_chain(config: ProxyConfig, tiering: TieringService | None) -> list[Filter]:
    """The filters the configuration asks for, in chain order."""
    reads = TieredReads(tiering, config.extra) if tiering is not None else None
    chain: list[Filter] = []
    if config.metrics_listen is not None:
        chain.append(PrometheusMetrics(config.metrics_listen, tiering, reads, reads.reader if reads else None))
    if config.validate_requests:
        chain.append(RequestValidation())
    chain.append(AddressRewriting())
    if tiering is not None and reads is not None:
        chain.append(FetchSessions(config.extra))
        sources = [ArchiveSource(a, *reads.archive_reads(a.store, a.storage)) for a in tiering.archives]
        if sources:
            chain += [ArchivedTopics(sources, reads.not_available_code, reads.by_topic),
                      ArchivedGroupOffsets(sources, tiering.metadata)]
        chain += [reads, TieredOffsets(tiering, reads.reader, reads.limiter, reads.tiered_by),
                  BrokerConfigs(tiering.cluster_configs), TopicAdmin(config, tiering, reads.reader),
                  RemoteLogDirs(tiering, config.extra)]
    return chain
