"""What the remote tier costs, from what was asked of it and what it holds: pure functions and
the values they work on, no I/O.

:func:`cost` prices a :class:`Usage` (requests by the class object stores bill them in, bytes
read and written, bytes stored for some hours) at :class:`Prices` (Kafka-style keys,
``remote.log.storage.price.*``, S3 Standard's us-east-1 list prices by default):

- requests: each class's count / 1,000 x its price per 1,000 (GET; PUT, COPY, POST and LIST
  billed alike; DELETE free on S3);
- transfer: bytes read / GB x the price per GB out (0 by default: reads from the same region are
  free), bytes written / GB x the price per GB in (free on S3);
- storage: bytes stored / GB x the price per GB-month x hours / 730 (a month of 730 hours).

GB is 2^30 bytes, as AWS bills storage and transfer. A topic's last hour (:class:`TopicCost`) is
its requests and bytes over the last hour plus one hour of its storage; a month is projected as
that hour x 730, and says so wherever it is shown.

Also here: the cap on per-topic metric labels (:class:`TopicLabels`), and the layout in which the
proxy hands a topic's last hour to ``tiered-proxy describe`` (a tagged field of its remote log dir
in DescribeLogDirs, beside those of ``protocol.remote_log_dir``).
"""

from __future__ import annotations

import dataclasses
import math
import re
import struct
import threading
from collections.abc import Mapping

PRICE_PUT_CONFIG = "remote.log.storage.price.put.per.1000"
PRICE_GET_CONFIG = "remote.log.storage.price.get.per.1000"
PRICE_LIST_CONFIG = "remote.log.storage.price.list.per.1000"
PRICE_DELETE_CONFIG = "remote.log.storage.price.delete.per.1000"
PRICE_STORAGE_CONFIG = "remote.log.storage.price.storage.gb.month"
PRICE_TRANSFER_OUT_CONFIG = "remote.log.storage.price.transfer.out.per.gb"
PRICE_TRANSFER_IN_CONFIG = "remote.log.storage.price.transfer.in.per.gb"
PRICE_CURRENCY_CONFIG = "remote.log.storage.price.currency"
TOPIC_LABEL_MAX_CONFIG = "proxy.metrics.topic.label.max"
DEFAULT_TOPIC_LABEL_MAX = 1000

HOURS_PER_MONTH = 730
GB = 1 << 30
OTHER = "other"  # the label of the topics past the cap


class CostConfigError(ValueError):
    """A price or cost setting that cannot work; the message names the key."""


@dataclasses.dataclass(frozen=True)
class Prices:
    """Prices in ``currency``; the defaults are S3 Standard's in us-east-1."""

    put_per_1000: float = 0.005  # PUT, COPY, POST (multipart parts and completions too)
    get_per_1000: float = 0.0004  # GET and HEAD
    list_per_1000: float = 0.005  # LIST, billed as PUT
    delete_per_1000: float = 0.0  # DELETE: free on S3
    storage_gb_month: float = 0.023
    transfer_out_per_gb: float = 0.0  # reads from the same region: free
    transfer_in_per_gb: float = 0.0  # data transfer in: free
    currency: str = "USD"

    KEYS = {  # field -> config key
        "put_per_1000": PRICE_PUT_CONFIG, "get_per_1000": PRICE_GET_CONFIG, "list_per_1000": PRICE_LIST_CONFIG,
        "delete_per_1000": PRICE_DELETE_CONFIG, "storage_gb_month": PRICE_STORAGE_CONFIG,
        "transfer_out_per_gb": PRICE_TRANSFER_OUT_CONFIG, "transfer_in_per_gb": PRICE_TRANSFER_IN_CONFIG,
    }

    @classmethod
    def from_config(cls, config: Mapping[str, object]) -> Prices:
        """The prices the properties set, the defaults for the rest; CostConfigError names a key
        whose value is not a number, or is negative, infinite or NaN."""
        values: dict[str, float | str] = {}
        for name, key in cls.KEYS.items():
            raw = config.get(key)
            if raw is None or str(raw).strip() == "":
                continue
            try:
                value = float(str(raw).strip())
            except ValueError:
                raise CostConfigError(f"{key} must be a number (a price in the configured currency), "
                                      f"got {raw!r}") from None
            if not math.isfinite(value) or value < 0:
                raise CostConfigError(f"{key} must be a price of 0 or more, got {raw!r}")
            values[name] = value
        currency = config.get(PRICE_CURRENCY_CONFIG)
        if currency is not None and str(currency).strip() != "":
            code = str(currency).strip()
            if not re.fullmatch(r"[A-Za-z]{3}", code):
                raise CostConfigError(f"{PRICE_CURRENCY_CONFIG} must be a three-letter currency code (USD, EUR, ...), "
                                      f"got {currency!r}")
            values["currency"] = code.upper()
        return cls(**values)  # type: ignore[arg-type]


def topic_label_max_from_config(config: Mapping[str, object]) -> int:
    """``proxy.metrics.topic.label.max``: topics with labels of their own (0 or more)."""
    raw = config.get(TOPIC_LABEL_MAX_CONFIG)
    if raw is None or str(raw).strip() == "":
        return DEFAULT_TOPIC_LABEL_MAX
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise CostConfigError(f"{TOPIC_LABEL_MAX_CONFIG} must be an integer, got {raw!r}") from None
    if value < 0:
        raise CostConfigError(f"{TOPIC_LABEL_MAX_CONFIG} must be 0 or more, got {value}")
    return value


