"""Delayed upload (KIP-1241): which batches the copier may copy, the effective lags, the keys'
validation as Kafka's LogConfig does it, and remote expiry's rule (moved out of the copier)."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.errors import ErrorCode
from protocol.record_batch import BatchHeader
from tiering.config import TieringConfig, TopicTiering
from tiering.copy.copy_lag import UploadHorizon
from tiering.copy.remote_expiry import expired_segments
from tiering.model import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from tiering.topic_configs import TopicConfigError, describe, validate

TP = TopicIdPartition(uuid.uuid4(), "t", 0)
NOW = 1_000_000


def header(max_timestamp: int) -> BatchHeader:
    return BatchHeader(0, 100, 0, 2, 0, 0, 0, max_timestamp, max_timestamp, -1, -1, -1, 1)


def topic(**settings: int) -> TopicTiering:
    return TopicTiering.resolve(TieringConfig(), {"remote.storage.enable": "true",
                                                  **{k.replace("_", "."): str(v) for k, v in settings.items()}})


# --- the horizon -------------------------------------------------------------------------------


def test_time_lag_admits_batches_whose_newest_record_is_old_enough():
    horizon = UploadHorizon(lag_ms=60_000, lag_bytes=-1, now_ms=NOW)
    assert horizon.admits(header(NOW - 60_000), 100)
    assert not horizon.admits(header(NOW - 59_999), 100)
    assert horizon.held


def test_size_lag_admits_while_enough_newer_bytes_follow():
    horizon = UploadHorizon(lag_ms=-1, lag_bytes=250, now_ms=NOW)
    horizon.fetched(500, 0, 50, 50)  # the answer reaches the log end: exact
    assert horizon.admits(header(NOW), 100)  # 400 behind it
    assert horizon.admits(header(NOW), 100)  # 300
    assert not horizon.admits(header(NOW), 100)  # 200 < 250
    assert horizon.bytes_behind == 300


def test_an_unknown_size_admits_by_time_only():
    horizon = UploadHorizon(lag_ms=-1, lag_bytes=0, now_ms=NOW)
    assert not horizon.admits(header(0), 1)


def test_bytes_past_the_answer_are_estimated_from_its_bytes_per_offset():
    horizon = UploadHorizon(lag_ms=-1, lag_bytes=1000, now_ms=NOW)
    horizon.fetched(400, 100, 140, 200)  # 10 bytes per offset; 60 offsets after the answer: ~600 more
    assert horizon.bytes_behind == 1000
    assert not horizon.admits(header(NOW), 10)


@given(lag_ms=st.integers(-1, 10**6), lag_bytes=st.integers(-1, 10**6), behind=st.none() | st.integers(0, 10**7),
       ages=st.lists(st.integers(-1, 10**6), max_size=20), sizes=st.lists(st.integers(61, 10**5), max_size=20))
def test_the_horizon_admits_a_prefix_and_only_what_passes_a_check(lag_ms, lag_bytes, behind, ages, sizes):
    horizon = UploadHorizon(lag_ms, lag_bytes, NOW)
    if behind is not None:
        horizon.fetched(behind, 0, 10, 10)
    remaining = behind
    for age, size in zip(ages, sizes, strict=False):
        timestamp = NOW - age if age >= 0 else -1
        old = lag_ms >= 0 and (timestamp < 0 or NOW - timestamp >= lag_ms)
        far = lag_bytes >= 0 and remaining is not None and remaining - size >= lag_bytes
        assert horizon.admits(header(timestamp), size) == (old or far)
        if not (old or far):
            break  # the copier stops at the first batch held back
        remaining = None if remaining is None else remaining - size


# --- effective lags ------------------------------------------------------------------------------


def test_defaults_upload_at_once():
    assert topic().uploads_at_once
    assert not topic(remote_copy_lag_ms=1000).uploads_at_once
    assert topic(remote_copy_lag_ms=1000, remote_copy_lag_bytes=0).uploads_at_once


def test_minus_one_takes_the_local_retention_and_unlimited_leaves_the_check_out():
    t = topic(remote_copy_lag_ms=-1, remote_copy_lag_bytes=-1, local_retention_ms=60_000, local_retention_bytes=-2,
              retention_bytes=5_000_000)
    assert t.effective_copy_lag == (60_000, 5_000_000)
    t = topic(remote_copy_lag_ms=-1, local_retention_ms=-1)
    assert t.effective_copy_lag == (-1, -1)
    assert topic(remote_copy_lag_ms=5, remote_copy_lag_bytes=7).effective_copy_lag == (5, 7)


def test_broker_level_defaults_come_from_the_properties():
    config = TieringConfig.from_properties({"log.remote.copy.lag.ms": "30000", "log.remote.copy.lag.bytes": "100"})
    assert (config.copy_lag_ms, config.copy_lag_bytes) == (30_000, 100)
    with pytest.raises(ValueError, match="log.remote.copy.lag.ms must be at least -1"):
        TieringConfig.from_properties({"log.remote.copy.lag.ms": "-2"})


# --- validation and DescribeConfigs ------------------------------------------------------------------


@pytest.mark.parametrize("values, others, message", [
    ({"remote.copy.lag.ms": "2000", "local.retention.ms": "1000"}, {},
     "Invalid value 2000 for configuration remote.copy.lag.ms: Value must not exceed local.retention.ms "
     "(effective value: 1000)"),
    ({"remote.copy.lag.bytes": "11"}, {"retention.bytes": "10"},
     "Invalid value 11 for configuration remote.copy.lag.bytes: Value must not exceed local.retention.bytes "
     "(effective value: 10)"),
    ({"remote.copy.lag.ms": "-2"}, {}, "Invalid value -2 for configuration remote.copy.lag.ms: Value must be at least -1"),
    ({"remote.copy.lag.bytes": "x"}, {}, "Invalid value x for configuration remote.copy.lag.bytes: Not a number of type LONG"),
])
def test_copy_lag_validation_as_kafka(values, others, message):
    with pytest.raises(TopicConfigError) as refused:
        validate({"remote.storage.enable": "true", **values}, others, TieringConfig())
    assert (refused.value.code, refused.value.message) == (ErrorCode.INVALID_CONFIG, message)


@pytest.mark.parametrize("values, others", [
    ({"remote.copy.lag.ms": "1000", "local.retention.ms": "1000"}, {}),
    ({"remote.copy.lag.ms": "10000", "local.retention.ms": "-1"}, {"retention.ms": "-1"}),  # unlimited
    ({"remote.copy.lag.ms": "-1", "remote.copy.lag.bytes": "0"}, {"retention.bytes": "10"}),
    ({"remote.copy.lag.bytes": "10"}, {"retention.bytes": "10"}),
])
def test_copy_lag_validation_accepts(values, others):
    validate({"remote.storage.enable": "true", **values}, others, TieringConfig())


def test_describe_shows_the_lags_with_their_broker_synonyms():
    shown = {d.name: d for d in describe({"remote.copy.lag.ms": "5000"}, TieringConfig(copy_lag_bytes=1 << 20))}
    assert shown["remote.copy.lag.ms"].value == "5000"
    assert shown["remote.copy.lag.ms"].synonyms[1] == ("log.remote.copy.lag.ms", "0", 5)
    assert shown["remote.copy.lag.bytes"].value == str(1 << 20)
    assert shown["remote.copy.lag.bytes"].synonyms == (("log.remote.copy.lag.bytes", str(1 << 20), 4),)


# --- remote expiry ----------------------------------------------------------------------------------


def seg(start: int, end: int, size: int, max_ts: int) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(RemoteLogSegmentId(TP, uuid.uuid4()), start, end, max_ts, 0, 0, size, ((0, start),),
                                    RemoteLogSegmentState.COPY_SEGMENT_FINISHED)


def test_expiry_below_the_floor_then_by_time_and_size():
    segments = [seg(10 * i, 10 * i + 9, 10, 100 * (i + 1)) for i in range(4)]
    gone = expired_segments(segments, 15, -1, -1, 0, True, 1000)
    assert [(s.start_offset, why) for s, why in gone] == [(0, "below log start 15")]
    assert [s.start_offset for s, _ in expired_segments(segments, 0, 750, -1, 0, True, 1000)] == [0, 10]
    assert [s.start_offset for s, _ in expired_segments(segments, 0, -1, 20, 0, True, 1000)] == [0, 10]
    assert [s.start_offset for s, _ in expired_segments(segments, 0, -1, 20, 10, True, 1000)] == [0, 10, 20]
    # The newest stays while nothing newer is staged, however old.
    assert [s.start_offset for s, _ in expired_segments(segments, 0, 0, -1, 0, True, 10**9)] == [0, 10, 20]
    assert len(expired_segments(segments, 0, 0, -1, 0, False, 10**9)) == 4


@given(st.lists(st.tuples(st.integers(1, 100), st.integers(0, 1000)), max_size=12), st.integers(0, 200),
       st.integers(-1, 2000), st.integers(-1, 500), st.integers(0, 100), st.booleans())
def test_expiry_takes_the_oldest_first_and_keeps_what_the_limits_allow(shape, floor, limit_ms, limit_bytes, staged,
                                                                       keep_newest):
    segments, start = [], 0
    for size, ts in shape:
        segments.append(seg(start, start + 9, size, ts))
        start += 10
    gone = [s for s, _ in expired_segments(segments, floor, limit_ms, limit_bytes, staged, keep_newest, 1000)]
    assert gone == segments[:len(gone)]  # a prefix, oldest first
    kept = segments[len(gone):]
    assert all(s.end_offset >= floor for s in kept)
    if kept and (len(kept) > 1 or not keep_newest):
        first = kept[0]
        assert not (limit_ms >= 0 and first.max_timestamp_ms < 1000 - limit_ms)
        assert not (limit_bytes >= 0 and sum(s.segment_size_bytes for s in kept) + staged - first.segment_size_bytes
                    >= limit_bytes)
