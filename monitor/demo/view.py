"""The demo's live terminal view, read from the same Prometheus registry a scrape of `/metrics`
sees (so the view shows the product's numbers, not the demo's own bookkeeping), plus the incident
scene and what the local webhook received."""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import CollectorRegistry
from rich.console import Group
from rich.table import Table
from rich.text import Text

from monitor.contracts.estimate import ESTIMATE_METRICS
from monitor.demo.scene import Scene
from monitor.demo.sink import ReceivedAlert, WebhookReceiver

_JUDGED = {
    "ragmon_claims_total": "claims",
    "ragmon_claims_supported_total": "supported",
    "ragmon_unanswerable_total": "unanswerable",
    "ragmon_unanswerable_hallucinated_total": "hallucinated",
    "ragmon_refusals_total": "refusals",
}
_DRIFT = {"ragmon_drift_statistic": "s", "ragmon_drift_threshold": "h", "ragmon_drift_active": "active"}
_BAR = 8
_ALERTS_SHOWN = 10
_TRACES_SHOWN = 2  # example trace ids per alert, in full (they are what one pastes into a tracing UI)


@dataclass(frozen=True, slots=True)
class ViewContext:
    """What the view shows besides the registry."""

    metrics_url: str
    results_file: Path
    settings_note: str  # the demo-only settings, said out loud
    scene: Scene | None
    receiver: WebhookReceiver


def summary(
    registry: CollectorRegistry,
) -> tuple[dict[str, dict[str, float]], dict[str, float], dict[str, float]]:
    """Per query type, rejected reasons, and process gauges, straight from the registry."""
    per_type: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    rejected: dict[str, float] = {}
    gauges: dict[str, float] = defaultdict(float)
    for family in registry.collect():
        for s in family.samples:
            qt = s.labels.get("query_type")
            if s.name == "ragmon_records_total" and qt:
                per_type[qt]["records"] += s.value
            elif s.name == "ragmon_retrieved_chunks_sum" and qt:
                per_type[qt]["chunks_sum"] += s.value
            elif s.name == "ragmon_retrieval_top_score_sum" and qt:
                per_type[qt]["top_sum"] += s.value
            elif s.name == "ragmon_retrieval_top_score_count" and qt:
                per_type[qt]["top_n"] += s.value
            elif qt and s.name == "ragmon_judged_total" and s.labels.get("check") == "unanswerable":
                per_type[qt]["judged"] += s.value  # every successful judgement has this check
            elif qt and s.name in _JUDGED:
                per_type[qt][_JUDGED[s.name]] += s.value
            elif s.name == "ragmon_rejected_total" and s.value:
                rejected[s.labels["reason"]] = s.value
            elif s.name in (
                "ragmon_open_traces",
                "ragmon_consumer_lag_messages",
                "ragmon_inflight_judgements",
            ):
                gauges[s.name] += s.value
            elif s.name == "ragmon_record_lag_seconds_sum":
                gauges["lag_sum"] = s.value
            elif s.name == "ragmon_record_lag_seconds_count":
                gauges["lag_n"] = s.value
    return per_type, rejected, gauges


def drift_state(registry: CollectorRegistry) -> tuple[dict[tuple[str, str], dict[str, float]], float]:
    """Per (query type, metric) with a frozen reference: statistic `s`, threshold `h`, `active`;
    and the alarms raised so far (`ragmon_drift_alarms_total`, all slices)."""
    slices: dict[tuple[str, str], dict[str, float]] = defaultdict(dict)
    alarms = 0.0
    for family in registry.collect():
        for s in family.samples:
            if s.name in _DRIFT:
                slices[s.labels["query_type"], s.labels["metric"]][_DRIFT[s.name]] = s.value
            elif s.name == "ragmon_drift_alarms_total":
                alarms += s.value
    return {k: v for k, v in slices.items() if "s" in v and "h" in v}, alarms


