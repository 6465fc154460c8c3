"""The proxy's KIP-227 session cache, driven directly; the same rules through a live proxy are in
tests/integration/test_fetch_sessions.py."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.errors import ErrorCode
from proxy.filters.fetch_sessions import FetchSessionCache, FetchSessionError, next_epoch, upstream_topics


def _request(session_id: int, epoch: int, partitions: dict[tuple[str, int], int],
             forgotten: dict[str, list[int]] | None = None) -> dict[str, Any]:
    topics: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), offset in partitions.items():
        topics.setdefault(topic, []).append({"partition": partition, "fetch_offset": offset,
                                             "partition_max_bytes": 1 << 20})
    return {"session_id": session_id, "session_epoch": epoch,
            "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
            "forgotten_topics_data": [{"topic": t, "partitions": ps} for t, ps in (forgotten or {}).items()]}


def _response(parts: dict[tuple[str, int], tuple[int, bytes]]) -> dict[str, Any]:
    topics: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), (hw, records) in parts.items():
        topics.setdefault(topic, []).append({"partition_index": partition, "error_code": 0, "high_watermark": hw,
                                             "last_stable_offset": hw, "log_start_offset": 0, "records": records})
    return {"session_id": 0, "responses": [{"topic": t, "partitions": ps} for t, ps in topics.items()]}


def _answered(response: dict[str, Any]) -> set[tuple[str, int]]:
    return {(t["topic"], p["partition_index"]) for t in response["responses"] for p in t["partitions"]}


def test_full_then_incremental_only_changed_partitions():
    cache = FetchSessionCache()
    ctx = cache.context(1, _request(0, 0, {("a", 0): 0, ("a", 1): 0}), "topic")
    response = _response({("a", 0): (5, b"x"), ("a", 1): (0, b"")})
    ctx.shape_response(response, "topic")
    session_id = response["session_id"]
    assert session_id != 0 and _answered(response) == {("a", 0), ("a", 1)}

    ctx = cache.context(1, _request(session_id, 1, {("a", 0): 5}), "topic")
    assert [k for k, _ in ctx.partitions] == [("a", 0), ("a", 1)]  # the whole session goes upstream
    assert dict((k, p["fetch_offset"]) for k, p in ctx.partitions) == {("a", 0): 5, ("a", 1): 0}
    response = _response({("a", 0): (5, b""), ("a", 1): (0, b"")})
    ctx.shape_response(response, "topic")
    assert response["session_id"] == session_id and _answered(response) == set()

    ctx = cache.context(1, _request(session_id, 2, {}), "topic")
    response = _response({("a", 0): (5, b""), ("a", 1): (3, b"yyy")})
    ctx.shape_response(response, "topic")
    assert _answered(response) == {("a", 1)}


def test_errors_and_moved_log_start_are_always_told():
    cache = FetchSessionCache()
    ctx = cache.context(None, _request(0, 0, {("a", 0): 0}), "topic")
    response = _response({("a", 0): (5, b"")})
    ctx.shape_response(response, "topic")
    sid = response["session_id"]
    for epoch, change in ((1, {"error_code": ErrorCode.NOT_LEADER_OR_FOLLOWER}), (2, {"log_start_offset": 3}),
                          (3, {"last_stable_offset": 4})):
        ctx = cache.context(None, _request(sid, epoch, {}), "topic")
        response = _response({("a", 0): (5, b"")})
        response["responses"][0]["partitions"][0].update(change)
        if "last_stable_offset" not in change:
            response["responses"][0]["partitions"][0]["last_stable_offset"] = 4
        ctx.shape_response(response, "topic")
        assert _answered(response) == {("a", 0)}, change


def test_unknown_session_wrong_epoch_and_close():
    cache = FetchSessionCache()
    with pytest.raises(FetchSessionError) as e:
        cache.context(1, _request(12345, 1, {}), "topic")
    assert e.value.code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    ctx = cache.context(1, _request(0, 0, {("a", 0): 0}), "topic")
    sid = ctx.response_session_id
    with pytest.raises(FetchSessionError) as e:
        cache.context(1, _request(sid, 2, {}), "topic")
    assert e.value.code == ErrorCode.INVALID_FETCH_SESSION_EPOCH
    with pytest.raises(FetchSessionError) as e:  # another listener (broker port) does not know it
        cache.context(2, _request(sid, 1, {}), "topic")
    assert e.value.code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    cache.context(1, _request(sid, 1, {}), "topic")  # the wrong epoch did not use up epoch 1
    ctx = cache.context(1, _request(sid, -1, {("a", 0): 7}), "topic")
    assert ctx.session is None and ctx.response_session_id == 0
    assert [(k, p["fetch_offset"]) for k, p in ctx.partitions] == [(("a", 0), 7)]
    with pytest.raises(FetchSessionError):
        cache.context(1, _request(sid, 2, {}), "topic")
    assert len(cache) == 0


def test_forgotten_partitions_leave_the_session():
    cache = FetchSessionCache()
    sid = cache.context(1, _request(0, 0, {("a", 0): 0, ("a", 1): 0, ("b", 0): 0}), "topic").response_session_id
    ctx = cache.context(1, _request(sid, 1, {("c", 0): 9}, forgotten={"a": [1], "b": [0]}), "topic")
    assert [k for k, _ in ctx.partitions] == [("a", 0), ("c", 0)]
    assert upstream_topics(ctx.partitions, "topic") == [
        {"topic": "a", "partitions": [ctx.partitions[0][1]]}, {"topic": "c", "partitions": [ctx.partitions[1][1]]}]


def test_full_cache_evicts_only_idle_sessions():
    now = [0.0]
    cache = FetchSessionCache(max_slots=2, min_eviction_ms=1000, clock=lambda: now[0])
    first = cache.context(1, _request(0, 0, {("a", 0): 0}), "topic").response_session_id
    now[0] = 0.5
    cache.context(1, _request(0, 0, {("a", 0): 0}), "topic")
    assert cache.context(1, _request(0, 0, {("a", 0): 0}), "topic").response_session_id == 0  # all busy
    now[0] = 1.2
    third = cache.context(1, _request(0, 0, {("a", 0): 0}), "topic").response_session_id
    assert third != 0 and cache.get(1, first) is None and len(cache) == 2


def test_epochs_wrap_to_one():
    assert next_epoch(0) == 1 and next_epoch(0x7FFFFFFF) == 1


_ops = st.lists(st.tuples(st.sampled_from(["add", "forget", "fetch"]), st.integers(0, 5), st.integers(0, 100)),
                max_size=40)


@settings(max_examples=200, deadline=None)
@given(_ops)
def test_session_tracks_the_partitions_and_offsets_a_model_would(ops):
    """Any sequence of incremental requests leaves the session holding exactly the partitions a
    plain dictionary model holds, with the last offset sent for each."""
    cache = FetchSessionCache()
    sid = cache.context(7, _request(0, 0, {("t", 0): 0}), "topic").response_session_id
    model = {("t", 0): 0}
    epoch = 1
    for op, partition, offset in ops:
        key = ("t", partition)
        if op == "add":
            ctx = cache.context(7, _request(sid, epoch, {key: offset}), "topic")
            model[key] = offset
        elif op == "forget":
            ctx = cache.context(7, _request(sid, epoch, {}, forgotten={"t": [partition]}), "topic")
            model.pop(key, None)
        else:
            ctx = cache.context(7, _request(sid, epoch, {}), "topic")
        epoch = next_epoch(epoch)
        assert {k: p["fetch_offset"] for k, p in ctx.partitions} == model
