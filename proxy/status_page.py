"""The status page's HTML: pure functions from a :class:`StatusSnapshot` to one self-contained
document (inline CSS and SVG, no script, no external resource; the browser reloads it every few
seconds by ``<meta http-equiv="refresh">``). The data is gathered elsewhere
(``proxy/status.py``); nothing here does I/O, so the page is unit-tested from hand-made snapshots.

Every name the page prints (topics, budgets, the remote tier) passes through :func:`_e`, which
escapes quotes too, as names also go into attributes: a topic may be named anything a broker
accepts, and the page must never become markup a name supplied.
"""

from __future__ import annotations

import html
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from proxy.chain import BrokerSeen
from tiering.cost import HOURS_PER_MONTH, OTHER, Prices, TopicCost, money, window_text
from tiering.status import FROM_BROKERS, FROM_COPIER, PartitionTiers

REFRESH_S = 5
BAR_WIDTH = 360
BAR_HEIGHT = 34
SPARK_WIDTH = 360
SPARK_HEIGHT = 44
# Colours of the bar and its legend; the page's CSS uses the same.
REMOTE, LOCAL, BOTH, LOST, DIVERGED, TRACK = "#2f6fdf", "#2a9d4b", "#8b5cf6", "#d62828", "#f29e0c", "#e6e8eb"


@dataclass(frozen=True)
class Bucket:
    """Counter increases over one interval of the recent-activity ring."""

    start: float  # time.time()
    seconds: float
    values: Mapping[str, int]
    partial: bool = False  # the interval still filling, up to the snapshot


@dataclass(frozen=True)
class TierRequests:
    """One remote tier's requests since the process started (StorageRequests)."""

    tier: str  # the storage URI without its query, as the metrics label it
    requests: Mapping[str, int]  # by kind: GET, PUT, DELETE, LIST
    failures: Mapping[str, int]
    bytes_read: int
    bytes_written: int


@dataclass(frozen=True)
class BudgetState:
    name: str  # the setting that bounds it
    used: int
    peak: int
    limit: int  # <= 0: unbounded
    waits: int


@dataclass(frozen=True)
class ArchiveRow:
    """An archived topic as the status page shows it."""

    topic: str
    source: str  # "this remote tier", or the read replica's
    partitions: int
    segments: int
    remote_bytes: int
    offsets: int  # records' offsets held, over its partitions


@dataclass(frozen=True)
class StatusSnapshot:
    generated_at: float  # time.time()
    bootstrap: str  # the address clients bootstrap from
    workers: int
    worker_index: int | None
    brokers: Sequence[BrokerSeen]
    tiering: bool
    partitions: Sequence[PartitionTiers] = ()
    topics: Mapping[str, str] = field(default_factory=dict)  # topic -> KIP-950 state
    owners: Mapping[str, str] = field(default_factory=dict)  # topic -> who tiers it: brokers, proxy, none
    tier: TierRequests | None = None
    activity: Sequence[Bucket] = ()  # oldest first; the last one may be partial
    bucket_seconds: float = 10.0
    window_seconds: float = 600.0
    budgets: Sequence[BudgetState] = ()
    archives: Sequence[ArchiveRow] = ()
    costs: Sequence[TopicCost] = ()  # each topic's last hour, the costliest first, "other" last
    prices: Prices | None = None  # None: no remote tier, no cost section
    cost_window_s: float = 0.0  # the seconds the last hour's requests cover


def _e(value: object) -> str:
    """Text or attribute value, escaped (quotes too)."""
    return html.escape(str(value), quote=True)


def format_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def _offset(value: int | None) -> str:
    return "-" if value is None else str(value)


# -- the bar of offsets -------------------------------------------------------------------------


def _span(p: PartitionTiers) -> tuple[int, int]:
    """The offsets the bar covers: from the lowest offset anything names to the highest."""
    starts = [o for o in (p.remote_start, p.rx, p.lx) if o is not None and o >= 0]
    starts += [first for first, _ in (*p.lost, *p.diverged)]
    ends = [o for o in (p.lz, None if p.ry is None else p.ry + 1) if o is not None and o >= 0]
    ends += [last + 1 for _, last in (*p.lost, *p.diverged)]
    low = min(starts, default=0)
    return low, max(ends + [low + 1])


