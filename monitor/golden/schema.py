"""Golden rows: parsing (JSON array, JSONL, YAML) with file positions, and validation.

Every row keeps where it came from ("line 12") so that an error in a 500-row file points at the
line to fix instead of a list index. Validation is split in errors (the file cannot be scored:
exit 2) and warnings (it can, but the numbers will be weak: too few rows, no unanswerable rows,
a thin slice).
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr, ValidationError

from monitor.contracts.slices import DEFAULT_QUERY_TYPES
from monitor.plumbing.errors import plural, yaml_error

__all__ = [
    "ChunkText",
    "Difficulty",
    "GoldenCheck",
    "GoldenRow",
    "Issue",
    "RawRow",
    "golden_format",
    "load_golden",
    "parse_golden",
    "sniff_format",
    "validate",
]

GoldenFormat = Literal["json", "jsonl", "yaml"]
Difficulty = Literal["easy", "hard", "adversarial"]

MIN_ROWS = 20
MIN_ROWS_PER_TYPE = 5


class ChunkText(BaseModel):
    """The text of a labelled relevant chunk, as the labeller saw it."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    id: StrictStr = Field(min_length=1)
    content: StrictStr = Field(min_length=1)


class GoldenRow(BaseModel):
    """One labelled question (docs/contract.md, Golden rows). Strict types: `"answerable": "yes"`
    is an error, not True.

    `grades` (optional, an extension) gives graded relevance for nDCG: chunk id → grade ≥ 1; ids
    of `relevant_chunk_ids` without a grade count as grade 1.

    `difficulty` (optional): `easy`, `hard` or `adversarial`; the report gives each tag's metrics
    as it gives each query type's (a closed set: it names a report group).

    `relevant_chunks` (optional) holds the text of the relevant chunks: what the oracle baseline
    gives the target as its context. Rows carry it rather than the monitor fetching it from the
    target, because the replay contract has no "chunk by id" call and the label is about the text
    the labeller read, which a re-index may change.
    """

    model_config = ConfigDict(strict=True, extra="allow", frozen=True)

    id: StrictStr = Field(min_length=1)
    query: StrictStr
    query_type: StrictStr = Field(min_length=1)
    relevant_chunk_ids: list[StrictStr] = Field(default_factory=list)
    reference_answer: StrictStr = ""
    answerable: StrictBool = True
    grades: dict[StrictStr, StrictInt] | None = None
    relevant_chunks: list[ChunkText] | None = None
    difficulty: Difficulty | None = None
    # Provenance, carried along and never scored: where the row came from (a data set's name, or
    # `synthetic` for rows `golden synthesize` wrote, to be reviewed) and under which licence.
    source: StrictStr | None = None
    license: StrictStr | None = None
    # Rows from production (`golden add`, `source: production`): the trace the row was made from,
    # the day it was added (ISO date), and what content controls did to its text before anyone saw
    # it (redacted, truncated, clipped, not captured), so that a row whose query reads "[EMAIL]"
    # says why.
    trace_id: StrictStr | None = None
    added_on: StrictStr | None = None
    content_controls: list[StrictStr] | None = None

    def oracle_context(self) -> list[ChunkText] | None:
        """The relevant chunks' texts in `relevant_chunk_ids` order (unanswerable rows: none);
        None when some relevant chunk has no text (the oracle cannot be given it)."""
        if not self.answerable:
            return []
        texts = {c.id: c for c in self.relevant_chunks or ()}
        relevant = list(self.relevance())
        if any(cid not in texts for cid in relevant):
            return None
        return [texts[cid] for cid in relevant]

    def relevance(self) -> dict[str, int]:
        """Chunk id → grade (> 0) of every relevant chunk."""
        rel = dict.fromkeys(self.relevant_chunk_ids, 1)
        for cid, grade in (self.grades or {}).items():
            if grade > 0:
                rel[cid] = grade
            else:
                rel.pop(cid, None)
        return rel


@dataclass(frozen=True, slots=True)
class RawRow:
    """A parsed but unvalidated row and its position in the file ("line 3", "row 2")."""

    location: str
    data: Any


@dataclass(frozen=True, slots=True)
class Issue:
    location: str  # "line 12", "row 3", "file", or "query_type lookup"
    message: str

    def __str__(self) -> str:
        return f"{self.location}: {self.message}"


@dataclass(slots=True)
class GoldenCheck:
    """Validated rows plus what is wrong (errors) or weak (warnings) about them."""

    rows: list[GoldenRow] = field(default_factory=list)
    errors: list[Issue] = field(default_factory=list)
    warnings: list[Issue] = field(default_factory=list)
    sha256: str = ""
    path: str = ""

    @property
    def ok(self) -> bool:
        return not self.errors