def _records_table(per_type: dict[str, dict[str, float]]) -> tuple[Table, float]:
    table = Table(
        title="RAG records by query type — retrieval (left) and generation, judged offline (right)",
        expand=False,
    )
    columns = (
        "type",
        "records",
        "chunks",
        "top score",
        "judged",
        "faithful",
        "unansw.",
        "halluc.",
        "refusals",
    )
    for col in columns:
        table.add_column(col, justify="right" if col != "type" else "left", no_wrap=True)
    total = 0.0
    for qt in sorted(per_type):
        row = per_type[qt]
        n = row["records"]
        total += n
        table.add_row(
            qt,
            f"{n:.0f}",
            f"{row['chunks_sum'] / n:.1f}" if n else "-",
            f"{row['top_sum'] / row['top_n']:.2f}" if row["top_n"] else "-",
            f"{row['judged']:.0f}",
            f"{row['supported'] / row['claims']:.1%}" if row["claims"] else "-",
            f"{row['unanswerable']:.0f}",
            f"{row['hallucinated']:.0f}",
            f"{row['refusals']:.0f}",
        )
    return table, total


def _drift_cell(d: dict[str, float] | None, show_h: bool) -> Text:
    """A bar of S against h (full at h), then S; red with `!` while the alarm is raised."""
    if d is None:
        return Text("reference…", "dim")
    s, h, active = d["s"], d["h"], d.get("active", 0.0) >= 1
    filled = round(_BAR * min(1.0, s / h)) if h > 0 else 0
    style = "bold red" if active else ("yellow" if s >= h / 2 else "green")
    return Text.assemble(
        ("█" * filled, style),
        ("░" * (_BAR - filled), "dim"),
        (f" {s:4.1f}" + (f"/{h:.1f}" if show_h else ""), style),
        (" !" if active else "  ", "bold red"),
    )


def _drift_table(registry: CollectorRegistry, query_types: list[str]) -> tuple[Table, float]:
    state, alarms = drift_state(registry)
    metrics = [m for m in ESTIMATE_METRICS if any(k[1] == m for k in state)] or ["faithfulness"]
    thresholds = {round(d["h"], 1) for d in state.values()}
    same_h = len(thresholds) == 1
    h = f"h = {thresholds.pop():.1f}" if same_h else "its h; S/h shown"
    table = Table(title=f"Drift: CUSUM statistic S (bar full at threshold {h}; ! = alarm)", expand=False)
    table.add_column("type", no_wrap=True)
    for m in metrics:
        table.add_column(m, no_wrap=True)
    for qt in sorted({k[0] for k in state} | set(query_types)):
        table.add_row(qt, *(_drift_cell(state.get((qt, m)), not same_h) for m in metrics))
    return table, alarms


def _scene_line(scene: Scene | None) -> Text:
    if scene is None:
        return Text("scene: none (off, or no example service to deploy outside a checkout)", "dim")
    cfg = scene.config
    if scene.phase == "stable":
        return Text.assemble(
            ("scene: ", "dim"),
            ("stable", "bold green"),
            f" — release {cfg.stable_release} serving; release {cfg.new_release} rolled out at "
            f"t≈{cfg.degrade_at:.0f}s once the drift references are frozen ({scene.waiting})",
        )
    assert scene.degraded_at is not None
    degraded = Text.assemble(
        (f"release {cfg.new_release} deployed", "bold red"),
        f" at t={scene.degraded_at:.1f}s (all traffic; its answers gain invented facts, "
        f"invent_rate={cfg.invent_rate:g})",
    )
    if scene.phase == "degraded":
        restore = f"; rollback at t≈{scene.degraded_at + cfg.degrade_for:.0f}s once {scene.waiting}"
        return Text.assemble(("scene: ", "dim"), degraded, restore)
    assert scene.restored_at is not None
    return Text.assemble(
        ("scene: ", "dim"),
        degraded,
        ", ",
        (f"rolled back to {cfg.stable_release}", "bold green"),
        f" at t={scene.restored_at:.1f}s",
    )


@dataclass(slots=True)
class _Shown:
    """One alert as the view shows it: its first firing, its latest firing (an update may name
    the release), its resolution."""

    fired: ReceivedAlert
    latest: ReceivedAlert
    resolved: ReceivedAlert | None = None


def _alerts(got: list[ReceivedAlert]) -> list[_Shown]:
    alerts: list[_Shown] = []
    open_: dict[tuple[tuple[str, str], ...], _Shown] = {}
    for a in got:
        key = tuple(sorted(a.labels.items()))
        shown = open_.get(key)
        if a.status == "firing":
            if shown is None:
                shown = open_[key] = _Shown(a, a)
                alerts.append(shown)
            else:
                shown.latest = a  # an update: same alert, new attribution
        elif shown is not None:
            shown.resolved = a
            del open_[key]
    return alerts