def partition_bar(p: PartitionTiers, width: int = BAR_WIDTH, height: int = BAR_HEIGHT) -> str:
    """One partition's offsets left to right: the remote tier's range on the upper lane, the
    brokers' log on the lower, their overlap as one block across both lanes (so blue is the
    remote tier alone, green the brokers alone, purple both), offsets lost before tiering and
    ranges cut back from the remote tier marked across the whole height. Each shape carries a
    ``<title>`` with its offsets (a tooltip, no script)."""
    low, high = _span(p)
    scale = (width - 2) / (high - low)

    def x(offset: int) -> float:
        return 1 + (offset - low) * scale

    shapes = [f'<rect class="track" x="0" y="3" width="{width}" height="{height - 8}" fill="{TRACK}" rx="2"/>']

    def rect(kind: str, first: int, end: int, top: float, bottom: float, colour: str, title: str) -> None:
        left = x(first)
        shapes.append(f'<rect class="{kind}" x="{left:.1f}" y="{top}" width="{max(x(end) - left, 1.5):.1f}" '
                      f'height="{bottom - top}" fill="{colour}"><title>{_e(title)}</title></rect>')

    lane = (height - 8) / 2
    has_remote = p.ry is not None and p.remote_start is not None and p.remote_start <= p.ry
    has_local = p.lx is not None and p.lz is not None and 0 <= p.lx < p.lz
    if has_remote:
        assert p.remote_start is not None and p.ry is not None
        rect("remote", p.remote_start, p.ry + 1, 4, 4 + lane - 1, REMOTE,
             f"remote tier: offsets {p.remote_start}..{p.ry} (Ry)")
    if has_local:
        assert p.lx is not None and p.lz is not None
        rect("local", p.lx, p.lz, 4 + lane, 4 + 2 * lane - 1, LOCAL,
             f"brokers' log: offsets {p.lx} (Lx)..{p.lz - 1}, log end {p.lz} (Lz)")
    if has_remote and has_local:
        assert p.remote_start is not None and p.ry is not None and p.lx is not None and p.lz is not None
        first, end = max(p.remote_start, p.lx), min(p.ry + 1, p.lz)
        if first < end:
            rect("overlap", first, end, 4, 4 + 2 * lane - 1, BOTH, f"in both tiers: offsets {first}..{end - 1}")
    for first, last in p.lost:
        rect("lost", first, last + 1, 0, height - 2, LOST,
             f"lost: offsets {first}..{last} deleted by the brokers before they were tiered")
    for first, last in p.diverged:
        rect("diverged", first, last + 1, 0, 4 + lane, DIVERGED,
             f"diverged: offsets {first}..{last} cut back from the remote tier (the cluster's log replaced them)")
    label = (f"{p.topic}-{p.partition}: Rx {_offset(p.rx)}, Ry {_offset(p.ry)}, Lx {_offset(p.lx)}, "
             f"Lz {_offset(p.lz)}")
    return (f'<svg class="bar" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
            f'aria-label="{_e(label)}" xmlns="http://www.w3.org/2000/svg">{"".join(shapes)}</svg>')


def legend() -> str:
    items = [(REMOTE, "remote tier only"), (BOTH, "in both tiers"), (LOCAL, "brokers' log only"),
             (LOST, "lost before tiering"), (DIVERGED, "cut back (diverged)")]
    return '<p class="legend">' + " ".join(
        f'<span><svg width="12" height="12" aria-hidden="true"><rect width="12" height="12" fill="{colour}"/></svg> '
        f'{_e(text)}</span>' for colour, text in items) + "</p>"


# -- recent activity ----------------------------------------------------------------------------


def _rates(buckets: Sequence[Bucket], key: str) -> list[float]:
    return [b.values.get(key, 0) / b.seconds if b.seconds > 0 else 0.0 for b in buckets]


