"""Remote-tier requests counted per topic (tiering/storage/api.py ``StorageRequests``): every
request and byte made inside a storage call for a segment counts for its topic, whichever thread
makes it; requests for no topic count in the totals only; the totals are what they always were;
the last hour is kept per minute."""

from __future__ import annotations

import threading
import uuid
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.test_at_rest import copy, json_log, ring, sealed_store
from tests.unit.test_storage_local import segment_data
from tiering.model import IndexType, RemoteLogSegmentId, RemoteLogSegmentMetadata, TopicIdPartition
from tiering.storage.api import MINUTE_S, StorageRequests, current_topic, topic_requests
from tiering.storage.local_folder import LocalFolderStorage

OPS = st.lists(st.tuples(st.sampled_from([None, "a", "b", "c.d"]), st.sampled_from(["GET", "PUT", "DELETE", "LIST"]),
                         st.integers(0, 5000), st.integers(0, 5000)), max_size=40)


@settings(max_examples=40, deadline=None)
@given(st.lists(OPS, min_size=1, max_size=6))
def test_counts_per_topic_add_up_whatever_the_threads(per_thread: list[list[tuple[str | None, str, int, int]]]) -> None:
    counts = StorageRequests()
    barrier = threading.Barrier(len(per_thread))

    def run(ops: list[tuple[str | None, str, int, int]]) -> None:
        barrier.wait()
        for topic, kind, read, written in ops:
            with topic_requests(topic):
                assert current_topic() == topic
                counts.sent(kind)
                counts.moved(read=read, written=written)
        assert current_topic() is None

    threads = [threading.Thread(target=run, args=(ops,)) for ops in per_thread]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ops = [op for thread_ops in per_thread for op in thread_ops]
    requests, failures, read, written = counts.snapshot()
    assert requests == {k: n for k in {op[1] for op in ops} if (n := sum(op[1] == k for op in ops))}
    assert (failures, read, written) == ({}, sum(op[2] for op in ops), sum(op[3] for op in ops))
    want: dict[str, dict[str, int]] = {}
    for topic, kind, r, w in ops:
        if topic is None:
            continue
        into = want.setdefault(topic, {})
        into[kind] = into.get(kind, 0) + 1
        for key, n in (("bytes_read", r), ("bytes_written", w)):
            if n:
                into[key] = into.get(key, 0) + n
    assert counts.by_topic() == want
    assert counts.recent()[0] == want  # all within this minute or the last


def test_the_last_hour_is_kept_per_minute() -> None:
    now = [1_000_000 * MINUTE_S + 30.0]
    counts = StorageRequests(clock=lambda: now[0])
    with topic_requests("t"):
        counts.sent("PUT")
        counts.moved(written=100)
        now[0] += 30 * MINUTE_S
        counts.sent("GET")
        counts.moved(read=7)
        assert counts.recent() == ({"t": {"PUT": 1, "bytes_written": 100, "GET": 1, "bytes_read": 7}}, 30 * MINUTE_S)
        assert counts.recent(5 * MINUTE_S) == ({"t": {"GET": 1, "bytes_read": 7}}, 4 * MINUTE_S + 30)
        now[0] += 35 * MINUTE_S  # the PUT's minute has left the hour
        counts.sent("GET")
        recent, covered = counts.recent()
    assert recent == {"t": {"GET": 2, "bytes_read": 7}}
    assert covered == 59 * MINUTE_S + 30  # whole minutes: the current one and the 59 before
    assert counts.by_topic() == {"t": {"PUT": 1, "bytes_written": 100, "GET": 2, "bytes_read": 7}}
    now[0] += 2 * 3600
    assert counts.recent()[0] == {}
    assert counts.by_topic()["t"]["GET"] == 2  # since start


def _metadata(topic: str) -> RemoteLogSegmentMetadata:
    tp = TopicIdPartition(uuid.uuid4(), topic, 0)
    return RemoteLogSegmentMetadata(RemoteLogSegmentId.generate(tp), 0, 9, 0, 1, 0, 0, ((0, 0),))


def test_a_store_counts_each_segment_call_for_its_topic(tmp_path: Path) -> None:
    store = LocalFolderStorage(tmp_path / "remote")
    read, quiet = _metadata("read-me"), _metadata("only-tiered")
    data = segment_data()
    for metadata in (read, quiet):
        store.copy_log_segment_data(metadata, data)
    store.fetch_log_segment(read, 0, 99)
    store.fetch_index(read, IndexType.OFFSET)
    store.write_object("read-me-x/0/partition.manifest", b"manifest")  # no topic: a manifest
    store.list_directory("")
    store.delete_log_segment_data(quiet)
    by_topic = store.requests.by_topic()
    assert by_topic["read-me"]["PUT"] == by_topic["only-tiered"]["PUT"] == 6  # 5 indexes (txn too) and the .log
    assert by_topic["read-me"]["GET"] == 2 and "GET" not in by_topic["only-tiered"]
    assert by_topic["read-me"]["bytes_read"] == 100 + len(data.offset_index)
    assert by_topic["only-tiered"]["DELETE"] == 7 and "DELETE" not in by_topic["read-me"]
    requests, _, read_bytes, written = store.requests.snapshot()
    # The totals are every request, the manifest's PUT and the LIST included.
    assert requests == {"PUT": 13, "GET": 2, "LIST": 1, "DELETE": 7}
    assert read_bytes == by_topic["read-me"]["bytes_read"]
    assert written == by_topic["read-me"]["bytes_written"] + by_topic["only-tiered"]["bytes_written"] + 8


def test_the_envelope_read_on_another_thread_counts_for_the_topic(tmp_path: Path) -> None:
    """A sealed segment's first index read fetches its envelope on a pool thread beside it."""
    writer = sealed_store(tmp_path / "remote", ring(tmp_path, "k1"))
    segment = copy(writer, json_log(300))
    reader = sealed_store(tmp_path / "remote", tmp_path / "ring.pem")  # a fresh store: no envelope cached
    assert reader.fetch_index(segment, IndexType.OFFSET)
    requests, _, read_bytes, _ = reader.requests.snapshot()
    topic = reader.requests.by_topic()[segment.topic_id_partition.topic]
    assert requests == {"GET": 2} and topic["GET"] == 2  # the index and the envelope
    assert topic["bytes_read"] == read_bytes
