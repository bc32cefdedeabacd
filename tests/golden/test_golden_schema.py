"""Golden files: the three formats, errors with line numbers, warnings, `golden validate`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from monitor.cli.golden import register
from monitor.demo.workload import load_corpus
from monitor.golden import GoldenRow, load_golden, validate

REPO = Path(__file__).resolve().parents[2]


def _rows(n: int = 25, unanswerable: int = 5) -> list[dict[str, Any]]:
    types = ["lookup", "comparison", "multi_hop", "exact_match"]
    out: list[dict[str, Any]] = [
        {
            "id": f"r{i}",
            "query": f"question {i}?",
            "query_type": types[i % 4],
            "relevant_chunk_ids": [f"c{i}"],
            "reference_answer": "x",
            "answerable": True,
        }
        for i in range(n - unanswerable)
    ]
    blank = {
        "query_type": "out_of_corpus",
        "relevant_chunk_ids": [],
        "reference_answer": "",
        "answerable": False,
    }
    out += [{"id": f"u{i}", "query": f"unknown {i}?", **blank} for i in range(unanswerable)]
    return out


def _cli() -> typer.Typer:
    app = typer.Typer()
    register(app)
    return app


def test_three_formats_load_the_same_rows(tmp_path: Path) -> None:
    import yaml

    rows = _rows()
    (tmp_path / "g.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    (tmp_path / "g.json").write_text(json.dumps(rows, indent=2))
    (tmp_path / "g.yaml").write_text(yaml.safe_dump(rows))
    (tmp_path / "g.txt").write_text(json.dumps({"rows": rows}))  # sniffed, rows under a key
    loaded = [load_golden(tmp_path / name) for name in ("g.jsonl", "g.json", "g.yaml", "g.txt")]
    for check in loaded:
        assert check.ok and not check.warnings, (check.path, check.errors, check.warnings)
        assert [r.model_dump() for r in check.rows] == [r.model_dump() for r in loaded[0].rows]
        assert len(check.sha256) == 64


def test_errors_carry_line_numbers_in_every_format(tmp_path: Path) -> None:
    rows = _rows()
    rows[3] = {**rows[3], "query": "  "}  # empty query
    rows[5] = {**rows[5], "id": "r0"}  # duplicate id
    rows[7] = {**rows[7], "relevant_chunk_ids": []}  # answerable without relevant chunks
    rows[9] = {**rows[9], "answerable": "yes"}  # bad type
    rows[11] = {**rows[11], "query_type": "poetry"}  # outside the allow-list: unbounded label
    jsonl = tmp_path / "bad.jsonl"
    jsonl.write_text("\n".join(json.dumps(r) for r in rows) + "\n{not json\n")
    check = load_golden(jsonl)
    got = {(e.location, e.message.split(":")[0]) for e in check.errors}
    assert ("line 4", "row 'r3'") in got
    assert any(
        e.location == "line 6" and "duplicate id 'r0' (first at line 1)" in e.message for e in check.errors
    )
    assert any(e.location == "line 8" and "no relevant_chunk_ids" in e.message for e in check.errors)
    assert any(e.location == "line 10" and e.message.startswith("answerable:") for e in check.errors)
    assert any(e.location == "line 12" and "'poetry'" in e.message for e in check.errors)
    assert any(e.location == "line 26" and "invalid JSON" in e.message for e in check.errors)

    array = tmp_path / "bad.json"
    array.write_text(json.dumps(rows, indent=1))  # one key per line: row i starts further down
    starts = [i + 1 for i, line in enumerate(array.read_text().splitlines()) if line == " {"]
    check = load_golden(array)
    assert any(
        e.location == f"line {starts[9]}" and e.message.startswith("answerable:") for e in check.errors
    )

    import yaml

    y = tmp_path / "bad.yaml"
    y.write_text(yaml.safe_dump(rows, sort_keys=False))
    starts = [i + 1 for i, line in enumerate(y.read_text().splitlines()) if line.startswith("- ")]
    check = load_golden(y)
    assert any(
        e.location == f"line {starts[9]}" and e.message.startswith("answerable:") for e in check.errors
    )


def test_warnings() -> None:
    check = validate(_rows(n=12, unanswerable=0))
    assert check.ok
    text = " | ".join(str(w) for w in check.warnings)
    assert (
        "only 12 rows" in text and "no unanswerable rows" in text and "query_type lookup: only 3 rows" in text
    )


def test_graded_relevance() -> None:
    row = GoldenRow.model_validate({**_rows()[0], "relevant_chunk_ids": ["a", "b"], "grades": {"a": 3}})
    assert row.relevance() == {"a": 3, "b": 1}
    bad = validate([{**_rows()[0], "grades": {"zz": 2}}])
    assert any("grades for chunks not in relevant_chunk_ids" in e.message for e in bad.errors)


def test_golden_validate_cli(tmp_path: Path) -> None:
    runner = CliRunner()
    ok = runner.invoke(_cli(), ["golden", "validate", str(REPO / "examples" / "golden.jsonl")])
    assert ok.exit_code == 0, ok.output
    assert "111 rows OK" in ok.output
    rows = _rows()
    rows[2] = {**rows[2], "id": "r1"}
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(json.dumps(r) for r in rows))
    result = runner.invoke(_cli(), ["golden", "validate", str(bad)])
    assert result.exit_code == 2
    assert "line 3: duplicate id 'r1' (first at line 2)" in result.output
    missing = runner.invoke(_cli(), ["golden", "validate", str(tmp_path / "nope.jsonl")])
    assert missing.exit_code == 2 and "cannot read" in missing.output


def test_one_row_is_one_row_not_one_rows(tmp_path: Path) -> None:
    one = tmp_path / "one.jsonl"
    one.write_text(json.dumps(_rows()[0]) + "\n")
    result = CliRunner().invoke(_cli(), ["golden", "validate", str(one)])
    assert result.exit_code == 0, result.output
    assert f"{one}: 1 row OK (0 unanswerable" in result.output
    assert "only 1 row: fewer than 20" in result.output and "only 1 row (< 5)" in result.output
    assert "1 rows" not in result.output


def test_a_yaml_error_names_the_file_and_line_not_a_unicode_string(tmp_path: Path) -> None:
    """PyYAML's own message says `in "<unicode string>", line 2`: of which file, the user is not told."""
    golden = tmp_path / "golden.yaml"
    golden.write_text("- id: a\n  query: [what\n- id: b\n")
    result = CliRunner().invoke(_cli(), ["golden", "validate", str(golden)])
    assert result.exit_code == 2
    assert f"{golden}: line 3, column 5: invalid YAML: expected ',' or ']'" in result.output
    assert "<unicode string>" not in result.output
    config = tmp_path / "replay.yaml"
    config.write_text("k: 5\nrows: [a\nb: 1\n")
    good = tmp_path / "golden.jsonl"
    good.write_text("\n".join(json.dumps(r) for r in _rows()))
    result = CliRunner().invoke(
        _cli(), ["replay", "--golden", str(good), "--target", "http://127.0.0.1:9/q", "--config", str(config)]
    )
    assert result.exit_code == 2
    assert f"config {config}, line 3, column 2: invalid YAML" in result.output, result.output
    assert "<unicode string>" not in result.output


