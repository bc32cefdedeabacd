"""The samples topic's message: what the ingest stage writes, the judge stage reads back."""

from __future__ import annotations

import json

from monitor.contracts.model import Chunk, RagRecord
from monitor.contracts.results import ResultLine, encode_result, result_line
from monitor.contracts.samples import decode_sample, encode_sample


def record(query: str = "Wie hoch ist die Zugspitze?") -> RagRecord:
    text = "Die Zugspitze ist 2962 m hoch — 日本語も。".encode()
    chunks = [Chunk("c1", None, 0.91, text), Chunk("c2", "x", None)]
    start = 1_800_000_000_500_000_000
    return RagRecord("ab" * 16, "cd" * 8, "svc", query, "lookup", chunks, "2962 m", "m1", start)


def test_a_sample_reads_back_as_the_record_it_carries() -> None:
    value = encode_sample(record(), 0.05, "svc", "span", 1_800_000_001.25)
    assert "日本語".encode() in value  # UTF-8 as is, not escaped
    msg, back = decode_sample(value)
    assert (msg.inclusion_probability, msg.service_label, msg.query_type_source) == (0.05, "svc", "span")
    assert msg.sampled_at == 1_800_000_001.25
    assert back.query == "Wie hoch ist die Zugspitze?" and back.answer == "2962 m" and back.model == "m1"
    assert [(c.id, c.content, c.score) for c in back.chunks] == [
        ("c1", "Die Zugspitze ist 2962 m hoch — 日本語も。", 0.91),
        ("c2", "x", None),
    ]
    assert back.start_ns == 1_800_000_000_500_000_000


def test_text_that_is_not_valid_utf8_is_still_written() -> None:
    """A lone surrogate (a JSON span's escape can carry one) is written escaped, as JSON allows."""
    value = encode_sample(record("half a pair: \ud800"), 0.5, "svc", "rules", 1_800_000_001.0)
    assert json.loads(value)["query"] == "half a pair: \ud800"


def test_the_release_travels_raw_and_bounded_and_older_samples_read_without_it() -> None:
    rec = record()
    rec.release = "build-81723"
    msg, back = decode_sample(encode_sample(rec, 0.5, "svc", "span", 1.0, release_label="other"))
    assert (msg.release, msg.release_label, back.release) == ("build-81723", "other", "build-81723")
    old = json.loads(encode_sample(record(), 0.5, "svc", "span", 1.0))
    for key in ("release", "release_label"):
        old.pop(key, None)
    msg, back = decode_sample(json.dumps(old).encode())
    assert (msg.release, msg.release_label, back.release) == (None, None, "")


def test_the_stratum_travels_to_the_results_line_and_older_lines_read_as_one() -> None:
    """What the sampler sampled a record as reaches the drift stage on the results line; a sample
    or line written before strata has none, and a value outside the set reads as none."""
    msg, rec = decode_sample(encode_sample(record(), 0.5, "svc", "span", 1.0, stratum="no_chunks"))
    assert msg.stratum == "no_chunks"
    line = ResultLine.model_validate_json(
        encode_result(result_line(rec, sampling_weight=2.0, query_type_source="span", stratum=msg.stratum))
    )
    assert line.stratum == "no_chunks"
    msg, rec = decode_sample(encode_sample(record(), 0.5, "svc", "span", 1.0))
    assert msg.stratum is None and "stratum" not in json.loads(
        encode_sample(record(), 0.5, "svc", "span", 1.0)
    )
    old = encode_result(result_line(rec, sampling_weight=2.0, query_type_source="span"))
    assert b"stratum" not in old and ResultLine.model_validate_json(old).stratum is None
    odd = json.loads(old) | {"stratum": "x" * 10_000}
    assert ResultLine.model_validate_json(json.dumps(odd)).stratum is None
