"""Which remote tier a metadata store describes: recorded with the store on first start, so a
proxy started later over the same data dir with another ``--remote`` is refused instead of
reading segments that are not there."""

from __future__ import annotations

import logging
import os
import posixpath
import re
import urllib.parse
from pathlib import Path

from tiering.config import DEFAULT_METADATA_TOPIC, STORAGE_URI_CONFIG
from tiering.metadata.journal_store import JOURNAL_NAME, fsync_dir

log = logging.getLogger(__name__)


REMOTE_TIER_RECORD = "remote_tier.properties"  # beside the journal of a file:// store
_RECORD_KEY = STORAGE_URI_CONFIG
# Query parameters that may carry secrets never reach the record (S3 credentials have keys of
# their own, but a URI could still hold one).
_SECRET_PARAMETER = re.compile(r"secret|password|passwd|token|credential|signature|access.?key|session", re.I)


class RemoteTierMismatchError(ValueError):
    """The metadata store describes segments in another remote tier than the one configured."""


def canonical_storage_uri(uri: str) -> str:
    """``uri`` as the record keeps it: scheme and location only, no credentials (user info or
    secret-looking parameters), no trailing slash, query parameters sorted, ``file://localhost``
    as ``file://``, file paths normalised."""
    parts = urllib.parse.urlsplit(uri.strip())
    scheme = parts.scheme.lower()
    host = _host(parts)
    if scheme == "file" and host == "localhost":
        host = ""
    path = urllib.parse.unquote(parts.path)
    if scheme == "file" and path:
        path = posixpath.normpath("/" + path.lstrip("/"))
    path = path.rstrip("/")
    query = sorted((k, _without_user_info(v)) for k, v in urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
                   if not _SECRET_PARAMETER.search(k))
    text = f"{scheme}://{host}{urllib.parse.quote(path)}"
    return f"{text}?{urllib.parse.urlencode(query, safe=':/')}" if query else text


def _host(parts: urllib.parse.SplitResult) -> str:
    netloc = parts.netloc.rpartition("@")[2]  # user:password@ never counts
    return netloc.lower()


def _without_user_info(value: str) -> str:
    nested = urllib.parse.urlsplit(value)
    if nested.scheme and "@" in nested.netloc:
        return urllib.parse.urlunsplit(nested._replace(netloc=_host(nested)))
    return value


def _record_location(data_dir: Path, metadata_uri: str) -> tuple[str, Path, bool] | None:
    """(the store as messages name it, its record file, whether the store has data yet)."""
    parts = urllib.parse.urlsplit(metadata_uri)
    if parts.scheme == "file":
        directory = Path(posixpath.normpath(urllib.parse.unquote(parts.path) or "/"))
        return f"file://{directory}", directory / REMOTE_TIER_RECORD, (directory / JOURNAL_NAME).exists()
    if parts.scheme == "topic":
        # The topic holds the metadata; the snapshots in the data dir are derived from it.
        topic = parts.netloc or parts.path.strip("/") or DEFAULT_METADATA_TOPIC
        snapshots = data_dir / "metadata-snapshots"
        return (f"topic://{topic} (snapshots in {snapshots})", snapshots / f"{topic}.{REMOTE_TIER_RECORD}",
                any(snapshots.glob(f"{topic}-*.snapshot")))
    return None  # metadata_from_uri refuses it


def _read_record(path: Path) -> str | None:
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() == _RECORD_KEY:
            return value.strip()
    return None


def _write_record(path: Path, uri: str) -> None:
    """Atomically: a crash leaves no record or the whole one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    with open(temporary, "w") as f:
        f.write("# The remote tier this metadata store describes, recorded by tiered-proxy serve.\n"
                f"{_RECORD_KEY}={uri}\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(temporary, path)
    fsync_dir(path.parent)


def check_remote_tier(data_dir: Path, storage_uri: str, metadata_uri: str) -> None:
    """Refuse a metadata store that describes another remote tier than ``storage_uri`` (its
    segments would be looked for where they are not); record the tier with a store that has no
    record yet: a new one, or one an older version made. Runs before either is opened, so a
    refusal changes nothing. Only ``serve`` calls this: read-only readers never write the record."""
    location = _record_location(data_dir, metadata_uri)
    if location is None:
        return
    store, record, has_data = location
    wanted = canonical_storage_uri(storage_uri)
    recorded = _read_record(record)
    if recorded is not None and recorded != wanted:
        raise RemoteTierMismatchError(
            f"the metadata store {store} describes remote tier {recorded}, not {wanted} "
            f"({STORAGE_URI_CONFIG} / --remote); use the --remote it was created with, "
            f"or another --data-dir / --metadata for a new remote tier")
    if recorded is not None:
        return
    try:
        _write_record(record, wanted)
    except OSError as e:  # opening the store reports an unusable location, naming its setting
        log.warning("cannot record the remote tier of metadata store %s in %s: %s", store, record, e)
        return
    if has_data:
        log.info("metadata store %s has no record of its remote tier (an older version made it): "
                 "adopting %s, recorded in %s", store, wanted, record)
    else:
        log.info("metadata store %s: remote tier %s recorded in %s", store, wanted, record)
