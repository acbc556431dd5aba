"""The Agent primitive: a graph that grows at run time.

Each step is an LLM decode under the tools' grammar (``ayo.engines.llm.tools``); the calls it
writes become tool primitives, their results are appended to the conversation, and the next
step follows, until the model answers without a call or the step limit (whose last step is
decoded without tools, so it answers). What it does shows in the query's trace as it happens:
``<node>.step<k>.prefill`` and ``.decode`` spans on the LLM, ``<node>.step<k>.<tool>``
spans for the tools, and the ``steps`` output lists each step's text, calls and results.

- **One live sequence.** The conversation is one sequence in the engine. A step appends only
  what is new (the tool results and the next turn's header) by prefill onto the KV already
  there; the prompt is never prefilled twice (``Conversation.prefilled`` counts every token
  sent). Should a chat template re-render earlier turns differently (not a prefix of before),
  the conversation is prefilled anew, with a warning, and counted in ``reprefilled``.
- **Decode pipelining.** A tool starts the moment its call is complete in the decode stream,
  while the model writes on; a step's calls run concurrently.
- **Bad tools never fail the query.** A tool that raises, runs past its ``timeout_s`` or
  returns what JSON cannot hold gives the model an ``error: ...`` result and the loop goes on.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ayo.engines.llm.outputs import DecodePiece
from ayo.engines.llm.sampling import SamplingParams
from ayo.engines.llm.tools import (
    Tool,
    ToolCall,
    ToolCallParser,
    ToolChoice,
    answer_grammar,
    chat_messages,
    tool_grammar,
)

from ..batching.request_info import RequestInfo
from ..ir.graph import Node
from ..ir.parsers import SentenceLimit
from ..ir.tools import ToolFn, get_tool

log = logging.getLogger(__name__)
MAX_RESULT_CHARS = 2000  # a tool result longer than this is cut (the context window is small)


@dataclass(frozen=True)
class StepFacts:
    """A step's policy inputs (``RequestInfo.facts``): the agent node's, under its own id."""

    node_id: str
    op: str
    depth: int
    remaining_ms: float


def _step_info(info: RequestInfo | None, node_id: str, op: str) -> RequestInfo | None:
    if info is None:
        return None
    f = info.facts
    return RequestInfo(info.query_id, StepFacts(node_id, op, f.depth, f.remaining_ms), info.query)


class Conversation:
    """A chat kept as one live sequence of ``engine``: ``extend`` renders the messages and
    prefills only the tokens not already in the sequence."""

    def __init__(self, ctx: Any, engine: str, tools: list[Tool]) -> None:
        self.ctx, self.engine, self.tools = ctx, engine, tools
        self.llm = ctx.engines[engine]
        self.seq: Any = None
        self.covered = ""  # the text whose tokens are in the sequence
        self.prefilled = 0  # tokens sent to prefill, all steps
        self.reprefilled = 0  # of those, tokens sent again (a template that is not a prefix)

    def _parts(self, messages: list[dict[str, Any]]) -> list[tuple[str, bool]]:
        tok = self.llm.tokenizer
        msgs, listed = chat_messages(messages, self.tools, tok.renders_tools)
        parts = tok.render_chat_parts(msgs, True, listed)
        return parts if parts is not None else _plain_parts(msgs)

    async def extend(self, messages: list[dict[str, Any]], info: RequestInfo | None) -> None:
        parts = self._parts(messages)
        text = "".join(t for t, _ in parts)
        if self.seq is not None and text.startswith(self.covered):
            new = _after(parts, len(self.covered))
        else:
            if self.seq is not None:
                log.warning("agent: the chat template re-rendered earlier turns; prefilling anew")
                self.reprefilled += self.prefilled
                await self.ctx.close_seq(self.engine, self.seq)
            self.seq = await self.ctx.open_seq(self.engine)
            new = parts
        ids = self.llm.tokenizer.encode_parts(new) if new else []
        if ids:
            await self.llm.prefill(self.seq, ids, info=info)
        self.prefilled += len(ids)
        self.covered = text

    def decode(self, params: SamplingParams, info: RequestInfo | None) -> Any:
        return self.llm.decode(self.seq, params, info=info)

    def decoded(self, text: str, end: Any) -> None:
        """What the decode put in the sequence: its text, and the stop token it ended with."""
        self.covered += text
        if end is not None and end.finish_reason == "stop" and end.token_ids:
            last = self.llm.tokenizer.decode(list(end.token_ids[-1:]))
            if not text.endswith(last):
                self.covered += last

    async def close(self) -> None:
        if self.seq is not None:
            await self.ctx.close_seq(self.engine, self.seq)
            self.seq = None


def _plain_parts(messages: list[dict[str, Any]]) -> list[tuple[str, bool]]:
    """A conversation for a tokenizer without a chat template: ``role: content`` blocks."""
    parts: list[tuple[str, bool]] = []
    for m in messages:
        parts += [(f"{m['role']}: ", False), (str(m.get("content") or ""), True), ("\n\n", False)]
    return [*parts, ("assistant: ", False)]


def _after(parts: list[tuple[str, bool]], offset: int) -> list[tuple[str, bool]]:
    """The parts from character ``offset`` on."""
    out, at = [], 0
    for text, data in parts:
        if at + len(text) > offset:
            out.append((text[max(offset - at, 0) :], data))
        at += len(text)
    return [(t, d) for t, d in out if t]


async def run_agent(
    node: Node, inputs: dict[str, Any], ctx: Any, info: RequestInfo | None
) -> dict[str, Any]:
    cfg = node.config
    fns = {name: get_tool(name) for name in cfg.tools}
    specs = [fn.spec for fn in fns.values()]
    task = "".join(text for text, _ in cfg.task.render_parts(inputs))
    messages: list[dict[str, Any]] = [{"role": "system", "content": cfg.system}] * bool(
        cfg.system
    ) + [{"role": "user", "content": task}]
    conv = Conversation(ctx, node.engine, specs)
    steps: list[dict[str, Any]] = []
    seen: set[tuple[str, str]] = set()  # the calls made so far (name, canonical arguments)
    answer, finish = "", "max_steps"
    try:
        for k in range(1, cfg.max_steps + 1):
            last = k == cfg.max_steps
            where = f"{node.id}.step{k}"
            await conv.extend(messages, _step_info(info, f"{where}.prefill", "Prefill"))
            mode = (
                "none" if last or not specs else ("required" if k <= cfg.required_steps else "auto")
            )
            grammar = tool_grammar(specs, ToolChoice(mode), cfg.parallel)
            answering = grammar is None
            if answering and specs:
                grammar = answer_grammar()
            params = SamplingParams(
                max_tokens=cfg.max_tokens,
                temperature=0.0,
                grammar=grammar,
                stop=cfg.stop if answering else (),
            )
            text, calls, reason = await _step(
                conv, params, answering, seen, where, fns, cfg, ctx, info
            )
            try:
                results = await asyncio.gather(*(task for _, task in calls))
            except BaseException:  # an engine failed under a tool: the others stop too
                for _, task in calls:
                    task.cancel()
                raise
            messages.append({"role": "assistant", "content": text})
            step: dict[str, Any] = {"step": k, "text": text, "finish_reason": reason}
            if calls:
                step["calls"] = [
                    {"name": c.name, "arguments": c.arguments, "result": r}
                    for (c, _), r in zip(calls, results)
                ]
            steps.append(step)
            if not calls:
                answer = _answer_text(text, cfg.stop, cfg.max_sentences)
                finish = reason
                if last and specs:  # it answers because it may call nothing more
                    finish = "max_steps"
                break
            for (call, _), result in zip(calls, results):
                messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    finally:
        await conv.close()
    if info is not None:
        info.query.decoded(node.id, DecodePiece(-1, answer, 0))  # type: ignore[arg-type]
    summary = {
        "finish_reason": finish,
        "prefilled": conv.prefilled,
        "reprefilled": conv.reprefilled,
    }
    return {"answer": answer, "steps": [*steps, summary]}


async def _step(
    conv: Conversation,
    params: SamplingParams,
    answering: bool,
    seen: set[tuple[str, str]],
    where: str,
    fns: Mapping[str, ToolFn],
    cfg: Any,
    ctx: Any,
    info: RequestInfo | None,
) -> tuple[str, list[tuple[ToolCall, asyncio.Task[str]]], str]:
    """One decode (its text, calls and finish reason); each call starts its tool as soon as it
    is complete in the stream."""
    parser = ToolCallParser()
    calls: list[tuple[ToolCall, asyncio.Task[str]]] = []
    stream = conv.decode(params, _step_info(info, f"{where}.decode", "Decode"))
    limit = SentenceLimit(cfg.max_sentences) if answering and cfg.max_sentences else None
    text = ""
    try:
        async for piece in stream:
            text += piece.text
            if limit is not None:  # the answer ends after its last sentence
                limit.feed(piece.text)
                if limit.done:
                    text = limit.text
                    break
            if answering:  # no tools this step: its text is the answer
                continue
            for d in parser.feed(piece.text):
                if d.call is not None:
                    name = f"{where}.{d.call.name}{len(calls)}"
                    run = _call(fns.get(d.call.name), d.call, name, cfg, ctx, info, seen)
                    calls.append((d.call, asyncio.create_task(run)))
        for d in parser.finish() if not answering else ():
            if d.call is None:
                continue
            if d.call.complete:
                name = f"{where}.{d.call.name}{len(calls)}"
                run = _call(fns.get(d.call.name), d.call, name, cfg, ctx, info, seen)
            else:  # cut short by max_tokens: not run, and not an answer either
                run = _cut_short(params.max_tokens)
            calls.append((d.call, asyncio.create_task(run)))
    except BaseException:
        for _, task in calls:
            task.cancel()
        raise
    finally:
        await stream.aclose()
    conv.decoded(text, stream.end)
    cut = limit is not None and limit.done  # ended here, after its last sentence
    return text, calls, "stop" if cut else stream.end.finish_reason


def _answer_text(text: str, stop: tuple[str, ...], max_sentences: int) -> str:
    """An answer cut at its first ``stop`` string and after ``max_sentences`` sentences: an
    ``auto`` step that answered was decoded without them, as a call could have followed."""
    cut = min((i for i in (text.find(s) for s in stop) if i >= 0), default=len(text))
    text = text[:cut]
    if max_sentences:
        limit = SentenceLimit(max_sentences)
        limit.feed(text + " ")
        text = limit.text
    return text.strip()


async def _cut_short(max_tokens: int) -> str:
    return f"error: the call was cut short at {max_tokens} tokens; write a shorter one"


async def _call(
    fn: ToolFn | None,
    call: ToolCall,
    node_id: str,
    cfg: Any,
    ctx: Any,
    info: Any,
    seen: set[tuple[str, str]],
) -> str:
    """A tool's result as text for the model: its JSON (a string as it is), or ``error: ...``
    for a call the model got wrong (unknown tool, arguments that are no object, a call the
    conversation already made: a small model repeats itself), a timeout, or a user tool that
    raised or returned what JSON cannot hold. The built-in search's engines failing is not
    the model's doing: that error fails the query."""
    start, ok = time.monotonic(), False
    try:
        args = _checked(fn, call, seen)
        if fn is None or isinstance(args, str):  # the model's mistake: it reads why
            result = str(args)
        elif fn.func is None:  # the built-in search, on the agent's own engines
            result = await asyncio.wait_for(_search(args, cfg, ctx, info, node_id), fn.timeout_s)
            ok = True
        else:
            result, ok = await _user_tool(fn, args), True
    except asyncio.TimeoutError:
        result = f"error: tool {call.name!r} took longer than {fn.timeout_s if fn else 0:g} s"
    finally:
        if ctx.on_span is not None:
            ctx.on_span(node_id, "tool", start, time.monotonic(), ok)
    return result[:MAX_RESULT_CHARS]


