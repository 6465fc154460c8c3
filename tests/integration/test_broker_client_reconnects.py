"""The tiering side's broker client after a broker restart (issue 27, found by the chaos test):
each copier thread keeps a connection per broker, and after a restart each of them was found dead
only by a failed request, one failure (and a doubled backoff) per thread. A connection the broker
closed after answering is now replaced once, at once."""

from __future__ import annotations

import pytest

from proxy.embedded_broker import start_broker
from tests.tiering_checks import create_tiered_topic
from tiering.broker_client import EARLIEST, BrokerClient, BrokerClientError

pytestmark = pytest.mark.integration


def test_a_connection_the_restarted_broker_closed_is_replaced_without_an_error(tmp_path, unique_name):
    broker = start_broker("noida", tmp_path / "broker")
    client = BrokerClient(broker.bootstrap)
    try:
        create_tiered_topic(broker.bootstrap, unique_name, partitions=1)
        leader = client.metadata([unique_name])[unique_name].partitions[0].leader
        assert client.list_offset(leader, unique_name, 0, EARLIEST) == (0, 0)
        broker.stop()
        with pytest.raises(BrokerClientError) as gone:
            client.list_offset(leader, unique_name, 0, EARLIEST)
        assert "SASL" not in str(gone.value)
        broker = start_broker("noida", tmp_path / "broker", port=broker.port)
        client.metadata([unique_name])  # a connection that answered, then the broker restarts again
        broker.stop()
        broker = start_broker("noida", tmp_path / "broker", port=broker.port)
        assert client.list_offset(leader, unique_name, 0, EARLIEST) == (0, 0)
    finally:
        client.close()
        broker.stop()
