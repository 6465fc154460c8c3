"""The per-topic tiering rules: Kafka's validation, DescribeConfigs entries, KIP-950 transitions,
and how the metadata state serves them (readable partitions, log start floors)."""

from __future__ import annotations

import uuid
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.errors import ErrorCode
from tests.unit.test_broker_topic_configs import noida, tansu
from tiering.config import TieringConfig
from tiering.metadata.journal_store import FileMetadataStore
from tiering.metadata.state import InvalidStateTransitionError
from tiering.model import (
    DisablePolicy,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TieringState,
    TopicIdPartition,
    TopicTieringState,
)
from tiering.topic_configs import (
    DISABLEMENT_IN_PROGRESS_CODE,
    SOURCE_DEFAULT_CONFIG,
    SOURCE_DYNAMIC_TOPIC_CONFIG,
    SOURCE_STATIC_BROKER_CONFIG,
    TIERING_KEYS,
    BrokerTopicConfigs,
    TopicConfigError,
    describe,
    transition,
    validate,
)

DEFAULTS = TieringConfig()
TOPIC_ID = uuid.uuid4()


def step(state: TopicTieringState | None, values: dict[str, str], named: bool = True) -> TopicTieringState:
    return transition(state, "t", TOPIC_ID, values, DEFAULTS, 1, enable_named=named)


def test_enable_disable_reenable_raise_the_tiered_epoch():
    enabled = step(None, {"remote.storage.enable": "true"})
    assert (enabled.state, enabled.tiered_epoch) == (TieringState.ENABLED, 1)
    disabling = step(enabled, {"remote.storage.enable": "false", "remote.log.disable.policy": "delete"})
    assert (disabling.state, disabling.tiered_epoch, disabling.disable_policy) == (
        TieringState.DISABLING, 2, DisablePolicy.DELETE)
    assert not disabling.remote_readable and not disabling.copying
    disabled = TopicTieringState(**{**disabling.__dict__, "state": TieringState.DISABLED})
    again = step(disabled, {"remote.storage.enable": "true"})
    assert (again.state, again.tiered_epoch) == (TieringState.ENABLED, 3)
    assert again.copying and again.remote_readable


def test_retain_keeps_remote_data_readable():
    disabling = step(step(None, {"remote.storage.enable": "true"}), {"remote.storage.enable": "false"})
    assert disabling.disable_policy == DisablePolicy.RETAIN and disabling.remote_readable


def test_disabling_refuses_a_second_disable_and_a_reenable_but_not_other_keys():
    disabling = step(step(None, {"remote.storage.enable": "true"}), {"remote.storage.enable": "false"})
    for values in ({"remote.storage.enable": "false"}, {"remote.storage.enable": "true"}):
        with pytest.raises(TopicConfigError) as refused:
            step(disabling, values)
        assert refused.value.code == DISABLEMENT_IN_PROGRESS_CODE
        assert "TIERED_STORAGE_DISABLEMENT_IN_PROGRESS" in refused.value.message
    kept = step(disabling, {"remote.storage.enable": "false", "local.retention.ms": "1000"}, named=False)
    assert kept.state == TieringState.DISABLING and kept.tiered_epoch == disabling.tiered_epoch


def test_a_new_topic_id_starts_a_new_lifecycle():
    old = step(None, {"remote.storage.enable": "true"})
    new = transition(old, "t", uuid.uuid4(), {"remote.storage.enable": "true"}, DEFAULTS, 2, enable_named=True)
    assert new.topic_id != old.topic_id and new.tiered_epoch == 1


@pytest.mark.parametrize("values, others, code", [
    ({"remote.storage.enable": "yes"}, {}, ErrorCode.INVALID_CONFIG),
    ({"remote.log.disable.policy": "archive"}, {}, ErrorCode.INVALID_REQUEST),
    ({"remote.storage.enable": "true"}, {"cleanup.policy": "compact"}, ErrorCode.INVALID_CONFIG),
    ({"remote.storage.enable": "true"}, {"cleanup.policy": "compact,delete"}, ErrorCode.INVALID_CONFIG),
    ({"remote.storage.enable": "true", "local.retention.ms": "2000"}, {"retention.ms": "1000"}, ErrorCode.INVALID_CONFIG),
    ({"remote.storage.enable": "true", "local.retention.bytes": "-1"}, {"retention.bytes": "10"}, ErrorCode.INVALID_CONFIG),
    ({"local.retention.ms": "-3"}, {}, ErrorCode.INVALID_CONFIG),
    ({"local.retention.bytes": "lots"}, {}, ErrorCode.INVALID_CONFIG),
])
def test_validation_as_kafka(values, others, code):
    with pytest.raises(TopicConfigError) as refused:
        validate(values, others, DEFAULTS)
    assert refused.value.code == code


