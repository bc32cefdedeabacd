"""`rag-monitor review` driven headless through textual's pilot at 80x24: keys pressed, then the
labels file and what the screen shows asserted."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from review_cases import (
    BERGEN,
    OSLO,
    SIZE,
    TROMSO,
    judged,
    long_record,
    many_chunks_record,
    queue_lines,
    screen,
    write_queue,
)
from typer.testing import CliRunner

from monitor.cli import app as cli_app
from monitor.contracts.results import encode_result
from monitor.golden import load_golden
from monitor.ingest.decode import flat_record
from monitor.judge.calibrate import load_labels
from monitor.review.app import ReviewApp
from monitor.review.labels import LabelsFile
from monitor.review.queue import read_queue
from monitor.review.render import QUOTE_STYLE, SELECTED_QUOTE_STYLE
from monitor.review.session import ReviewSession


def labels_of(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def make_app(queue: Path, labels: Path, golden: Path | None = None) -> ReviewApp:
    return ReviewApp(ReviewSession(read_queue(queue), LabelsFile(labels), golden=golden), source=str(queue))


@pytest.fixture
def queue(tmp_path: Path) -> Path:
    return write_queue(tmp_path / "queue.jsonl")


async def test_a_record_labelled_with_keys_is_a_line_calibrate_reads(queue: Path, tmp_path: Path) -> None:
    labels = tmp_path / "labels.jsonl"
    app = make_app(queue, labels)
    async with app.run_test(size=SIZE) as pilot:
        shown = await screen(pilot)
        assert "0 of 3 labelled" in shown
        assert "reasons: boundary, uniform" in shown
        assert "When was the Oslo office opened?" in shown
        assert "▶1. The Oslo office opened in 1999." in shown
        await pilot.press("s", "n", "a", "enter")
        shown = await screen(pilot)
        assert "1 of 3 labelled" in shown
        assert "Who leads the Bergen office?" in shown  # the next record
        assert f"saved {OSLO}" in shown

    (line,) = labels_of(labels)
    assert line["trace_id"] == OSLO
    assert line["labels"] == {"faithful": [True, False], "hallucinated": False, "answerable": True}
    assert [(c["text"], c["label"], c["judge"]) for c in line["claims"]] == [
        ("The Oslo office opened in 1999.", "supported", "supported"),
        ("It has 400 staff.", "not_in_context", "not_in_context"),
    ]
    assert line["refusal_warranted"] is False
    assert line["review"] == {
        "reasons": ["boundary", "uniform"], "uniform": True, "weight": 12.5, "queued_at": 1764600000.0,
    }  # fmt: skip
    assert isinstance(line["reviewed_at"], float)
    # calibrate reads it: the record re-judged, the per-claim labels aligned with the judge's split
    (item,) = load_labels(labels, flat_record)
    assert item.record.trace_id == OSLO
    assert item.labels.claims_supported == (True, False)
    assert item.labels.faithful is False
    assert item.labels.answerable is True


async def test_a_save_waits_for_every_claim_and_answerable(queue: Path, tmp_path: Path) -> None:
    labels = tmp_path / "labels.jsonl"
    async with make_app(queue, labels).run_test(size=SIZE) as pilot:
        await pilot.press("s", "enter")
        shown = await screen(pilot)
        assert "still to label: claim 2; answerable" in shown
        assert "0 of 3 labelled" in shown
    assert not labels.exists()


async def test_unanswerable_and_unrefused_is_hallucinated_and_refusal_follows(
    queue: Path, tmp_path: Path
) -> None:
    labels = tmp_path / "labels.jsonl"
    async with make_app(queue, labels).run_test(size=SIZE) as pilot:
        # Oslo: not answerable (a, a: yes then no); the answer does not refuse (the judge's reading)
        await pilot.press("c", "n", "a", "a", "enter")
        # Bergen: not answerable, but the reviewer says the answer hedges (f) and no refusal was due (w)
        await pilot.press("s", "a", "a", "f", "w", "enter")
    oslo, bergen = labels_of(labels)
    assert oslo["labels"]["hallucinated"] is True
    assert oslo["refusal_warranted"] is True  # follows "not answerable"
    assert oslo["answer_admits_uncertainty"] is False
    assert bergen["labels"]["hallucinated"] is False
    assert bergen["answer_admits_uncertainty"] is True
    assert bergen["refusal_warranted"] is False


async def test_undo_takes_back_a_save_then_a_label(queue: Path, tmp_path: Path) -> None:
    labels = tmp_path / "labels.jsonl"
    async with make_app(queue, labels).run_test(size=SIZE) as pilot:
        await pilot.press("s", "s", "a", "enter")
        assert len(labels_of(labels)) == 1
        await pilot.press("u")
        shown = await screen(pilot)
        assert labels.read_text() == ""  # the line is cut from the file
        assert "0 of 3 labelled" in shown
        assert "When was the Oslo office opened?" in shown  # back on the record, labels kept
        assert "answerable: yes" in shown
        await pilot.press("u")  # the answerable mark
        assert "answerable: ?" in (await screen(pilot))
        await pilot.press("u", "n", "a", "enter")  # second claim relabelled
    (line,) = labels_of(labels)
    assert line["labels"]["faithful"] == [True, False]


async def test_restart_resumes_after_the_labelled_records(queue: Path, tmp_path: Path) -> None:
    labels = tmp_path / "labels.jsonl"
    async with make_app(queue, labels).run_test(size=SIZE) as pilot:
        await pilot.press("s", "s", "a", "enter", "q")
    async with make_app(queue, labels).run_test(size=SIZE) as pilot:
        shown = await screen(pilot)
        assert "1 of 3 labelled" in shown
        assert "resumed: 1 record already labelled" in shown
        assert "Who leads the Bergen office?" in shown
        await pilot.press("x")  # skip Bergen: Tromsø next, Bergen comes round again
        assert "Does the Tromsø office have parking?" in (await screen(pilot))
        await pilot.press("a", "a", "enter")
        assert "Who leads the Bergen office?" in (await screen(pilot))
        await pilot.press("s", "a", "enter")
        assert "All 3 queued records labelled" in (await screen(pilot))
    assert [line["trace_id"] for line in labels_of(labels)] == [OSLO, TROMSO, BERGEN]


@pytest.fixture
def bad_queue(tmp_path: Path) -> Path:
    return write_queue(tmp_path / "queue.jsonl", bad=True)


async def test_bad_queue_lines_are_counted_and_shown(bad_queue: Path, tmp_path: Path) -> None:
    queue = bad_queue
    labels = tmp_path / "labels.jsonl"
    labels.write_text('{"broken\n')
    async with make_app(queue, labels).run_test(size=SIZE) as pilot:
        shown = await screen(pilot)
        assert "0 of 3 labelled" in shown
        assert "bad queue lines: 3 (1 no trace id, 1 not JSON, 1 another v)" in shown
        assert "1 unreadable line in the labels file" in shown
        await pilot.press("s", "s", "a", "enter")
    assert json.loads(labels.read_text().splitlines()[1])["trace_id"] == OSLO


async def test_a_labels_file_that_cannot_be_written_is_said_not_crashed_on(
    queue: Path, tmp_path: Path
) -> None:
    labels = tmp_path / "labels.jsonl"
    async with make_app(queue, labels).run_test(size=SIZE) as pilot:
        labels.mkdir()  # meanwhile, a directory where the file should be
        await pilot.press("s", "s", "a", "enter")
        shown = await screen(pilot)
        assert "error: cannot write" in shown
        assert "0 of 3 labelled" in shown
        assert "When was the Oslo office opened?" in shown  # still on the record, labels kept
        assert "answerable: yes" in shown


@pytest.fixture
def long_queue(tmp_path: Path) -> Path:
    path = tmp_path / "long.jsonl"
    path.write_bytes(b"".join(encode_result(line) for line in judged([long_record()])))
    return path


async def test_the_selected_claim_stays_in_view_on_a_short_screen(long_queue: Path, tmp_path: Path) -> None:
    queue = long_queue
    async with make_app(queue, tmp_path / "labels.jsonl").run_test(size=SIZE) as pilot:
        await pilot.press(*"s" * 10)
        shown = await screen(pilot)
        assert "▶11. The office number 10 opened in 2000." in shown
        assert "When did the offices open?" not in shown  # scrolled past the question
        await pilot.press(*["up"] * 10)
        assert "When did the offices open?" in await screen(pilot)


@pytest.fixture
def many_chunks_queue(tmp_path: Path) -> Path:
    """Two records of 23 chunks each (what a RAG service retrieving 20+ gives)."""
    path = tmp_path / "chunks.jsonl"
    records = [many_chunks_record(OSLO), many_chunks_record(BERGEN)]
    path.write_bytes(b"".join(encode_result(line) for line in judged(records)))
    return path


def keys_line(shown: str) -> str:
    """The key help's last line, which says which chunks the number keys are on."""
    return shown.splitlines()[-1]