def sparkline(buckets: Sequence[Bucket], key: str, slots: int, colour: str, error_key: str | None = None,
              width: int = SPARK_WIDTH, height: int = SPARK_HEIGHT, unit: str = "/s") -> str:
    """Per-second rates of ``key`` over the buckets as bars, the newest at the right (a partial
    last bucket drawn lighter); ``error_key``'s rates over them in red. ``slots`` bars fit the
    width whatever the number of buckets, so the time axis stays put as the ring fills."""
    buckets = list(buckets)[-slots:]
    rates = _rates(buckets, key)
    errors = _rates(buckets, error_key) if error_key else [0.0] * len(buckets)
    top = max([*rates, *errors, 0.0])
    step = width / slots
    bars = [f'<line x1="0" y1="{height - 0.5}" x2="{width}" y2="{height - 0.5}" stroke="#b8bec6"/>']
    offset = slots - len(buckets)
    for i, (bucket, rate, error) in enumerate(zip(buckets, rates, errors, strict=True)):
        left = (offset + i) * step
        when = time.strftime("%H:%M:%S", time.gmtime(bucket.start))
        for value, fill in ((rate, colour), (error, LOST)):
            if value <= 0 or top <= 0:
                continue
            h = max(value / top * (height - 2), 1.0)
            opacity = ' fill-opacity="0.5"' if bucket.partial else ""
            bars.append(f'<rect x="{left + 0.5:.1f}" y="{height - 1 - h:.1f}" width="{max(step - 1, 1):.1f}" '
                        f'height="{h:.1f}" fill="{fill}"{opacity}><title>{_e(f"{when} UTC: {value:.3g}{unit}")}'
                        "</title></rect>")
    return (f'<svg class="spark" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
            f'aria-label="{_e(key)}" xmlns="http://www.w3.org/2000/svg">{"".join(bars)}</svg>')


def _total(buckets: Sequence[Bucket], key: str) -> int:
    return sum(b.values.get(key, 0) for b in buckets)


def _recent_rate(buckets: Sequence[Bucket], key: str, seconds: float = 60.0) -> float:
    """The per-second rate of ``key`` over the newest buckets covering about ``seconds``."""
    total = elapsed = 0.0
    for bucket in reversed(buckets):
        if elapsed >= seconds:
            break
        total += bucket.values.get(key, 0)
        elapsed += bucket.seconds
    return total / elapsed if elapsed > 0 else 0.0


def _activity(s: StatusSnapshot) -> str:
    slots = max(int(round(s.window_seconds / s.bucket_seconds)), 1)
    minutes = s.window_seconds / 60
    rows = []
    series = [
        ("Remote reads", "read_bytes", REMOTE, "read_errors", lambda v: f"{format_bytes(v)}/s",
         f"{format_bytes(_total(s.activity, 'read_bytes'))} served from the remote tier in "
         f"{_total(s.activity, 'read_requests')} reads"),
        ("Copies", "copy_bytes", LOCAL, "copy_errors", lambda v: f"{format_bytes(v)}/s",
         f"{format_bytes(_total(s.activity, 'copy_bytes'))} copied to the remote tier in "
         f"{_total(s.activity, 'copy_segments')} segments"),
        ("Errors", "errors", LOST, None, lambda v: f"{v:.2g}/s",
         f"{_total(s.activity, 'read_errors')} remote read errors, {_total(s.activity, 'copy_errors')} copy "
         f"errors, {_total(s.activity, 'store_failures')} failed remote store requests"),
    ]
    for title, key, colour, error_key, rate_text, summary in series:
        rows.append(f'<tr class="series" data-series="{_e(key)}"><th>{_e(title)}</th>'
                    f"<td>{sparkline(s.activity, key, slots, colour, error_key)}</td>"
                    f'<td class="num">{_e(rate_text(_recent_rate(s.activity, key)))} over the last minute<br>'
                    f"{_e(summary)} in the last {minutes:g} min</td></tr>")
    return (f"<section id=\"activity\"><h2>The last {minutes:g} minutes</h2>"
            f"<p class=\"note\">{s.bucket_seconds:g}-second intervals kept in memory, newest at the right "
            "(lighter: the interval still filling); red: errors in the same interval. Since this process "
            f"started, at most {minutes:g} minutes.</p><table>{''.join(rows)}</table></section>")


# -- sections -----------------------------------------------------------------------------------


def _header(s: StatusSnapshot) -> str:
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(s.generated_at))
    if s.workers > 1:
        who = (f"Worker {s.worker_index if s.worker_index is not None else '?'} of {s.workers}. This page shows "
               "what this worker process knows: its own clients' remote reads, the partitions it copies "
               "(the workers share the copying; the brokers are asked for the log offsets of the others) "
               "and its own remote store requests. Each worker serves its own page, on the metrics port "
               "plus its index.")
    else:
        who = "One proxy process: this page shows what it knows, counted since it started."
    return (f"<header><h1>tiered-proxy</h1><p>Clients bootstrap from <b>{_e(s.bootstrap)}</b>. "
            f"Generated {_e(when)}; reloads every {REFRESH_S} s. "
            f'Prometheus metrics: <a href="/metrics">/metrics</a>.</p><p class="note">{_e(who)}</p></header>')


