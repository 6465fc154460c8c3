"""Iceberg's Spark runtime fetched once from a Maven repository (tiering/spark/iceberg.py's
``runtime_jar``), here a real HTTP server on loopback laid out as Maven Central is: the jar is
kept in the cache and not asked for again, and a jar whose SHA-1 differs from the repository's is
refused and not kept. And a Spark the runtime is not built for is refused with what to do."""

from __future__ import annotations

import hashlib
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tiering.spark.iceberg import iceberg_session
from tiering.spark.jars import JarNotPublished, runtime_jar, spark_module_jar

JAR_PATH = "/org/example/runtime_2.13/1.0/runtime_2.13-1.0.jar"


@pytest.fixture
def repository(tmp_path: Path) -> Iterator[tuple[str, dict[str, bytes], list[str]]]:
    files: dict[str, bytes] = {}
    asked: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            asked.append(self.path)
            body = files.get(self.path)
            self.send_response(200 if body is not None else 404)
            self.send_header("Content-Length", str(len(body or b"")))
            self.end_headers()
            self.wfile.write(body or b"")

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", files, asked
    finally:
        server.shutdown()
        server.server_close()


def test_the_runtime_is_fetched_once_and_checked(repository, tmp_path: Path) -> None:
    url, files, asked = repository
    body = b"PK\x03\x04 not really a jar" * 1000
    files[JAR_PATH] = body
    files[JAR_PATH + ".sha1"] = hashlib.sha1(body).hexdigest().encode() + b"  runtime_2.13-1.0.jar\n"
    jar = runtime_jar("org.example:runtime_2.13:1.0", url, tmp_path / "cache")
    assert jar.read_bytes() == body and jar.name == "runtime_2.13-1.0.jar"
    assert runtime_jar("org.example:runtime_2.13:1.0", url, tmp_path / "cache") == jar
    assert asked == [JAR_PATH + ".sha1", JAR_PATH]  # the second call asked nothing


def test_a_jar_that_does_not_match_its_checksum_is_refused(repository, tmp_path: Path) -> None:
    url, files, _ = repository
    files[JAR_PATH] = b"tampered"
    files[JAR_PATH + ".sha1"] = hashlib.sha1(b"original").hexdigest().encode()
    with pytest.raises(OSError, match="SHA-1"):
        runtime_jar("org.example:runtime_2.13:1.0", url, tmp_path / "cache")
    assert list((tmp_path / "cache").iterdir()) == []


def test_a_repository_without_the_jar_says_where_it_looked(repository, tmp_path: Path) -> None:
    url, _, _ = repository
    with pytest.raises(JarNotPublished, match=r"http://.* has no org.example:runtime_2.13:1.0"):
        runtime_jar("org.example:runtime_2.13:1.0", url, tmp_path / "cache")


def test_a_spark_module_missing_at_this_patch_release_is_taken_from_the_one_before(repository, tmp_path: Path) -> None:
    url, files, asked = repository
    path = "/org/apache/spark/spark-avro_2.13/4.1.1/spark-avro_2.13-4.1.1.jar"
    files[path] = b"avro functions"
    files[path + ".sha1"] = hashlib.sha1(b"avro functions").hexdigest().encode()
    jar = spark_module_jar("spark-avro_2.13", "4.1.4", url, tmp_path / "cache")
    assert jar.name == "spark-avro_2.13-4.1.1.jar" and jar.read_bytes() == b"avro functions"
    assert [a.rsplit("/", 1)[1] for a in asked] == [f"spark-avro_2.13-4.1.{p}.jar.sha1" for p in (4, 3, 2, 1)] \
        + ["spark-avro_2.13-4.1.1.jar"]
    with pytest.raises(OSError, match="has no org.apache.spark:spark-avro_2.13 for Spark 4.0"):
        spark_module_jar("spark-avro_2.13", "4.0.2", url, tmp_path / "cache")


def test_a_spark_the_runtime_is_not_built_for_is_refused_before_it_starts() -> None:
    """The suite's own pyspark is 4.2+: the job says what to install instead of failing inside Spark."""
    import pyspark

    assert tuple(int(n) for n in pyspark.__version__.split(".")[:2]) >= (4, 2)
    with pytest.raises(ValueError, match=r"runs on Spark 4.0 or 4.1 .*tiered-proxy\[iceberg\]"):
        iceberg_session("local[1]", "tiered", "file:///nowhere")