async def test_chunks_past_the_tenth_are_marked_by_paging_the_number_keys(
    many_chunks_queue: Path, tmp_path: Path
) -> None:
    labels = tmp_path / "labels.jsonl"
    async with make_app(many_chunks_queue, labels).run_test(size=SIZE) as pilot:
        shown = await screen(pilot)
        assert keys_line(shown).startswith("1-0: chunks 1-10  ] [ next/prev ten")
        assert "(1-0 toggle #1-#10 of 23, ] [ other tens" in shown
        await pilot.press("3", "right_square_bracket")
        shown = await screen(pilot)
        assert "1-0: chunks 11-20 of 23" in shown  # the status line
        assert keys_line(shown).startswith("1-0: chunks 11-20 ")
        assert "[ ] 1 #11 k11 (0.89)" in shown  # scrolled to the chunks the keys are on now
        await pilot.press("2")
        assert "[x] 2 #12 k12 (0.88)" in (await screen(pilot))
        await pilot.press("right_square_bracket", "3")
        shown = await screen(pilot)
        assert keys_line(shown).startswith("1-0: chunks 21-23 ")
        assert "[x] 3 #23 k23 (0.77)" in shown
        await pilot.press("right_square_bracket")  # past the last ten: said, the keys stay
        shown = await screen(pilot)
        assert "no more chunks: this record has 23" in shown
        assert keys_line(shown).startswith("1-0: chunks 21-23 ")
        await pilot.press("4")
        assert "no chunk 24" in (await screen(pilot))
        await pilot.press("s", "a", "enter")
        shown = await screen(pilot)
        assert f"saved {OSLO}" in shown
        assert keys_line(shown).startswith("1-0: chunks 1-10 ")  # a new record: the first ten again
        await pilot.press("1", "s", "a", "enter")
    oslo, bergen = labels_of(labels)
    assert oslo["relevant_chunk_ids"] == ["k3", "k12", "k23"]
    assert bergen["relevant_chunk_ids"] == ["k1"]