def _brokers(s: StatusSnapshot) -> str:
    rows = []
    for b in s.brokers:
        if b.reachable is None:
            reach = "not connected to yet"
        else:
            ago = f" ({max(s.generated_at - b.since, 0):.0f} s ago)" if b.since is not None else ""
            reach = ("reachable: last connection succeeded" if b.reachable
                     else "unreachable: last connection failed") + ago
        listed = {None: "no metadata yet", True: "in the cluster's metadata",
                  False: "not in the latest metadata (stopped or fenced)"}[b.in_metadata]
        state = "reachable" if b.reachable else ("unreachable" if b.reachable is False else "known")
        rows.append(f'<tr class="broker" data-node="{b.node_id}" data-state="{state}"><td class="num">{b.node_id}'
                    f'</td><td class="num port">{_e(b.port if b.port is not None else "no listener")}</td>'
                    f"<td>{_e(listed)}; {_e(reach)}</td></tr>")
    body = "".join(rows) or '<tr><td colspan="3">No broker known yet.</td></tr>'
    return ('<section id="brokers"><h2>Brokers</h2><table><thead><tr><th>node id</th><th>proxy port</th>'
            f"<th>state, as the proxy knows it</th></tr></thead><tbody>{body}</tbody></table></section>")


_COLUMNS = ("Rx", "Ry", "Lx", "Lz", "copy lag", "segments", "remote bytes", "stored bytes", "lost", "diverged")


def _partition_row(p: PartitionTiers) -> str:
    source = {FROM_COPIER: "Lx and Lz as this process's copier last saw them",
              FROM_BROKERS: "Lx and Lz asked of the brokers for this page"}.get(p.offsets_from,
                                                                                  "Lx and Lz not known here now")
    cells = [("rx", _offset(p.rx)), ("ry", _offset(p.ry)), ("lx", _offset(p.lx)), ("lz", _offset(p.lz)),
             ("lag", str(p.lag)), ("segments", str(p.segments)),
             ("remote-bytes", str(p.remote_bytes)), ("stored-bytes", str(p.stored_bytes)),
             ("lost", str(p.lost_offsets)),
             ("diverged", str(p.diverged_offsets))]
    numbers = "".join(f'<td class="num {cls}"' + (f' title="{_e(source)}"' if cls in ("lx", "lz") else "")
                      + f">{_e(text)}</td>" for cls, text in cells)
    flags = []
    if p.lost:
        flags.append(f'<span class="flag lost">{p.lost_offsets} offsets lost in {len(p.lost)} ranges</span>')
    if p.diverged:
        flags.append(f'<span class="flag diverged">{p.diverged_offsets} offsets cut back in {len(p.diverged)} '
                     "ranges</span>")
    return (f'<tr class="partition" data-topic="{_e(p.topic)}" data-partition="{p.partition}">'
            f'<td class="topic">{_e(p.topic)}</td><td class="num partition-index">{p.partition}</td>'
            f"<td>{partition_bar(p)}{''.join(flags)}</td>{numbers}</tr>")


