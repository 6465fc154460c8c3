"""Per-topic tiering configs the proxy keeps for the brokers, and the KIP-950 lifecycle they drive.

Brokers without tiered storage know none of these keys, so the proxy keeps them in the metadata
store (as :class:`tiering.model.TopicTieringState`) and never forwards them. This module holds the
rules, with no I/O: validation as Kafka validates, how DescribeConfigs shows the keys, and the
state change an alteration causes (ENABLED -> DISABLING -> DISABLED -> ENABLED, each step raising
the tiered epoch).
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from protocol.errors import ErrorCode
from tiering.config import LOCAL_RETENTION_SAME_AS_TOTAL, PROXY_DEFAULTED_KEYS, TieringConfig
from tiering.model import DisablePolicy, TieringState, TopicTieringState

REMOTE_STORAGE_ENABLE = "remote.storage.enable"
LOCAL_RETENTION_MS = "local.retention.ms"
LOCAL_RETENTION_BYTES = "local.retention.bytes"
REMOTE_LOG_DISABLE_POLICY = "remote.log.disable.policy"
REMOTE_STORAGE_COMPRESSION_TYPE = "remote.storage.compression.type"
REMOTE_COPY_LAG_MS = "remote.copy.lag.ms"  # KIP-1241 (Kafka 4.4)
REMOTE_COPY_LAG_BYTES = "remote.copy.lag.bytes"
TIERING_KEYS = (REMOTE_STORAGE_ENABLE, LOCAL_RETENTION_MS, LOCAL_RETENTION_BYTES, REMOTE_LOG_DISABLE_POLICY,
                REMOTE_STORAGE_COMPRESSION_TYPE, REMOTE_COPY_LAG_MS, REMOTE_COPY_LAG_BYTES)

# Kafka's DescribeConfigs enums (ConfigSource, ConfigType).
SOURCE_UNKNOWN = 0
SOURCE_DYNAMIC_TOPIC_CONFIG = 1
SOURCE_DYNAMIC_DEFAULT_BROKER_CONFIG = 3
SOURCE_STATIC_BROKER_CONFIG = 4
SOURCE_DEFAULT_CONFIG = 5
TYPE_BOOLEAN, TYPE_STRING, TYPE_LONG = 1, 2, 5

_DOCS = {
    REMOTE_STORAGE_ENABLE: "To enable tiered storage for a topic, set this to true; set it to false to disable it "
                           "(remote.log.disable.policy decides what happens to remote data). Kept by the proxy.",
    LOCAL_RETENTION_MS: "How long the brokers keep a log segment that is already tiered, before the proxy moves "
                        "their log start past it. -2: use retention.ms. Kept by the proxy.",
    LOCAL_RETENTION_BYTES: "How many bytes of tiered data the brokers keep per partition before the proxy moves "
                           "their log start past the oldest. -2: use retention.bytes. Kept by the proxy.",
    REMOTE_LOG_DISABLE_POLICY: "What disabling tiered storage does to remote data: retain (stays readable, expires by "
                               "retention.ms/bytes) or delete (unreadable at once, deleted in the background). "
                               "Kept by the proxy.",
    REMOTE_STORAGE_COMPRESSION_TYPE: "How the remote tier stores this topic's new segments: none, or zstd per chunk "
                                     "(segments whose batches are compressed already are stored as they are). "
                                     "Kept by the proxy.",
    REMOTE_COPY_LAG_MS: "A closed range of the log is copied to the remote tier once its newest record is this old, "
                        "or once remote.copy.lag.bytes of newer data follow it. 0: at once; -1: local.retention.ms "
                        "(not applied if that is unlimited). Kept by the proxy.",
    REMOTE_COPY_LAG_BYTES: "A closed range of the log is copied to the remote tier once this many bytes of newer data "
                           "follow it, or once remote.copy.lag.ms has passed. 0: at once; -1: local.retention.bytes "
                           "(not applied if that is unlimited). Kept by the proxy.",
}
_TYPES = {REMOTE_STORAGE_ENABLE: TYPE_BOOLEAN, LOCAL_RETENTION_MS: TYPE_LONG, LOCAL_RETENTION_BYTES: TYPE_LONG,
          REMOTE_LOG_DISABLE_POLICY: TYPE_STRING, REMOTE_STORAGE_COMPRESSION_TYPE: TYPE_STRING,
          REMOTE_COPY_LAG_MS: TYPE_LONG, REMOTE_COPY_LAG_BYTES: TYPE_LONG}


class TopicConfigError(ValueError):
    """An alteration Kafka would refuse; ``code`` is the wire error for the resource."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


