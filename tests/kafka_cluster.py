"""Real Apache Kafka (KRaft) clusters from the official release jars, started on loopback for tests.

The jars come from Maven Central through ``tests/kafka/pom.xml`` (``mvn dependency:copy-dependencies``)
into a cache outside the repository, ``~/.cache/tiered-proxy/kafka/<version>/libs`` (``TIERED_PROXY_CACHE``
moves ``~/.cache/tiered-proxy``). Each node is its own JVM (``kafka.Kafka server.properties``) in its own
process session, with a data directory, a ``server.properties`` written here, and storage formatted by
Kafka's own ``kafka.tools.StorageTool`` (which also creates the SCRAM users of the secure shape). Nodes are
stopped by PID: SIGTERM to the process group, then SIGKILL.

Shapes: :func:`start_single`, :func:`start_three`, :func:`start_secure`, :func:`start_native_tiered`
(or :func:`start_cluster` by name). Every shape takes a Kafka version ("4.4.0" by default, "3.9.x" for the
newest 3.9 release served) and extra broker properties.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import fcntl
import os
import random
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.maven_jars import JarsUnavailable, fetch_jars

HOST = "127.0.0.1"
DEFAULT_VERSION = "4.4.0"
#: The newest 3.9 release whose jars resolve from Maven Central ("3.9.x" and "3.9" mean this one).
KAFKA_39 = "3.9.2"
POM = Path(__file__).resolve().parent / "kafka" / "pom.xml"
DEFAULT_HEAP = "384m"
CONTROLLER = "CONTROLLER"

PropertyValue = str | int | float | bool
Properties = Mapping[str, PropertyValue]


class KafkaUnavailable(JarsUnavailable):
    """Java or Maven is missing, or the release jars could not be fetched; the message says which."""


class KafkaStartError(RuntimeError):
    """A node did not format or come up in time; the message has the tail of its log."""


@dataclass(frozen=True)
class KafkaRelease:
    """What differs between the supported Kafka versions."""

    version: str
    #: The version of the kafka-storage / kafka-clients *test* jars (LocalTieredStorage and the TestUtils
    #: it refers to). Kafka 4.4.0 published no test jars to Maven Central, so 4.4.0 takes 4.3.1's.
    test_jar_version: str
    #: "log4j2" (Kafka 4.x) or "reload4j" (Kafka 3.x, log4j 1 API): the pom profile and the config format.
    logging: str
    tools: Mapping[str, str]
    #: Broker properties that only this line of releases knows.
    defaults: Mapping[str, str] = field(default_factory=dict)
    #: Java sources (path -> text) compiled into a small compatibility jar on the class path; see
    #: :func:`compat_jar`.
    compat_sources: Mapping[str, str] = field(default_factory=dict)

    @property
    def major(self) -> int:
        return int(self.version.split(".")[0])


_TOOLS_COMMON = {
    "storage": "kafka.tools.StorageTool",
    "server": "kafka.Kafka",
    "topics": "org.apache.kafka.tools.TopicCommand",
    "console-consumer": "org.apache.kafka.tools.consumer.ConsoleConsumer",
    "consumer-groups": "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
    "consumer-perf": "org.apache.kafka.tools.ConsumerPerformance",
    "producer-perf": "org.apache.kafka.tools.ProducerPerformance",
    "get-offsets": "org.apache.kafka.tools.GetOffsetShell",
    "log-dirs": "org.apache.kafka.tools.LogDirsCommand",
    "metadata-quorum": "org.apache.kafka.tools.MetadataQuorumCommand",
    "features": "org.apache.kafka.tools.FeatureCommand",
}

#: Main classes of the command-line tools, by version line; ``run_tool`` takes either a key or a class.
TOOLS: dict[str, dict[str, str]] = {
    "4": {
        **_TOOLS_COMMON,
        "configs": "org.apache.kafka.tools.ConfigCommand",
        "acls": "org.apache.kafka.tools.AclCommand",
        "console-producer": "org.apache.kafka.tools.ConsoleProducer",
        "console-share-consumer": "org.apache.kafka.tools.consumer.ConsoleShareConsumer",
        "share-groups": "org.apache.kafka.tools.consumer.group.ShareGroupCommand",
        "share-consumer-perf": "org.apache.kafka.tools.ShareConsumerPerformance",
        "dump-log": "org.apache.kafka.tools.DumpLogSegments",
    },
    "3.9": {
        **_TOOLS_COMMON,
        "configs": "kafka.admin.ConfigCommand",
        "acls": "kafka.admin.AclCommand",
        "console-producer": "kafka.tools.ConsoleProducer",
        "dump-log": "kafka.tools.DumpLogSegments",
    },
}

# Kafka 4.4 moved LogContext to org.apache.kafka.common.utils.internals; LocalTieredStorage in the 4.3.1
# test jar (4.4.0 published none) still names the old class, so a one-class shim that forwards to the new
# one sits on the class path. Nothing else that LocalTieredStorage uses is missing from 4.4.0 (jdeps).
_LOG_CONTEXT_SHIM = """\
package org.apache.kafka.common.utils;

import org.slf4j.Logger;

/** Written by tiered-proxy's tests: the pre-4.4 name of Kafka's LogContext, forwarding to the new one. */
public class LogContext {
    private final org.apache.kafka.common.utils.internals.LogContext target;

    public LogContext(String prefix) {
        target = new org.apache.kafka.common.utils.internals.LogContext(prefix);
    }