def _partitions(s: StatusSnapshot) -> str:
    if not s.tiering:
        return '<section id="partitions"><h2>Tiered partitions</h2><p>Tiering is off in this proxy.</p></section>'
    by_topic: dict[str, list[PartitionTiers]] = {}
    for p in s.partitions:
        by_topic.setdefault(p.topic, []).append(p)
    head = ("<tr><th>topic</th><th>partition</th><th>offsets</th>"
            + "".join(f"<th>{_e(c)}</th>" for c in _COLUMNS) + "</tr>")
    groups = []
    for topic in sorted(set(by_topic) | set(s.topics)):
        parts = by_topic.get(topic, [])
        size = sum(p.remote_bytes for p in parts)
        stored = sum(p.stored_bytes for p in parts)
        lag = sum(p.lag for p in parts)
        groups.append(f'<tbody class="topic-group" data-topic="{_e(topic)}"><tr class="topic-head">'
                      f'<th colspan="{3 + len(_COLUMNS)}"><span class="topic-name">{_e(topic)}</span> '
                      f"&middot; tiering {_e(s.topics.get(topic, '-'))} &middot; tiered by "
                      f"{_e(s.owners.get(topic, 'none'))} &middot; {len(parts)} partitions &middot; "
                      f"{_e(format_bytes(size))} remote ({_e(format_bytes(stored))} stored) &middot; copy lag {lag} offsets</th></tr>"
                      + "".join(_partition_row(p) for p in parts) + "</tbody>")
    body = "".join(groups) or f'<tbody><tr><td colspan="{3 + len(_COLUMNS)}">No tiered topic yet.</td></tr></tbody>'
    return ('<section id="partitions"><h2>Tiered partitions</h2>'
            '<p class="note">Rx: the remote log start (what ListOffsets EARLIEST answers); Ry: the highest '
            "tiered offset; Lx: the brokers' log start; Lz: the log end. The same numbers as "
            "<code>tiered-proxy describe</code>; copy lag in offsets, remote bytes in bytes.</p>"
            f"{legend()}<table class=\"tiers\"><thead>{head}</thead>{body}</table></section>")


def _tier(s: StatusSnapshot) -> str:
    if s.tier is None:
        return ""
    t = s.tier
    kinds = sorted(set(t.requests) | set(t.failures))
    rows = []
    for kind in kinds:
        rate = _recent_rate(s.activity, f"store_requests:{kind}")
        failed_recently = _total(s.activity, f"store_failures:{kind}")
        rows.append(f'<tr class="kind" data-kind="{_e(kind)}"><th>{_e(kind)}</th>'
                    f'<td class="num">{t.requests.get(kind, 0)}</td><td class="num">{rate:.2f}/s</td>'
                    f'<td class="num">{t.failures.get(kind, 0)}</td><td class="num">{failed_recently}</td></tr>')
    body = "".join(rows) or '<tr><td colspan="5">No request yet.</td></tr>'
    slots = max(int(round(s.window_seconds / s.bucket_seconds)), 1)
    return (f'<section id="tier"><h2>Remote tier <code>{_e(t.tier)}</code></h2>'
            "<table><thead><tr><th>request</th><th>since start</th><th>last minute</th><th>failed since start"
            f"</th><th>failed, last {s.window_seconds / 60:g} min</th></tr></thead><tbody>{body}</tbody></table>"
            f"<p>Requests per second (failures in red): {sparkline(s.activity, 'store_requests', slots, REMOTE, 'store_failures')}"
            f"</p><p>Read {_e(format_bytes(t.bytes_read))}, written {_e(format_bytes(t.bytes_written))} since start."
            "</p></section>")


_COST_COLUMNS = (("get", "GET"), ("put", "PUT"), ("delete", "DELETE"), ("list", "LIST"), ("bytes-read", "bytes read"),
                 ("bytes-written", "bytes written"), ("stored-bytes", "stored bytes"), ("requests", "requests"),
                 ("transfer", "transfer"), ("storage", "storage"), ("hour", "last hour"),
                 ("month", f"month (last hour x {HOURS_PER_MONTH})"))


def cost_cells(c: TopicCost) -> list[tuple[str, str]]:
    """A topic's row of the cost table, as (class, text): the numbers ``describe --cost`` prints."""
    counts = c.counts
    return [("get", str(counts.get("GET", 0))), ("put", str(counts.get("PUT", 0))),
            ("delete", str(counts.get("DELETE", 0))), ("list", str(counts.get("LIST", 0))),
            ("bytes-read", str(counts.get("bytes_read", 0))), ("bytes-written", str(counts.get("bytes_written", 0))),
            ("stored-bytes", str(c.stored_bytes)), ("requests", money(c.hour.requests)),
            ("transfer", money(c.hour.transfer)), ("storage", money(c.hour.storage)), ("hour", money(c.hour.total)),
            ("month", money(c.month.total))]


