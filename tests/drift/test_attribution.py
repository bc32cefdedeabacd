"""Change attribution: the releases (and services) an alarm names are those over-represented among
the failing records since the change point against the records before it — a new release holding
the failures is named, a long-standing or the only release is not, nor a handful of records."""

from __future__ import annotations

import random

from monitor.drift import Detector, DriftPolicy
from monitor.drift.attribution import MIN_FAILING, ChangeAttribution, wilson_lower
from monitor.outputs.alerts import MAX_SUSPECTS, Attribution

POLICY = DriftPolicy(reference_records=100, min_records=10)
T0 = 1_790_000_000.0


class Slice:
    """A detector of (lookup, hallucination) and its attribution, fed one record at a time."""

    def __init__(self) -> None:
        self.detector = Detector("hallucination", POLICY)
        self.attribution = ChangeAttribution(POLICY.reference_records)
        self.t = T0
        self.raised = False

    def feed(self, release: str, hallucinated: bool, service: str = "svc") -> None:
        self.t += 1.0
        y = 1.0 if hallucinated else 0.0
        self.attribution.seen("lookup", release, self.t)
        self.raised |= self.detector.observe(1.0, y)
        self.attribution.observe("lookup", self.detector, y, (release, service), self.t)

    def stable(self, n: int, releases: tuple[str, ...], rng: random.Random) -> None:
        for i in range(n):
            self.feed(releases[i % len(releases)], rng.random() < 0.05)

    def result(self) -> Attribution:
        assert self.raised, "the alarm was not raised"
        attribution = self.attribution.attribute("lookup", self.detector)
        assert attribution is not None
        return attribution


def test_a_new_release_holding_the_failures_is_named_with_its_counts_and_first_seen_time() -> None:
    rng = random.Random(7)
    s = Slice()
    s.stable(200, ("v1",), rng)
    first_v2 = s.t + 2.0  # the first v2 record is the second of the drift
    for i in range(200):  # half the traffic moves to v2, which hallucinates half the time
        if i % 2:
            s.feed("v2", rng.random() < 0.5)
        else:
            s.feed("v1", rng.random() < 0.05)
    result = s.result()
    assert [(x.dimension, x.value) for x in result.suspects] == [("release", "v2")]
    v2 = result.suspects[0]
    assert v2.before == 0 and v2.before_total == POLICY.reference_records  # the window before
    assert v2.failing_total == result.failing_total and v2.failing / v2.failing_total > 0.7
    assert 0 < v2.judged < v2.judged_total
    assert v2.first_seen is not None and v2.first_seen.timestamp() == first_v2
    # Since the change point's record (the Nth after the reference: time T0 + reference + 1 + N).
    start = s.detector.change_point
    assert start is not None and result.since is not None
    assert result.since.timestamp() == T0 + POLICY.reference_records + 1 + start
    annotations = result.annotations()
    assert annotations["suspect_release"] == "v2"
    line = annotations["attribution"]
    assert line.startswith(
        f"release v2: {100 * v2.failing / v2.failing_total:.0f} % of failing records since "
    )
    assert f"({v2.failing} of {v2.failing_total};" in line and "0 % of the 100 judged before (0)" in line
    assert "first seen 2026-09-21 " in line


def test_the_only_release_and_a_long_standing_majority_are_not_named() -> None:
    rng = random.Random(3)
    only = Slice()
    only.stable(150, ("v1",), rng)
    for _ in range(150):
        only.feed("v1", rng.random() < 0.5)
    result = only.result()
    assert result.suspects == () and "suspect_release" not in result.annotations()
    assert result.annotations()["attribution"].startswith("no release or service over-represented among ")

    # Two releases all along (2:1), both degrade alike: neither is over-represented.
    both = Slice()
    both.stable(150, ("a", "a", "b"), rng)
    for i in range(300):
        both.feed("ab"[i % 3 == 2], rng.random() < 0.5)
    assert both.result().suspects == ()


def test_a_service_is_named_when_its_records_hold_the_failures() -> None:
    rng = random.Random(5)
    s = Slice()
    for i in range(200):
        s.feed("v1", rng.random() < 0.05, service=("checkout", "search")[i % 2])
    for i in range(200):
        s.feed("v1", rng.random() < (0.6 if i % 2 else 0.05), service=("checkout", "search")[i % 2])
    names = [(x.dimension, x.value) for x in s.result().suspects]
    assert names == [("service", "search")]


def test_few_failing_records_name_nothing_and_at_most_three_are_named() -> None:
    assert wilson_lower(MIN_FAILING, MIN_FAILING) > 0.5  # the count, not the share, holds them back
    rng = random.Random(11)
    s = Slice()
    s.stable(200, ("v1",), rng)
    # Five new releases, one failing record each besides the flood of another new one's.
    for i in range(300):
        s.feed(f"n{i // 50 % 5}" if i % 50 == 0 else "v9", True)
    names = [x.value for x in s.result().suspects]
    assert names == ["v9"]

    many = Slice()
    many.stable(200, ("v1",), rng)
    for i in range(400):
        many.feed(f"r{i % 5}", True)
    assert len(many.result().suspects) == MAX_SUSPECTS == 3
