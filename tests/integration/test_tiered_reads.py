"""Consumers read a topic's whole history through the proxy after the brokers' log start has moved
past most of it: the old part comes from the remote tier, the rest from the broker.

The truth every check compares with is the broker's own answer, read directly (confluent-kafka)
before the proxy starts and before anything leaves the broker."""

from __future__ import annotations

import urllib.request

import pytest

from protocol.apis import LIST_OFFSETS
from protocol.errors import ErrorCode
from tests.clients import CLIENTS, Record, consume_records
from tests.history import History
from tests.proxy_process import ProxyProcess
from tests.raw import RawClient
from tiering.broker_client import EARLIEST, LATEST, BrokerClient

PARTITIONS = 3


@pytest.fixture(params=["history44", "history39"], ids=["kafka-4.4", "kafka-3.9"])
def history(request) -> History:
    """The tiering core is proven on Apache Kafka 4.4 and 3.9."""
    return request.getfixturevalue(request.param)


def _same(got: dict[int, list[Record]], want: dict[int, list[Record]]) -> None:
    for partition, records in want.items():
        mine = got.get(partition, [])
        missing = sorted({r.offset for r in records} - {r.offset for r in mine})
        extra = sorted({r.offset for r in mine} - {r.offset for r in records})
        assert len(mine) == len(records), (
            f"partition {partition}: {len(mine)} records, want {len(records)}; "
            f"missing {len(missing)} {missing[:3]}..{missing[-3:]}, unexpected {len(extra)} {extra[:3]}..{extra[-3:]}")
        for a, b in zip(mine, records, strict=True):
            assert a == b, f"partition {partition} offset {b.offset}: got {a}"


@pytest.mark.parametrize("client", CLIENTS)
def test_read_committed_consumers_read_the_whole_history(history, client):
    total = sum(len(v) for v in history.committed.values())
    got = consume_records(client, history.proxy.bootstrap, history.topic, PARTITIONS, total)
    _same(got, history.committed)
    assert all(not r.value.startswith(b"tx") or r.value.split(b"-")[0] not in (b"tx2", b"tx5", b"tx8")
               for records in got.values() for r in records), "an aborted record reached a read_committed consumer"


def test_read_uncommitted_consumer_sees_aborted_records_too(history):
    total = sum(len(v) for v in history.everything.values())
    got = consume_records("confluent", history.proxy.bootstrap, history.topic, PARTITIONS, total,
                          isolation="read_uncommitted")
    _same(got, history.everything)


def test_the_broker_itself_no_longer_has_the_start(history):
    """What makes the tests above meaningful: offset 0 is gone from the broker."""
    client = BrokerClient(history.broker.bootstrap)
    leader = client.metadata([history.topic])[history.topic].partitions[0].leader
    for partition in range(PARTITIONS):
        answer = client.fetch(leader, history.topic, partition, 0, max_bytes=1 << 20, read_committed=False)
        assert answer.error_code == ErrorCode.OFFSET_OUT_OF_RANGE
        # The proxy keeps tiering and trimming while tests run, so the start only moves forward.
        # (Kafka's error answer carries no log start: ask for it.)
        log_start = client.list_offset(leader, history.topic, partition, EARLIEST)[1]
        assert log_start >= history.log_starts[partition] > 0


def _list_offsets(proxy: ProxyProcess, topic: str, version: int, timestamps: dict[int, int]) -> dict[int, tuple]:
    client = RawClient(proxy.bootstrap)
    try:
        answer = client.request(LIST_OFFSETS, version, {
            "replica_id": -1, "isolation_level": 0, "timeout_ms": 5000,
            "topics": [{"name": topic, "partitions": [
                {"partition_index": p, "current_leader_epoch": -1, "timestamp": t} for p, t in timestamps.items()]}]})
    finally:
        client.close()
    (result,) = answer["topics"]
    return {p["partition_index"]: (p["error_code"], p["offset"], p["timestamp"], p["leader_epoch"])
            for p in result["partitions"]}


@pytest.mark.parametrize("version", [8, 10])
def test_list_offsets_special_timestamps(history, version):
    """-2 is Rx (0 here), -4 the broker's own log start Lx, -5 the last tiered offset Ry, -1 the end;
    v10 is answered on Kafka 3.9 too, which stops at v9 (the proxy translates)."""
    broker = BrokerClient(history.broker.bootstrap)
    leader = broker.metadata([history.topic])[history.topic].partitions[0].leader
    for partition in range(PARTITIONS):
        ranges_before = history.remote_range(partition)
        lx_before = broker.list_offset(leader, history.topic, partition, EARLIEST)[1]
        got = {t: _list_offsets(history.proxy, history.topic, version, {partition: t})[partition]
               for t in (-1, -2, -4, -5)}
        lx_after = broker.list_offset(leader, history.topic, partition, EARLIEST)[1]
        ranges_after = history.remote_range(partition)
        assert all(error == ErrorCode.NONE for error, *_ in got.values()), got
        assert got[-2][1] == 0
        assert lx_before <= got[-4][1] <= lx_after and got[-4][1] > 0
        assert ranges_before is not None and ranges_after is not None
        assert ranges_before[1] <= got[-5][1] <= ranges_after[1]
        assert got[-5][1] >= got[-4][1] - 1  # nothing left the broker before it was tiered
        assert got[-1][1] == broker.list_offset(leader, history.topic, partition, LATEST)[1]


