"""Citation accuracy and the self-evaluation guard: markers parsed and resolved in code, each cited
chunk checked against the judge's per-claim supporting chunks (a fake Messages-API judge, the
lexical judge), the results line, the production counters through the real judge stage (embedded
Kafka), and the golden report of the example service answering with citations."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fake_llm import FakeAPI, Reply, anthropic, anthropic_message, shown
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console
from support import eventually, example_service, result_lines, running, settings_for

from monitor.contracts.metrics import Metrics
from monitor.contracts.model import Chunk, Claim, Judgement, RagRecord, Verdict
from monitor.demo.broker import EmbeddedBroker
from monitor.demo.workload import produce
from monitor.golden import load_golden, run_replay
from monitor.golden.render import render_report
from monitor.judge import LexicalJudge
from monitor.judge.citations import (
    CitationVerdict,
    check_citations,
    parse_citations,
    read_citations,
    resolve,
    without_citations,
)
from monitor.judge.model import SelfEvaluationGuard, is_self_judged, model_key
from monitor.outputs.http import MetricsServer

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "examples" / "golden.jsonl"

PARIS = "Paris is the capital and largest city of France."
FRANCE = "France is a country in Western Europe."
SEINE = "The Seine flows through Paris."
CHUNKS = [Chunk("doc-1", PARIS, 0.9), Chunk("wiki/doc-2", FRANCE, 0.8), Chunk("doc-3", SEINE, 0.5)]
IDS = [c.id for c in CHUNKS]


def refs(answer: str, ids: list[str] = IDS) -> list[tuple[str, int, bool]]:
    return list(parse_citations(answer, ids).refs)


# -- parsing ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "expected", "text"),
    [
        ("Paris is the capital [1].", [("1", 0, False)], "Paris is the capital."),
        (
            "Paris [2, 3]. Seine [1; 3].",
            [("2", 0, False), ("3", 0, False), ("1", 1, False), ("3", 1, False)],
            None,
        ),
        (
            "Paris [1][2] and [1 and 3].",
            [("1", 0, False), ("2", 0, False), ("1", 0, False), ("3", 0, False)],
            None,
        ),
        ("Paris [doc-1]. France [wiki/doc-2].", [("doc-1", 0, False), ("wiki/doc-2", 1, False)], None),
        (
            "Paris (source: doc-1). France (sources: 2, 3).",
            [("doc-1", 0, False), ("2", 1, False), ("3", 1, False)],
            None,
        ),
        (
            "Paris [^1]. France [source: 2]. Seine (chunk 3).",
            [("1", 0, False), ("2", 1, False), ("3", 2, False)],
            None,
        ),
        ("Ranked [1-3].", [("1-3", 0, False)], "Ranked."),
        # After the full stop: the sentence it follows, with or without a space.
        (
            "Paris is big.[1] France is old. [2] Seine.",
            [("1", 0, False), ("2", 1, False)],
            "Paris is big. France is old. Seine.",
        ),
        ("- Paris [1]\n- France [2]", [("1", 0, False), ("2", 1, False)], "- Paris\n- France"),
        ("Paris[1]is big.", [("1", 0, False)], "Paris is big."),
    ],
)
def test_citation_styles(answer: str, expected: list[tuple[str, int, bool]], text: str | None) -> None:
    parsed = parse_citations(answer, IDS)
    assert list(parsed.refs) == expected
    if text is not None:
        assert parsed.text == text


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ("Truncated [", [("[", 0, True)]),
        ("Truncated [1", [("[1", 0, True)]),
        ("France [2. Next sentence.", [("[2", 0, True)]),
        ("[", [("[", 0, True)]),
        ("", []),
        ("]", []),
        ("[]", []),
        ("[[1]]", [("1", 0, False)]),
    ],
)
def test_malformed_markers_are_counted_never_raise(
    answer: str, expected: list[tuple[str, int, bool]]
) -> None:
    assert refs(answer) == expected


@pytest.mark.parametrize(
    "answer",
    [
        "He wrote [sic] that.",
        "A [citation needed] claim.",
        "Read the [docs](https://example.org).",
        "The [ character and (see above) and (source: the 2019 census).",
        "Plain prose, no markers at all.",
    ],
)
def test_prose_in_brackets_is_not_a_citation(answer: str) -> None:
    parsed = parse_citations(answer, IDS)
    assert parsed.refs == () and parsed.text == answer.strip()


def test_references_resolve_by_rank_id_suffix_and_prefix() -> None:
    assert resolve("1", IDS) == ["doc-1"] and resolve("3", IDS) == ["doc-3"]
    assert resolve("0", IDS) == [] and resolve("99", IDS) == []  # beyond k: unresolved
    assert resolve("101", ["a", "101"]) == ["101"]  # beyond k, but an id
    assert resolve("doc-1", IDS) == ["doc-1"]  # exact
    assert resolve("doc-2", IDS) == ["wiki/doc-2"]  # unique suffix on a separator
    assert resolve("c-1", IDS) == []  # "doc-1" ends so, but not on a separator
    assert resolve("x", ["a/x", "b/x"]) == []  # ambiguous suffix
    assert resolve("source 2", IDS) == ["wiki/doc-2"] and resolve("chunk-3", IDS) == ["doc-3"]
    assert resolve("doc-x", IDS) == [] and resolve("chunk-9", IDS) == []
    assert resolve("1-2", IDS) == ["doc-1", "wiki/doc-2"] and resolve("1-9", IDS) == []


def test_markers_are_removed_for_the_judge_and_kept_in_the_record() -> None:
    rec = RagRecord("ab" * 16, "cd" * 8, "svc", "q?", "lookup", CHUNKS, "Paris is big [1]. It is old [2].")
    judged = without_citations(rec)
    assert judged.answer == "Paris is big. It is old." and rec.answer.endswith("[2].")
    plain = RagRecord("ab" * 16, "cd" * 8, "svc", "q?", "lookup", CHUNKS, "No markers.")
    assert without_citations(plain) is plain
    # read_citations: the same record, and the answer as parsed (for check_citations).
    same, parsed = read_citations(rec)
    assert same == judged and parsed == parse_citations(rec.answer, IDS)
    kept, none = read_citations(plain)
    assert kept is plain and none.refs == ()


# -- checking against the claims --------------------------------------------------------------------


def judgement(claims: list[Claim], *, ratings: list[tuple[str, int]] | None = None) -> Judgement:
    return Judgement.from_verdicts(
        claims,
        answerable_from_context=True,
        answer_relevance=3,
        chunk_relevance=ratings,
        trace_id="ab" * 16,
        query_type="lookup",
        service="svc",
        backend="test",
        model="m",
    )


def test_each_citation_checked_against_its_sentence_claims() -> None:
    answer = (
        "Paris is the capital of France [1]. "  # right chunk
        "France lies in Western Europe [1]. "  # wrong chunk: doc-2 supports it
        "The Seine has 90 bridges [3]. "  # nothing supports the claim
        "It is lovely [2] [doc-x] [99]."  # an uncertain claim; two unresolved references
    )
    claims = [
        Claim("Paris is the capital of France.", Verdict.SUPPORTED, chunk_ids=["doc-1"]),
        Claim("France is located in Western Europe.", Verdict.SUPPORTED, chunk_ids=["wiki/doc-2"]),
        Claim("The Seine has 90 bridges.", Verdict.NOT_IN_CONTEXT),
        Claim("It is lovely.", Verdict.UNCERTAIN),
    ]
    report = check_citations(CHUNKS, answer, judgement(claims))
    assert report is not None
    got = [(c.ref, c.chunk_id, c.sentence, c.verdict) for c in report.citations]
    assert got == [
        ("1", "doc-1", 0, CitationVerdict.SUPPORTED),
        ("1", "doc-1", 1, CitationVerdict.UNSUPPORTED),
        ("3", "doc-3", 2, CitationVerdict.UNSUPPORTED),
        ("2", "wiki/doc-2", 3, CitationVerdict.UNCHECKED),
        ("doc-x", None, 3, CitationVerdict.UNRESOLVED),
        ("99", None, 3, CitationVerdict.UNRESOLVED),
    ]
    assert report.counts() == {"supported": 1, "unsupported": 2, "unresolved": 2, "unchecked": 1}
    assert report.precision == pytest.approx(1 / 3)
    assert report.cited == (("doc-1",), ("doc-1",), ("doc-3",), ("wiki/doc-2",))


def test_paraphrased_and_split_claims_align_with_their_sentence() -> None:
    answer = "Paris, the largest city, is the capital of France [1][2]. The river is the Seine [3]."
    claims = [  # an LLM judge's atomic claims: one sentence gives two, paraphrased
        Claim("Paris is the largest city of France.", Verdict.SUPPORTED, chunk_ids=["doc-1"]),
        Claim("Paris is the French capital.", Verdict.SUPPORTED, chunk_ids=["doc-1"]),
        Claim("The Seine is the river of Paris.", Verdict.SUPPORTED, chunk_ids=["doc-3"]),
    ]
    report = check_citations(CHUNKS, answer, judgement(claims))
    assert report is not None
    verdicts = {(c.chunk_id, c.sentence): c.verdict for c in report.citations}
    assert verdicts == {
        ("doc-1", 0): CitationVerdict.SUPPORTED,
        ("wiki/doc-2", 0): CitationVerdict.UNSUPPORTED,  # over-cited: no claim rests on it
        ("doc-3", 1): CitationVerdict.SUPPORTED,
    }
    assert report.cited[0] == report.cited[1] == ("doc-1", "wiki/doc-2")


def test_a_parsed_answer_is_checked_as_the_answer_is() -> None:
    """`check_citations` takes the answer `read_citations` parsed as it takes the text; a claim
    that quotes a marker ("[2]", "(source: 1)") is aligned without it."""
    answer = "Paris, the largest city, is the capital of France [1][2]. The river is the Seine [3]."
    claims = [
        Claim("Paris is the largest city of France [2].", Verdict.SUPPORTED, chunk_ids=["doc-1"]),
        Claim("Paris (source: 1) is the French capital.", Verdict.SUPPORTED, chunk_ids=["doc-1"]),
        # Its marker read as words, it would share too few of them with its sentence.
        Claim("The river is the Seine (sources: 1, 3).", Verdict.SUPPORTED, chunk_ids=["doc-3"]),
    ]
    rec = RagRecord("ab" * 16, "cd" * 8, "svc", "q?", "lookup", CHUNKS, answer)
    _, parsed = read_citations(rec)
    report = check_citations(CHUNKS, parsed, judgement(claims))
    assert report is not None and report == check_citations(CHUNKS, answer, judgement(claims))
    assert report.cited == (("doc-1", "wiki/doc-2"), ("doc-1", "wiki/doc-2"), ("doc-3",))
    assert report.counts() == {"supported": 2, "unsupported": 1, "unresolved": 0, "unchecked": 0}


def test_a_chunk_the_judge_never_saw_is_unchecked() -> None:
    chunks = [*CHUNKS, Chunk("doc-4", None, 0.1)]  # content not captured
    claims = [Claim("Paris is the capital.", Verdict.SUPPORTED, chunk_ids=["doc-1"])]
    report = check_citations(chunks, "Paris is the capital [4].", judgement(claims))
    assert report is not None and report.counts()["unchecked"] == 1 and report.precision is None
    # An LLM judge rates every chunk it is shown: one it did not rate was cut (max_chunks).
    seen = judgement(claims, ratings=[("doc-1", 3), ("wiki/doc-2", 1)])
    report = check_citations(CHUNKS, "Paris is the capital [3].", seen)
    assert report is not None and [c.verdict for c in report.citations] == [CitationVerdict.UNCHECKED]


def test_no_citations_or_a_failed_judgement_give_none() -> None:
    claims = [Claim("Paris is the capital.", Verdict.SUPPORTED, chunk_ids=["doc-1"])]
    assert check_citations(CHUNKS, "Paris is the capital.", judgement(claims)) is None
    from monitor.llm.outcome import JudgeOutcome

    failed = Judgement.failed(
        JudgeOutcome.TIMEOUT, "t", trace_id="a", query_type="q", service="s", backend="b", model="m"
    )
    assert check_citations(CHUNKS, "Paris [1].", failed) is None


def test_results_line_fields() -> None:
    claims = [
        Claim("Paris is the capital of France.", Verdict.SUPPORTED, chunk_ids=["doc-1"]),
        Claim("It has 90 million inhabitants.", Verdict.NOT_IN_CONTEXT),
    ]
    j = judgement(claims)
    plain = json.loads(json.dumps(j.to_json_dict(), allow_nan=False))
    assert plain["citations"] is None and plain["self_judged"] is False
    assert all("cited" not in c for c in plain["claims"])

    j.citations = check_citations(CHUNKS, "Paris is the capital of France [1]. It has 90 million [1] [7].", j)
    line = json.loads(json.dumps(j.to_json_dict(), allow_nan=False))
    assert line["citations"] == {
        "count": 3,
        "supported": 1,
        "unsupported": 1,
        "unresolved": 1,
        "unchecked": 0,
        "precision": 0.5,
        "items": [
            {"ref": "1", "chunk_id": "doc-1", "sentence": 0, "verdict": "supported"},
            {"ref": "1", "chunk_id": "doc-1", "sentence": 1, "verdict": "unsupported"},
            {"ref": "7", "chunk_id": None, "sentence": 1, "verdict": "unresolved"},
        ],
    }
    assert [c["cited"] for c in line["claims"]] == [["doc-1"], ["doc-1"]]
    # Only unresolved citations: nothing checked, precision null (never NaN).
    j.citations = check_citations(CHUNKS, "Paris is the capital of France [9].", j)
    line = json.loads(json.dumps(j.to_json_dict(), allow_nan=False))
    assert line["citations"]["precision"] is None and line["citations"]["unresolved"] == 1


# -- the judges -------------------------------------------------------------------------------------


def record(answer: str, model: str | None = None) -> RagRecord:
    return RagRecord(uuid.uuid4().hex, "0" * 16, "svc", "What is Paris?", "lookup", CHUNKS, answer, model)


async def test_llm_judge_claims_with_chunk_ids_decide_each_citation(api: FakeAPI) -> None:
    """The judge (the real SDK against the fake Messages API) cites chunks by the ordinals it was
    shown; mapped back to real ids, they decide: a right citation, a wrong one, an unresolved one."""
    answer = "Paris is the capital of France [1]. France is in Western Europe [1]. Rivers [doc-x]."

    def reply(path: str, body: dict[str, Any]) -> Reply:
        seen_answer, chunks = shown(body)
        assert "[" not in seen_answer  # the judge reads the answer without its markers
        assert list(chunks) == ["1", "2", "3"]
        output = {
            "claims": [
                {
                    "text": "Paris is the capital of France.",
                    "verdict": "supported",
                    "quotes": [{"chunk": "1", "quote": "Paris is the capital and largest city of France"}],
                },
                {
                    "text": "France is in Western Europe.",
                    "verdict": "supported",
                    "quotes": [{"chunk": "2", "quote": "France is a country in Western Europe"}],
                },
            ],
            "answerable_from_context": True,
            "refuses": False,
            "hedges": False,
            "answer_relevance": 3,
            "context_relevance": [2 for _ in chunks],
        }
        return Reply(body=anthropic_message(output))

    api.default = reply
    judge = anthropic(api)
    try:
        rec = record(answer)
        j = await judge.judge(without_citations(rec))
    finally:
        await judge.aclose()
    assert j.ok and [c.chunk_ids for c in j.claims] == [["doc-1"], ["wiki/doc-2"]]
    report = check_citations(rec.chunks, rec.answer, j)
    assert report is not None
    assert [(c.chunk_id, c.verdict.value) for c in report.citations] == [
        ("doc-1", "supported"),
        ("doc-1", "unsupported"),
        (None, "unresolved"),
    ]
    assert report.precision == 0.5


def test_lexical_judge_on_an_answer_with_citations() -> None:
    """The lexical judge's claims are the answer's sentences (markers removed): "[2]" is not a
    number its claim must find, and each citation meets its sentence's verdict."""
    answer = f"{PARIS[:-1]} [1]. {FRANCE[:-1]} [1]. {SEINE} [3] The Seine flows through Rome [3]."
    rec = record(answer)
    j = LexicalJudge().judge_sync(without_citations(rec))
    assert [c.verdict for c in j.claims] == [
        Verdict.SUPPORTED,
        Verdict.SUPPORTED,
        Verdict.SUPPORTED,
        Verdict.NOT_IN_CONTEXT,
    ]
    assert j.faithfulness == 0.75
    report = check_citations(rec.chunks, rec.answer, j)
    assert report is not None
    assert [c.verdict.value for c in report.citations] == [
        "supported",
        "unsupported",
        "supported",
        "unsupported",
    ]
    assert report.precision == 0.5


