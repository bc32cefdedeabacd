"""Write docs/configuration.md and docs/cli.md from the code, so that the references cannot drift.

    python docs/gen_reference.py           # rewrite both pages
    python docs/gen_reference.py --check   # exit 1, naming the page, when either is out of date

The configuration reference reads only `monitor.app.config.Settings` (its fields, walked down through
the section models whatever module defines them), the CLI reference only the typer app
`monitor.cli.app`: moving a section model or a command between modules changes nothing here.
A key without a `Field(description=...)` takes its line from NOTES below (what the README's
configuration table said of it), and a NOTES entry that names no key, or a key that has a
description of its own, fails the run: the code's description is the one to keep. An option
without `help=` shows `—`.
"""

from __future__ import annotations

import argparse
import enum
import sys
import types
import typing
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CONFIG_PAGE = ROOT / "docs" / "configuration.md"
CLI_PAGE = ROOT / "docs" / "cli.md"
# Descriptions of keys whose Field has none yet: move each into its Field(description=...) and
# delete it here (the run fails on a duplicate, so nothing is said twice).
NOTES = {
    "kafka.bootstrap_servers": "the brokers, host:port[,host:port…]",
    "kafka.topic": "the input topic the Collector's kafkaexporter writes OTLP spans to",
    "kafka.group_id": "the deployment's id: the ingest stage's consumer group, and the prefix of every"
    " internal topic and group name not set (see pipeline, results)",
    "kafka.client_id": "the Kafka client id the sidecar's clients send",
    "kafka.encoding": "wire format of the input topic; auto tells OTLP protobuf, OTLP/JSON and flat"
    " JSON apart",
    "kafka.dead_letter_topic": "where undecodable messages are copied raw (null: counted and logged only)",
    "kafka.max_message_bytes": "a larger input message is rejected (too_large)",
    "kafka.max_poll_records": "messages one fetch hands the ingest stage",
    "kafka.commit_interval_seconds": "how often committable offsets are committed",
    "kafka.session_timeout_ms": "the consumer group session timeout",
    "kafka.reconnect_backoff_max_seconds": "the longest pause between reconnection attempts",
    "kafka.extra": "other aiokafka settings, each given to the clients whose constructor takes it"
    " (isolation_level to the consumer only); a key the sidecar sets itself or no client takes is"
    " refused at start, named",
    "kafka.ssl_keyfile_password": "password of ssl_keyfile (or ssl_keyfile_password_file)",
    "kafka.ssl_keyfile_password_file": "a file holding the password of ssl_keyfile",
    "kafka.ssl_check_hostname": "check the brokers' certificates name them",
    "kafka.sasl_mechanism": "with SASL_PLAINTEXT or SASL_SSL",
    "kafka.sasl_username": "with SASL_PLAINTEXT or SASL_SSL",
    "kafka.sasl_password": "or sasl_password_file; never logged",
    "kafka.security_protocol": "TLS and SASL keys apply to the consumer, the producer and the admin client;"
    " a key the protocol would ignore is an error",
    "assembly.max_open_traces": "past it the oldest open trace is evicted (evicted)",
    "slices.query_types": "the allow-list of query_type label values; others are counted as other",
    "slices.max_services": "with no services allow-list, the first this many services seen; later"
    " ones are other",
    "sampling.low_score_multiplier": "rate multiplier for a record whose top score is under"
    " low_score_threshold",
    "sampling.unusual_length_multiplier": "rate multiplier for an answer of unusual length",
    "judge.backend": "lexical (offline), anthropic, openai, or none",
    "judge.budget.tokens_per_hour": "tokens the judge may use an hour (upper-bound reservations)",
    "judge.budget.usd_per_day": "USD the judge may spend a day; LLM judges get 10 unless set, null lifts it",
    "judge.breaker.min_pause_seconds": "the open breaker's first pause before a probe",
    "judge.breaker.max_pause_seconds": "the open breaker's pause doubles up to this",
    "judge.options": "the backend's own settings (model, base_url, api_key_file, max_concurrency, prices,"
    " batch…), checked against it: an option the backend does not take is an error",
    "golden.file": "the golden rows replayed on schedule (none: no scheduled replay)",
    "golden.interval_seconds": "time between scheduled replays",
    "golden.baseline": "baseline JSON the scheduled replay compares with",
    "estimates.window_seconds": "the window of the ragmon_*_window_ratio estimates",
    "estimates.confidence": "the bounds' confidence level",
    "metrics.port": "serves /metrics, /healthz and /readyz (0: any free port)",
    "results.file": "the results JSONL file (none: no file)",
    "events.headers": "HTTP headers (gRPC metadata) of the events and spans (values masked in config show)",
    "events.compression": "compression of the OTLP requests",
    "events.resource_attributes": "the OpenTelemetry resource the events and spans carry",
    "alerts.resend_seconds": "how often Alertmanager is told every alert's state",
    "alerts.timeout_seconds": "timeout of one send to a sink",
}
GENERATED = "<!-- Generated by docs/gen_reference.py from the code: edit the code, then run it. -->"


