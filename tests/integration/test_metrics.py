"""The Prometheus endpoint of a proxy that tiered and serves the history topic: KIP-405 metrics
under Kafka's names agree with the remote tier, and the proxy's own request metrics move."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from tests.clients import consume_records
from tests.history import PARTITIONS
from tiering.metadata.view import load_metadata

TOPIC_METRICS = "kafka_server_brokertopicmetrics_"


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_metrics_follow_remote_reads_and_copies(history):
    before = scrape(history.metrics_url)
    topic = (("topic", history.topic),)
    # Read the start of every partition: it is only in the remote tier.
    consume_records("confluent", history.proxy.bootstrap, history.topic, PARTITIONS, 3000)
    # Listed before the scrape: a copy that starts in between puts objects the scrape never counted.
    objects = [f for f in (history.data_dir / "remote").glob(f"{history.topic}-*/*/*") if f.is_file()]
    after = scrape(history.metrics_url)

    def grew(name: str, labels: tuple = topic) -> float:
        return after[(name, labels)] - before.get((name, labels), 0)

    assert grew(TOPIC_METRICS + "remotefetchbytespersec_total") > 0
    assert grew(TOPIC_METRICS + "remotefetchrequestspersec_total") > 0
    assert after.get((TOPIC_METRICS + "remotefetcherrorspersec_total", topic), 0) == 0
    state = load_metadata(f"file://{history.data_dir / 'metadata'}")
    remote_bytes = sum(s.segment_size_bytes for tp in state.readable_partitions() if tp.topic == history.topic
                       for s in state.finished(tp))
    assert after[(TOPIC_METRICS + "remotelogsizebytes", topic)] == remote_bytes
    assert after[(TOPIC_METRICS + "remotecopybytespersec_total", topic)] == remote_bytes  # nothing expired
    assert after[(TOPIC_METRICS + "remotecopyerrorspersec_total", topic)] == 0
    assert after[(TOPIC_METRICS + "remotecopylagbytes", topic)] >= 0
    idle = after[("kafka_log_remote_remotestoragethreadpool_remotelogreaderavgidlepercent", ())]
    assert 0 <= idle <= 1
    assert after[("kafka_log_remote_remotestoragethreadpool_remotelogreadertaskqueuesize", ())] >= 0
    assert 0 <= after[("kafka_log_remote_remotelogmanager_remotelogmanagertasksavgidlepercent", ())] <= 1
    assert grew("tiered_proxy_requests_total", (("api", "Fetch"), ("outcome", "rewritten"))) > 0
    assert after[("tiered_proxy_requests_total", (("api", "ApiVersions"), ("outcome", "local")))] > 0
    assert grew("tiered_proxy_request_latency_seconds_count", (("api", "Fetch"),)) > 0
    assert grew("tiered_proxy_bytes_out_total", ()) > 0 and grew("tiered_proxy_bytes_in_total", ()) > 0
    assert after[("tiered_proxy_data_loss_gaps_total", ())] == 0
    assert after[("tiered_proxy_local_log_start_moves_total", ())] > 0
    assert after[("tiered_proxy_tiering_rounds_total", ())] >= 1  # the history was tiered in rounds
    assert 0 < after[("tiered_proxy_tiering_round_seconds", ())] < 600
    assert "first tiering round done: " in history.proxy.log_text()
    # The remote tier's requests: each of the topic's objects was a PUT (the proxy may have tiered
    # other tests' topics too: at least), and the reads above were GETs. Exact counts: test_storage_s3.
    tier = f"file://{(history.data_dir / 'remote').resolve()}"
    assert after[("tiered_proxy_remote_storage_requests_total", (("kind", "PUT"), ("tier", tier)))] >= len(objects) > 0
    assert after[("tiered_proxy_remote_storage_bytes_total", (("direction", "written"), ("tier", tier)))] >= sum(
        f.stat().st_size for f in objects)
    assert grew("tiered_proxy_remote_storage_requests_total", (("kind", "GET"), ("tier", tier))) > 0
    assert grew("tiered_proxy_remote_storage_bytes_total", (("direction", "read"), ("tier", tier))) > 0
    assert after[("tiered_proxy_remote_storage_request_failures_total", (("kind", "GET"), ("tier", tier)))] == 0
