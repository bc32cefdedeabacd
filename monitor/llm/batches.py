"""Anthropic Message Batches, the client side: concurrent requests sent together, at half price.

With ``judge.options.batch.enabled`` the Anthropic judge does not call the Messages API once per
record. Each `judge(record)` call hands its request to a `Batcher` and waits on a future; the
batcher collects what arrives within `max_wait_seconds` of the first request (at most
`max_requests`), sends it as one Message Batch (``client.messages.batches.create``), polls
``retrieve`` every `poll_seconds` until ``processing_status == "ended"``, then reads the results
(JSONL, one line per request, in any order) and resolves each caller's future with its own result
by ``custom_id``. Collecting the next batch goes on while earlier ones are processed, so several
batches can be in flight; the judge's `max_concurrency` bounds the requests in flight across all
of them (a judgement holds its slot from submission to result).

Nothing here blocks the event loop: waiting is ``asyncio.sleep`` and the SDK's async client. The
batcher's tasks run in a fresh context, so the SDK's request hook (the judge's `count_request`) does not
count the shared create / poll / results requests against whichever judgement started them; the
judge counts one request per batch entry it submits instead.

What a result means to the judge (`AnthropicJudge._send_batched`):

- ``succeeded``: a Message, handled exactly as a direct call's (usage billed at batch prices);
- ``errored``: the error type maps to the outcome a direct call's HTTP status would give
  (`ERROR_OUTCOMES`); overloaded / rate-limit / api / timeout errors are resubmitted in a later
  batch up to `max_retries` times (the SDK's retry budget of a direct call), others fail at once;
- ``expired`` (not processed within the API's 24 hours): outcome ``timeout``;
- ``canceled`` (an operator, or `aclose`, canceled the batch): outcome ``connection_error``, so
  the stage's breaker and retry treat it as the judge being unavailable, not the record as bad.

Errored, expired and canceled requests are not billed by the API, and carry no usage here.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import itertools
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anthropic
from pydantic import BaseModel, ConfigDict, Field

from monitor.llm.outcome import JudgeOutcome
from monitor.llm.retry import is_retryable
from monitor.llm.usage import Price

if TYPE_CHECKING:
    from anthropic.resources.messages.batches import AsyncBatches
    from anthropic.types.message_create_params import MessageCreateParamsNonStreaming
    from anthropic.types.messages import MessageBatch, MessageBatchResult

__all__ = [
    "BATCH_DEADLINE_SECONDS",
    "BATCH_PRICE_FACTOR",
    "ERROR_OUTCOMES",
    "RETRYABLE",
    "BatchOptions",
    "BatchStats",
    "Batcher",
    "MissingResult",
    "batch_price",
    "error_detail",
]

log = logging.getLogger(__name__)

# The Message Batches API bills input and output (cache reads and writes included) at half the
# standard price.
BATCH_PRICE_FACTOR = 0.5
# A batch is processed within 24 hours or its unprocessed requests expire; one more hour for a
# repair sent in a later batch. The default judgement deadline in batch mode.
BATCH_DEADLINE_SECONDS = 25 * 3600.0

# An errored entry's error type -> the outcome a direct call failing that way would have.
ERROR_OUTCOMES: dict[str, JudgeOutcome] = {
    "rate_limit_error": JudgeOutcome.RATE_LIMITED,
    "overloaded_error": JudgeOutcome.OVERLOADED,
    "api_error": JudgeOutcome.SERVER_ERROR,
    "timeout_error": JudgeOutcome.TIMEOUT,
}
# Outcomes whose entries are resubmitted (the SDK retries the same statuses of a direct call).
RETRYABLE = frozenset(ERROR_OUTCOMES.values())


class BatchOptions(BaseModel):
    """``judge.options.batch`` of the Anthropic judge."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = False
    # The API takes up to 100,000 requests (256 MB) a batch.
    max_requests: int = Field(default=256, ge=1, le=100_000)
    # How long the first request of a batch waits for others before the batch is sent.
    max_wait_seconds: float = Field(default=30.0, ge=0)
    poll_seconds: float = Field(default=30.0, gt=0)


def batch_price(price: Price | None) -> Price | None:
    """`price` as the Message Batches API bills it."""
    if price is None:
        return None
    f = BATCH_PRICE_FACTOR
    return Price(
        input=price.input * f,
        output=price.output * f,
        cache_read=price.cache_read * f,
        cache_write=price.cache_write * f,
    )


class MissingResult(Exception):
    """A batch ended without a result line for one of its requests."""


@dataclass(slots=True)
class BatchStats:
    """Counts since start, for logs and tests (entries: requests submitted in batches)."""

    batches: int = 0
    entries: int = 0
    succeeded: int = 0
    errored: int = 0
    expired: int = 0
    canceled: int = 0
    ended_batches: int = 0  # results read
    failed_batches: int = 0  # create or results failed: every entry got the error
    canceled_batches: int = 0  # canceled by us: every caller had given up
    max_in_flight: int = 0  # entries submitted and not yet resolved, at most


@dataclass(slots=True)
class _Entry:
    custom_id: str
    params: MessageCreateParamsNonStreaming
    future: asyncio.Future[MessageBatchResult] = field(repr=False)


