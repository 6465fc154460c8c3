"""The ``tiered-proxy`` command line."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import tempfile
from pathlib import Path

import trio

from proxy.config import ConfigError, ProxyConfig, load_properties
from proxy.log_format import configure as configure_logging
from proxy.server import Proxy
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tiered-proxy",
        description="A Kafka-wire-compatible proxy that gives an unmodified Kafka cluster tiered storage.",
    )
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
    _add_common(serve)
    demo = sub.add_parser("demo", help="start an embedded broker and the proxy on loopback, and show how to use them")
    demo.add_argument("--listen", default="127.0.0.1:19092", metavar="HOST:PORT")
    demo.add_argument("--data-dir", type=Path, help="where the embedded broker keeps its data (default: a temp dir)")
    demo.add_argument("--broker", default="noida", choices=["noida", "tansu"], help="which embedded broker to start")
    demo.add_argument("--messages", type=int, default=10_000, help="sample messages to produce through the proxy")
    demo.add_argument("--exit-after", action="store_true", help="stop after the sample round trip instead of serving")
    _add_common(demo)
    describe = sub.add_parser("describe", help="show each partition's remote and local offsets, remote size, "
                                                "tiering lag and KIP-950 state, asked of a running proxy")
    describe.add_argument("--bootstrap-servers", required=True, metavar="HOST:PORT", help="the proxy")
    describe.add_argument("--topic", help="only this topic")
    describe.add_argument("--log-level", default="WARNING", help=argparse.SUPPRESS)
    segments = sub.add_parser("segments", help="list a topic's remote segments from the metadata store, with "
                                                "their states and KIP-917 custom metadata")
    segments.add_argument("--metadata", required=True, metavar="URI",
                          help="the proxy's store: file:///DATA_DIR/metadata or topic://__remote_log_metadata")
    segments.add_argument("--bootstrap-servers", metavar="HOST:PORT", help="for a topic:// store")
    segments.add_argument("--topic", help="only this topic")
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
    backfill.add_argument("--log-level", default="WARNING", help=argparse.SUPPRESS)
    return parser


def config_from_args(args: argparse.Namespace, extra: dict[str, str] | None = None) -> ProxyConfig:
    props: dict[str, str] = {}
    if args.config:
        props.update(load_properties(args.config))
    props.update(extra or {})
    if getattr(args, "bootstrap_servers", None):
        props["bootstrap.servers"] = args.bootstrap_servers
    if getattr(args, "listen", None):
        props["listeners"] = args.listen
    if getattr(args, "remote", None):
        props["remote.log.storage.uri"] = args.remote
    if getattr(args, "metadata", None):
        props["remote.log.metadata.uri"] = args.metadata
    if getattr(args, "data_dir", None) and args.command == "serve":
        props["proxy.data.dir"] = str(args.data_dir.resolve())
    if getattr(args, "tier_all_topics", False):
        props["proxy.tier.all.topics"] = "true"
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"--set expects KEY=VALUE, got {item!r}")
        props[key.strip()] = value.strip()
    return ProxyConfig.from_properties(props)


async def _serve_until_signal(proxy: Proxy) -> None:
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:
            await nursery.start(proxy.run)

            async def stop_on_signal() -> None:
                async for signum in signals:
                    log.info("received %s, shutting down", signal.Signals(signum).name)
                    nursery.cancel_scope.cancel()
                    return

            nursery.start_soon(stop_on_signal)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging(args.log_level, getattr(args, "log_format", "text"))
    try:
        if args.command == "serve":
            config = config_from_args(args)
            tiering = TieringService.from_properties(config.bootstrap, config.extra)
            trio.run(_serve_until_signal, Proxy(config, tiering))
            return 0
        if args.command == "describe":
            from proxy.describe import describe, format_rows
            from tiering.broker_client import BrokerClientError

            try:
                print(format_rows(describe(args.bootstrap_servers, args.topic)))
            except BrokerClientError as e:
                print(f"tiered-proxy: {e}", file=sys.stderr)
                return 1
            return 0
        if args.command == "segments":
            from proxy.segments import format_segments, load_segments

            print(format_segments(load_segments(args.metadata, args.bootstrap_servers), args.topic))
            return 0
        if args.command == "backfill":
            from tiering.spark_backfill import backfill, spark_session

            options = {"kafka.bootstrap.servers": args.bootstrap_servers, "subscribe": args.topic,
                       "remote.log.storage.uri": args.remote, "remote.log.metadata.uri": args.metadata,
                       "kafka.isolation.level": args.isolation_level, "includeHeaders": "true"}
            for item in args.option:
                key, sep, value = item.partition("=")
                if not sep:
                    raise ValueError(f"--option {item!r}: expected KEY=VALUE")
                options[key.strip()] = value.strip()
            spark = spark_session(args.master)
            try:
                backfill(spark, options, args.output, mode=args.mode)
            finally:
                spark.stop()
            return 0
        if args.command == "demo":
            from proxy.demo import run_demo

            data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="tiered-proxy-demo-"))
            return run_demo(args, data_dir)
    except (ConfigError, ValueError) as e:
        print(f"tiered-proxy: configuration error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"tiered-proxy: {e}", file=sys.stderr)
        return 1
    return 2


if __name__ == "__main__":
    sys.exit(main())