# KIP-950 names this TIERED_STORAGE_DISABLEMENT_IN_PROGRESS without a wire code. INVALID_CONFIG is
# not retriable, so admin clients report it instead of retrying until the disablement finishes
# (when the same request would then succeed as a no-op and hide the refusal).
DISABLEMENT_IN_PROGRESS_CODE = ErrorCode.INVALID_CONFIG


@dataclass(frozen=True)
class DescribedConfig:
    """One entry of a DescribeConfigs answer, as a broker describes its own configs."""

    name: str
    value: str | None
    source: int
    is_default: bool
    config_type: int
    documentation: str
    synonyms: tuple[tuple[str, str | None, int], ...]  # (name, value, source), most specific first


# Keys every broker that lists all of a topic's configs lists (Kafka, noida-db): a listing
# without them holds only the keys set on the topic (Tansu).
ALWAYS_LISTED = ("cleanup.policy", "retention.ms", "segment.bytes")


@dataclass(frozen=True)
class BrokerTopicConfigs:
    """One topic's configs as its broker's DescribeConfigs described them, split by who set them.

    The rule, the same wherever the proxy reads broker configs: for :data:`PROXY_DEFAULTED_KEYS`
    only the topic's own setting (config_source DYNAMIC_TOPIC_CONFIG) overrides the proxy's
    default: a broker's default (noida-db and Kafka 3.6+ list ``remote.storage.enable=false``
    and ``local.retention.*=-2`` as DEFAULT_CONFIG) or broker-level setting (STATIC/DYNAMIC
    broker config) does not. For the other keys (``cleanup.policy``) the value in effect counts,
    whoever set it. Entries without a source (DescribeConfigs v0) count as set when
    ``is_default`` is false.

    Tansu lists only the keys set on the topic and labels every one DEFAULT_CONFIG (measured,
    tests/UPSTREAMS.md). A listing whose entries are all DEFAULT_CONFIG and that lacks one of
    :data:`ALWAYS_LISTED` is such a listing: everything in it counts as set. (A Tansu topic that
    sets all of ALWAYS_LISTED would be read as a full listing and its own values dropped.)
    """

    in_effect: Mapping[str, str]  # every listed key with a value
    own: frozenset[str]  # the keys set on the topic itself
    only_set_keys: bool = False  # the listing held only set keys (Tansu)

    @classmethod
    def from_described(cls, entries: Iterable[Mapping[str, Any]]) -> BrokerTopicConfigs:
        """From the ``configs`` of one DescribeConfigs result (any version) listing all keys."""
        in_effect: dict[str, str] = {}
        own: set[str] = set()
        sources: list[int] = []
        for entry in entries:
            name, value = entry["name"], entry.get("value")
            if value is None:
                continue  # a sensitive value, which no rule here reads
            in_effect[name] = value
            source = entry.get("config_source")
            if source is None or source < 0:  # v0: no source, only is_default
                if not entry.get("is_default", False):
                    own.add(name)
                continue
            sources.append(source)
            if source == SOURCE_DYNAMIC_TOPIC_CONFIG:
                own.add(name)
        only_set = bool(sources) and all(s == SOURCE_DEFAULT_CONFIG for s in sources) and not all(
            key in in_effect for key in ALWAYS_LISTED)
        return cls(in_effect, frozenset(in_effect) if only_set else frozenset(own), only_set)

    def own_values(self) -> dict[str, str]:
        return {k: v for k, v in self.in_effect.items() if k in self.own}

    def tiering_values(self) -> dict[str, str]:
        """The tiering keys set on the topic at the broker (a broker that knows them)."""
        return {k: v for k, v in self.in_effect.items() if k in self.own and k in TIERING_KEYS}

    def applicable(self) -> dict[str, str]:
        """What the proxy's rules read: the topic's own values for the keys the proxy has a
        default for, the values in effect for the others."""
        return {k: v for k, v in self.in_effect.items() if k in self.own or k not in PROXY_DEFAULTED_KEYS}


