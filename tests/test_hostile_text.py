"""Hostile text from traffic never reaches a person's screen, chat or log as anything but text
(issue 38 items 1 and 6): a corpus of strings a RAG service's user can send (a title change, an
OSC 52 clipboard write, a clear screen, a spoofed hyperlink, a C1 CSI, bidi overrides, Rich markup,
Slack's `<!channel>` and disguised links, a Markdown link, an HTML `<img onerror>`), sent through
each sink: the review UI's screen (textual's pilot), `golden add`'s and `compare`'s output, the
webhook body a real local receiver gets, the annotations a real Alertmanager holds, and a log line
of a process set up as `rag-monitor run` sets up its logging; and the text a tracing UI gets
(`events.include_text`)."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import httpx
import pytest
import typer
from prometheus_client import CollectorRegistry
from support import REPO, Webhook, eventually
from typer.testing import CliRunner

from monitor.cli.compare import register as register_compare
from monitor.cli.golden import register as register_golden
from monitor.contracts.metrics import Metrics
from monitor.contracts.model import Chunk, RagRecord
from monitor.contracts.results import ReviewLine, encode_result, result_line
from monitor.judge.lexical import LexicalJudge
from monitor.outputs.alerts import AlertDispatcher, Attribution, Example, Suspect
from monitor.outputs.config import AlertSinksConfig
from monitor.plumbing.safe_text import chat_text, log_text, terminal_line, terminal_text, trace_text

TITLE = "\x1b]0;pwned\x07"
CLIPBOARD = "\x1b]52;c;cm0gLXJmIH4K\x07"
CLEAR = "\x1b[2J\x1b[H"
HYPERLINK = "\x1b]8;;https://evil.example/\x1b\\docs\x1b]8;;\x1b\\"
C1 = "\x9b31m"
BIDI = "\u202etxt.exe\u202c \u2066x\u2069"
HIDDEN = "a\u200bb\ufeffc\U000e0041"
TERMINAL = [TITLE, CLIPBOARD, CLEAR, HYPERLINK, C1, BIDI, HIDDEN]
RICH = "[bold red]markup[/]"
SLACK = "<!channel> <https://evil.example/rb|Runbook: run rollback.sh>"
MARKDOWN = "[docs](https://evil.example/docs)"
HTML = '<img src=x onerror="alert(1)">'
CHAT = [SLACK, MARKDOWN, HTML, "@here look"]
HOSTILE = " ".join([*TERMINAL, RICH, *CHAT])

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
# What must never reach a terminal raw: C0 but newline and tab, DEL, C1, bidi controls, invisible ones.
_RAW = {chr(c) for c in [*range(0x20), *range(0x7F, 0xA0)]} - {"\n", "\t"}
_RAW |= set("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200b\ufeff\U000e0041")


def raw_controls(shown: str) -> set[str]:
    return {c for c in shown if c in _RAW}


_MD_LINK = re.compile(r"(?<!\\)\[[^\]]*(?<!\\)\]\(")


def chat_markup(text: str, own_link: str = "") -> list[str]:
    """The markup a Slack, Markdown or HTML renderer would act on, found in `text` (less the link
    to the trace this process adds itself)."""
    text = text.replace(f"<{own_link}>", "") if own_link else text
    found = [m for m in ("<!", "<http", "<img", "@here") if m in text]
    return found + _MD_LINK.findall(text)


# -- the rule, per sink ----------------------------------------------------------------------------


@pytest.mark.parametrize("hostile", [*TERMINAL, RICH])
def test_the_terminal_rule_escapes_visibly_and_keeps_the_layout(hostile: str) -> None:
    text = f"line one {hostile}\n\tline two"
    shown = terminal_text(text)
    assert not raw_controls(shown)
    assert shown.startswith("line one ") and shown.endswith("\n\tline two")  # the layout kept
    assert "\n" not in terminal_line(text) and "\t" not in terminal_line(text)
    assert terminal_text("Tromsø 東京 👩\u200d💻") == "Tromsø 東京 👩\u200d💻"  # text stays text


def test_the_terminal_rule_shows_what_was_there() -> None:
    assert terminal_line(TITLE) == "\\x1b]0;pwned\\x07"
    assert terminal_line(C1) == "\\x9b31m"
    assert terminal_line(BIDI) == "\\u202etxt.exe\\u202c \\u2066x\\u2069"
    assert terminal_line("a\nb") == "a\\nb"
    # in pieces as whole: the review UI escapes a chunk around its quotes
    assert terminal_text(HOSTILE[:17]) + terminal_text(HOSTILE[17:]) == terminal_text(HOSTILE)


@pytest.mark.parametrize("hostile", [*TERMINAL, *CHAT])
def test_the_chat_rule_leaves_no_markup_and_no_control(hostile: str) -> None:
    shown = chat_text(f"claim: {hostile}\nnext line")
    assert not raw_controls(shown) and "\n" not in shown
    assert not chat_markup(shown)


def test_the_chat_rule_keeps_the_words_readable() -> None:
    assert chat_text(SLACK) == "&lt;!channel&gt; &lt;https://evil.example/rb|Runbook: run rollback.sh&gt;"
    assert chat_text(MARKDOWN) == "\\[docs\\](https://evil.example/docs)"
    assert chat_text("R&D <b>") == "R&amp;D &lt;b&gt;"
    assert chat_text("x" * 300, 10) == "x" * 9 + "…"


def test_the_log_rule_is_one_line_with_controls_escaped() -> None:
    shown = log_text(f"{HOSTILE}\nforged 2025-01-01 ERROR monitor: fake")
    assert not raw_controls(shown) and "\n" not in shown
    assert "\\nforged" in shown


@pytest.mark.parametrize("hostile", [*TERMINAL, *CHAT, RICH])
def test_the_trace_rule_is_one_plain_line(hostile: str) -> None:
    """What a tracing UI gets with events.include_text (a span attribute, a Phoenix annotation)."""
    shown = trace_text(f"claim: {hostile}\nnext line", 60)
    assert not raw_controls(shown) and "\n" not in shown and len(shown) <= 60
    assert not [m for m in chat_markup(shown) if m != "@here"]  # no tag, no Markdown link
    assert shown.startswith("claim: ") and shown.endswith("next line")


def test_the_trace_rule_keeps_the_words() -> None:
    assert trace_text(MARKDOWN, 100) == "docs"
    assert trace_text(f"refunds {HTML}within <b>30</b> days", 100) == "refunds within 30 days"
    assert trace_text("x" * 300, 10) == "x" * 9 + "…"


# -- the review UI ---------------------------------------------------------------------------------


async def test_the_review_screen_shows_hostile_text_escaped(tmp_path: Path) -> None:
    sys.path.insert(0, str(REPO / "tests" / "review"))
    from review_cases import SIZE, screen

    from monitor.review.app import ReviewApp
    from monitor.review.labels import LabelsFile
    from monitor.review.queue import read_queue
    from monitor.review.session import ReviewSession

    record = RagRecord(
        trace_id=TRACE, span_id="00f067aa0ba902b7", service="svc", query=f"Q {TITLE}{CLEAR} {RICH}",
        query_type="lookup", answer=f"The office opened {BIDI} {CLIPBOARD}.",
        chunks=[Chunk(f"c1{C1}", f"The office opened {HYPERLINK} {HIDDEN} {RICH}.", 0.5)],
    )  # fmt: skip
    line = result_line(
        record, sampling_weight=1.0, query_type_source="span", judgement=await LexicalJudge().judge(record)
    )
    fields: dict[str, Any] = {**line.model_dump(exclude_unset=True), "review": {"reasons": ["boundary"]}}
    fields["trace_id"] = TRACE + TITLE  # any queue writer may write a trace id
    fields["session_id"] = f"s{CLEAR}"
    queue = tmp_path / "queue.jsonl"
    queue.write_bytes(encode_result(ReviewLine.model_validate(fields)))
    session = ReviewSession(read_queue(queue), LabelsFile(tmp_path / "labels.jsonl"))
    async with ReviewApp(session, source=str(queue)).run_test(size=SIZE) as pilot:
        shown = await screen(pilot)
        assert not raw_controls(shown), shown
        assert "\\x1b]0;pwned\\x07" in shown  # the reviewer sees that a sequence was there
        assert "\\u202etxt.exe\\u202c" in shown
        assert "c1\\x9b31m" in shown  # the chunk id
        assert f"trace {TRACE}\\x1b]0;pwned" in shown
        assert RICH in shown  # Rich markup is text, not style
        await pilot.press("x")  # the status line quotes nothing raw either
        assert not raw_controls(await screen(pilot))


# -- CLI printers ----------------------------------------------------------------------------------


def _cli(register: Any) -> typer.Typer:
    app = typer.Typer()
    register(app)
    app.command("noop", hidden=True)(lambda: None)  # a group, so that the command keeps its name
    return app


def _results(path: Path, records: list[RagRecord], release: str = "") -> Path:
    judge = LexicalJudge()

    async def lines() -> bytes:
        out = b""
        for r in records:
            line = result_line(
                r, sampling_weight=1.0, query_type_source="span", judgement=await judge.judge(r)
            )
            out += (
                encode_result(line.model_copy(update={"release": release}))
                if release
                else encode_result(line)
            )
        return out

    path.write_bytes(asyncio.run(lines()))
    return path


def test_golden_add_prints_hostile_chunk_ids_escaped(tmp_path: Path) -> None:
    record = RagRecord(
        trace_id=TRACE, span_id="00f067aa0ba902b7", service="svc", query="When did it open?",
        query_type="lookup", answer="It opened in 1999.",
        chunks=[Chunk(f"c{TITLE}", "It opened in 1999.", 0.9)],
    )  # fmt: skip
    results = _results(tmp_path / "results.jsonl", [record])
    golden = tmp_path / "golden.jsonl"
    done = CliRunner().invoke(
        _cli(register_golden),
        ["golden", "add", "--results", str(results), "--trace-id", TRACE, "--golden", str(golden),
         "--relevant-chunk", f"c{TITLE}", "--relevant-chunk", f"gone{CLIPBOARD}{BIDI}"],
    )  # fmt: skip
    assert done.exit_code == 0, done.output
    printed = done.stdout + done.stderr
    assert not raw_controls(printed), printed
    assert "chunk gone\\x1b]52;c;" in printed  # the note on the chunk not retrieved, escaped
    row = json.loads(golden.read_text())
    assert row["relevant_chunk_ids"][0] == f"c{TITLE}"  # the file keeps the data as it came


def test_compare_prints_hostile_release_names_escaped(tmp_path: Path) -> None:
    records = [
        RagRecord(
            trace_id=f"{i:032x}",
            span_id="00f067aa0ba902b7",
            service="svc",
            query=f"q{i}",
            query_type="lookup",
            answer="It opened in 1999.",
            chunks=[Chunk("c", "It opened in 1999.", 0.9)],
        )
        for i in range(1, 4)
    ]
    results = _results(tmp_path / "results.jsonl", records, release=f"v1{TITLE}{CLEAR}{BIDI}")
    done = CliRunner().invoke(_cli(register_compare), ["compare", "--results", str(results)])
    assert done.exit_code == 0, done.output
    assert not raw_controls(done.stdout), done.stdout
    assert "v1\\x1b]0;pwned\\x07\\x1b[2J" in done.stdout


# -- alerts: the webhook and Alertmanager ----------------------------------------------------------


async def test_alert_text_reaches_chat_as_text(alertmanager: str, webhook: Webhook) -> None:
    metrics = Metrics(CollectorRegistry())
    config = AlertSinksConfig(
        alertmanager_url=alertmanager, webhook_url=webhook.url, resend_seconds=0.5,
        trace_url_template="https://tempo.example/trace/{trace_id}",
    )  # fmt: skip
    dispatcher = AlertDispatcher(config, metrics.alerts_sent)
    example = Example.of(TRACE, f"claim: {SLACK} {MARKDOWN} {HTML} @here {TITLE}{C1}{BIDI}")
    assert example is not None
    suspect = Suspect("release", f"v2 {SLACK} {MARKDOWN}", 9, 10, 9, 20, 0, 50)
    attribution = Attribution.of(1764600000.0, 10, 50, [suspect])
    labels = {"alertname": "RagmonDriftDetected", "query_type": "lookup", "metric": "faithfulness"}
    task = asyncio.create_task(dispatcher.run())
    try:
        dispatcher.fire(("drift", "lookup", "faithfulness"), labels, {"summary": "s"}, [example], attribution)
        await eventually(lambda: len(webhook.bodies) == 1, within=15, what="webhook body")

        def held() -> list[dict[str, Any]]:
            got: list[dict[str, Any]] = httpx.get(f"{alertmanager}/api/v2/alerts", timeout=5).json()
            return got

        await eventually(lambda: len(held()) == 1, within=15, what="alert in Alertmanager")
        annotations = held()[0]["annotations"]
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    body = webhook.bodies[0]
    texts = {
        **{f"webhook {k}": v for k, v in body["annotations"].items()},
        **{f"alertmanager {k}": v for k, v in annotations.items()},
        "webhook examples reason": body["examples"][0]["reason"],
        "webhook suspect value": body["attribution"]["suspects"][0]["value"],
    }
    for where, text in texts.items():
        assert not raw_controls(text), where
        assert not chat_markup(text, f"https://tempo.example/trace/{TRACE}"), (where, text)
    for where in ("webhook", "alertmanager"):
        assert "&lt;!channel&gt;" in texts[f"{where} example_traces"]
        assert "&lt;img src=x" in texts[f"{where} example_traces"]
        assert texts[f"{where} suspect_release"].startswith(
            "v2 &lt;!channel&gt; &lt;https://evil.example/rb|"
        )
        # the link this process adds itself stays a link
        assert texts[f"{where} example_traces"].endswith(f"<https://tempo.example/trace/{TRACE}>")


# -- logs ------------------------------------------------------------------------------------------

_LOG_CHILD = textwrap.dedent(
    """
    import logging, sys
    from monitor.cli import _setup_logging
    _setup_logging("INFO")
    logging.getLogger("monitor.judge").warning("judge failed on trace %s: %s", "abc", sys.argv[1])
    logging.getLogger("monitor.judge").warning("the next line")
    """
)


def test_a_log_line_with_hostile_text_stays_one_line_without_controls() -> None:
    forged = f"{HOSTILE}\n2025-01-01 00:00:00,000 ERROR monitor.app.sidecar: forged line"
    done = subprocess.run(
        [sys.executable, "-c", _LOG_CHILD, forged], capture_output=True, text=True, cwd=REPO, timeout=60,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 2, lines
    assert not raw_controls(done.stderr)
    assert "\\x1b]0;pwned\\x07" in lines[0] and "\\n2025-01-01" in lines[0]
    assert lines[1].endswith("the next line")