def _cell(text: str) -> str:
    """Plain text in a Markdown table cell, one line: pipes escaped (they would end the cell), and
    HTML's specials (`<kafka.group_id>` would read as a tag)."""
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return " ".join(text.replace("|", "\\|").split())


def _code(text: str) -> str:
    """`text` as inline code, or plain text when it holds a pipe: GitHub ends a cell at a pipe even
    in code, and Python-Markdown shows the backslash of an escaped one there."""
    if not text:
        return "—"
    return _cell(text) if "|" in text else f"`{text}`"


def _type_name(tp: Any) -> str:
    """A field's type as a user writes it in YAML, not as Python spells it."""
    from pydantic import BaseModel, SecretStr

    if tp is Any:
        return "any value"
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is type(None):
        return "null"
    if origin is typing.Literal:
        return "one of " + ", ".join(str(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in args)
    if origin in (list, tuple, set, frozenset):
        return "list of " + (_type_name(args[0]) if args else "values")
    if origin is dict:
        return f"mapping of {_type_name(args[0])} to {_type_name(args[1])}" if args else "mapping"
    if origin is typing.Annotated:
        return _type_name(args[0])
    if isinstance(tp, type):
        if issubclass(tp, enum.Enum):
            return "one of " + ", ".join(str(m.value) for m in tp)
        if issubclass(tp, SecretStr):
            return "secret string"
        if issubclass(tp, Path):
            return "path"
        if issubclass(tp, BaseModel):
            return "section"
        return {"str": "string", "int": "integer", "float": "number", "bool": "boolean"}.get(
            tp.__name__, tp.__name__
        )
    return str(tp).replace("typing.", "")


def _constraints(metadata: list[Any]) -> str:
    """The bounds pydantic enforces (annotated_types' Gt, Ge, Lt, Le, MinLen), as a reader writes them."""
    signs = {"gt": ">", "ge": "≥", "lt": "<", "le": "≤", "min_length": "length ≥", "max_length": "length ≤"}
    out = []
    for item in metadata:
        for attr, sign in signs.items():
            value = getattr(item, attr, None)
            if value is not None:
                out.append(f"{sign} {value}")
    return ", ".join(out)


def _default(value: Any) -> str:
    import yaml
    from pydantic import BaseModel, SecretStr

    if value is None:
        return "null"
    if isinstance(value, SecretStr):
        return "(secret)"
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, list):
        value = [v.value if isinstance(v, enum.Enum) else v for v in value]
    if isinstance(value, Path):
        value = str(value)
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    if isinstance(value, dict) and value and all(isinstance(v, BaseModel) for v in value.values()):
        # A table of sections (a price table): its keys; each entry's fields are the section's.
        return "entries for " + ", ".join(value)
    if isinstance(value, bool | int | float | str | list | dict):
        text = str(yaml.safe_dump(value, default_flow_style=True, width=10_000, allow_unicode=True))
        text = text.strip().removesuffix("...").strip()
        mib = 1024**2
        if isinstance(value, int) and not isinstance(value, bool) and value >= mib and value % mib == 0:
            text += f" ({value // mib} MiB)"
        return text
    return str(value)


def _rows(model: type[Any], prefix: tuple[str, ...], env: str, delimiter: str, seen: set[str]) -> list[str]:
    """One table row per leaf key of `model`, nested sections flattened into dotted keys."""
    from pydantic import BaseModel

    rows = []
    for name, field in model.model_fields.items():
        path = (*prefix, name)
        tp = field.annotation
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            rows.extend(_rows(tp, path, env, delimiter, seen))
            continue
        required = field.is_required()
        default = "required" if required else _default(field.get_default(call_default_factory=True))
        kind = _type_name(tp)
        bounds = _constraints(field.metadata)
        key = ".".join(path)
        if field.description and key in NOTES:
            raise ValueError(f"{key} has a description in the code now: delete NOTES[{key!r}]")
        description = field.description or NOTES.get(key, "—")
        seen.add(key)
        aliases = [
            a for a in getattr(field.validation_alias, "choices", []) if isinstance(a, str) and a != name
        ]
        if aliases:
            description += " (also read as " + ", ".join(f"`{a}`" for a in aliases) + ")"
        variable = env + delimiter.join(p.upper() for p in path)
        rows.append(
            f"| `{'.'.join(path[1:])}` | {_cell(kind + (', ' + bounds if bounds else ''))} "
            f"| {_code(default)} | {_cell(description)} | `{variable}` |"
        )
    return rows


