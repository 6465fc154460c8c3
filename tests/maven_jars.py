"""Jars from Maven Central for the tests, fetched once into a cache outside the repository.

A dependency-only Maven project under ``tests/`` names what to fetch (``tests/kafka/pom.xml``:
an Apache Kafka release; ``tests/spark/pom.xml``: Spark's own Kafka connector); ``mvn
dependency:copy-dependencies`` copies the jars into ``~/.cache/tiered-proxy/<name>/<version>/libs``
(``TIERED_PROXY_CACHE`` moves ``~/.cache/tiered-proxy``). A marker written after a complete copy
makes later runs reuse it; a lock file lets one process (one pytest-xdist worker) fetch while the
others wait. Nothing fetched is ever written inside the repository.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

MAVEN_TIMEOUT = 900.0


class JarsUnavailable(RuntimeError):
    """Java or Maven is missing, or Maven could not fetch the jars; the message says which."""


def cache_root() -> Path:
    return Path(os.environ.get("TIERED_PROXY_CACHE") or Path.home() / ".cache" / "tiered-proxy")


def _tail(text: str, lines: int = 40) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def fetch_jars(pom: Path, name: str, version: str, what: str, properties: Mapping[str, str],
               required: Iterable[str], extra_args: Iterable[str] = ()) -> Path:
    """The folder of jars that ``pom`` resolves with ``properties``, fetched on first use.
    ``what`` names them in the one progress line; ``required``: file names that must be among
    them for the fetch to count."""
    home = cache_root() / name / version
    libs = home / "libs"
    marker = home / "complete"
    # The marker names the pom and properties it was fetched with: a changed pom fetches again.
    stamp = f"pom-sha256 {hashlib.sha256(pom.read_bytes()).hexdigest()} {sorted(properties.items())}\n"

    def cached() -> bool:
        return libs.is_dir() and marker.exists() and marker.read_text().startswith(stamp)

    if cached():
        return libs
    home.mkdir(parents=True, exist_ok=True)
    with open(home / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # held until the with block closes the file
        if cached():
            return libs
        if shutil.which("java") is None:
            raise JarsUnavailable(f"no `java` on PATH: {what} needs a Java 17+ runtime "
                                  "(e.g. `apt-get install openjdk-17-jre-headless`)")
        mvn = shutil.which("mvn")
        if mvn is None:
            raise JarsUnavailable(f"no `mvn` on PATH: it fetches {what} from Maven Central into {libs} "
                                  "(install Maven, e.g. `apt-get install maven`)")
        print(f"fetching {what} from Maven Central into {libs} (first run only)", file=sys.stderr, flush=True)
        partial = home / f"libs.partial-{os.getpid()}"
        shutil.rmtree(partial, ignore_errors=True)
        command = [mvn, "-q", "-B", "-f", str(pom), "dependency:copy-dependencies",
                   f"-DoutputDirectory={partial}", "-DincludeScope=runtime",
                   *(f"-D{key}={value}" for key, value in properties.items()), *extra_args]
        try:
            done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                  timeout=MAVEN_TIMEOUT, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as e:
            shutil.rmtree(partial, ignore_errors=True)
            out = e.output if isinstance(e.output, str) else (e.output or b"").decode(errors="replace")
            raise JarsUnavailable(f"fetching {what} took over {MAVEN_TIMEOUT:.0f}s:\n{_tail(out)}") from None
        jars = sorted(partial.glob("*.jar")) if partial.is_dir() else []
        if done.returncode != 0 or not set(required) <= {j.name for j in jars}:
            shutil.rmtree(partial, ignore_errors=True)
            raise JarsUnavailable(f"fetching {what} with Maven failed (exit {done.returncode}, {len(jars)} jars): "
                                  f"{' '.join(command)}\n{_tail(done.stdout)}")
        if libs.exists():
            shutil.rmtree(libs)
        partial.rename(libs)
        marker.write_text(stamp + "".join(f"{j.name}\n" for j in jars))
    return libs


SPARK_POM = Path(__file__).resolve().parent / "spark" / "pom.xml"
# Spark's Kafka connector is published for fewer releases than pyspark: when the installed
# pyspark's own is not on Maven Central (4.3.0 is not), the newest Spark 4 connector that is.
SPARK_CONNECTOR_FALLBACK = "4.2.0"
_SPARK_CONNECTOR_JARS = "spark-sql-kafka-0-10_2.13,spark-token-provider-kafka-0-10_2.13,kafka-clients,commons-pool2"


def spark_kafka_connector(spark_version: str) -> Path:
    """Spark's own Kafka source (``format("kafka")``) for ``spark_version``, without the jars that
    pyspark ships itself; the fallback's where Maven Central has no connector of that version
    (remembered in the cache, so it is asked once)."""
    missing = cache_root() / "spark-kafka" / spark_version / "not-on-maven-central"
    if spark_version != SPARK_CONNECTOR_FALLBACK and not missing.exists():
        try:
            return _spark_connector(spark_version)
        except JarsUnavailable as e:
            # Maven says "Could not find artifact" the first time, "was not found" once cached.
            if "was not found" not in str(e) and "Could not find artifact" not in str(e):
                raise
            missing.write_text(str(e))
    if spark_version != SPARK_CONNECTOR_FALLBACK:
        print(f"Spark's Kafka connector {spark_version} is not on Maven Central; using {SPARK_CONNECTOR_FALLBACK}'s",
              file=sys.stderr, flush=True)
    return _spark_connector(SPARK_CONNECTOR_FALLBACK)


def _spark_connector(version: str) -> Path:
    return fetch_jars(SPARK_POM, "spark-kafka", version, f"Spark's Kafka connector {version}",
                      {"spark.version": version}, [f"spark-sql-kafka-0-10_2.13-{version}.jar"],
                      [f"-DincludeArtifactIds={_SPARK_CONNECTOR_JARS}"])
