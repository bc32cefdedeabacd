"""Shared fixtures: one real embedded broker per test session, on a free loopback port; the fake
Messages / Chat Completions API (test_judge_llm.FakeAPI), one per test module. Markers for
`make test-quick`: `kafka` on every test that uses the broker, `slow` on the end-to-end sets that
build images, install packages or run the product as a user would."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import pytest_asyncio
from fake_llm import FakeAPI
from support import Webhook, alertmanager_process

from monitor.demo.broker import EmbeddedBroker
from monitor.kafka.client import ensure_topics
from monitor.kafka.config import KafkaConfig

# Files whose tests each take tens of seconds to minutes: processes, images, installs.
_SLOW = ("tests/demo/", "tests/deploy/test_image.py", "tests/deploy/test_light_install.py",
         "tests/test_readme_path.py", "tests/test_process.py", "tests/test_hostile_traffic.py")  # fmt: skip


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    root = Path(__file__).resolve().parent.parent
    for item in items:
        if "broker" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.kafka)
        if Path(item.fspath).resolve().relative_to(root).as_posix().startswith(_SLOW):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    log = tmp_path_factory.mktemp("broker") / "tansu.log"
    with EmbeddedBroker(log_file=log) as b:
        yield b


@pytest_asyncio.fixture
async def topic(broker: EmbeddedBroker) -> str:
    """A fresh 3-partition topic per test, so tests never see each other's messages."""
    name = f"spans-{uuid.uuid4().hex[:10]}"
    await ensure_topics(KafkaConfig(bootstrap_servers=broker.bootstrap_servers), [name], partitions=3)
    return name


@pytest.fixture
def repo_root() -> Path:
    return Path(__file__).resolve().parent.parent


@pytest.fixture
def alertmanager(tmp_path: Path) -> Iterator[str]:
    """A real Alertmanager (routing to a null receiver); its base URL."""
    config = tmp_path / "alertmanager.yml"
    config.write_text('route:\n  receiver: "null"\nreceivers:\n  - name: "null"\n')
    with alertmanager_process(config, tmp_path / "data") as url:
        yield url


@pytest.fixture
def webhook() -> Iterator[Webhook]:
    """A local JSON webhook receiver (alert sinks post to `webhook.url`)."""
    hook = Webhook()
    yield hook
    hook.server.shutdown()
    hook.server.server_close()


@pytest.fixture(scope="module")
def _server() -> Iterator[FakeAPI]:
    fake = FakeAPI()
    fake.thread.start()
    yield fake
    fake.server.shutdown()
    fake.server.server_close()


@pytest.fixture
def api(_server: FakeAPI) -> FakeAPI:
    """The module's fake API, reset, with a fresh key."""
    _server.reset(f"sk-ant-FAKEKEY-{uuid.uuid4().hex}")
    return _server