def config_reference() -> str:
    """docs/configuration.md: every key of every section of `Settings`."""
    from pydantic import BaseModel

    from monitor.app.config import Settings

    env = str(Settings.model_config.get("env_prefix") or "")
    delimiter = str(Settings.model_config.get("env_nested_delimiter") or "__")
    out = [
        "# Configuration reference",
        "",
        GENERATED,
        "",
        "The sidecar reads a YAML file (`--config`), then environment variables (the column on the",
        f"right: `{env}` and the key's path joined by `{delimiter}`), then command-line flags; each",
        "later source wins. A bad value stops start-up with one line naming the key (exit 2).",
        "`rag-monitor config show` prints the configuration in effect, secrets redacted; what the",
        "sections do is in [Running the sidecar](running.md).",
        "",
        "Defaults are the code's; a default shown as a name such as `rag-monitor-samples` is",
        "derived from `kafka.group_id` when the key is unset (see the key's description).",
        "",
    ]
    seen: set[str] = set()
    for name, field in Settings.model_fields.items():
        section = field.annotation
        assert isinstance(section, type) and issubclass(section, BaseModel), name
        out += [f"## {name}", ""]
        doc = (section.__doc__ or "").strip()
        if doc and not doc.startswith(section.__name__ + "("):  # pydantic's generated placeholder
            out += [" ".join(doc.split("\n\n")[0].split()), ""]
        out += [
            "| key | type | default | description | environment |",
            "| --- | --- | --- | --- | --- |",
            *_rows(section, (name,), env, delimiter, seen),
            "",
        ]
    unknown = sorted(set(NOTES) - seen)
    if unknown:
        raise ValueError(f"NOTES name keys Settings does not have: {unknown}")
    return "\n".join(out)


def _commands(group: Any, path: str) -> list[str]:
    """A section per command, depth first, as `--help` shows it: usage, help, then each parameter's
    help record (typer's groups and parameters are its own click's, so they are duck-typed here)."""
    out: list[str] = []
    for name in sorted(group.commands):
        command = group.commands[name]
        full = f"{path} {name}"
        ctx = command.make_context(full, [], resilient_parsing=True)
        out += [f"## {full}", "", "```text", command.get_usage(ctx).strip(), "```", ""]
        help_text = (command.help or command.short_help or "").split("\f")[0].strip()
        if help_text:
            out += [help_text, ""]
        if hasattr(command, "commands"):
            out += ["Commands: " + ", ".join(f"`{full} {c}`" for c in sorted(command.commands)) + ".", ""]
            out += _commands(command, full)
            continue
        rows = []
        for param in command.params:
            if getattr(param, "hidden", False):
                continue
            record = param.get_help_record(ctx)
            if record is None:  # an argument without help
                record = (str(param.name).upper(), "")
            rows.append(f"| {_code(record[0])} | {_cell(record[1]) or '—'} |")
        if rows:
            out += ["| argument or option | help |", "| --- | --- |", *rows, ""]
    return out


def cli_reference() -> str:
    """docs/cli.md: every command of the typer app, with its options and their help."""
    import typer

    from monitor.cli import app

    root = typer.main.get_command(app)
    assert hasattr(root, "commands"), "monitor.cli.app is a group of commands"
    out = [
        "# CLI reference",
        "",
        GENERATED,
        "",
        "Every `rag-monitor` command with its arguments and options, as `--help` prints them.",
        "Exit codes and the contract the commands keep are in [the contract](contract.md#cli).",
        "",
    ]
    out += _commands(root, "rag-monitor")
    return "\n".join(out).rstrip("\n") + "\n"


PAGES = {CONFIG_PAGE: config_reference, CLI_PAGE: cli_reference}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 when a page differs")
    args = parser.parse_args(argv)
    stale = []
    for page, build in PAGES.items():
        text = build()
        if args.check:
            if not page.exists() or page.read_text(encoding="utf-8") != text:
                stale.append(page.relative_to(ROOT))
        else:
            page.write_text(text, encoding="utf-8")
    for page in stale:
        print(f"{page} is out of date: run python docs/gen_reference.py", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