# -- self-evaluation --------------------------------------------------------------------------------


def test_model_names_compare_normalised() -> None:
    assert (
        model_key("claude-haiku-4-5-20251001")
        == model_key("anthropic/claude-haiku-4-5")
        == "claude-haiku-4-5"
    )
    assert is_self_judged("claude-haiku-4-5-20251001", "anthropic", "anthropic/claude-haiku-4-5")
    assert is_self_judged("us.anthropic.claude-3-5-haiku-20241022-v1:0", "anthropic", "claude-3-5-haiku")
    assert is_self_judged("openai/gpt-4o-2024-08-06", "openai", "GPT-4o")
    assert is_self_judged("claude-haiku-4.5", "anthropic", "claude-haiku-4-5@20251001")
    assert not is_self_judged("gpt-4o-mini", "openai", "gpt-4o")
    assert not is_self_judged(None, "anthropic", "claude-haiku-4-5")
    assert not is_self_judged("", "anthropic", "claude-haiku-4-5")
    # The offline judge is no model, whatever names it carries.
    assert not is_self_judged("lexical-v2", "lexical", "lexical-v2")


def test_guard_warns_once_per_model_pair(caplog: pytest.LogCaptureFixture) -> None:
    guard = SelfEvaluationGuard()
    caplog.set_level(logging.WARNING, logger="monitor.judge.model")
    for _ in range(3):
        j = judgement([])
        j.backend, j.model = "anthropic", "claude-haiku-4-5"
        assert guard.check("claude-haiku-4-5-20251001", j) and j.self_judged
    other = judgement([])
    other.backend, other.model = "anthropic", "claude-haiku-4-5"
    assert not guard.check("gpt-4o", other) and not other.self_judged
    warnings = [r for r in caplog.records if "self-evaluation" in r.getMessage()]
    assert len(warnings) == 1 and "claude-haiku-4-5-20251001" in warnings[0].getMessage()


