"""Judge vs human labels: how far to trust a judge's numbers.

A judge's faithfulness or hallucination rate is only as good as its agreement with people, and raw
agreement flatters a judge on skewed data (say "not hallucinated" always and agree 95% of the
time). So every check reports Cohen's kappa — agreement corrected for chance — next to the
confusion matrix, and a kappa below the threshold (0.6, "moderate" agreement) raises a warning —
with enough labels (`MIN_LABELS`, the `RagmonJudgeUnreliable` alert's line): fewer give "too few
labels", no verdict either way. An undefined kappa (the judge and the labels each one class only,
agreeing: chance agreement is then 1) is said as such, never called a kappa below the threshold.

Labels file: JSONL, one labelled record per line::

    {"record": {<RagRecord fields, as RagRecord.to_json_dict()>},
     "labels": {"faithful": true | [true, false, ...], "hallucinated": false, "answerable": true}}

(the record's fields may also sit at the top level beside "labels"). Every label is optional;
`"reviewed_at"` beside "labels" (Unix seconds, or an ISO 8601 time) says when a person labelled the
record (`ragmon_judge_last_review_timestamp_seconds`: the latest one, else the file's mtime).
`faithful` as a list labels each claim *of the judge's claim split*, in order — what a reviewer
produces when checking a judge's verdicts; per-claim agreement is computed only where the counts
match, and the record-level label is then "all claims supported".

Intervals: a kappa from 50 labels is a rough number (±0.2 is common), so every kappa comes with a
percentile bootstrap interval over *records* (a record's claims stay together: they share an answer
and a reviewer), seeded, so the same labels give the same interval. Per query type too: a judge
reliable on lookups may not be on multi-hop questions. `CalibrationGauges` exports the overall
figures for node_exporter's textfile collector, which the `RagmonJudgeUnreliable` (upper bound
below 0.6 with enough labels) and `RagmonJudgeCalibrationStale` alerts read.

Labels of the review queue (`monitor.judge.review`) carry its `review` object; `select_labels`
then keeps the uniform share, weighted, unless asked for every label (biased towards the hard
cases the queue picks): docs/judges.md, "Selection".

Also "judge twice": `disagreements` names the checks on which two judgements of one record differ,
and `self_agreement` turns many such pairs into per-check kappas (a judge that disagrees with
itself cannot agree with people).
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import json
import math
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Gauge

from monitor.contracts.model import Judgement, RagRecord
from monitor.contracts.results import ReviewMeta
from monitor.judge.protocol import Judge

__all__ = [
    "KAPPA_WARNING",
    "MIN_LABELS",
    "CalibrationGauges",
    "CalibrationReport",
    "CheckReport",
    "Confusion",
    "LabelledRecord",
    "Labels",
    "Selection",
    "cohen_kappa",
    "compare",
    "disagreements",
    "format_report",
    "kappa_interval",
    "last_review",
    "load_labels",
    "parse_labelled",
    "predictions",
    "run_calibration",
    "select_labels",
    "self_agreement",
]

KAPPA_WARNING = 0.6
# Labelled records a check needs before its kappa is a verdict: the `RagmonJudgeUnreliable` alert's
# `ragmon_judge_labels >= 50` (deploy/prometheus/alerts.yml; with fewer, kappa's interval is about
# ±0.2 wide and proves little either way).
MIN_LABELS = 50
# Binary checks compared against labels, in report order.
LABELLED_CHECKS = ("faithful", "claim_supported", "hallucinated", "answerable")


@dataclass(frozen=True, slots=True)
class Labels:
    faithful: bool | None = None
    claims_supported: tuple[bool, ...] | None = None  # aligned with the judge's claims
    hallucinated: bool | None = None
    answerable: bool | None = None
    # What these labels count for in kappa: the review queue's weight of a record of its uniform
    # share (`select_labels`); None: 1, unweighted.
    weight: float | None = None


@dataclass(frozen=True, slots=True)
class LabelledRecord:
    record: RagRecord
    labels: Labels
    reviewed_at: float | None = None  # Unix seconds, when the line says
    review: ReviewMeta | None = None  # why the review queue queued it, when the line says


def _reviewed_at(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    if isinstance(value, str):
        try:
            t = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            pass
        else:
            return (t if t.tzinfo else t.replace(tzinfo=dt.UTC)).timestamp()
    raise ValueError('"reviewed_at" must be Unix seconds or an ISO 8601 time')


def _label_bool(labels: dict[str, Any], key: str) -> bool | None:
    v = labels.get(key)
    if v is None or isinstance(v, bool):
        return v
    raise ValueError(f"label {key!r} must be true, false or null, not {type(v).__name__}")


# A record's fields -> the record, as the pipeline assembles it (ValueError: rejected). The wiring
# passes the ingest stage's flat-JSON decoder (`monitor.ingest.decode.flat_record`), so calibration
# judges exactly what production would have assembled from the same fields.
RecordDecoder = Callable[[dict[str, Any]], RagRecord]


def parse_labelled(obj: dict[str, Any], to_record: RecordDecoder) -> LabelledRecord:
    """One labelled record from its JSON object; ValueError says what is wrong."""
    if not isinstance(obj, dict):
        raise ValueError("a labelled record must be a JSON object")
    raw_labels = obj.get("labels")
    if not isinstance(raw_labels, dict):
        raise ValueError('missing "labels" object')
    fields = obj.get("record", {k: v for k, v in obj.items() if k not in ("labels", "reviewed_at", "review")})
    if not isinstance(fields, dict):
        raise ValueError('"record" must be an object')
    review = _review(obj.get("review", fields.get("review")))
    record = to_record({k: v for k, v in fields.items() if k != "review"})
    if not record.query_type:
        record.query_type = "unknown"

    faithful = raw_labels.get("faithful")
    claims: tuple[bool, ...] | None = None
    if isinstance(faithful, list):
        items = [c.get("supported") if isinstance(c, dict) else c for c in faithful]
        if not all(isinstance(c, bool) for c in items):
            raise ValueError('per-claim "faithful" labels must be booleans or {"supported": bool}')
        claims = tuple(bool(c) for c in items)
        faithful = all(claims)
    elif faithful is not None and not isinstance(faithful, bool):
        raise ValueError('label "faithful" must be a boolean or a list of per-claim booleans')
    labels = Labels(
        faithful=faithful,
        claims_supported=claims,
        hallucinated=_label_bool(raw_labels, "hallucinated"),
        answerable=_label_bool(raw_labels, "answerable"),
    )
    return LabelledRecord(record, labels, _reviewed_at(obj.get("reviewed_at")), review)


def _review(value: Any) -> ReviewMeta | None:
    """The review queue's `review` object of a labels line (beside "labels", or in the record as
    the queue wrote it); None when absent. A weight that is no positive number is an error: it
    would silently change every kappa."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ValueError('"review" must be an object')
    meta = ReviewMeta.model_validate(value)
    if meta.uniform and (meta.weight is None or not math.isfinite(meta.weight) or meta.weight <= 0):
        raise ValueError('"review": a record of the uniform share needs a positive "weight"')
    return meta