async def test_undo_of_a_chunk_mark_returns_to_its_ten(many_chunks_queue: Path, tmp_path: Path) -> None:
    labels = tmp_path / "labels.jsonl"
    app = make_app(many_chunks_queue, labels)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("right_square_bracket", "right_square_bracket", "3", "left_square_bracket")
        shown = await screen(pilot)
        assert keys_line(shown).startswith("1-0: chunks 11-20 ")
        record = app.query_one("#record").content.plain
        assert "[x] - #23 k23 (0.77)" in record  # not on the keys now: its rank only
        assert "[ ] 3 #13 k13 (0.87)" in record
        await pilot.press("left_square_bracket", "left_square_bracket")
        assert "1-0 are on the first chunks already" in (await screen(pilot))
        await pilot.press("u")
        shown = await screen(pilot)
        assert keys_line(shown).startswith("1-0: chunks 21-23 ")
        assert "[ ] 3 #23 k23 (0.77)" in shown
        await pilot.press("s", "a", "enter")
    (oslo,) = labels_of(labels)
    assert oslo["relevant_chunk_ids"] == []


async def test_the_judges_quotes_are_marked_in_the_chunks(queue: Path, tmp_path: Path) -> None:
    app = make_app(queue, tmp_path / "labels.jsonl")
    async with app.run_test(size=SIZE) as pilot:
        shown = await screen(pilot)
        assert "The Oslo office opened in 1999 after a long search.‹1› It has 40 staff." in shown
        content = app.query_one("#record").content
        styled = {content.plain[s.start : s.end]: str(s.style) for s in content.spans}
        assert styled["The Oslo office opened in 1999 after a long search."] == SELECTED_QUOTE_STYLE
        await pilot.press("down")  # claim 2 selected: claim 1's quote back to the plain mark
        content = app.query_one("#record").content
        styled = {content.plain[s.start : s.end]: str(s.style) for s in content.spans}
        assert styled["The Oslo office opened in 1999 after a long search."] == QUOTE_STYLE
        assert "▶2. It has 400 staff." in (await screen(pilot))