    public LogContext() {
        target = new org.apache.kafka.common.utils.internals.LogContext();
    }

    public Logger logger(Class<?> owner) {
        return target.logger(owner);
    }

    public Logger logger(String name) {
        return target.logger(name);
    }

    public String logPrefix() {
        return target.logPrefix();
    }
}
"""

RELEASES: dict[str, KafkaRelease] = {
    "4.4.0": KafkaRelease(
        "4.4.0", "4.3.1", "log4j2", TOOLS["4"],
        # Share groups are on through the share.version feature (2 at metadata version 4.4-IV2, the
        # default that StorageTool formats with); they only need their state topic sized to the cluster.
        {"share.coordinator.state.topic.num.partitions": "5"},
        {"org/apache/kafka/common/utils/LogContext.java": _LOG_CONTEXT_SHIM}),
    KAFKA_39: KafkaRelease(KAFKA_39, KAFKA_39, "reload4j", TOOLS["3.9"]),
}


def resolve_version(version: str) -> str:
    """"3.9", "3.9.x" -> the 3.9 release in use; "4.4" -> "4.4.0"; a full supported version as is."""
    aliases = {"3.9": KAFKA_39, "3.9.x": KAFKA_39, "4.4": "4.4.0", "4.4.x": "4.4.0", "4": DEFAULT_VERSION}
    resolved = aliases.get(version, version)
    if resolved not in RELEASES:
        raise ValueError(f"unsupported Kafka version {version!r}; "
                         f"choose one of {', '.join(RELEASES)} or 3.9.x")
    return resolved


def release(version: str) -> KafkaRelease:
    return RELEASES[resolve_version(version)]


def tool_class(version: str, name: str) -> str:
    """The main class of a tool by its short name (a key of :data:`TOOLS`), or ``name`` if it is a class."""
    tools = release(version).tools
    if name in tools:
        return tools[name]
    if "." in name:
        return name
    raise KeyError(f"Kafka {version} has no tool {name!r}; known: {', '.join(sorted(tools))}")


# --------------------------------------------------------------------------------------------------
# The jars


def _java() -> str:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").exists():
        return str(Path(java_home) / "bin" / "java")
    found = shutil.which("java")
    if not found:
        raise KafkaUnavailable("no `java` on PATH (and none under JAVA_HOME): Kafka needs a Java 17+ runtime")
    return found


def _tail(text: str, lines: int = 40) -> str:
    return "\n".join(text.splitlines()[-lines:])


def kafka_libs(version: str = DEFAULT_VERSION) -> Path:
    """The directory of the release's jars, fetched with Maven into the cache on first use
    (tests/maven_jars.py)."""
    rel = release(version)
    try:
        return fetch_jars(POM, "kafka", rel.version, f"Apache Kafka {rel.version}",
                          {"kafka.version": rel.version, "kafka.test.version": rel.test_jar_version,
                           "kafka.logging": rel.logging},
                          [f"kafka_2.13-{rel.version}.jar", f"kafka-storage-{rel.test_jar_version}-test.jar"])
    except JarsUnavailable as e:
        raise KafkaUnavailable(str(e)) from None


def compat_jar(version: str = DEFAULT_VERSION) -> Path | None:
    """The release's compatibility jar (built once with javac into the cache), or None if it needs none.

    Raises :class:`KafkaUnavailable` if it needs one and there is no ``javac``."""
    rel = release(version)
    if not rel.compat_sources:
        return None
    libs = kafka_libs(rel.version)
    home = libs.parent
    jar = home / "compat" / "tiered-proxy-compat.jar"
    if jar.exists():
        return jar
    with open(home / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if jar.exists():
            return jar
        javac = shutil.which("javac")
        java_home = os.environ.get("JAVA_HOME")
        if java_home and (Path(java_home) / "bin" / "javac").exists():
            javac = str(Path(java_home) / "bin" / "javac")
        if not javac:
            raise KafkaUnavailable(f"no `javac`: Kafka {rel.version} needs a one-class shim compiled for "
                                   f"LocalTieredStorage (install a JDK, not only a JRE)")
        work = home / f"compat.partial-{os.getpid()}"
        shutil.rmtree(work, ignore_errors=True)
        sources = []
        for relative, text in rel.compat_sources.items():
            path = work / "src" / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            sources.append(str(path))
        done = subprocess.run([javac, "-nowarn", "-cp", f"{libs}/*", "-d", str(work / "classes"), *sources],
                              capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        if done.returncode != 0:
            shutil.rmtree(work, ignore_errors=True)
            raise KafkaUnavailable(f"compiling the Kafka {rel.version} compatibility shim failed:\n"
                                   f"{_tail(done.stdout + done.stderr)}")
        import zipfile

        partial = work / jar.name
        with zipfile.ZipFile(partial, "w") as archive:
            for cls in sorted((work / "classes").rglob("*.class")):
                archive.write(cls, cls.relative_to(work / "classes").as_posix())
        jar.parent.mkdir(exist_ok=True)
        partial.rename(jar)
        shutil.rmtree(work, ignore_errors=True)
    return jar


def kafka_classpath(version: str = DEFAULT_VERSION, compat: bool = True) -> str:
    """``<libs>/*`` (java expands the wildcard), plus the compatibility jar if the release has one."""
    libs = kafka_libs(version)
    jar = compat_jar(version) if compat else None
    return f"{libs}/*" + (f"{os.pathsep}{jar}" if jar else "")


# --------------------------------------------------------------------------------------------------
# Processes

_started: dict[int, subprocess.Popen] = {}


def restartable_ports(count: int, host: str = HOST) -> list[int]:
    """``count`` distinct free ports below the kernel's ephemeral range, for a server that is
    stopped and started again on the same ports: in the moment between, an outgoing connection of
    any process can take an ephemeral port (seen once: a restarted worker could not bind its own)."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    rng = random.Random()
    chosen: list[int] = []
    for _ in range(200 * count):
        port = rng.randrange(max(1024, low - 12_000), low - 1)
        if port in chosen:
            continue
        try:
            with socket.socket() as s:
                s.bind((host, port))
        except OSError:
            continue
        chosen.append(port)
        if len(chosen) == count:
            return chosen
    raise RuntimeError(f"no {count} free ports below {low}")


def free_ports(count: int, host: str = HOST) -> list[int]:
    """``count`` distinct free ports (all held open until each is chosen, so none repeats)."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind((host, 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def track_process(process: subprocess.Popen) -> None:
    """A process started in a group of its own, stopped with its group at exit if nobody stopped it."""
    _started[process.pid] = process


def stop_processes(processes: Iterable[subprocess.Popen], timeout: float, graceful: bool = True) -> None:
    """SIGTERM (or SIGKILL) to each process's own group, wait up to ``timeout``, then SIGKILL."""
    processes = [p for p in processes if p is not None]
    for process in processes:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM if graceful else signal.SIGKILL)
    deadline = time.monotonic() + timeout
    for process in processes:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(max(0.0, deadline - time.monotonic()))
    for process in processes:
        if process.poll() is None or _group_alive(process.pid):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(10)
        end = time.monotonic() + 5
        while _group_alive(process.pid) and time.monotonic() < end:
            time.sleep(0.05)
        _started.pop(process.pid, None)


@atexit.register
def _stop_all() -> None:
    stop_processes(list(_started.values()), timeout=5)


def _format_properties(properties: Mapping[str, PropertyValue]) -> str:
    def text(value: PropertyValue) -> str:
        if isinstance(value, bool):
            return "true" if value else "false"
        return str(value)
    # Keys and values here never need escaping beyond backslashes (paths and JAAS lines are plain).
    return "".join(f"{key}={text(value).replace(chr(92), chr(92) * 2)}\n"
                   for key, value in properties.items())


_LOG4J2_BROKER = """\
status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.target = {target}
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = {level}
rootLogger.appenderRef.out.ref = OUT
"""

_LOG4J1 = """\
log4j.rootLogger={level}, out
log4j.appender.out=org.apache.log4j.ConsoleAppender
log4j.appender.out.Target={target}
log4j.appender.out.layout=org.apache.log4j.PatternLayout
log4j.appender.out.layout.ConversionPattern=[%d] %p %m (%c)%n
"""


def _logging_options(rel: KafkaRelease, directory: Path, name: str, level: str, target: str) -> list[str]:
    """JVM options pointing the release's logging backend at a config file written here."""
    if rel.logging == "log4j2":
        path = directory / f"{name}.log4j2.properties"
        stream = "SYSTEM_ERR" if target == "err" else "SYSTEM_OUT"
        path.write_text(_LOG4J2_BROKER.format(level=level, target=stream))
        return [f"-Dlog4j2.configurationFile={path}"]
    path = directory / f"{name}.log4j.properties"
    path.write_text(_LOG4J1.format(level=level, target="System.err" if target == "err" else "System.out"))
    return [f"-Dlog4j.configuration=file:{path}"]


@dataclass
class KafkaNode:
    """One JVM: a combined broker+controller, a broker, or a controller."""

    node_id: int
    roles: tuple[str, ...]
    dir: Path
    ports: dict[str, int]  # listener name -> port, CONTROLLER included where the node has one
    process: subprocess.Popen | None = None
    stopped: bool = False  # stopped on purpose (stop_node / stop), not crashed
    log_offset: int = 0  # where the current run's output starts in the log
    launched_at: float = 0.0

    @property
    def config_path(self) -> Path:
        return self.dir / "server.properties"

    @property
    def log_path(self) -> Path:
        return self.dir / "server.log"

    @property
    def data_dir(self) -> Path:
        return self.dir / "data"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    @property
    def is_broker(self) -> bool:
        return "broker" in self.roles

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log_tail(self, lines: int = 60) -> str:
        try:
            return _tail(self.log_path.read_text(errors="replace"), lines)
        except FileNotFoundError:
            return "(no log yet)"

    def says_started(self) -> bool:
        """The current run has logged that it started (the same line in 3.9 and 4.x); the socket is
        bound earlier than requests are served, so a client that connects before waits out its timeout."""
        try:
            with open(self.log_path, "rb") as log:
                log.seek(self.log_offset)
                return b"Kafka Server started" in log.read()
        except FileNotFoundError:
            return False

    def log_excerpt(self, lines: int = 30, errors: int = 8) -> str:
        """The log's first ERROR/FATAL lines and "Caused by" lines, then its last ``lines`` lines: a
        failing broker's shutdown chatter tends to bury its cause."""
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return "(no log yet)"
        causes = [line[:400] for line in text.splitlines()
                  if " ERROR " in line or " FATAL " in line or line.startswith("Caused by")][:errors]
        head = ("first errors:\n" + "\n".join(causes) + "\nlast lines:\n") if causes else ""
        return head + _tail(text, lines)


@dataclass
class KafkaCluster:
    """A running cluster. ``port``/``bootstrap`` are the first broker's first client listener."""

    shape: str
    version: str
    libs: Path
    base_dir: Path
    nodes: list[KafkaNode]
    listeners: list[str]  # client listener names, the first one the "plain" bootstrap
    heap: str = DEFAULT_HEAP
    host: str = HOST
    kind: str = "kafka"
    #: SCRAM users (name -> password) of the secure shape; ``admin`` is the super user.
    users: dict[str, str] = field(default_factory=dict)
    #: tests.certs.Certificates of the secure shape (CA, server chain, client cert and key).
    certs: Any = None
    #: LocalTieredStorage's directory in the native_tiered shape.
    remote_storage_dir: Path | None = None
    #: The JVMs' class path: ``<libs>/*`` and, where the release needs one, the compatibility jar.
    classpath: str = ""
    #: Seconds from launching the JVMs to ready (format not included).
    start_seconds: float = 0.0
    _jvm_options: list[str] = field(default_factory=list, repr=False)

    # -- what the existing tests use on a broker object --
    @property
    def brokers(self) -> list[KafkaNode]:
        return [n for n in self.nodes if n.is_broker]

    @property
    def port(self) -> int:
        return self.brokers[0].ports[self.listeners[0]]

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def bootstraps(self) -> dict[str, str]:
        """Listener name -> "host:port,host:port" of every broker."""
        return {name: ",".join(f"{self.host}:{n.ports[name]}" for n in self.brokers)
                for name in self.listeners}

    @property
    def pid(self) -> int | None:
        return self.nodes[0].pid

    @property
    def data_dir(self) -> Path:
        return self.nodes[0].data_dir

    @property
    def log_path(self) -> Path:
        return self.nodes[0].log_path

    @property
    def release(self) -> KafkaRelease:
        return RELEASES[self.version]

    def node(self, node_id: int) -> KafkaNode:
        for n in self.nodes:
            if n.node_id == node_id:
                return n
        raise KeyError(f"no node {node_id}; nodes are {[n.node_id for n in self.nodes]}")

    def describe(self) -> str:
        """One line per node: id, roles, pid, ports and log path (for a failing test's message)."""
        return "\n".join(f"kafka {self.version} node {n.node_id} ({','.join(n.roles)}) pid={n.pid} "
                         f"ports={n.ports} log={n.log_path}" for n in self.nodes)

    def tool_class(self, name: str) -> str:
        return tool_class(self.version, name)

    def run_tool(self, main_class: str, *args: object, timeout: float = 60, input: str | None = None,
                 check: bool = False, heap: str = "256m") -> subprocess.CompletedProcess:
        """Run a Kafka tool (a key of :data:`TOOLS` such as "topics", or a main class) with the cluster's
        class path; its logging goes to stderr at WARN, so stdout is the tool's own output."""
        tools_dir = self.base_dir / "tools"
        tools_dir.mkdir(exist_ok=True)
        command = [_java(), f"-Xmx{heap}", "-XX:+UseSerialGC",
                   *_logging_options(self.release, tools_dir, "tools", "WARN", "err"),
                   "-cp", self.classpath, self.tool_class(main_class), *map(str, args)]
        done = subprocess.run(command, input=input, capture_output=True, text=True, timeout=timeout,
                              cwd=tools_dir, stdin=None if input is not None else subprocess.DEVNULL)
        if check and done.returncode != 0:
            raise subprocess.CalledProcessError(done.returncode, command, done.stdout, done.stderr)
        return done

    # -- client settings --
    def client_properties(self, listener: str | None = None, user: str = "admin",
                          mechanism: str = "SCRAM-SHA-512") -> dict[str, str]:
        """Java client properties (for a tool's ``--command-config``) to reach ``listener`` as ``user``."""
        listener = listener or self.listeners[0]
        props = {"bootstrap.servers": self.bootstraps[listener], "security.protocol": listener}
        if listener.startswith("SASL"):
            props["sasl.mechanism"] = mechanism
            props["sasl.jaas.config"] = _scram_jaas(user, self.users[user])
        if "SSL" in listener:
            props["ssl.truststore.type"] = "PEM"
            props["ssl.truststore.location"] = str(self.certs.ca)
            if listener == "SSL":
                props["ssl.keystore.type"] = "PEM"
                props["ssl.keystore.location"] = str(self.client_keystore)
        return props

    def client_config_file(self, listener: str | None = None, user: str = "admin",
                           mechanism: str = "SCRAM-SHA-512") -> Path:
        path = self.base_dir / "tools" / f"client-{(listener or self.listeners[0]).lower()}-{user}.properties"
        path.parent.mkdir(exist_ok=True)
        path.write_text(_format_properties(self.client_properties(listener, user, mechanism)))
        return path

    @property
    def client_keystore(self) -> Path:
        """The client key followed by its certificate, one PEM file (a Java client's keystore)."""
        path = self.base_dir / "client-keystore.pem"
        if not path.exists():
            key, cert = Path(self.certs.client_key), Path(self.certs.client_cert)
            path.write_bytes(key.read_bytes() + cert.read_bytes())
        return path

    def admin_kwargs(self, listener: str | None = None, user: str = "admin",
                     mechanism: str = "SCRAM-SHA-512") -> dict[str, Any]:
        """kafka-python client keyword arguments for ``listener`` (as ``user`` where it authenticates)."""
        listener = listener or self.listeners[0]
        kwargs: dict[str, Any] = {"bootstrap_servers": self.bootstraps[listener].split(","),
                                  "security_protocol": listener}
        if listener.startswith("SASL"):
            kwargs.update(sasl_mechanism=mechanism, sasl_plain_username=user,
                          sasl_plain_password=self.users[user])
        if "SSL" in listener:
            kwargs["ssl_cafile"] = str(self.certs.ca)
            if listener == "SSL":
                kwargs.update(ssl_certfile=str(self.certs.client_cert),
                              ssl_keyfile=str(self.certs.client_key))
        return kwargs

    # -- lifecycle --
    def _launch(self, node: KafkaNode) -> None:
        command = [_java(), *self._jvm_options,
                   *_logging_options(self.release, node.dir, "server", "INFO", "out"),
                   "-cp", self.classpath, tool_class(self.version, "server"), str(node.config_path)]
        node.log_offset = node.log_path.stat().st_size if node.log_path.exists() else 0
        node.launched_at = time.monotonic()
        with open(node.log_path, "ab") as log:
            log.write(f"\n===== {time.strftime('%H:%M:%S')} {' '.join(command)}\n".encode())
            log.flush()
            node.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, cwd=node.dir, start_new_session=True)
        track_process(node.process)

    def add_jvm_options(self, *options: str) -> None:
        """JVM options for the nodes started from now on (a restarted node, say)."""
        self._jvm_options.extend(options)

    def stop_node(self, node_id: int, timeout: float = 20, graceful: bool = True) -> None:
        """Stop one node (SIGTERM, or SIGKILL if not ``graceful``); its data and config stay."""
        node = self.node(node_id)
        node.stopped = True
        if node.process is not None:
            stop_processes([node.process], timeout, graceful)

    def start_node(self, node_id: int, timeout: float = 60) -> None:
        """Start a stopped node again with the same config and ports; returns once it serves metadata
        and (for a broker) the cluster lists it again."""
        node = self.node(node_id)
        if node.running:
            return
        node.stopped = False
        self._launch(node)
        self.wait_ready(timeout)

    def stop(self, timeout: float = 8) -> None:
        """Stop every node at once (SIGTERM to all, SIGKILL to what is left after ``timeout``). A short
        grace: the data is thrown away, and a broker with tiered storage on can spend 20 s shutting down
        (its remote-log-metadata consumer retries the broker that is going away)."""
        for n in self.nodes:
            n.stopped = True
        stop_processes([n.process for n in self.nodes if n.process is not None], timeout)

    def wait_ready(self, timeout: float = 90) -> None:
        """Until every running broker answers DescribeCluster listing all running brokers unfenced."""
        deadline = time.monotonic() + timeout
        last_error: BaseException | None = None
        while True:
            live = [n for n in self.nodes if n.process is not None and not n.stopped]
            for n in live:
                if n.process.poll() is not None:
                    raise KafkaStartError(f"kafka {self.version} node {n.node_id} exited with "
                                          f"{n.process.returncode}; log {n.log_path}:\n{n.log_excerpt()}")
            brokers = [n for n in live if n.is_broker]
            # Ask only once each node says it started (or after 20 s, should the line ever change).
            logged = all(n.says_started() or time.monotonic() - n.launched_at > 20 for n in live)
            try:
                if logged and _cluster_brokers(self, brokers, deadline) == {n.node_id for n in brokers}:
                    return
            except Exception as e:  # noqa: BLE001 - anything a broker that is not ready yet can answer
                last_error = e
            if time.monotonic() >= deadline:
                tails = "\n".join(f"--- node {n.node_id} ({n.log_path}):\n{n.log_excerpt()}" for n in live)
                raise KafkaStartError(f"kafka {self.version} ({self.shape}) not ready within {timeout:.0f}s "
                                      f"(last error: {last_error!r})\n{tails}")
            time.sleep(0.1 if not logged else 0.3)


def _scram_jaas(user: str, password: str) -> str:
    return (f'org.apache.kafka.common.security.scram.ScramLoginModule required '
            f'username="{user}" password="{password}";')


def _cluster_brokers(cluster: KafkaCluster, nodes: list[KafkaNode], deadline: float) -> set[int]:
    """The unfenced broker ids that DescribeCluster to each of ``nodes`` lists (the intersection)."""
    from kafka import KafkaAdminClient

    seen: set[int] | None = None
    for node in nodes:
        if not _port_open(cluster.host, node.ports[cluster.listeners[0]]):
            return set()
        kwargs = cluster.admin_kwargs()
        kwargs["bootstrap_servers"] = [f"{cluster.host}:{node.ports[cluster.listeners[0]]}"]
        remaining_ms = int(max(1.0, min(5.0, deadline - time.monotonic())) * 1000)
        admin = KafkaAdminClient(**kwargs, request_timeout_ms=remaining_ms,
                                 client_id="kafka-cluster-readiness")
        try:
            # DescribeCluster lists fenced brokers too (kafka-python asks for them): count the unfenced.
            ids = {b["broker_id"] for b in admin.describe_cluster()["brokers"] if not b.get("is_fenced")}
        finally:
            admin.close()
        seen = ids if seen is None else seen & ids
    return seen or set()


def _port_open(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


# --------------------------------------------------------------------------------------------------
# Shapes


def _cluster_id() -> str:
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not text.startswith("-"):
            return text


def _jvm_options(heap: str) -> list[str]:
    # Serial GC: the least CPU and memory for a small heap on 2 cores; it also starts a little faster.
    return [f"-Xms{min(64, _megabytes(heap))}m", f"-Xmx{heap}", "-XX:+UseSerialGC", "-Xss512k",
            "-XX:MaxMetaspaceSize=192m", "-Djava.awt.headless=true", "-Dfile.encoding=UTF-8"]


def _megabytes(heap: str) -> int:
    unit = heap[-1].lower()
    number = int(heap[:-1]) if unit in "kmg" else int(heap)
    return {"k": number // 1024, "m": number, "g": number * 1024}.get(unit, number // (1024 * 1024))


def _base_properties(rel: KafkaRelease, replicas: int) -> dict[str, PropertyValue]:
    min_isr = 2 if replicas >= 3 else 1
    props: dict[str, PropertyValue] = {
        "num.partitions": 1,
        "default.replication.factor": replicas,
        "min.insync.replicas": min_isr,
        "offsets.topic.replication.factor": replicas,
        "offsets.topic.num.partitions": 5,
        "transaction.state.log.replication.factor": replicas,
        "transaction.state.log.min.isr": min_isr,
        "transaction.state.log.num.partitions": 5,
        "group.initial.rebalance.delay.ms": 0,
        "auto.create.topics.enable": True,
        "delete.topic.enable": True,
        "log.retention.check.interval.ms": 1000,
        # Retention (and so tiered storage's local deletion) would otherwise first run 30 s after start.
        "log.initial.task.delay.ms": 0,
        # A restarted broker is refused registration (DUPLICATE_BROKER_REGISTRATION) until its previous
        # session expires (9 s by default), and a killed one stays "alive" as long: shorter for tests.
        "broker.heartbeat.interval.ms": 500,
        "broker.session.timeout.ms": 4000,
        # A 2-core machine: fewer threads than Kafka's defaults (3 network, 8 I/O, 10 background).
        "num.network.threads": 2,
        "num.io.threads": 4,
        "background.threads": 4,
        "num.recovery.threads.per.data.dir": 1,
        "num.replica.fetchers": 1,
        "log.cleaner.threads": 1,
        "log.cleaner.dedupe.buffer.size": 8 * 1024 * 1024,
    }
    if rel.major >= 4:
        props.update({"share.coordinator.state.topic.replication.factor": replicas,
                      "share.coordinator.state.topic.min.isr": min_isr})
    props.update(rel.defaults)
    return props


@dataclass
class _Listener:
    name: str
    protocol: str
    advertised_port: int | None = None  # None: its own; else where clients are told to find it


def _build(shape: str, tmp_dir: Path, version: str, **options: Any) -> KafkaCluster:
    """Start the cluster; once more in a fresh directory with fresh ports if a port was taken meanwhile
    (free ports are chosen before the JVMs bind them, so another process can take one first)."""
    try:
        return _build_once(shape, Path(tmp_dir), version, **options)
    except KafkaStartError as e:
        if "Address already in use" not in str(e) and "BindException" not in str(e):
            raise
    return _build_once(shape, Path(tmp_dir) / "retry", version, **options)


def _build_once(shape: str, tmp_dir: Path, version: str, *, node_roles: list[tuple[int, tuple[str, ...]]],
                listeners: list[_Listener], replicas: int, properties: Properties | None,
                shape_properties: Mapping[str, PropertyValue], scram: list[str], heap: str,
                users: dict[str, str] | None = None, certs: Any = None,
                remote_storage_dir: Path | None = None, compat: bool = False) -> KafkaCluster:
    rel = release(version)
    libs = kafka_libs(rel.version)
    # The compatibility jar only where LocalTieredStorage is in use (it needs javac).
    compat = compat or LOCAL_TIERED_STORAGE in {str(v) for v in (properties or {}).values()}
    classpath = kafka_classpath(rel.version, compat=compat)
    tmp_dir = Path(tmp_dir)
    tmp_dir.mkdir(parents=True, exist_ok=True)
    client_names = [listener.name for listener in listeners]
    nodes: list[KafkaNode] = []
    for node_id, roles in node_roles:
        names = (client_names if "broker" in roles else []) + ([CONTROLLER] if "controller" in roles else [])
        node_dir = tmp_dir / f"node-{node_id}"
        node_dir.mkdir(parents=True, exist_ok=True)
        ports = dict(zip(names, free_ports(len(names)), strict=True))
        nodes.append(KafkaNode(node_id, roles, node_dir, ports))
    cluster = KafkaCluster(shape, rel.version, libs, tmp_dir, nodes, client_names, heap=heap,
                           users=users or {},
                           certs=certs, remote_storage_dir=remote_storage_dir, classpath=classpath,
                           _jvm_options=_jvm_options(heap))
    voters = ",".join(f"{n.node_id}@{HOST}:{n.ports[CONTROLLER]}" for n in nodes if "controller" in n.roles)
    protocol_map = ",".join([f"{lst.name}:{lst.protocol}" for lst in listeners] + [f"{CONTROLLER}:PLAINTEXT"])
    for node in nodes:
        props: dict[str, PropertyValue] = {
            "process.roles": ",".join(node.roles),
            "node.id": node.node_id,
            "controller.quorum.voters": voters,
            "controller.listener.names": CONTROLLER,
            "listener.security.protocol.map": protocol_map,
            "listeners": ",".join(f"{name}://{HOST}:{port}" for name, port in node.ports.items()),
            "log.dirs": str(node.data_dir),
        }
        if node.is_broker:
            props["advertised.listeners"] = ",".join(
                f"{lst.name}://{HOST}:{lst.advertised_port or node.ports[lst.name]}" for lst in listeners)
            props["inter.broker.listener.name"] = client_names[0]
        props.update(_base_properties(rel, replicas))
        props.update(shape_properties)
        props.update(properties or {})
        node.config_path.write_text(f"# written by tests/kafka_cluster.py ({shape}, Kafka {rel.version})\n"
                                    + _format_properties(props))
    _format_storage(cluster, _cluster_id(), scram)
    started = time.monotonic()
    try:
        for node in nodes:
            cluster._launch(node)
        cluster.wait_ready()
    except BaseException:
        cluster.stop(timeout=5)
        raise
    cluster.start_seconds = time.monotonic() - started
    return cluster


def _format_storage(cluster: KafkaCluster, cluster_id: str, scram: list[str], timeout: float = 120) -> None:
    """Kafka's own StorageTool formats every node's log directories (nodes in parallel)."""
    running: list[tuple[KafkaNode, subprocess.Popen, Path]] = []
    for node in cluster.nodes:
        out = node.dir / "format.log"
        command = [_java(), "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                   *_logging_options(cluster.release, node.dir, "format", "WARN", "out"),
                   "-cp", cluster.classpath, tool_class(cluster.version, "storage"), "format",
                   "--config", str(node.config_path), "--cluster-id", cluster_id]
        for credential in scram:
            command += ["--add-scram", credential]
        with open(out, "wb") as log:
            process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                       stdin=subprocess.DEVNULL,
                                       cwd=node.dir, start_new_session=True)
        track_process(process)
        running.append((node, process, out))
    deadline = time.monotonic() + timeout
    failures = []
    for node, process, out in running:
        try:
            code = process.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            code = None
        if code is None:
            stop_processes([process], 1)
        _started.pop(process.pid, None)
        if code != 0:
            failures.append(f"--- node {node.node_id}: StorageTool format exited {code}:\n"
                            f"{_tail(out.read_text(errors='replace'))}")
    if failures:
        raise KafkaStartError(f"formatting Kafka {cluster.version} storage failed\n" + "\n".join(failures))


def _plain() -> list[_Listener]:
    return [_Listener("PLAINTEXT", "PLAINTEXT")]


def start_single(tmp_dir: Path, version: str = DEFAULT_VERSION, properties: Properties | None = None,
                 heap: str = DEFAULT_HEAP, relayed_port: int | None = None) -> KafkaCluster:
    """One combined broker+controller node with a PLAINTEXT listener on a free loopback port.

    ``relayed_port``: a second plaintext listener, RELAYED, that tells its clients the broker is at
    that port, where a relay the caller starts (tests/bench/splice_relay.c) forwards to
    ``bootstraps["RELAYED"]``: clients that bootstrap there keep talking through the relay."""
    listeners = _plain() + ([_Listener("RELAYED", "PLAINTEXT", relayed_port)] if relayed_port else [])
    return _build("single", tmp_dir, version, node_roles=[(1, ("broker", "controller"))], listeners=listeners,
                  replicas=1, properties=properties, shape_properties={}, scram=[], heap=heap)


def start_three(tmp_dir: Path, version: str = DEFAULT_VERSION, properties: Properties | None = None,
                heap: str = DEFAULT_HEAP, dedicated_controller: bool = False) -> KafkaCluster:
    """Three brokers (node ids 1-3), replication factor 3, min.insync.replicas 2.

    By default the three nodes are combined broker+controllers (a 3-voter quorum: three JVMs, which
    start faster on 2 cores than four, and the quorum survives any one node stopped). With
    ``dedicated_controller`` a fourth JVM (node 100) is the only controller, so stopping a broker
    never touches the quorum."""
    roles: tuple[str, ...] = ("broker",) if dedicated_controller else ("broker", "controller")
    node_roles = [(i, roles) for i in (1, 2, 3)] + ([(100, ("controller",))] if dedicated_controller else [])
    return _build("three", tmp_dir, version, node_roles=node_roles, listeners=_plain(), replicas=3,
                  properties=properties, shape_properties={}, scram=[], heap=heap)


#: The secure shape's SCRAM users (name -> password). ``admin`` is the super user (and inter-broker).
SECURE_USERS = {"admin": "admin-secret", "alice": "alice-secret", "mallory": "mallory-secret"}
SECURE_LISTENERS = ["SASL_PLAINTEXT", "SASL_SSL", "SSL"]


def start_secure(tmp_dir: Path, version: str = DEFAULT_VERSION, properties: Properties | None = None,
                 heap: str = DEFAULT_HEAP, users: Mapping[str, str] | None = None) -> KafkaCluster:
    """One node with SASL_PLAINTEXT (the first, ``port``), SASL_SSL and SSL client listeners, SCRAM-SHA-256
    and -512 for every user (created by StorageTool ``--add-scram``), StandardAuthorizer with
    ``super.users=User:admin`` and no ACL meaning deny.

    No unauthenticated client listener: every client (the tests' admin too) logs in, so an ACL test
    cannot pass by accident through an open door. The broker reaches its controller over a PLAINTEXT
    CONTROLLER listener on loopback, whose principal (User:ANONYMOUS) must be a super user for broker
    registration and heartbeats; that listener serves only the controller's APIs. SSL clients need a
    certificate (``ssl.client.auth=required`` on that listener): their principal is ``User:CN=test-client``.
    """
    from tests.certs import make_certificates

    tmp_dir = Path(tmp_dir)
    certs = make_certificates(tmp_dir / "certs")
    users = dict(users or SECURE_USERS)
    if "admin" not in users:
        raise ValueError("the secure shape needs an 'admin' user (its super user)")
    scram = [f"SCRAM-SHA-{bits}=[name={name},password={password}]"
             for name, password in users.items() for bits in (256, 512)]
    props: dict[str, PropertyValue] = {
        "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin;User:ANONYMOUS",
        "allow.everyone.if.no.acl.found": False,
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(certs.server),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(certs.ca),
        "ssl.client.auth": "none",
        "listener.name.ssl.ssl.client.auth": "required",
    }
    for listener in ("sasl_plaintext", "sasl_ssl"):
        for mechanism in ("scram-sha-256", "scram-sha-512"):
            key = f"listener.name.{listener}.{mechanism}.sasl.jaas.config"
            props[key] = _scram_jaas("admin", users["admin"])
    listeners = [_Listener(name, name) for name in SECURE_LISTENERS]
    return _build("secure", tmp_dir, version, node_roles=[(1, ("broker", "controller"))], listeners=listeners,
                  replicas=1, properties=properties, shape_properties=props, scram=scram, heap=heap,
                  users=users, certs=certs)


LOCAL_TIERED_STORAGE = "org.apache.kafka.server.log.remote.storage.LocalTieredStorage"


def native_tiered_properties(storage_dir: Path, replicas: int = 1,
                             listener: str = "PLAINTEXT") -> dict[str, PropertyValue]:
    """Broker properties that turn on Kafka's own tiered storage, LocalTieredStorage in ``storage_dir``."""
    return {
        "remote.log.storage.system.enable": True,
        "remote.log.storage.manager.class.name": LOCAL_TIERED_STORAGE,
        # RemoteStorageManager settings are the broker properties under this prefix, prefix removed;
        # LocalTieredStorage reads "dir" (it stores under <dir>/kafka-tiered-storage).
        "remote.log.storage.manager.impl.prefix": "rsm.config.",
        "rsm.config.dir": str(storage_dir),
        "remote.log.metadata.manager.listener.name": listener,
        "remote.log.metadata.manager.impl.prefix": "rlmm.config.",
        "rlmm.config.remote.log.metadata.topic.replication.factor": replicas,
        "rlmm.config.remote.log.metadata.topic.num.partitions": 5,
        "remote.log.manager.task.interval.ms": 1000,
    }


def start_native_tiered(tmp_dir: Path, version: str = DEFAULT_VERSION, properties: Properties | None = None,
                        heap: str = DEFAULT_HEAP) -> KafkaCluster:
    """One node with Kafka's own tiered storage: LocalTieredStorage (from the kafka-storage test jar)
    under ``<tmp_dir>/remote``, the topic-based remote log metadata manager, a 1 s task interval.
    Topics tier only with ``remote.storage.enable=true``."""
    tmp_dir = Path(tmp_dir)
    storage = tmp_dir / "remote"
    storage.mkdir(parents=True, exist_ok=True)
    return _build("native_tiered", tmp_dir, version, node_roles=[(1, ("broker", "controller"))],
                  listeners=_plain(), replicas=1, properties=properties,
                  shape_properties=native_tiered_properties(storage), scram=[], heap=heap,
                  remote_storage_dir=storage, compat=True)


SHAPES = {"single": start_single, "three": start_three, "secure": start_secure,
          "native_tiered": start_native_tiered}


def start_cluster(shape: str, tmp_dir: Path, version: str = DEFAULT_VERSION,
                  properties: Properties | None = None, **options: Any) -> KafkaCluster:
    """Start a shape by name ("single", "three", "secure", "native_tiered")."""
    try:
        start = SHAPES[shape]
    except KeyError:
        raise ValueError(f"unknown shape {shape!r}; choose one of {', '.join(SHAPES)}") from None
    return start(tmp_dir, version, properties, **options)


def create_acls(admin: Any, acls: list, timeout: float = 30.0) -> None:
    """Create ``acls`` with a kafka-python admin client and wait until the broker lists them all:
    they reach its authorizer through the controller's metadata a little after CreateAcls is
    answered, and a request in between is refused (seen under load)."""
    from kafka.admin import (
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        ResourcePatternFilter,
        ResourceType,
    )

    created = admin.create_acls(acls)
    assert not created["failed"], created
    every = ACLFilter(None, None, ACLOperation.ANY, ACLPermissionType.ANY,
                      ResourcePatternFilter(ResourceType.ANY, None, ACLResourcePatternType.ANY))

    def key(acl: Any) -> tuple:
        return (acl.principal, acl.operation, acl.permission_type, acl.resource_pattern)

    wanted = {key(acl) for acl in acls}
    deadline = time.monotonic() + timeout
    while True:
        listed, _error = admin.describe_acls(every)
        if wanted <= {key(acl) for acl in listed}:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"ACLs not in effect after {timeout:.0f} s: {sorted(map(str, wanted))[:5]}")
        time.sleep(0.2)
