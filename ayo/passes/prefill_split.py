"""Prefill split: prefill a prompt's early part while its late inputs are still produced.

The early part is the longest prefix of the template whose placeholders are all query inputs
(ready when the query starts). It becomes a PartialPrefill; a FullPrefill appends the rest once
the late inputs arrive. At run time the split falls on a token boundary of the whole rendered
prompt (see ``ayo.scheduler.runtime.handlers``). Skipped when the early part is estimated shorter than the
engine profile's ``prefill_split_min_tokens``.
"""

from __future__ import annotations

from ayo.scheduler import INPUT_ID, Edge, Node, Op, Plan, Port, PortType
from ayo.scheduler.ir.configs import FullPrefillConfig, PartialPrefillConfig

from .manager import CompileContext, Pass


def _split(plan: Plan, node: Node, ctx: CompileContext) -> Plan | None:
    if node.op != Op.PREFILL or node.item_port:
        return None
    prompt = node.config.prompt
    sources = {p: plan.source(node.id, p) for p in prompt.placeholders}
    early = {p for p, e in sources.items() if e is not None and e.src == INPUT_ID}
    if early == set(prompt.placeholders):
        return None  # everything is ready at once: nothing to overlap
    split_at = prompt.split_offset(early)
    head = [
        p
        for p in prompt.placeholders
        if p in early and prompt.template.find("{" + p + "}") < split_at
    ]
    profile = ctx.profile(node)
    estimate = len(
        ctx.tokenizer.encode(prompt.static_prefix(split_at))
    ) + profile.placeholder_tokens * len(head)
    if estimate < profile.prefill_split_min_tokens:
        return None
    seq = Port("seq", PortType.SEQ)
    control = tuple(p for p in node.inputs if p.control)
    partial = Node(
        f"{node.id}.partial",
        Op.PARTIAL_PREFILL,
        node.engine,
        PartialPrefillConfig(prompt, split_at),
        tuple(Port(p, PortType.TEXT) for p in head) + control,
        (seq,),
        node.module,
    )
    full = Node(
        f"{node.id}.full",
        Op.FULL_PREFILL,
        node.engine,
        FullPrefillConfig(prompt),
        (seq, *(p for p in node.inputs if not p.control)),
        (seq,),
        node.module,
    )
    edges: list[Edge] = []
    for e in plan.edges:
        if e.dst == node.id:
            if e.dst_port in head or e.dst_port in {p.name for p in control}:
                edges.append(e.with_(dst=partial.id))
            if e.dst_port in prompt.placeholders:
                edges.append(e.with_(dst=full.id))
        elif e.src == node.id:
            edges.append(e.with_(src=full.id))
        else:
            edges.append(e)
    edges.append(Edge(partial.id, "seq", full.id, "seq"))
    nodes: list[Node] = []
    for n in plan.nodes:
        nodes += [partial, full] if n.id == node.id else [n]
    return plan.replace_parts(nodes, edges)


prefill_split = Pass("prefill_split", _split)
