"""Example traces for drift alerts: per slice (query type, metric), the worst judged records since
the detector's estimated change point, so that an alert can say which answers went wrong.

A buffer per slice holds at most `MAX_EXAMPLES` records — the worst seen since the change point,
the newest first among equals — so memory is bounded by the slices (query types come bounded,
metrics from a closed set) times five. It follows the detector's segment: when the CUSUM
statistic falls back to 0 the change point is gone and so are the examples; records before the
current change point never stay. Like the detectors, it is a function of the results topic's
sequence alone, so a member that rebuilds a slice from the topic has the same examples.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from monitor.contracts.model import Verdict
from monitor.contracts.results import ResultLine
from monitor.drift.detector import BAD_DIRECTION, Detector
from monitor.outputs.alerts import MAX_EXAMPLES, REASON_CHARS, Example
from monitor.plumbing.safe_text import one_line

_UNSUPPORTED = (Verdict.CONTRADICTED, Verdict.NOT_IN_CONTEXT)


def unsupported_claim(line: ResultLine) -> str | None:
    """The text of the record's first claim the context did not support, if any."""
    for claim in line.claims or ():
        if claim.text and (claim.verdict in _UNSUPPORTED or claim.supported is False):
            return claim.text
    return None


def reason(line: ResultLine, metric: str, y: float) -> str:
    """Why the record is an example of `metric` going wrong, in a line: the unsupported claim
    (for a hallucination, the claim the context did not support), else what the judge found."""
    answer = one_line(line.answer, REASON_CHARS // 2)
    if metric in ("faithfulness", "hallucination"):
        claim = unsupported_claim(line)
        if claim:
            return claim
        if metric == "hallucination":
            return f"answered although the context does not hold the answer: {answer}"
        return f"faithfulness {y:.2f}: {answer}"
    if metric == "refusal":
        return f"refused: {answer}"
    if metric == "false_refusal":
        return f"refused although the context holds the answer: {answer}"
    if metric == "relevance":
        return f"answer relevance {y:.2f}: {answer}"
    if metric == "undecided":
        why = ", ".join(f"{check} {r}" for check, r in sorted((line.undecided_checks or {}).items()))
        return f"undecided ({why or 'no reason given'}): {answer}"
    return f"{metric.replace('_', ' ')} {y:.2f}"


@dataclass(slots=True)
class _Buffer:
    start: int | None = None  # the change point its records are since
    heap: list[tuple[float, int, Example]] = field(default_factory=list)  # least bad, oldest first
    lines: dict[int, ResultLine] = field(default_factory=dict)  # by position, with `keep_lines`


class ExampleBuffers:
    """The example records of every slice the drift stage watches. With `keep_lines`, each
    example's whole results line is kept too (`pick_lines`: for the review queue), as bounded."""

    def __init__(self, limit: int = MAX_EXAMPLES, *, keep_lines: bool = False) -> None:
        self.limit = limit
        self.keep_lines = keep_lines
        self._buffers: dict[tuple[str, str], _Buffer] = {}

    def observe(self, query_type: str, detector: Detector, y: float, line: ResultLine) -> None:
        """After `detector` took this record's value `y`: keep the record if it is among the worst
        since the change point."""
        key = (query_type, detector.metric)
        start = detector.change_point
        if start is None:
            self._buffers.pop(key, None)  # back at 0: no change, no examples
            return
        buffer = self._buffers.get(key)
        if buffer is None or buffer.start != start:
            buffer = self._buffers[key] = _Buffer(start)
        if not detector.failing(y):
            return
        badness = BAD_DIRECTION[detector.metric] * y
        entry = (badness, detector.position)
        heap = buffer.heap
        if len(heap) >= self.limit and entry <= heap[0][:2]:
            return  # no worse than the ones kept: skip the reason and the example
        example = Example.of(line.trace_id, reason(line, detector.metric, y), line.time)
        if example is None:
            return
        if len(heap) < self.limit:
            heapq.heappush(heap, (*entry, example))
        else:
            _, gone, _ = heapq.heapreplace(heap, (*entry, example))
            buffer.lines.pop(gone, None)
        if self.keep_lines:
            buffer.lines[detector.position] = line

    def pick(self, query_type: str, detector: Detector) -> list[Example]:
        """The examples of a slice since its change point, worst (then newest) first."""
        return [example for _, example in self._since_change(query_type, detector)]

    def pick_lines(self, query_type: str, detector: Detector) -> list[ResultLine]:
        """The results lines of `pick`'s examples, in its order (none without `keep_lines`)."""
        buffer = self._buffers.get((query_type, detector.metric))
        if buffer is None:
            return []
        ranked = self._since_change(query_type, detector)
        return [buffer.lines[p] for p, _ in ranked if p in buffer.lines]

    def _since_change(self, query_type: str, detector: Detector) -> list[tuple[int, Example]]:
        """(position, example) of the slice's examples since its change point, worst first."""
        buffer = self._buffers.get((query_type, detector.metric))
        start = detector.change_point
        if buffer is None or start is None or buffer.start != start:
            return []
        ranked = sorted(buffer.heap, key=lambda e: (e[0], e[1]), reverse=True)
        return [(position, example) for _, position, example in ranked if position >= start]

    def forget(self, query_types: set[str]) -> None:
        for key in [k for k in self._buffers if k[0] in query_types]:
            del self._buffers[key]
