"""Plans as JSON, Graphviz DOT, and pictures drawn by the ``dot`` binary."""

from __future__ import annotations

import shutil
import subprocess
from typing import TYPE_CHECKING, Any

from .configs import micro_batch
from .graph import EdgeKind
from .ops import Op

if TYPE_CHECKING:
    from .graph import Plan

_COLORS = {
    "llm": "#f4cccc",
    "embedder": "#cfe2f3",
    "index": "#d9ead3",
    "keyword": "#d9ead3",
    "reranker": "#fff2cc",
}


def plan_to_json(plan: Plan) -> dict[str, Any]:
    """``{"nodes": [{id, op, engine, module}...], "edges": [{src, src_port, dst, dst_port, kind}...]}``."""
    return {
        "nodes": [
            {"id": n.id, "op": n.op.value, "engine": n.engine, "module": n.module}
            for n in plan.nodes
        ],
        "edges": [
            {
                "src": e.src,
                "src_port": e.src_port,
                "dst": e.dst,
                "dst_port": e.dst_port,
                "kind": e.kind.value,
            }
            for e in plan.edges
        ],
    }


def _q(text: str) -> str:
    return '"' + text.replace('"', '\\"') + '"'


def plan_to_dot(plan: Plan) -> str:
    """DOT text: one box per primitive (grouped by module), stream edges bold and dashed,
    ordering-only edges dotted grey."""
    lines = [
        f"digraph {_q(plan.name)} {{",
        "  rankdir=LR;",
        '  node [shape=box, style="rounded,filled", fontname="Helvetica", fillcolor="#eeeeee"];',
    ]
    by_module: dict[str, list[str]] = {}
    for n in plan.nodes:
        label = (
            n.id
            if n.op in (Op.INPUT, Op.OUTPUT)
            else f"{n.id}\\n{n.op.value}" + (f" @{n.engine}" if n.engine else "")
        )
        if micro_batch(n.config):
            label += f"\\nmicro-batch {micro_batch(n.config)}"
        color = _COLORS.get(n.op.info.engine_kind, "#eeeeee")
        shape = ", shape=ellipse" if n.op in (Op.INPUT, Op.OUTPUT) else ""
        by_module.setdefault(n.module, []).append(
            f"  {_q(n.id)} [label={_q(label)}, fillcolor={_q(color)}{shape}];"
        )
    for i, (module, decls) in enumerate(by_module.items()):
        if module:
            lines.append(f"  subgraph cluster_{i} {{ label={_q(module)}; style=dashed; color=grey;")
            lines += ["  " + d for d in decls]
            lines.append("  }")
        else:
            lines += decls
    for e in plan.edges:
        port = plan.node(e.dst).input(e.dst_port)
        if port is not None and port.control:
            attrs = 'style=dotted, color=grey, label="after"'
        elif e.kind == EdgeKind.STREAM:
            attrs = f"style=dashed, penwidth=2, color={_q('#1155cc')}, label={_q(e.dst_port + ' (stream)')}"
        else:
            attrs = f"label={_q(e.dst_port)}"
        lines.append(f"  {_q(e.src)} -> {_q(e.dst)} [{attrs}, fontsize=9];")
    lines.append("}")
    return "\n".join(lines) + "\n"


def render_with_dot(dot_text: str, fmt: str = "svg") -> bytes:
    """Run Graphviz ``dot -T<fmt>`` on ``dot_text``; raises RuntimeError when ``dot`` is missing."""
    if fmt not in ("svg", "png", "pdf"):
        raise ValueError(f"format must be svg, png or pdf, got {fmt!r}")
    exe = shutil.which("dot")
    if exe is None:
        raise RuntimeError(
            "Graphviz's `dot` binary is not installed; install it (Debian/Ubuntu: "
            "`apt-get install graphviz`) or use --format dot / json"
        )
    proc = subprocess.run(
        [exe, f"-T{fmt}"], input=dot_text.encode(), capture_output=True, check=False, timeout=60
    )
    if proc.returncode != 0:
        raise RuntimeError(
            f"dot failed ({proc.returncode}): {proc.stderr.decode(errors='replace')[:500]}"
        )
    return proc.stdout
