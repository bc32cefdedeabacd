"""The judge's series: what it said about production traffic, and what judging cost."""

from __future__ import annotations

import time
from bisect import bisect_left

from prometheus_client import CollectorRegistry, Counter, Histogram

from monitor.contracts.metrics.exemplars import MAX_EXEMPLAR_TRACE_ID, Exemplars, failing
from monitor.contracts.metrics.names import PREFIX
from monitor.contracts.model import DECIDABLE_CHECKS, Judgement, Undecided, Verdict

# Judge latency: the lexical judge answers in microseconds, LLM judges in seconds.
JUDGE_LATENCY_BUCKETS = (0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0)
UNIT_BUCKETS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 1.0)
RELEVANCE_BUCKETS = (1.0, 2.0, 3.0)
CONTEXT_RELEVANCE_BUCKETS = (1.0, 1.5, 2.0, 2.5, 3.0)


class JudgeMetrics:
    """Judgement-level metrics of docs/contract.md: what the judge said, and what judging cost.

    Verdict series carry `judge` (the backend: lexical, anthropic, openai; bounded by the factory),
    so a change of backend shows as new series instead of silently changing what one means. They
    are unweighted counts of judged records; the weighted estimates are `EstimateCounters`'.
    """

    def __init__(self, registry: CollectorRegistry, exemplars: Exemplars | None = None) -> None:
        r = registry
        self.exemplars = exemplars if exemplars is not None else Exemplars()
        sq = ["service", "query_type"]
        sqj = [*sq, "judge"]
        self.judged = Counter(f"{PREFIX}judged", "Records judged, per check", [*sqj, "check"], registry=r)
        self.skipped = Counter(
            f"{PREFIX}judge_skipped", "Sampled records not judged, by reason", [*sq, "reason"], registry=r
        )
        self.claims = Counter(f"{PREFIX}claims", "Atomic claims extracted from answers", sqj, registry=r)
        self.claims_supported = Counter(
            f"{PREFIX}claims_supported",
            "Claims supported by the retrieved chunks (quotes checked)",
            sqj,
            registry=r,
        )
        self.claims_contradicted = Counter(
            f"{PREFIX}claims_contradicted", "Claims the retrieved chunks contradict", sqj, registry=r
        )
        self.claims_uncertain = Counter(
            f"{PREFIX}claims_uncertain",
            "Claims the judge could not decide (left out of faithfulness, neither supported nor not)",
            sqj,
            registry=r,
        )
        # Per check (faithfulness, unanswerable), whether the judge decided it: the decided share,
        # decided / (decided + undecided), is what every score of the check rests on. Counters,
        # not a ratio gauge, so that replicas and restarts add up (docs/contract.md gives the PromQL).
        self.decided = Counter(
            f"{PREFIX}judge_decided",
            "Judged records whose check (faithfulness, unanswerable) the judge decided",
            ["judge", "query_type", "check"],
            registry=r,
        )
        self.undecided = Counter(
            f"{PREFIX}judge_undecided",
            "Judged records whose check the judge could not decide (left out of its scores), by reason "
            "(no_claim, uncertain, unplaced, yes_no, answerability)",
            ["judge", "query_type", "check", "reason"],
            registry=r,
        )
        self._decision_series: set[tuple[str, str]] = set()
        self.unanswerable = Counter(
            f"{PREFIX}unanswerable",
            "Judged records whose context could not answer the query",
            sqj,
            registry=r,
        )
        self.hallucinated = Counter(
            f"{PREFIX}unanswerable_hallucinated",
            "Unanswerable records answered anyway instead of admitting uncertainty",
            sqj,
            registry=r,
        )
        self.refusals = Counter(
            f"{PREFIX}refusals",
            "Answers that give no answer (refusals; hedged answers apart)",
            sqj,
            registry=r,
        )
        self.hedges = Counter(
            f"{PREFIX}hedges", "Answers that answer but admit uncertainty about part of it", sqj, registry=r
        )
        self.false_refusals = Counter(
            f"{PREFIX}false_refusals", "Refusals although the context held the answer", sqj, registry=r
        )
        self.faithfulness = Histogram(
            f"{PREFIX}faithfulness_score",
            "Supported claims / claims, per judged answer that makes claims",
            sqj,
            buckets=UNIT_BUCKETS,
            registry=r,
        )
        self.relevance = Histogram(
            f"{PREFIX}answer_relevance_score",
            "Answer relevance, 1-3",
            sqj,
            buckets=RELEVANCE_BUCKETS,
            registry=r,
        )
        self.context_relevance = Histogram(
            f"{PREFIX}context_relevance_score",
            "Mean relevance (1-3) of a judged record's retrieved chunks",
            sqj,
            buckets=CONTEXT_RELEVANCE_BUCKETS,
            registry=r,
        )
        self.evidence_mismatch = Counter(
            f"{PREFIX}judge_evidence_mismatch",
            "Claims a judge called supported or contradicted whose quoted evidence failed the check "
            "(reason: no_quote, not_in_chunk, numbers, unrelated); scored as not in context",
            [*sqj, "reason"],
            registry=r,
        )
        self.coverage_gaps = Counter(
            f"{PREFIX}judge_coverage_gaps",
            "Verdicts whose claims left out part of the answer, by outcome of the one repair "
            "(repaired; unrepaired: the left-out sentences scored as not in context)",
            [*sqj, "outcome"],
            registry=r,
        )
        self.citations = Counter(
            f"{PREFIX}citations",
            "Citations in judged answers (a cited chunk in an answer sentence), by verdict: supported "
            "(the chunk supports a claim of that sentence), unsupported, unresolved (names no "
            "retrieved chunk), unchecked (no decided claim or a chunk the judge did not see)",
            [*sqj, "verdict"],
            registry=r,
        )
        self.self_evaluations = Counter(
            f"{PREFIX}judge_self_evaluations",
            "Judged records whose judge model is the model that generated the answer (a model "
            "grading itself is biased)",
            ["service", "judge"],
            registry=r,
        )
        self.requests = Counter(
            f"{PREFIX}judge_requests",
            "Judgements attempted, by outcome",
            ["backend", "model", "outcome"],
            registry=r,
        )
        self.tokens = Counter(f"{PREFIX}judge_tokens", "Judge tokens billed", ["model", "type"], registry=r)
        self.cost = Counter(
            f"{PREFIX}judge_cost_usd", "Judge cost from the price table", ["model"], registry=r
        )
        self.latency = Histogram(
            f"{PREFIX}judge_latency_seconds",
            "Judge service time per judgement",
            ["backend"],
            buckets=JUDGE_LATENCY_BUCKETS,
            registry=r,
        )
        self.disagreements = Counter(
            f"{PREFIX}judge_disagreements",
            "Checks on which two judgements of the same record disagreed (repeat_fraction)",
            ["check"],
            registry=r,
        )
        self.repeats = Counter(f"{PREFIX}judge_repeats", "Records judged a second time", registry=r)
        # Kappa against human labels: `monitor.judge.calibrate.CalibrationGauges`, written by
        # `calibrate --metrics-file`, never by the sidecar.

    def observe_decisions(self, j: Judgement) -> None:
        """Per decidable check, decided or undecided (with its reason); a check that does not
        apply (faithfulness of a refusal) is neither. Every reason's series of a (judge, query
        type) is created with its first judgement, so a ratio over them exists from then on."""
        key = (j.backend, j.query_type)
        if key not in self._decision_series:
            self._decision_series.add(key)
            for check in DECIDABLE_CHECKS:
                self.decided.labels(judge=j.backend, query_type=j.query_type, check=check)
                for reason in Undecided:
                    self.undecided.labels(
                        judge=j.backend, query_type=j.query_type, check=check, reason=reason.value
                    )
        undecided = j.undecided
        given = j.checks()
        for check in DECIDABLE_CHECKS:
            why = undecided.get(check)
            if why is not None:
                self.undecided.labels(
                    judge=j.backend, query_type=j.query_type, check=check, reason=why.value
                ).inc()
            elif check in given:
                self.decided.labels(judge=j.backend, query_type=j.query_type, check=check).inc()

    def observe_cost(self, j: Judgement) -> None:
        """What a judgement cost, whatever it was for (production or golden replay) and however
        it ended: its outcome, latency, tokens, USD."""
        self.requests.labels(backend=j.backend, model=j.model, outcome=j.outcome.value).inc()
        self.latency.labels(backend=j.backend).observe(j.latency_s)
        for kind, n in j.tokens.as_dict().items():
            if n:
                self.tokens.labels(model=j.model, type=kind).inc(n)
        if j.cost_usd:
            self.cost.labels(model=j.model).inc(j.cost_usd)

    def observe_verdicts(self, j: Judgement, service: str) -> None:
        """What the judge said about production traffic; only for a successful judgement (never
        averaged in as zeros when the judge failed), and never for golden replays, which would
        skew production's rates."""
        if not j.ok:
            return
        labels = {"service": service, "query_type": j.query_type, "judge": j.backend}
        tid = j.trace_id
        example = {"trace_id": tid} if 0 < len(tid) <= MAX_EXEMPLAR_TRACE_ID else None
        bad = failing(j)
        now = time.monotonic()
        take = self.exemplars.take

        def inc(counter: Counter, n: float = 1, **extra: str) -> None:
            """A verdict counter's increment, with this record as its exemplar where it wins."""
            child = counter.labels(**labels, **extra)
            child.inc(n, example if example and n and take(child, bad, now) else None)

        def observe(histogram: Histogram, value: float) -> None:
            child = histogram.labels(**labels)
            bucket = (child, bisect_left(child._upper_bounds, value))
            child.observe(value, example if example and take(bucket, bad, now) else None)

        for check in j.checks():
            inc(self.judged, check=check)
        self.observe_decisions(j)
        if j.claims:
            inc(self.claims, len(j.claims))
            inc(self.claims_supported, sum(c.supported for c in j.claims))
            contradicted = sum(c.verdict is Verdict.CONTRADICTED for c in j.claims)
            if contradicted:
                inc(self.claims_contradicted, contradicted)
            uncertain = sum(c.verdict is Verdict.UNCERTAIN for c in j.claims)
            if uncertain:
                inc(self.claims_uncertain, uncertain)
        for reason in j.evidence_failures():
            self.evidence_mismatch.labels(reason=reason, **labels).inc()
        if j.coverage_repair is not None:
            self.coverage_gaps.labels(outcome=j.coverage_repair, **labels).inc()
        if j.faithfulness is not None:
            observe(self.faithfulness, j.faithfulness)
        if j.answerable_from_context is False:
            inc(self.unanswerable)
            if j.hallucinated:
                inc(self.hallucinated)
        if j.refuses:
            inc(self.refusals)
            if j.false_refusal:
                inc(self.false_refusals)
        if j.hedges:
            inc(self.hedges)
        if j.answer_relevance is not None:
            observe(self.relevance, j.answer_relevance)
        if j.context_relevance is not None:
            observe(self.context_relevance, j.context_relevance)
        if j.citations is not None:
            for verdict, n in j.citations.counts().items():
                if n:
                    self.citations.labels(verdict=verdict, **labels).inc(n)
        if j.self_judged:
            self.self_evaluations.labels(service=service, judge=j.backend).inc()
