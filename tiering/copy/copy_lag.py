"""Delayed upload (KIP-1241, Kafka 4.4): how far the copier may read this pass.

Kafka copies a closed segment once its newest record is ``remote.copy.lag.ms`` old, or once
``remote.copy.lag.bytes`` of newer data follow it in the local log (either check; 0 on either
copies at once; -1 takes the local retention, and an unlimited one leaves that check out). The
proxy builds its remote segments as it reads the brokers' log, so it applies the checks batch by
batch: it reads no further than the first batch that passes neither, and what it copies is then
eligible by Kafka's rule (the newest record of a segment is the newest of its batches).

The bytes behind a batch are counted in the fetch answer that holds it: exactly when the answer
reaches the log end, and past the answer's end estimated from its bytes per offset (a broker's
own sizes cannot say: it counts a segment whole, however far its log start has moved into it)."""

from __future__ import annotations

from protocol.record_batch import BatchHeader
from tiering.config import TopicTiering


class UploadHorizon:
    """One pass's view of which batches are old enough, or far enough behind the log end, to copy."""

    def __init__(self, lag_ms: int, lag_bytes: int, now_ms: int) -> None:
        self.lag_ms = lag_ms  # -1: the time check is not applied
        self.lag_bytes = lag_bytes  # -1: the size check is not applied
        self.now_ms = now_ms
        self.bytes_behind: int | None = None  # newer bytes behind the copier's position; None: unknown
        self.held = False  # a batch was held back this pass

    def fetched(self, answer_bytes: int, first: int, after: int, log_end: int) -> None:
        """A fetch answer holds ``answer_bytes`` of batches from offset ``first`` up to ``after`` in a
        log that ends at ``log_end``: the bytes behind its first batch."""
        beyond = 0 if after >= log_end or after <= first else (log_end - after) * answer_bytes // (after - first)
        self.bytes_behind = answer_bytes + beyond

    def admits(self, header: BatchHeader, size: int) -> bool:
        """Whether the batch at the copier's position may be copied; if so the position moves past it."""
        old_enough = self.lag_ms >= 0 and (header.max_timestamp < 0 or self.now_ms - header.max_timestamp >= self.lag_ms)
        behind = None if self.bytes_behind is None else self.bytes_behind - size
        far_enough = self.lag_bytes >= 0 and behind is not None and behind >= self.lag_bytes
        if not (old_enough or far_enough):
            self.held = True
            return False
        self.bytes_behind = behind
        return True


def upload_horizon(settings: TopicTiering, now_ms: int) -> UploadHorizon | None:
    """A pass's horizon for a topic's settings; None when it copies at once (a lag of 0)."""
    return None if settings.uploads_at_once else UploadHorizon(*settings.effective_copy_lag, now_ms)