def _line_of(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def _parse_json_array(text: str) -> tuple[list[RawRow], list[Issue]]:
    """A JSON array read element by element, so each row knows the line it starts on."""
    dec = json.JSONDecoder()
    ws = " \t\r\n"
    pos = len(text) - len(text.lstrip(ws))
    if text[pos : pos + 1] == "{":  # {"rows": [...]}: no positions, but accepted
        try:
            obj = json.loads(text)
        except ValueError as exc:
            return [], [Issue("file", f"invalid JSON: {exc}")]
        rows = obj.get("rows") if isinstance(obj, dict) else None
        if not isinstance(rows, list):
            return [], [Issue("file", 'expected a JSON array of rows or an object with "rows"')]
        return [RawRow(f"row {i + 1}", r) for i, r in enumerate(rows)], []
    if text[pos : pos + 1] != "[":
        return [], [Issue("file", "expected a JSON array of rows")]
    pos += 1
    out: list[RawRow] = []
    while True:
        while pos < len(text) and text[pos] in ws:
            pos += 1
        if text[pos : pos + 1] == "]":
            break
        try:
            value, end = dec.raw_decode(text, pos)
        except ValueError as exc:
            return out, [Issue(f"line {_line_of(text, pos)}", f"invalid JSON: {exc}")]
        out.append(RawRow(f"line {_line_of(text, pos)}", value))
        pos = end
        while pos < len(text) and text[pos] in ws:
            pos += 1
        if text[pos : pos + 1] == ",":
            pos += 1
        elif text[pos : pos + 1] != "]":
            return out, [Issue(f"line {_line_of(text, pos)}", "expected ',' or ']' after a row")]
    return out, []


def _parse_jsonl(text: str) -> tuple[list[RawRow], list[Issue]]:
    rows: list[RawRow] = []
    errors: list[Issue] = []
    # Lines end at \n only: str.splitlines() also splits at NEL, U+2028, U+2029, \x1c-\x1e, \v and
    # \f, which JSON holds raw inside a string.
    for n, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            rows.append(RawRow(f"line {n}", json.loads(line)))
        except ValueError as exc:
            errors.append(Issue(f"line {n}", f"invalid JSON: {exc}"))
    return rows, errors


def _parse_yaml(text: str) -> tuple[list[RawRow], list[Issue]]:
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        where, what = yaml_error(exc)
        return [], [Issue(where or "file", what)]
    if isinstance(data, dict) and isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            if key.value == "rows":
                node = value
        data = data.get("rows")
    if not isinstance(data, list) or not isinstance(node, yaml.SequenceNode):
        return [], [Issue("file", "expected a YAML list of rows (or a mapping with 'rows')")]
    return [
        RawRow(f"line {item.start_mark.line + 1}", d) for item, d in zip(node.value, data, strict=True)
    ], []


def sniff_format(text: str) -> GoldenFormat:
    """The format of a golden file's content, guessed from its first characters."""
    head = text.lstrip()[:1]
    if head == "[":
        return "json"
    if head == "{":
        first = text.lstrip().split("\n", 1)[0]
        try:
            obj = json.loads(first)
        except ValueError:
            return "json"
        return "json" if isinstance(obj, dict) and isinstance(obj.get("rows"), list) else "jsonl"
    return "yaml"


def golden_format(path: Path, text: str) -> GoldenFormat:
    """A golden file's format: from its suffix, else from its content."""
    return _format_for(path) or sniff_format(text)


def parse_golden(text: str, fmt: GoldenFormat | None = None) -> tuple[list[RawRow], list[Issue]]:
    """Rows with positions, and the syntax errors found. `fmt` None sniffs the content."""
    if fmt is None:
        fmt = sniff_format(text)
    if fmt == "json":
        return _parse_json_array(text)
    if fmt == "jsonl":
        return _parse_jsonl(text)
    return _parse_yaml(text)


def _format_for(path: Path) -> GoldenFormat | None:
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".ndjson"):
        return "jsonl"
    if suffix in (".yaml", ".yml"):
        return "yaml"
    if suffix == ".json":
        return "json"
    return None


