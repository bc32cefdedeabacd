"""The series budget: a bound on how many (service, query_type, release) label sets a group of
families may hold, so that label cardinality cannot grow `/metrics` without limit."""

from __future__ import annotations

import logging

from prometheus_client import Counter

log = logging.getLogger(__name__)

# The groups of families a `SeriesBudget` bounds: the RED series (`ServiceMetrics`), the
# estimate counters (`EstimateCounters`); `ragmon_series_budget_folded_total`'s `family`.
SERIES_BUDGET_FAMILIES = ("red", "estimate")
# A (service, query_type, release) label set.
LabelSet = tuple[str, str, str]
FOLDED = "other"  # what `service` and `release` fold to past a budget


class SeriesBudget:
    """A bound on the (service, query_type, release) label sets of a group of metric families that
    share them. Each label is bounded on its own (`monitor.contracts.slices`), their product is not: 21
    services × 8 query types × 22 releases are 3,696 sets, 28 MB of `/metrics` for the RED series
    alone. The first `limit` sets asked for are admitted; past that a new set is folded to
    (service, query_type, other) where that set is admitted already, else to (other, query_type,
    other) — the query type is kept, the dimension the quality alerts slice by. So a group holds at
    most `limit` + (query types) sets, whatever the traffic. A set lookup once a set is known: the
    ingest stage asks once per raw label set and caches the answer, the judge's estimates ask per
    judged record (beside six counter updates a metric); `folded` (the group's child of
    `ragmon_series_budget_folded_total`) is the callers' to count folded records in; the first
    fold is logged once."""

    __slots__ = ("_sets", "family", "folded", "full", "limit")

    def __init__(self, family: str, limit: int, folded: Counter) -> None:
        self.family = family
        self.limit = limit
        self.folded = folded.labels(family=family)
        self._sets: set[LabelSet] = set()  # admitted; never more than `limit`
        self.full = False  # a set has been folded (logged)

    def admit(self, labels: LabelSet) -> LabelSet:
        """The label set to count `labels` under: itself, or its fold once the budget is spent."""
        sets = self._sets
        if labels in sets:
            return labels
        if len(sets) < self.limit:
            sets.add(labels)
            return labels
        if not self.full:
            self.full = True
            log.warning(
                "series budget: the %s metrics hold slices.max_label_sets=%d (service, query_type, "
                "release) label sets; new ones are counted under service and release %r "
                "(ragmon_series_budget_folded_total{family=%r})",
                self.family,
                self.limit,
                FOLDED,
                self.family,
            )
        service, query_type, _ = labels
        near = (service, query_type, FOLDED)
        return near if near in sets else (FOLDED, query_type, FOLDED)