def last_review(path: Path, items: Sequence[LabelledRecord]) -> float:
    """When a person last labelled: the latest `reviewed_at` of the file, else its mtime."""
    times = [i.reviewed_at for i in items if i.reviewed_at is not None]
    return max(times) if times else path.stat().st_mtime


def load_labels(path: Path, to_record: RecordDecoder) -> list[LabelledRecord]:
    """All labelled records of a JSONL file; ValueError names the first bad line."""
    out = []
    with path.open(encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                out.append(parse_labelled(json.loads(line), to_record))
            except ValueError as exc:
                raise ValueError(f"{path}:{n}: {exc}") from None
    return out


@dataclass(frozen=True, slots=True)
class Selection:
    """Which labels `select_labels` kept of a file whose lines carry the review queue's `review`
    object, and so what the kappas describe."""

    weighted: bool  # kappa on the uniform share, weighted (else: every label, unweighted, biased)
    uniform: int  # labels of the uniform share
    hard: int  # labels of hard cases only (disagreement, boundary, alert): left out when weighted
    unmarked: int  # labels without a `review` object (how they were chosen is unknown): likewise

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "weighted": self.weighted,
            "uniform_labels": self.uniform,
            "hard_case_labels": self.hard,
            "labels_without_review": self.unmarked,
            "left_out": self.hard + self.unmarked if self.weighted else 0,
            "biased": not self.weighted,
        }

    def describe(self) -> str:
        if self.weighted:
            return (
                f"on the review queue's uniform share: {self.uniform} labels, weighted (sampling weight"
                f" / uniform share); left out: {self.hard} hard-case labels (disagreement, boundary,"
                f" alert)"
                + (f" and {self.unmarked} without a review object" if self.unmarked else "")
                + " (--all-labels: every label, unweighted, biased)"
            )
        return (
            f"every label, unweighted ({self.uniform} of the uniform share, {self.hard} hard cases,"
            f" {self.unmarked} without a review object): BIASED towards hard cases, not an estimate"
            " of agreement on production traffic"
        )


