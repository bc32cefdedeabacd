"""Judge vs human labels: how far to trust a judge's numbers.

A judge's faithfulness or hallucination rate is only as good as its agreement with people, and raw
agreement flatters a judge on skewed data (say "not hallucinated" always and agree 95% of the
time). So every check reports Cohen's kappa — agreement corrected for chance — next to the
confusion matrix, and a kappa below the threshold (0.6, "moderate" agreement) raises a warning.

Labels file: JSONL, one labelled record per line::

    {"record": {<RagRecord fields, as RagRecord.to_json_dict()>},
     "labels": {"faithful": true | [true, false, ...], "hallucinated": false, "answerable": true}}

(the record's fields may also sit at the top level beside "labels"). Every label is optional.
`faithful` as a list labels each claim *of the judge's claim split*, in order — what a reviewer
produces when checking a judge's verdicts; per-claim agreement is computed only where the counts
match, and the record-level label is then "all claims supported".

Also "judge twice": `disagreements` names the checks on which two judgements of one record differ,
and `self_agreement` turns many such pairs into per-check kappas (a judge that disagrees with
itself cannot agree with people).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from monitor.judge.protocol import Judge
from monitor.model import Judgement, RagRecord

__all__ = [
    "KAPPA_WARNING",
    "CalibrationReport",
    "CheckReport",
    "Confusion",
    "LabelledRecord",
    "Labels",
    "cohen_kappa",
    "compare",
    "disagreements",
    "format_report",
    "load_labels",
    "parse_labelled",
    "predictions",
    "run_calibration",
    "self_agreement",
]

KAPPA_WARNING = 0.6
# Binary checks compared against labels, in report order.
LABELLED_CHECKS = ("faithful", "claim_supported", "hallucinated", "answerable")


@dataclass(frozen=True, slots=True)
class Labels:
    faithful: bool | None = None
    claims_supported: tuple[bool, ...] | None = None  # aligned with the judge's claims
    hallucinated: bool | None = None
    answerable: bool | None = None


@dataclass(frozen=True, slots=True)
class LabelledRecord:
    record: RagRecord
    labels: Labels


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
    fields = obj.get("record", {k: v for k, v in obj.items() if k != "labels"})
    if not isinstance(fields, dict):
        raise ValueError('"record" must be an object')
    record = to_record(fields)
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
    return LabelledRecord(record, labels)


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


# -- agreement ----------------------------------------------------------------------------------------


@dataclass(slots=True)
class Confusion:
    """Binary confusion matrix; "positive" is the label value True (faithful, hallucinated, ...)."""

    tp: int = 0
    fp: int = 0
    fn: int = 0
    tn: int = 0

    def add(self, label: bool, predicted: bool) -> None:
        if label:
            if predicted:
                self.tp += 1
            else:
                self.fn += 1
        elif predicted:
            self.fp += 1
        else:
            self.tn += 1

    @property
    def n(self) -> int:
        return self.tp + self.fp + self.fn + self.tn

    @property
    def agreement(self) -> float | None:
        return (self.tp + self.tn) / self.n if self.n else None


def cohen_kappa(c: Confusion) -> float | None:
    """Cohen's kappa; None when undefined (no items, or both raters constant and equal — chance
    agreement is then 1, and agreement says nothing about the judge)."""
    n = c.n
    if n == 0:
        return None
    po = (c.tp + c.tn) / n
    pe = ((c.tp + c.fp) * (c.tp + c.fn) + (c.fn + c.tn) * (c.fp + c.tn)) / (n * n)
    if pe >= 1.0:
        return None
    return (po - pe) / (1 - pe)


@dataclass(slots=True)
class CheckReport:
    check: str
    confusion: Confusion
    kappa: float | None
    warning: bool  # kappa below the threshold, or undefined

    def to_json_dict(self) -> dict[str, Any]:
        c = self.confusion
        return {
            "n": c.n,
            "agreement": c.agreement,
            "kappa": self.kappa,
            "warning": self.warning,
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

    @property
    def warning(self) -> bool:
        return any(r.warning for r in self.checks.values())

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "judged": self.judged,
            "failed": self.failed,
            "claims_misaligned": self.claims_misaligned,
            "kappa_threshold": self.threshold,
            "warning": self.warning,
            "checks": {k: r.to_json_dict() for k, r in self.checks.items()},
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


def compare(pairs: Iterable[tuple[Labels, Judgement]], threshold: float = KAPPA_WARNING) -> CalibrationReport:
    """Per-check confusion, agreement and kappa of judgements against labels. Pure."""
    matrices: dict[str, Confusion] = {}
    judged = failed = misaligned = 0
    errors: list[str] = []
    for labels, j in pairs:
        if not j.ok:
            failed += 1
            if len(errors) < 5 and j.error:
                errors.append(j.error)
            continue
        judged += 1
        pred = predictions(j)
        for check, label in (
            ("faithful", labels.faithful),
            ("hallucinated", labels.hallucinated),
            ("answerable", labels.answerable),
        ):
            p = pred.get(check)
            if label is not None and p is not None:
                matrices.setdefault(check, Confusion()).add(label, p)
        if labels.claims_supported is not None:
            if len(labels.claims_supported) != len(j.claims):
                misaligned += 1
            else:
                m = matrices.setdefault("claim_supported", Confusion())
                for label, claim in zip(labels.claims_supported, j.claims, strict=True):
                    m.add(label, claim.supported)
    checks = {}
    for check in LABELLED_CHECKS:
        if check in matrices:
            kappa = cohen_kappa(matrices[check])
            checks[check] = CheckReport(check, matrices[check], kappa, kappa is None or kappa < threshold)
    return CalibrationReport(checks, judged, failed, misaligned, threshold, errors)


async def run_calibration(
    judge: Judge,
    items: Sequence[LabelledRecord],
    *,
    concurrency: int = 8,
    threshold: float = KAPPA_WARNING,
) -> tuple[CalibrationReport, list[Judgement]]:
    """Judge every labelled record (at most `concurrency` at once) and compare; the judgements are
    returned too, for the results file."""
    sem = asyncio.Semaphore(concurrency)

    async def one(item: LabelledRecord) -> Judgement:
        async with sem:
            return await judge.judge(item.record)

    judgements = await asyncio.gather(*(one(i) for i in items))
    report = compare(((i.labels, j) for i, j in zip(items, judgements, strict=True)), threshold)
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


def format_report(report: CalibrationReport) -> str:
    """A plain-text table for the CLI."""
    lines = [
        f"judged {report.judged}, failed {report.failed}"
        + (f", per-claim labels misaligned {report.claims_misaligned}" if report.claims_misaligned else ""),
        f"{'check':<16}{'n':>6}{'agree':>8}{'kappa':>8}   tp   fp   fn   tn",
    ]
    for name, r in report.checks.items():
        c = r.confusion
        agree = f"{c.agreement:.3f}" if c.agreement is not None else "-"
        kappa = f"{r.kappa:.3f}" if r.kappa is not None else "undef"
        flag = f"  WARNING: kappa < {report.threshold:.2f}" if r.warning else ""
        lines.append(f"{name:<16}{c.n:>6}{agree:>8}{kappa:>8} {c.tp:>4} {c.fp:>4} {c.fn:>4} {c.tn:>4}{flag}")
    return "\n".join(lines)
