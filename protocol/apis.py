"""The Kafka APIs this codebase knows: API keys, names, version ranges and header versions."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from protocol.message_codec import Codec, codec
from protocol.message_schema import MessageSchema, available_schemas, load_schema


@dataclass(frozen=True)
class Api:
    key: int
    name: str  # e.g. "Fetch"
    request: MessageSchema
    response: MessageSchema

    @property
    def min_version(self) -> int:
        return self.request.min_version

    @property
    def max_version(self) -> int:
        return min(self.request.max_version, self.response.max_version)

    def request_codec(self, version: int) -> Codec:
        return codec(self.request.name, version)

    def response_codec(self, version: int) -> Codec:
        return codec(self.response.name, version)

    def request_header_version(self, version: int) -> int:
        return 2 if self.request.is_flexible(version) else 1

    def response_header_version(self, version: int) -> int:
        # ApiVersions answers with header v0 at every version, so that a client that sent a
        # version the broker does not know can still read the error.
        if self.key == API_VERSIONS:
            return 0
        return 1 if self.response.is_flexible(version) else 0


@cache
def all_apis() -> dict[int, Api]:
    apis: dict[int, Api] = {}
    names = set(available_schemas())
    for name in names:
        if not name.endswith("Request"):
            continue
        base = name[: -len("Request")]
        if base + "Response" not in names:
            continue
        req = load_schema(name)
        if req.api_key is None:
            continue
        apis[req.api_key] = Api(req.api_key, base, req, load_schema(base + "Response"))
    return dict(sorted(apis.items()))


def api(key: int) -> Api:
    try:
        return all_apis()[key]
    except KeyError:
        raise KeyError(f"unknown Kafka API key {key}") from None


# The keys the proxy handles by name.
PRODUCE = 0
FETCH = 1
LIST_OFFSETS = 2
METADATA = 3
OFFSET_COMMIT = 8
OFFSET_FETCH = 9
FIND_COORDINATOR = 10
JOIN_GROUP = 11
SASL_HANDSHAKE = 17
API_VERSIONS = 18
CREATE_TOPICS = 19
DELETE_TOPICS = 20
DELETE_RECORDS = 21
INIT_PRODUCER_ID = 22
OFFSET_FOR_LEADER_EPOCH = 23
DESCRIBE_CONFIGS = 32
ALTER_CONFIGS = 33
DESCRIBE_LOG_DIRS = 35
SASL_AUTHENTICATE = 36
INCREMENTAL_ALTER_CONFIGS = 44
DESCRIBE_CLUSTER = 60
SHARE_FETCH = 78
SHARE_ACKNOWLEDGE = 79
