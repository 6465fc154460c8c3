"""Log output: text for people, or JSON lines (``--log-format json``) for log pipelines. Either
way one record is one line: a traceback goes into the record's ``error`` field (JSON) or is
folded onto the same line (text), so each error is exactly one line to search and alert on.

Secrets the configuration holds (:func:`hide`) are replaced in every line, whoever logged it:
client libraries log their whole configuration at DEBUG, passwords included."""

from __future__ import annotations

import datetime
import json
import logging
import sys

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
HIDDEN = "[hidden]"
_secrets: list[str] = []


def hide(values: list[str]) -> None:
    """Never print these values (longest first, so a secret inside another is hidden whole)."""
    _secrets[:] = sorted({*_secrets, *(v for v in values if v)}, key=len, reverse=True)


def _redact(text: str) -> str:
    for secret in _secrets:
        if secret in text:
            text = text.replace(secret, HIDDEN)
    return text


class JsonFormatter(logging.Formatter):
    def __init__(self, worker: int | None = None) -> None:
        super().__init__()
        self.worker = worker

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "ts": datetime.datetime.fromtimestamp(record.created, datetime.UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": _redact(record.getMessage()),
        }
        if self.worker is not None:
            entry["worker"] = self.worker
        if record.exc_info:
            entry["error"] = _redact(self.formatException(record.exc_info))
        return json.dumps(entry, ensure_ascii=False)


class OneLineFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return _redact(super().format(record).replace("\n", " | "))


def configure(level: str, fmt: str, worker: int | None = None) -> None:
    """Log to stderr; a worker process (``proxy.workers``) tags its lines with its index."""
    handler = logging.StreamHandler(sys.stderr)
    text = TEXT_FORMAT if worker is None else TEXT_FORMAT.replace("%(name)s", f"%(name)s[worker {worker}]")
    handler.setFormatter(JsonFormatter(worker) if fmt == "json" else OneLineFormatter(text))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
