"""Jars the Spark jobs add to Spark (Iceberg's runtime, Spark's Avro functions), from Maven
Central, downloaded once into the cache and checked against the repository's SHA-1. Spark's own
``spark.jars.packages`` would resolve them again at every start, seconds each time."""

from __future__ import annotations

import hashlib
import os
import sys
import urllib.error
import urllib.request
from pathlib import Path

MAVEN_CENTRAL = "https://repo1.maven.org/maven2"


class JarNotPublished(OSError):
    """The repository has no such version (HTTP 404)."""


def runtime_jar(coordinate: str, repository: str = MAVEN_CENTRAL, cache: Path | None = None) -> Path:
    """The jar of ``group:artifact:version``, downloaded from ``repository`` once into ``cache``
    (``~/.cache/tiered-proxy/jars``)."""
    group, artifact, version = coordinate.split(":")
    folder = cache or Path(os.environ.get("TIERED_PROXY_CACHE") or Path.home() / ".cache" / "tiered-proxy") / "jars"
    jar = folder / f"{artifact}-{version}.jar"
    if jar.exists():
        return jar
    folder.mkdir(parents=True, exist_ok=True)
    url = f"{repository.rstrip('/')}/{group.replace('.', '/')}/{artifact}/{version}/{artifact}-{version}.jar"
    partial = jar.with_suffix(f".partial-{os.getpid()}")
    digest = hashlib.sha1()  # noqa: S324 - Maven Central's own checksum of the file, not security
    try:
        with urllib.request.urlopen(url + ".sha1", timeout=60) as answer:
            expected = answer.read().decode().split()[0].strip()
        print(f"spark: fetching {coordinate} from {url} into {folder} (first run only)", file=sys.stderr, flush=True)
        with urllib.request.urlopen(url, timeout=600) as answer, open(partial, "wb") as out:
            while chunk := answer.read(1 << 20):
                digest.update(chunk)
                out.write(chunk)
    except urllib.error.HTTPError as exc:
        partial.unlink(missing_ok=True)
        if exc.code == 404:
            raise JarNotPublished(f"{repository} has no {coordinate}") from None
        raise OSError(f"could not fetch {coordinate} from {url}: {exc} (or give a local jar)") from None
    except OSError as exc:  # urllib's other errors among them
        partial.unlink(missing_ok=True)
        raise OSError(f"could not fetch {coordinate} from {url}: {exc} (or give a local jar)") from None
    if digest.hexdigest() != expected:
        partial.unlink()
        raise OSError(f"{url}: SHA-1 {digest.hexdigest()}, but the repository says {expected}: not kept")
    partial.replace(jar)
    return jar


def spark_module_jar(artifact: str, spark_version: str, repository: str = MAVEN_CENTRAL,
                     cache: Path | None = None) -> Path:
    """One of Spark's own modules (``spark-avro_2.13``) for this Spark: its version, or the newest
    earlier patch release of the same minor that ``repository`` has (a module's API does not change
    within a minor release, and Maven Central lacks some patch releases of some modules)."""
    major, minor, patch = (spark_version.split("+")[0].split(".") + ["0", "0"])[:3]
    for candidate in range(int("".join(c for c in patch if c.isdigit()) or 0), -1, -1):
        try:
            return runtime_jar(f"org.apache.spark:{artifact}:{major}.{minor}.{candidate}", repository, cache)
        except JarNotPublished:
            continue
    raise OSError(f"{repository} has no org.apache.spark:{artifact} for Spark {major}.{minor}")
