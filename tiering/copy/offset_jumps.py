"""Offsets a broker's Fetch answer skipped, and when the copier may believe it.

The copier asks for ``next_offset`` and normally gets a batch that contains it. A batch that starts
beyond it says the brokers' log has no such offsets: true of a topic compacted before it was tiered
(Kafka's remote reads skip those gaps too), but also what a broker answers while it deletes or
uploads the segment that held them (Kafka's own tiered storage reading on in the next remote
segment). Copying on at once would leave those offsets out of the remote tier without a word. So a
jump is believed only when the next pass (a round later) gets the same answer; otherwise that pass
copies the offsets the first one was not given.
"""

from __future__ import annotations

import logging

from tiering.model import TopicIdPartition

log = logging.getLogger(__name__)


class OffsetJumps:
    def __init__(self, tp: TopicIdPartition) -> None:
        self.tp = tp
        self._seen: tuple[int, int] | None = None  # (asked, answered from) once, not yet believed

    def believe(self, asked: int, base_offset: int) -> bool:
        """Whether to copy on from ``base_offset`` when ``asked`` was asked for (``base_offset >
        asked``): only if the pass before was answered the same."""
        if self._seen == (asked, base_offset):
            self._seen = None
            log.warning("%s: the brokers' log has no offsets %d..%d (answered twice a round apart); copying on "
                        "from %d", self.tp, asked, base_offset - 1, base_offset)
            return True
        self._seen = (asked, base_offset)
        log.info("%s: asked for offset %d, the brokers answered from %d; asking again next pass", self.tp, asked,
                 base_offset)
        return False
