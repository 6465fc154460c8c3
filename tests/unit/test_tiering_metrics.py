"""The tiering counters the Prometheus endpoint exposes under the proxy's own names (the live
endpoint is checked in tests/integration/test_metrics.py)."""

from __future__ import annotations

import logging
import socket
from types import SimpleNamespace

from proxy.filters.metrics import ProxyCollector
from tiering.config import TieringConfig
from tiering.copy.manager import RemoteLogManager
from tiering.copy.metrics import TieringMetrics
from tiering.metadata.journal_store import FileMetadataStore
from tiering.metadata.manifests import ManifestCounters
from tiering.quota import UNLIMITED, ByteRateQuota
from tiering.storage.api import StorageRequests
from tiering.storage.local_folder import LocalFolderStorage


def test_leader_changes_and_divergences_are_counters() -> None:
    metrics = TieringMetrics()
    metrics.add("t", leader_changes=3, divergences=2, diverged_offsets=50, data_loss_gaps=1, data_loss_offsets=5)
    manager = SimpleNamespace(metrics=metrics, topic_sizes=dict, pool_state=lambda: (0, 1), rounds=4, last_round_s=2.5,
                              copiers={}, copy_quota=ByteRateQuota(UNLIMITED))
    tiering = SimpleNamespace(manager=manager, storage_uri="file:///remote", storage=SimpleNamespace(
        requests=StorageRequests()), manifests=SimpleNamespace(counters=ManifestCounters(written=7, failed=1)),
        archives=[], read_replica=None)
    collector = ProxyCollector(None, tiering, None)  # type: ignore[arg-type]
    samples = {s.name: s.value for family in collector._remote_metrics() for s in family.samples}
    assert samples["tiered_proxy_leader_changes_total"] == 3
    assert (samples["tiered_proxy_manifest_writes_total"], samples["tiered_proxy_manifest_write_failures_total"]) == (7, 1)
    assert samples["tiered_proxy_log_divergences_total"] == 2
    assert samples["tiered_proxy_diverged_offsets_total"] == 50
    assert (samples["tiered_proxy_data_loss_gaps_total"], samples["tiered_proxy_data_loss_offsets_total"]) == (1, 5)
    assert (samples["tiered_proxy_tiering_rounds_total"], samples["tiered_proxy_tiering_round_seconds"]) == (4, 2.5)


def test_a_round_without_the_clusters_metadata_is_not_called_the_first_round(tmp_path, caplog) -> None:
    """The log's "first tiering round done" (wide_read waits for it) means a round over the
    cluster's partitions, not one that could not reach a broker."""
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
    with FileMetadataStore(tmp_path / "metadata") as rlmm, caplog.at_level(logging.INFO):
        manager = RemoteLogManager(f"127.0.0.1:{closed.getsockname()[1]}", LocalFolderStorage(tmp_path / "remote"),
                                   rlmm, TieringConfig(), tmp_path / "data")
        try:
            manager.run_once()
        finally:
            manager.stop()
            closed.close()
    assert (manager.rounds, manager.cluster_rounds) == (1, 0)
    assert "cannot read cluster metadata for tiering" in caplog.text
    assert "first tiering round done" not in caplog.text
