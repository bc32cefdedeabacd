"""Each check of a judgement posted to Arize Phoenix as a span annotation on the judged root span
(`events.phoenix.url`), so Phoenix's trace view lists faithfulness, hallucination... beside the
spans, as its own evaluators' results are.

Phoenix's REST API (checked against arize-phoenix 20.26's /openapi.json): ``POST
/v1/span_annotations?sync=true`` with ``{"data": [{"span_id", "name", "annotator_kind": "LLM" |
"CODE" | "HUMAN", "result": {"label", "score", "explanation"}, "metadata", "identifier"}]}``;
200 when stored, 404 naming the span ids it does not have when any is unknown (then nothing of
the request is stored). Unsynced requests (the default) are queued inside Phoenix and retried there
for ten minutes, so their outcome is never known; synced ones are, and a 404 is expected here: the
service sends its traces to Phoenix on its own, and they may land after the judge is done. So the
annotations of unknown spans wait and are retried every `span_retry_seconds`, for at most
`span_wait_seconds`; the rest of their request is sent again at once. The ``identifier`` makes a
resend (or a re-judged record) an update, never a duplicate.

Never in the way: `emit` only appends to a bounded queue (items and bytes, `PendingBudget`);
one task sends batches; 429, 5xx and transport errors are retried with backoff `attempts` times,
any other refusal (401, 403, 422) fails the batch; given-up annotations are counted `failed`.
The token is a header only: never logged, never in an exception this module raises.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

import httpx

from monitor.contracts.model import Judgement, RagRecord
from monitor.outputs.config import PhoenixConfig, safe_url
from monitor.outputs.evaluation_events import (
    ATTR_EXPLANATION,
    ATTR_LABEL,
    ATTR_NAME,
    ATTR_SCORE,
    evaluation_events,
    judged_record,
)
from monitor.outputs.export_queue import PendingBudget, SinkStats
from monitor.outputs.otlp_export import id_problem

__all__ = ["IDENTIFIER", "PhoenixAnnotationSink", "span_annotations"]

log = logging.getLogger(__name__)

PATH = "/v1/span_annotations"
IDENTIFIER = "rag-monitor"
CODE_JUDGES = frozenset({"lexical"})  # judged by code, not by a model
_MAX_BACKOFF = 30.0
_HEX16 = re.compile(r"\b[0-9a-f]{16}\b")


def span_annotations(
    judgement: Judgement, span_id: str, *, replay: bool = False, text_limit: int | None = None
) -> list[dict[str, Any]]:
    """The annotation of each check of a successful judgement (the log events' mapping)."""
    context = judged_record(judgement, replay=replay)
    metadata = {"source": IDENTIFIER, **{k.removeprefix("rag."): v for k, v in context.items()}}
    out = []
    for check in evaluation_events(judgement, replay=replay, text_limit=text_limit):
        out.append(
            {
                "span_id": span_id.lower(),
                "name": check[ATTR_NAME],
                "annotator_kind": "CODE" if judgement.backend in CODE_JUDGES else "LLM",
                "result": {
                    "label": check[ATTR_LABEL],
                    "score": check[ATTR_SCORE],
                    "explanation": check[ATTR_EXPLANATION],
                },
                "metadata": metadata,
                "identifier": IDENTIFIER,
            }
        )
    return out


@dataclass(slots=True, eq=False)
class _Pending:
    body: dict[str, Any]
    size: int
    gave_up_at: float | None = None  # monotonic; set by the first 404 for its span
    due: float = 0.0  # monotonic: when a waiting annotation is tried again

    @property
    def span_id(self) -> str:
        return str(self.body["span_id"])


class PhoenixAnnotationSink:
    """Posts annotations to Phoenix from one task of the event loop it is started on."""

    sink = "phoenix"

    def __init__(self, config: PhoenixConfig, text_limit: int | None) -> None:
        if config.url is None:
            raise ValueError("PhoenixAnnotationSink needs events.phoenix.url")
        self._config = config
        self._text_limit = text_limit
        self.budget = PendingBudget(self.sink, config.max_queue_size, config.max_queue_bytes)
        self._ready: deque[_Pending] = deque()
        self._waiting: list[_Pending] = []  # for a span Phoenix does not have yet
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        token = config.bearer()
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._client = httpx.AsyncClient(
            base_url=config.url.rstrip("/"), headers=headers, timeout=config.timeout_seconds
        )
        self._shown = safe_url(config.url)
        log.info("phoenix annotations: posting to %s%s", self._shown, PATH)

    @classmethod
    def from_config(cls, config: PhoenixConfig, text_limit: int | None) -> PhoenixAnnotationSink | None:
        return None if config.url is None else cls(config, text_limit)

    def start(self) -> None:
        """Start the sending task on the running loop."""
        self._task = asyncio.create_task(self._run(), name="ragmon-phoenix-annotations")

    def emit(self, judgement: Judgement, record: RagRecord) -> None:
        """Queue the annotations of one judgement. Never blocks, never raises (from the loop)."""
        try:
            if not judgement.ok:
                return
            problem = id_problem(record, judgement)
            if problem is not None:
                self.budget.skipped()
                log.warning("phoenix annotations skipped: %s", problem)
                return
            for body in span_annotations(
                judgement, record.span_id, replay=record.replay, text_limit=self._text_limit
            ):
                size = len(repr(body))
                if self.budget.admit(size, log):
                    self._ready.append(_Pending(body, size))
            self._wake.set()
        except Exception as exc:  # a bug here must not cost a judge worker
            log.warning("phoenix annotations for trace %s not queued: %r", record.trace_id[:40], exc)

    def stats(self) -> SinkStats:
        return self.budget.stats()

    async def close(self, within: float = 5.0) -> bool:
        """Send what is queued (the waiting ones tried once more) within ~`within` seconds; what
        is left counts as failed. True if everything admitted was stored."""
        if not self.budget.close():
            return False
        for item in self._waiting:
            item.due = 0.0
        self._wake.set()
        if self._task is not None:
            # The task ends by itself once nothing is left to try (`_run`).
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(self._task, within)
        left = [*self._ready, *self._waiting]
        self._ready.clear()
        self._waiting.clear()
        self.budget.settle((i.size for i in left), ok=False)
        await self._client.aclose()
        s = self.stats()
        if left:
            log.warning(
                "phoenix annotations: %d stored, %d failed (%d not delivered by shutdown)",
                s.exported,
                s.failed,
                len(left),
            )
        return s.failed == 0 and s.exported == s.queued

    # -- the sending task -------------------------------------------------------------------

    def _due(self) -> list[_Pending]:
        now = time.monotonic()
        return [i for i in self._waiting if i.due <= now]

    async def _run(self) -> None:
        while True:
            due = self._due()
            if due:
                self._waiting = [i for i in self._waiting if i not in due]
                self._ready.extend(due)
            if not self._ready:
                if self.budget.closed and not due:
                    return  # closing, and every waiting annotation had its last try
                self._wake.clear()
                wait = min((i.due for i in self._waiting), default=None)
                timeout = None if wait is None else max(0.0, wait - time.monotonic())
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), timeout)
                continue
            batch = [self._ready.popleft() for _ in range(min(len(self._ready), self._config.batch_size))]
            try:
                await self._send(batch)
            except asyncio.CancelledError:
                self._ready.extendleft(reversed(batch))  # close() counts them
                raise
            except Exception as exc:  # a bug here must not stop the task
                log.warning("phoenix annotations: batch lost: %r", exc)
                self.budget.settle((i.size for i in batch), ok=False)

    async def _send(self, batch: list[_Pending]) -> None:
        delay = 0.5
        attempt = 0
        while batch:
            try:
                response = await self._client.post(
                    PATH, params={"sync": "true"}, json={"data": [i.body for i in batch]}
                )
                status = response.status_code
            except httpx.HTTPError as exc:
                status, reason = 0, type(exc).__name__
            else:
                reason = f"HTTP {status}"
            if status == 200:
                self.budget.settle((i.size for i in batch), ok=True)
                return
            if status == 404:
                batch = self._hold_unknown(batch, response.text)
                continue  # the rest, at once: nothing of the request was stored
            if status != 429 and status < 500 and status != 0:
                log.warning(
                    "phoenix annotations: %s refused a batch of %d (%s)", self._shown, len(batch), reason
                )
                self.budget.settle((i.size for i in batch), ok=False)
                return
            attempt += 1
            if attempt >= self._config.attempts:
                log.warning(
                    "phoenix annotations: %d dropped after %d tries (%s)", len(batch), attempt, reason
                )
                self.budget.settle((i.size for i in batch), ok=False)
                return
            await asyncio.sleep(delay)
            delay = min(delay * 2, _MAX_BACKOFF)

    def _hold_unknown(self, batch: list[_Pending], detail: str) -> list[_Pending]:
        """Put the annotations of the spans Phoenix said it lacks (all, if it named none of this
        batch's) back to wait; give up those past `span_wait_seconds`. The rest, to send again."""
        named = set(_HEX16.findall(detail[:100_000].lower())) & {i.span_id for i in batch}
        unknown = [i for i in batch if not named or i.span_id in named]
        now = time.monotonic()
        expired = []
        for item in unknown:
            if item.gave_up_at is None:
                item.gave_up_at = now + self._config.span_wait_seconds
            if now >= item.gave_up_at or self.budget.closed:  # closing: that was the last try
                expired.append(item)
            else:
                item.due = now + self._config.span_retry_seconds
                self._waiting.append(item)
        if expired:
            log.warning("phoenix annotations: %d for spans Phoenix never had, dropped", len(expired))
            self.budget.settle((i.size for i in expired), ok=False)
        return [i for i in batch if i not in unknown]
