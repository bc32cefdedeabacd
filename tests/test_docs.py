"""The repository stands alone, and its documentation matches the code.

A user who clones the repository has nothing outside it: no file may cite a working document or a
data directory that lives elsewhere. The contract names every metric the sidecar and the golden
replay export (and no other), and every `rag-monitor` command, so that dashboards, alert rules
and scripts written against it keep working. The documentation site builds with MkDocs in strict
mode (a link to a missing page or anchor fails), the configuration and CLI references are what
docs/gen_reference.py writes from the code today, every default the prose quotes is the code's,
and the README opens with the two commands and links only to what exists.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
from prometheus_client import CollectorRegistry

from monitor.cli import app
from monitor.contracts.metrics import Metrics
from monitor.golden.gauges import GoldenGauges
from monitor.judge.batches import BatchCollector
from monitor.judge.calibrate import CalibrationGauges
from monitor.llm.batches import BatchStats

ROOT = Path(__file__).resolve().parent.parent
CONTRACT = ROOT / "docs" / "contract.md"
README = ROOT / "README.md"
MKDOCS = Path(sys.executable).parent / "mkdocs"
# Repository files linked from the site by URL (MkDocs checks only links within docs/).
BLOB = "https://github.com/rag-monitor/rag-monitor/blob/main/"
# Spelled in pieces so that this file does not match itself.
OUTSIDE = re.compile("|".join(re.escape(s) for s in ("design" + ".md", "/" + "work/", "../" + "shared")))


def _repository_files() -> list[Path]:
    """Tracked files and new ones not ignored: what a commit would hand a user."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT,
            capture_output=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return [ROOT / name for name in out.decode().split("\0") if name and (ROOT / name).is_file()]


def test_no_file_cites_a_path_outside_the_repository() -> None:
    found = []
    for path in _repository_files():
        data = path.read_bytes()
        if b"\0" in data:
            continue  # binary
        for n, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
            if OUTSIDE.search(line):
                found.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()[:120]}")
    assert not found, "cite docs/contract.md or a repository path instead:\n" + "\n".join(found)


def _contract() -> str:
    return " ".join(CONTRACT.read_text(encoding="utf-8").split())


def _exported() -> set[str]:
    """Every series name the sidecar's registry, the golden gauges, the batch judge and
    `calibrate --metrics-file` export (counters with their `_total`), from fresh registries."""
    registry = CollectorRegistry()
    Metrics(registry)
    CalibrationGauges(registry)
    GoldenGauges(registry)
    registry.register(BatchCollector(BatchStats()))
    return {
        f"{family.name}_total" if family.type == "counter" else family.name for family in registry.collect()
    }


def _named(text: str, name: str) -> bool:
    return re.search(rf"(?<!\w){re.escape(name)}(?!\w)", text) is not None


def test_every_exported_metric_is_in_the_contract() -> None:
    exported = _exported()
    assert "ragmon_stage_stalled" in exported and "ragmon_golden_unmeasured" in exported
    text = _contract()
    missing = sorted(name for name in exported if not _named(text, name))
    assert not missing, f"exported but not in docs/contract.md (Metrics): {missing}"


def test_the_contract_names_no_metric_the_code_does_not_export() -> None:
    exported = _exported()
    named = set(re.findall(r"\bragmon_\w+", _contract()))
    assert not named - exported, f"in docs/contract.md but not exported: {sorted(named - exported)}"


def _commands(group: Any, prefix: str = "rag-monitor") -> Iterator[str]:
    """Full command lines of the leaves (typer's groups are its own click's: duck-typed)."""
    for name, command in group.commands.items():
        path = f"{prefix} {name}"
        if hasattr(command, "commands"):
            yield from _commands(command, path)
        else:
            yield path


def test_every_command_is_in_the_contract() -> None:
    commands = sorted(_commands(typer.main.get_command(app)))
    assert "rag-monitor golden trigger" in commands and "rag-monitor baseline pin" in commands
    text = _contract()
    missing = [c for c in commands if not _named(text, c)]
    assert not missing, f"commands not in docs/contract.md (CLI): {missing}"


# -- the documentation site -------------------------------------------------------------------------