def _checked(fn: ToolFn | None, call: ToolCall, seen: set[tuple[str, str]]) -> dict | str:
    """The call's arguments, or the error the model reads instead of a result."""
    if fn is None:
        return f"error: no tool named {call.name!r}"
    args = call.parsed_arguments()
    if not isinstance(args, dict):
        return "error: the arguments must be a JSON object"
    key = (call.name, json.dumps(args, sort_keys=True))
    if key in seen:
        return "error: this exact call was made before: its result is above"
    seen.add(key)
    if fn.func is None and not str(args.get("query") or "").strip():
        return "error: search needs a non-empty 'query'"
    return args


async def _user_tool(fn: ToolFn, args: dict[str, Any]) -> str:
    """A registered function's result as JSON text; what it raises is the model's to read."""
    try:
        if inspect.iscoroutinefunction(fn.func):
            value = await asyncio.wait_for(fn.func(**args), fn.timeout_s)
        else:
            value = await asyncio.wait_for(asyncio.to_thread(fn.func, **args), fn.timeout_s)
        return value if isinstance(value, str) else json.dumps(value)
    except asyncio.TimeoutError:
        raise
    except Exception as exc:  # the user's code failing (or non-JSON data): never a 500
        return f"error: {type(exc).__name__}: {exc}"


async def _search(args: dict[str, Any], cfg: Any, ctx: Any, info: Any, node_id: str) -> str:
    vectors = await ctx.engines[cfg.embedder].embed(
        [str(args["query"])], info=_step_info(info, f"{node_id}.embed", "Embed")
    )
    [hits] = await ctx.engines[cfg.index].search(
        cfg.collection, list(vectors), cfg.k, info=_step_info(info, f"{node_id}.search", "Search")
    )
    return "\n\n".join(d.text for d in hits) or "no passage matches"