def proxy_defaults(defaults: TieringConfig) -> dict[str, tuple[str, str, bool]]:
    """key -> (broker-level synonym, default value, whether the proxy's properties set it)."""
    base = TieringConfig()
    return {
        REMOTE_STORAGE_ENABLE: ("proxy.tier.all.topics", "true" if defaults.tier_all_topics else "false",
                                defaults.tier_all_topics),
        LOCAL_RETENTION_MS: ("log.local.retention.ms", str(defaults.local_retention_ms),
                             defaults.local_retention_ms != base.local_retention_ms),
        LOCAL_RETENTION_BYTES: ("log.local.retention.bytes", str(defaults.local_retention_bytes),
                                defaults.local_retention_bytes != base.local_retention_bytes),
        REMOTE_LOG_DISABLE_POLICY: ("", "retain", False),
        REMOTE_STORAGE_COMPRESSION_TYPE: ("remote.log.storage.compression.type", defaults.compression_type,
                                          defaults.compression_type != base.compression_type),
        REMOTE_COPY_LAG_MS: ("log.remote.copy.lag.ms", str(defaults.copy_lag_ms),
                             defaults.copy_lag_ms != base.copy_lag_ms),
        REMOTE_COPY_LAG_BYTES: ("log.remote.copy.lag.bytes", str(defaults.copy_lag_bytes),
                                defaults.copy_lag_bytes != base.copy_lag_bytes),
    }


def describe(topic_values: Mapping[str, str], defaults: TieringConfig,
             dynamic: Collection[str] = ()) -> list[DescribedConfig]:
    """The tiering keys of one topic as DescribeConfigs shows configs: the topic's own value
    (DYNAMIC_TOPIC_CONFIG) or the default, with the broker-level synonym where there is one
    (``dynamic``: the broker keys set as cluster-wide dynamic defaults)."""
    described = []
    for key, (synonym, default, set_in_properties) in proxy_defaults(defaults).items():
        default_source = SOURCE_STATIC_BROKER_CONFIG if set_in_properties else SOURCE_DEFAULT_CONFIG
        if synonym in dynamic:
            default_source, set_in_properties = SOURCE_DYNAMIC_DEFAULT_BROKER_CONFIG, True
        synonyms: list[tuple[str, str | None, int]] = []
        if key in topic_values:
            synonyms.append((key, topic_values[key], SOURCE_DYNAMIC_TOPIC_CONFIG))
        if synonym:
            synonyms.append((synonym, default, default_source))
        if key in topic_values:
            value, source, is_default = topic_values[key], SOURCE_DYNAMIC_TOPIC_CONFIG, False
        else:
            value, source, is_default = default, default_source, not set_in_properties
        described.append(DescribedConfig(key, value, source, is_default, _TYPES[key], _DOCS[key], tuple(synonyms)))
    return described


def _long(key: str, value: str, least: int = LOCAL_RETENTION_SAME_AS_TOTAL) -> int:
    try:
        number = int(value.strip())
    except ValueError:
        raise TopicConfigError(ErrorCode.INVALID_CONFIG, f"Invalid value {value} for configuration {key}: "
                                                         "Not a number of type LONG") from None
    if number < least:
        raise TopicConfigError(ErrorCode.INVALID_CONFIG,
                               f"Invalid value {value} for configuration {key}: Value must be at least {least}")
    return number


def _total(broker_configs: Mapping[str, str | None], key: str, default: int) -> int | None:
    raw = broker_configs.get(key)
    try:
        return int(raw) if raw not in (None, "") else default
    except ValueError:
        return None  # the broker rejects a bad retention value itself


def _validate_copy_lag(values: Mapping[str, str], local: Mapping[str, int], broker_configs: Mapping[str, str | None],
                       defaults: TieringConfig) -> None:
    """KIP-1241, as Kafka's LogConfig checks it: at least -1, and a positive lag no longer than the
    effective local retention (local.retention.*, or retention.* where that is -2) unless unlimited."""
    for key, local_key, total_key, local_default, total_default in (
            (REMOTE_COPY_LAG_MS, LOCAL_RETENTION_MS, "retention.ms", defaults.local_retention_ms, defaults.retention_ms),
            (REMOTE_COPY_LAG_BYTES, LOCAL_RETENTION_BYTES, "retention.bytes", defaults.local_retention_bytes,
             defaults.retention_bytes)):
        if key not in values:
            continue
        lag = _long(key, values[key], -1)
        effective = local.get(local_key, local_default)
        if effective == LOCAL_RETENTION_SAME_AS_TOTAL:
            effective = _total(broker_configs, total_key, total_default)
        if effective is not None and effective >= 0 and lag > effective:
            raise TopicConfigError(ErrorCode.INVALID_CONFIG, f"Invalid value {lag} for configuration {key}: Value "
                                                             f"must not exceed {local_key} (effective value: {effective})")


