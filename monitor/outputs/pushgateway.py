"""A Pushgateway client for batch runs: a job (a CronJob pod) is gone before Prometheus could
scrape it, so its gauges go to a Pushgateway, which Prometheus scrapes with `honor_labels: true`.

Checked when made (URL, credentials), so that a typo fails a run up front instead of after it;
a failed push is returned as a reason, never raised: the run's own outcome stays the caller's."""

from __future__ import annotations

import os
from collections.abc import Sequence
from http.client import HTTPException
from typing import Any
from urllib.error import HTTPError
from urllib.parse import urlsplit

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import basic_auth_handler, default_handler, push_to_gateway

from monitor.outputs.config import PushgatewayConfig

__all__ = ["Group", "Pushgateway"]

Group = tuple[dict[str, str], CollectorRegistry]  # (grouping key besides `job`, its gauges)


class Pushgateway:
    """Where a run's groups go: `cfg.url` with `job`, `instance` (the caller's default when the
    config names none) and the basic auth `cfg.auth_env` holds."""

    def __init__(self, cfg: PushgatewayConfig, instance: str) -> None:
        url = cfg.url or ""
        parts = urlsplit(url)
        if parts.username is not None or parts.password is not None:  # not echoed: a secret
            raise ValueError("--pushgateway: no credentials in the URL; use --push-auth-env (user:password)")
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(
                f"--pushgateway {url!r}: an http(s) URL with a host, e.g. http://pushgateway:9091"
            )
        if not cfg.job.strip():
            raise ValueError("--push-job: an empty job name")
        self.url, self.job, self.timeout = url, cfg.job, cfg.timeout_seconds
        self.instance = cfg.instance or instance
        self.auth: tuple[str, str] | None = None
        if cfg.auth_env is not None:
            user, sep, password = os.environ.get(cfg.auth_env, "").partition(":")
            if not sep or not user:
                raise ValueError(f"--push-auth-env: {cfg.auth_env} is unset or not user:password")
            self.auth = (user, password)

    def describe(self) -> str:
        return f"Pushgateway {self.url} (job={self.job}, instance={self.instance})"

    def _handler(self, url: str, method: str, timeout: float | None, headers: Any, data: bytes) -> Any:
        if self.auth is None:
            return default_handler(url, method, timeout, headers, data)
        return basic_auth_handler(url, method, timeout, headers, data, *self.auth)

    def push(self, groups: Sequence[Group]) -> str | None:
        """PUT each group under {job, instance, its key}: the whole group is replaced, so a series
        gone from the run disappears. Returns why it failed, or None."""
        try:
            for key, registry in groups:
                push_to_gateway(
                    self.url,
                    job=self.job,
                    registry=registry,
                    grouping_key={"instance": self.instance, **key},
                    timeout=self.timeout,
                    handler=self._handler,
                )
        except HTTPError as exc:  # the Pushgateway answered, and said no (401, 400 inconsistent…)
            return f"HTTP {exc.code} {exc.reason}"
        except OSError as exc:  # refused, timed out, name not resolved
            return str(getattr(exc, "reason", None) or exc)
        except HTTPException as exc:  # something that does not speak HTTP
            return f"{type(exc).__name__}: {exc}"
        return None
