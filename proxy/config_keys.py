"""Every configuration key the product reads, in one place, so a key nobody reads (a typo, or a key
from another product) is reported instead of silently ignored.

Each key is listed by name: no whole prefix is accepted, because nothing passes arbitrary keys
through (the S3 store reads exactly the ``remote.log.storage.s3.*`` keys below, TLS exactly the
``ssl.*`` and ``upstream.ssl.*`` keys below). ``tests/unit/test_config.py`` scans the sources for
keys read from the properties and checks that each one is here, so the list stays complete.
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import Iterable, Mapping

from proxy.config import ConfigError
from tiering import client_security, service
from tiering.config import TieringConfig
from tiering.metadata import uri as metadata_uri
from tiering.storage import api as storage_api
from tiering.storage import uri as storage_uri

log = logging.getLogger("tiered-proxy")

# proxy/config.py: ProxyConfig.from_properties
PROXY_KEYS = (
    "bootstrap.servers",
    "listeners",
    "proxy.advertised.host",
    "proxy.broker.port.base",
    "proxy.broker.node.id.min",
    "proxy.broker.port.map",
    "socket.request.max.bytes",
    "proxy.upstream.response.max.bytes",
    "proxy.max.in.flight.requests",
    "proxy.response.buffer.max.bytes",
    "proxy.metadata.refresh.ms",
    "proxy.upstream.connect.timeout.ms",
    "proxy.metrics.listen",
    "proxy.workers",
    "proxy.worker.index",
    "proxy.request.validation",
    "proxy.config.strict",
)

# proxy/filters/tiered_reads.py and fetch_sessions.py: remote reads, fetch sessions
TIERED_READ_KEYS = (
    "remote.log.index.file.cache.total.size.bytes",
    "remote.log.chunk.cache.size.bytes",
    "remote.log.chunk.size.bytes",
    "remote.log.chunk.prefetch.threads",
    "remote.log.chunk.prefetch.max.chunks",
    "remote.log.reader.threads",
    "remote.fetch.max.wait.ms",
    "proxy.remote.fetch.buffer.max.bytes",
    "proxy.fetch.routing.policy",
    "proxy.tiered.storage.not.available.error.code",
    "max.incremental.fetch.session.cache.slots",
    "min.incremental.fetch.session.eviction.ms",
)

# proxy/tls.py: TLS toward clients (listeners=SSL://...)
LISTENER_TLS_KEYS = (
    "ssl.keystore.type",
    "ssl.keystore.location",
    "ssl.key.password",
    "ssl.client.auth",
    "ssl.truststore.location",
)

# tiering/client_security.py: TLS and SASL of the proxy's own connections to the brokers
UPSTREAM_SECURITY_KEYS = tuple(client_security.UPSTREAM_PREFIX + key for key in client_security.KEYS)

# tiering/service.py: where the remote tier, its metadata and the working files live
SERVICE_KEYS = (
    service.DATA_DIR_CONFIG,
    service.STORAGE_URI_CONFIG,
    service.METADATA_URI_CONFIG,
    metadata_uri.METADATA_PARTITIONS_CONFIG,
    metadata_uri.METADATA_REPLICATION_CONFIG,
    service.OWNERSHIP_CONFIG,
    service.GROUP_ID_CONFIG,
    service.GROUP_SESSION_TIMEOUT_CONFIG,
)

# tiering/storage/uri.py and api.py: storage_from_uri (the S3 store's own keys, and KIP-917's bound)
STORAGE_KEYS = (
    storage_api.CUSTOM_METADATA_MAX_BYTES_CONFIG,
    storage_uri.S3_ENDPOINT_URL_CONFIG,
    storage_uri.S3_REGION_CONFIG,
    storage_uri.S3_MAX_ATTEMPTS_CONFIG,
    storage_uri.S3_MULTIPART_THRESHOLD_CONFIG,
    storage_uri.S3_PART_SIZE_CONFIG,
    storage_uri.S3_ACCESS_KEY_ID_CONFIG,
    storage_uri.S3_SECRET_ACCESS_KEY_CONFIG,
    storage_uri.S3_RETRY_MODE_CONFIG,
)

# tiering/config.py: TieringConfig (proxy-wide tiering defaults under Kafka's broker names)
TIERING_KEYS = tuple(TieringConfig.KEYS.values())

KNOWN_KEYS: frozenset[str] = frozenset(
    PROXY_KEYS + TIERED_READ_KEYS + LISTENER_TLS_KEYS + UPSTREAM_SECURITY_KEYS + SERVICE_KEYS + STORAGE_KEYS
    + TIERING_KEYS
)


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
