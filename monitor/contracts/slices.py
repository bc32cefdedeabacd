"""Bounded label values: whatever spans say, a metric label takes one of a fixed, small set.

Prometheus keeps one series per label combination; one service writing a request id into
`rag.query_type` would otherwise create a series per request and take the TSDB down. The `slices`
config section, which sets those lists, is here too: every stage bounds the same labels.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

# The query types every stage bounds its labels to unless `slices.query_types` says otherwise.
DEFAULT_QUERY_TYPES = (
    "lookup",
    "comparison",
    "multi_hop",
    "exact_match",
    "abstractive",
    "out_of_corpus",
    "other",
    "unknown",
)


class SlicesConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query_types: list[str] = Field(default_factory=lambda: list(DEFAULT_QUERY_TYPES))
    services: list[str] | None = Field(None, description="allow-list; default: first max_services seen")
    max_services: int = Field(20, gt=0)
    release_keys: list[str] = Field(
        default_factory=lambda: ["service.version"],
        max_length=8,
        description="span or resource attributes a record's release is read from, in order: for each, the "
        "span's own attribute, then its resource's; the first non-empty string wins ([]: no release)",
    )
    releases: list[str] | None = Field(
        None, description="allow-list of release label values; default: first max_releases seen"
    )
    max_releases: int = Field(
        20,
        gt=0,
        description="with no releases allow-list, the first this many releases seen label the metric series; "
        "later ones are other (results lines keep each record's own)",
    )
    max_label_sets: int = Field(
        500,
        gt=0,
        description="(service, query_type, release) label sets each group of release-labelled metrics (the "
        "RED series, the estimate counters) may hold; a new one past it is counted under service and release "
        "other, its query_type kept (ragmon_series_budget_folded_total)",
    )
    classify: Literal["rules", "judge", "off"] = Field(
        "rules",
        description="query type when spans carry no rag.query_type: rules, rules then the LLM judge's "
        "label for judged records, or off (unknown)",
    )

    def release_value(self, raw: str | None) -> str:
        """A record's release as samples and results lines carry it: trimmed; `unknown` when
        absent; `other` past 64 characters or outside the `releases` allow-list. Not bounded in
        number: a line is not a series, and each stage that makes series or slots of it bounds
        it itself (first `max_releases` for series; the drift stage's most recent for
        attribution), so that in continuous deployment a results line still names its release."""
        value = raw.strip() if raw else ""
        if not value:
            return "unknown"
        if len(value) > 64 or (self.releases is not None and value not in self.releases):
            return "other"
        return value

    @field_validator("classify", mode="before")
    @classmethod
    def _from_bool(cls, v: Any) -> Any:
        # `classify: true/false` was the first form of this setting.
        return {True: "rules", False: "off"}.get(v, v) if isinstance(v, bool) else v

    @field_validator("release_keys")
    @classmethod
    def _keys_non_empty(cls, v: list[str]) -> list[str]:
        if not all(k.strip() for k in v):
            raise ValueError("release keys must be non-empty")
        return v

    @field_validator("query_types")
    @classmethod
    def _needs_fallbacks(cls, v: list[str]) -> list[str]:
        for required in ("other", "unknown"):
            if required not in v:
                v = [*v, required]
        return v


class BoundedLabel:
    """Maps raw values onto an allow-list, or onto the first `capacity` values seen.

    `fallback` is returned for anything else; `missing` for an absent value.
    """

    __slots__ = ("_allowed", "_capacity", "_fixed", "_normalize", "fallback", "missing")

    def __init__(
        self,
        allowed: Iterable[str] | None,
        *,
        fallback: str = "other",
        missing: str = "unknown",
        capacity: int = 0,
        normalize: bool = True,
    ) -> None:
        self._normalize = normalize
        self._fixed = allowed is not None
        self._allowed: set[str] = {self._norm(v) for v in allowed} if allowed is not None else set()
        self._capacity = capacity
        self.fallback = fallback
        self.missing = missing

    @classmethod
    def query_types(cls, allowed: Iterable[str]) -> BoundedLabel:
        """`query_type` as every stage bounds it (`slices.query_types`)."""
        return cls(allowed, fallback="other", missing="unknown")

    @classmethod
    def services(cls, allowed: Iterable[str] | None, capacity: int) -> BoundedLabel:
        """`service` as every stage bounds it (`slices.services`, else the first `max_services`)."""
        return cls(allowed, fallback="other", missing="unknown_service", capacity=capacity, normalize=False)

    @classmethod
    def releases(cls, allowed: Iterable[str] | None, capacity: int) -> BoundedLabel:
        """`release` as a metric label (`slices.releases`, else the first `max_releases`): a flood
        of versions (a build id per deploy) ends in `other`, never in new series."""
        return cls(allowed, fallback="other", missing="unknown", capacity=capacity, normalize=False)

    def bound(self, raw: str | None) -> tuple[str, bool]:
        """The label value for `raw`, and whether `raw` was outside the allowed set."""
        if not raw:
            return self.missing, False
        value = self._norm(raw)
        if value in self._allowed:
            return value, False
        if not self._fixed and len(self._allowed) < self._capacity and len(value) <= 64:
            self._allowed.add(value)
            return value, False
        return self.fallback, True

    def _norm(self, value: str) -> str:
        value = value.strip()
        return value.lower().replace("-", "_").replace(" ", "_") if self._normalize else value


class RecentLabel:
    """A release label that follows deployments: the `capacity` releases first seen most recently
    (by their records' time), the oldest evicted for a newer one; an allow-list when given.

    First-N (`BoundedLabel.releases`) goes blind in continuous deployment: the N+1st release and
    every one after it are `other`. Here a new release takes the slot of the release first seen
    longest ago, unless it is older than every release held (a late record of a retired release:
    `fallback`). The stages' own fallbacks (`fallback`, `missing`) pass through without a slot.
    A function of the sequence of (value, time) alone, so a member that replays the same topic
    holds the same slots; a record without a time counts as the newest seen so far."""

    __slots__ = ("_allowed", "_capacity", "_first", "_latest", "_on_evict", "fallback", "missing")

    def __init__(
        self,
        allowed: Iterable[str] | None,
        capacity: int,
        *,
        fallback: str = "other",
        missing: str = "unknown",
        on_evict: Callable[[str], None] | None = None,
    ) -> None:
        self._allowed = {v.strip() for v in allowed} if allowed is not None else None
        self._capacity = capacity
        self._first: dict[str, float] = {}  # release -> its first record's time
        self._latest = float("-inf")
        self._on_evict = on_evict  # told each release whose slot went to a newer one
        self.fallback = fallback
        self.missing = missing

    def bound(self, raw: str | None, at: float | None = None) -> tuple[str, bool]:
        """The label value for `raw` (a record at time `at`), and whether it was folded."""
        if not raw:
            return self.missing, False
        value = raw.strip()
        if self._allowed is not None:
            return (value, False) if value in self._allowed else (self.fallback, True)
        if value in (self.fallback, self.missing):
            return value, False
        when = at if at is not None and math.isfinite(at) else self._latest
        self._latest = max(self._latest, when)
        first = self._first.get(value)
        if first is not None:
            if when < first:
                self._first[value] = when
            return value, False
        if len(value) > 64:
            return self.fallback, True
        if len(self._first) >= self._capacity:
            oldest = min(self._first, key=self._first.__getitem__)
            if when <= self._first[oldest]:
                return self.fallback, True
            del self._first[oldest]
            if self._on_evict is not None:
                self._on_evict(oldest)
        self._first[value] = when
        return value, False
