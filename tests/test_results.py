"""The results line: the judge stage writes one `ResultLine` per sample, and every reader (the drift
stage, `baseline pin`, tests) parses it; lines of today's layout, without `v`, and the older shapes
the readers always took read as before."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from monitor.contracts.model import Chunk, RagRecord
from monitor.contracts.results import ClaimLine, ResultLine, encode_result, result_line, unreadable_reason
from monitor.drift.reference import judged_values, retrieval_values
from monitor.judge.lexical import LexicalJudge

# Written by the judge stage before the line had a model (tests/judge/test_judge_query_type.py,
# test_sidecar_takes_the_judges_label_only_for_rule_typed_records): an LLM judge's label replaced
# the rules' one, and the answer cites its chunk.
TODAY = (
    '{"trace_id":"e125373fb081855b2232dbdfa7ab8e28","span_id":"f0d51d72c3bd0684","service":"svc","que'
    'ry":"Where was the founder of Acme born?","query_type":"multi_hop","chunks":[{"id":"c1","content'
    '":"Ann, who founded Acme, was born in Oslo.","score":null}],"answer":"Ann was born in Oslo [c1].'
    '","model":null,"start":1796149136.8045864,"end":1796149136.8046758,"replay":false,"sampling_weig'
    'ht":1.0,"query_type_source":"judge","record_query_type":"lookup","judge_query_type":"multi_hop",'
    '"claims":[{"text":"Ann was born in Oslo.","verdict":"not_in_context","supported":false,"chunk_id'
    's":[],"evidence":[],"note":null,"cited":["c1"]}],"faithfulness":0.0,"unsupported_claims":1,"asse'
    'rts_unsupported":true,"evidence_mismatches":0,"claim_coverage":1.0,"coverage_repair":null,"answe'
    'rable_from_context":true,"refuses":false,"hedges":false,"answer_admits_uncertainty":false,"hallu'
    'cinated":false,"false_refusal":false,"answer_relevance":3,"context_relevance":3.0,"chunk_relevan'
    'ce":[{"chunk_id":"c1","relevance":3}],"citations":{"count":1,"supported":0,"unsupported":1,"unre'
    'solved":0,"unchecked":0,"precision":0.0,"items":[{"ref":"c1","chunk_id":"c1","sentence":0,"verdi'
    'ct":"unsupported"}]},"self_judged":false,"judge":{"backend":"anthropic","model":"claude-haiku-4-'
    '5","outcome":"ok","requests":1,"latency_s":0.052658,"tokens":{"input":1200,"output":150,"cache_r'
    'ead":900,"cache_write":0},"cost_usd":0.00204},"error":null,"raw":{"claims":[{"text":"Ann was bor'
    'n in Oslo.","verdict":"not_in_context","quotes":[]}],"answerable_from_context":true,"refuses":fa'
    'lse,"hedges":false,"answer_relevance":3,"context_relevance":[3],"query_type":"multi_hop"}}'
)


def test_today_s_line_reads_and_is_written_back_byte_for_byte() -> None:
    line = ResultLine.model_validate_json(TODAY)
    assert line.v == 1 and "v" not in line.model_fields_set  # no `v` yet: version 1 all the same
    assert (line.query_type, line.query_type_source, line.ingest_query_type) == (
        "multi_hop",
        "judge",
        "lookup",
    )
    assert line.judged and line.refusal is False and line.judge is not None
    assert (line.judge.backend, line.judge.tokens and line.judge.tokens.cache_read) == ("anthropic", 900)
    assert line.claims is not None and line.claims[0].cited == ["c1"] and line.claims[0].evidence == []
    assert line.citations is not None and line.citations["precision"] == 0.0
    assert encode_result(line) == TODAY.encode() + b"\n"
    assert judged_values(line) == (
        "multi_hop",
        1.0,
        [
            ("faithfulness", 0.0),
            ("hallucination", 0.0),
            ("refusal", 0.0),
            ("false_refusal", 0.0),
            ("relevance", 3.0),
            ("context_relevance", 3.0),
        ],
    )
    assert retrieval_values(line) == ("lookup", 1.0, 1, None)


def record() -> RagRecord:
    chunks = [Chunk("c1", "Die Zugspitze ist 2962 m hoch — 日本語も。", 0.91), Chunk("c2", "x", 2)]
    return RagRecord(
        "ab" * 16,
        "cd" * 8,
        "svc",
        "Wie hoch ist die Zugspitze?",
        "lookup",
        chunks,
        "2962 m.",
        "m1",
        1_800_000_000_500_000_000,
        1_800_000_001_000_000_000,
    )


async def test_the_line_written_is_the_old_merge_with_v_first() -> None:
    """What the judge stage wrote before (the record, the sample's fields, then the judgement's,
    as `json` writes them) with `v` in front: dashboards and readers of the bytes see no change."""
    rec = record()
    judgement = await LexicalJudge().judge(rec)
    old = rec.to_json_dict() | {
        "sampling_weight": 20.0,
        "query_type_source": "rules",
        "clipped": {"chunks_dropped": 1},
    }
    old |= {"record_query_type": "lookup"} | judgement.to_json_dict() | {"repeat_disagreements": []}
    written = encode_result(
        result_line(
            rec,
            sampling_weight=20.0,
            query_type_source="rules",
            clipped={"chunks_dropped": 1},
            record_query_type="lookup",
            judgement=judgement,
            repeat_disagreements=[],
        )
    )
    assert (
        written
        == b'{"v":1,' + json.dumps(old, ensure_ascii=False, separators=(",", ":")).encode()[1:] + b"\n"
    )
    assert "日本語".encode() in written and b'"score":2}' in written  # UTF-8 as is; an int stays one
    skipped = encode_result(
        result_line(rec, sampling_weight=20.0, query_type_source="span", judge_skipped="no_answer")
    )
    old = rec.to_json_dict() | {
        "sampling_weight": 20.0,
        "query_type_source": "span",
        "judge_skipped": "no_answer",
    }
    assert (
        skipped
        == b'{"v":1,' + json.dumps(old, ensure_ascii=False, separators=(",", ":")).encode()[1:] + b"\n"
    )
    assert judged_values(ResultLine.model_validate_json(skipped)) == "not judged"


async def test_every_field_the_record_and_judgement_write_is_in_the_model() -> None:
    """A field added to `Judgement.to_json_dict` (or the record's) and not to `ResultLine` would
    be dropped from every line without a word."""
    judgement = await LexicalJudge().judge(record())
    written = set(record().to_json_dict()) | set(judgement.to_json_dict()) | {"judge_query_type"}
    assert written <= set(ResultLine.model_fields)
    claim = judgement.to_json_dict()["claims"][0] | {"cited": []}
    assert set(claim) <= set(ClaimLine.model_fields)


def test_lines_before_refusals_and_hedges_were_apart_count_admitted_uncertainty() -> None:
    old = {
        "query_type": "lookup",
        "sampling_weight": 2,
        "faithfulness": None,
        "hallucinated": False,
        "answer_admits_uncertainty": True,
        "false_refusal": False,
        "answer_relevance": None,
        "judge": {"outcome": "ok"},
    }
    line = ResultLine.model_validate_json(json.dumps(old))
    assert judged_values(line) == (
        "lookup",
        2.0,
        [("hallucination", 0.0), ("refusal", 1.0), ("false_refusal", 0.0)],
    )
    # Once `refuses` is there it is the refusal, even null (a hedge is no refusal).
    assert ResultLine.model_validate(old | {"refuses": False}).refusal is False
    assert ResultLine.model_validate(old | {"refuses": None}).refusal is None


def test_a_relabelled_line_before_record_query_type_has_no_retrieval_slice() -> None:
    old = json.dumps(
        {"query_type": "multi_hop", "query_type_source": "judge", "sampling_weight": 1.0, "chunks": []}
    )
    assert retrieval_values(ResultLine.model_validate_json(old)) == "query type set by the judge"
    older = json.dumps(
        {"query_type": "lookup", "sampling_weight": 1.0, "chunks": [{"id": "a", "score": 0.5}]}
    )
    assert retrieval_values(ResultLine.model_validate_json(older)) == ("lookup", 1.0, 1, 0.5)  # no source


def test_golden_replay_lines_and_lines_without_context_relevance() -> None:
    line = {"query_type": "lookup", "sampling_weight": 1.0, "hallucinated": True, "judge": {"outcome": "ok"}}
    assert judged_values(ResultLine.model_validate(line | {"replay": True})) == "golden replay"
    assert retrieval_values(ResultLine.model_validate(line | {"replay": True})) == "golden replay"
    assert judged_values(ResultLine.model_validate(line)) == ("lookup", 1.0, [("hallucination", 1.0)])
    assert retrieval_values(ResultLine.model_validate(line)) == "no chunks list"


def test_a_value_of_the_wrong_type_reads_as_absent_and_the_rest_is_read() -> None:
    line = {
        "query_type": "lookup",
        "sampling_weight": 1.0,
        "hallucinated": 1,
        "false_refusal": False,
        "faithfulness": "0.5",
        "judge": {"outcome": "ok"},
        "chunks": [{"id": "a", "score": "high"}, 7],
    }
    read = ResultLine.model_validate(line)
    assert judged_values(read) == ("lookup", 1.0, [("false_refusal", 0.0)])
    assert retrieval_values(read) == ("lookup", 1.0, 2, None)
    assert judged_values(ResultLine.model_validate(line | {"sampling_weight": True})) == "bad sampling weight"
    assert judged_values(ResultLine.model_validate(line | {"judge": "ok"})) == "not judged"


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ('{"v": 2, "query_type": "lookup"}', "results line version other than 1"),
        ("[1, 2]", "not a JSON object"),
        ("not json", "not a JSON object"),
        ("", "not a JSON object"),
    ],
)
def test_what_is_no_results_line_does_not_validate(text: str, reason: str) -> None:
    with pytest.raises(ValidationError) as caught:
        ResultLine.model_validate_json(text)
    assert unreadable_reason(caught.value) == reason


def test_the_release_label_is_written_after_the_record_and_older_lines_have_none() -> None:
    rec = record()
    rec.release = "v1.4.2"
    written = encode_result(result_line(rec, sampling_weight=2.0, query_type_source="span"))
    doc = json.loads(written)
    assert doc["release"] == "v1.4.2"
    assert list(doc).index("release") == list(doc).index("replay") + 1
    assert ResultLine.model_validate_json(written).release == "v1.4.2"
    assert ResultLine.model_validate_json(TODAY).release is None