def select_labels(
    items: Sequence[LabelledRecord], *, include_all: bool = False
) -> tuple[list[LabelledRecord], Selection | None]:
    """The labels kappa is estimated on, and what was selected (None: no line carries `review`,
    every label counts 1, as before the review queue).

    Labels from the review queue describe hard cases unless the uniform draw picked the record:
    by default only the uniform share is kept, each label weighted by its line's `weight` (the
    record's sampling weight over the uniform share), so that kappa estimates agreement on the
    judged traffic. `include_all` keeps every label unweighted: agreement on what people labelled,
    biased towards the hard cases."""
    if not any(i.review is not None for i in items):
        return list(items), None
    uniform = [i for i in items if i.review is not None and i.review.uniform]
    hard = sum(1 for i in items if i.review is not None and not i.review.uniform)
    unmarked = sum(1 for i in items if i.review is None)
    if include_all:
        return list(items), Selection(False, len(uniform), hard, unmarked)
    kept = []
    for item in uniform:
        weight = float(item.review.weight or 1.0) if item.review is not None else None
        kept.append(dataclasses.replace(item, labels=dataclasses.replace(item.labels, weight=weight)))
    return kept, Selection(True, len(uniform), hard, unmarked)


# -- agreement ----------------------------------------------------------------------------------------


# (label, predicted) -> the cell's index in (tp, fp, fn, tn)
_CELL = {(True, True): 0, (False, True): 1, (True, False): 2, (False, False): 3}


