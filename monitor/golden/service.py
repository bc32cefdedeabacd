"""The golden replay inside `rag-monitor run`: a service beside the stages, not part of one.

`GoldenService` replays the configured golden set (`golden.*`) every `interval_seconds` and, with
a trigger token, serves `POST /golden/replay` (`trigger`) for replays out of schedule; both go
through one `GoldenRunner`, so they never overlap. The wiring (`monitor.app.sidecar`) gives it:

- the judge the judge stage judges with (budget, metering: a replay's calls count in the judge
  cost metrics like any other, never in its verdict metrics), or None (retrieval only);
- a leader predicate: exactly one replica replays (today the owner of partition 0 of the samples
  topic, so failover follows the judge group);
- the replay secret that signs the replay requests' X-RAG-Replay mark (`load_replay_secret`);
- the model production answers were generated with, when its judge judged itself (the report
  then says a replay is self-judged too: its answers name no model).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from monitor.golden.change import Change
from monitor.golden.comparison import BaselineError, load_baseline
from monitor.golden.config import GoldenConfig
from monitor.golden.gauges import GoldenGauges
from monitor.golden.replay import ReplayFailed, run_replay
from monitor.golden.report import ReplayReport
from monitor.golden.schema import load_golden
from monitor.golden.targets import make_target
from monitor.golden.trigger import PATH, GoldenRunner, TriggerEndpoint, load_token
from monitor.judge import Judge
from monitor.outputs.http import Route
from monitor.plumbing.replay_mark import load_secret, secret_from_env
from monitor.plumbing.tasks import cancel_all

__all__ = ["GoldenService", "load_replay_secret"]

log = logging.getLogger(__name__)


def load_replay_secret(config: GoldenConfig) -> bytes | None:
    """The replay secret: golden.replay_secret_file, golden.replay_secret, else the environment
    (`RAGMON_REPLAY_SECRET(_FILE)`, as the service reads it). Read once, at start-up: a missing
    file fails start-up rather than every replay."""
    if config.replay_secret_file is not None and config.replay_secret is not None:
        raise ValueError("golden.replay_secret_file and golden.replay_secret are both set: choose one")
    value = config.replay_secret.get_secret_value() if config.replay_secret else None
    secret = load_secret(config.replay_secret_file, value, "golden replay secret")
    return secret if secret is not None else secret_from_env()


class GoldenService:
    """Scheduled and triggered golden replays on the member `is_leader` names.

    ValueError at construction when the trigger token cannot be used (both set, unreadable file,
    too short): a start-up error, like any bad configuration.
    """

    def __init__(
        self,
        config: GoldenConfig,
        judge: Judge | None,
        gauges: GoldenGauges,
        is_leader: Callable[[], bool],
        *,
        replay_secret: bytes | None = None,
        samples_topic: str = "rag-monitor-samples",
        generator_model: Callable[[], str | None] = lambda: None,
    ) -> None:
        if config.file is None or not config.target:
            raise ValueError("the golden service needs golden.file and golden.target")
        self.config = config
        self.gauges = gauges
        self._judge = judge
        self._replay_secret = replay_secret
        self._generator_model = generator_model
        self.runner = GoldenRunner(self._replay_once, is_leader, report_dir=config.report_dir)
        secret = config.trigger_token.get_secret_value() if config.trigger_token else None
        token = load_token(config.trigger_token_file, secret)
        # POST /golden/replay, with a token; named after the leader rule it answers 409 with.
        self.trigger = (
            TriggerEndpoint(self.runner, token, samples_topic=samples_topic) if token is not None else None
        )

    def routes(self) -> dict[str, Route]:
        """What the metrics server serves for this service: the trigger, when it has a token."""
        return {} if self.trigger is None else {PATH: self.trigger.handle}

    async def run(self, stop: asyncio.Event) -> None:
        """Replay every interval until `stop`, taking triggers meanwhile; then cancel the replay
        under way, scheduled or triggered (the next start replays anew) and refuse triggers (503).
        The wiring stops it with the judge stage, whose judge it shares."""
        self.runner.attach(asyncio.get_running_loop())
        schedule = asyncio.create_task(self._schedule(), name="ragmon-golden")
        try:
            await stop.wait()
        finally:
            await cancel_all([schedule])
            await self.runner.aclose()

    async def _schedule(self) -> None:
        """Replay the golden set every interval, on exactly one replica (`is_leader`). A replay
        triggered by a change (`POST /golden/replay`) runs through the same runner, so the two
        never overlap."""
        while True:
            await asyncio.sleep(self.config.interval_seconds)
            await self.runner.run_scheduled()

    async def _replay_once(self, change: Change | None) -> ReplayReport | None:
        """One replay of the configured golden set (None: it failed, and the log says why)."""
        cfg = self.config
        assert cfg.file is not None and cfg.target is not None
        try:
            check = await asyncio.to_thread(load_golden, cfg.file)
            if not check.ok:
                log.error("golden file %s has errors: %s", cfg.file, "; ".join(map(str, check.errors[:3])))
                return None
            baseline = await asyncio.to_thread(load_baseline, cfg.baseline) if cfg.baseline else None
            target = make_target(cfg.target, concurrency=cfg.concurrency, replay_secret=self._replay_secret)
            try:
                return await run_replay(
                    check.rows,
                    target,
                    k=cfg.k,
                    judge=self._judge,
                    concurrency=cfg.concurrency,
                    baseline=baseline,
                    gate=cfg.gate,
                    intervals=cfg.intervals,
                    golden_sha256=check.sha256,
                    golden_path=str(cfg.file),
                    gauges=self.gauges,
                    baselines=cfg.baselines,
                    change=change,
                    generator_model=self._generator_model(),
                )
            finally:
                await target.aclose()
        except (ReplayFailed, BaselineError, OSError, ValueError) as exc:
            log.error("golden replay failed: %s", exc)
            return None
