"""Production failures into the golden set: a golden row from one judged record of a results file.

A reviewer who finds a failure in production (a trace an alert named, a record of the review queue)
knows what the right chunks and the right answer were; `golden add` turns the record and that
knowledge into a row, so that the next replay measures the failure. The row says where it came
from (`source: production`, the trace id, the day it was added) and what content controls did to
the text it was built from: a query redacted at the source ("[EMAIL]"), a passage truncated by the
instrumentation, texts the sample clipped or chunk text never captured. The row is checked like the
whole file (`golden validate`) before a byte is written, and a row already in the file (same trace,
or the same query) is refused with that row named: one failure counted twice weighs twice.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from monitor.contracts.results import ResultLine
from monitor.contracts.slices import DEFAULT_QUERY_TYPES
from monitor.golden.schema import (
    ChunkText,
    GoldenCheck,
    GoldenRow,
    Issue,
    golden_format,
    parse_golden,
    validate,
)
from monitor.plumbing.files import locked, write_atomic

__all__ = [
    "PRODUCTION",
    "GoldenAdd",
    "ProductionRowError",
    "add_production_row",
    "append_production_row",
    "content_controls",
    "find_record",
    "production_row",
]

PRODUCTION = "production"  # the `source` of every row made from a production record

# What the instrumentation's content controls leave in a text (monitor.instrument.content): the
# default redactor's placeholders and the truncation mark. A custom redactor's marks are not known.
_TRACE_ID = re.compile(r"[0-9a-f]{1,64}")
_REDACTED = re.compile(r"\[(?:EMAIL|CARD)\]")
_TRUNCATED = re.compile(r"…\[truncated \d+ chars\]")


class ProductionRowError(ValueError):
    """The row cannot be added; the message says why (and names the existing row on a duplicate)."""

    def __init__(self, message: str, errors: Sequence[Issue] = ()) -> None:
        super().__init__(message)
        self.errors = list(errors)


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    with path.open(encoding="utf-8", errors="replace") as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                yield n, line


def find_record(results: Path, trace_id: str) -> ResultLine:
    """The results line of `trace_id`: its judged line when there is one (a record judged twice,
    or first skipped: the last judged), else its last line with a query. Unreadable lines are
    passed over, as every results reader does."""
    want = trace_id.strip().lower()
    if not _TRACE_ID.fullmatch(want):
        raise ProductionRowError(f"trace id {trace_id!r} is not a hex trace id")
    judged: ResultLine | None = None
    other: ResultLine | None = None
    try:
        for _, text in _lines(results):
            if want not in text.lower():
                continue  # cheap: most lines are other traces
            try:
                line = ResultLine.model_validate_json(text)
            except ValidationError:
                continue
            if (line.trace_id or "").lower() != want or not line.query:
                continue
            if line.judged:
                judged = line
            else:
                other = line
    except OSError as exc:
        raise ProductionRowError(f"cannot read {results}: {exc.strerror or exc}") from None
    found = judged or other
    if found is None:
        raise ProductionRowError(f"trace {want} has no record with a query in {results}")
    return found


def content_controls(line: ResultLine) -> list[str]:
    """What content controls did to the record's text, one note a text: empty when nothing."""
    notes: list[str] = []

    def check(where: str, text: str | None) -> None:
        if text is None or not text:
            notes.append(f"{where}: not captured")
            return
        if _REDACTED.search(text):
            notes.append(f"{where}: redacted ({', '.join(sorted(set(_REDACTED.findall(text))))})")
        if _TRUNCATED.search(text):
            notes.append(f"{where}: truncated at the source")

    check("query", line.query)
    check("answer", line.answer)
    for i, chunk in enumerate(line.chunks or ()):
        if chunk is not None:
            check(f"chunk {chunk.id or i + 1}", chunk.content)
    clipped = line.clipped or {}
    if any(clipped.values()):
        parts = ", ".join(f"{k} {v}" for k, v in clipped.items() if v)
        notes.append(f"sample clipped: {parts}")
    return notes


def production_row(
    line: ResultLine,
    *,
    relevant_chunk_ids: Sequence[str],
    reference_answer: str = "",
    answerable: bool = True,
    row_id: str | None = None,
    query_type: str | None = None,
    today: dt.date | None = None,
) -> tuple[GoldenRow, list[str]]:
    """The golden row of a production record and the reviewer's labels, and notes for the
    reviewer (relevant chunks the record did not retrieve, whose text the row cannot carry).

    The text of every relevant chunk the record retrieved goes into `relevant_chunks` (what the
    oracle baseline gives the target), as the reviewer read it."""
    trace_id = (line.trace_id or "").lower()
    texts = {c.id: c.content for c in line.chunks or () if c is not None and c.id and c.content}
    ids = list(dict.fromkeys(relevant_chunk_ids))
    if not answerable:
        notes = [f"chunk {cid} ignored: an unanswerable row lists no relevant chunk" for cid in ids]
    else:
        notes = [
            f"chunk {cid} was not retrieved for this trace: the row lists it without its text"
            for cid in ids
            if cid not in texts
        ]
    kept = [ChunkText(id=cid, content=texts[cid]) for cid in ids if cid in texts]
    controls = content_controls(line)
    fields: dict[str, Any] = {
        "id": row_id or f"prod-{trace_id[:16]}",
        "query": line.query or "",
        "query_type": query_type or line.query_type or "unknown",
        "relevant_chunk_ids": ids if answerable else [],
        "reference_answer": reference_answer,
        "answerable": answerable,
        "source": PRODUCTION,
        "trace_id": trace_id,
        "added_on": (today or dt.datetime.now(dt.UTC).date()).isoformat(),
    }
    if kept and answerable:
        fields["relevant_chunks"] = kept
    if controls:
        fields["content_controls"] = controls
    return GoldenRow.model_validate(fields), notes


