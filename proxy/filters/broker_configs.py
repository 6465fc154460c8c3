"""The tiered-storage broker configs the proxy owns, as Kafka's admin tools see them through it.

``kafka-configs.sh --entity-type brokers --describe`` through the proxy shows, for the keys of
Kafka's tiered storage that the proxy implements (``remote.log.storage.system.enable``,
``log.local.retention.*``, ``log.remote.copy.lag.*``, the remote log manager's threads, interval
and KIP-956 quotas, the remote reader's), the proxy's values in place of the broker's: source
STATIC_BROKER_CONFIG where its properties set them, DEFAULT_CONFIG otherwise, read-only. The
broker's own values of these keys say nothing about the proxy's remote tier.

They are set in the proxy's properties, not dynamically: an AlterConfigs or
IncrementalAlterConfigs of a broker resource that names one is refused for that resource
(INVALID_REQUEST, saying where to set it) and not forwarded, so the broker's own value never
changes silently in its place. To change the brokers' own tiered storage (for topics they tier
themselves), point the tools at the brokers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from protocol.apis import ALTER_CONFIGS, DESCRIBE_CONFIGS, INCREMENTAL_ALTER_CONFIGS
from protocol.errors import ErrorCode
from proxy.chain import Answer, Filter, Message, RequestContext
from tiering.config import TieringConfig
from tiering.quota import UNLIMITED

BROKER_RESOURCE = 4
SOURCE_STATIC_BROKER_CONFIG, SOURCE_DEFAULT_CONFIG = 4, 5
TYPE_BOOLEAN, TYPE_INT, TYPE_LONG = 1, 3, 5
# Kafka's broker keys that the proxy implements, from TieringConfig: field -> the config's type.
_TIERING_FIELDS = {
    "enabled": TYPE_BOOLEAN, "thread_pool_size": TYPE_INT, "task_interval_ms": TYPE_LONG,
    "local_retention_ms": TYPE_LONG, "local_retention_bytes": TYPE_LONG, "copy_lag_ms": TYPE_LONG,
    "copy_lag_bytes": TYPE_LONG, "copy_max_bytes_per_second": TYPE_LONG, "copy_quota_window_num": TYPE_INT,
    "copy_quota_window_size_seconds": TYPE_INT,
}
# ... and the remote reader's: key -> (default, type), as proxy/filters/tiered_reads.py reads them.
_READ_KEYS = {
    "remote.log.manager.fetch.max.bytes.per.second": (str(UNLIMITED), TYPE_LONG),
    "remote.log.manager.fetch.quota.window.num": ("11", TYPE_INT),
    "remote.log.manager.fetch.quota.window.size.seconds": ("1", TYPE_INT),
    "remote.fetch.max.wait.ms": ("500", TYPE_INT),
    "remote.log.reader.threads": ("10", TYPE_INT),
    "remote.log.index.file.cache.total.size.bytes": (str(1 << 30), TYPE_LONG),
}
_DOC = "Kept by the tiered-storage proxy, which implements Kafka's tiered storage in front of the brokers: " \
       "set in its properties file (tiered-proxy serve --config)."


def owned_values(props: Mapping[str, str]) -> dict[str, tuple[str, int, bool]]:
    """key -> (value in effect, config type, whether the proxy's properties set it)."""
    tiering = TieringConfig.from_properties(props)
    owned: dict[str, tuple[str, int, bool]] = {}
    for field, config_type in _TIERING_FIELDS.items():
        key, value = TieringConfig.KEYS[field], getattr(tiering, field)
        owned[key] = (str(value).lower() if isinstance(value, bool) else str(value), config_type, key in props)
    for key, (default, config_type) in _READ_KEYS.items():
        set_here = props.get(key) not in (None, "")
        owned[key] = (str(props[key]).strip() if set_here else default, config_type, set_here)
    return owned


class BrokerConfigs(Filter):
    name = "broker-configs"
    apis = frozenset({DESCRIBE_CONFIGS, ALTER_CONFIGS, INCREMENTAL_ALTER_CONFIGS})

    def __init__(self, props: Mapping[str, str]) -> None:
        self.owned = owned_values(props)

    async def on_request(self, ctx: RequestContext) -> Answer | None:
        if ctx.api.key == DESCRIBE_CONFIGS:
            self._on_describe(ctx)
            return None
        return self._on_alter(ctx)

    def _on_describe(self, ctx: RequestContext) -> None:
        asked = {r["resource_name"]: r["configuration_keys"] for r in ctx.request.body["resources"]
                 if r["resource_type"] == BROKER_RESOURCE and r["resource_name"] != ""}
        if not asked:
            return  # the cluster-wide default lists dynamic configs only: the proxy has none
        synonyms = bool(ctx.request.body.get("include_synonyms"))
        documentation = bool(ctx.request.body.get("include_documentation"))

        async def rewrite(ctx: RequestContext, message: Message) -> None:
            for result in message.body["results"]:
                name = result["resource_name"]
                if result["resource_type"] != BROKER_RESOURCE or name not in asked or result["error_code"]:
                    continue
                keys = asked[name]
                ours = [self._entry(key, synonyms, documentation) for key in self.owned if not keys or key in keys]
                result["configs"] = [c for c in result["configs"] if c["name"] not in self.owned] + ours
            message.changed()

        ctx.on_response(rewrite)

    def _entry(self, key: str, synonyms: bool, documentation: bool) -> dict[str, Any]:
        value, config_type, set_here = self.owned[key]
        source = SOURCE_STATIC_BROKER_CONFIG if set_here else SOURCE_DEFAULT_CONFIG
        return {"name": key, "value": value, "read_only": True, "config_source": source, "is_default": not set_here,
                "is_sensitive": False, "config_type": config_type, "documentation": _DOC if documentation else None,
                "synonyms": [{"name": key, "value": value, "source": source}] if synonyms else []}

    def _on_alter(self, ctx: RequestContext) -> Answer | None:
        request = ctx.request.body
        refused = {r["resource_name"]: sorted(c["name"] for c in r["configs"] if c["name"] in self.owned)
                   for r in request["resources"] if r["resource_type"] == BROKER_RESOURCE}
        refused = {name: keys for name, keys in refused.items() if keys}
        if not refused:
            return None
        order = [(r["resource_type"], r["resource_name"]) for r in request["resources"]]
        request["resources"] = [r for r in request["resources"]
                                if not (r["resource_type"] == BROKER_RESOURCE and r["resource_name"] in refused)]
        ctx.request.changed()

        def refusal(name: str) -> dict[str, Any]:
            return {"error_code": ErrorCode.INVALID_REQUEST, "resource_type": BROKER_RESOURCE, "resource_name": name,
                    "error_message": f"{', '.join(refused[name])}: kept by the tiered-storage proxy, not the "
                                     "brokers; set it in the proxy's properties file and restart it (point the "
                                     "tools at the brokers to change their own tiered storage)"}

        if not request["resources"]:
            return ctx.answer({"throttle_time_ms": 0, "responses": [refusal(name) for _, name in order]})

        async def rewrite(ctx: RequestContext, message: Message) -> None:
            answered = {(r["resource_type"], r["resource_name"]): r for r in message.body["responses"]}
            message.body["responses"] = [answered[k] if k in answered else refusal(k[1]) for k in order
                                         if k in answered or (k[0] == BROKER_RESOURCE and k[1] in refused)]
            message.changed()

        ctx.on_response(rewrite)
        return None