@dataclass(slots=True)
class Confusion:
    """Binary confusion matrix; "positive" is the label value True (faithful, hallucinated, ...).

    The counts are items; with weighted items (`add(..., weight)`: the review queue's uniform
    share) each cell also sums its items' weights, and agreement and kappa are computed on those
    sums, so that the labelled sample stands for the traffic it was drawn from."""

    tp: int = 0
    fp: int = 0
    fn: int = 0
    tn: int = 0
    weights: list[float] | None = None  # Σ weight per cell (tp, fp, fn, tn) once an item is weighted

    def add(self, label: bool, predicted: bool, weight: float | None = None) -> None:
        cell = _CELL[label, predicted]
        if cell == 0:
            self.tp += 1
        elif cell == 1:
            self.fp += 1
        elif cell == 2:
            self.fn += 1
        else:
            self.tn += 1
        if weight is not None and self.weights is None:
            before = [float(x) for x in (self.tp, self.fp, self.fn, self.tn)]
            before[cell] -= 1  # the items before this one counted 1 each
            self.weights = before
        if self.weights is not None:
            self.weights[cell] += 1.0 if weight is None else weight

    def merge(self, other: Confusion) -> None:
        mine, theirs = self.cells(), other.cells()
        weighted = self.weights is not None or other.weights is not None
        self.tp, self.fp, self.fn, self.tn = (
            self.tp + other.tp,
            self.fp + other.fp,
            self.fn + other.fn,
            self.tn + other.tn,
        )
        if weighted:
            self.weights = [a + b for a, b in zip(mine, theirs, strict=True)]

    def cells(self) -> tuple[float, float, float, float]:
        """(tp, fp, fn, tn) as kappa reads them: the weight sums when weighted, else the counts."""
        if self.weights is not None:
            tp, fp, fn, tn = self.weights
            return tp, fp, fn, tn
        return float(self.tp), float(self.fp), float(self.fn), float(self.tn)

    @property
    def n(self) -> int:
        return self.tp + self.fp + self.fn + self.tn

    @property
    def agreement(self) -> float | None:
        tp, fp, fn, tn = self.cells()
        total = tp + fp + fn + tn
        return (tp + tn) / total if self.n and total > 0 else None


def _kappa(tp: float, fp: float, fn: float, tn: float) -> float | None:
    n = tp + fp + fn + tn
    if n <= 0:
        return None
    po = (tp + tn) / n
    pe = ((tp + fp) * (tp + fn) + (fn + tn) * (fp + tn)) / (n * n)
    if pe >= 1.0 - 1e-12:
        return None
    return (po - pe) / (1 - pe)


def cohen_kappa(c: Confusion) -> float | None:
    """Cohen's kappa (weighted cells when the items are: `Confusion.cells`); None when undefined
    (no items, or both raters constant and equal — chance agreement is then 1, and agreement
    says nothing about the judge)."""
    if c.n == 0:
        return None
    return _kappa(*c.cells())


def _quantile(ordered: Sequence[float], p: float) -> float:
    """Linear interpolation between order statistics (numpy's default)."""
    pos = p * (len(ordered) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def kappa_interval(
    per_record: Sequence[Confusion], *, resamples: int, confidence: float, rng: random.Random
) -> tuple[float, float] | None:
    """Percentile bootstrap interval of Cohen's kappa, resampling records (each with the
    confusion of its labelled items: one for a record-level check, its claims for per-claim).
    Resamples where kappa is undefined (both raters constant) are left out; None with fewer than
    two records or no defined resample. Plain Python: ≈ 0.2 s for 2,000 resamples of 400 records."""
    n = len(per_record)
    if n < 2 or resamples <= 0:
        return None
    cells = [c.cells() for c in per_record]
    cols = [[c[i] for c in cells] for i in range(4)]
    population = range(n)
    kappas = []
    for _ in range(resamples):
        idx = rng.choices(population, k=n)
        tp_, fp_, fn_, tn_ = (sum(map(col.__getitem__, idx)) for col in cols)
        k = _kappa(tp_, fp_, fn_, tn_)
        if k is not None:
            kappas.append(k)
    if not kappas:
        return None
    kappas.sort()
    alpha = (1.0 - confidence) / 2
    return _quantile(kappas, alpha), _quantile(kappas, 1.0 - alpha)


@dataclass(slots=True)
class CheckReport:
    check: str
    confusion: Confusion
    kappa: float | None
    warning: bool  # kappa below the threshold, with enough labels: the judge is not reliable here
    records: int = 0  # labelled records compared on this check (the bootstrap's unit)
    interval: tuple[float, float] | None = None  # bootstrap interval of kappa, when computed
    # reliable | unreliable | too few labels | undefined (one class only, agreeing)
    status: str = ""

    def to_json_dict(self) -> dict[str, Any]:
        c = self.confusion
        return {
            "n": c.n,
            "records": self.records,
            "agreement": c.agreement,
            "kappa": self.kappa,
            "interval": None if self.interval is None else [round(x, 6) for x in self.interval],
            "warning": self.warning,
            "status": self.status,
            "confusion": {"tp": c.tp, "fp": c.fp, "fn": c.fn, "tn": c.tn},
        }


@dataclass(slots=True)
class CalibrationReport:
    checks: dict[str, CheckReport]
    judged: int
    failed: int  # judgements with an error: not compared, reported
    claims_misaligned: int = 0  # per-claim labels whose count differs from the judge's claims
    threshold: float = KAPPA_WARNING
    errors: list[str] = field(default_factory=list)  # a few failure messages, for the operator
    by_query_type: dict[str, dict[str, CheckReport]] = field(default_factory=dict)
    resamples: int = 0
    confidence: float = 0.95
    selection: Selection | None = None  # which review-queue labels were used (`select_labels`)
    min_labels: int = 0  # labelled records a check needs for a verdict

    @property
    def warning(self) -> bool:
        return any(r.warning for r in self.checks.values())

    @property
    def no_verdict(self) -> bool:
        """No check could be judged: each has too few labels, or an undefined kappa."""
        return not any(r.status in ("reliable", "unreliable") for r in self.checks.values())

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "selection": None if self.selection is None else self.selection.to_json_dict(),
            "judged": self.judged,
            "failed": self.failed,
            "claims_misaligned": self.claims_misaligned,
            "kappa_threshold": self.threshold,
            "min_labels": self.min_labels,
            "warning": self.warning,
            "bootstrap": {"resamples": self.resamples, "confidence": self.confidence, "unit": "record"},
            "checks": {k: r.to_json_dict() for k, r in self.checks.items()},
            "by_query_type": {
                qt: {k: r.to_json_dict() for k, r in checks.items()}
                for qt, checks in self.by_query_type.items()
            },
            "errors": self.errors,
        }