def _mkdocs_build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    if not MKDOCS.exists():
        pytest.fail(f"{MKDOCS} is missing: mkdocs is in the dev extra (pip install -e '.[dev]')")
    return subprocess.run(
        [str(MKDOCS), "build", "--strict", "--config-file", str(config), "--site-dir", str(site)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_docs_site_builds_in_strict_mode(tmp_path: Path) -> None:
    result = _mkdocs_build(ROOT / "mkdocs.yml", tmp_path / "site")
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "site" / "configuration" / "index.html").exists()
    assert (tmp_path / "site" / "architecture" / "index.html").exists()


def test_a_link_to_a_missing_anchor_or_page_fails_the_build(tmp_path: Path) -> None:
    """The strict build is a link check, not only a render: mkdocs.yml turns anchors and
    unrecognised links into warnings, which --strict makes fatal."""
    for broken in ("[x](contract.md#no-such-section)", "[x](no-such-page.md)"):
        copy = tmp_path / broken[-12:].strip(")#.")
        shutil.copytree(ROOT / "docs", copy / "docs")
        shutil.copy2(ROOT / "mkdocs.yml", copy / "mkdocs.yml")
        with (copy / "docs" / "index.md").open("a", encoding="utf-8") as f:
            f.write(f"\n{broken}\n")
        result = _mkdocs_build(copy / "mkdocs.yml", copy / "site")
        assert result.returncode != 0, f"{broken} built without a warning"
        assert "no-such" in result.stdout + result.stderr


def _generator(name: str = "gen_reference") -> Any:
    spec = importlib.util.spec_from_file_location(name, ROOT / "docs" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("page", ["configuration.md", "cli.md"])
def test_the_generated_references_are_current(page: str) -> None:
    gen = _generator()
    build = {"configuration.md": gen.config_reference, "cli.md": gen.cli_reference}[page]
    committed = (ROOT / "docs" / page).read_text(encoding="utf-8")
    assert committed == build(), f"docs/{page} is out of date: run python docs/gen_reference.py"


def test_the_configuration_reference_has_every_key_with_its_default() -> None:
    from monitor.app.config import Settings

    text = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    settings = Settings()
    assert "| `bootstrap_servers` | string | `127.0.0.1:9092` |" in text
    assert f"| `port` | integer, ≥ 0, ≤ 65535 | `{settings.metrics.port}` |" in text
    assert "`RAGMON_JUDGE__BUDGET__USD_PER_DAY`" in text  # a key two sections deep
    assert "| — |" not in text, "a key without a description: give its Field one"
    for section in Settings.model_fields:
        assert f"\n## {section}\n" in text


def test_the_cli_reference_has_every_command_and_option() -> None:
    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    root = typer.main.get_command(app)
    for command in _commands(root):
        assert f"\n## {command}\n" in text, command
    run = root.commands["run"]  # type: ignore[attr-defined]
    for param in run.params:
        assert param.opts[0] in text, param.opts[0]


# -- the README and the files it links ---------------------------------------------------------------


def test_the_readme_opens_with_the_two_commands_and_stays_short() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines: move the detail into docs/"
    first = [line for line in lines[1:12] if line.startswith("make ")]
    assert [line.split()[:2] for line in first] == [["make", "demo"], ["make", "test"]]


def _slug(heading: str) -> str:
    """The anchor MkDocs (Python-Markdown's toc) and, for these headings, GitHub give a heading."""
    from markdown.extensions.toc import slugify

    return str(slugify(re.sub(r"[`*]", "", heading), "-"))


def _anchors(page: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.M | re.S)
    return {_slug(h) for h in re.findall(r"^#{1,6}\s+(.+?)\s*$", text, re.M)}


LINK = re.compile(r"\]\(([^)\s]+)\)")


def _broken_links(page: Path) -> list[str]:
    broken = []
    for target in LINK.findall(page.read_text(encoding="utf-8")):
        if target.startswith(BLOB):
            if not (ROOT / target[len(BLOB) :].partition("#")[0]).exists():
                broken.append(target)
            continue
        if re.match(r"[a-z]+:", target):
            continue  # another site
        name, _, anchor = target.partition("#")
        path = (page.parent / name).resolve() if name else page
        if not path.exists() or (anchor and path.suffix == ".md" and anchor not in _anchors(path)):
            broken.append(target)
    return broken


def test_links_outside_the_site_point_at_what_exists() -> None:
    """What MkDocs does not check: the README's and bench/RESULTS.md's links, and the site's links
    to repository files by URL."""
    pages = [README, ROOT / "bench" / "RESULTS.md", *sorted((ROOT / "docs").glob("*.md"))]
    found = {str(page.relative_to(ROOT)): _broken_links(page) for page in pages}
    assert not {k: v for k, v in found.items() if v}
    assert any(BLOB in page.read_text(encoding="utf-8") for page in pages[2:])


# -- the defaults the prose quotes ---------------------------------------------------------------------

# The pages whose prose may quote a default (the generated references are checked above).
PROSE_PAGES = [
    README,
    ROOT / "deploy" / "runbooks.md",
    *(p for p in sorted((ROOT / "docs").glob("*.md")) if p.name not in ("configuration.md", "cli.md")),
]
_NUMBER = r"(\d[\d,]*(?:\.\d+)?)(?:\s*(%|h\b|min\b|s\b|MiB\b))?"
# A key in backticks then its value: "`pipeline.shutdown_seconds` (25", "`min_per_window`, default 20",
# "`alerts.drift.min_effect.undecided` (default 0.05", "`min_effect.undecided` is 0.05". A value that
# is not the default (a test's setting) is written so that it does not read as one ("(set to 2)").
# A short key (`reference_records`) may be any
# key it ends; the value must then be one of theirs.
_KEYED = re.compile(r"`([a-z_][a-z0-9_.]*)`(?:,?\s+default\s+|\s+is\s+|\s*\((?:default\s+)?)" + _NUMBER)
# Defaults quoted without their key, each phrase a template whose {key} is a number with its unit.
# A phrase that is no longer on its page fails: edit the template with the page.
PROSE_DEFAULTS = [
    ("README.md", "(the defaults, for production, are {sampling.rate} and {alerts.drift.reference_records};"),
    (
        "docs/demo.md",
        "drift references of 50 judged records (default {alerts.drift.reference_records}),"
        " alarms from 10 more (default {alerts.drift.min_records}),"
        " and hallucination watched for shifts of 0.25 (default {alerts.drift.min_effect.hallucination};",
    ),
    ("deploy/runbooks.md", "frozen reference (its first {alerts.drift.reference_records} judged records,"),
]


def _setting_defaults() -> dict[str, Any]:
    """Every key of `Settings` with its default, dotted as the configuration reference has them; a
    mapping's entries as keys too (`alerts.drift.min_effect.hallucination`)."""
    from pydantic import BaseModel

    from monitor.app.config import Settings

    out: dict[str, Any] = {}

    def walk(model: type[BaseModel], prefix: tuple[str, ...]) -> None:
        for name, field in model.model_fields.items():
            path, tp = (*prefix, name), field.annotation
            if isinstance(tp, type) and issubclass(tp, BaseModel):
                walk(tp, path)
            elif not field.is_required():
                value = field.get_default(call_default_factory=True)
                out[".".join(path)] = value
                if isinstance(value, dict):
                    out.update({".".join((*path, str(k))): v for k, v in value.items()})

    walk(Settings, ())
    return out


def _quoted(number: str, unit: str | None) -> float:
    """A number as the prose writes it, in the setting's units (fractions, seconds, bytes)."""
    scale = {"%": 0.01, "h": 3600, "min": 60, "s": 1, "MiB": 1 << 20, None: 1}[unit]
    return float(number.replace(",", "")) * scale


def _is_default(value: Any, quoted: float) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and abs(value - quoted) < 1e-9


def _line(text: str, at: int) -> int:
    return text.count("\n", 0, at) + 1


def test_every_default_the_keyed_prose_quotes_is_the_codes() -> None:
    """README, runbooks and docs quoting a key with a number: the number is the key's default."""
    defaults = _setting_defaults()
    checked, wrong = 0, []
    for page in PROSE_PAGES:
        text = page.read_text(encoding="utf-8")
        for m in _KEYED.finditer(text):
            key = m.group(1)
            candidates = {k: v for k, v in defaults.items() if k == key or k.endswith("." + key)}
            if not candidates:
                continue  # not a setting (a CLI option, a payload field)
            checked += 1
            quoted = _quoted(m.group(2), m.group(3))
            if not any(_is_default(v, quoted) for v in candidates.values()):
                where = f"{page.relative_to(ROOT)}:{_line(text, m.start())}"
                wrong.append(f"{where}: {' '.join(m.group(0).split())!r}, the code's: {candidates}")
    assert not wrong, "\n".join(wrong)
    assert checked >= 30, f"only {checked} quoted defaults found: is the pattern still matching?"


def test_every_default_the_prose_quotes_without_its_key_is_the_codes() -> None:
    """The phrases that quote a default without naming its key ("the defaults, for production, are
    5 % and 1,500"): each still on its page, with the code's numbers."""
    defaults = _setting_defaults()
    for name, template in PROSE_DEFAULTS:
        keys = re.findall(r"\{([a-z0-9_.]+)\}", template)
        pattern = "".join(
            _NUMBER if part.startswith("{") else r"\s+".join(re.escape(w) for w in part.split(" "))
            for part in re.split(r"(\{[a-z0-9_.]+\})", template)
        )
        text = (ROOT / name).read_text(encoding="utf-8")
        m = re.search(pattern, text)
        assert m, f"{name} no longer says {template!r}: update PROSE_DEFAULTS with the page"
        numbers = iter(m.groups())
        for key in keys:
            quoted = _quoted(next(numbers), next(numbers))
            assert _is_default(defaults[key], quoted), (
                f"{name}:{_line(text, m.start())} quotes {quoted:g} for {key}; the code's default is "
                f"{defaults[key]}"
            )


def _option_defaults(group: Any) -> dict[str, set[Any]]:
    """Every option of every command (`--bad-every`), with the defaults it has across commands."""
    out: dict[str, set[Any]] = {}
    for command in group.commands.values():
        if hasattr(command, "commands"):
            for k, v in _option_defaults(command).items():
                out.setdefault(k, set()).update(v)
            continue
        for param in command.params:
            for opt in getattr(param, "opts", []):
                if opt.startswith("--") and isinstance(param.default, int | float):
                    out.setdefault(opt, set()).add(param.default)
    return out


# "`--bad-every N` (default 200", "(`--per-type N`, default 5", "`--resamples`, default 2,000".
_OPTION = re.compile(r"`(--[a-z0-9-]+)(?: [A-Z]+)?`(?:,?\s+default\s+|\s*\(default\s+)" + _NUMBER)


def test_every_command_line_default_the_prose_quotes_is_the_codes() -> None:
    defaults = _option_defaults(typer.main.get_command(app))
    checked, wrong = 0, []
    for page in PROSE_PAGES:
        text = page.read_text(encoding="utf-8")
        for m in _OPTION.finditer(text):
            if m.group(1) not in defaults:
                continue  # another tool's option, or bench's
            checked += 1
            if not any(_is_default(v, _quoted(m.group(2), m.group(3))) for v in defaults[m.group(1)]):
                where = f"{page.relative_to(ROOT)}:{_line(text, m.start())}"
                wrong.append(f"{where}: {' '.join(m.group(0).split())!r}, the code's: {defaults[m.group(1)]}")
    assert not wrong, "\n".join(wrong)
    text = (ROOT / "docs" / "demo.md").read_text(encoding="utf-8")
    assert _OPTION.search(text) and "`--bad-every N` (default" in text, "demo.md explains --bad-every"
    assert checked >= 4, f"only {checked} quoted option defaults found: is the pattern still matching?"


def test_the_tracing_ui_pages_settings_load() -> None:
    """Every YAML block of tracing-ui.md that configures the sidecar loads as it is printed (the
    trace URL templates are checked at load), and the page names each UI's template."""
    import yaml

    from monitor.app.config import load_settings

    text = (ROOT / "docs" / "tracing-ui.md").read_text(encoding="utf-8")
    blocks = [yaml.safe_load(b) for b in re.findall(r"```yaml\n(.*?)```", text, flags=re.S)]
    ours = [b for b in blocks if "events" in b]
    assert len(ours) == 3
    templates = []
    for block in ours:
        settings = load_settings(None, block)
        templates.append(settings.alerts.trace_url_template)
    assert all("{trace_id}" in str(t) for t in templates)
    assert any("phoenix" in str(t) for t in templates) and any("jaeger" in str(t) for t in templates)
    assert any("grafana" in str(t) and "tempo" in str(t) for t in templates)


def test_the_architecture_diagram_is_drawn_from_the_code() -> None:
    gen = _generator("gen_architecture")
    committed = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    assert committed == gen.page(), "docs/architecture.md is out of date: run python docs/gen_architecture.py"
    # every top-level part sits in a tier of the layers contract, or is the instrumentation apart
    placed = {p for tier in gen.tiers() for p in tier}
    parts = {p for edge in gen.edges() for p in edge}
    assert parts - placed == {"instrument"}, parts - placed
