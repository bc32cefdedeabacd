"""`rag-monitor review`: label the review queue in the terminal. Wiring only: the session, the
labels file and the screen are `monitor.review`'s."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Annotated

import typer


def register(app: typer.Typer) -> None:
    app.command(name="review")(review_command)


def review_command(
    labels: Annotated[Path, typer.Option("--labels", help="JSONL the labels are appended to (resumed)")],
    queue: Annotated[
        Path | None, typer.Option("--queue", help="review queue file (JSONL of queue lines)")
    ] = None,
    topic: Annotated[
        str | None, typer.Option("--topic", help="review queue topic (e.g. rag_review), read from the start")
    ] = None,
    golden: Annotated[
        Path | None, typer.Option("--golden", help="golden file the g key adds the record to")
    ] = None,
    config: Annotated[Path | None, typer.Option("--config", help="YAML config (its kafka section)")] = None,
    bootstrap_servers: Annotated[str | None, typer.Option(help="Kafka bootstrap servers (--topic)")] = None,
) -> None:
    """Label queued records in the terminal, keys only: per claim of the judge supported /
    contradicted / not in context, answerable, refusal warranted, a note. Each saved record is a line
    of the labels file in the format `calibrate` reads; records already there are passed over, so a
    session can stop and resume. Exit 2 on bad arguments or an unreadable queue file."""
    from monitor.cli.settings import load_or_exit
    from monitor.plumbing.errors import plural
    from monitor.review.app import Feed, ReviewApp
    from monitor.review.labels import LabelsFile
    from monitor.review.queue import QueueRead, read_queue
    from monitor.review.session import ReviewSession

    if (queue is None) == (topic is None):
        typer.echo("error: give one of --queue FILE or --topic TOPIC", err=True)
        raise typer.Exit(2)
    feed: Feed | None = None
    if queue is not None:
        try:
            read = read_queue(queue)
        except OSError as exc:
            typer.echo(f"error: cannot read {queue}: {exc.strerror or exc}", err=True)
            raise typer.Exit(2) from None
        source = str(queue)
    elif topic is not None:
        from monitor.review.topic import topic_lines

        settings = load_or_exit(config, {"kafka": {"bootstrap_servers": bootstrap_servers}})
        read, source = QueueRead(), f"topic {topic}"
        feed = functools.partial(topic_lines, settings.kafka, topic)

    try:
        session = ReviewSession(read, LabelsFile(labels), golden=golden)
    except OSError as exc:
        typer.echo(f"error: cannot read {labels}: {exc.strerror or exc}", err=True)
        raise typer.Exit(2) from None
    ReviewApp(session, feed=feed, source=source).run()
    typer.echo(f"{session.labelled} of {session.total} queued records labelled in {labels}")
    if read.bad_total:
        why = ", ".join(f"{n} {reason}" for reason, n in sorted(read.bad.items()))
        typer.echo(f"{plural(read.bad_total, 'queue line')} passed over: {why}", err=True)