def _costs(s: StatusSnapshot) -> str:
    if s.prices is None:
        return ""
    p = s.prices
    rows = "".join(f'<tr class="cost" data-topic="{_e(c.topic)}"><td class="topic">{_e(c.topic)}</td>'
                   + "".join(f'<td class="num {cls}">{_e(text)}</td>' for cls, text in cost_cells(c)) + "</tr>"
                   for c in s.costs)
    body = rows or f'<tr><td colspan="{1 + len(_COST_COLUMNS)}">No request for a topic and nothing stored yet.</td></tr>'
    head = "<tr><th>topic</th>" + "".join(f"<th>{_e(title)}</th>" for _, title in _COST_COLUMNS) + "</tr>"
    note = (f"The last hour of each topic: the requests and bytes this process sent to the remote tier for it in "
            f"{window_text(s.cost_window_s)}, at {p.get_per_1000:g} per 1,000 GET, {p.put_per_1000:g} per 1,000 PUT, "
            f"{p.list_per_1000:g} per 1,000 LIST, {p.delete_per_1000:g} per 1,000 DELETE, {p.transfer_out_per_gb:g} "
            f"per GB read and {p.transfer_in_per_gb:g} per GB written; and one hour of its storage: its copied "
            f"segments' stored bytes at {p.storage_gb_month:g} per GB-month, a month being {HOURS_PER_MONTH} "
            f"hours (GB: 2^30 bytes). The month is projected: the last hour x {HOURS_PER_MONTH}. Requests for no "
            f"topic (manifests, key checks, listings of the bucket) are in the remote tier's totals above only. "
            f"Topics past proxy.metrics.topic.label.max are summed under {OTHER}, as in the metrics.")
    return (f'<section id="costs"><h2>Remote tier cost per topic ({_e(p.currency)})</h2><p class="note">{_e(note)}'
            f'</p><table class="costs"><thead>{head}</thead><tbody>{body}</tbody></table></section>')


def _archives(s: StatusSnapshot) -> str:
    if not s.archives:
        return ""
    rows = "".join(f'<tr><th><code>{_e(a.topic)}</code></th><td>{_e(a.source)}</td><td class="num">{a.partitions}</td>'
                   f'<td class="num">{a.segments}</td><td class="num">{_e(format_bytes(a.remote_bytes))}</td>'
                   f'<td class="num">{a.offsets}</td></tr>' for a in s.archives)
    return ('<section id="archives"><h2>Archived topics</h2><p class="note">Served read-only from the remote tier: '
            "the cluster has no topic of the name.</p><table><thead><tr><th>topic</th><th>served from</th>"
            "<th>partitions</th><th>segments</th><th>remote bytes</th><th>offsets</th></tr></thead>"
            f"<tbody>{rows}</tbody></table></section>")


def _budgets(s: StatusSnapshot) -> str:
    if not s.budgets:
        return ""
    rows = "".join(f'<tr><th><code>{_e(b.name)}</code></th><td class="num">{_e(format_bytes(b.used))}</td>'
                   f'<td class="num">{_e(format_bytes(b.peak))}</td><td class="num">'
                   f'{_e(format_bytes(b.limit) if b.limit > 0 else "unbounded")}</td><td class="num">{b.waits}</td></tr>'
                   for b in s.budgets)
    return ('<section id="budgets"><h2>Buffers</h2><table><thead><tr><th>bounded by</th><th>held</th><th>peak</th>'
            f"<th>limit</th><th>waits</th></tr></thead><tbody>{rows}</tbody></table></section>")


_STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#1d2329;background:#fff}
h1{font-size:1.4em;margin:0 0 .2em}h2{font-size:1.15em;margin:1.4em 0 .4em}
table{border-collapse:collapse}th,td{padding:3px 8px;text-align:left;vertical-align:middle}
thead th{border-bottom:1px solid #c9ced4;font-weight:600}.num{text-align:right;font-variant-numeric:tabular-nums}
tr.topic-head th{background:#f3f5f7;border-top:1px solid #c9ced4}.note{color:#59636e;max-width:70em}
.legend span{margin-right:1.2em}.flag{display:block;font-size:12px}.flag.lost{color:#d62828}
.flag.diverged{color:#b86e00}svg{vertical-align:middle}code{font-size:13px}
"""


def render(s: StatusSnapshot) -> str:
    """The whole page."""
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f'<meta http-equiv="refresh" content="{REFRESH_S}"><link rel="icon" href="data:,">'
            f"<title>tiered-proxy status</title><style>{_STYLE}</style></head><body>"
            f"{_header(s)}{_brokers(s)}{_partitions(s)}{_archives(s)}{_activity(s)}{_tier(s)}{_costs(s)}{_budgets(s)}"
            "</body></html>\n")
