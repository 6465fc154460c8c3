"""Where archived topics come from, for the filters that serve them (``proxy/filters/
archived_topics.py``, ``archived_offsets.py``): each source (this proxy's own remote tier, a read
replica's) with its reader, and the topics they serve now, by the name clients use."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from proxy.partition_reads import FetchReads
from tiering.archive import Archive, ArchivedTopic
from tiering.read.reader import RemoteReader


@dataclass(frozen=True)
class ArchiveSource:
    archive: Archive
    reader: RemoteReader
    reads: FetchReads


@dataclass(frozen=True)
class Served:
    """An archived topic and the source that serves it."""

    topic: ArchivedTopic
    source: ArchiveSource

    @property
    def name(self) -> str:
        return self.topic.name


def served_topics(sources: list[ArchiveSource]) -> dict[str, Served]:
    """The archived topics now, by name; where two sources serve a name, the first wins."""
    served: dict[str, Served] = {}
    for source in sources:
        for name, topic in source.archive.topics().items():
            served.setdefault(name, Served(topic, source))
    return served


def finder(topics: dict[str, Served], field: str) -> Callable[[Any], Served | None]:
    """Finds an archived topic as a message of this version names it: by name, or by id bytes."""
    if field in ("topic", "name"):
        return topics.get
    by_id = {t.topic.topic_id.bytes: t for t in topics.values()}
    return by_id.get