@dataclasses.dataclass(frozen=True)
class Usage:
    """What was asked of the remote tier, and held in it, over some hours."""

    gets: int = 0
    puts: int = 0
    deletes: int = 0
    lists: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    stored_bytes: int = 0
    storage_hours: float = 0.0  # how long stored_bytes were held

    @classmethod
    def from_counts(cls, counts: Mapping[str, int], stored_bytes: int = 0, storage_hours: float = 0.0) -> Usage:
        """From counts as ``StorageRequests.by_topic`` gives them (kinds and ``bytes_*``)."""
        return cls(counts.get("GET", 0), counts.get("PUT", 0), counts.get("DELETE", 0), counts.get("LIST", 0),
                   counts.get("bytes_read", 0), counts.get("bytes_written", 0), stored_bytes, storage_hours)


@dataclasses.dataclass(frozen=True)
class Cost:
    """A cost in three parts, in the prices' currency."""

    requests: float = 0.0
    transfer: float = 0.0
    storage: float = 0.0

    @property
    def total(self) -> float:
        return self.requests + self.transfer + self.storage

    def scaled(self, factor: float) -> Cost:
        return Cost(self.requests * factor, self.transfer * factor, self.storage * factor)

    def __add__(self, other: Cost) -> Cost:
        return Cost(self.requests + other.requests, self.transfer + other.transfer, self.storage + other.storage)


def cost(usage: Usage, prices: Prices) -> Cost:
    """What ``usage`` costs at ``prices``: 0 for no usage, rising with every count, linear in
    the prices."""
    requests = (usage.gets * prices.get_per_1000 + usage.puts * prices.put_per_1000
                + usage.lists * prices.list_per_1000 + usage.deletes * prices.delete_per_1000) / 1000
    transfer = (usage.bytes_read * prices.transfer_out_per_gb + usage.bytes_written * prices.transfer_in_per_gb) / GB
    storage = usage.stored_bytes / GB * prices.storage_gb_month * usage.storage_hours / HOURS_PER_MONTH
    return Cost(requests, transfer, storage)


@dataclasses.dataclass(frozen=True)
class TopicCost:
    """One topic's last hour: the requests and bytes sent for it (``counts``, as
    ``StorageRequests.recent`` gives them, over ``window_s`` seconds: less than an hour while the
    process is younger), the bytes it holds, and their price: the requests and bytes, plus one
    hour of storage."""

    topic: str
    counts: Mapping[str, int]
    stored_bytes: int
    window_s: float
    hour: Cost
    currency: str

    @property
    def month(self) -> Cost:
        """A month projected: the last hour x 730."""
        return self.hour.scaled(HOURS_PER_MONTH)


def topic_cost(topic: str, counts: Mapping[str, int], stored_bytes: int, window_s: float,
               prices: Prices) -> TopicCost:
    return TopicCost(topic, dict(counts), stored_bytes, window_s,
                     cost(Usage.from_counts(counts, stored_bytes, 1.0), prices), prices.currency)


def window_text(seconds: float) -> str:
    """The span a topic's last hour of requests covers, in words: ``the last 60 min``, or since
    start in a process younger than an hour."""
    if seconds >= 3540:
        return "the last 60 min"
    return f"the {seconds:.0f} s since it started" if seconds < 60 else f"the {seconds / 60:.0f} min since it started"


def money(value: float) -> str:
    """A cost as the proxy prints it: two decimals from 1 up, else three significant digits
    (0.000000400), ``0`` for nothing."""
    if value == 0:
        return "0"
    if abs(value) >= 1:
        return f"{value:.2f}"
    return f"{value:.{2 - math.floor(math.log10(abs(value)))}f}"


class TopicLabels:
    """Bounds the topics that get a label of their own: the first ``limit`` topics offered keep
    theirs for the life of the process, every later one is summed under ``other``. First come
    rather than the most active: a label that moved between a topic and ``other`` as activity
    changed would make both series' counters go backwards. Offered in the order topics first
    made a request, the busiest topics of a process's start get the labels."""

    def __init__(self, limit: int = DEFAULT_TOPIC_LABEL_MAX) -> None:
        self.limit = limit
        self._admitted: set[str] = set()
        self._folded: set[str] = set()  # topics seen past the cap
        self._lock = threading.Lock()

    def label(self, topic: str) -> str:
        with self._lock:
            if topic in self._admitted:
                return topic
            if len(self._admitted) < self.limit and topic not in self._folded:
                self._admitted.add(topic)
                return topic
            self._folded.add(topic)
            return OTHER

    @property
    def folded(self) -> int:
        """Topics summed under ``other``."""
        with self._lock:
            return len(self._folded)


# The tagged field of a topic in the remote log dir of DescribeLogDirs (v2+) that carries its last
# hour: seconds covered, GET, PUT, DELETE, LIST, bytes read, bytes written, bytes stored, then the
# cost of its requests, transfer and storage for the hour (IEEE doubles), then the currency (UTF-8).
TAG_TOPIC_COST = 10_002  # per topic (10_000 and 10_001 are the tiering state and who tiers it)
TOPIC_COST = struct.Struct(">i6qq3d")
_COUNTED = ("GET", "PUT", "DELETE", "LIST", "bytes_read", "bytes_written")


def encode_topic_cost(c: TopicCost) -> bytes:
    return TOPIC_COST.pack(int(c.window_s), *(c.counts.get(k, 0) for k in _COUNTED), c.stored_bytes,
                           c.hour.requests, c.hour.transfer, c.hour.storage) + c.currency.encode()


def decode_topic_cost(topic: str, blob: bytes) -> TopicCost:
    window, *numbers = TOPIC_COST.unpack_from(blob)
    counts = dict(zip(_COUNTED, numbers[:6], strict=True))
    return TopicCost(topic, counts, numbers[6], float(window), Cost(*numbers[7:10]),
                     blob[TOPIC_COST.size:].decode("utf-8", "replace"))
