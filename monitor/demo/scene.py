"""The demo's incident is a release: a healthy service (release `stable_release`), then a new
release (`new_release`, whose answers gain invented facts) rolled out to all traffic, then rolled
back — so the live view shows drift detected, attributed to the release, alerted and resolved.
Both releases run from the start as separate instances of the example service, each with its own
`service.version`, and the session routes the traffic (`Deploy`), as a load balancer would.

Each step has a scheduled time but also waits for what it is there to show, because the demo runs
on loaded laptops and CI machines alike: the deploy waits until the slices' drift references have
frozen (a reference that took degraded answers would measure nothing), the rollback until the
local webhook has received a firing alert. Each wait is bounded, so a broken pipeline still ends
the scene, and the view says what happened.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass
from typing import Literal

from prometheus_client import CollectorRegistry

from monitor.demo.sink import WebhookReceiver

Phase = Literal["stable", "degraded", "restored"]
Deploy = Callable[[str], Awaitable[None]]  # route all traffic to this release


@dataclass(frozen=True, slots=True)
class SceneConfig:
    degrade_at: float = 20.0  # the new release's rollout, seconds after traffic starts (later if
    # references are not frozen yet)
    degrade_for: float = 12.0  # seconds until the rollback (longer until a firing alert has arrived)
    invent_rate: float = 0.8  # the new release's bug: the share of its answers with an invented fact
    stable_release: str = "v1.4.1"  # `service.version` of the release serving at start
    new_release: str = "v1.4.2"  # `service.version` of the release rolled out, then back
    max_wait: float = 30.0  # the longest either step waits for its condition
    # Detectors whose references must be frozen, for every query type, before the degrade.
    watch: tuple[str, ...] = ("faithfulness", "hallucination")


def frozen_references(registry: CollectorRegistry) -> set[tuple[str, str]]:
    """(query type, metric) of every drift detector watching: it exports a threshold once its
    reference froze."""
    return {
        (s.labels["query_type"], s.labels["metric"])
        for family in registry.collect()
        for s in family.samples
        if s.name == "ragmon_drift_threshold"
    }


class Scene:
    """Where the incident stands; `run` moves it on. Times are seconds since traffic started."""

    def __init__(self, config: SceneConfig, registry: CollectorRegistry, receiver: WebhookReceiver) -> None:
        self.config = config
        self.registry = registry
        self.receiver = receiver
        self.phase: Phase = "stable"
        self.started = time.monotonic()
        self.degraded_at: float | None = None  # when the new release took the traffic
        self.restored_at: float | None = None  # when it was rolled back
        self.waiting = ""  # what the next step waits for, for the view

    def now(self) -> float:
        return time.monotonic() - self.started

    async def run(self, deploy: Deploy, query_types: Collection[str], stop: asyncio.Event) -> None:
        """Roll the new release out, then back, unless `stop` comes first. `started` must be set
        by then."""
        cfg = self.config
        wanted = {(qt, m) for qt in query_types for m in cfg.watch}

        def references_ready() -> bool:
            missing = wanted - frozen_references(self.registry)
            self.waiting = f"{len(wanted) - len(missing)}/{len(wanted)}"
            return not missing

        if not await self._until(cfg.degrade_at, references_ready, stop):
            return
        await deploy(cfg.new_release)
        self.degraded_at, self.phase = self.now(), "degraded"

        def alert_arrived() -> bool:
            self.waiting = "a firing alert has reached the webhook"
            assert self.degraded_at is not None
            return any(
                a.status == "firing" and a.at - self.started >= self.degraded_at
                for a in self.receiver.received
            )

        if not await self._until(self.degraded_at + cfg.degrade_for, alert_arrived, stop):
            return
        await deploy(cfg.stable_release)
        self.restored_at, self.phase = self.now(), "restored"
        self.waiting = ""

    async def _until(self, at: float, ready: Callable[[], bool], stop: asyncio.Event) -> bool:
        """Wait until `at` and `ready()` (or `at` + max_wait, whichever first); False on stop."""
        while not stop.is_set():
            t = self.now()
            if (ready() and t >= at) or t >= at + self.config.max_wait:
                return True
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(0.25):
                    await stop.wait()
        return False
