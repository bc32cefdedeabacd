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

The optional `retrieval` section pins the label-free retrieval drift references
(`monitor.drift.retrieval`) the same way: per query type, the chunk-count shares (count 0…k, then
"more"), the top-score decile edges and shares ("no score" first), and the records they came from.
It is taken from results lines — every sampled record's line carries its `chunks` (ids, scores),
judged or not — weighted by `sampling_weight`, since the sample over-represents suspicious records
and production's shares are what the ingest stage compares with. Never from a golden baseline: its
rows keep no scores, and the golden set's queries (kept because the retriever finds their chunks)
are not production's. Files without the section load as before (`schema_version` stays 1); a file
without one is written exactly as before, so an older sidecar still reads it.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from monitor.contracts.estimate import usable_weight, verdict_values
from monitor.contracts.results import ResultLine
from monitor.drift.detector import POOLED, Reference, StratifiedReference, StratumSums
from monitor.drift.retrieval import MAX_COUNT_BIN, RetrievalReference

KIND = "rag-monitor-drift-baseline"
SHARES_TOLERANCE = 1e-6  # |Σ shares − 1| allowed (JSON round trips are exact; hand edits are not)


class BaselineFileError(ValueError):
    """A baseline file that cannot be used; the message says why, in one line."""


# The largest value a metric's record takes (`estimate.verdict_values`): relevance is scored 1-3,
# every other metric is a share. A reference whose mean lies outside could never alarm.
_METRIC_MAX = {"relevance": 3.0, "context_relevance": 3.0}
_REL = 1e-6  # rounding allowed in the sums' consistency checks (JSON round trips are exact)


class _WeightedStats(BaseModel):
    """Reference records as weighted sums (`Reference`'s fields): finite, and consistent with
    weights of at least 1 (inverse inclusion probabilities) and values of at least 0."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    records: int = Field(ge=1)
    sum_w: float = Field(gt=0)
    sum_w2: float = Field(gt=0)
    sum_wy: float = Field(ge=0)
    sum_wy2: float = Field(ge=0)

    @model_validator(mode="after")
    def _consistent(self) -> _WeightedStats:
        if self.sum_w < self.records * (1 - _REL):
            raise ValueError(f"sum_w {self.sum_w:g} is below records {self.records} (weights are at least 1)")
        if self.sum_w2 * self.records < self.sum_w * self.sum_w * (1 - _REL):  # no OverflowError
            raise ValueError("sum_w2 is below sum_w² / records, which no weights give")
        return self

    def check_range(self, metric: str) -> None:
        """The values' mean within what `metric` takes (the file names the metric, not the sums)."""
        top = _METRIC_MAX.get(metric, 1.0)
        mean = self.sum_wy / self.sum_w
        if mean > top * (1 + _REL):
            raise ValueError(f"its mean {mean:g} is outside {metric}'s range [0, {top:g}]")
        if self.sum_wy2 > top * self.sum_wy * (1 + _REL) + 1e-12:
            raise ValueError(f"sum_wy2 exceeds {top:g} × sum_wy, which no values in [0, {top:g}] give")


class StratumStats(_WeightedStats):
    """One stratum's reference records (`StratumSums`' fields): weighted sums, and the unweighted
    sums of its values that the stratified detector compares the stratum with."""

    sum_y: float = Field(ge=0)
    sum_y2: float = Field(ge=0)
    sum_y3: float = Field(ge=0)

    def check_range(self, metric: str) -> None:
        super().check_range(metric)
        top = _METRIC_MAX.get(metric, 1.0)
        bounds = (("sum_y", self.sum_y, self.records), ("sum_y2", self.sum_y2, self.sum_y))
        for name, value, base in (*bounds, ("sum_y3", self.sum_y3, self.sum_y2)):
            if value > top * base * (1 + _REL) + 1e-12:
                raise ValueError(f"{name} {value:g} is more than values in [0, {top:g}] give")


