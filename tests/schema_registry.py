"""A real schema registry for the Avro tests: Apicurio Registry (Apache-2.0), whose
Confluent-compatible API (``/apis/ccompat/v7``) the Confluent serializers and ``tiered-proxy
iceberg`` both speak. Karapace is not on PyPI; Apicurio's release is on Maven Central as a
ready-to-run Quarkus application (``apicurio-registry-app-<version>-all.tar.gz``).

Fetched once into the cache outside the repository (checked against Maven Central's SHA-1) and
run with a Java 21+ runtime from ``/usr/lib/jvm`` (its classes are built for Java 21), in memory,
on a loopback port. Stopped by its PID.
"""

from __future__ import annotations

import fcntl
import hashlib
import re
import shutil
import subprocess
import tarfile
import time
import urllib.request
from pathlib import Path

from tests.maven_jars import cache_root
from tests.proxy_process import free_port

APICURIO_VERSION = "3.3.3"
_ARCHIVE = (f"https://repo1.maven.org/maven2/io/apicurio/apicurio-registry-app/{APICURIO_VERSION}/"
            f"apicurio-registry-app-{APICURIO_VERSION}-all.tar.gz")
START_TIMEOUT_S = 120.0


class RegistryUnavailable(RuntimeError):
    """No Java 21+, or the release could not be fetched; the message says which."""


def java_21() -> Path:
    """A ``java`` of version 21 or later among /usr/lib/jvm's."""
    for home in sorted(Path("/usr/lib/jvm").glob("*"), reverse=True):
        java = home / "bin" / "java"
        if not java.exists():
            continue
        shown = subprocess.run([str(java), "-version"], capture_output=True, text=True, timeout=60).stderr
        found = re.search(r'version "(\d+)', shown)
        if found and int(found.group(1)) >= 21:
            return java
    raise RegistryUnavailable("Apicurio Registry needs Java 21+, and /usr/lib/jvm has none "
                              "(e.g. `apt-get install openjdk-21-jre-headless`)")


def apicurio_home() -> Path:
    """The unpacked release, fetched on first use."""
    home = cache_root() / "apicurio" / APICURIO_VERSION
    marker = home / "complete"
    if marker.exists():
        return home
    home.parent.mkdir(parents=True, exist_ok=True)
    with open(home.parent / f".{APICURIO_VERSION}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if marker.exists():
            return home
        shutil.rmtree(home, ignore_errors=True)
        archive = home.parent / f"apicurio-{APICURIO_VERSION}.tar.gz.partial"
        print(f"fetching Apicurio Registry {APICURIO_VERSION} from Maven Central (first run only)", flush=True)
        try:
            with urllib.request.urlopen(_ARCHIVE + ".sha1", timeout=60) as answer:
                expected = answer.read().decode().split()[0]
            digest = hashlib.sha1()  # noqa: S324 - Maven Central's checksum
            with urllib.request.urlopen(_ARCHIVE, timeout=600) as answer, open(archive, "wb") as out:
                while chunk := answer.read(1 << 20):
                    digest.update(chunk)
                    out.write(chunk)
        except OSError as exc:
            archive.unlink(missing_ok=True)
            raise RegistryUnavailable(f"could not fetch {_ARCHIVE}: {exc}") from None
        if digest.hexdigest() != expected:
            archive.unlink()
            raise RegistryUnavailable(f"{_ARCHIVE}: SHA-1 {digest.hexdigest()}, Maven Central says {expected}")
        with tarfile.open(archive) as tar:
            tar.extractall(home, filter="data")
        archive.unlink()
        marker.write_text(APICURIO_VERSION + "\n")
    return home


class SchemaRegistryProcess:
    """One Apicurio Registry, started and stopped by this process."""

    def __init__(self, log_path: Path) -> None:
        home = apicurio_home()
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/apis/ccompat/v7"
        self.log = open(log_path, "wb")
        self.process = subprocess.Popen(
            [str(java_21()), "-Xmx512m", f"-Dquarkus.http.port={self.port}", "-Dquarkus.http.host=127.0.0.1",
             "-jar", str(home / "quarkus-run.jar")],
            cwd=home, stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self.stop()
                raise RegistryUnavailable(f"Apicurio Registry exited {self.process.returncode}: see {log_path}")
            try:
                with urllib.request.urlopen(f"{self.url}/subjects", timeout=5):
                    return
            except OSError:
                time.sleep(0.5)
        self.stop()
        raise RegistryUnavailable(f"Apicurio Registry did not answer in {START_TIMEOUT_S:.0f}s: see {log_path}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(30)
        self.log.close()