def test_list_offsets_latest_tiered_without_tiered_data_is_minus_one(history, unique_name):
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic

    admin = KafkaAdminClient(bootstrap_servers=history.proxy.bootstrap)
    admin.create_topics([NewTopic(unique_name, 1, 1)])
    admin.close()
    got = _list_offsets(history.proxy, unique_name, 10, {0: -5})[0]
    assert got[:2] == (ErrorCode.NONE, -1)
    assert _list_offsets(history.proxy, unique_name, 10, {0: -4})[0][:2] == (ErrorCode.NONE, 0)


def test_seek_by_timestamp_into_the_remote_range(history):
    """offsets_for_times through the proxy lands on the first record at or after the timestamp,
    for timestamps whose records left the broker long ago."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=history.proxy.bootstrap)
    try:
        for partition in range(PARTITIONS):
            records = history.everything[partition]
            lx = history.log_starts[partition]
            for target in (records[1].timestamp, records[lx // 3].timestamp, records[lx // 2].timestamp + 1):
                want = next(r.offset for r in records if r.timestamp >= target)
                assert want < lx  # the answer is in the remote tier
                tp = TopicPartition(history.topic, partition)
                found = consumer.offsets_for_times({tp: target})[tp]
                assert found is not None and (found.offset, found.timestamp) == (
                    want, next(r.timestamp for r in records if r.offset == want)), (partition, target)
    finally:
        consumer.close()


def test_list_offsets_earliest_and_latest_through_a_client(history):
    from kafka import KafkaConsumer, TopicPartition

    broker = BrokerClient(history.broker.bootstrap)
    leader = broker.metadata([history.topic])[history.topic].partitions[0].leader
    consumer = KafkaConsumer(bootstrap_servers=history.proxy.bootstrap)
    try:
        tps = [TopicPartition(history.topic, p) for p in range(PARTITIONS)]
        assert consumer.beginning_offsets(tps) == {tp: 0 for tp in tps}
        ends = consumer.end_offsets(tps)
        assert ends == {tp: broker.list_offset(leader, history.topic, tp.partition, LATEST)[1] for tp in tps}
    finally:
        consumer.close()


def test_offset_for_leader_epoch_through_the_proxy(history):
    """What a client asks when it validates its position: the end of its leader epoch. The
    partition's leader never changed (epoch 0), so the answer is the end of the log, whichever
    tier the position is in."""
    from protocol.apis import OFFSET_FOR_LEADER_EPOCH

    broker = BrokerClient(history.broker.bootstrap)
    leader = broker.metadata([history.topic])[history.topic].partitions[0].leader
    client = RawClient(history.proxy.bootstrap)
    try:
        answer = client.request(OFFSET_FOR_LEADER_EPOCH, 4, {"replica_id": -1, "topics": [{
            "topic": history.topic,
            "partitions": [{"partition": p, "current_leader_epoch": -1, "leader_epoch": 0} for p in range(PARTITIONS)]}]})
    finally:
        client.close()
    for p in answer["topics"][0]["partitions"]:
        assert (p["error_code"], p["leader_epoch"]) == (ErrorCode.NONE, 0)
        assert p["end_offset"] == broker.list_offset(leader, history.topic, p["partition"], LATEST)[1]


# The oldest versions in use (tests/UPSTREAMS.md's matrix): Fetch v4 and ListOffsets v1 are the
# lowest the proxy offers (Kafka 4 removed the rest, KIP-896); aiokafka 0.14 sends Fetch v11 and
# ListOffsets v3, the oldest any client we test still sends.
@pytest.mark.parametrize("fetch_version, list_offsets_version", [(4, 1), (11, 3)], ids=["lowest-offered", "aiokafka"])
def test_oldest_versions_in_use_read_the_history_from_offset_0(history, fetch_version, list_offsets_version):
    from protocol.apis import FETCH
    from protocol.record_set import iter_batches
    from protocol.records import decode_records

    broker = BrokerClient(history.broker.bootstrap)
    leader = broker.metadata([history.topic])[history.topic].partitions[0].leader
    for partition in range(PARTITIONS):
        error, earliest, *_ = _list_offsets(history.proxy, history.topic, list_offsets_version, {partition: EARLIEST})[partition]
        assert (error, earliest) == (ErrorCode.NONE, 0)
        client = RawClient(history.proxy.bootstrap)
        try:
            answer = client.request(FETCH, fetch_version, {
                # 64 KiB: the answer stays below the broker's log start (the remote and local ranges
                # overlap, and a MiB of this compressed history reaches past it).
                "replica_id": -1, "max_wait_ms": 100, "min_bytes": 1, "max_bytes": 1 << 16, "isolation_level": 0,
                "session_id": 0, "session_epoch": -1, "rack_id": "", "forgotten_topics_data": [],
                "topics": [{"topic": history.topic, "partitions": [{
                    "partition": partition, "current_leader_epoch": -1, "fetch_offset": 0, "log_start_offset": -1,
                    "partition_max_bytes": 1 << 16}]}]})
        finally:
            client.close()
        (result,) = answer["responses"][0]["partitions"]
        assert result["error_code"] == ErrorCode.NONE
        # The log's ends as the leader says them and the remote log start, as Kafka's own remote
        # reads answer (the broker's OFFSET_OUT_OF_RANGE that the proxy replaced carried -1).
        assert result["high_watermark"] == broker.list_offset(leader, history.topic, partition, LATEST)[1]
        assert result["last_stable_offset"] == broker.list_offset(leader, history.topic, partition, LATEST,
                                                                  read_committed=True)[1]
        if fetch_version >= 5:
            assert result["log_start_offset"] == 0
        records = [r for header, batch in iter_batches(result["records"]) if not header.is_control
                   for r in decode_records(batch)]
        want = history.everything[partition]
        assert len(records) > 0 and records[-1].offset < history.log_starts[partition]  # all from the remote tier
        assert [(r.offset, r.timestamp, r.key, r.value) for r in records] == [
            (w.offset, w.timestamp, w.key, w.value) for w in want[:len(records)]]


def test_remote_reads_answer_within_the_requests_max_bytes(history):
    """Each partition's remote read returns at least one batch; the answer as a whole keeps to the
    request's max_bytes as Kafka's does: past it only the first batch of the first partition with
    records, the rest answered empty and fetched again (5,000 such partitions once made a 104 MB
    answer to a 50 MiB request, refused by librdkafka)."""
    from protocol.apis import FETCH
    from protocol.record_set import iter_batches

    def fetch(max_bytes: int) -> list[dict]:
        client = RawClient(history.proxy.bootstrap)
        try:
            answer = client.request(FETCH, 12, {
                "replica_id": -1, "max_wait_ms": 100, "min_bytes": 1, "max_bytes": max_bytes, "isolation_level": 1,
                "session_id": 0, "session_epoch": -1, "rack_id": "", "forgotten_topics_data": [],
                "topics": [{"topic": history.topic, "partitions": [{
                    "partition": p, "current_leader_epoch": -1, "fetch_offset": 0, "last_fetched_epoch": -1,
                    "log_start_offset": -1, "partition_max_bytes": 1 << 20} for p in range(PARTITIONS)]}]})
        finally:
            client.close()
        return answer["responses"][0]["partitions"]

    tiny = fetch(1)  # below any batch
    assert [p["error_code"] for p in tiny] == [ErrorCode.NONE] * PARTITIONS
    with_records = [p for p in tiny if p["records"]]
    assert len(with_records) == 1  # the first batch of one partition; before: every partition's
    assert len(list(iter_batches(with_records[0]["records"]))) == 1
    assert all(p["high_watermark"] > 0 for p in tiny)  # the empty ones still say where the log ends
    whole = fetch(1 << 20)
    assert all(p["records"] for p in whole)
    assert sum(len(p["records"]) for p in whole) <= 1 << 20


def _counter(url: str, name: str) -> float:
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return next(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + " "))


def test_a_fetch_below_the_brokers_log_start_is_read_while_the_broker_is_asked(history):
    """The copiers have seen the brokers' log start; a Fetch below it starts its remote reads as
    the request goes to the broker instead of after the broker's OFFSET_OUT_OF_RANGE (a fresh
    proxy's first record waited for the two in turn), and the broker, asked at the log end the
    copier saw, answers the high watermark with it: no ListOffsets is asked besides. Counted by
    the proxy, per partition."""
    from protocol.apis import FETCH
    from protocol.record_set import iter_batches

    beside, questions = "tiered_proxy_remote_reads_beside_broker_total", "tiered_proxy_remote_read_log_end_questions_total"
    before = {name: _counter(history.metrics_url, name) for name in (beside, questions)}
    client = RawClient(history.proxy.bootstrap)
    try:
        answer = client.request(FETCH, 12, {
            "replica_id": -1, "max_wait_ms": 100, "min_bytes": 1, "max_bytes": 4 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "rack_id": "", "forgotten_topics_data": [],
            "topics": [{"topic": history.topic, "partitions": [{
                "partition": p, "current_leader_epoch": -1, "fetch_offset": 0, "last_fetched_epoch": -1,
                "log_start_offset": -1, "partition_max_bytes": 64 * 1024} for p in range(PARTITIONS)]}]})
    finally:
        client.close()
    for p in answer["responses"][0]["partitions"]:
        assert p["error_code"] == ErrorCode.NONE, p
        assert next(iter(iter_batches(p["records"])))[0].base_offset == 0
        assert p["high_watermark"] >= history.log_starts[p["partition_index"]]  # the brokers' log end, asked beside
    assert _counter(history.metrics_url, beside) - before[beside] == PARTITIONS
    assert _counter(history.metrics_url, questions) == before[questions]  # the broker's answer carried them
