"""``python -m examples.rag_service --port P --kafka BOOTSTRAP --topic T``: serve the example with uvicorn.

Spans go to Kafka directly (``--kafka``), to a Collector over OTLP/HTTP (``--otlp URL``), or
nowhere (neither). SIGTERM/Ctrl-C stops uvicorn gracefully, then the spans still queued are flushed.
"""

from __future__ import annotations

import argparse
import logging
import signal
from types import FrameType

import uvicorn

from examples.rag_service.app import Degrade, ServiceConfig, create_app
from monitor.instrument import configure
from monitor.plumbing.replay_mark import load_secret, secret_from_env


def _exit_cleanly(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(0)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m examples.rag_service", description=__doc__)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--kafka", metavar="BOOTSTRAP", help="export spans straight to this Kafka")
    p.add_argument("--topic", default="otlp_spans", help="Kafka topic (default: otlp_spans)")
    p.add_argument(
        "--otlp", metavar="URL", help="OTLP/HTTP traces endpoint, e.g. http://collector:4318/v1/traces"
    )
    p.add_argument("--service-name", default="rag-example")
    p.add_argument("--service-version", help="the release, as resource attribute service.version")
    p.add_argument("--k", type=int, default=4, help="chunks per request when the request gives none")
    p.add_argument("--refuse-below", type=float, default=5.0, help="BM25 top score under which it refuses")
    p.add_argument("--drop-best-rate", type=float, default=0.0)
    p.add_argument("--shuffle-rate", type=float, default=0.0)
    p.add_argument("--invent-rate", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cite", action="store_true", help="answers cite their source chunk by rank: [1]")
    p.add_argument(
        "--replay-secret-file",
        metavar="FILE",
        help="shared secret verifying X-RAG-Replay marks (default: $RAGMON_REPLAY_SECRET_FILE or "
        "$RAGMON_REPLAY_SECRET; none: every request counts as production)",
    )
    p.add_argument("--flush-interval-ms", type=float, default=500, help="span batch delay")
    p.add_argument("--log-level", default="warning")
    args = p.parse_args(argv)
    if args.kafka and args.otlp:
        p.error("--kafka and --otlp are exclusive")

    logging.basicConfig(level=args.log_level.upper())
    try:
        replay_secret = load_secret(args.replay_secret_file, None, "replay secret") or secret_from_env()
    except ValueError as exc:
        p.error(str(exc))
    config = ServiceConfig(
        k=args.k,
        refuse_below=args.refuse_below,
        seed=args.seed,
        cite=args.cite,
        degrade=Degrade(args.drop_best_rate, args.shuffle_rate, args.invent_rate),
    )
    inst = configure(
        args.service_name,
        exporter="kafka" if args.kafka else "otlp",
        enabled=bool(args.kafka or args.otlp),  # no destination: decorators stay pass-through
        kafka_bootstrap_servers=args.kafka,
        kafka_topic=args.topic,
        otlp_endpoint=args.otlp,
        set_global=True,
        schedule_delay_millis=args.flush_interval_ms,
        resource_attributes={"service.version": args.service_version} if args.service_version else None,
    )
    # uvicorn re-raises SIGTERM/SIGINT after its graceful shutdown, with the handlers found at start:
    # make those exceptions, so the flush below still runs and SIGTERM exits 0.
    signal.signal(signal.SIGTERM, _exit_cleanly)
    try:
        uvicorn.run(
            create_app(config, replay_secret=replay_secret),
            host=args.host,
            port=args.port,
            log_level=args.log_level,
        )
    except KeyboardInterrupt:
        pass
    finally:
        inst.force_flush(10_000)
        inst.shutdown()
        logging.getLogger(__name__).info("spans: %s", inst.stats.snapshot())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