class ReferenceStats(_WeightedStats):
    """A slice's reference as weighted sums, and per stratum (schema version 2; absent in older
    files and in golden pins, whose slices keep the weighted CUSUM)."""

    # by stratum ("" for records whose lines name none); their sums add up to the ones above
    strata: dict[Annotated[str, Field(max_length=32)], StratumStats] | None = Field(
        None, min_length=1, max_length=16
    )

    @model_validator(mode="after")
    def _strata_add_up(self) -> ReferenceStats:
        """Present, the strata hold every reference record: an empty or partial set would leave
        the stratified detector dividing by nothing on the first record."""
        if self.strata:
            records = sum(s.records for s in self.strata.values())
            sum_w = math.fsum(s.sum_w for s in self.strata.values())
            if records != self.records or abs(sum_w - self.sum_w) > _REL * self.sum_w:
                raise ValueError(
                    f"the strata hold {records} records of weight {sum_w:g}, the slice {self.records} "
                    f"of weight {self.sum_w:g}: they must add up"
                )
        return self

    def check_range(self, metric: str) -> None:
        super().check_range(metric)
        for name, stratum in (self.strata or {}).items():
            try:
                stratum.check_range(metric)
            except ValueError as exc:
                raise ValueError(f"stratum {name!r}: {exc}") from None

    @property
    def mean(self) -> float:
        return self.sum_wy / self.sum_w

    def reference(self) -> Reference:
        """The detector's frozen reference: per stratum when the file has them."""
        if self.strata is None:
            return Reference.pinned(self.records, self.sum_w, self.sum_w2, self.sum_wy, self.sum_wy2)
        return StratifiedReference.of_strata(
            {k: StratumSums(**s.model_dump()) for k, s in self.strata.items()}
        )


Share = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]


def _check_shares(shares: list[float]) -> list[float]:
    total = math.fsum(shares)
    if abs(total - 1) > SHARES_TOLERANCE:
        raise ValueError(f"shares must add up to 1, not {total:.6g}")
    return shares


class ChunkCountShares(BaseModel):
    """Shares of records per chunk count 0…k, then "more" (k + 2 values, k ≤ 20)."""

    model_config = ConfigDict(extra="forbid")

    shares: list[Share] = Field(min_length=2, max_length=MAX_COUNT_BIN + 2)

    _sum = field_validator("shares")(_check_shares)


class TopScoreShares(BaseModel):
    """The top score's decile edges (ascending, ties merged) and the shares of records in the "no
    score" bin and then in each bin between edges (len(edges) + 2 values)."""

    model_config = ConfigDict(extra="forbid")

    edges: list[Annotated[float, Field(allow_inf_nan=False)]] = Field(max_length=9)
    shares: list[Share] = Field(min_length=2, max_length=11)

    _sum = field_validator("shares")(_check_shares)

    @model_validator(mode="after")
    def _bins(self) -> TopScoreShares:
        if any(b <= a for a, b in zip(self.edges, self.edges[1:], strict=False)):
            raise ValueError("edges must be strictly ascending")
        if len(self.shares) != len(self.edges) + 2:
            raise ValueError(
                f"{len(self.shares)} shares for {len(self.edges)} edges: need {len(self.edges) + 2} "
                "(no score, then one per bin)"
            )
        return self


class RetrievalStats(BaseModel):
    """A slice's retrieval drift reference (`RetrievalReference`), as the file holds it."""

    model_config = ConfigDict(extra="forbid")

    records: int = Field(ge=1, description="results lines it came from")
    effective_records: float = Field(gt=0, allow_inf_nan=False, description="(Σw)² / Σw²")
    chunk_count: ChunkCountShares
    top_score: TopScoreShares

    @model_validator(mode="after")
    def _effective(self) -> RetrievalStats:
        if self.effective_records > self.records * (1 + 1e-9):
            raise ValueError(f"effective_records ({self.effective_records}) exceeds records ({self.records})")
        return self

    @classmethod
    def of(cls, ref: RetrievalReference) -> RetrievalStats:
        return cls(
            records=ref.records,
            effective_records=ref.effective_records,
            chunk_count=ChunkCountShares(shares=list(ref.count_shares)),
            top_score=TopScoreShares(edges=list(ref.edges), shares=list(ref.score_shares)),
        )

    def reference(self) -> RetrievalReference:
        return RetrievalReference(
            count_shares=tuple(self.chunk_count.shares),
            edges=tuple(self.top_score.edges),
            score_shares=tuple(self.top_score.shares),
            records=self.records,
            effective_records=self.effective_records,
        )


