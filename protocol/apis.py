"""The Kafka APIs this codebase knows: API keys, names, version ranges and header versions."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache

from protocol.kio_schemas import kio_api_index
from protocol.message_codec import Codec, codec
from protocol.message_schema import MessageSchema, json_schema, json_schema_names, load_schema
from protocol.schema_model import same_bytes


@dataclass(frozen=True)
class Api:
    key: int
    name: str  # e.g. "Fetch"
    min_version: int
    max_version: int

    # Loaded on first use: the schemas that come from kio cost a second to load all at once, in
    # every process that starts (protocol/kio_schemas.py).
    @property
    def request(self) -> MessageSchema:
        return load_schema(self.name + "Request")

    @property
    def response(self) -> MessageSchema:
        return load_schema(self.name + "Response")

    @cache  # noqa: B019 - asked for every request; Api values live as long as the process
    def has_schema(self, version: int) -> bool:
        """Whether the proxy can decode this version's request and response."""
        return version in self.request.valid and version in self.response.valid

    @cache  # noqa: B019 - asked for every request; Api values live as long as the process
    def same_bytes(self, a: int, b: int) -> bool:
        """Whether requests and responses at versions ``a`` and ``b`` are the same bytes, header and
        body, but for the request header's version field: a request may be sent at one and its
        answer read at the other (schema_model.same_bytes)."""
        return (self.request_header_version(a) == self.request_header_version(b)
                and self.response_header_version(a) == self.response_header_version(b)
                and same_bytes(self.request, a, b) and same_bytes(self.response, a, b))

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
    """Every API of Kafka's JSON schemas, and of kio's for the keys those lack."""
    apis: dict[int, Api] = {}
    names = set(json_schema_names())
    for name in names:
        if not name.endswith("Request"):
            continue
        base = name[: -len("Request")]
        if base + "Response" not in names:
            continue
        req, resp = json_schema(name), json_schema(base + "Response")
        if req.api_key is None:
            continue
        apis[req.api_key] = Api(req.api_key, base, req.min_version, min(req.max_version, resp.max_version))
    for key, (base, low, high) in kio_api_index().items():
        apis.setdefault(key, Api(key, base, low, high))
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


def build_codecs(versions: Iterable[tuple[int, int]]) -> int:
    """Builds the request and response codecs of each (API key, version) (codecs are generated
    code, compiled on first use: milliseconds each); returns how many were built."""
    built = 0
    for key, version in versions:
        spec = all_apis().get(key)
        if spec is not None and spec.has_schema(version):
            spec.request_codec(version)
            spec.response_codec(version)
            built += 2
    return built
