"""Task hygiene shared by the stages."""

from __future__ import annotations

import asyncio
import logging
import time

log = logging.getLogger(__name__)


async def cancel_all(tasks: list[asyncio.Task[None]], grace: float = 5.0) -> None:
    """Cancel and reap `tasks`, bounded: a task that swallows its cancellation (Python 3.11's
    `wait_for` does, when its inner future completes at the same moment) is cancelled again, and
    after `grace` seconds abandoned with a warning, so shutdown never hangs on it. A task that
    died of an error re-raises it here, once all are reaped."""
    pending = set(tasks)
    deadline = time.monotonic() + grace
    while pending:
        for task in pending:
            task.cancel()
        left = deadline - time.monotonic()
        if left <= 0:
            names = sorted(t.get_name() for t in pending)
            log.warning("shutdown: abandoning tasks that ignore cancellation: %s", names)
            break
        _, pending = await asyncio.wait(pending, timeout=min(left, 0.5))
    for task in tasks:
        error = task.exception() if task.done() and not task.cancelled() else None
        if error is not None:
            raise error
