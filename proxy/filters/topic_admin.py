"""Tiering through Kafka's own admin APIs: the proxy's part of CreateTopics, DescribeConfigs,
AlterConfigs, IncrementalAlterConfigs, DeleteRecords and DeleteTopics.

The tiering keys (``tiering.topic_configs.TIERING_KEYS``) are taken out of every request and kept
in the metadata store; the rest of the request goes to the broker, which also checks that the
topic exists and that the client may alter it. Tiering values are recorded only for resources the
broker accepted, so a refused request changes nothing. Resources the proxy refuses itself
(invalid tiering values, KIP-950's disablement in progress) are not forwarded and are answered in
their place in the response.

DescribeConfigs answers like a broker's ``describe --all``: every tiering key of every described
topic, with the topic's value (DYNAMIC_TOPIC_CONFIG) or the proxy's default (a cluster-wide dynamic
default, STATIC_BROKER_CONFIG where the proxy's properties set it, else DEFAULT_CONFIG), whatever the
broker listed. Broker configs count as a topic's own only as ``BrokerTopicConfigs`` says.

DeleteRecords moves the remote log start too (the copier deletes segments wholly below it);
DeleteTopics marks the topic's remote partitions for deletion.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import trio

from protocol.apis import (
    ALTER_CONFIGS,
    CREATE_TOPICS,
    DELETE_RECORDS,
    DELETE_TOPICS,
    DESCRIBE_CONFIGS,
    INCREMENTAL_ALTER_CONFIGS,
)
from protocol.errors import ErrorCode
from proxy.chain import Answer, Filter, Message, RequestContext
from proxy.config import ProxyConfig
from tiering.broker_client import BrokerClient, BrokerClientError
from tiering.config import TieringConfig
from tiering.model import TopicTieringState
from tiering.read.reader import RemoteReader
from tiering.service import TieringService
from tiering.topic_configs import (
    REMOTE_STORAGE_ENABLE,
    TIERING_KEYS,
    BrokerTopicConfigs,
    DescribedConfig,
    TopicConfigError,
    describe,
    is_enabled,
    transition,
    validate,
)
from tiering.topic_owner import REMOTE_LOG_COPY_DISABLE, BrokerTiering, ownership_conflict, set_on_topic

log = logging.getLogger(__name__)

TOPIC_RESOURCE = 2
OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3
# Configs a tiering validation needs from the broker's side of the topic.
_RELATED = ("cleanup.policy", "retention.ms", "retention.bytes")
_MIN_ID_WAIT_S, _MAX_ID_WAIT_S = 5.0, 60.0  # bounds of the wait for a new topic's id


def _now_ms() -> int:
    return int(time.time() * 1000)


class TopicAdmin(Filter):
    name = "topic-admin"
    apis = frozenset({CREATE_TOPICS, DELETE_TOPICS, DELETE_RECORDS, DESCRIBE_CONFIGS, ALTER_CONFIGS,
                      INCREMENTAL_ALTER_CONFIGS})

    @property
    def defaults(self) -> TieringConfig:  # the proxy's properties under the cluster's dynamic defaults
        return self.tiering.cluster_configs.tiering()

    def _described(self, values: dict[str, str]) -> list[DescribedConfig]:
        return describe(values, self.defaults, self.tiering.cluster_configs.dynamic())

    def __init__(self, config: ProxyConfig, tiering: TieringService, reader: RemoteReader) -> None:
        self.tiering = tiering
        self.reader = reader  # the remote log start (Rx) of tiered partitions
        self._broker = BrokerClient(config.bootstrap, security=tiering.manager.security)
        self._broker_lock = threading.Lock()  # one request at a time on the helper client
        self._handlers = {
            CREATE_TOPICS: self.on_create_topics, DELETE_TOPICS: self.on_delete_topics,
            DELETE_RECORDS: self.on_delete_records, DESCRIBE_CONFIGS: self.on_describe_configs,
            ALTER_CONFIGS: self.on_alter_configs, INCREMENTAL_ALTER_CONFIGS: self.on_incremental_alter_configs,
        }

    async def on_request(self, ctx: RequestContext) -> Answer | None:
        return await self._handlers[ctx.api.key](ctx)

    def close(self) -> None:
        self._broker.close()

    # --- helpers ---------------------------------------------------------------------------------

    async def _broker_call(self, call: Callable[[BrokerClient], Any]) -> Any:
        def run() -> Any:
            with self._broker_lock:
                return call(self._broker)
        return await trio.to_thread.run_sync(run)

    async def _store(self, call: Callable[[], Any]) -> Any:
        return await trio.to_thread.run_sync(call)

    def _current(self, topic: str) -> TopicTieringState | None:
        state = self.tiering.metadata.topic_tiering_state(topic)
        return None if state is None or state.deleted else state

    # --- CreateTopics ----------------------------------------------------------------------------

    async def on_create_topics(self, ctx: RequestContext) -> Answer | None:
        request = ctx.request.body
        refused: dict[str, tuple[ErrorCode, str]] = {}
        ours: dict[str, dict[str, str]] = {}
        for topic in request["topics"]:
            values = {c["name"]: c["value"] for c in topic["configs"] if c["name"] in TIERING_KEYS and c["value"] is not None}
            if not values and not self.defaults.tier_all_topics:
                continue
            others = {c["name"]: c["value"] for c in topic["configs"] if c["name"] in _RELATED}
            try:
                validate(values, others, self.defaults)
            except TopicConfigError as e:
                refused[topic["name"]] = (e.code, e.message)
                continue
            ours[topic["name"]] = values
            topic["configs"] = [c for c in topic["configs"] if c["name"] not in TIERING_KEYS]
        if not refused and not ours:
            return None
        order = [t["name"] for t in request["topics"]]
        request["topics"] = [t for t in request["topics"] if t["name"] not in refused]
        validate_only = bool(request.get("validate_only"))
        # As long as the client waits, the proxy may wait for a new topic's id: Kafka 4.4 listed one
        # of 5,000 partitions after more than 5 s (without its id: "another incarnation", not tiered).
        id_wait_s = min(max(request.get("timeout_ms", 0) / 1000, _MIN_ID_WAIT_S), _MAX_ID_WAIT_S)

        def refusal(name: str) -> dict[str, Any]:
            code, message = refused[name]
            return {"name": name, "topic_id": bytes(16), "error_code": code, "error_message": message,
                    "num_partitions": -1, "replication_factor": -1, "configs": None}

        if not request["topics"]:
            return ctx.answer({"throttle_time_ms": 0, "topics": [refusal(n) for n in order]})

        async def rewrite(ctx: RequestContext, message: Message) -> None:
            response = message.body
            for result in response["topics"]:
                name = result["name"]
                if name not in ours or result["error_code"] != ErrorCode.NONE:
                    continue
                if not validate_only:
                    broker_id = uuid.UUID(bytes=bytes(result.get("topic_id") or bytes(16)))
                    if broker_id.int == 0:  # CreateTopics before v7 carries no id; the broker may have one
                        broker_id = await self._broker_topic_id(name, id_wait_s)
                    await self._store(lambda n=name, i=broker_id: self._created(n, i, ours[n]))
                if result.get("configs") is not None:
                    result["configs"] = [c for c in result["configs"] if c["name"] not in TIERING_KEYS] + [
                        {"name": d.name, "value": d.value, "read_only": False, "config_source": d.source,
                         "is_sensitive": False} for d in self._described(ours[name])]
            answered = {r["name"]: r for r in response["topics"]}
            response["topics"] = [answered[n] if n in answered else refusal(n) for n in order if n in answered or n in refused]
            message.changed()

        ctx.request.changed()
        ctx.on_response(rewrite)
        return None

    async def _broker_topic_id(self, name: str, wait_s: float) -> uuid.UUID:
        """The new topic's id from Metadata. A broker learns a new topic from the controller a little
        after CreateTopics is answered, so the broker asked may not list it yet (on a three-broker Kafka
        4.4 every topic librdkafka created was missing at first, and was recorded with a zero id, which
        the copier then took for another incarnation and switched tiering off): asked again until it
        is listed, for at most ``wait_s``."""
        deadline = trio.current_time() + wait_s
        while True:
            try:
                info = (await self._broker_call(lambda b: b.metadata([name]))).get(name)
            except BrokerClientError as e:
                log.warning("cannot read the id of new topic %s: %s", name, e)
                return uuid.UUID(int=0)
            if info is not None:
                return info.topic_id
            if trio.current_time() >= deadline:
                log.warning("new topic %s is not in the brokers' metadata after %.0f s: its id is unknown",
                            name, wait_s)
                return uuid.UUID(int=0)
            await trio.sleep(0.05)

    def _created(self, name: str, broker_id: uuid.UUID, values: dict[str, str]) -> None:
        """A new topic: whatever the store still holds under its name is an older incarnation."""
        manager = self.tiering.manager
        manager.mark_topic_deleted(name)
        topic_id = manager.resolve_topic_id(name, broker_id, new_incarnation=True)
        state = transition(None, name, topic_id, values, self.defaults, _now_ms(), enable_named=True)
        self.tiering.metadata.put_topic_tiering_state(state)
        log.info("topic %s created with tiering %s", name, "enabled" if is_enabled(values, self.defaults) else "off")
        manager.wake()

    # --- DescribeConfigs -------------------------------------------------------------------------

    async def on_describe_configs(self, ctx: RequestContext) -> Answer | None:
        request = ctx.request.body
        asked: dict[str, list[str] | None] = {}
        for r in request["resources"]:
            if r["resource_type"] == TOPIC_RESOURCE:
                asked[r["resource_name"]] = r["configuration_keys"]
                r["configuration_keys"] = None  # all of them (Tansu drops the connection on named keys)
        if not asked:
            return None
        synonyms = bool(request.get("include_synonyms"))
        documentation = bool(request.get("include_documentation"))

        async def rewrite(ctx: RequestContext, message: Message) -> None:
            response = message.body
            for result in response["results"]:
                name = result["resource_name"]
                if result["resource_type"] != TOPIC_RESOURCE or name not in asked or result["error_code"] != ErrorCode.NONE:
                    continue  # a refusal stays the broker's
                state = self._current(name)
                if state is None and name in self.tiering.manager.brokers_hold:
                    continue  # the brokers tier it: their tiering keys, as they describe them
                if state is None and not result["configs"] and not await self._topic_exists(name):
                    continue  # Tansu describes a topic it does not have as an empty listing
                # The proxy's record, else what is set on the topic at a broker that knows the keys
                # (never the defaults noida-db lists; see BrokerTopicConfigs).
                values = state.config_map if state is not None else \
                    BrokerTopicConfigs.from_described(result["configs"]).tiering_values()
                configs = [c for c in result["configs"] if c["name"] not in TIERING_KEYS]
                for d in self._described(values):
                    configs.append({
                        "name": d.name, "value": d.value, "read_only": False, "config_source": d.source,
                        "is_default": d.is_default, "is_sensitive": False, "config_type": d.config_type,
                        "documentation": d.documentation if documentation else None,
                        "synonyms": [{"name": n, "value": v, "source": s} for n, v, s in d.synonyms] if synonyms else [],
                    })
                keys = asked[name]
                if keys:  # null or empty: every key, as Kafka answers
                    configs = [c for c in configs if c["name"] in keys]
                result["configs"] = configs
            message.changed()

        ctx.request.changed()
        ctx.on_response(rewrite)
        return None

    async def _topic_exists(self, name: str) -> bool:
        try:
            return name in await self._broker_call(lambda b: b.metadata([name]))
        except BrokerClientError as e:
            log.warning("cannot check whether topic %s exists: %s", name, e)
            return True

    # --- AlterConfigs / IncrementalAlterConfigs --------------------------------------------------

    async def on_alter_configs(self, ctx: RequestContext) -> Answer | None:
        return await self._alter(ctx, incremental=False)

    async def on_incremental_alter_configs(self, ctx: RequestContext) -> Answer | None:
        return await self._alter(ctx, incremental=True)

    async def _alter(self, ctx: RequestContext, *, incremental: bool) -> Answer | None:
        request = ctx.request.body
        watched = (*TIERING_KEYS, REMOTE_LOG_COPY_DISABLE)
        topics = [r for r in request["resources"] if r["resource_type"] == TOPIC_RESOURCE
                  and any(c["name"] in watched for c in r["configs"])]
        if not incremental:
            # AlterConfigs replaces every config: removing a tiering key counts as changing it.
            topics = [r for r in request["resources"] if r["resource_type"] == TOPIC_RESOURCE
                      and (any(c["name"] in watched for c in r["configs"]) or self._current(r["resource_name"]))]
        if not topics:
            return None
        names = [r["resource_name"] for r in topics]
        try:
            broker_configs = await self._broker_call(lambda b: b.topic_configs(names))
            broker_topics = await self._broker_call(lambda b: b.metadata(names))
            system = await self._broker_call(lambda b: b.tiered_storage_enabled()) \
                if any(map(set_on_topic, broker_configs.values())) else None
        except BrokerClientError as e:
            log.warning("cannot read topic configs for an alteration: %s", e)
            broker_configs, broker_topics, system = {}, {}, None
        refused: dict[str, tuple[ErrorCode, str]] = {}
        planned: dict[str, TopicTieringState] = {}
        now = _now_ms()
        for r in topics:
            name = r["resource_name"]
            current = self._current(name)
            described = broker_configs.get(name)
            brokers = BrokerTiering.of(described, system) if described is not None else BrokerTiering(False, False)
            conflict = ownership_conflict(name, r["configs"], brokers, current, incremental=incremental)
            if conflict is not None:
                refused[name] = (ErrorCode.INVALID_CONFIG, conflict)
                continue
            keys = {c["name"] for c in r["configs"]}
            if brokers.holds and current is None and REMOTE_STORAGE_ENABLE not in keys:
                continue  # the brokers' topic: its tiering keys go to them untouched
            if incremental and keys.isdisjoint(TIERING_KEYS):
                continue  # only remote.log.copy.disable, which is the brokers' key
            # An incremental change starts from the topic's tiering values: the proxy's record, or
            # (none yet) those set on the topic at a broker that knows the keys but does not tier.
            start = current.config_map if current is not None else \
                described.tiering_values() if described and not brokers.holds else {}
            values = dict(start) if incremental else {}
            related = {k: v for k, v in (described.applicable() if described else {}).items() if k in _RELATED}
            named = False
            try:
                for c in r["configs"]:
                    op = c.get("config_operation", OP_SET) if incremental else OP_SET
                    target = values if c["name"] in TIERING_KEYS else related if c["name"] in _RELATED else None
                    if target is None:
                        continue
                    named |= c["name"] == REMOTE_STORAGE_ENABLE
                    if op == OP_SET:
                        target[c["name"]] = c["value"]
                    elif op == OP_DELETE:
                        target.pop(c["name"], None)
                    elif c["name"] in TIERING_KEYS:
                        raise TopicConfigError(ErrorCode.INVALID_CONFIG, f"Config value append is not allowed for "
                                                                         f"config key {c['name']}")
                if not incremental and current is not None:
                    named |= current.config_map.get(REMOTE_STORAGE_ENABLE) != values.get(REMOTE_STORAGE_ENABLE)
                validate({k: v for k, v in values.items() if v is not None}, related, self.defaults)
                info = broker_topics.get(name)
                if info is None:
                    continue  # the broker answers for a topic it does not have
                topic_id = await self._store(lambda n=name, i=info.topic_id: self.tiering.manager.resolve_topic_id(n, i))
                planned[name] = transition(current, name, topic_id, values, self.defaults, now, enable_named=named)
            except TopicConfigError as e:
                refused[name] = (e.code, e.message)
                continue
            r["configs"] = [c for c in r["configs"] if c["name"] not in TIERING_KEYS]
        order = [(r["resource_type"], r["resource_name"]) for r in request["resources"]]
        request["resources"] = [r for r in request["resources"]
                                if not (r["resource_type"] == TOPIC_RESOURCE and r["resource_name"] in refused)]
        validate_only = bool(request.get("validate_only"))

        def refusal(name: str) -> dict[str, Any]:
            code, message = refused[name]
            return {"error_code": code, "error_message": message, "resource_type": TOPIC_RESOURCE, "resource_name": name}

        if not request["resources"]:
            return ctx.answer({"throttle_time_ms": 0,
                                                      "responses": [refusal(n) for _, n in order]})

        async def rewrite(ctx: RequestContext, message: Message) -> None:
            response = message.body
            for result in response["responses"]:
                name = result["resource_name"]
                if (result["resource_type"] == TOPIC_RESOURCE and name in planned
                        and result["error_code"] == ErrorCode.NONE and not validate_only):
                    state = planned[name]
                    await self._store(lambda s=state: self.tiering.metadata.put_topic_tiering_state(s))
                    log.info("topic %s: tiering configs %s, state %s (tiered epoch %d)", name, dict(state.configs),
                             state.state.name if state.state is not None else "off", state.tiered_epoch)
                    self.tiering.manager.wake()
            answered = {(r["resource_type"], r["resource_name"]): r for r in response["responses"]}
            response["responses"] = [answered[k] if k in answered else refusal(k[1]) for k in order
                                     if k in answered or k[1] in refused]
            message.changed()

        ctx.request.changed()
        ctx.on_response(rewrite)
        return None

    # --- DeleteRecords ---------------------------------------------------------------------------

    async def on_delete_records(self, ctx: RequestContext) -> Answer | None:
        request = ctx.request.body
        tiered = {(tp.topic, tp.partition): tp for tp in self.tiering.metadata.readable_partitions()}
        targets = {(t["name"], p["partition_index"]): p["offset"] for t in request["topics"] for p in t["partitions"]
                   if (t["name"], p["partition_index"]) in tiered}
        if not targets:
            return None
        reader = self.reader

        async def rewrite(ctx: RequestContext, message: Message) -> None:
            response = message.body
            for t in response["topics"]:
                for p in t["partitions"]:
                    key = (t["name"], p["partition_index"])
                    if key not in targets or p["error_code"] != ErrorCode.NONE:
                        continue
                    tp = tiered[key]
                    wanted = targets[key] if targets[key] >= 0 else p["low_watermark"]  # -1: up to the high watermark
                    rx = reader.log_start(tp) if reader is not None else None
                    if rx is not None and wanted > rx:
                        await self._store(lambda tp=tp, w=wanted: self.tiering.metadata.put_remote_log_start_offset(
                            tp, w, _now_ms()))
                        log.info("DeleteRecords moved %s remote log start %d -> %d", tp, rx, wanted)
                        self.tiering.manager.wake()
                    if rx is not None:
                        p["low_watermark"] = max(rx, wanted)
            message.changed()

        ctx.on_response(rewrite)
        return None

    # --- DeleteTopics ----------------------------------------------------------------------------

    async def on_delete_topics(self, ctx: RequestContext) -> Answer | None:
        async def rewrite(ctx: RequestContext, message: Message) -> None:
            response = message.body
            for result in response["responses"]:
                if result["error_code"] != ErrorCode.NONE:
                    continue
                name = result.get("name")
                raw_id = result.get("topic_id")
                topic_id = uuid.UUID(bytes=bytes(raw_id)) if raw_id and bytes(raw_id) != bytes(16) else None
                if name is None and topic_id is not None:
                    name = next((tp.topic for tp in self.tiering.metadata.partitions() if tp.topic_id == topic_id), None)
                if name is not None and self.defaults.deleted_topic_retention_ms == 0:
                    # Kafka's rule (else kept for proxy.deleted.topic.retention.ms): every incarnation, now.
                    await self._store(lambda n=name: self.tiering.manager.mark_topic_deleted(n))
                    self.tiering.manager.wake()

        ctx.on_response(rewrite)
        return None
