"""Every configuration key the product reads, in one place, with its default and a one-line
description, so a key nobody reads (a typo, or a key from another product) is reported instead of
silently ignored, and the configuration reference (``docs/configuration.md``, printed by
``python -m proxy.config_reference``) is generated from here.

Each key is listed by name: no whole prefix is accepted, because nothing passes arbitrary keys
through (the S3 store reads exactly the ``remote.log.storage.s3.*`` keys below, TLS exactly the
``ssl.*`` and ``upstream.ssl.*`` keys below). ``tests/unit/test_config.py`` scans the sources for
keys read from the properties and checks that each one is here, so the list stays complete;
``tests/unit/test_config_reference.py`` checks that the reference is what this file describes.
Defaults and descriptions are Markdown, as the reference prints them.
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from proxy.config import ConfigError
from tiering import archive, client_security, cost, service
from tiering.client_security import UPSTREAM_PREFIX
from tiering.config import TieringConfig
from tiering.metadata import manifests
from tiering.metadata import uri as metadata_uri
from tiering.storage import api as storage_api
from tiering.storage import at_rest, key_ring, object_layout
from tiering.storage import uri as storage_uri

log = logging.getLogger("tiered-proxy")


@dataclass(frozen=True)
class Key:
    """One configuration key: its name, its default and what it does (both Markdown)."""

    name: str
    default: str
    description: str


@dataclass(frozen=True)
class Group:
    """Keys read by one part of the product. ``doc``: the docs page (with anchor, relative to
    ``docs/``) that explains them."""

    title: str
    read_by: tuple[str, ...]  # the source files that read them
    doc: str
    keys: tuple[Key, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(key.name for key in self.keys)


PROXY = Group("Proxy", ("proxy/config.py",), "running-the-proxy.md", (
    Key("bootstrap.servers", "(required)",
        "`--bootstrap-servers`: upstream brokers, `HOST:PORT[,HOST:PORT…]`"),
    Key("listeners", "`127.0.0.1:19092`",
        "`--listen`: the bootstrap listener clients connect to; `SSL://HOST:PORT` for TLS toward clients"),
    Key("proxy.advertised.host", "listen host (`127.0.0.1` for `0.0.0.0`)", "host written into answers"),
    Key("proxy.broker.port.base", "listen port + 1",
        "node *N* is served on `base + N - proxy.broker.node.id.min`"),
    Key("proxy.broker.node.id.min", "`0`", "lowest broker node id"),
    Key("proxy.broker.port.map", "none", "explicit `NODE:PORT[,NODE:PORT…]`, wins over the base"),
    Key("socket.request.max.bytes", "`104857600` (100 MiB)", "larger client frames close that connection"),
    Key("proxy.upstream.response.max.bytes", "`1073741824` (1 GiB)", "larger broker frames close that connection"),
    Key("proxy.max.in.flight.requests", "`1000`", "per client connection, before the proxy stops reading"),
    Key("proxy.response.buffer.max.bytes", "`33554432` (32 MiB)",
        "broker answers read but not yet written to their clients, all connections together"),
    Key("proxy.metadata.refresh.ms", "`30000`", "how often the proxy re-reads the cluster's brokers"),
    Key("proxy.upstream.connect.timeout.ms", "`10000`", "connecting to a broker"),
    Key("proxy.metrics.listen", "off", "`HOST:PORT` of the Prometheus endpoint"),
    Key("proxy.workers", "`1`", "proxy processes on this host sharing the listening ports"),
    Key("proxy.worker.index", "not a worker",
        "set by the supervisor on worker `i` (from 0) of `proxy.workers`; not for operators"),
    Key("proxy.request.validation", "`true`",
        "read every request as Kafka reads it before forwarding it; close a connection whose request "
        "Kafka would refuse"),
    Key("proxy.config.strict", "`false`",
        "`--strict-config`: refuse to start on a config key the proxy does not read (otherwise: one "
        "warning naming the closest known key)"),
))

SERVICE = Group("Remote tier and metadata store", ("tiering/service.py", "tiering/metadata/manifests.py", "tiering/archive.py"),
                "operating-tiering.md#tiering", (
    Key(service.DATA_DIR_CONFIG, f"`{service.DEFAULT_DATA_DIR}`",
        "`--data-dir`: spool files, data-loss gap log, embedded stores"),
    Key(service.STORAGE_URI_CONFIG, "`file://DATA_DIR/remote`",
        "`--remote`: `file:///path` or `s3://bucket/prefix[?endpoint_url=…&region=…]`; recorded with the "
        "metadata store on first start (without credentials)"),
    Key(service.METADATA_URI_CONFIG, "`file://DATA_DIR/metadata`",
        "`--metadata`: `file:///path` (journal store) or `topic://NAME` (metadata topic on the cluster)"),
    Key(metadata_uri.METADATA_PARTITIONS_CONFIG, "`50`", "partitions of the metadata topic (`topic://`)"),
    Key(metadata_uri.METADATA_REPLICATION_CONFIG, "`1`", "its replication factor (raise it on a real cluster)"),
    Key(service.OWNERSHIP_CONFIG, "`group`",
        "`group`: instances sharing a metadata topic divide the copying by a consumer group; `all`: this "
        "instance copies every partition (one instance only); `none`: it copies nothing and only serves"),
    Key(service.GROUP_ID_CONFIG, "`tiered-proxy-remote-log-manager`", "the group the instances join"),
    Key(service.GROUP_SESSION_TIMEOUT_CONFIG, "`10000`", "how soon a dead instance's partitions move"),
    Key(archive.ARCHIVED_TOPICS_CONFIG, "(none)",
        "topics served read-only from the remote tier while the cluster has no topic of the name "
        "(comma-separated, or `*` for every topic the remote tier describes); their remote data is "
        "kept when they leave the cluster"),
    Key(archive.ARCHIVE_REFRESH_CONFIG, f"`{archive.DEFAULT_ARCHIVE_REFRESH_MS}`",
        "how often the archived topics' index is read again from the remote tier's manifests"),
    Key(manifests.MANIFEST_INTERVAL_CONFIG, f"`{manifests.DEFAULT_MANIFEST_INTERVAL_MS}`",
        "longest wait before the remote tier's manifests (its own description, read by `segments --remote`) "
        "follow a metadata write; at most one PUT per changed partition per interval"),
))

_TIERING = TieringConfig.KEYS
TIERING = Group("Tiering", ("tiering/config.py",), "operating-tiering.md#tiering", (
    Key(_TIERING["enabled"], "`true`", "`false` turns tiering off"),
    Key(_TIERING["tier_all_topics"], "`false`",
        "`--tier-all-topics`: tier every non-internal, non-compacted topic that does not set "
        "`remote.storage.enable=false` itself"),
    Key(_TIERING["thread_pool_size"], "`10`", "partitions copied at once"),
    Key(_TIERING["task_interval_ms"], "`30000`", "how often each partition is looked at"),
    Key(_TIERING["copier_fetch_max_bytes"], "`8388608` (8 MiB)", "bytes per copier fetch"),
    Key(_TIERING["copy_backoff_max_ms"], "`60000`",
        "longest wait between retries after a storage or broker error"),
    Key(_TIERING["deleted_topic_grace_ms"], "`300000`",
        "a topic with remote data missing from the cluster this long (deleted without the proxy) is "
        "deleted from the remote tier"),
    Key(_TIERING["deleted_topic_retention_ms"], "`0`",
        "how long a deleted topic's remote data is kept (through the proxy or not): `0` Kafka's rule "
        "(at once; after the grace above when deleted without the proxy), `-1` for ever; counted from "
        "when this proxy saw it gone. Served meanwhile where `proxy.archived.topics` names it"),
    Key(_TIERING["segment_bytes"], "`1073741824` (1 GiB)",
        "segment roll, for topics that do not set `segment.bytes` themselves"),
    Key(_TIERING["segment_ms"], "`604800000` (7 days)", "segment roll, for topics that do not set `segment.ms` themselves"),
    Key(_TIERING["index_interval_bytes"], "`4096`",
        "bytes between offset index entries of remote segments, for topics that do not set "
        "`index.interval.bytes` themselves"),
    Key(_TIERING["retention_ms"], "`604800000` (7 days)",
        "total retention, for topics that do not set `retention.ms` themselves"),
    Key(_TIERING["retention_bytes"], "`-1`", "total retention, for topics that do not set `retention.bytes` themselves"),
    Key(_TIERING["local_retention_ms"], "`-2`",
        "local retention, for topics that do not set `local.retention.ms` themselves (-2: the total)"),
    Key(_TIERING["local_retention_bytes"], "`-2`",
        "local retention, for topics that do not set `local.retention.bytes` themselves (-2: the total)"),
    Key(_TIERING["remote_retention_ms"], "`-1`", "remote retention when the brokers manage local retention"),
    Key(_TIERING["remote_retention_bytes"], "`-1`", "remote retention when the brokers manage local retention"),
    Key(_TIERING["copy_lag_ms"], "`0`",
        "delayed upload (KIP-1241), for topics that do not set `remote.copy.lag.ms` themselves: a closed range "
        "is copied once its newest record is this old (or `log.remote.copy.lag.bytes` follow it); `0` at once, "
        "`-1` the local retention"),
    Key(_TIERING["copy_lag_bytes"], "`-1`",
        "delayed upload (KIP-1241), for topics that do not set `remote.copy.lag.bytes` themselves: a closed "
        "range is copied once this many newer bytes follow it; `0` at once, `-1` the local retention "
        "(not applied if unlimited)"),
    Key(_TIERING["copy_max_bytes_per_second"], "`9223372036854775807` (unlimited)",
        "copy quota (KIP-956): bytes per second copied to the remote tier by all copiers together; over it "
        "the next segment waits"),
    Key(_TIERING["copy_quota_window_num"], "`11`", "samples the copy rate is measured over"),
    Key(_TIERING["copy_quota_window_size_seconds"], "`1`", "length of one sample"),
))

STORAGE = Group("Object store", ("tiering/storage/uri.py", "tiering/storage/api.py"), "object-stores.md", (
    Key(storage_api.CUSTOM_METADATA_MAX_BYTES_CONFIG, f"`{storage_api.DEFAULT_CUSTOM_METADATA_MAX_BYTES}`",
        "KIP-917 limit; a copy over it fails"),
    Key(storage_uri.S3_ENDPOINT_URL_CONFIG, "AWS (boto3's default)",
        "`http://` or `https://` URL of the S3 endpoint (then path-style addressing); the URI's "
        "`endpoint_url` wins"),
    Key(storage_uri.S3_REGION_CONFIG, "boto3's default", "the S3 region; the URI's `region` wins"),
    Key(storage_uri.S3_MAX_ATTEMPTS_CONFIG, "`5`", "requests per S3 operation, the first one included"),
    Key(storage_uri.S3_MULTIPART_THRESHOLD_CONFIG, "`8388608` (8 MiB)", "larger objects are uploaded in parts"),
    Key(storage_uri.S3_PART_SIZE_CONFIG, "`8388608` (8 MiB)", "size of those parts (at least 5 MiB)"),
    Key(storage_uri.S3_ACCESS_KEY_ID_CONFIG, "boto3's credential chain",
        "S3 access key; set with the secret key, or neither"),
    Key(storage_uri.S3_SECRET_ACCESS_KEY_CONFIG, "boto3's credential chain", "S3 secret key"),
    Key(storage_uri.S3_RETRY_MODE_CONFIG, "`adaptive`",
        "`adaptive` (each throttling answer cuts the request rate of all the proxy's threads) or `standard`"),
    Key(storage_uri.S3_SSE_CONFIG, "(none: the bucket's default)",
        "server-side encryption asked with every write: `AES256` (SSE-S3) or `aws:kms` (SSE-KMS)"),
    Key(storage_uri.S3_SSE_KMS_KEY_ID_CONFIG, "(none: the store's default KMS key)",
        "the KMS key SSE-KMS encrypts with (needs `aws:kms` above)"),
))

AT_REST = Group("Data at rest: compression and encryption", ("tiering/storage/at_rest.py", "tiering/storage/key_ring.py"),
                "data-at-rest.md", (
    Key(at_rest.COMPRESSION_TYPE_CONFIG, "`none`",
        "`zstd` stores new segments compressed per chunk (not those whose batches are compressed already); "
        "a topic's `remote.storage.compression.type` overrides it"),
    Key(at_rest.ZSTD_LEVEL_CONFIG, f"`{at_rest.DEFAULT_ZSTD_LEVEL}`", "zstd's level (-7 to 22)"),
    Key(key_ring.KEY_RING_FILE_CONFIG, "(none)",
        "the key-ring file (PEM blocks, `tiered-proxy keys generate`) holding the key-encryption keys"),
    Key(key_ring.ACTIVE_KEY_ID_CONFIG, "(none: nothing new is encrypted)",
        "the key that wraps new segments' data keys; setting it turns AES-256-GCM encryption on"),
    Key(key_ring.KMS_CLASS_CONFIG, "(none)",
        "`module:Class` of a `tiering.storage.key_ring.KeyEncryptionKeys` (a KMS), instead of the key ring"),
))

_REPLICA_KEYS = {own: key for key, own in archive.READ_REPLICA_STORAGE_KEYS.items()}
READ_REPLICA = Group("Read replica of another cluster's remote tier", ("tiering/archive.py",), "when-the-cluster-is-gone.md", (
    Key(archive.READ_REPLICA_STORAGE_CONFIG, "(none)",
        "another cluster's remote tier, `file:///path` or `s3://bucket/prefix`, read and never written"),
    Key(archive.READ_REPLICA_TOPICS_CONFIG, "(none: required with the URI)",
        "its topics to serve, `NAME` or `NAME:LOCAL_NAME`, comma-separated; `*` for every one under its own name"),
    Key(archive.READ_REPLICA_REFRESH_CONFIG, f"`{archive.DEFAULT_READ_REPLICA_REFRESH_MS}`",
        "how often its manifests are read again: new segments show within this plus its proxies' "
        "`proxy.manifest.interval.ms`"),
    Key(_REPLICA_KEYS[storage_uri.S3_ENDPOINT_URL_CONFIG], "AWS", "its S3 endpoint"),
    Key(_REPLICA_KEYS[storage_uri.S3_REGION_CONFIG], "boto3's default", "its S3 region"),
    Key(_REPLICA_KEYS[storage_uri.S3_ACCESS_KEY_ID_CONFIG], "boto3's credential chain",
        "its S3 access key (read and list rights are enough)"),
    Key(_REPLICA_KEYS[storage_uri.S3_SECRET_ACCESS_KEY_CONFIG], "boto3's credential chain", "its S3 secret key"),
    Key(_REPLICA_KEYS[storage_uri.S3_MAX_ATTEMPTS_CONFIG], "`5`", "requests per S3 operation"),
    Key(_REPLICA_KEYS[storage_uri.S3_RETRY_MODE_CONFIG], "`adaptive`", "`adaptive` or `standard`"),
))

TIERED_READS = Group("Remote reads and fetch sessions", ("proxy/filters/tiered_reads.py", "proxy/filters/fetch_sessions.py"),
                     "operating-tiering.md#reads-from-the-remote-tier", (
    Key("remote.log.index.file.cache.total.size.bytes", "`1073741824` (1 GiB)", "bounds the remote index cache"),
    Key("remote.log.chunk.cache.size.bytes", "`125829120` (120 MiB)", "cache of remote segment chunks"),
    Key("remote.log.chunk.size.bytes", "`1048576` (1 MiB)", "remote segment data is read in aligned chunks of this size"),
    Key("remote.log.chunk.prefetch.threads", "`16`", "chunks fetched ahead at once, for all readers together; 0: none"),
    Key("remote.log.chunk.prefetch.max.chunks", "`16`",
        "largest fetch-ahead window of one reader (and at most an eighth of the chunk cache)"),
    Key("remote.log.reader.threads", "`10`", "threads remote reads run on"),
    Key("remote.fetch.max.wait.ms", "`500`",
        "a remote read not done by then is answered as `TIERED_STORAGE_NOT_AVAILABLE`; it starts no new "
        "segment after half of it"),
    Key("proxy.remote.fetch.buffer.max.bytes", "`16777216` (16 MiB)", "remote record bytes in answers not yet written"),
    Key("proxy.fetch.routing.policy", "`broker-first`",
        "`broker-first`: the remote tier only below the brokers' log start; `remote-preferred`: every offset "
        "the remote tier holds from it"),
    Key("proxy.tiered.storage.not.available.error.code", "`56` (`KAFKA_STORAGE_ERROR`)",
        "error code of a remote read that failed or timed out"),
    Key("max.incremental.fetch.session.cache.slots", "`1000`", "fetch sessions (KIP-227) the proxy keeps"),
    Key("min.incremental.fetch.session.eviction.ms", "`120000`",
        "a full session cache evicts the least recently used session idle this long"),
    Key("remote.log.manager.fetch.max.bytes.per.second", "`9223372036854775807` (unlimited)",
        "remote fetch quota (KIP-956): bytes per second read from the remote tier for clients, across the proxy; "
        "over it a remote read waits up to half `remote.fetch.max.wait.ms`, then the partition answers no records "
        "and no error, as Kafka's does"),
    Key("remote.log.manager.fetch.quota.window.num", "`11`", "samples the remote fetch rate is measured over"),
    Key("remote.log.manager.fetch.quota.window.size.seconds", "`1`", "length of one sample"),
))

LISTENER_TLS = Group("TLS toward clients", ("proxy/tls.py",), "security.md", (
    Key("ssl.keystore.type", "`PEM`", "only `PEM` is supported"),
    Key("ssl.keystore.location", "none (required with `SSL://`)", "PEM file with the private key and certificate chain"),
    Key("ssl.key.password", "none", "password of the private key, if it is encrypted"),
    Key("ssl.client.auth", "`none`", "client certificates: `none`, `requested` or `required`"),
    Key("ssl.truststore.location", "none (required unless `ssl.client.auth=none`)", "CAs of client certificates (PEM)"),
))

UPSTREAM_SECURITY = Group(
    "TLS and SASL toward the brokers", ("tiering/client_security.py",), "security.md", (
        Key(UPSTREAM_PREFIX + client_security.SECURITY_PROTOCOL, "`PLAINTEXT`",
            "`PLAINTEXT`, `SSL`, `SASL_PLAINTEXT` or `SASL_SSL`"),
        Key(UPSTREAM_PREFIX + client_security.SASL_MECHANISM, "`GSSAPI` (not supported)",
            "`PLAIN`, `SCRAM-SHA-256` or `SCRAM-SHA-512`"),
        Key(UPSTREAM_PREFIX + client_security.SASL_JAAS, "none",
            "Kafka's JAAS line with `username` and `password`"),
        Key(UPSTREAM_PREFIX + client_security.SASL_USERNAME, "none", "the user, as librdkafka users write it"),
        Key(UPSTREAM_PREFIX + client_security.SASL_PASSWORD, "none", "the password, as librdkafka users write it"),
        Key(UPSTREAM_PREFIX + client_security.SSL_TRUSTSTORE, "the system's CAs", "CAs of the brokers' certificates (PEM)"),
        Key(UPSTREAM_PREFIX + client_security.SSL_KEYSTORE, "none",
            "PEM file with the proxy's private key and certificate chain, for mutual TLS"),
        Key(UPSTREAM_PREFIX + client_security.SSL_KEY_PASSWORD, "none", "password of that private key"),
        Key(UPSTREAM_PREFIX + client_security.SSL_ENDPOINT_IDENTIFICATION, "`https`",
            "`https` checks the brokers' host names; any other value (`\"\"`) skips the check"),
    ))

COST = Group("Costs per topic, and keys spread over S3 prefixes", ("tiering/cost.py", "tiering/storage/object_layout.py"),
             "object-stores.md#what-each-topic-costs", (
    Key(cost.PRICE_PUT_CONFIG, "`0.005`",
        "price per 1,000 PUT-class requests (PUT, COPY, POST: multipart parts and completions too); the defaults "
        "are S3 Standard's in us-east-1"),
    Key(cost.PRICE_GET_CONFIG, "`0.0004`", "price per 1,000 GET-class requests (GET, HEAD)"),
    Key(cost.PRICE_LIST_CONFIG, "`0.005`", "price per 1,000 LIST requests"),
    Key(cost.PRICE_DELETE_CONFIG, "`0`", "price per 1,000 DELETE requests (free on S3)"),
    Key(cost.PRICE_STORAGE_CONFIG, "`0.023`", "price per GB-month stored (GB: 2^30 bytes; a month: 730 hours)"),
    Key(cost.PRICE_TRANSFER_OUT_CONFIG, "`0`", "price per GB read from the remote tier (`0`: from the same region)"),
    Key(cost.PRICE_TRANSFER_IN_CONFIG, "`0`", "price per GB written to the remote tier (free on S3)"),
    Key(cost.PRICE_CURRENCY_CONFIG, "`USD`", "the prices' currency (a three-letter code), as costs are labelled"),
    Key(cost.TOPIC_LABEL_MAX_CONFIG, f"`{cost.DEFAULT_TOPIC_LABEL_MAX}`",
        "topics with a label of their own in the per-topic remote-tier metrics and cost table: the first this many "
        "topics to send requests keep theirs, later ones are summed under `topic=\"other\"`"),
    Key(object_layout.SALT_LENGTH_CONFIG, "`0` (off)",
        f"hex digits (up to {object_layout.MAX_SALT_LENGTH}) of a hash of the topic-partition that begin new "
        "segments' keys after the prefix, spreading request rates over up to 16^N S3 prefixes; every segment "
        "keeps the keys it was written with"),
))

GROUPS: tuple[Group, ...] = (PROXY, SERVICE, TIERING, STORAGE, AT_REST, READ_REPLICA, TIERED_READS, LISTENER_TLS,
                             UPSTREAM_SECURITY, COST)

# The names of each group, as the product reads them.
PROXY_KEYS = PROXY.names
TIERED_READ_KEYS = TIERED_READS.names
LISTENER_TLS_KEYS = LISTENER_TLS.names
UPSTREAM_SECURITY_KEYS = UPSTREAM_SECURITY.names
SERVICE_KEYS = SERVICE.names
STORAGE_KEYS = STORAGE.names
TIERING_KEYS = TIERING.names

KNOWN_KEYS: frozenset[str] = frozenset(name for group in GROUPS for name in group.names)


def closest_key(key: str) -> str | None:
    """The known key ``key`` was most likely meant to be, or None when nothing is close."""
    matches = difflib.get_close_matches(key, sorted(KNOWN_KEYS), n=1, cutoff=0.8)
    return matches[0] if matches else None


def describe_unknown(key: str) -> str:
    """``unknown config key 'KEY'``, with ``; did you mean 'CLOSE'?`` when a known key is close."""
    suggestion = closest_key(key)
    return f"unknown config key {key!r}" + (f"; did you mean {suggestion!r}?" if suggestion else "")


def unknown_keys(keys: Iterable[str]) -> list[str]:
    return sorted(k for k in set(keys) if k not in KNOWN_KEYS)


def check_keys(props: Mapping[str, str], *, strict: bool) -> list[str]:
    """Report keys nobody reads: one WARNING line each (the proxy still starts), or, when
    ``strict``, a ConfigError naming them all on one line. Returns the unknown keys."""
    unknown = unknown_keys(props)
    if strict and unknown:
        # All of them in one line, so the operator fixes them in one go.
        raise ConfigError("; ".join(describe_unknown(k) for k in unknown)
                          + " (refused by --strict-config / proxy.config.strict)")
    for key in unknown:
        suggestion = closest_key(key)
        log.warning("unknown config key %r (ignored)%s", key, f"; did you mean {suggestion!r}?" if suggestion else "")
    return unknown