@pytest.mark.parametrize("values, others", [
    ({"remote.storage.enable": "true", "local.retention.ms": "1000"}, {"retention.ms": "1000"}),
    ({"remote.storage.enable": "true", "local.retention.ms": "-1"}, {"retention.ms": "-1"}),
    ({"remote.storage.enable": "true", "local.retention.bytes": "-2"}, {"retention.bytes": "10"}),
    ({"remote.storage.enable": "false", "local.retention.ms": "5000"}, {"retention.ms": "1000", "cleanup.policy": "compact"}),
])
def test_validation_accepts(values, others):
    validate(values, others, DEFAULTS)


def test_describe_shows_sources_and_synonyms():
    shown = {d.name: d for d in describe({"remote.storage.enable": "true"}, TieringConfig(local_retention_bytes=4096))}
    enable = shown["remote.storage.enable"]
    assert (enable.value, enable.source, enable.is_default) == ("true", SOURCE_DYNAMIC_TOPIC_CONFIG, False)
    assert enable.synonyms[0] == ("remote.storage.enable", "true", SOURCE_DYNAMIC_TOPIC_CONFIG)
    local = shown["local.retention.bytes"]
    assert (local.value, local.source) == ("4096", SOURCE_STATIC_BROKER_CONFIG)
    assert local.synonyms == (("log.local.retention.bytes", "4096", SOURCE_STATIC_BROKER_CONFIG),)
    policy = shown["remote.log.disable.policy"]
    assert (policy.value, policy.source, policy.is_default) == ("retain", SOURCE_DEFAULT_CONFIG, True)


@pytest.mark.parametrize("defaults, expected", [
    (TieringConfig(), {"remote.storage.enable": ("false", SOURCE_DEFAULT_CONFIG),
                       "local.retention.ms": ("-2", SOURCE_DEFAULT_CONFIG),
                       "local.retention.bytes": ("-2", SOURCE_DEFAULT_CONFIG),
                       "remote.log.disable.policy": ("retain", SOURCE_DEFAULT_CONFIG),
                       "remote.storage.compression.type": ("none", SOURCE_DEFAULT_CONFIG),
                       "remote.copy.lag.ms": ("0", SOURCE_DEFAULT_CONFIG),
                       "remote.copy.lag.bytes": ("-1", SOURCE_DEFAULT_CONFIG)}),
    (TieringConfig(tier_all_topics=True, local_retention_ms=60_000),
     {"remote.storage.enable": ("true", SOURCE_STATIC_BROKER_CONFIG),
      "local.retention.ms": ("60000", SOURCE_STATIC_BROKER_CONFIG),
      "local.retention.bytes": ("-2", SOURCE_DEFAULT_CONFIG),
      "remote.log.disable.policy": ("retain", SOURCE_DEFAULT_CONFIG),
      "remote.storage.compression.type": ("none", SOURCE_DEFAULT_CONFIG),
      "remote.copy.lag.ms": ("0", SOURCE_DEFAULT_CONFIG),
      "remote.copy.lag.bytes": ("-1", SOURCE_DEFAULT_CONFIG)}),
])
def test_describe_a_topic_the_proxy_has_no_record_of(defaults, expected):
    """What noida-db lists as defaults (remote.storage.enable=false, local.retention.*=-2 at
    DEFAULT_CONFIG) never shows: the proxy's defaults do, with the source Kafka would give them."""
    values = BrokerTopicConfigs.from_described(noida()).tiering_values()
    shown = {d.name: (d.value, d.source) for d in describe(values, defaults)}
    assert shown == expected


