"""The admin operations the tiering tests need, through kafka-python's and confluent-kafka's
admin clients (the same calls an operator's tools make)."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

ADMIN_CLIENTS = ["kafka-python", "confluent"]


class AdminError(Exception):
    """An admin call the broker or proxy refused: ``code`` is the Kafka error code."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


@dataclass
class Described:
    value: str | None
    source: int
    synonyms: list[tuple[str, str | None, int]]


class Admin:
    def __init__(self, client: str, bootstrap: str) -> None:
        self.client = client
        self.bootstrap = bootstrap
        if client == "kafka-python":
            from kafka.admin import KafkaAdminClient

            self.admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30_000)
        else:
            from confluent_kafka.admin import AdminClient

            self.admin = AdminClient({"bootstrap.servers": bootstrap})

    def close(self) -> None:
        if self.client == "kafka-python":
            self.admin.close()

    def create_topic(self, topic: str, partitions: int, configs: dict[str, str]) -> None:
        if self.client == "kafka-python":
            from kafka.admin import NewTopic
            from kafka.errors import KafkaError

            try:
                self.admin.create_topics([NewTopic(topic, partitions, 1, topic_configs=configs)], timeout_ms=30_000)
            except KafkaError as e:
                raise AdminError(getattr(e, "errno", -1), str(e)) from None
        else:
            from confluent_kafka import KafkaException
            from confluent_kafka.admin import NewTopic

            try:
                self.admin.create_topics([NewTopic(topic, partitions, 1, config=configs)])[topic].result(30)
            except KafkaException as e:
                raise AdminError(e.args[0].code(), e.args[0].str()) from None
        self._wait_known(topic)

    def _wait_known(self, topic: str, timeout: float = 30) -> None:
        """Until the brokers' metadata has the new topic: a KRaft broker learns of it from the
        controller a moment after CreateTopics answers, and until then describing it fails with
        UNKNOWN_TOPIC_OR_PARTITION (as it would for any client)."""
        from tiering.broker_client import BrokerClient

        client = BrokerClient(self.bootstrap)
        deadline = time.monotonic() + timeout
        try:
            while topic not in client.metadata([topic]) and time.monotonic() < deadline:
                time.sleep(0.1)
        finally:
            client.close()

    def describe(self, topic: str) -> dict[str, Described]:
        if self.client == "kafka-python":
            from kafka.admin import ConfigResource, ConfigResourceType

            result = self.admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)],
                                                 include_synonyms=True, config_filter="all")
            entries = result["TOPIC"][topic] if "TOPIC" in result else next(iter(result.values()))[topic]
            return {name: Described(e.get("value"), _source(e.get("config_source", e.get("source", -1))),
                                    [(s["name"], s["value"], _source(s["source"])) for s in e.get("synonyms", [])])
                    for name, e in entries.items()}
        from confluent_kafka.admin import ConfigResource

        future = self.admin.describe_configs([ConfigResource("TOPIC", topic)], request_timeout=30)
        entries = next(iter(future.values())).result(30)
        return {name: Described(e.value, int(e.source), [(s.name, s.value, int(s.source)) for s in e.synonyms.values()])
                for name, e in entries.items()}

    def set_configs(self, topic: str, configs: dict[str, str]) -> None:
        """IncrementalAlterConfigs SET of each key."""
        if self.client == "kafka-python":
            from kafka.admin import ConfigResource, ConfigResourceType
            from kafka.errors import KafkaError

            try:
                result = self.admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, configs=configs)],
                                                  raise_on_unknown=False, incremental=True)
            except KafkaError as e:
                raise AdminError(getattr(e, "errno", -1), str(e)) from None
            outcome = result["topic"][topic]  # "OK" or the error, as "[Error N] Name: message"
            if outcome != "OK":
                match = re.match(r"\[Error (-?\d+)\] \w+: ?(.*)", outcome, re.S)
                raise AdminError(int(match.group(1)) if match else -1, match.group(2) if match else outcome)
            return
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

        entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()]
        future = self.admin.incremental_alter_configs([ConfigResource("TOPIC", topic, incremental_configs=entries)])
        try:
            next(iter(future.values())).result(30)
        except KafkaException as e:
            raise AdminError(e.args[0].code(), e.args[0].str()) from None

    def delete_records(self, topic: str, offsets: dict[int, int]) -> dict[int, int]:
        """Low watermark per partition after DeleteRecords."""
        if self.client == "kafka-python":
            from kafka import TopicPartition

            result = self.admin.delete_records({TopicPartition(topic, p): o for p, o in offsets.items()},
                                               timeout_ms=30_000)
            return {tp.partition: r["low_watermark"] for tp, r in result.items()}
        from confluent_kafka import TopicPartition

        futures = self.admin.delete_records([TopicPartition(topic, p, o) for p, o in offsets.items()])
        return {tp.partition: f.result(30).low_watermark for tp, f in futures.items()}

    def delete_topic(self, topic: str) -> None:
        if self.client == "kafka-python":
            self.admin.delete_topics([topic], timeout_ms=30_000)
        else:
            self.admin.delete_topics([topic])[topic].result(30)


_SOURCES = {"UNKNOWN": 0, "DYNAMIC_TOPIC_CONFIG": 1, "DYNAMIC_BROKER_CONFIG": 2, "DYNAMIC_DEFAULT_BROKER_CONFIG": 3,
            "STATIC_BROKER_CONFIG": 4, "DEFAULT_CONFIG": 5, "DYNAMIC_BROKER_LOGGER_CONFIG": 6}


def _source(value: object) -> int:
    """kafka-python names config sources; confluent-kafka numbers them."""
    if isinstance(value, str) and not value.lstrip("-").isdigit():
        return _SOURCES[value.rsplit(".", 1)[-1]]
    return int(value)  # type: ignore[arg-type]

