"""One synthesis run (`synthesize`): tasks round-robin over the query types, one a type a round,
each proposal through the filters, until every quota is kept or its tasks are spent."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Iterable, Mapping, Sequence

from monitor.golden.schema import GoldenRow
from monitor.golden.synthesize.corpus import SourceChunk
from monitor.golden.synthesize.filters import Filters, Key, Rejection
from monitor.golden.synthesize.report import SynthesisReport, TypeCounts
from monitor.golden.synthesize.tasks import Generator, Proposal, Task
from monitor.golden.targets import Target


async def synthesize(
    chunks: Sequence[SourceChunk],
    generator: Generator,
    target: Target,
    tasks: Mapping[str, Sequence[Task]],
    quotas: Mapping[str, int],
    *,
    k: int = 5,
    existing: Iterable[GoldenRow] = (),
) -> SynthesisReport:
    """Run `tasks` round-robin over the types until each quota is kept or its tasks are spent.

    `chunks` is the whole corpus (what unanswerable rows must not be answered by); `existing`
    golden rows count for duplicates."""
    report = SynthesisReport(
        generator.name,
        target.description,
        k,
        {t: TypeCounts(quotas[t], len(tasks[t])) for t in quotas},
    )
    filters = Filters(chunks, target, k, existing)
    used: set[str] = set()  # source chunks of kept rows: not used again
    queues = {t: deque(tasks[t]) for t in quotas}
    while batch := _next_round(queues, quotas, report, used):
        for task, p in await _generated(generator, filters, report, batch):
            report.keep(task, p)
            used.update(c.id for c in task.chunks)
    return report


def _next_round(
    queues: Mapping[str, deque[Task]], quotas: Mapping[str, int], report: SynthesisReport, used: set[str]
) -> list[Task]:
    """One task of each type whose quota is not kept yet, skipping tasks on a used chunk."""
    batch: list[Task] = []
    for qtype, queue in queues.items():
        if report.by_type[qtype].kept >= quotas[qtype]:
            continue
        while queue and any(c.id in used for c in queue[0].chunks):
            queue.popleft()
        if queue:
            batch.append(queue.popleft())
    return batch


async def _generated(
    generator: Generator, filters: Filters, report: SynthesisReport, batch: list[Task]
) -> list[tuple[Task, Proposal]]:
    """The batch's proposals that pass every filter (the others' drops recorded), in batch order."""
    proposals = await asyncio.gather(*(generator.propose(t) for t in batch))
    pending: list[tuple[Task, Proposal, Key]] = []
    for task, p in zip(batch, proposals, strict=True):
        report.by_type[task.query_type].generated += 1
        got = filters.check(task, p)
        if isinstance(got, Rejection):
            report.drop(task, got)
        else:
            assert isinstance(p, Proposal)
            pending.append((task, p, got))
    rejected = await asyncio.gather(*(filters.retrieval(t, p) for t, p, _ in pending))
    passed: list[tuple[Task, Proposal]] = []
    for (task, p, key), why in zip(pending, rejected, strict=True):
        if why is None:
            passed.append((task, p))
        else:
            filters.release(key)
            report.drop(task, why)
    return passed
