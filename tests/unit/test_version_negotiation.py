"""Which API versions the proxy offers in front of each Apache Kafka release (issue 16, item 5).

No Kafka broker runs here, so the brokers' ApiVersions answers are the ones kafka-python records per
release (``kafka.protocol.broker_version_data``, which it uses to infer a broker's version): Kafka
4.0 removed old versions (KIP-896) and added KIP-848's and KIP-932's APIs release by release.
"""

from __future__ import annotations

import pytest
from kafka.protocol.broker_version_data import BROKER_API_VERSIONS

from protocol.apis import (
    API_VERSIONS,
    DESCRIBE_LOG_DIRS,
    FETCH,
    LIST_OFFSETS,
    OFFSET_COMMIT,
    PRODUCE,
    SASL_HANDSHAKE,
    all_apis,
)
from proxy.filters.address_rewriting import AddressRewriting
from proxy.filters.fetch_sessions import FetchSessions
from proxy.filters.remote_log_dirs import RemoteLogDirs
from proxy.filters.tiered_offsets import TieredOffsets, list_offsets_upstream_version
from proxy.filters.tiered_reads import TieredReads
from proxy.filters.topic_admin import TopicAdmin
from proxy.server import negotiate_versions

RELEASES = [(3, 7), (3, 9), (4, 0), (4, 1), (4, 2)]
TIERING_CAPS = dict(TieredReads.version_caps)
TIERING_OVERRIDES = {**TieredOffsets.version_overrides, **RemoteLogDirs.version_overrides}
PASS_THROUGH_READ = AddressRewriting.apis
TIERING_READ = (AddressRewriting.apis | FetchSessions.apis | TieredReads.apis | TieredOffsets.apis | TopicAdmin.apis
                | RemoteLogDirs.apis)


@pytest.mark.parametrize("tiering", [False, True], ids=["pass-through", "tiering"])
@pytest.mark.parametrize("release", RELEASES, ids=lambda r: "kafka-{}.{}".format(*r))
def test_the_proxy_offers_no_version_the_broker_removed(release, tiering):
    broker = BROKER_API_VERSIONS[release]
    read = TIERING_READ if tiering else PASS_THROUGH_READ
    offered = negotiate_versions(broker, TIERING_CAPS if tiering else {}, TIERING_OVERRIDES if tiering else {}, read)
    for key, (low, high) in offered.items():
        spec = all_apis().get(key)
        if spec is None:  # an API Kafka 4's schemas lack (ZooKeeper-era LeaderAndIsr...): relayed
            assert (low, high) == broker[key]
            continue
        if key in read or key == API_VERSIONS:
            assert spec.min_version <= low <= high <= spec.max_version, spec.name
        if tiering and key in TIERING_OVERRIDES:
            continue  # translated (ListOffsets) or answered by the proxy when the broker cannot (DescribeLogDirs)
        assert key in broker, spec.name
        assert broker[key][0] <= low and high <= broker[key][1], (spec.name, (low, high), broker[key])
        if key not in read and key not in (API_VERSIONS, SASL_HANDSHAKE):
            assert (low, high) == broker[key], f"{spec.name}: relayed, so offered as the broker offers it"
    # Everything both sides define is offered, the Kafka 4 group APIs included.
    for key, (low_b, high_b) in broker.items():
        if key in all_apis() and key != SASL_HANDSHAKE and max(low_b, all_apis()[key].min_version) <= high_b:
            assert key in offered, all_apis()[key].name


def test_kafka_4_apis_are_offered_where_the_broker_has_them():
    offered = negotiate_versions(BROKER_API_VERSIONS[(4, 2)], TIERING_CAPS, TIERING_OVERRIDES, TIERING_READ)
    assert offered[68] == (0, 1) and offered[69] == (0, 1)  # KIP-848 consumer groups
    assert {key: offered[key] for key in (76, 77, 78, 79)} == {76: (1, 1), 77: (1, 1), 78: (1, 2), 79: (1, 2)}
    assert offered[FETCH] == (4, 18) and offered[LIST_OFFSETS] == (1, 11) and offered[DESCRIBE_LOG_DIRS] == (1, 4)
    for release in [(3, 7), (3, 9)]:  # before 4.0 (and on our test brokers): not offered at all
        assert not {76, 77, 78, 79} & negotiate_versions(BROKER_API_VERSIONS[release], {}, {}).keys()


@pytest.mark.parametrize("tiering", [False, True], ids=["pass-through", "tiering"])
@pytest.mark.parametrize("release", [(3, 7), (3, 9)], ids=lambda r: "kafka-{}.{}".format(*r))
def test_old_clients_get_every_version_a_3x_broker_offers(release, tiering):
    """librdkafka with api.version.request=false and broker.version.fallback=0.9.0.0 sends
    Produce v1, Fetch v1, ListOffsets v0 and OffsetCommit v2: a 3.x broker takes them, and so
    does the proxy in front of it (issue 24)."""
    broker = BROKER_API_VERSIONS[release]
    read = TIERING_READ if tiering else PASS_THROUGH_READ
    offered = negotiate_versions(broker, TIERING_CAPS if tiering else {}, TIERING_OVERRIDES if tiering else {}, read)
    for key in (PRODUCE, FETCH, LIST_OFFSETS, OFFSET_COMMIT, DESCRIBE_LOG_DIRS):
        assert offered[key][0] == broker[key][0] == 0, all_apis()[key].name


@pytest.mark.parametrize("broker", [(0, 9), (1, 10), (1, 11), (2, 8), (4, 6)], ids=str)
def test_list_offsets_is_asked_at_a_version_the_broker_has(broker):
    """ListOffsets is offered v1-v11 whatever the broker has; each request reaches the broker at
    the nearest version it offers, and decoding fills in what that version adds."""
    low, high = TieredOffsets.version_overrides[LIST_OFFSETS]
    for version in range(low, high + 1):
        asked = list_offsets_upstream_version(version, broker)
        assert broker[0] <= asked <= broker[1]
        if broker[0] <= version <= broker[1]:
            assert asked == version  # no translation when the broker has the client's version
