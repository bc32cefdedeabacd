"""Pinned drift baselines: the reference each slice's detector is frozen to, in a versioned file.

A detector's reference is otherwise the first judgements of its slice in the results topic, which
is convenient on day one but tied to the topic's retention. Pinning makes the reference an
explicit, reviewable act (`rag-monitor baseline pin`): from a window of production judgements (a
results file) or from a golden-replay baseline. The file carries a version (given, or the hash of
its content) that every drift alert and `ragmon_drift_baseline_info` show, so "what is this alarm
measured against" always has an answer; re-baselining means pinning a new file, never a reference
that adapts by itself and hides a sustained drop.

From a golden baseline only faithfulness is taken: its per-answer value does not depend on how
many golden rows are answerable, whereas the rates (hallucination, refusals) follow the golden
set's mix of questions, not production's.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from monitor.drift.detector import Reference
from monitor.estimate import usable_weight, verdict_values

KIND = "rag-monitor-drift-baseline"


class BaselineFileError(ValueError):
    """A baseline file that cannot be used; the message says why, in one line."""


class ReferenceStats(BaseModel):
    """A slice's reference as weighted sums (`Reference`'s fields)."""

    model_config = ConfigDict(extra="forbid")

    records: int = Field(ge=1)
    sum_w: float = Field(gt=0)
    sum_w2: float = Field(gt=0)
    sum_wy: float = Field(ge=0)
    sum_wy2: float = Field(ge=0)

    @property
    def mean(self) -> float:
        return self.sum_wy / self.sum_w


class DriftBaseline(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["rag-monitor-drift-baseline"] = "rag-monitor-drift-baseline"
    schema_version: Literal[1] = 1
    version: str = Field(min_length=1, max_length=64)
    created_at: str
    source: dict[str, Any]
    slices: dict[str, dict[str, ReferenceStats]]

    def references(self) -> dict[tuple[str, str], Reference]:
        return {
            (qt, metric): Reference.pinned(s.records, s.sum_w, s.sum_w2, s.sum_wy, s.sum_wy2)
            for qt, metrics in self.slices.items()
            for metric, s in metrics.items()
        }


def load_baseline(path: Path) -> DriftBaseline:
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise BaselineFileError(f"cannot read drift baseline {path}: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise BaselineFileError(f"drift baseline {path} is not JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("kind") != KIND:
        raise BaselineFileError(f"{path} is not a drift baseline (kind must be {KIND!r})")
    try:
        return DriftBaseline.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise BaselineFileError(f"drift baseline {path}: {where}: {first['msg']}") from None


def _parse_time(value: object) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def judged_values(line: Mapping[str, Any]) -> tuple[str, float, list[tuple[str, float]]] | str:
    """(query type, weight, (metric, value) pairs) of a results line, or why it has none: what
    the drift detectors and their references take from a judgement."""
    judge = line.get("judge")
    qt = line.get("query_type")
    w = line.get("sampling_weight")
    if line.get("replay"):
        return "golden replay"
    if not isinstance(judge, dict) or judge.get("outcome") != "ok":
        return "not judged"
    if not isinstance(qt, str) or not qt:
        return "no query type"
    if not isinstance(w, int | float) or isinstance(w, bool) or not usable_weight(float(w)):
        return "bad sampling weight"
    values = verdict_values(
        line.get("faithfulness"),
        line.get("hallucinated"),
        # Refusals only (not hedges), as the estimates count them; lines written before the
        # judges told the two apart carry only answer_admits_uncertainty.
        line["refuses"] if "refuses" in line else line.get("answer_admits_uncertainty"),
        line.get("false_refusal"),
        line.get("answer_relevance"),
        context_relevance=line.get("context_relevance"),
    )
    return qt, float(w), values


def from_results(
    lines: Iterable[Mapping[str, Any]], since: float | None, until: float | None
) -> tuple[dict[str, dict[str, ReferenceStats]], dict[str, int]]:
    """References from results lines whose record ended within [since, until), and why the
    others were left out (counted by reason)."""
    sums: dict[tuple[str, str], Reference] = {}
    dropped: dict[str, int] = {}

    def drop(reason: str) -> None:
        dropped[reason] = dropped.get(reason, 0) + 1

    for line in lines:
        when = _parse_time(line.get("end")) or _parse_time(line.get("start"))
        judged = judged_values(line)
        if isinstance(judged, str):
            drop(judged)
        elif when is None and (since is not None or until is not None):
            drop("no time")
        elif when is not None and (
            (since is not None and when < since) or (until is not None and when >= until)
        ):
            drop("outside the window")
        else:
            qt, w, values = judged
            for metric, y in values:
                sums.setdefault((qt, metric), Reference()).add(w, y)
    return _stats(sums), dropped


def from_golden(baseline: Mapping[str, Any]) -> dict[str, dict[str, ReferenceStats]]:
    """Faithfulness references per query type from a golden-replay baseline's rows (weight 1)."""
    rows = baseline.get("rows")
    if baseline.get("kind") != "rag-monitor-golden-baseline" or not isinstance(rows, dict):
        raise BaselineFileError("not a golden baseline (rag-monitor replay --write-baseline writes one)")
    sums: dict[tuple[str, str], Reference] = {}
    for row in rows.values():
        f = row.get("faithfulness") if isinstance(row, dict) else None
        qt = row.get("query_type") if isinstance(row, dict) else None
        if isinstance(qt, str) and isinstance(f, int | float) and math.isfinite(f):
            sums.setdefault((qt, "faithfulness"), Reference()).add(1.0, float(f))
    return _stats(sums)


def _stats(sums: dict[tuple[str, str], Reference]) -> dict[str, dict[str, ReferenceStats]]:
    out: dict[str, dict[str, ReferenceStats]] = {}
    for (qt, metric), r in sorted(sums.items()):
        out.setdefault(qt, {})[metric] = ReferenceStats(
            records=r.records, sum_w=r.sum_w, sum_w2=r.sum_w2, sum_wy=r.sum_wy, sum_wy2=r.sum_wy2
        )
    return out


def pin(
    slices: dict[str, dict[str, ReferenceStats]], source: dict[str, Any], version: str | None = None
) -> DriftBaseline:
    """A baseline of `slices`; without a version, the hash of its references names it."""
    if version is None:
        body = json.dumps(
            {qt: {m: s.model_dump() for m, s in ms.items()} for qt, ms in slices.items()}, sort_keys=True
        )
        version = "sha256:" + hashlib.sha256(body.encode()).hexdigest()[:12]
    return DriftBaseline(
        version=version,
        created_at=datetime.now(UTC).isoformat(timespec="seconds"),
        source=source,
        slices=slices,
    )
