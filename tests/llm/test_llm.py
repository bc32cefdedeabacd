"""`monitor.llm`: the layer every LLM caller shares. The calls themselves are exercised end to end
through the judges and the synthesizer against the local fake API (tests/judge, tests/golden);
here, what is the layer's own: that it stays plumbing, and the small rules callers build on."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import anthropic
import httpx
import pytest
from fake_llm import FakeAPI, Reply, error_body

from monitor.judge import llm_judge_config
from monitor.judge.anthropic_judge import AnthropicJudgeConfig
from monitor.judge.openai_judge import OpenAIJudgeConfig
from monitor.llm.chat import (
    DEFAULT_OPENAI_MODEL,
    ChatFailed,
    OpenAIClientConfig,
    chat_client,
    chat_payload,
    post_chat,
)
from monitor.llm.config import ClientConfig
from monitor.llm.messages import (
    DEFAULT_ANTHROPIC_MODEL,
    AnthropicClientConfig,
    error_outcome,
    messages_client,
)
from monitor.llm.outcome import JudgeOutcome
from monitor.llm.retry import is_retryable
from monitor.llm.usage import MESSAGE_OVERHEAD_TOKENS, REQUEST_OVERHEAD_TOKENS, Price, input_bound, usd_bound

LLM = Path(__file__).resolve().parents[2] / "monitor" / "llm"


def _imports(path: Path) -> set[str]:
    """Every module `path` imports, type-checking-only imports and function-local ones included."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_the_llm_layer_is_plumbing() -> None:
    """Any caller may use it only while it uses no caller: no stage, shared contract or config."""
    offending = {
        f"{p.name}: {m}"
        for p in sorted(LLM.glob("*.py"))
        for m in _imports(p)
        if (m == "monitor" or m.startswith("monitor.")) and not m.startswith("monitor.llm")
    }
    assert not offending
    assert len(list(LLM.glob("*.py"))) >= 9  # the scan saw the package


def test_retryable_statuses() -> None:
    assert all(is_retryable(s) for s in (408, 409, 429, 500, 503, 529))
    assert not any(is_retryable(s) for s in (400, 401, 402, 403, 404, 422))


def test_chat_payload_follows_the_settings() -> None:
    msgs = [{"role": "user", "content": "q"}]
    fmt = {"type": "json_object"}
    body = chat_payload(OpenAIClientConfig(max_tokens=300), msgs, fmt)
    assert body == {
        "model": DEFAULT_OPENAI_MODEL,
        "messages": msgs,
        "response_format": fmt,
        "max_tokens": 300,
        "temperature": 0.0,
    }
    newer = chat_payload(
        OpenAIClientConfig(model="gpt-4.1", max_tokens_field="max_completion_tokens", temperature=None),
        msgs,
        fmt,
    )
    assert newer["max_completion_tokens"] == 2048 and "max_tokens" not in newer and "temperature" not in newer


def test_request_bounds() -> None:
    """A request of n bytes is bounded by n tokens plus the API's wrapping; input is priced at the
    dearer of plain input and cache write, whichever the cache bills."""
    assert input_bound(1000) == 1000 + REQUEST_OVERHEAD_TOKENS + 2 * MESSAGE_OVERHEAD_TOKENS
    price = Price(input=1.0, output=5.0, cache_write=1.25)
    assert usd_bound(1_000_000, 100_000, price) == pytest.approx(1.25 + 0.5)
    assert usd_bound(1_000_000, 0, Price(input=3.0, output=15.0)) == pytest.approx(3.0)


async def test_post_chat_fails_classified_and_bounded(api: FakeAPI) -> None:
    """What any caller of the chat call gets for an account problem: a named outcome, at once (no
    retry), and the server's message cut short."""
    api.script(Reply(402, error_body("/v1/chat/completions", "insufficient_quota", "x" * 1000)))
    cfg = OpenAIClientConfig(base_url=f"{api.url}/v1", api_key=api.key, max_retries=2)
    async with chat_client(cfg, api.key) as client:
        with pytest.raises(ChatFailed) as failed:
            await post_chat(client, cfg, chat_payload(cfg, [{"role": "user", "content": "q"}], None))
    assert failed.value.outcome is JudgeOutcome.BILLING_ERROR and len(api.requests) == 1
    assert len(failed.value.detail) < 250


async def test_anthropic_error_outcome_names_the_status(api: FakeAPI) -> None:
    api.script(Reply(401, error_body("/v1/messages", "authentication_error", "invalid x-api-key")))
    cfg = AnthropicClientConfig(base_url=api.url, api_key=api.key, max_retries=0)
    _, client = messages_client(cfg)
    try:
        with pytest.raises(anthropic.APIStatusError) as raised:
            await client.messages.create(
                model=cfg.model, max_tokens=64, messages=[{"role": "user", "content": "q"}]
            )
    finally:
        await client.close()
    outcome, detail = error_outcome(raised.value, cfg)
    assert outcome is JudgeOutcome.AUTH_ERROR
    assert detail == "HTTP 401 authentication_error: invalid x-api-key"


def test_client_settings_reject_unknown_keys_and_resolve_the_key(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="max_chunks"):
        ClientConfig.model_validate({"model": "m", "max_chunks": 3})  # a judge's option, not a client's
    key = tmp_path / "key"
    key.write_text("sk-from-file\n")
    assert ClientConfig(model="m", api_key_file=key).resolve_api_key("NO_SUCH_VAR") == "sk-from-file"


def test_judge_settings_extend_the_clients() -> None:
    """The judges' settings are the client's plus the judge's own, with the client's defaults."""
    anth = llm_judge_config("anthropic", {"max_chunks": 3, "batch": {"enabled": True}})
    assert isinstance(anth, AnthropicJudgeConfig) and isinstance(anth, AnthropicClientConfig)
    assert anth.model == DEFAULT_ANTHROPIC_MODEL and anth.max_chunks == 3
    assert anth.max_concurrency == anth.batch.max_requests  # batch mode's default, as before
    oai = llm_judge_config("openai", {"query_types": ["lookup"], "temperature": 0.5})
    assert isinstance(oai, OpenAIJudgeConfig) and oai.model == DEFAULT_OPENAI_MODEL
    with pytest.raises(ValueError, match="tempreature"):
        llm_judge_config("openai", {"tempreature": 0.5})
    with pytest.raises(ValueError, match="expected anthropic or openai"):
        llm_judge_config("lexical", {})


def test_settings_round_trip_as_json() -> None:
    """A judge's settings survive `config show`'s JSON round trip (the key stays secret)."""
    cfg = OpenAIJudgeConfig(api_key="sk-abcdefgh12345", max_chunks=4)
    dumped = json.loads(cfg.model_dump_json())
    assert dumped["api_key"] == "**********" and dumped["max_chunks"] == 4
    assert httpx.URL(dumped["base_url"]).host == "api.openai.com"
