"""The price of the remote tier (tiering/cost.py): zero for nothing, rising with every count, linear
in the prices; the prices from configuration, refused by key when they cannot work; the cap on
per-topic labels; and the layout that carries a topic's last hour to ``describe``."""

from __future__ import annotations

import dataclasses
import math
import re
import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tiering.cost import (
    GB,
    HOURS_PER_MONTH,
    OTHER,
    CostConfigError,
    Prices,
    TopicLabels,
    Usage,
    cost,
    decode_topic_cost,
    encode_topic_cost,
    money,
    topic_cost,
    topic_label_max_from_config,
)

COUNTS = ("gets", "puts", "deletes", "lists", "bytes_read", "bytes_written", "stored_bytes")
usages = st.builds(Usage, *(st.integers(0, 10**12) for _ in COUNTS),
                   storage_hours=st.floats(0, 10_000, allow_nan=False))
price = st.floats(0, 1000, allow_nan=False, allow_infinity=False)
prices = st.builds(Prices, *(price for _ in range(7)))


def close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)


@given(prices)
def test_no_usage_costs_nothing(p: Prices) -> None:
    assert cost(Usage(), p).total == 0
    assert cost(Usage(stored_bytes=10**15), p).storage == 0  # held for no time


@given(usages, prices, st.sampled_from(COUNTS), st.integers(1, 10**9))
def test_cost_rises_with_every_count(usage: Usage, p: Prices, field: str, more: int) -> None:
    grown = dataclasses.replace(usage, **{field: getattr(usage, field) + more})
    before, after = cost(usage, p), cost(grown, p)
    for part in ("requests", "transfer", "storage", "total"):
        assert getattr(after, part) >= getattr(before, part)


@given(usages, prices, prices, st.floats(0, 100, allow_nan=False), st.floats(0, 100, allow_nan=False))
def test_cost_is_linear_in_the_prices(usage: Usage, p: Prices, q: Prices, a: float, b: float) -> None:
    mixed = Prices(*(a * getattr(p, f) + b * getattr(q, f) for f in Prices.KEYS))
    want = cost(usage, p).scaled(a) + cost(usage, q).scaled(b)
    got = cost(usage, mixed)
    for part in ("requests", "transfer", "storage"):
        assert math.isclose(getattr(got, part), getattr(want, part), rel_tol=1e-9, abs_tol=1e-6)


def test_the_default_prices_are_s3_standards() -> None:
    # A million GETs and PUTs, a TB-month stored: $0.40, $5.00 and 1024 x $0.023.
    month = cost(Usage(gets=1_000_000, puts=1_000_000, deletes=10**6, stored_bytes=1024 * GB,
                       storage_hours=HOURS_PER_MONTH), Prices())
    assert close(month.requests, 0.4 + 5.0)
    assert close(month.storage, 1024 * 0.023)
    assert month.transfer == 0
    # A topic's hour is an hour of its storage; its month the hour x 730.
    hour = topic_cost("t", {"GET": 1000, "PUT": 1000, "LIST": 1000}, GB, 1800, Prices())
    assert close(hour.hour.requests, 0.0004 + 0.005 + 0.005)
    assert close(hour.hour.storage, 0.023 / HOURS_PER_MONTH)
    assert close(hour.month.total, hour.hour.total * HOURS_PER_MONTH)


def test_prices_come_from_the_configuration() -> None:
    p = Prices.from_config({"remote.log.storage.price.get.per.1000": "0.001", "remote.log.storage.price.currency": "eur",
                            "remote.log.storage.price.storage.gb.month": " 0.02 ",
                            "remote.log.storage.price.transfer.out.per.gb": "0.09"})
    assert (p.get_per_1000, p.put_per_1000, p.storage_gb_month, p.transfer_out_per_gb, p.currency) == (
        0.001, 0.005, 0.02, 0.09, "EUR")
    assert Prices.from_config({}) == Prices()
    assert Prices.from_config({"remote.log.storage.price.put.per.1000": ""}) == Prices()


@pytest.mark.parametrize(("key", "value", "message"), [
    ("remote.log.storage.price.get.per.1000", "-0.1", "must be a price of 0 or more, got '-0.1'"),
    ("remote.log.storage.price.put.per.1000", "five", "must be a number (a price in the configured currency), got 'five'"),
    ("remote.log.storage.price.storage.gb.month", "nan", "must be a price of 0 or more"),
    ("remote.log.storage.price.transfer.out.per.gb", "inf", "must be a price of 0 or more"),
    ("remote.log.storage.price.currency", "$", "must be a three-letter currency code"),
])
def test_bad_prices_are_refused_by_key(key: str, value: str, message: str) -> None:
    with pytest.raises(CostConfigError, match=f"^{re.escape(key)} {re.escape(message)}"):
        Prices.from_config({key: value})


def test_the_label_cap_from_configuration() -> None:
    assert topic_label_max_from_config({}) == 1000
    assert topic_label_max_from_config({"proxy.metrics.topic.label.max": "3"}) == 3
    for bad in ("-1", "many"):
        with pytest.raises(CostConfigError, match="^proxy.metrics.topic.label.max must be"):
            topic_label_max_from_config({"proxy.metrics.topic.label.max": bad})


@given(st.lists(st.text("abcdefgh", min_size=1, max_size=3), max_size=60), st.integers(0, 10))
def test_the_first_topics_keep_their_labels_and_the_rest_are_other(topics: list[str], limit: int) -> None:
    labels = TopicLabels(limit)
    first = [labels.label(t) for t in topics]
    own = {t for t in first if t != OTHER}
    assert len(own) <= limit
    assert own == set(list(dict.fromkeys(topics))[:limit]) - {OTHER}  # first come
    assert [labels.label(t) for t in topics] == first  # a label never moves
    assert labels.folded == len(set(topics)) - len(own)


def test_labels_are_handed_out_once_under_concurrency() -> None:
    labels = TopicLabels(50)
    seen: list[list[str]] = [[] for _ in range(8)]
    barrier = threading.Barrier(8)

    def offer(i: int) -> None:
        barrier.wait()
        seen[i] = [labels.label(f"t{(n * (i + 1)) % 200}") for n in range(400)]

    threads = [threading.Thread(target=offer, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    own = {label for labelled in seen for label in labelled if label != OTHER}
    assert len(own) == 50
    assert labels.folded == 150
    assert all(labels.label(t) == t for t in own)


@given(st.dictionaries(st.sampled_from(["GET", "PUT", "DELETE", "LIST", "bytes_read", "bytes_written"]),
                       st.integers(0, 2**62)), st.integers(0, 2**62), st.floats(0, 3600), prices)
def test_a_topics_hour_travels_to_describe_unchanged(counts: dict[str, int], stored: int, window: float,
                                                     p: Prices) -> None:
    sent = topic_cost("orders", counts, stored, int(window), p)
    got = decode_topic_cost("orders", encode_topic_cost(sent))
    assert got.counts == {k: counts.get(k, 0) for k in got.counts}
    assert (got.stored_bytes, got.window_s, got.hour, got.currency) == (stored, int(window), sent.hour, p.currency)


@pytest.mark.parametrize(("value", "text"), [(0, "0"), (4e-7, "0.000000400"), (0.0123456, "0.0123"), (0.5, "0.500"),
                                             (1, "1.00"), (1234.567, "1234.57")])
def test_money_keeps_three_significant_digits_below_one(value: float, text: str) -> None:
    assert money(value) == text
