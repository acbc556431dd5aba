"""Prompts in the model's own format: chat messages rendered with the model's chat template.

Not an optimization: it runs on every plan, optimized or not, before the passes, so the prefill
split sees the rendered template (the part before the first late placeholder, chat header and
instruction included, is still a prefix of the prompt).
"""

from __future__ import annotations

from ayo.scheduler import Plan

from .manager import CompileContext


def format_prompts(plan: Plan, ctx: CompileContext) -> Plan:
    """Every node's chat ``prompt`` replaced by :meth:`Prompt.for_model` with the plan
    tokenizer's ``render_chat`` (the plain text when the model has no chat template)."""
    render = ctx.tokenizer.render_chat
    nodes, changed = [], False
    for node in plan.nodes:
        prompt = node.config.prompt_or_none
        if prompt is not None and prompt.messages:
            node = node.with_(config=node.config.with_(prompt=prompt.for_model(render)))
            changed = True
        nodes.append(node)
    return plan.replace_parts(nodes, list(plan.edges)) if changed else plan