def _normal(query: str) -> str:
    return " ".join(query.casefold().split())


def _duplicate(existing: GoldenCheck, locations: dict[str, str], row: GoldenRow) -> str | None:
    for old in existing.rows:
        where = locations.get(old.id, "?")
        if old.trace_id and old.trace_id.lower() == row.trace_id:
            return f"trace {row.trace_id} is already row {old.id!r} ({where})"
        if _normal(old.query) == _normal(row.query):
            return f"the same query is already row {old.id!r} ({where})"
    return None


class _RowDumper(yaml.SafeDumper):
    """Strings with a character YAML reads as a line break or cannot hold raw (NEL, U+2028,
    U+2029, controls) double-quoted, where they are escapes (`\\N`, `\\L`): in a plain or
    single-quoted scalar a reader folds them (a query with NEL read back as "nel x")."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    quote = any(c in "\x85\u2028\u2029" or (c < " " and c not in "\n") for c in value)
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style='"' if quote else None)


_RowDumper.add_representer(str, _str)


def _yaml_rows(docs: list[dict[str, Any]]) -> str:
    return yaml.dump(docs, Dumper=_RowDumper, sort_keys=False, allow_unicode=True)


def _appended(text: str, fmt: str, doc: dict[str, Any]) -> str:
    """`text` with the row added in its own format, the rows before untouched."""
    if not text.strip():
        if fmt == "json":
            return json.dumps([doc], ensure_ascii=False, indent=2) + "\n"
        if fmt == "yaml":
            return _yaml_rows([doc])
        return json.dumps(doc, ensure_ascii=False) + "\n"
    if fmt == "jsonl":
        sep = "" if text.endswith("\n") else "\n"
        return text + sep + json.dumps(doc, ensure_ascii=False) + "\n"
    if fmt == "yaml":
        if not isinstance(yaml.safe_load(text), list):
            raise ProductionRowError("rows can be added to a YAML file whose top level is a list only")
        sep = "" if text.endswith("\n") else "\n"
        return text + sep + _yaml_rows([doc])
    end = text.rstrip().rfind("]")
    if not text.lstrip().startswith("[") or end < 0:
        raise ProductionRowError("rows can be added to a JSON file holding an array of rows only")
    head = text[:end].rstrip()
    sep = "" if head.endswith("[") else ","
    return f"{head}{sep}\n  {json.dumps(doc, ensure_ascii=False)}\n]\n"


@dataclass(frozen=True)
class GoldenAdd:
    """What an add did to the golden file, so that it can be taken back (the review UI's undo):
    the file's bytes before (None: there was no file) and the bytes written."""

    check: GoldenCheck
    before: bytes | None
    after: bytes


def add_production_row(
    golden: Path,
    row: GoldenRow,
    *,
    query_types: Sequence[str] = DEFAULT_QUERY_TYPES,
) -> GoldenCheck:
    """Append `row` to the golden file (created if missing) when the file with it validates and
    holds no row of the same trace or query; else ProductionRowError and nothing written."""
    return append_production_row(golden, row, query_types=query_types).check


def append_production_row(
    golden: Path,
    row: GoldenRow,
    *,
    query_types: Sequence[str] = DEFAULT_QUERY_TYPES,
) -> GoldenAdd:
    """`add_production_row`, saying what the file held before and what was written. Read, check
    and rename happen under the golden file's lock (`monitor.plumbing.files.locked`): two writers at once
    (two `golden add`s, a reviewer's `g`) each add their row, none overwrites the other's."""
    try:
        with locked(golden):
            return _append(golden, row, query_types)
    except OSError as exc:  # the lock file cannot be made (a read-only directory)
        raise ProductionRowError(f"cannot lock {golden}: {exc.strerror or exc}; nothing added") from None


def _append(golden: Path, row: GoldenRow, query_types: Sequence[str]) -> GoldenAdd:
    try:
        before: bytes | None = golden.read_bytes()
    except FileNotFoundError:
        before = None
    except OSError as exc:
        raise ProductionRowError(f"cannot read {golden}: {exc}") from None
    try:
        text = "" if before is None else before.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProductionRowError(f"cannot read {golden}: {exc}") from None
    text = text.replace("\r\n", "\n").replace("\r", "\n")  # as a text read would
    fmt = golden_format(golden, text)
    raw, syntax = parse_golden(text, fmt) if text.strip() else ([], [])
    if syntax:
        raise ProductionRowError(f"{golden} does not parse: nothing added", syntax)
    existing = validate(raw, query_types=query_types)
    locations: dict[str, str] = {}
    for r in raw:
        if isinstance(r.data, dict) and isinstance(r.data.get("id"), str):
            locations.setdefault(r.data["id"], r.location)
    dup = _duplicate(existing, locations, row)
    if dup is not None:
        raise ProductionRowError(f"duplicate: {dup}; nothing added")
    new_text = _appended(text, fmt, row.model_dump(mode="json", exclude_none=True))
    new_raw, new_syntax = parse_golden(new_text, fmt)
    check = validate(new_raw, query_types=query_types)
    check.errors[:0] = new_syntax
    if not check.ok:
        raise ProductionRowError(f"{golden} with the row does not validate: nothing added", check.errors)
    after = new_text.encode("utf-8")
    try:
        write_atomic(golden, after)
    except OSError as exc:
        raise ProductionRowError(f"cannot write {golden}: {exc.strerror or exc}; nothing added") from None
    check.path = str(golden)
    return GoldenAdd(check, before, after)
