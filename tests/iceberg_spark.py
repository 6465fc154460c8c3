"""A Python with Spark 4.1 for ``tiered-proxy iceberg`` (Iceberg's Spark runtime stops at Spark 4.1;
the suite's own pyspark is 4.2+, whose streaming reads the tiered-kafka source needs).

Made once, from PyPI, into a virtual environment in the cache outside the repository
(``~/.cache/tiered-proxy/venvs/``, named by the pyspark version and the proxy's dependencies, so a
changed dependency list makes a new one); a lock file lets one pytest-xdist worker make it while
the others wait. The job runs this checkout's code from it (``PYTHONPATH``), not an installed copy.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tomllib
import venv
from pathlib import Path

from tests.maven_jars import cache_root

REPO = Path(__file__).resolve().parent.parent
SPARK_VERSION = "4.1.4"
INSTALL_TIMEOUT_S = 900.0


class SparkForIcebergUnavailable(RuntimeError):
    """pip could not make the Spark 4.1 environment; the message says why."""


def iceberg_python() -> Path:
    """The interpreter of the Spark 4.1 environment, made on first use."""
    dependencies = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    wanted = [f"pyspark[sql]=={SPARK_VERSION}", *dependencies]
    stamp = hashlib.sha256("\n".join(wanted).encode()).hexdigest()[:12]
    home = cache_root() / "venvs" / f"spark-{SPARK_VERSION}-{stamp}"
    python = home / "bin" / "python"
    marker = home / "complete"
    if marker.exists():
        return python
    home.parent.mkdir(parents=True, exist_ok=True)
    with open(home.parent / f".{home.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if marker.exists():
            return python
        print(f"installing pyspark {SPARK_VERSION} from PyPI into {home} for the Iceberg tests (first run only)",
              file=sys.stderr, flush=True)
        shutil.rmtree(home, ignore_errors=True)
        venv.create(home, with_pip=True)
        try:
            done = subprocess.run([str(python), "-m", "pip", "install", "-q", *wanted], stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, timeout=INSTALL_TIMEOUT_S,
                                  stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            shutil.rmtree(home, ignore_errors=True)
            raise SparkForIcebergUnavailable(f"pip install {' '.join(wanted)} took over {INSTALL_TIMEOUT_S:.0f}s") from None
        if done.returncode != 0:
            shutil.rmtree(home, ignore_errors=True)
            raise SparkForIcebergUnavailable(f"pip install failed (exit {done.returncode}):\n{done.stdout[-3000:]}")
        marker.write_text("\n".join(wanted) + "\n")
    return python


def iceberg_command(*args: str, command: str = "iceberg") -> tuple[list[str], dict[str, str]]:
    """``tiered-proxy iceberg ARGS`` (or another ``command``) as the Spark 4.1 environment runs it:
    (command line, environment)."""
    python = iceberg_python()
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYSPARK_PYTHON": str(python)}
    env.pop("PYSPARK_DRIVER_PYTHON", None)
    return [str(python), "-m", "proxy.cli", command, *args], env


_SQL_SNIPPET = """
import json, sys
from tiering.spark.iceberg import ICEBERG_RUNTIME, iceberg_session
spark = iceberg_session("local[1]", "tiered", sys.argv[1], runtime=ICEBERG_RUNTIME)
try:
    print(json.dumps([list(row) for row in spark.sql(sys.argv[2]).collect()]))
finally:
    spark.stop()
"""


def spark_sql(warehouse: str, query: str) -> list[list]:
    """The rows of ``query`` as Spark SQL answers it through Iceberg's runtime (catalog ``tiered``,
    a Hadoop catalog on ``warehouse``), in the Spark 4.1 environment."""
    python = iceberg_python()
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYSPARK_PYTHON": str(python)}
    done = subprocess.run([str(python), "-c", _SQL_SNIPPET, warehouse, query], env=env, capture_output=True,
                          text=True, timeout=300, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise AssertionError(f"Spark SQL {query!r} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])
