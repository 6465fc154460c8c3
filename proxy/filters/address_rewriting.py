"""Rewriting broker addresses in responses so that clients keep talking to the proxy.

Every place a broker address reaches a client is rewritten to the proxy's listener for that
node: Metadata, FindCoordinator (single and ``coordinators[]`` forms), DescribeCluster, and the
KIP-951 ``NodeEndpoints`` of Produce, Fetch, ShareFetch and ShareAcknowledge responses. Each
rewriter also reports the real address it replaced, so the proxy learns brokers from the traffic
it relays. Other answers with host and port fields name no broker a client should reach
(``NOT_BROKER_ADDRESSES``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from protocol.apis import (
    DESCRIBE_CLUSTER,
    FETCH,
    FIND_COORDINATOR,
    METADATA,
    PRODUCE,
    SHARE_ACKNOWLEDGE,
    SHARE_FETCH,
)
from protocol.fetch_response_tags import NODE_ENDPOINTS_TAG, fetch_response_tags
from proxy.chain import Answer, Core, Filter, Message, RequestContext

# (node_id, real host, real port, rack) -> (advertised host, advertised port)
Advertise = Callable[[int, str, int, str | None], tuple[str, int]]


def _rewrite_nodes(nodes: list[dict[str, Any]] | None, id_key: str, advertise: Advertise) -> None:
    for node in nodes or ():
        node["host"], node["port"] = advertise(node[id_key], node["host"], node["port"], node.get("rack"))


def rewrite_metadata(msg: dict[str, Any], version: int, advertise: Advertise) -> bool:
    _rewrite_nodes(msg["brokers"], "node_id", advertise)
    return True


def rewrite_find_coordinator(msg: dict[str, Any], version: int, advertise: Advertise) -> bool:
    if version < 4:
        if msg["error_code"] != 0 or msg["node_id"] < 0:
            return False
        msg["host"], msg["port"] = advertise(msg["node_id"], msg["host"], msg["port"], None)
        return True
    for coord in msg["coordinators"]:
        if coord["error_code"] == 0 and coord["node_id"] >= 0:
            coord["host"], coord["port"] = advertise(coord["node_id"], coord["host"], coord["port"], None)
    return True


def rewrite_describe_cluster(msg: dict[str, Any], version: int, advertise: Advertise) -> bool:
    _rewrite_nodes(msg["brokers"], "broker_id", advertise)
    return True


def rewrite_node_endpoints(msg: dict[str, Any], version: int, advertise: Advertise) -> bool:
    """KIP-951: Produce v10+, Fetch v16+, ShareFetch and ShareAcknowledge may name new leaders'
    endpoints."""
    endpoints = msg.get("node_endpoints")
    if not endpoints:
        return False
    _rewrite_nodes(endpoints, "node_id", advertise)
    return True


# api_key -> (first version that can carry addresses, rewriter). A rewriter returns False when it
# changed nothing, so the original bytes can be forwarded untouched.
REWRITERS: dict[int, tuple[int, Callable[[dict[str, Any], int, Advertise], bool]]] = {
    METADATA: (0, rewrite_metadata),
    FIND_COORDINATOR: (0, rewrite_find_coordinator),
    DESCRIBE_CLUSTER: (0, rewrite_describe_cluster),
    PRODUCE: (10, rewrite_node_endpoints),
    FETCH: (16, rewrite_node_endpoints),
    SHARE_FETCH: (0, rewrite_node_endpoints),
    SHARE_ACKNOWLEDGE: (0, rewrite_node_endpoints),
}

# Fetch v16 added NodeEndpoints (and v17-18 tags replicas send) and nothing else: asked at v15, the
# broker answers in the same bytes without them, and the answer needs no rewriting, so it is relayed
# as it arrives instead of held whole to be checked (issue 36: librdkafka's load tool, which asks
# v16, read at half its direct speed). What a client loses is KIP-951's hint of a partition's new
# leader; it finds the leader as before v16, with a Metadata request.
FETCH_WITHOUT_ENDPOINTS = 15

# Answers whose host and port fields are not brokers a client connects to, by API name: why.
NOT_BROKER_ADDRESSES = {
    "DescribeAcls": "an ACL's host pattern",
    "DeleteAcls": "an ACL's host pattern",
    "Vote": "KRaft controllers, between themselves",
    "BeginQuorumEpoch": "KRaft controllers, between themselves",
    "EndQuorumEpoch": "KRaft controllers, between themselves",
    "FetchSnapshot": "KRaft controllers, between themselves",
    "UpdateRaftVoter": "KRaft controllers, between themselves",
    "DescribeQuorum": "the controllers' listeners, shown by admin tools; the proxy fronts brokers",
    "StreamsGroupHeartbeat": "Kafka Streams instances' own endpoints",
    "StreamsGroupDescribe": "Kafka Streams instances' own endpoints",
}


def _broker_offers(ctx: RequestContext, version: int) -> bool:
    low, high = ctx.broker_versions.get(ctx.api.key, (0, -1))
    return low <= version <= high


class AddressRewriting(Filter):
    """Puts the proxy's listeners into every answer that names a broker."""

    name = "address-rewriting"
    apis = frozenset(REWRITERS)

    def __init__(self) -> None:
        self.core: Core | None = None

    def start(self, core: Core) -> None:
        self.core = core

    async def on_request(self, ctx: RequestContext) -> Answer | None:
        first_version, _ = REWRITERS[ctx.api.key]
        if ctx.version < first_version:
            return None
        if ctx.api.key == FETCH and _broker_offers(ctx, FETCH_WITHOUT_ENDPOINTS) \
                and ctx.api.same_bytes(ctx.version, FETCH_WITHOUT_ENDPOINTS):
            ctx.relabel_as(FETCH_WITHOUT_ENDPOINTS)
            return None
        ctx.on_response(self._rewrite)
        return None

    async def _rewrite(self, ctx: RequestContext, response: Message) -> None:
        assert self.core is not None
        if ctx.api.key == FETCH and not response.is_decoded and NODE_ENDPOINTS_TAG not in fetch_response_tags(
                response.frame[response.body_at:], ctx.version):
            return  # most Fetch answers name no new leader: found by lengths alone, nothing decoded
        _, rewrite = REWRITERS[ctx.api.key]
        if rewrite(response.body, ctx.version, self.core.advertise):
            response.changed()
            await self.core.ensure_listeners()  # a broker the proxy had not seen gets its port now
