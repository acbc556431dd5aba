"""Query results as JSON: the body of ``POST /v1/apps/{name}/query`` and of its streamed
``result`` event."""

from __future__ import annotations

from typing import Any


def result_json(result: Any, trace: bool) -> dict[str, Any]:
    return {
        "outputs": result.outputs,
        "latency_ms": round(result.latency_ms, 3),
        "trace": result.trace.to_chrome() if trace else None,
    }


def _default(value: Any) -> Any:
    """JSON for values in outputs: dataclasses (``Doc``), numpy scalars/arrays, sets."""
    import dataclasses

    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return str(value)


def dumps(data: Any) -> str:
    import json

    return json.dumps(data, default=_default)