def predictions(j: Judgement) -> dict[str, bool | None]:
    """A successful judgement as the binary checks labels use. An answer with no claim (a refusal)
    counts as faithful: it asserts nothing unsupported."""
    if not j.ok:
        return {}
    return {
        "faithful": j.faithfulness is None or j.faithfulness >= 1.0,
        "hallucinated": j.hallucinated,
        "answerable": j.answerable_from_context,
        "admits_uncertainty": j.answer_admits_uncertainty,
    }


def _record_items(labels: Labels, j: Judgement) -> tuple[dict[str, Confusion], bool]:
    """One judged record's labelled items per check, and whether its per-claim labels were
    misaligned with the judge's claims."""
    out: dict[str, Confusion] = {}
    pred = predictions(j)
    w = labels.weight
    for check, label in (
        ("faithful", labels.faithful),
        ("hallucinated", labels.hallucinated),
        ("answerable", labels.answerable),
    ):
        p = pred.get(check)
        if label is not None and p is not None:
            out.setdefault(check, Confusion()).add(label, p, w)
    misaligned = False
    if labels.claims_supported is not None:
        if len(labels.claims_supported) != len(j.claims):
            misaligned = True
        elif j.claims:
            m = out.setdefault("claim_supported", Confusion())
            for label, claim in zip(labels.claims_supported, j.claims, strict=True):
                m.add(label, claim.supported, w)
    return out, misaligned


def _check_reports(
    per_record: dict[str, list[Confusion]],
    threshold: float,
    resamples: int,
    confidence: float,
    seed: int,
    group: str,
    min_labels: int,
) -> dict[str, CheckReport]:
    checks = {}
    for check in LABELLED_CHECKS:
        items = per_record.get(check)
        if not items:
            continue
        total = Confusion()
        for c in items:
            total.merge(c)
        kappa = cohen_kappa(total)
        # A str seed is hashed with SHA-512 by `random`: stable across runs and PYTHONHASHSEED.
        rng = random.Random(f"{seed}/{group}/{check}")
        interval = kappa_interval(items, resamples=resamples, confidence=confidence, rng=rng)
        if len(items) < min_labels:
            status = "too few labels"
        elif kappa is None:
            status = "undefined"
        else:
            status = "unreliable" if kappa < threshold else "reliable"
        checks[check] = CheckReport(check, total, kappa, status == "unreliable", len(items), interval, status)
    return checks


