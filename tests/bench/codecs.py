"""Decode + encode cost of the messages the proxy rewrites most, for three codec choices.

    python tests/bench/codecs.py

(a) kafka-python 3.x's schema-driven protocol classes, (b) Aiven's kio, (c) ours
(protocol/schema.py). Each decodes the same bytes and encodes them again; every implementation's
encoding is checked equal to the input before it is timed, so the comparison is like for like.
"""

from __future__ import annotations

import io
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from protocol.message_codec import codec  # noqa: E402
from protocol.records import Record, build_batch  # noqa: E402


def fetch_response(version: int) -> bytes:
    c = codec("FetchResponse", version)
    # A real 16 KiB record batch: kafka-python parses record sets, so random bytes will not do.
    batch = build_batch([Record(i, 1_700_000_000_000, None, os.urandom(1000), []) for i in range(16)])
    topics = []
    for t in range(10):
        parts = []
        for p in range(10):
            aborted = [{"producer_id": 7, "first_offset": 100}] if p % 4 == 0 else []
            parts.append({"partition_index": p, "error_code": 0, "high_watermark": 10_000 + p,
                          "last_stable_offset": 10_000 + p, "log_start_offset": 0,
                          "aborted_transactions": aborted, "preferred_read_replica": -1,
                          "records": batch})
        topics.append({"topic": f"topic-{t}", "topic_id": os.urandom(16), "partitions": parts})
    return c.encode({"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": topics})


def metadata_response(version: int) -> bytes:
    c = codec("MetadataResponse", version)
    brokers = [{"node_id": i, "host": f"broker-{i}.example.com", "port": 9092, "rack": None} for i in range(3)]
    topics = [{"error_code": 0, "name": f"topic-{t:03d}", "topic_id": os.urandom(16), "is_internal": False,
               "partitions": [{"error_code": 0, "partition_index": p, "leader_id": p % 3, "leader_epoch": 1,
                               "replica_nodes": [0, 1, 2], "isr_nodes": [0, 1, 2], "offline_replicas": []}
                              for p in range(3)],
               "topic_authorized_operations": -2147483648} for t in range(200)]
    return c.encode({"throttle_time_ms": 0, "brokers": brokers, "cluster_id": "abc", "controller_id": 0,
                     "topics": topics})


def ours(name: str, version: int) -> tuple[Callable, Callable]:
    c = codec(name, version)
    return c.decode, c.encode


def kafka_python(name: str, version: int) -> tuple[Callable, Callable] | None:
    from kafka.protocol.consumer import FetchResponse
    from kafka.protocol.metadata import MetadataResponse

    cls = {"FetchResponse": FetchResponse, "MetadataResponse": MetadataResponse}[name]

    def decode(data: bytes) -> object:
        msg = cls.decode(data, version=version, header=False)
        msg._header = None  # kafka-python leaves this slot unset on decoded messages
        return msg

    return decode, lambda msg: bytes(msg.encode(version=version, header=False))


def kio(name: str, version: int) -> tuple[Callable, Callable] | None:
    import importlib

    from kio.serial import entity_reader, entity_writer

    module = {"FetchResponse": "fetch", "MetadataResponse": "metadata"}[name]
    try:
        cls = getattr(importlib.import_module(f"kio.schema.{module}.v{version}.response"), name)
    except ModuleNotFoundError:
        return None  # kio has no such version
    read, write = entity_reader(cls), entity_writer(cls)

    def encode(msg: object) -> bytes:
        buf = io.BytesIO()
        write(buf, msg)
        return buf.getvalue()

    return (lambda data: read(data, 0)[0]), encode


def timed(fn: Callable, arg: object, repeats: int = 7, number: int = 20) -> float:
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(number):
            fn(arg)
        samples.append((time.perf_counter() - start) / number)
    return statistics.median(samples) * 1e6


def main() -> int:
    cases = [("FetchResponse", 11, fetch_response), ("FetchResponse", 12, fetch_response),
             ("MetadataResponse", 9, metadata_response), ("MetadataResponse", 12, metadata_response)]
    impls = [("ours", ours), ("kafka-python", kafka_python), ("kio", kio)]
    print(f"{'implementation':<14} {'message':<22} {'decode us':>10} {'encode us':>10} {'dec x ours':>10} "
          f"{'enc x ours':>10} {'records zero-copy':>18}")
    failed = False
    for name, version, build in cases:
        data = build(version)
        base: tuple[float, float] | None = None
        best = ("", float("inf"))
        for impl_name, factory in impls:
            funcs = factory(name, version)
            if funcs is None:
                print(f"{impl_name:<14} {name + ' v' + str(version):<22} {'(no such version)':>10}")
                continue
            decode, encode = funcs
            try:
                msg = decode(data)
                again = encode(msg)
            except Exception as e:  # noqa: BLE001 - a library failing on valid input is a result
                print(f"{impl_name:<14} {name + ' v' + str(version):<22} failed: {type(e).__name__}: {str(e)[:60]}")
                continue
            if again != data:
                print(f"MISMATCH: {impl_name} does not re-encode {name} v{version} byte for byte")
                failed = True
                continue
            zero_copy = "-"
            if name == "FetchResponse":
                rec = _first_records(msg)
                zero_copy = "yes" if isinstance(rec, memoryview) and rec.obj is data else "no"
            dec, enc = timed(decode, data), timed(encode, msg)
            base = base or (dec, enc)
            if dec < best[1]:
                best = (impl_name, dec)
            print(f"{impl_name:<14} {name + ' v' + str(version):<22} {dec:>10.0f} {enc:>10.0f} "
                  f"{dec / base[0]:>10.2f} {enc / base[1]:>10.2f} {zero_copy:>18}")
        print(f"  fastest decode of {name} v{version}: {best[0]}")
    return 1 if failed else 0


def _first_records(msg: object) -> object:
    if isinstance(msg, dict):
        return msg["responses"][0]["partitions"][0]["records"]
    topic = msg.responses[0]
    return topic.partitions[0].records


if __name__ == "__main__":
    sys.exit(main())