def test_describe_shows_tiering_values_set_at_the_broker_as_the_topics_own():
    for listing in (noida(**{"local.retention.ms": "60000"}), tansu(**{"local.retention.ms": "60000"})):
        values = BrokerTopicConfigs.from_described(listing).tiering_values()
        shown = {d.name: d for d in describe(values, TieringConfig(tier_all_topics=True))}
        assert list(shown) == list(TIERING_KEYS)
        local = shown["local.retention.ms"]
        assert (local.value, local.source, local.is_default) == ("60000", SOURCE_DYNAMIC_TOPIC_CONFIG, False)
        assert local.synonyms == (("local.retention.ms", "60000", SOURCE_DYNAMIC_TOPIC_CONFIG),
                                  ("log.local.retention.ms", "-2", SOURCE_DEFAULT_CONFIG))
        assert (shown["remote.storage.enable"].value, shown["remote.storage.enable"].source) == (
            "true", SOURCE_STATIC_BROKER_CONFIG)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["on", "off-retain", "off-delete", "finish", "other"]), max_size=30))
def test_lifecycle_model(actions):
    """Any sequence of alterations: the epoch only grows, DISABLING is left only by finishing,
    and remote data is readable exactly when no delete-policy disablement is under way or done."""
    state: TopicTieringState | None = None
    for action in actions:
        before = state
        try:
            if action == "finish":
                if state is not None and state.state == TieringState.DISABLING:
                    state = TopicTieringState(**{**state.__dict__, "state": TieringState.DISABLED})
                continue
            values = {"on": {"remote.storage.enable": "true"},
                      "off-retain": {"remote.storage.enable": "false"},
                      "off-delete": {"remote.storage.enable": "false", "remote.log.disable.policy": "delete"},
                      "other": dict(state.configs) if state else {}}[action]
            state = step(state, values, named=action != "other")
        except TopicConfigError:
            assert before is not None and before.state == TieringState.DISABLING
            continue
        if before is not None:
            assert state.tiered_epoch >= before.tiered_epoch
            if before.state == TieringState.DISABLING:
                assert state.state == TieringState.DISABLING
        deleting = state.state in (TieringState.DISABLING, TieringState.DISABLED) and \
            state.disable_policy == DisablePolicy.DELETE
        assert state.remote_readable == (not deleting)


def _segment(tp: TopicIdPartition, start: int, end: int) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(RemoteLogSegmentId(tp, uuid.uuid4()), start, end, 0, 0, 0, 100, ((0, start),),
                                    RemoteLogSegmentState.COPY_SEGMENT_FINISHED)


def test_readable_partitions_and_log_start_floor(tmp_path):
    store = FileMetadataStore(tmp_path)
    old = TopicIdPartition(uuid.uuid4(), "t", 0)
    new = TopicIdPartition(uuid.uuid4(), "t", 0)
    other = TopicIdPartition(uuid.uuid4(), "u", 0)
    for tp in (old, new, other):
        segment = _segment(tp, 0, 99)
        store.add_remote_log_segment_metadata(replace(segment, state=RemoteLogSegmentState.COPY_SEGMENT_STARTED))
        store.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(
            segment.segment_id, 1, RemoteLogSegmentState.COPY_SEGMENT_FINISHED, 0))
    store.put_topic_tiering_state(TopicTieringState("t", new.topic_id, 1, TieringState.ENABLED))
    store.put_remote_partition_delete_metadata(
        RemotePartitionDeleteMetadata(old, RemotePartitionDeleteState.DELETE_PARTITION_MARKED, 0, -1))
    assert store.readable_partitions() == sorted([new, other])
    store.put_remote_log_start_offset(new, 40, 0)
    assert store.segment_for_offset(new, 39) is None and store.segment_for_offset(new, 40) is not None
    with pytest.raises(InvalidStateTransitionError):
        store.put_remote_log_start_offset(new, 39, 0)
    with pytest.raises(InvalidStateTransitionError):
        store.put_topic_tiering_state(TopicTieringState("t", new.topic_id, 0, TieringState.ENABLED))
    store.put_topic_tiering_state(TopicTieringState("t", new.topic_id, 2, TieringState.DISABLING,
                                                    DisablePolicy.DELETE))
    assert store.readable_partitions() == [other]
    store.close()
    reopened = FileMetadataStore(tmp_path)  # replayed from the journal
    assert reopened.remote_log_start_offset(new) == 40
    assert reopened.topic_tiering_state("t").state == TieringState.DISABLING
    reopened.compact()
    reopened.close()
    compacted = FileMetadataStore(tmp_path)
    assert compacted.remote_log_start_offset(new) == 40 and compacted.readable_partitions() == [other]
    compacted.close()
