"""The remote tier's log dir in DescribeLogDirs answers: the proxy adds one log dir named
``remote:`` plus the storage URI, and puts in tagged fields (v2+) what only tiered-proxy's own
``describe`` reads. Other clients skip unknown tags. The proxy packs them and ``describe``
unpacks them with the layouts below."""

import struct

REMOTE_LOG_DIR_PREFIX = "remote:"
TAG_SEGMENT_COUNT = 10_000  # per partition: the remote segments
SEGMENT_COUNT = struct.Struct(">i")
TAG_TIERING_STATE = 10_000  # per topic: UTF-8 "STATE policy epoch" (KIP-950)
TAG_TIERED_BY = 10_001  # per topic: UTF-8 "brokers", "proxy" or "none" (tiering/topic_owner.py)
TAG_DATA_LOSS = 10_001  # per partition: the offsets, and the ranges, the brokers deleted before they were tiered
DATA_LOSS = struct.Struct(">qi")
# per partition: the offsets, and the ranges, cut back from the remote tier because the cluster's
# log replaced them (an unclean leader election)
TAG_DIVERGENCE = 10_002
DIVERGENCE = struct.Struct(">qi")
# per partition: the bytes the segments take in the remote tier (compressed, encrypted, indexes
# included), beside partition_size, their logical size
TAG_STORED_BYTES = 10_003
STORED_BYTES = struct.Struct(">q")