def test_example_golden_set_is_the_corpus() -> None:
    """examples/golden.jsonl: every corpus question as its golden row, enough of each type."""
    check = load_golden(REPO / "examples" / "golden.jsonl")
    assert check.ok and not check.warnings, check.warnings
    corpus = load_corpus()
    want = {q.id: q.golden_row() for q in corpus.questions}
    optional = {
        "grades", "source", "license", "relevant_chunks", "trace_id", "added_on", "content_controls",
        "difficulty",
    }  # fmt: skip
    got = {r.id: r.model_dump(exclude=optional) for r in check.rows}
    assert got == want
    # The oracle baseline's context: every relevant chunk's text, as the corpus has it.
    for r in check.rows:
        context = r.oracle_context()
        assert context is not None, r.id
        assert [(c.id, c.content) for c in context] == [
            (cid, corpus.chunks[cid].text) for cid in r.relevant_chunk_ids
        ]
    counts: dict[str, int] = {}
    for r in check.rows:
        counts[r.query_type] = counts.get(r.query_type, 0) + 1
        assert r.license and r.source
    assert len(check.rows) >= 40
    for qtype in ("lookup", "comparison", "multi_hop", "exact_match", "out_of_corpus"):
        assert counts[qtype] >= 5, qtype
    assert (REPO / "examples" / "GOLDEN-NOTES.md").exists()


@pytest.mark.parametrize("data", ["[1, 2]", '{"rows": 3}', "- a\n- b\n", "[{}]"])
def test_rows_of_the_wrong_shape(tmp_path: Path, data: str) -> None:
    f = tmp_path / "g.txt"
    f.write_text(data)
    assert not load_golden(f).ok
