"""What a run asks its generator for: rows wanted per query type (`quotas_for`) and the tasks that
may fill them (`plan`)."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

from monitor.golden.synthesize.corpus import SourceChunk
from monitor.golden.synthesize.tasks import Generator, Task
from monitor.golden.synthesize.text import content_words, jaccard


def quotas_for(types: Sequence[str], *, per_type: int | None, rows: int | None) -> dict[str, int]:
    """Rows wanted per type: `per_type` each, or `rows` shared round-robin (the first types get
    the remainder)."""
    if rows is None:
        return dict.fromkeys(types, per_type if per_type is not None else 5)
    return {t: rows // len(types) + (1 if i < rows % len(types) else 0) for i, t in enumerate(types)}


def plan(
    chunks: Sequence[SourceChunk],
    generator: Generator,
    quotas: Mapping[str, int],
    *,
    attempts: int,
    seed: int,
) -> dict[str, list[Task]]:
    """Per type, up to `quota × attempts` tasks over the chunks in a seeded random order; a
    two-chunk task pairs its chunk with the most similar chunk of another title."""
    rng = random.Random(seed)
    words = {c.id: content_words(c.text) for c in chunks}
    out: dict[str, list[Task]] = {}
    for qtype, quota in quotas.items():
        order = list(chunks)
        rng.shuffle(order)
        tasks: list[Task] = []
        for chunk in order:
            if len(tasks) >= quota * attempts:
                break
            if generator.chunks_needed(qtype) == 1:
                if generator.suitable(qtype, (chunk,)):
                    tasks.append(Task(qtype, (chunk,), seed))
                continue
            partner = _partner(chunk, chunks, words, generator, qtype)
            if partner is not None:
                tasks.append(Task(qtype, (chunk, partner), seed))
        out[qtype] = tasks
    return out


def _partner(
    chunk: SourceChunk,
    chunks: Sequence[SourceChunk],
    words: Mapping[str, frozenset[str]],
    generator: Generator,
    qtype: str,
) -> SourceChunk | None:
    """The chunk of another title most like `chunk` (by content words) that the generator can pair
    it with for `qtype`."""
    others = sorted(
        (c for c in chunks if c.title != chunk.title),
        key=lambda c: -jaccard(words[chunk.id], words[c.id]),
    )
    return next((c for c in others if generator.suitable(qtype, (chunk, c))), None)