class DriftBaseline(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["rag-monitor-drift-baseline"] = "rag-monitor-drift-baseline"
    # 2: slices carry per-stratum references (`strata`); a file without them stays version 1
    schema_version: Literal[1, 2] = 1
    version: str = Field(min_length=1, max_length=64)
    created_at: str
    source: dict[str, Any]
    slices: dict[str, dict[str, ReferenceStats]]
    # Optional (files before it load): label-free retrieval drift references per query type.
    retrieval: dict[Annotated[str, Field(min_length=1)], RetrievalStats] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _means_in_range(self) -> DriftBaseline:
        for qt, metrics in self.slices.items():
            for metric, stats in metrics.items():
                try:
                    stats.check_range(metric)
                except ValueError as exc:
                    raise ValueError(f"slice {qt}/{metric}: {exc}") from None
        return self

    def references(self) -> dict[tuple[str, str], Reference]:
        return {
            (qt, metric): s.reference()
            for qt, metrics in self.slices.items()
            for metric, s in metrics.items()
        }

    def without_strata(self) -> list[str]:
        """The "query type/metric" slices pinned without per-stratum references (a file written
        before them, or a golden pin): their detectors are the weighted CUSUM."""
        return [
            f"{qt}/{m}"
            for qt, ms in sorted(self.slices.items())
            for m, s in sorted(ms.items())
            if not s.strata
        ]

    def retrieval_references(self) -> dict[str, RetrievalReference]:
        return {qt: s.reference() for qt, s in self.retrieval.items()}

    def to_json(self) -> str:
        """The file's text; without retrieval references or strata exactly the earlier layout (no
        `retrieval` or `strata` keys), so a sidecar that predates them still reads it."""
        exclude: dict[str, Any] = {}
        if not self.retrieval:
            exclude["retrieval"] = True
        if not any(s.strata is not None for ms in self.slices.values() for s in ms.values()):
            exclude["slices"] = {"__all__": {"__all__": {"strata"}}}
        return self.model_dump_json(indent=2, exclude=exclude or None) + "\n"


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


def judged_values(line: ResultLine) -> tuple[str, float, list[tuple[str, float]]] | str:
    """(query type, weight, (metric, value) pairs) of a results line, or why it has none: what
    the drift detectors and their references take from a judgement."""
    qt = line.query_type
    w = line.sampling_weight
    if line.replay:
        return "golden replay"
    if not line.judged:
        return "not judged"
    if not qt:
        return "no query type"
    if w is None or not usable_weight(float(w)):
        return "bad sampling weight"
    values = verdict_values(
        line.faithfulness,
        line.hallucinated,
        line.refusal,  # refusals only (not hedges), as the estimates count them
        line.false_refusal,
        line.answer_relevance,
        context_relevance=line.context_relevance,
    )
    return qt, float(w), values


def drift_values(line: ResultLine) -> tuple[str, float, list[tuple[str, float]]] | str:
    """`judged_values`, plus the record's `undecided` value (1: a check the judge could not
    decide, 0: every check decided): what the drift detectors and their references take. The
    undecided share is watched like a rate, so a shift in answer style that the judge cannot read
    shows as drift instead of silently thinning the records every score rests on."""
    judged = judged_values(line)
    if isinstance(judged, str):
        return judged
    decided = line.is_decided
    if decided is None:
        return judged
    qt, w, values = judged
    return qt, w, [*values, ("undecided", 0.0 if decided else 1.0)]


def _outside(line: ResultLine, since: float | None, until: float | None) -> str | None:
    """Why a line is not in the window [since, until) of its record's end (else start) time."""
    when = _parse_time(line.end) or _parse_time(line.start)
    if when is None:
        return "no time" if since is not None or until is not None else None
    if (since is not None and when < since) or (until is not None and when >= until):
        return "outside the window"
    return None


def from_results(
    lines: Iterable[ResultLine], since: float | None, until: float | None
) -> tuple[dict[str, dict[str, ReferenceStats]], dict[str, int]]:
    """References from results lines whose record ended within [since, until), and why the
    others were left out (counted by reason)."""
    sums: dict[tuple[str, str], StratifiedReference] = {}
    dropped: dict[str, int] = {}

    def drop(reason: str) -> None:
        dropped[reason] = dropped.get(reason, 0) + 1

    for line in lines:
        judged = drift_values(line)
        outside = None if isinstance(judged, str) else _outside(line, since, until)
        if isinstance(judged, str):
            drop(judged)
        elif outside is not None:
            drop(outside)
        else:
            qt, w, values = judged
            stratum = line.stratum or POOLED
            for metric, y in values:
                ref = sums.get((qt, metric))
                if ref is None:
                    ref = sums[(qt, metric)] = StratifiedReference()
                ref.add(w, y, stratum)
    return _stats(sums), dropped


def retrieval_values(line: ResultLine) -> tuple[str, float, int, float | None] | str:
    """(query type, weight, chunk count, top score) of a results line as the ingest stage saw the
    record — the line's `chunks` are the record's, in rank order — or why it has none. Any sampled
    record counts, judged or not: the sample's weights make it stand for production."""
    qt = line.ingest_query_type
    w = line.sampling_weight
    chunks = line.chunks
    if line.replay:
        return "golden replay"
    if qt is None and line.query_type_source == "judge":
        return "query type set by the judge"
    if not qt:
        return "no query type"
    if w is None or not usable_weight(float(w)):
        return "bad sampling weight"
    if chunks is None:
        return "no chunks list"
    top = chunks[0].score if chunks and chunks[0] is not None else None
    if top is None or not math.isfinite(top):
        top = None  # as the ingest stage: a record without a usable score is counted apart
    return qt, float(w), len(chunks), None if top is None else float(top)


def retrieval_from_results(
    lines: Iterable[ResultLine], since: float | None, until: float | None
) -> tuple[dict[str, RetrievalStats], dict[str, int]]:
    """Retrieval drift references per query type from the results lines within [since, until),
    weighted by `sampling_weight`, and why the others were left out (counted by reason)."""
    seen: dict[str, tuple[list[int], list[float | None], list[float]]] = {}
    dropped: dict[str, int] = {}
    for line in lines:
        values = retrieval_values(line)
        reason = values if isinstance(values, str) else _outside(line, since, until)
        if reason is not None:
            dropped[reason] = dropped.get(reason, 0) + 1
            continue
        assert not isinstance(values, str)
        qt, w, count, top = values
        counts, scores, weights = seen.setdefault(qt, ([], [], []))
        counts.append(count)
        scores.append(top)
        weights.append(w)
    return {qt: RetrievalStats.of(RetrievalReference.of(*seen[qt])) for qt in sorted(seen)}, dropped


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


def _stats(sums: Mapping[tuple[str, str], Reference]) -> dict[str, dict[str, ReferenceStats]]:
    out: dict[str, dict[str, ReferenceStats]] = {}
    for (qt, metric), r in sorted(sums.items()):
        strata = None
        if isinstance(r, StratifiedReference):
            strata = {k: StratumStats(**asdict(s)) for k, s in sorted(r.strata.items())}
        out.setdefault(qt, {})[metric] = ReferenceStats(
            records=r.records,
            sum_w=r.sum_w,
            sum_w2=r.sum_w2,
            sum_wy=r.sum_wy,
            sum_wy2=r.sum_wy2,
            strata=strata,
        )
    return out


def pin(
    slices: dict[str, dict[str, ReferenceStats]],
    source: dict[str, Any],
    version: str | None = None,
    retrieval: dict[str, RetrievalStats] | None = None,
) -> DriftBaseline:
    """A baseline of `slices` (and `retrieval` references); without a version, the hash of its
    references names it (a baseline without retrieval references hashes as it always did)."""
    retrieval = retrieval or {}
    if version is None:
        content: dict[str, Any] = {
            qt: {m: s.model_dump(exclude_none=True) for m, s in ms.items()} for qt, ms in slices.items()
        }
        if retrieval:
            content = {"slices": content, "retrieval": {qt: s.model_dump() for qt, s in retrieval.items()}}
        body = json.dumps(content, sort_keys=True)
        version = "sha256:" + hashlib.sha256(body.encode()).hexdigest()[:12]
    stratified = any(s.strata is not None for ms in slices.values() for s in ms.values())
    return DriftBaseline(
        schema_version=2 if stratified else 1,
        version=version,
        created_at=datetime.now(UTC).isoformat(timespec="seconds"),
        source=source,
        slices=slices,
        retrieval=retrieval,
    )
