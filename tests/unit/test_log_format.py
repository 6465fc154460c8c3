"""One log record is one line, in text and in JSON, tracebacks included."""

from __future__ import annotations

import json
import logging

from proxy.log_format import TEXT_FORMAT, JsonFormatter, OneLineFormatter


def _record_with_traceback() -> logging.LogRecord:
    try:
        raise ValueError("bad\nthing")
    except ValueError:
        import sys

        return logging.LogRecord("proxy.connection", logging.ERROR, __file__, 1, "closing client %s", ("1.2.3.4:5",),
                                 sys.exc_info())


def test_json_lines_carry_the_traceback_in_a_field():
    line = JsonFormatter().format(_record_with_traceback())
    assert "\n" not in line
    entry = json.loads(line)
    assert (entry["level"], entry["logger"], entry["message"]) == ("ERROR", "proxy.connection", "closing client 1.2.3.4:5")
    assert "ValueError: bad" in entry["error"] and entry["ts"].endswith("+00:00")


def test_text_lines_fold_the_traceback():
    line = OneLineFormatter(TEXT_FORMAT).format(_record_with_traceback())
    assert "\n" not in line and "ValueError: bad | thing" in line


def test_hidden_secrets_never_reach_a_line(monkeypatch) -> None:
    from proxy import log_format

    monkeypatch.setattr(log_format, "_secrets", [])
    log_format.hide(["s3cr3t", 'Module required password="s3cr3t";', ""])
    record = logging.LogRecord("kafka.admin.client", logging.DEBUG, __file__, 1, "Starting with configuration: %s",
                               ({"sasl_plain_password": "s3cr3t", "sasl_plain_username": "proxy"},), None)
    for line in (OneLineFormatter(TEXT_FORMAT).format(record), JsonFormatter().format(record)):
        assert "s3cr3t" not in line and "[hidden]" in line and "proxy" in line
