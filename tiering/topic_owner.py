"""Who tiers a topic: the brokers (Kafka's own tiered storage), the proxy, or nobody. The rule is
written here once; the remote log manager, the admin filter, the read filter, ``describe`` and the
status page all ask it.

The brokers tier a topic when they report ``remote.storage.enable=true`` as the topic's own config
(DYNAMIC_TOPIC_CONFIG) and their ``remote.log.storage.system.enable`` is on. The proxy never writes
``remote.storage.enable`` to the brokers (it keeps the key in its metadata store), so a ``true`` at
the brokers is always theirs. Brokers that describe their configs without
``remote.log.storage.system.enable`` (noida-db, Tansu: no tiered storage of their own) tier
nothing, so there a topic's own ``remote.storage.enable=true`` asks the proxy to tier it. Brokers
that will not say (DescribeConfigs of the broker refused or failed) are taken to tier: the rule
errs toward leaving a topic alone.

A topic the brokers tier is theirs: the proxy never copies it, never moves its log start, never
expires or serves their data. One exception lets a topic change hands without losing a record:
when the brokers stopped copying it (``remote.log.copy.disable=true``, KIP-950) but still hold its
remote data, the proxy may copy it if it was asked to through the proxy, reading the brokers'
remote data through them, and still never moves its log start (see docs/operating-tiering.md).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from tiering.model import TopicTieringState
from tiering.topic_configs import REMOTE_STORAGE_ENABLE, BrokerTopicConfigs

REMOTE_LOG_COPY_DISABLE = "remote.log.copy.disable"  # KIP-950, Kafka 3.9+
SYSTEM_ENABLE = "remote.log.storage.system.enable"  # the brokers' own switch
OP_SET, OP_DELETE = 0, 1  # IncrementalAlterConfigs operations


class TieredBy(enum.Enum):
    BROKERS = "brokers"
    PROXY = "proxy"
    NONE = "none"


def _own_true(configs: BrokerTopicConfigs, key: str) -> bool:
    return key in configs.own and configs.in_effect.get(key, "").strip().lower() == "true"


@dataclass(frozen=True)
class BrokerTiering:
    """The brokers' own tiering of one topic."""

    holds: bool  # the brokers tier the topic (they may hold remote data of it)
    copying: bool  # and still copy it (remote.log.copy.disable is not on)

    @classmethod
    def of(cls, configs: BrokerTopicConfigs, system_enabled: bool | None) -> BrokerTiering:
        """``system_enabled``: the brokers' remote.log.storage.system.enable (False where they list
        their configs without it; None where they would not say)."""
        holds = system_enabled is not False and set_on_topic(configs)
        return cls(holds, holds and not _own_true(configs, REMOTE_LOG_COPY_DISABLE))


def set_on_topic(configs: BrokerTopicConfigs) -> bool:
    """Whether the brokers list ``remote.storage.enable=true`` as the topic's own: only then is
    their ``remote.log.storage.system.enable`` worth asking."""
    return _own_true(configs, REMOTE_STORAGE_ENABLE)


def tiered_by(brokers: BrokerTiering, proxy_copying: bool) -> TieredBy:
    """Who copies the topic now. ``proxy_copying``: the proxy's own record says ENABLED."""
    if brokers.copying:
        return TieredBy.BROKERS
    if proxy_copying:
        return TieredBy.PROXY  # also while the brokers still hold remote data they no longer copy
    return TieredBy.BROKERS if brokers.holds else TieredBy.NONE


def ownership_conflict(name: str, configs: list[dict[str, Any]], brokers: BrokerTiering,
                        current: TopicTieringState | None, *, incremental: bool) -> str | None:
    """Why an (Incremental)AlterConfigs through the proxy must be refused for ownership, or None:
    it would make the brokers and the proxy tier one topic at once, or asks the proxy to stop
    tiering what only the brokers tier. ``configs``: the request's entries for the topic;
    ``current``: the proxy's record of the topic."""
    def named(key: str) -> dict[str, Any] | None:
        return next((c for c in configs if c["name"] == key), None)

    enable = named(REMOTE_STORAGE_ENABLE)
    deleted = enable is not None and incremental and enable.get("config_operation", OP_SET) == OP_DELETE
    enabling = enable is not None and not deleted and str(enable["value"]).strip().lower() == "true"
    if enabling and brokers.copying:
        return (f"Topic {name} is tiered by the brokers (remote.storage.enable=true is its own config there): the "
                f"proxy will not tier it too. To hand it to the proxy, set {REMOTE_LOG_COPY_DISABLE}=true at the "
                "brokers first (docs/operating-tiering.md, 'Who tiers a topic')")
    if enable is not None and not enabling and brokers.holds and current is None:
        return (f"Topic {name} is tiered by the brokers, not by the proxy: change its remote.storage.enable at the "
                f"brokers (KIP-950: {REMOTE_LOG_COPY_DISABLE}=true, or remote.storage.enable=false with "
                "remote.log.delete.on.disable=true)")
    copy_disable = named(REMOTE_LOG_COPY_DISABLE)
    if copy_disable is not None and brokers.holds and not brokers.copying and current is not None and current.copying:
        removed = incremental and copy_disable.get("config_operation", OP_SET) == OP_DELETE
        if removed or str(copy_disable["value"]).strip().lower() != "true":
            return (f"Topic {name} is tiered by the proxy now, and the brokers still hold remote data of it: "
                    f"{REMOTE_LOG_COPY_DISABLE}=false would make the brokers copy it too. Finish the hand-over "
                    "(remote.storage.enable=false with remote.log.delete.on.disable=true at the brokers) or set "
                    "remote.storage.enable=false through the proxy first")
    return None