def validate(values: Mapping[str, str], broker_configs: Mapping[str, str | None], defaults: TieringConfig) -> None:
    """Raise :class:`TopicConfigError` if a topic may not have these tiering values, given its
    other configs after the same request (``cleanup.policy``, ``retention.ms``, ``retention.bytes``)."""
    enable = values.get(REMOTE_STORAGE_ENABLE)
    if enable is not None and enable.strip().lower() not in ("true", "false"):
        raise TopicConfigError(ErrorCode.INVALID_CONFIG, f"Invalid value {enable} for configuration "
                                                         f"{REMOTE_STORAGE_ENABLE}: Expected value to be either true or false")
    policy = values.get(REMOTE_LOG_DISABLE_POLICY)
    if policy is not None and policy.strip().lower() not in ("retain", "delete"):
        raise TopicConfigError(ErrorCode.INVALID_REQUEST, f"Invalid value {policy} for configuration "
                                                          f"{REMOTE_LOG_DISABLE_POLICY}: must be retain or delete")
    compression = values.get(REMOTE_STORAGE_COMPRESSION_TYPE)
    if compression is not None and compression.strip().lower() not in ("none", "zstd"):
        raise TopicConfigError(ErrorCode.INVALID_CONFIG, f"Invalid value {compression} for configuration "
                                                         f"{REMOTE_STORAGE_COMPRESSION_TYPE}: must be none or zstd")
    local = {key: _long(key, values[key]) for key in (LOCAL_RETENTION_MS, LOCAL_RETENTION_BYTES) if key in values}
    _validate_copy_lag(values, local, broker_configs, defaults)
    enabled = enable.strip().lower() == "true" if enable is not None else defaults.tier_all_topics
    if not enabled:
        return
    if "compact" in str(broker_configs.get("cleanup.policy") or "delete"):
        raise TopicConfigError(ErrorCode.INVALID_CONFIG, "Remote log storage is unsupported for the compacted topics")
    for key, total_key, default_total in ((LOCAL_RETENTION_MS, "retention.ms", defaults.retention_ms),
                                          (LOCAL_RETENTION_BYTES, "retention.bytes", defaults.retention_bytes)):
        if key not in local or local[key] == LOCAL_RETENTION_SAME_AS_TOTAL:
            continue
        total = _total(broker_configs, total_key, default_total)
        if total is None or total == -1:
            continue
        if local[key] == -1:
            raise TopicConfigError(ErrorCode.INVALID_CONFIG, f"Invalid value -1 for configuration {key}: Value must "
                                                             f"not be -1 as {total_key} value is set as {total}.")
        if local[key] > total:
            raise TopicConfigError(ErrorCode.INVALID_CONFIG, f"Invalid value {local[key]} for configuration {key}: "
                                                             f"Value must not be more than {total_key} property value: {total}")


def is_enabled(values: Mapping[str, str], defaults: TieringConfig) -> bool:
    enable = values.get(REMOTE_STORAGE_ENABLE)
    return enable.strip().lower() == "true" if enable is not None else defaults.tier_all_topics


def transition(current: TopicTieringState | None, topic: str, topic_id: uuid.UUID, values: Mapping[str, str],
               defaults: TieringConfig, now_ms: int, *, enable_named: bool) -> TopicTieringState:
    """The topic's state after its tiering values become ``values``. ``enable_named``: the
    request set or removed ``remote.storage.enable`` itself (only that is refused while
    DISABLING)."""
    if current is None or current.deleted or current.topic_id != topic_id:
        current = TopicTieringState(topic, topic_id, event_timestamp_ms=now_ms)
    enabled = is_enabled(values, defaults)
    state, epoch, policy = current.state, current.tiered_epoch, current.disable_policy
    if state == TieringState.DISABLING and enable_named:
        raise TopicConfigError(DISABLEMENT_IN_PROGRESS_CODE,
                               f"TIERED_STORAGE_DISABLEMENT_IN_PROGRESS: tiered storage of topic {topic} is still "
                               f"being disabled (tiered epoch {epoch}); change {REMOTE_STORAGE_ENABLE} once it is DISABLED")
    if enabled and state in (None, TieringState.DISABLED):
        state, epoch = TieringState.ENABLED, epoch + 1
    elif not enabled and state == TieringState.ENABLED:
        state, epoch = TieringState.DISABLING, epoch + 1
        policy = DisablePolicy[values.get(REMOTE_LOG_DISABLE_POLICY, "retain").strip().upper()]
    return replace(current, tiered_epoch=epoch, state=state, disable_policy=policy,
                   configs=tuple(sorted(values.items())), event_timestamp_ms=now_ms)
