"""Kafka error codes against kafka-python's table, and ProtocolError's message and offset."""

from __future__ import annotations

import inspect
import pickle

import pytest

from protocol.errors import ErrorCode, ProtocolError

# Where kafka-python's class names differ from Kafka's protocol-guide names, the guide wins.
KAFKA_PYTHON_NAMES = {
    "NO_ERROR": "NONE",
    "UNKNOWN": "UNKNOWN_SERVER_ERROR",
    "NOT_LEADER_FOR_PARTITION": "NOT_LEADER_OR_FOLLOWER",
    "MESSAGE_SIZE_TOO_LARGE": "MESSAGE_TOO_LARGE",
    "INVALID_TOPIC": "INVALID_TOPIC_EXCEPTION",
    "INVALID_REPLICATION_ASSIGNMENT": "INVALID_REPLICA_ASSIGNMENT",
}


def _kafka_python_table() -> dict[int, tuple[str, bool]]:
    import kafka.errors as ke

    table = {}
    for cls in vars(ke).values():
        if inspect.isclass(cls) and issubclass(cls, ke.BrokerResponseError) and cls.errno is not None:
            table[cls.errno] = (cls.message, cls.retriable)
    return table


def test_codes_and_names_match_kafka_python():
    table = _kafka_python_table()
    assert len(table) > 120
    for errno, (name, _) in table.items():
        assert ErrorCode(errno).name == KAFKA_PYTHON_NAMES.get(name, name)


def test_retriable_matches_kafka_python_except_where_kafka_differs():
    # Kafka's CorruptRecordException is a RetriableException; kafka-python marks it otherwise.
    for errno, (_, retriable) in _kafka_python_table().items():
        expected = True if errno == ErrorCode.CORRUPT_MESSAGE else retriable
        assert ErrorCode(errno).retriable is expected, ErrorCode(errno).name


@pytest.mark.parametrize(
    ("member", "code", "retriable"),
    [
        (ErrorCode.UNKNOWN_SERVER_ERROR, -1, False), (ErrorCode.NONE, 0, False),
        (ErrorCode.OFFSET_OUT_OF_RANGE, 1, False), (ErrorCode.NOT_LEADER_OR_FOLLOWER, 6, True),
        (ErrorCode.TOPIC_AUTHORIZATION_FAILED, 29, False), (ErrorCode.UNSUPPORTED_VERSION, 35, False),
        (ErrorCode.INVALID_CONFIG, 40, False), (ErrorCode.INVALID_REQUEST, 42, False),
        (ErrorCode.POLICY_VIOLATION, 44, False), (ErrorCode.KAFKA_STORAGE_ERROR, 56, True),
        (ErrorCode.FETCH_SESSION_ID_NOT_FOUND, 70, True), (ErrorCode.INVALID_FETCH_SESSION_EPOCH, 71, True),
        (ErrorCode.UNKNOWN_TOPIC_ID, 100, True), (ErrorCode.OFFSET_MOVED_TO_TIERED_STORAGE, 109, False),
        (ErrorCode.TRANSACTION_ABORTABLE, 120, False), (ErrorCode.SHARE_SESSION_LIMIT_REACHED, 133, True),
    ],
)
def test_spot_values(member, code, retriable):
    assert member == code and member.retriable is retriable


def test_codes_are_contiguous_and_unknown_codes_map_to_unknown_server_error():
    assert [int(c) for c in ErrorCode] == list(range(-1, len(ErrorCode) - 1))
    assert ErrorCode.from_code(6) is ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert ErrorCode.from_code(32000) is ErrorCode.UNKNOWN_SERVER_ERROR


def test_protocol_error_carries_its_offset():
    e = ProtocolError("bad varint", 17)
    assert isinstance(e, ValueError) and e.offset == 17 and str(e) == "bad varint (at byte 17)"
    assert ProtocolError("no offset").offset is None and str(ProtocolError("no offset")) == "no offset"
    assert str(pickle.loads(pickle.dumps(e))) == str(e)
