"""The cluster-wide dynamic defaults of the broker keys the proxy keeps (tiering/cluster_configs.py):
checked as the proxy reads them, kept in the metadata store across a reopen, taken over the
proxy's properties, and refused whole for a key Kafka does not change dynamically."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import trio

from proxy.filters.tiered_reads import TieredReads
from tiering.cluster_configs import DYNAMIC_KEYS, READ_KEYS, ClusterConfigs
from tiering.config import TieringConfig
from tiering.metadata.journal_store import FileMetadataStore
from tiering.quota import UNLIMITED, ByteRateQuota

PROPS = {"log.remote.copy.lag.ms": "1000", "remote.fetch.max.wait.ms": "300"}


def test_dynamic_defaults_override_the_properties_and_outlive_the_store(tmp_path: Path) -> None:
    with FileMetadataStore(tmp_path / "metadata") as store:
        cluster = ClusterConfigs(PROPS, store)
        assert cluster.tiering().copy_lag_ms == 1000 and cluster.dynamic() == {}
        before = cluster.tiering()
        cluster.alter({"log.remote.copy.lag.ms": "5000", "remote.log.manager.copy.max.bytes.per.second": "1000"})
        after = cluster.tiering()
        assert after is not before and (after.copy_lag_ms, after.copy_max_bytes_per_second) == (5000, 1000)
        assert cluster.tiering() is after  # unchanged record: the same settings, not rebuilt
        assert cluster.effective()["remote.fetch.max.wait.ms"] == "300"  # the properties' own, kept
    with FileMetadataStore(tmp_path / "metadata") as store:
        cluster = ClusterConfigs(PROPS, store)
        assert cluster.dynamic() == {"log.remote.copy.lag.ms": "5000",
                                     "remote.log.manager.copy.max.bytes.per.second": "1000"}
        cluster.alter({"log.remote.copy.lag.ms": None})  # deleted: the properties' value again
        assert cluster.tiering().copy_lag_ms == 1000
        assert cluster.tiering().copy_max_bytes_per_second == 1000


@pytest.mark.parametrize(("updates", "words"), [
    ({"remote.log.manager.thread.pool.size": "2"}, "Cannot update these configs dynamically"),
    ({"log.local.retention.ms": "soon"}, "log.local.retention.ms must be an integer"),
    ({"log.local.retention.bytes": "-3"}, "log.local.retention.bytes must be at least -2"),
    ({"remote.log.reader.threads": "0"}, "remote.log.reader.threads must be at least 1"),
    ({"remote.log.manager.fetch.max.bytes.per.second": "0"}, "must be at least 1"),
    ({"log.remote.copy.lag.bytes": "-2"}, "log.remote.copy.lag.bytes must be at least -1"),
])
def test_a_bad_update_is_refused_whole_naming_the_key(tmp_path: Path, updates: dict[str, str], words: str) -> None:
    with FileMetadataStore(tmp_path / "metadata") as store:
        cluster = ClusterConfigs({}, store)
        with pytest.raises(ValueError, match=words):
            cluster.alter({"log.remote.copy.lag.ms": "7", **updates})
        assert cluster.dynamic() == {} and store.cluster_tiering_configs() is None


def test_validate_only_writes_nothing(tmp_path: Path) -> None:
    with FileMetadataStore(tmp_path / "metadata") as store:
        cluster = ClusterConfigs({}, store)
        cluster.alter({"log.remote.copy.lag.ms": "7"}, validate_only=True)
        assert cluster.dynamic() == {}


def test_every_dynamic_key_is_one_the_proxy_reads() -> None:
    tiering_keys = set(TieringConfig.KEYS.values())
    assert DYNAMIC_KEYS <= tiering_keys | set(READ_KEYS), DYNAMIC_KEYS - tiering_keys - set(READ_KEYS)


def test_the_remote_reads_follow_the_dynamic_defaults_at_the_next_fetch(tmp_path: Path) -> None:
    """TieredReads.follow_cluster_configs (called at each Fetch): quota, wait, threads and index
    cache take a changed record; an unchanged one costs one comparison."""
    with FileMetadataStore(tmp_path / "metadata") as store:
        cluster = ClusterConfigs({}, store)
        reads = object.__new__(TieredReads)  # only what following reads
        reads.tiering = SimpleNamespace(cluster_configs=cluster)  # type: ignore[assignment]
        reads._followed = None
        reads.fetch_quota = ByteRateQuota(UNLIMITED)
        reads.limiter = trio.CapacityLimiter(10)
        reads._all_reads = [SimpleNamespace(max_wait_s=0.5), SimpleNamespace(max_wait_s=0.5)]  # type: ignore[list-item]
        reads._readers = [SimpleNamespace(indexes=SimpleNamespace(max_bytes=1 << 30))]  # type: ignore[list-item]
        reads.follow_cluster_configs()
        cluster.alter({"remote.log.manager.fetch.max.bytes.per.second": "1000", "remote.fetch.max.wait.ms": "200",
                       "remote.log.reader.threads": "3", "remote.log.index.file.cache.total.size.bytes": "4096"})
        reads.follow_cluster_configs()
        assert (reads.fetch_quota.bound, reads.limiter.total_tokens, reads.max_wait_s) == (1000, 3, 0.2)
        assert [r.max_wait_s for r in reads._all_reads] == [0.2, 0.2]
        assert reads._readers[0].indexes.max_bytes == 4096
        cluster.alter({"remote.log.manager.fetch.max.bytes.per.second": None})
        reads.follow_cluster_configs()
        assert reads.fetch_quota.unlimited and reads.limiter.total_tokens == 3