def validate(
    rows: Iterable[RawRow | Mapping[str, Any] | GoldenRow],
    *,
    query_types: Sequence[str] = DEFAULT_QUERY_TYPES,
) -> GoldenCheck:
    """Schema and coverage checks.

    Errors: bad types, empty queries, duplicate ids, answerable rows with no relevant chunk, a
    `query_type` outside the allow-list (it becomes a metric label, so it must stay bounded),
    grades or `relevant_chunks` for chunks not listed. Warnings: fewer than 20 rows, no unanswerable
    row, a query type with fewer than 5 rows, unanswerable rows that list relevant chunks (ignored),
    unknown keys.
    """
    check = GoldenCheck()
    allowed = set(query_types)
    first_seen: dict[str, str] = {}
    for i, item in enumerate(rows):
        raw = item if isinstance(item, RawRow) else RawRow(f"row {i + 1}", item)
        row = _parse_row(raw, check)
        if row is None:
            continue
        first = first_seen.setdefault(row.id, raw.location)
        errors, warnings = _row_problems(row, allowed, first if first != raw.location else None)
        check.errors.extend(Issue(raw.location, e) for e in errors)
        check.warnings.extend(Issue(raw.location, w) for w in warnings)
        if not errors:
            check.rows.append(row)
    check.warnings.extend(_coverage_warnings(len(first_seen), check.rows))
    return check


def _parse_row(raw: RawRow, check: GoldenCheck) -> GoldenRow | None:
    """The row as a model; None (the reasons in `check.errors`) when it is not one."""
    if isinstance(raw.data, GoldenRow):
        return raw.data
    if not isinstance(raw.data, Mapping):
        check.errors.append(Issue(raw.location, f"a row must be an object, got {type(raw.data).__name__}"))
        return None
    try:
        return GoldenRow.model_validate(dict(raw.data))
    except ValidationError as exc:
        for e in exc.errors(include_url=False, include_input=False):
            where = ".".join(str(p) for p in e["loc"]) or "(row)"
            check.errors.append(Issue(raw.location, f"{where}: {e['msg']}"))
        return None


def _row_problems(row: GoldenRow, allowed: set[str], duplicate_of: str | None) -> tuple[list[str], list[str]]:
    """A valid row's errors (it is left out) and warnings, each a message naming the row;
    `duplicate_of`: where a row with its id came first."""
    errors, warnings = [], []
    if not row.query.strip():
        errors.append(f"row {row.id!r}: empty query")
    if duplicate_of is not None:
        errors.append(f"duplicate id {row.id!r} (first at {duplicate_of})")
    if row.query_type not in allowed:
        errors.append(f"row {row.id!r}: query_type {row.query_type!r} not in {sorted(allowed)}")
    if row.answerable and not row.relevance():
        errors.append(f"row {row.id!r}: answerable but no relevant_chunk_ids")
    if unknown_grades := set(row.grades or {}) - set(row.relevant_chunk_ids):
        errors.append(
            f"row {row.id!r}: grades for chunks not in relevant_chunk_ids: {sorted(unknown_grades)}"
        )
    if unknown_texts := {c.id for c in row.relevant_chunks or ()} - set(row.relevant_chunk_ids):
        errors.append(
            f"row {row.id!r}: relevant_chunks for chunks not in relevant_chunk_ids: {sorted(unknown_texts)}"
        )
    if not row.answerable and row.relevant_chunk_ids:
        warnings.append(f"row {row.id!r}: unanswerable row lists relevant chunks (ignored: no recall)")
    if row.model_extra:
        warnings.append(f"row {row.id!r}: unknown keys {sorted(row.model_extra)} ignored")
    return errors, warnings


def _coverage_warnings(n: int, rows: list[GoldenRow]) -> list[Issue]:
    """Too few rows overall, none unanswerable, too few of a query type: metrics that are noise."""
    out = []
    if n < MIN_ROWS:
        out.append(Issue("file", f"only {plural(n, 'row')}: fewer than {MIN_ROWS} make noisy metrics"))
    if n and not any(not r.answerable for r in rows):
        out.append(Issue("file", "no unanswerable rows: refusal accuracy cannot be measured"))
    for qtype, count in sorted(Counter(r.query_type for r in rows).items()):
        if count < MIN_ROWS_PER_TYPE:
            out.append(
                Issue(
                    f"query_type {qtype}",
                    f"only {plural(count, 'row')} (< {MIN_ROWS_PER_TYPE}): its slice is noise",
                )
            )
    return out


def load_golden(path: Path | str, *, query_types: Sequence[str] = DEFAULT_QUERY_TYPES) -> GoldenCheck:
    """Read, parse and validate a golden file; `sha256` identifies it in baselines."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        return GoldenCheck(
            errors=[Issue("file", f"cannot read {path}: {exc.strerror or exc}")], path=str(path)
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return GoldenCheck(errors=[Issue("file", f"not UTF-8: {exc}")], path=str(path))
    raw, syntax = parse_golden(text, _format_for(path))
    check = validate(raw, query_types=query_types)
    check.errors[:0] = syntax
    if not raw and not syntax:
        check.errors.append(Issue("file", "no rows"))
    check.sha256 = hashlib.sha256(data).hexdigest()
    check.path = str(path)
    return check