class Batcher:
    """Collects requests into Message Batches; see the module docstring."""

    def __init__(self, batches: AsyncBatches, options: BatchOptions) -> None:
        self._batches = batches
        self.options = options
        self.stats = BatchStats()
        self._queue: asyncio.Queue[_Entry] = asyncio.Queue()
        self._collector: asyncio.Task[None] | None = None
        self._running: set[asyncio.Task[None]] = set()
        self._open: set[str] = set()  # ids of batches sent and not yet ended
        self._ids = itertools.count(1)
        self._in_flight = 0

    async def send(self, params: MessageCreateParamsNonStreaming) -> MessageBatchResult:
        """The result of `params` processed in a batch. Raises what the SDK raises when the batch
        cannot be created or its results read, and `MissingResult`. Cancelling the caller drops
        its request (from the batch to come, or its result when the batch ends)."""
        if self._collector is None or self._collector.done():
            # A fresh context: the SDK's request hook must not count the batch's shared requests
            # against the judgement that happened to start the collector (see `count_request`).
            self._collector = asyncio.create_task(
                self._collect(), name="ragmon-judge-batcher", context=contextvars.Context()
            )
        future: asyncio.Future[MessageBatchResult] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait(_Entry(f"j{next(self._ids)}", params, future))
        return await future

    async def aclose(self) -> None:
        """Stop collecting; cancel the batches still being processed (best effort, a few seconds:
        their unprocessed requests are then not billed, and their records are judged again by
        whoever reads them next)."""
        still_open = list(self._open)  # before the tasks' cancellation forgets them
        tasks = [t for t in (self._collector, *self._running) if t is not None]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for batch_id in still_open:
            await self._cancel(batch_id)
        while not self._queue.empty():
            self._queue.get_nowait().future.cancel()

    # -- inside -------------------------------------------------------------------------------

    async def _collect(self) -> None:
        loop = asyncio.get_running_loop()
        opts = self.options
        while True:
            entries = [await self._queue.get()]
            until = loop.time() + opts.max_wait_seconds
            while len(entries) < opts.max_requests:
                if not self._queue.empty():
                    entries.append(self._queue.get_nowait())
                    continue
                left = until - loop.time()
                if left <= 0:
                    break
                try:
                    async with asyncio.timeout(left):
                        entries.append(await self._queue.get())
                except TimeoutError:
                    break
            live = [e for e in entries if not e.future.done()]  # callers past their deadline: dropped
            if live:
                task = asyncio.create_task(self._process(live), name="ragmon-judge-batch")
                self._running.add(task)
                task.add_done_callback(self._running.discard)

    async def _process(self, entries: list[_Entry]) -> None:
        self._in_flight += len(entries)
        self.stats.max_in_flight = max(self.stats.max_in_flight, self._in_flight)
        try:
            await self._submit_and_collect(entries)
        except Exception as exc:  # create, results, or anything unforeseen: each caller sees it
            self.stats.failed_batches += 1
            log.warning("judge batch of %d requests failed: %s", len(entries), type(exc).__name__)
            for e in entries:
                if not e.future.done():
                    e.future.set_exception(exc)
        finally:
            self._in_flight -= len(entries)
            for e in entries:  # only when closing: then the callers are being cancelled too
                if not e.future.done():
                    e.future.cancel()

    async def _submit_and_collect(self, entries: list[_Entry]) -> None:
        stats = self.stats
        batch = await self._batches.create(
            requests=[{"custom_id": e.custom_id, "params": e.params} for e in entries]
        )
        stats.batches += 1
        stats.entries += len(entries)
        self._open.add(batch.id)
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        try:
            while batch.processing_status != "ended":
                if all(e.future.done() for e in entries):  # every caller gave up: stop paying for it
                    stats.canceled_batches += 1
                    await self._cancel(batch.id)
                    return
                await asyncio.sleep(self.options.poll_seconds)
                batch = await self._poll(batch)
            pending = {e.custom_id: e for e in entries}
            async for item in await self._batches.results(batch.id):
                entry = pending.pop(item.custom_id, None)
                kind = item.result.type
                setattr(stats, kind, getattr(stats, kind) + 1)
                if entry is not None and not entry.future.done():
                    entry.future.set_result(item.result)
            stats.ended_batches += 1
        finally:
            self._open.discard(batch.id)
        for entry in pending.values():
            if not entry.future.done():
                entry.future.set_exception(MissingResult(f"batch {batch.id} has no result for the request"))
        c = batch.request_counts
        log.info(
            "judge batch %s ended after %.0fs: %d succeeded, %d errored, %d expired, %d canceled",
            batch.id,
            loop.time() - t0,
            c.succeeded,
            c.errored,
            c.expired,
            c.canceled,
        )

    async def _poll(self, batch: MessageBatch) -> MessageBatch:
        """The batch's state now; on a transient failure (connection, 429, 5xx, after the SDK's
        retries) the state as last seen: polling goes on, bounded by the callers' deadlines."""
        try:
            return await self._batches.retrieve(batch.id)
        except anthropic.APIStatusError as exc:
            if not is_retryable(exc.status_code):
                raise  # the batch is gone or not ours: no poll will find it
            log.warning("polling judge batch %s: HTTP %d; polling on", batch.id, exc.status_code)
        except anthropic.APIConnectionError as exc:
            log.warning("polling judge batch %s: %s; polling on", batch.id, type(exc).__name__)
        return batch

    async def _cancel(self, batch_id: str) -> None:
        self._open.discard(batch_id)  # once: `aclose` must not cancel it again
        with contextlib.suppress(anthropic.AnthropicError, TimeoutError):
            async with asyncio.timeout(5.0):
                await self._batches.cancel(batch_id)
                log.info("judge batch %s canceled", batch_id)


def error_detail(error: Any) -> tuple[JudgeOutcome, str]:
    """The outcome and error text of an errored entry's ``ErrorResponse``."""
    inner = getattr(error, "error", None)
    kind = str(getattr(inner, "type", "") or "error")
    message = str(getattr(inner, "message", "") or "")
    detail = f"batch request errored: {kind}"
    if message:
        detail += f": {message[:200]}"
    return ERROR_OUTCOMES.get(kind, JudgeOutcome.CLIENT_ERROR), detail
