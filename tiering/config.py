"""Tiering settings: proxy-wide defaults under Kafka's broker config names, and the per-topic
values that override them (Kafka's topic config names), resolved the way a broker resolves them.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path

# Kafka's special values for local.retention.*: -2 "same as retention.*", -1 unlimited.
LOCAL_RETENTION_SAME_AS_TOTAL = -2

# Where the remote tier and its metadata live (tiering/service.py assembles them).
STORAGE_URI_CONFIG = "remote.log.storage.uri"
DEFAULT_METADATA_TOPIC = "__remote_log_metadata"

# Topic configs the proxy has a default of its own for: those TopicTiering.resolve falls back on
# TieringConfig for, and the tiering keys (remote.log.disable.policy defaults to retain). Only a
# topic's own setting of one of these may override the proxy's default.
PROXY_DEFAULTED_KEYS = frozenset({
    "segment.bytes", "internal.segment.bytes", "segment.ms", "index.interval.bytes", "retention.ms", "retention.bytes",
    "local.retention.ms", "local.retention.bytes", "remote.storage.enable",
    "remote.log.retention.ms", "remote.log.retention.bytes", "remote.log.disable.policy",
    "remote.storage.compression.type", "remote.copy.lag.ms", "remote.copy.lag.bytes",
})


def require_uri(text: str, setting: str, alternative: str = "") -> urllib.parse.SplitResult:
    """``text`` split as a URI; a bare path is refused with the exact URI to use instead (the
    stores take URIs so that a path and a topic or bucket can never be confused)."""
    parts = urllib.parse.urlsplit(text)
    if not parts.scheme:
        raise ValueError(f"{setting}: {text!r} is a path, not a URI; use {Path(text).absolute().as_uri()}"
                         + (f" (or {alternative})" if alternative else ""))
    return parts


def _int(props: Mapping[str, object], key: str, default: int) -> int:
    value = props.get(key)
    if value is None or value == "":
        return default
    try:
        return int(str(value).strip())
    except ValueError:
        raise ValueError(f"{key} must be an integer, got {value!r}") from None


def _bool(props: Mapping[str, object], key: str, default: bool) -> bool:
    value = props.get(key)
    if value is None or value == "":
        return default
    text = str(value).strip().lower()
    if text not in ("true", "false"):
        raise ValueError(f"{key} must be true or false, got {value!r}")
    return text == "true"


@dataclass(frozen=True)
class TieringConfig:
    """Proxy-wide tiering settings (``.properties`` keys in the comments)."""

    enabled: bool = True  # remote.log.storage.system.enable
    tier_all_topics: bool = False  # proxy.tier.all.topics
    thread_pool_size: int = 10  # remote.log.manager.thread.pool.size
    task_interval_ms: int = 30_000  # remote.log.manager.task.interval.ms
    copier_fetch_max_bytes: int = 8 << 20  # proxy.copier.fetch.max.bytes
    copy_backoff_max_ms: int = 60_000  # proxy.copier.backoff.max.ms
    deleted_topic_grace_ms: int = 300_000  # proxy.deleted.topic.grace.ms
    deleted_topic_retention_ms: int = 0  # proxy.deleted.topic.retention.ms (0: Kafka's rule; -1: for ever)
    # Defaults for topics that do not set their own (broker config names):
    segment_bytes: int = 1 << 30  # log.segment.bytes
    segment_ms: int = 7 * 24 * 3600 * 1000  # log.roll.ms
    index_interval_bytes: int = 4096  # log.index.interval.bytes
    retention_ms: int = 7 * 24 * 3600 * 1000  # log.retention.ms
    retention_bytes: int = -1  # log.retention.bytes
    local_retention_ms: int = LOCAL_RETENTION_SAME_AS_TOTAL  # log.local.retention.ms
    local_retention_bytes: int = LOCAL_RETENTION_SAME_AS_TOTAL  # log.local.retention.bytes
    remote_retention_ms: int = -1  # remote.log.retention.ms (broker-managed local retention)
    remote_retention_bytes: int = -1  # remote.log.retention.bytes
    compression_type: str = "none"  # remote.log.storage.compression.type (none or zstd; tiering.storage.at_rest)
    copy_lag_ms: int = 0  # log.remote.copy.lag.ms (KIP-1241; 0: upload at once, -1: the local retention)
    copy_lag_bytes: int = -1  # log.remote.copy.lag.bytes
    copy_max_bytes_per_second: int = 2**63 - 1  # remote.log.manager.copy.max.bytes.per.second (KIP-956)
    copy_quota_window_num: int = 11  # remote.log.manager.copy.quota.window.num
    copy_quota_window_size_seconds: int = 1  # remote.log.manager.copy.quota.window.size.seconds

    KEYS = {
        "enabled": "remote.log.storage.system.enable",
        "tier_all_topics": "proxy.tier.all.topics",
        "thread_pool_size": "remote.log.manager.thread.pool.size",
        "task_interval_ms": "remote.log.manager.task.interval.ms",
        "copier_fetch_max_bytes": "proxy.copier.fetch.max.bytes",
        "copy_backoff_max_ms": "proxy.copier.backoff.max.ms",
        "deleted_topic_grace_ms": "proxy.deleted.topic.grace.ms",
        "deleted_topic_retention_ms": "proxy.deleted.topic.retention.ms",
        "segment_bytes": "log.segment.bytes",
        "segment_ms": "log.roll.ms",
        "index_interval_bytes": "log.index.interval.bytes",
        "retention_ms": "log.retention.ms",
        "retention_bytes": "log.retention.bytes",
        "local_retention_ms": "log.local.retention.ms",
        "local_retention_bytes": "log.local.retention.bytes",
        "remote_retention_ms": "remote.log.retention.ms",
        "remote_retention_bytes": "remote.log.retention.bytes",
        "compression_type": "remote.log.storage.compression.type",
        "copy_lag_ms": "log.remote.copy.lag.ms",
        "copy_lag_bytes": "log.remote.copy.lag.bytes",
        "copy_max_bytes_per_second": "remote.log.manager.copy.max.bytes.per.second",
        "copy_quota_window_num": "remote.log.manager.copy.quota.window.num",
        "copy_quota_window_size_seconds": "remote.log.manager.copy.quota.window.size.seconds",
    }

    @classmethod
    def from_properties(cls, props: Mapping[str, object]) -> TieringConfig:
        values: dict[str, object] = {}
        for f in fields(cls):
            key = cls.KEYS[f.name]
            default = f.default
            if isinstance(default, str):
                values[f.name] = str(props.get(key) or default).strip()
            else:
                values[f.name] = _bool(props, key, default) if isinstance(default, bool) else _int(props, key, default)
        config = cls(**values)  # type: ignore[arg-type]
        if config.thread_pool_size < 1:
            raise ValueError("remote.log.manager.thread.pool.size must be at least 1")
        if config.task_interval_ms < 1:
            raise ValueError("remote.log.manager.task.interval.ms must be positive")
        if config.deleted_topic_retention_ms < -1:
            raise ValueError("proxy.deleted.topic.retention.ms must be -1 (for ever), 0 (Kafka's rule) or positive")
        if config.compression_type not in ("none", "zstd"):
            raise ValueError(f"remote.log.storage.compression.type={config.compression_type}: expected none or zstd")
        if config.segment_bytes < 1:
            raise ValueError("log.segment.bytes must be positive")
        for key in ("copy_max_bytes_per_second", "copy_quota_window_num", "copy_quota_window_size_seconds"):
            if getattr(config, key) < 1:
                raise ValueError(f"{cls.KEYS[key]} must be at least 1, got {getattr(config, key)}")
        for key in ("local_retention_ms", "local_retention_bytes"):
            if getattr(config, key) < LOCAL_RETENTION_SAME_AS_TOTAL:
                raise ValueError(f"{cls.KEYS[key]} must be at least {LOCAL_RETENTION_SAME_AS_TOTAL} "
                                 f"({LOCAL_RETENTION_SAME_AS_TOTAL}: the total retention), got {getattr(config, key)}")
        for key in ("copy_lag_ms", "copy_lag_bytes"):
            if getattr(config, key) < -1:
                raise ValueError(f"{cls.KEYS[key]} must be at least -1 (-1: the local retention), got {getattr(config, key)}")
        return config


@dataclass(frozen=True)
class TopicTiering:
    """One topic's effective settings."""

    remote_storage_enable: bool
    compacted: bool
    segment_bytes: int
    segment_ms: int
    index_interval_bytes: int
    retention_ms: int
    retention_bytes: int
    local_retention_ms: int
    local_retention_bytes: int
    remote_retention_ms: int
    remote_retention_bytes: int
    copy_lag_ms: int = 0  # remote.copy.lag.ms (KIP-1241)
    copy_lag_bytes: int = -1  # remote.copy.lag.bytes

    @property
    def proxy_manages_local_retention(self) -> bool:
        """KIP-405 mode: the proxy trims the brokers' log with DeleteRecords and expires remote
        data by total retention. Otherwise the brokers keep their own retention and remote data
        lives for remote.log.retention.*."""
        return self.local_retention_ms >= 0 or self.local_retention_bytes >= 0

    @property
    def remote_expiry_ms(self) -> int:
        return self.retention_ms if self.proxy_manages_local_retention else self.remote_retention_ms

    @property
    def remote_expiry_bytes(self) -> int:
        return self.retention_bytes if self.proxy_manages_local_retention else self.remote_retention_bytes

    @property
    def uploads_at_once(self) -> bool:
        """KIP-1241: a lag of 0 on either check makes every closed range eligible at once."""
        return self.copy_lag_ms == 0 or self.copy_lag_bytes == 0

    @property
    def effective_copy_lag(self) -> tuple[int, int]:
        """(ms, bytes) a closed range must age, or have newer data behind it, before it is copied;
        -1 on either: that check is not applied (its lag is -1 and local retention unlimited)."""
        local_ms = self.retention_ms if self.local_retention_ms == LOCAL_RETENTION_SAME_AS_TOTAL else self.local_retention_ms
        local_bytes = self.retention_bytes if self.local_retention_bytes == LOCAL_RETENTION_SAME_AS_TOTAL \
            else self.local_retention_bytes
        return (local_ms if self.copy_lag_ms == -1 else self.copy_lag_ms,
                local_bytes if self.copy_lag_bytes == -1 else self.copy_lag_bytes)

    @classmethod
    def resolve(cls, defaults: TieringConfig, topic_configs: Mapping[str, str | None]) -> TopicTiering:
        """``topic_configs``: the topic's own values for :data:`PROXY_DEFAULTED_KEYS` (a broker's
        default must not replace the proxy's) and the values in effect for the rest
        (``cleanup.policy``); see ``tiering.topic_configs.BrokerTopicConfigs``."""
        c = {k: v for k, v in topic_configs.items() if v is not None}
        policy = str(c.get("cleanup.policy", "delete"))
        return cls(
            remote_storage_enable=_bool(c, "remote.storage.enable", defaults.tier_all_topics) or defaults.tier_all_topics,
            compacted="compact" in policy,
            # Kafka 4 rolls a topic's segments at internal.segment.bytes where it is set (the one way
            # below segment.bytes' 1 MiB minimum); the proxy rolls remote segments where Kafka
            # rolls local ones.
            segment_bytes=_int(c, "internal.segment.bytes", _int(c, "segment.bytes", defaults.segment_bytes)),
            segment_ms=_int(c, "segment.ms", defaults.segment_ms),
            index_interval_bytes=_int(c, "index.interval.bytes", defaults.index_interval_bytes),
            retention_ms=_int(c, "retention.ms", defaults.retention_ms),
            retention_bytes=_int(c, "retention.bytes", defaults.retention_bytes),
            local_retention_ms=_int(c, "local.retention.ms", defaults.local_retention_ms),
            local_retention_bytes=_int(c, "local.retention.bytes", defaults.local_retention_bytes),
            remote_retention_ms=_int(c, "remote.log.retention.ms", defaults.remote_retention_ms),
            remote_retention_bytes=_int(c, "remote.log.retention.bytes", defaults.remote_retention_bytes),
            copy_lag_ms=_int(c, "remote.copy.lag.ms", defaults.copy_lag_ms),
            copy_lag_bytes=_int(c, "remote.copy.lag.bytes", defaults.copy_lag_bytes),
        )