def _attribution_line(shown: _Shown, started: float) -> Text:
    """What changed (the first suspect named, with its shares) and the example trace ids."""
    latest = shown.latest
    parts: list[str | tuple[str, str]] = ["    "]
    if latest.suspects:
        s = latest.suspects[0]
        since, before = s.get("failing_share_since"), s.get("share_before")
        parts += [
            (f"{s.get('dimension', '?')} {s.get('value', '?')}", "bold"),
            f": {_share(since)} of failing records since the change ({_share(before)} before)",
        ]
        if latest is not shown.fired:
            parts.append((f", named t={latest.at - started:.1f}s", "dim"))
    else:
        parts.append(("no release named (too few failing records yet)", "dim"))
    ids = latest.example_trace_ids
    if ids:
        parts += [("  traces ", "dim"), " ".join(ids[:_TRACES_SHOWN])]
        if len(ids) > _TRACES_SHOWN:
            parts.append((f" +{len(ids) - _TRACES_SHOWN}", "dim"))
    else:
        parts.append(("  no example traces", "dim"))
    return Text.assemble(*parts)


def _share(value: object) -> str:
    return f"{value:.0%}" if isinstance(value, int | float) else "?"


def _alert_lines(ctx: ViewContext) -> list[Text]:
    """Two lines per alert the webhook got: when it fired (with the values its annotations gave
    then) and, once it came, when it resolved; then the release it names and its example traces."""
    got = ctx.receiver.received
    started = ctx.scene.started if ctx.scene else (got[0].at if got else 0.0)
    alerts = _alerts(got)
    names = sorted({a.name for a in got})
    head = Text.assemble(
        ("alerts received by the local webhook (alerts.webhook_url): ", "dim"),
        f"{len(got)}",
        f" ({', '.join(names)})" if got else "",
    )
    lines = [head]
    if len(alerts) > _ALERTS_SHOWN:
        lines.append(Text(f"  … {len(alerts) - _ALERTS_SHOWN} earlier", "dim"))
    for shown in alerts[-_ALERTS_SHOWN:]:
        fired, resolved = shown.fired, shown.resolved
        labels = fired.labels
        name = f"{fired.name} " if len(names) > 1 else ""
        lines.append(
            Text.assemble(
                f"  {name}{labels.get('query_type', '?')}/{labels.get('metric', '?')}: ",
                ("firing", "bold red"),
                f" t={fired.at - started:.1f}s",
                *(
                    (" → ", ("resolved", "bold green"), f" t={resolved.at - started:.1f}s")
                    if resolved
                    else ()
                ),
                (f"  current {_num(fired, 'current')} vs baseline {_num(fired, 'baseline')}", "dim"),
            )
        )
        lines.append(_attribution_line(shown, started))
    return lines


def _num(alert: ReceivedAlert, key: str) -> str:
    try:
        return f"{float(alert.annotations[key]):.3f}"
    except (KeyError, ValueError):
        return "?"


def render(registry: CollectorRegistry, produced: int, started: float, ctx: ViewContext) -> Group:
    per_type, rejected, gauges = summary(registry)
    records, total = _records_table(per_type)
    drift, alarms = _drift_table(registry, sorted(per_type))
    elapsed = time.monotonic() - started
    lag = gauges["lag_sum"] / gauges["lag_n"] if gauges.get("lag_n") else 0.0
    status = Text.assemble(
        ("traces produced ", "dim"),
        f"{produced}",
        ("   records ", "dim"),
        f"{total:.0f}",
        ("   open traces ", "dim"),
        f"{gauges['ragmon_open_traces']:.0f}",
        ("   consumer lag ", "dim"),
        f"{gauges['ragmon_consumer_lag_messages']:.0f}",
        ("   mean record lag ", "dim"),
        f"{lag:.2f}s",
        ("   elapsed ", "dim"),
        f"{elapsed:.0f}s",
    )
    rej = Text(
        "rejected: " + (", ".join(f"{k}={v:.0f}" for k, v in sorted(rejected.items())) or "none"), "yellow"
    )
    alarm_line = Text.assemble(("drift alarms raised (ragmon_drift_alarms_total) ", "dim"), f"{alarms:.0f}")
    note = Text(ctx.settings_note, "dim italic")
    foot = Text(f"metrics: {ctx.metrics_url}    results: {ctx.results_file}    Ctrl-C stops", "dim")
    return Group(
        records, status, rej, drift, alarm_line, note, _scene_line(ctx.scene), *_alert_lines(ctx), foot
    )