async def test_a_note_is_typed_in_and_the_claim_keys_do_not_fire_meanwhile(
    queue: Path, tmp_path: Path
) -> None:
    labels = tmp_path / "labels.jsonl"
    async with make_app(queue, labels).run_test(size=SIZE) as pilot:
        await pilot.press("e", *"says 400 staff", "enter")
        assert "note: says 400 staff" in (await screen(pilot))
        await pilot.press("e", *"xyz", "escape")  # cancelled
        shown = await screen(pilot)
        assert "note: says 400 staff" in shown
        assert "you: ?" in shown  # the s typed in the note labelled nothing
        await pilot.press("s", "c", "a", "enter")
    (line,) = labels_of(labels)
    assert line["note"] == "says 400 staff"


async def test_g_adds_the_record_to_the_golden_set_and_a_second_time_says_duplicate(
    queue: Path, tmp_path: Path
) -> None:
    labels, golden = tmp_path / "labels.jsonl", tmp_path / "golden.jsonl"
    async with make_app(queue, labels, golden).run_test(size=SIZE) as pilot:
        await pilot.press("x", "1", "s", "a")  # Bergen: chunk b1 relevant, the claim supported
        assert "[x] 1 b1" in (await screen(pilot))
        await pilot.press("g")
        shown = await screen(pilot)
        assert "golden: row 'prod-00f067aa0ba902b7' added to golden.jsonl (1 row OK)" in shown
        assert "[in golden set]" in shown
        await pilot.press("g")
        assert "duplicate: trace" in (await screen(pilot))
    check = load_golden(golden)
    assert check.ok
    (row,) = check.rows
    assert row.trace_id == BERGEN
    assert row.relevant_chunk_ids == ["b1"]
    assert row.reference_answer == "Kari Nordmann leads the Bergen office."  # all claims supported
    assert row.source == "production"


async def test_u_takes_a_golden_add_back_out_and_removes_a_file_the_add_created(
    queue: Path, tmp_path: Path
) -> None:
    labels, golden = tmp_path / "labels.jsonl", tmp_path / "golden.jsonl"
    async with make_app(queue, labels, golden).run_test(size=SIZE) as pilot:
        await pilot.press("x", "1", "a", "g", "s")  # Bergen: into the golden set, then a claim label
        assert "[in golden set]" in (await screen(pilot))
        assert golden.exists()
        await pilot.press("u")  # the claim label first
        shown = await screen(pilot)
        assert "undone" in shown
        assert "[in golden set]" in shown
        await pilot.press("u")  # then the add
        shown = await screen(pilot)
        assert "golden: add undone, golden.jsonl removed (the add had created it)" in shown
        assert "[in golden set]" not in shown
        assert "[x] 1 b1" in shown  # the labels as they were at the add
        assert "answerable: yes" in shown
        assert not golden.exists()
        await pilot.press("g")  # and it can be added again
        assert "golden: row 'prod-00f067aa0ba902b7' added" in (await screen(pilot))
    (row,) = load_golden(golden).rows
    assert row.trace_id == BERGEN


async def test_u_restores_the_golden_file_byte_for_byte(queue: Path, tmp_path: Path) -> None:
    labels, golden = tmp_path / "labels.jsonl", tmp_path / "golden.jsonl"
    async with make_app(queue, labels, golden).run_test(size=SIZE) as pilot:
        await pilot.press("x", "1", "a", "g", "q")  # a file with Bergen's row
    before = golden.read_bytes().replace(b"\n", b"\r\n")  # as an editor on Windows leaves it
    golden.write_bytes(before)
    async with make_app(queue, labels, golden).run_test(size=SIZE) as pilot:
        await pilot.press("1", "a", "g")  # Oslo
        assert "golden: row 'prod-4bf92f3577b34da6' added to golden.jsonl (2 rows OK)" in (
            await screen(pilot)
        )
        assert golden.read_bytes() != before
        await pilot.press("u")
        shown = await screen(pilot)
        assert "golden: add undone, golden.jsonl as it was before" in shown
        assert "[in golden set]" not in shown
    assert golden.read_bytes() == before


