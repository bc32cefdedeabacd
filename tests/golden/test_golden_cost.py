"""The cost estimate before a replay with an LLM judge: printed once the target has answered, a
refusal that sends the judge nothing (exit 2) unless it is within `--max-usd` or `--yes` is given,
and afterwards an estimate that bounds what was billed, within a stated factor.

The real example RAG service is the target; the judge is the real `anthropic` SDK against the
local Messages-API fake of test_judge_llm.py, which here bills like a tokenizer would: one token per
3 bytes sent (denser than English BPE, ≈ 4 bytes a token, so billing errs high) plus Anthropic's
tool-use system prompt, and answers with one claim per sentence of the answer, as a judge does.
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path
from typing import Any

import pytest
import typer
from fake_llm import FakeAPI, Reply, anthropic_message, chunk_ids_of
from typer.testing import CliRunner

from monitor.cli.golden import register

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "examples" / "golden.jsonl"
TOOL_PROMPT_TOKENS = 346  # what Anthropic adds for a forced tool (its published table)
# The USD estimate is within this factor of the bill on the example set (input ≈ 3×: bytes vs
# tokens; output: max_tokens 2,048 a row against a claim list of ~100 tokens).
STATED_FACTOR = 12


def _tokens(text: str) -> int:
    return -(-len(text.encode()) // 3)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(b.get("text", "") or json.dumps(b.get("input", b.get("content", ""))) for b in content)


def billing_judge(path: str, body: dict[str, Any]) -> Reply:
    """A judge answer with one supported claim per sentence, billed from what was sent."""
    user = _text(body["messages"][0]["content"])
    answer = html.unescape(re.search(r"<answer>(.*?)</answer>", user, re.S).group(1))  # type: ignore[union-attr]
    ids = chunk_ids_of(body)
    chunks = {
        html.unescape(i): html.unescape(t)
        for i, t in re.findall(r'<chunk id="([^"]*)">(.*?)</chunk>', user, re.S)
    }

    def claim(sentence: str) -> dict[str, Any]:
        """Supported, quoting the chunk it came from (the example service's answers are extractive)."""
        at = next((i for i, t in chunks.items() if sentence.lower() in t.lower()), None)
        evidence = [{"chunk_id": at, "quote": sentence}] if at else []
        return {
            "text": sentence[:1000],
            "verdict": "supported" if at else "not_in_context",
            "evidence": evidence,
        }

    refuses = "I don't know" in answer  # the example service's refusal
    claims = [] if refuses else [claim(s) for s in re.split(r"(?<=[.!?])\s+", answer.strip()) if s][:40]
    output = {
        "claims": claims,
        "answerable_from_context": bool(ids),
        "refuses": refuses,
        "hedges": False,
        "answer_relevance": 1 if refuses else 3,
        "context_relevance": [{"chunk_id": i, "relevance": 3} for i in chunks],
    }
    sent = _text(body["system"]) + "".join(_text(m["content"]) for m in body["messages"])
    message = anthropic_message(output)
    message["usage"] = {
        "input_tokens": _tokens(sent + json.dumps(body["tools"])) + TOOL_PROMPT_TOKENS,
        "output_tokens": _tokens(json.dumps(output)),
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }
    return Reply(body=message)


@pytest.fixture
def judge_api(api: FakeAPI) -> FakeAPI:
    api.default = billing_judge
    return api


def _replay(service: str, tmp_path: Path, api: FakeAPI, *args: str, **options: Any) -> Any:
    config = tmp_path / "replay.yaml"
    config.write_text(
        json.dumps(
            {"judge_options": {"base_url": api.url, "api_key": api.key, "timeout_seconds": 5, **options}}
        )
    )
    app = typer.Typer()
    register(app)
    command = ["replay", "--golden", str(GOLDEN), "--target", f"{service}/query", "--judge", "anthropic"]
    return CliRunner().invoke(app, [*command, "--config", str(config), *args])


def test_without_a_limit_the_estimate_is_printed_and_nothing_is_sent(
    service: str, judge_api: FakeAPI, tmp_path: Path
) -> None:
    report = tmp_path / "report.json"
    r = _replay(service, tmp_path, judge_api, "--report", str(report))
    assert r.exit_code == 2, r.output
    assert "judge cost estimate (anthropic claude-haiku-4-5" in r.output
    assert re.search(r"111 calls for 111 rows, ≤ [\d,]+ input \+ ≤ 227,328 output tokens, ≤ \$\d", r.output)
    assert "--max-usd" in r.output and "nothing sent to the judge" in r.output
    assert judge_api.requests == [] and not report.exists()

    over = _replay(service, tmp_path, judge_api, "--max-usd", "0.01")
    assert over.exit_code == 2 and "is over --max-usd 0.01" in over.output
    assert judge_api.requests == []

    unpriced = _replay(service, tmp_path, judge_api, "--max-usd", "100", model="claude-next-9")
    assert unpriced.exit_code == 2 and "no price for judge model 'claude-next-9'" in unpriced.output
    assert judge_api.requests == []


def test_within_the_limit_the_estimate_bounds_the_bill(
    service: str, judge_api: FakeAPI, tmp_path: Path
) -> None:
    report = tmp_path / "report.json"
    r = _replay(service, tmp_path, judge_api, "--max-usd", "5", "--report", str(report))
    assert r.exit_code == 0, r.output
    cost = json.loads(report.read_text())["judge_cost"]
    est, actual = cost["estimate"], cost["actual"]
    assert est["calls"] == actual["judgements"] == len(judge_api.requests) == 111  # no retry, no repair
    assert est["input_tokens"] >= actual["input_tokens"] > 0
    assert est["output_tokens"] >= actual["output_tokens"] > 0
    assert est["usd"] >= actual["usd"] > 0 and est["worst_case_usd"] >= est["usd"]
    assert est["usd"] <= STATED_FACTOR * actual["usd"], (est, actual)
    assert est["input_tokens"] <= 4 * actual["input_tokens"]  # bytes vs tokens
    assert "judge cost: estimate ≤ $" in r.output and "estimate/actual" in r.output


def test_yes_goes_ahead_whatever_the_estimate_and_the_lexical_judge_is_not_priced(
    service: str, judge_api: FakeAPI, tmp_path: Path
) -> None:
    r = _replay(service, tmp_path, judge_api, "--yes", model="claude-next-9")
    assert r.exit_code == 0, r.output
    assert "no price for this model" in r.output and len(judge_api.requests) == 111

    app = typer.Typer()
    register(app)
    lexical = CliRunner().invoke(app, ["replay", "--golden", str(GOLDEN), "--target", f"{service}/query"])
    assert lexical.exit_code == 0 and "judge cost" not in lexical.output
