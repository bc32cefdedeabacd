"""The judge's output schema as sent to the model, and the check of what comes back.

`output_schema` is what a backend sends (a forced tool's input schema, a strict response format);
`parse_output` validates a reply against the pydantic models of `monitor.judge.model` and against
the record shown (`validate_against_record`), and says what is wrong in words a repair request can
send back.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from pydantic import ValidationError

from monitor.judge.model import JudgeOutput, labelled_output_model
from monitor.judge.model import validate_against_record as _validate_against_record

__all__ = ["output_schema", "parse_output"]

# The models' field descriptions are not sent either: the numbered steps of the system prompt say
# what each field means, and sending both cost ~190 input tokens per request for nothing.
_SCHEMA_KEYS = frozenset(("type", "properties", "required", "items", "enum", "anyOf", "additionalProperties"))


def _output_model(query_types: Sequence[str] | None) -> type[JudgeOutput]:
    return JudgeOutput if query_types is None else labelled_output_model(query_types)


def output_schema(query_types: Sequence[str] | None = None) -> dict[str, Any]:
    """JSON schema of `JudgeOutput` (with `query_types`: plus a required `query_type` whose enum is
    that list), derived from the pydantic model: refs inlined, every property required, no
    additional properties — the shape strict structured output needs."""
    full = _output_model(query_types).model_json_schema()
    defs = full.get("$defs", {})

    def walk(node: Any) -> Any:
        if isinstance(node, list):
            return [walk(n) for n in node]
        if not isinstance(node, dict):
            return node
        if "$ref" in node:
            return walk(defs[node["$ref"].rsplit("/", 1)[-1]])
        out = {k: walk(v) for k, v in node.items() if k in _SCHEMA_KEYS and k != "properties"}
        if "const" in node and "enum" not in node:  # pydantic's form of a one-value Literal
            out["enum"] = [node["const"]]
        if "enum" in node and "type" not in out:
            out["type"] = "integer" if all(isinstance(v, int) for v in node["enum"]) else "string"
        if "properties" in node:  # a name -> schema map, not a schema: walk its values only
            out["properties"] = {k: walk(v) for k, v in node["properties"].items()}
            out["type"] = "object"
            out["required"] = list(out["properties"])
            out["additionalProperties"] = False
        return out

    result: dict[str, Any] = walk(full)
    return result


def parse_output(
    data: Any, chunk_ids: Iterable[str], query_types: Sequence[str] | None = None
) -> tuple[JudgeOutput | None, str]:
    """Validate a judge's raw output: (output, "") or (None, a description of what is wrong).

    The description is what a repair request tells the model, so it is specific but bounded. With
    `query_types`, a missing label or one outside the list is such a problem.
    """
    if isinstance(data, str | bytes):
        try:
            data = json.loads(data)
        except ValueError as exc:
            return None, f"output is not valid JSON ({exc.__class__.__name__}: {str(exc)[:200]})"
    try:
        output = _output_model(query_types).model_validate(data)
    except ValidationError as exc:
        errors = [
            f"{'.'.join(str(p) for p in e['loc']) or '(root)'}: {e['msg']}"
            for e in exc.errors(include_url=False, include_input=False)[:10]
        ]
        return None, "; ".join(errors)
    problems = _validate_against_record(output, set(chunk_ids))
    if problems:
        return None, "; ".join(problems[:10])
    return output, ""