def compare(
    pairs: Iterable[tuple[Labels, Judgement]],
    threshold: float = KAPPA_WARNING,
    *,
    resamples: int = 0,
    confidence: float = 0.95,
    seed: int = 0,
    min_labels: int = 0,
) -> CalibrationReport:
    """Per-check confusion, agreement and kappa of judgements against labels, overall and per query
    type (the judgement's), each kappa with its bootstrap interval when `resamples` > 0; a check
    with fewer than `min_labels` labelled records gets no verdict. Pure."""
    overall: dict[str, list[Confusion]] = {}
    by_type: dict[str, dict[str, list[Confusion]]] = {}
    judged = failed = misaligned = 0
    errors: list[str] = []
    for labels, j in pairs:
        if not j.ok:
            failed += 1
            if len(errors) < 5 and j.error:
                errors.append(j.error)
            continue
        judged += 1
        items, bad = _record_items(labels, j)
        misaligned += bad
        for check, c in items.items():
            overall.setdefault(check, []).append(c)
            by_type.setdefault(j.query_type or "unknown", {}).setdefault(check, []).append(c)
    checks = _check_reports(overall, threshold, resamples, confidence, seed, "all", min_labels)
    per_type = {
        qt: _check_reports(per, threshold, resamples, confidence, seed, qt, min_labels)
        for qt, per in sorted(by_type.items())
    }
    return CalibrationReport(
        checks,
        judged,
        failed,
        misaligned,
        threshold,
        errors,
        per_type,
        resamples,
        confidence,
        min_labels=min_labels,
    )


async def run_calibration(
    judge: Judge,
    items: Sequence[LabelledRecord],
    *,
    concurrency: int = 8,
    threshold: float = KAPPA_WARNING,
    resamples: int = 0,
    confidence: float = 0.95,
    seed: int = 0,
    min_labels: int = MIN_LABELS,
) -> tuple[CalibrationReport, list[Judgement]]:
    """Judge every labelled record (at most `concurrency` at once) and compare; the judgements are
    returned too, for the results file."""
    sem = asyncio.Semaphore(concurrency)

    async def one(item: LabelledRecord) -> Judgement:
        async with sem:
            return await judge.judge(item.record)

    judgements = await asyncio.gather(*(one(i) for i in items))
    pairs = ((i.labels, j) for i, j in zip(items, judgements, strict=True))
    report = compare(
        pairs, threshold, resamples=resamples, confidence=confidence, seed=seed, min_labels=min_labels
    )
    return report, list(judgements)


# -- judge twice -------------------------------------------------------------------------------------

TWICE_CHECKS = ("faithful", "hallucinated", "answerable", "admits_uncertainty", "relevance", "failed")


def disagreements(a: Judgement, b: Judgement) -> list[str]:
    """Checks on which two judgements of the same record disagree (`TWICE_CHECKS` order).

    "failed" when exactly one of them failed; nothing else is compared then. Faithfulness is
    compared as its decision (all claims supported or not), since two runs split claims differently.
    """
    if a.trace_id != b.trace_id:
        raise ValueError(f"judgements of different records: {a.trace_id} vs {b.trace_id}")
    if a.ok != b.ok:
        return ["failed"]
    if not a.ok:
        return []
    pa, pb = predictions(a), predictions(b)
    out = [c for c in ("faithful", "hallucinated", "answerable", "admits_uncertainty") if pa[c] != pb[c]]
    if a.answer_relevance != b.answer_relevance:
        out.append("relevance")
    return out


