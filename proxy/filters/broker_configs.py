"""The tiered-storage broker configs the proxy owns, as Kafka's admin tools see them through it.

``kafka-configs.sh --entity-type brokers --describe`` through the proxy shows, for the keys of
Kafka's tiered storage that the proxy implements (``remote.log.storage.system.enable``,
``log.local.retention.*``, ``log.remote.copy.lag.*``, the remote log manager's threads, interval
and KIP-956 quotas, the remote reader's), the proxy's values in place of the broker's, with their
source: DYNAMIC_DEFAULT_BROKER_CONFIG where a cluster-wide dynamic default sets them,
STATIC_BROKER_CONFIG where the proxy's properties do, DEFAULT_CONFIG otherwise. The broker's own
values of these keys say nothing about the proxy's remote tier.

The keys Kafka lets change while brokers run (``tiering.cluster_configs.DYNAMIC_KEYS``) change the
same way through the proxy: ``--entity-default --alter`` (AlterConfigs or IncrementalAlterConfigs
of the cluster's default broker resource) is checked as the proxy reads the values, kept in the
metadata store, and followed by every proxy. The rest of the resource goes to the brokers, and the
proxy's part is kept only if they accept theirs. Refused, and never forwarded, so the broker's own
value never changes silently in its place: the other owned keys (INVALID_REQUEST, Kafka's "Cannot
update these configs dynamically", and where to set them), and any owned key on one broker (the
proxy's remote tier serves the whole cluster). To change the brokers' own tiered storage, for
topics they tier themselves, point the tools at the brokers.

AlterConfigs (the old API, which Kafka 3.x's ``kafka-configs.sh`` uses for brokers) replaces every
dynamic config of the resource, as Kafka's does: the proxy's dynamic defaults become the owned keys
it names, and the rest goes to the brokers, even none. (The tool describes the resource first, the
proxy's keys included, and sends back what it keeps.)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import trio

from protocol.apis import ALTER_CONFIGS, DESCRIBE_CONFIGS, INCREMENTAL_ALTER_CONFIGS
from protocol.errors import ErrorCode
from proxy.chain import Answer, Filter, Message, RequestContext
from tiering.cluster_configs import (
    DYNAMIC_KEYS,
    FETCH_MAX_BYTES_PER_SECOND,
    INDEX_CACHE_BYTES,
    READ_KEYS,
    READER_THREADS,
    ClusterConfigs,
)
from tiering.config import TieringConfig

BROKER_RESOURCE = 4
CLUSTER_DEFAULT = ""  # the resource name of the cluster-wide default broker configs
SOURCE_DYNAMIC_DEFAULT_BROKER_CONFIG, SOURCE_STATIC_BROKER_CONFIG, SOURCE_DEFAULT_CONFIG = 3, 4, 5
TYPE_BOOLEAN, TYPE_INT, TYPE_LONG = 1, 3, 5
OP_SET, OP_DELETE = 0, 1
# Kafka's broker keys that the proxy implements, from TieringConfig: field -> the config's type.
_TIERING_FIELDS = {
    "enabled": TYPE_BOOLEAN, "thread_pool_size": TYPE_INT, "task_interval_ms": TYPE_LONG,
    "local_retention_ms": TYPE_LONG, "local_retention_bytes": TYPE_LONG, "copy_lag_ms": TYPE_LONG,
    "copy_lag_bytes": TYPE_LONG, "copy_max_bytes_per_second": TYPE_LONG, "copy_quota_window_num": TYPE_INT,
    "copy_quota_window_size_seconds": TYPE_INT,
}
# ... and the remote reader's: key -> (default, type), as proxy/filters/tiered_reads.py reads them.
_READ_TYPES = {FETCH_MAX_BYTES_PER_SECOND: TYPE_LONG, "remote.fetch.max.wait.ms": TYPE_INT, READER_THREADS: TYPE_INT,
               INDEX_CACHE_BYTES: TYPE_LONG}
_READ_KEYS = {
    **{key: (str(default), _READ_TYPES[key]) for key, default in READ_KEYS.items()},
    "remote.log.manager.fetch.quota.window.num": ("11", TYPE_INT),
    "remote.log.manager.fetch.quota.window.size.seconds": ("1", TYPE_INT),
}
_DOC = "Kept by the tiered-storage proxy, which implements Kafka's tiered storage in front of the brokers: " \
       "set in its properties file (tiered-proxy serve --config)"
_DYNAMIC_DOC = _DOC + ", or as a cluster-wide dynamic default (kafka-configs.sh --entity-default --alter)."


def owned_values(props: Mapping[str, object]) -> dict[str, tuple[str, int]]:
    """key -> (value in effect under ``props``, config type)."""
    tiering = TieringConfig.from_properties(props)
    owned: dict[str, tuple[str, int]] = {}
    for field, config_type in _TIERING_FIELDS.items():
        value = getattr(tiering, field)
        owned[TieringConfig.KEYS[field]] = (str(value).lower() if isinstance(value, bool) else str(value), config_type)
    for key, (default, config_type) in _READ_KEYS.items():
        owned[key] = (str(props[key]).strip() if props.get(key) not in (None, "") else default, config_type)
    return owned


class BrokerConfigs(Filter):
    name = "broker-configs"
    apis = frozenset({DESCRIBE_CONFIGS, ALTER_CONFIGS, INCREMENTAL_ALTER_CONFIGS})

    def __init__(self, cluster: ClusterConfigs) -> None:
        self.cluster = cluster
        self.defaults = owned_values({})
        self.static = owned_values(cluster.props)
        self.set_in_properties = {key for key in self.static if cluster.props.get(key) not in (None, "")}

    async def on_request(self, ctx: RequestContext) -> Answer | None:
        if ctx.api.key == DESCRIBE_CONFIGS:
            self._on_describe(ctx)
            return None
        return await self._on_alter(ctx)

    # --- DescribeConfigs -------------------------------------------------------------------------

    def _on_describe(self, ctx: RequestContext) -> None:
        asked = {r["resource_name"]: r["configuration_keys"] for r in ctx.request.body["resources"]
                 if r["resource_type"] == BROKER_RESOURCE}
        if not asked:
            return
        synonyms = bool(ctx.request.body.get("include_synonyms"))
        documentation = bool(ctx.request.body.get("include_documentation"))

        async def rewrite(ctx: RequestContext, message: Message) -> None:
            dynamic = self.cluster.dynamic()
            try:
                in_effect = owned_values(self.cluster.effective())
            except ValueError:  # a record this proxy cannot read (a newer one's): what it runs with
                dynamic, in_effect = {}, self.static
            for result in message.body["results"]:
                name = result["resource_name"]
                if result["resource_type"] != BROKER_RESOURCE or name not in asked or result["error_code"]:
                    continue
                # The cluster's default lists only the dynamic defaults set, as Kafka's does.
                keys = [key for key in in_effect if (name != CLUSTER_DEFAULT or key in dynamic)
                        and (not asked[name] or key in asked[name])]
                ours = [self._entry(key, in_effect[key], dynamic, synonyms, documentation) for key in keys]
                result["configs"] = [c for c in result["configs"] if c["name"] not in in_effect] + ours
            message.changed()

        ctx.on_response(rewrite)

    def _entry(self, key: str, in_effect: tuple[str, int], dynamic: Mapping[str, str], synonyms: bool,
               documentation: bool) -> dict[str, Any]:
        value, config_type = in_effect
        chain = []  # Kafka's synonyms, most specific first
        if key in dynamic:
            chain.append({"name": key, "value": value, "source": SOURCE_DYNAMIC_DEFAULT_BROKER_CONFIG})
        if key in self.set_in_properties:
            chain.append({"name": key, "value": self.static[key][0], "source": SOURCE_STATIC_BROKER_CONFIG})
        chain.append({"name": key, "value": self.defaults[key][0], "source": SOURCE_DEFAULT_CONFIG})
        source = chain[0]["source"]
        return {"name": key, "value": value, "read_only": key not in DYNAMIC_KEYS, "config_source": source,
                "is_default": source == SOURCE_DEFAULT_CONFIG, "is_sensitive": False, "config_type": config_type,
                "documentation": (_DYNAMIC_DOC if key in DYNAMIC_KEYS else _DOC + ".") if documentation else None,
                "synonyms": chain if synonyms else []}

    # --- AlterConfigs, IncrementalAlterConfigs -----------------------------------------------------

    async def _on_alter(self, ctx: RequestContext) -> Answer | None:
        request = ctx.request.body
        incremental = ctx.api.key == INCREMENTAL_ALTER_CONFIGS
        validate_only = bool(request.get("validate_only"))
        order = [(r["resource_type"], r["resource_name"]) for r in request["resources"]]
        answers: dict[str, tuple[ErrorCode, str | None]] = {}  # resources the proxy answers itself
        kept: dict[str, dict[str, str | None]] = {}  # the proxy's part of resources forwarded
        forwarded = []
        for resource in request["resources"]:
            if resource["resource_type"] != BROKER_RESOURCE:
                forwarded.append(resource)
                continue
            name = resource["resource_name"]
            ours = [c for c in resource["configs"] if c["name"] in self.static]
            if not ours and (incremental or name != CLUSTER_DEFAULT or not self.cluster.dynamic()):
                forwarded.append(resource)
                continue
            refusal, updates = self._updates(name, ours, incremental)
            if refusal is None:
                try:
                    await trio.to_thread.run_sync(lambda u=updates: self.cluster.alter(u, validate_only=True))
                except ValueError as exc:
                    refusal = ErrorCode.INVALID_CONFIG, str(exc)
            theirs = [c for c in resource["configs"] if c["name"] not in self.static]
            # AlterConfigs goes on with the rest, even none: it replaces the brokers' dynamic defaults too.
            if refusal is not None or incremental and not theirs:
                answers[name] = refusal or await self._alter(updates, validate_only)
                continue
            kept[name] = updates
            forwarded.append({**resource, "configs": theirs})
        if not answers and not kept:
            return None

        def result(name: str, answer: tuple[ErrorCode, str | None]) -> dict[str, Any]:
            return {"error_code": answer[0], "error_message": answer[1], "resource_type": BROKER_RESOURCE,
                    "resource_name": name}

        if not forwarded:
            return ctx.answer({"throttle_time_ms": 0, "responses": [result(name, answers[name]) for _, name in order]})
        request["resources"] = forwarded
        ctx.request.changed()

        async def rewrite(ctx: RequestContext, message: Message) -> None:
            answered = {(r["resource_type"], r["resource_name"]): r for r in message.body["responses"]}
            for name, updates in kept.items():
                theirs = answered.get((BROKER_RESOURCE, name))
                if theirs is not None and theirs["error_code"] == ErrorCode.NONE:
                    code, text = await self._alter(updates, validate_only)
                    if code != ErrorCode.NONE:
                        theirs.update(error_code=code, error_message=f"the brokers' configs were altered, but {text}")
            message.body["responses"] = [
                answered[key] if key in answered else result(key[1], answers[key[1]]) for key in order
                if key in answered or (key[0] == BROKER_RESOURCE and key[1] in answers)]
            message.changed()

        ctx.on_response(rewrite)
        return None

    def _updates(self, name: str, ours: list[dict[str, Any]],
                 incremental: bool) -> tuple[tuple[ErrorCode, str] | None, dict[str, str | None]]:
        """(a refusal, or None) and the dynamic defaults a resource's owned keys set (None: remove)."""
        keys = sorted(c["name"] for c in ours)
        if name != CLUSTER_DEFAULT and keys:
            return (ErrorCode.INVALID_REQUEST, f"{', '.join(keys)}: kept by the tiered-storage proxy for the whole "
                    "cluster, not per broker; set them as cluster-wide defaults (--entity-default)"), {}
        fixed = [key for key in keys if key not in DYNAMIC_KEYS]
        if fixed:
            return (ErrorCode.INVALID_REQUEST, f"Cannot update these configs dynamically: {fixed}; they are kept by "
                    "the tiered-storage proxy: set them in its properties file and restart it (point the tools at "
                    "the brokers to change their own tiered storage)"), {}
        if not incremental:  # AlterConfigs replaces every dynamic default of the proxy's
            updates: dict[str, str | None] = {key: None for key in self.cluster.dynamic()}
            updates.update({c["name"]: c["value"] for c in ours})
            return None, updates
        updates = {}
        for c in ours:
            if c["config_operation"] not in (OP_SET, OP_DELETE):
                return (ErrorCode.INVALID_CONFIG, f"{c['name']} is not a list: it can be set or deleted, not "
                        "appended to or subtracted from"), {}
            updates[c["name"]] = c["value"] if c["config_operation"] == OP_SET else None
        return None, updates

    async def _alter(self, updates: dict[str, str | None], validate_only: bool) -> tuple[ErrorCode, str | None]:
        try:
            await trio.to_thread.run_sync(lambda: self.cluster.alter(updates, validate_only=validate_only))
        except ValueError as exc:
            return ErrorCode.INVALID_CONFIG, str(exc)
        except Exception as exc:  # the metadata store could not keep it
            return ErrorCode.UNKNOWN_SERVER_ERROR, f"the proxy could not record the configs: {exc}"
        return ErrorCode.NONE, None