# -- the judge stage: results lines and /metrics ------------------------------------------------------


def _flat(answer: str, model: str) -> tuple[bytes, bytes]:
    trace = uuid.uuid4().hex
    doc = {
        "trace_id": trace,
        "service": "rag-cite",
        "query": "Tell me about Paris and France.",
        "query_type": "lookup",
        "chunks": [{"id": c.id, "content": c.content, "score": c.score} for c in CHUNKS],
        "answer": answer,
        "model": model,
    }
    return trace.encode(), json.dumps(doc).encode()


def _series(text: str, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name:
                out[tuple(sorted(s.labels.items()))] = s.value
    return out


async def test_stage_writes_citations_and_self_judged_and_counts_them(
    api: FakeAPI, broker: EmbeddedBroker, topic: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Through the real stages (embedded Kafka, flat JSON records, the fake Messages API as judge,
    model claude-haiku-4-5): answers written by the same model (dated id) are marked self_judged,
    counted, and warned about once; every citation is counted by verdict on /metrics."""
    caplog.set_level(logging.WARNING, logger="monitor.judge.model")
    bs = broker.bootstrap_servers
    results = tmp_path / "results.jsonl"
    options = {"api_key": api.key, "base_url": api.url, "max_retries": 0, "timeout_seconds": 5.0}
    settings = settings_for(bs, topic, results, judge={"backend": "anthropic", "options": options})
    cited = f"{PARIS[:-1]} [1]. {FRANCE[:-1]} [1] [7]."  # right, wrong (doc-2 supports it), unresolved
    messages = [_flat(cited, "claude-haiku-4-5-20251001") for _ in range(3)]
    messages += [_flat(PARIS, "gpt-4o") for _ in range(2)]  # no citations, another model
    async with running(settings) as sidecar:
        server = MetricsServer(sidecar.metrics.registry, "127.0.0.1", 0)
        url = f"http://127.0.0.1:{server.start()}"
        try:
            await produce(bs, topic, messages)
            await eventually(lambda: len(result_lines(results)) == 5, within=60, what="five results")
            async with httpx.AsyncClient() as client:
                text = (await client.get(f"{url}/metrics")).text
        finally:
            server.stop()
    lines = {r["trace_id"]: r for r in result_lines(results)}
    for key, _ in messages[:3]:
        line = lines[key.decode()]
        assert line["self_judged"] is True and line["judge"]["model"] == "claude-haiku-4-5"
        assert line["answer"] == cited  # as written; the judge read it without markers
        c = line["citations"]
        assert (c["count"], c["supported"], c["unsupported"], c["unresolved"]) == (3, 1, 1, 1)
        assert c["precision"] == 0.5 and [cl["cited"] for cl in line["claims"]] == [["doc-1"], ["doc-1"]]
    for key, _ in messages[3:]:
        line = lines[key.decode()]
        assert line["self_judged"] is False and line["citations"] is None
    labels = (("judge", "anthropic"), ("query_type", "lookup"), ("service", "rag-cite"))
    assert _series(text, "ragmon_citations_total") == {
        (*labels, ("verdict", verdict)): 3.0 for verdict in ("supported", "unresolved", "unsupported")
    }
    assert _series(text, "ragmon_judge_self_evaluations_total") == {
        (("judge", "anthropic"), ("service", "rag-cite")): 3.0
    }
    warned = [r for r in caplog.records if "self-evaluation" in r.getMessage()]
    assert len(warned) == 1, [r.getMessage() for r in warned]


def test_lexical_judge_is_never_self_judged_in_the_counters() -> None:
    metrics = Metrics()
    rec = record(f"{PARIS[:-1]} [1].", model="lexical-v2")
    j = LexicalJudge().judge_sync(without_citations(rec))
    assert not SelfEvaluationGuard().check("lexical-v2", j)
    j.citations = check_citations(rec.chunks, rec.answer, j)
    metrics.judge.observe_verdicts(j, "svc")
    reg = metrics.registry
    assert (
        reg.get_sample_value("ragmon_judge_self_evaluations_total", {"service": "svc", "judge": "lexical"})
        is None
    )
    labels = {"service": "svc", "query_type": "lookup", "judge": "lexical"}
    assert reg.get_sample_value("ragmon_citations_total", {**labels, "verdict": "supported"}) == 1.0


# -- golden replay ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def citing_service() -> Iterator[str]:
    """The example RAG service answering with citations (``--cite``)."""
    with example_service("--cite") as (url, _):
        yield url


async def test_golden_report_shows_citation_precision_per_query_type(citing_service: str) -> None:
    check = load_golden(GOLDEN)
    target = f"{citing_service}/query"
    report = await run_replay(check.rows, target, k=5)
    data = report.to_json_dict()
    for group, stats in data["metrics"].items():
        assert stats["cited_rows"] > 0, group
        assert stats["citation_precision"] is not None and stats["citation_precision"] >= 0.9, group
        iv = data["intervals"]["metrics"][group]["citation_precision"]
        assert iv is not None and iv[0] <= stats["citation_precision"] <= iv[1]
    cited = [r for r in data["rows"] if r["citations"]]
    assert cited and all(r["citations"]["count"] >= 1 and "[1]" in r["answer"] for r in cited)
    console = Console(record=True, width=220)
    render_report(report, console)
    assert "citation prec" in console.export_text()
    assert data["self_evaluation"] is None  # the answers name no model: nothing to compare

    # Every answer gets an invented sentence that cites chunk 1 too: precision drops.
    async with httpx.AsyncClient(timeout=5) as client:
        await client.post(f"{citing_service}/admin/degrade", json={"invent_rate": 1.0})
        try:
            worse = await run_replay(check.rows, target, k=5)
        finally:
            await client.post(f"{citing_service}/admin/degrade", json={"invent_rate": 0.0})
    assert worse.metrics["all"]["citation_precision"] < 0.8


async def test_golden_report_without_citations_shows_a_dash() -> None:
    from support import oracle_target  # noqa: F401  (the module the target names)

    check = load_golden(GOLDEN)
    report = await run_replay(check.rows[:12], "support:oracle_target", k=5)
    assert all(s["citation_precision"] is None and s["cited_rows"] == 0 for s in report.metrics.values())
    console = Console(record=True, width=220)
    render_report(report, console)
    overall = next(line for line in console.export_text().splitlines() if "overall" in line)
    assert overall.rstrip().rstrip("│").rstrip().endswith("–")  # the last column: citation prec


async def test_golden_report_notes_a_self_judging_run(api: FakeAPI, caplog: pytest.LogCaptureFixture) -> None:
    check = load_golden(GOLDEN)
    judge = anthropic(api)
    try:
        report = await run_replay(
            check.rows[:3],
            "support:oracle_target",
            k=5,
            judge=judge,
            generator_model="claude-haiku-4-5-20251001",
        )
    finally:
        await judge.aclose()
    assert report.self_evaluation == {
        "generator_model": "claude-haiku-4-5-20251001",
        "judge_model": "claude-haiku-4-5",
        "self_judged": True,
    }
    assert any("self-evaluation" in w for w in report.warnings)
    console = Console(record=True, width=220)
    render_report(report, console)
    assert "self-evaluation" in console.export_text()


def test_replay_cli_takes_the_generator_model(api: FakeAPI, tmp_path: Path) -> None:
    """`rag-monitor replay --generator-model`: the report says the judge graded its own model."""
    import typer
    from typer.testing import CliRunner

    from monitor.cli.golden import register

    app = typer.Typer()
    register(app)
    golden = tmp_path / "g.jsonl"
    golden.write_text("".join(line + "\n" for line in GOLDEN.read_text().splitlines()[:3]))
    config = tmp_path / "replay.yaml"
    config.write_text(
        f"judge_options: {{base_url: '{api.url}', api_key: '{api.key}', max_retries: 0}}\n"
        "gate: {floors: {}, slice_floor: {}}\n"
    )
    report = tmp_path / "report.json"
    out = CliRunner().invoke(
        app,
        ["replay", "--golden", str(golden), "--target", "support:oracle_target", "--judge", "anthropic",
         "--config", str(config), "--yes", "--report", str(report),
         "--generator-model", "anthropic/claude-haiku-4-5-20251001"],
    )  # fmt: skip
    assert out.exit_code == 0, out.output
    assert json.loads(report.read_text())["self_evaluation"]["self_judged"] is True
    assert "self-evaluation" in out.output
