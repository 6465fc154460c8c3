"""The tiered-storage broker keys the proxy keeps, as they are in effect: its properties, under the
cluster-wide dynamic defaults that ``kafka-configs.sh --entity-type brokers --entity-default
--alter`` sets through it.

The keys that may change while the proxy runs are the ones Kafka lets change while brokers run
(:data:`DYNAMIC_KEYS`; a Kafka 4.4 broker refuses the others with "Cannot update these configs
dynamically"). They live in the metadata store as one record of every value in effect, so every
proxy of the cluster follows them and a restart keeps them. The parts that read them follow the
record: the copy manager at each round (:meth:`ClusterConfigs.tiering`), the remote reads at each
Fetch (:meth:`ClusterConfigs.effective`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping

from tiering.config import TieringConfig
from tiering.metadata.manager import RemoteLogMetadataManager
from tiering.model import ClusterTieringConfigs

# Kafka's tiered-storage broker keys that change dynamically, among those the proxy implements.
DYNAMIC_KEYS = frozenset({
    "log.local.retention.ms", "log.local.retention.bytes", "log.remote.copy.lag.ms", "log.remote.copy.lag.bytes",
    "remote.log.manager.copy.max.bytes.per.second", "remote.log.manager.fetch.max.bytes.per.second",
    "remote.fetch.max.wait.ms", "remote.log.reader.threads", "remote.log.index.file.cache.total.size.bytes",
})
FETCH_MAX_BYTES_PER_SECOND = "remote.log.manager.fetch.max.bytes.per.second"
READER_THREADS = "remote.log.reader.threads"
INDEX_CACHE_BYTES = "remote.log.index.file.cache.total.size.bytes"
# Those the remote reads take (proxy/filters/tiered_reads.py), with their defaults; each at least 1.
READ_KEYS = {FETCH_MAX_BYTES_PER_SECOND: 2**63 - 1, "remote.fetch.max.wait.ms": 500, READER_THREADS: 10,
             INDEX_CACHE_BYTES: 1 << 30}


def setting(props: Mapping[str, object], key: str, default: int) -> int:
    """An integer setting of ``props`` (``default`` when unset or empty); ValueError naming the key."""
    raw = props.get(key)
    if raw is None or str(raw).strip() == "":
        return default
    try:
        return int(str(raw).strip())
    except ValueError:
        raise ValueError(f"{key} must be an integer, got {raw!r}") from None


def check_read_settings(props: Mapping[str, object]) -> None:
    for key, default in READ_KEYS.items():
        if setting(props, key, default) < 1:
            raise ValueError(f"{key} must be at least 1, got {props.get(key)}")


class ClusterConfigs:
    """The proxy's properties, under the dynamic defaults recorded in ``metadata``; thread-safe."""

    def __init__(self, props: Mapping[str, object], metadata: RemoteLogMetadataManager) -> None:
        self.props = dict(props)
        self.metadata = metadata
        self._lock = threading.Lock()
        self._seen: ClusterTieringConfigs | None = None
        self._tiering = TieringConfig.from_properties(self.props)

    def dynamic(self) -> dict[str, str]:
        """The dynamic defaults in effect, by key."""
        record = self.metadata.cluster_tiering_configs()
        return {} if record is None else record.config_map

    def record(self) -> ClusterTieringConfigs | None:
        """The record in effect (a new object whenever any value changes): cheap to compare."""
        return self.metadata.cluster_tiering_configs()

    def effective(self) -> dict[str, object]:
        return {**self.props, **self.dynamic()}

    def tiering(self) -> TieringConfig:
        """The tiering settings in effect. A record this proxy cannot take (written by a newer or
        misconfigured one) leaves the last settings it could take in effect."""
        record = self.record()
        with self._lock:
            if record is not self._seen:
                self._seen = record
                try:
                    self._tiering = TieringConfig.from_properties(self.effective())
                except ValueError:
                    pass  # checked when altered; the properties' own values were checked at start
            return self._tiering

    def alter(self, updates: Mapping[str, str | None], *, validate_only: bool = False) -> None:
        """Set (a value) or remove (None) dynamic defaults, after checking every value as the proxy
        would read it; ValueError naming the key (nothing is written then)."""
        not_dynamic = sorted(key for key in updates if key not in DYNAMIC_KEYS)
        if not_dynamic:
            raise ValueError(f"Cannot update these configs dynamically: {not_dynamic}")
        values = self.dynamic()
        for key, value in updates.items():
            if value is None:
                values.pop(key, None)
            else:
                values[key] = value.strip()
        candidate = {**self.props, **values}
        TieringConfig.from_properties(candidate)
        check_read_settings(candidate)
        if not validate_only:
            record = ClusterTieringConfigs(tuple(sorted(values.items())), int(time.time() * 1000))
            self.metadata.put_cluster_tiering_configs(record)
