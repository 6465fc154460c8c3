"""The ownership rule (tiering/topic_owner.py) and the alterations the admin filter refuses for it,
over DescribeConfigs listings as Kafka, noida-db and Tansu give them."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tiering.model import TieringState, TopicTieringState
from tiering.topic_configs import SOURCE_DEFAULT_CONFIG, SOURCE_DYNAMIC_TOPIC_CONFIG, BrokerTopicConfigs
from tiering.topic_owner import (
    OP_DELETE,
    OP_SET,
    BrokerTiering,
    TieredBy,
    ownership_conflict,
    set_on_topic,
    tiered_by,
)

FULL = [{"name": k, "value": v, "config_source": SOURCE_DEFAULT_CONFIG}
        for k, v in (("cleanup.policy", "delete"), ("retention.ms", "604800000"), ("segment.bytes", "1073741824"))]


def kafka(**own: str) -> BrokerTopicConfigs:
    """A Kafka listing: every key, the topic's own as DYNAMIC_TOPIC_CONFIG."""
    defaults = {"remote.storage.enable": "false", "remote.log.copy.disable": "false"}
    entries = [{"name": k, "value": v, "config_source": SOURCE_DEFAULT_CONFIG} for k, v in defaults.items() if k not in own]
    entries += [{"name": k, "value": v, "config_source": SOURCE_DYNAMIC_TOPIC_CONFIG} for k, v in own.items()]
    return BrokerTopicConfigs.from_described(FULL + entries)


def test_a_topic_is_the_brokers_only_when_they_set_it_and_have_tiered_storage() -> None:
    theirs = kafka(**{"remote.storage.enable": "true"})
    assert set_on_topic(theirs)
    assert BrokerTiering.of(theirs, True) == BrokerTiering(holds=True, copying=True)
    assert BrokerTiering.of(theirs, None) == BrokerTiering(holds=True, copying=True)  # would not say: theirs
    # Brokers that list their configs without remote.log.storage.system.enable tier nothing.
    assert BrokerTiering.of(theirs, False) == BrokerTiering(holds=False, copying=False)
    # Their default (remote.storage.enable=false as DEFAULT_CONFIG) is nobody's setting.
    assert not set_on_topic(kafka())
    assert BrokerTiering.of(kafka(), True) == BrokerTiering(holds=False, copying=False)
    stopped = kafka(**{"remote.storage.enable": "true", "remote.log.copy.disable": "true"})
    assert BrokerTiering.of(stopped, True) == BrokerTiering(holds=True, copying=False)


def test_tansu_listing_of_set_keys_counts_as_the_topics_own() -> None:
    listing = BrokerTopicConfigs.from_described([{"name": "remote.storage.enable", "value": "true",
                                                  "config_source": SOURCE_DEFAULT_CONFIG}])
    assert set_on_topic(listing)
    assert not BrokerTiering.of(listing, False).holds  # Tansu has no tiered storage of its own


@given(holds=st.booleans(), copy_disabled=st.booleans(), proxy_copying=st.booleans())
def test_who_tiers(holds: bool, copy_disabled: bool, proxy_copying: bool) -> None:
    brokers = BrokerTiering(holds, holds and not copy_disabled)
    owner = tiered_by(brokers, proxy_copying)
    if brokers.copying:
        assert owner == TieredBy.BROKERS  # whatever the proxy's own record says
    elif proxy_copying:
        assert owner == TieredBy.PROXY
    else:
        assert owner == (TieredBy.BROKERS if holds else TieredBy.NONE)


def _state(copying: bool) -> TopicTieringState:
    import uuid

    return TopicTieringState("t", uuid.uuid4(), state=TieringState.ENABLED if copying else TieringState.DISABLED)


def _set(key: str, value: str | None, op: int = OP_SET) -> list[dict[str, object]]:
    return [{"name": key, "value": value, "config_operation": op}]


def test_alterations_that_would_make_both_tier_are_refused() -> None:
    copying, stopped, none = BrokerTiering(True, True), BrokerTiering(True, False), BrokerTiering(False, False)
    enable = _set("remote.storage.enable", "true")
    assert "will not tier it too" in ownership_conflict("t", enable, copying, None, incremental=True)
    assert ownership_conflict("t", enable, stopped, None, incremental=True) is None  # the hand-over
    assert ownership_conflict("t", enable, none, None, incremental=True) is None
    # Disabling through the proxy what only the brokers tier: said where to do it instead.
    disable = _set("remote.storage.enable", "false")
    assert "at the brokers" in ownership_conflict("t", disable, copying, None, incremental=True)
    assert ownership_conflict("t", disable, copying, _state(True), incremental=True) is None  # the proxy's own copy
    # The brokers copying again while the proxy copies.
    for configs in (_set("remote.log.copy.disable", "false"), _set("remote.log.copy.disable", None, OP_DELETE)):
        assert "copy it too" in ownership_conflict("t", configs, stopped, _state(True), incremental=True)
    assert ownership_conflict("t", _set("remote.log.copy.disable", "false"), stopped, _state(False),
                               incremental=True) is None
    assert ownership_conflict("t", _set("remote.log.copy.disable", "true"), stopped, _state(True),
                               incremental=True) is None
    # Handed to the brokers (they copy; the proxy's record still says ENABLED): nothing to refuse.
    assert ownership_conflict("t", _set("remote.log.copy.disable", "false"), copying, _state(True),
                              incremental=True) is None