async def test_u_leaves_a_golden_file_edited_since_the_add_and_says_so(queue: Path, tmp_path: Path) -> None:
    labels, golden = tmp_path / "labels.jsonl", tmp_path / "golden.jsonl"
    async with make_app(queue, labels, golden).run_test(size=SIZE) as pilot:
        await pilot.press("1", "a", "g")
        assert "added to golden.jsonl" in (await screen(pilot))
        edited = golden.read_text() + '{"id": "by-hand", "query": "Where is the Oslo office?"}\n'
        golden.write_text(edited)  # someone else's edit meanwhile
        await pilot.press("u")
        shown = await screen(pilot)
        assert "error: golden.jsonl was changed since the add, so it is left as it is" in shown
        assert "[in golden set]" in shown  # the row is still in the file
        await pilot.press("u")  # the add's step is spent: the next u takes back the mark before it
        assert "answerable: ?" in (await screen(pilot))
    assert golden.read_text() == edited  # the add's row and the edit, both kept
    assert OSLO in edited


async def test_g_without_golden_file_or_answerable_says_why(queue: Path, tmp_path: Path) -> None:
    async with make_app(queue, tmp_path / "labels.jsonl").run_test(size=SIZE) as pilot:
        await pilot.press("g")
        assert "no golden file: start with --golden FILE" in (await screen(pilot))
    golden = tmp_path / "golden.jsonl"
    golden.write_text("[not json\n")
    async with make_app(queue, tmp_path / "labels.jsonl", golden).run_test(size=SIZE) as pilot:
        await pilot.press("g")
        assert "mark answerable (a) first" in (await screen(pilot))
        await pilot.press("a", "r", *"(edited)", "enter", "g")  # a file that does not parse
        shown = await screen(pilot)
        assert "golden: golden.jsonl does not parse: nothing added" in shown
        assert "reference: (edited)" in shown


@pytest.fixture
def results(tmp_path: Path) -> Path:
    """A results file as the judge stage writes it: lines without `review`."""
    path = tmp_path / "results.jsonl"
    path.write_bytes(b"".join(encode_result(line) for line in judged()))
    return path


async def test_a_results_file_without_review_objects_is_a_queue_too(results: Path, tmp_path: Path) -> None:
    labels = tmp_path / "labels.jsonl"
    async with make_app(results, labels).run_test(size=SIZE) as pilot:
        assert "reasons: none" in (await screen(pilot))
        await pilot.press("s", "s", "a", "enter")
    (line,) = labels_of(labels)
    assert line["review"] is None


def test_the_command_refuses_two_sources_or_none_and_an_unreadable_queue(tmp_path: Path) -> None:
    runner = CliRunner()
    labels = str(tmp_path / "labels.jsonl")
    none = runner.invoke(cli_app, ["review", "--labels", labels])
    assert none.exit_code == 2
    both = runner.invoke(cli_app, ["review", "--labels", labels, "--queue", "q", "--topic", "t"])
    assert both.exit_code == 2
    missing = runner.invoke(cli_app, ["review", "--labels", labels, "--queue", str(tmp_path / "nope")])
    assert missing.exit_code == 2
    assert "cannot read" in missing.output


def test_the_screen_names_the_records_session_and_user() -> None:
    """A record from a conversation shows its session and user beside the query type (never as a
    label anywhere: they are per request); a record without them shows neither word."""
    from monitor.review.labels import Labelling
    from monitor.review.render import record_text

    (line, *_) = queue_lines()
    with_ids = line.model_copy(update={"session_id": "conv-42", "user_id": "u-7"})
    shown = record_text(with_ids, Labelling.start(with_ids), 0).plain
    assert "session conv-42 user u-7" in shown.splitlines()[0]
    plain = record_text(line, Labelling.start(line), 0).plain.splitlines()[0]
    assert "session" not in plain and "user" not in plain
