"""Draws docs/architecture.md's layer diagram from the code: the top-level parts of `monitor`, the
imports between them (every import, type-hint ones included, as import-linter counts them), in the
order of the layers contract in pyproject.toml. `make test` fails when the page is out of date.

    python docs/gen_architecture.py          # rewrite the diagram in docs/architecture.md
"""

from __future__ import annotations

import ast
import sys
import tomllib
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "architecture.md"
START, END = "<!-- layers diagram: python docs/gen_architecture.py -->", "<!-- end of layers diagram -->"


def _part(module: str) -> str | None:
    """`monitor.judge.lexical.terse` → `judge`; None outside the package."""
    parts = module.split(".")
    return parts[1] if parts[0] == "monitor" and len(parts) > 1 else None


def _module(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    names = list(rel.parts)
    return ".".join(names[:-1] if names[-1] == "__init__" else names)


def _imported(path: Path) -> set[str]:
    """The modules `path` imports, absolute, wherever the import stands."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    here = _module(path).split(".")
    package = here if path.name == "__init__.py" else here[:-1]
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            mod = ".".join([*base, *(node.module or "").split(".")]).strip(".")
            out.add(mod)
            out.update(f"{mod}.{a.name}" for a in node.names)  # `from monitor import x`
    return out


def edges() -> Counter[tuple[str, str]]:
    """(importer part, imported part) → how many modules of the first import the second."""
    top = ROOT / "monitor"
    known = {p.stem for p in top.glob("*.py")} | {p.parent.name for p in top.glob("*/__init__.py")}
    count: Counter[tuple[str, str]] = Counter()
    for path in sorted(top.rglob("*.py")):
        src = _part(_module(path))
        if src is None:
            continue
        for dst in {_part(m) for m in _imported(path)} & known - {src}:
            count[(src, str(dst))] += 1
    return count


def tiers() -> list[list[str]]:
    """The layers contract's tiers, top first, each the parts it names."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contract = next(c for c in config["tool"]["importlinter"]["contracts"] if c["id"] == "layers")
    out = []
    for layer in contract["layers"]:
        names = [n.strip() for n in layer.replace(":", "|").split("|")]
        out.append([n.removeprefix("monitor.") for n in names])
    return out


def diagram() -> str:
    """A Mermaid flowchart: one row a tier, top to bottom; an edge per imported part, with the
    number of importing modules."""
    layers = tiers()
    placed = {p for tier in layers for p in tier}
    count = edges()
    lines = ["```mermaid", "flowchart TB"]
    for i, tier in enumerate(layers, 1):
        lines.append(f'  subgraph T{i}["{i}"]')
        lines.append("    direction LR")
        lines.extend(f'    {_id(p)}["{p}"]' for p in tier)
        lines.append("  end")
    apart = sorted({p for edge in count for p in edge} - placed)
    lines.extend(f'  {_id(p)}["{p} (apart)"]' for p in apart)
    for (src, dst), n in sorted(count.items()):
        lines.append(f"  {_id(src)} -->|{n}| {_id(dst)}")
    lines.append("```")
    total = sum(1 for _ in count)
    parts = len(placed | set(apart))
    lines.append("")
    lines.append(f"{parts} parts, {total} import edges between them (the number on an edge: how many")
    lines.append("modules of the importing part import the other).")
    return "\n".join(lines)


def _id(part: str) -> str:
    return "p_" + part.strip("_")


def page() -> str:
    text = PAGE.read_text(encoding="utf-8")
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{START}\n{diagram()}\n{END}{tail}"


def main() -> int:
    PAGE.write_text(page(), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