def self_agreement(
    pairs: Iterable[tuple[Judgement, Judgement]], threshold: float = KAPPA_WARNING
) -> CalibrationReport:
    """Kappa between two runs of a judge over the same records: the first run plays the labeller."""
    converted = []
    for a, b in pairs:
        if not a.ok:
            converted.append((Labels(), a))  # counted as failed
            continue
        pa = predictions(a)
        converted.append(
            (Labels(faithful=pa["faithful"], hallucinated=pa["hallucinated"], answerable=pa["answerable"]), b)
        )
    return compare(converted, threshold)


def _row(name: str, r: CheckReport, threshold: float, min_labels: int) -> str:
    c = r.confusion
    agree = f"{c.agreement:.3f}" if c.agreement is not None else "-"
    kappa = f"{r.kappa:.3f}" if r.kappa is not None else "undef"
    interval = f"[{r.interval[0]:.2f}, {r.interval[1]:.2f}]" if r.interval is not None else "-"
    flag = {
        "unreliable": f"  WARNING: kappa < {threshold:.2f}",
        "too few labels": f"  too few labels for a verdict (< {min_labels})",
        "undefined": "  kappa undefined: judge and labels one class only (labels of both needed)",
    }.get(r.status, "")
    return (
        f"{name:<16}{r.records:>8}{c.n:>6}{agree:>8}{kappa:>8}{interval:>15} "
        f"{c.tp:>4} {c.fp:>4} {c.fn:>4} {c.tn:>4}{flag}"
    )


def format_report(report: CalibrationReport) -> str:
    """A plain-text table for the CLI: overall, then per query type."""
    level = f"{report.confidence:.0%}"
    head = (
        f"{'check':<16}{'records':>8}{'n':>6}{'agree':>8}{'kappa':>8}{level + ' interval':>15}"
        "   tp   fp   fn   tn"
    )
    lines = [
        f"judged {report.judged}, failed {report.failed}"
        + (f", per-claim labels misaligned {report.claims_misaligned}" if report.claims_misaligned else "")
        + (
            f"; intervals: percentile bootstrap over records, {report.resamples} resamples"
            if report.resamples
            else ""
        ),
        head,
    ]
    if report.selection is not None:
        lines.insert(1, f"labels: {report.selection.describe()}")
    t, m = report.threshold, report.min_labels
    lines += [_row(name, r, t, m) for name, r in report.checks.items()]
    if len(report.by_query_type) > 1:
        for qt, checks in report.by_query_type.items():
            lines.append(f"query_type {qt}:")
            lines += [_row(f"  {name}", r, t, m) for name, r in checks.items()]
    return "\n".join(lines)


class CalibrationGauges:
    """What `calibrate --metrics-file` writes for node_exporter's textfile collector, in a registry
    of its own: the sidecar never exports these (a sidecar's 0 for the last review would read as
    "never reviewed" and page)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.kappa = Gauge(
            "ragmon_judge_agreement_kappa",
            "Cohen's kappa of the judge against human labels (bound: estimate, bootstrap lower/upper)",
            ["check", "judge", "bound"],
            registry=self.registry,
        )
        self.labels = Gauge(
            "ragmon_judge_labels",
            "Human-labelled records compared with the judge on a check",
            ["check", "judge"],
            registry=self.registry,
        )
        self.last_review = Gauge(
            "ragmon_judge_last_review_timestamp_seconds",
            "When a person last labelled a record of the labels file",
            registry=self.registry,
        )

    def set(self, report: CalibrationReport, judge: str, reviewed_at: float) -> None:
        for check, r in report.checks.items():
            self.labels.labels(check=check, judge=judge).set(r.records)
            if r.kappa is not None:
                self.kappa.labels(check=check, judge=judge, bound="estimate").set(r.kappa)
            if r.interval is not None:
                self.kappa.labels(check=check, judge=judge, bound="lower").set(r.interval[0])
                self.kappa.labels(check=check, judge=judge, bound="upper").set(r.interval[1])
        self.last_review.set(reviewed_at)
