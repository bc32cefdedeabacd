"""The rule-based query type fallback: the cues it knows, and that it stays in the allow-list."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from monitor.contracts.slices import DEFAULT_QUERY_TYPES
from monitor.ingest.classify import RULE_TYPES, QueryClassifier, classify_query


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("postgres vs mysql for analytics", "comparison"),
        ("Compare BM25 and dense retrieval", "comparison"),
        ("What is the difference between TCP and UDP?", "comparison"),
        ("Which is larger, the Rhine or the Danube?", "comparison"),
        ("Is Rust faster than Go for this workload?", "comparison"),
        ("Between the 2022 and 2023 reports, did revenue guidance change?", "comparison"),
        ("Who is the CEO of the company that acquired GitHub?", "multi_hop"),
        ("What is the capital of the country that hosted the 2016 Olympics?", "multi_hop"),
        ("Install the package and then run the migration: what breaks?", "multi_hop"),
        ("Which firm not only makes phones but also runs an app store?", "multi_hop"),
        ("What does error code E1234 mean?", "exact_match"),
        ("Is version 2.3.1 affected by CVE-2021-44228?", "exact_match"),
        ('What does "connection reset by peer" mean?', "exact_match"),
        ("Is a 10 ms timeout enough?", "exact_match"),
        ("What changed in commit 3f2a9c1b?", "exact_match"),
        ("Status of ticket JIRA-4521", "exact_match"),
        ("Can I upload 5 GB at once?", "exact_match"),
        ("Why did the deployment fail?", "abstractive"),
        ("How does the retriever rank chunks?", "abstractive"),
        ("Explain the assembly grace period", "abstractive"),
        ("Summarize the incident report", "abstractive"),
        ("When was the Eiffel Tower built?", "lookup"),
        ("Who wrote Hamlet?", "lookup"),
        ("How many moons does Mars have?", "lookup"),
        ("What are the top-10 movies of the decade?", "lookup"),  # "top-10" is not a code
        ("Tell me about the deadbeef facade", "lookup"),  # hex-looking words are not hashes
    ],
)
def test_rules(query: str, expected: str) -> None:
    assert classify_query(query) == expected


def test_mapped_to_the_allow_list() -> None:
    full = QueryClassifier(DEFAULT_QUERY_TYPES)
    assert full("postgres vs mysql") == "comparison"
    assert full("") == "unknown"
    assert full("   ") == "unknown"
    assert full(None) == "unknown"
    narrow = QueryClassifier(["lookup", "other", "unknown"])
    assert narrow("postgres vs mysql") == "other"
    assert narrow("When was it built?") == "lookup"
    bare = QueryClassifier(["lookup", "abstractive"])
    assert bare("postgres vs mysql") == "abstractive"  # no other/unknown: a fixed member
    with pytest.raises(ValueError):
        QueryClassifier([])


@given(st.text(max_size=300), st.lists(st.sampled_from([*RULE_TYPES, "other", "unknown"]), min_size=1))
def test_always_in_the_allow_list(query: str, allowed: list[str]) -> None:
    assert classify_query(query) in RULE_TYPES
    assert QueryClassifier(allowed)(query) in allowed


def test_long_queries_are_cut() -> None:
    assert classify_query("why " + "x" * 100_000) == "abstractive"


@pytest.mark.parametrize(
    "query", ["Anything other than Python?", "I would rather than not", "Who else is there?"]
)
def test_not_comparisons(query: str) -> None:
    assert classify_query(query) != "comparison"
