"""``POST /v1/completions`` and ``POST /v1/chat/completions`` (JSON or server-sent events).

Streams follow OpenAI's shapes: ``data: {chunk}`` lines, then ``data: [DONE]``; chat chunks are
``chat.completion.chunk`` objects whose first ``delta`` carries the role; with
``stream_options.include_usage`` every chunk has ``"usage": null`` and a last chunk with no
choices carries the usage. An error after the stream began is sent as ``data: {"error": ...}``.
A client that goes away mid-stream makes the next write fail: the generation is closed and its
sequence's KV blocks are freed.

``usage`` is counted in the LLM's tokens: ``prompt_tokens`` the rendered prompt's tokens,
``completion_tokens`` the tokens the engine generated (an end-of-sequence token included, as it
was computed). For an ``app:NAME`` model they are the question's and the answer's tokens (the
app's own LLM calls, with their retrieved context, are not counted).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

from aiohttp import web

from ayo.engines.llm.tools import (
    CallDelta,
    Tool,
    ToolCall,
    ToolCallParser,
    parse_calls,
    tool_grammar,
)
from ayo.server.errors import ApiError, bad_request, read_json
from ayo.server.openai.generate import OFFLOAD_CHARS, encode_prompt, fit_sampling, generate
from ayo.server.openai.requests import (
    COMPLETIONS_DEFAULT_MAX_TOKENS,
    StreamOptions,
    check_model,
    last_user_message,
    new_id,
    parse_messages,
    parse_model,
    parse_prompts,
    parse_sampling,
    parse_stream,
    parse_tool_fields,
)
from ayo.server.openai.stream import stream_chunks, usage_json
from ayo.server.state import STATE, ServerState


async def _render(llm: Any, messages: list[dict[str, Any]], tools: list[Tool]) -> list[int]:
    """The chat template's token ids; long conversations are rendered off the event loop."""
    if sum(len(str(m.get("content") or "")) for m in messages) > OFFLOAD_CHARS:
        return await asyncio.to_thread(llm.apply_chat_template, messages, True, tools)
    return llm.apply_chat_template(messages, True, tools)


def count_tokens(llm: Any, text: str) -> int:
    return len(llm.tokenizer.encode(text))


def _entry(llm: Any, token_id: int, logprob: float) -> dict[str, Any]:
    text = llm.tokenizer.decode([token_id])
    return {"token": text, "logprob": logprob, "bytes": list(text.encode())}


def chat_logprobs(llm: Any, tokens: Any) -> dict[str, Any]:
    """OpenAI's chat ``logprobs``: ``{"content": [{token, logprob, bytes, top_logprobs}]}``."""
    content = [
        {**_entry(llm, t, lp.logprob), "top_logprobs": [_entry(llm, a, v) for a, v in lp.top]}
        for t, lp in tokens
    ]
    return {"content": content, "refusal": None}


def completion_logprobs(llm: Any, tokens: Any, offset: int) -> dict[str, Any]:
    """OpenAI's completions ``logprobs``: parallel lists of the tokens' texts, log-probabilities,
    top alternatives (text -> log-probability) and character offsets from ``offset``."""
    texts = [llm.tokenizer.decode([t]) for t, _ in tokens]
    offsets = []
    for text in texts:
        offsets.append(offset)
        offset += len(text)
    return {
        "tokens": texts,
        "token_logprobs": [lp.logprob for _, lp in tokens],
        "top_logprobs": [{llm.tokenizer.decode([a]): v for a, v in lp.top} for _, lp in tokens],
        "text_offset": offsets,
    }


# ---- /v1/completions ----------------------------------------------------------------------


async def completions(request: web.Request) -> web.StreamResponse:
    state = request.app[STATE]
    body = await read_json(request)
    model = parse_model(body)
    check_model(state, model, "llm")
    prompts = parse_prompts(body)
    limit = state.config.max_tokens_limit
    params, max_tokens = parse_sampling(
        body, default_max_tokens=COMPLETIONS_DEFAULT_MAX_TOKENS, limit=limit, chat=False
    )
    opts = parse_stream(body)
    llm = state.llm
    ids = [await encode_prompt(llm, p) for p in prompts]
    params = fit_sampling(llm, [len(i) for i in ids], params, max_tokens, limit)
    head = {
        "id": new_id("cmpl"),
        "object": "text_completion",
        "created": int(time.time()),
        "model": model,
    }
    n_prompt = sum(len(i) for i in ids)
    pieces = generate(state.app, ids, params, state.config.query_timeout_s)
    want_logprobs = params.logprobs is not None
    if not opts.stream:
        texts, reasons, counts = [""] * len(ids), [None] * len(ids), [0] * len(ids)
        cached = 0
        tokens: list[list] = [[] for _ in ids]
        async for p in pieces:
            texts[p.index] += p.text
            tokens[p.index] += p.tokens
            if p.finish_reason is not None:
                reasons[p.index], counts[p.index] = p.finish_reason, p.completion_tokens
                cached += p.cached_tokens
        choices = [
            {
                "index": i,
                "text": t,
                "logprobs": completion_logprobs(llm, tokens[i], 0) if want_logprobs else None,
                "finish_reason": r,
            }
            for i, (t, r) in enumerate(zip(texts, reasons))
        ]
        return web.json_response(
            {**head, "choices": choices, "usage": usage_json(n_prompt, sum(counts), cached)}
        )

    written = [0] * len(ids)  # characters streamed so far, per prompt (text_offset)

    def chunk(p: Any) -> dict[str, Any]:
        logprobs = None
        if want_logprobs:
            logprobs = completion_logprobs(llm, p.tokens, written[p.index])
        written[p.index] += len(p.text)
        choice = {
            "index": p.index,
            "text": p.text,
            "logprobs": logprobs,
            "finish_reason": p.finish_reason,
        }
        return {**head, "choices": [choice]}

    return await stream_chunks(request, pieces, chunk, head, opts, n_prompt)


# ---- /v1/chat/completions -----------------------------------------------------------------


async def chat_completions(request: web.Request) -> web.StreamResponse:
    state = request.app[STATE]
    body = await read_json(request)
    model = parse_model(body)
    kind = check_model(state, model, "chat")
    messages = parse_messages(body)
    tooling = parse_tool_fields(body)
    limit = state.config.max_tokens_limit
    params, max_tokens = parse_sampling(body, default_max_tokens=None, limit=limit)
    opts = parse_stream(body)
    head = {
        "id": new_id("chatcmpl"),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
    }
    if kind == "app":
        if params.logprobs is not None:
            raise bad_request(
                f"model {model!r} is an app, whose answer its workflow writes: logprobs are "
                f"served for {state.llm_id!r}"
            )
        if params.grammar is not None:
            raise bad_request(
                f"model {model!r} is an app, whose answer its workflow writes: structured output "
                f"(response_format, guided_*) applies to {state.llm_id!r}"
            )
        if tooling.tools:
            raise bad_request(
                f"model {model!r} is an app, whose workflow calls its own tools: tools are "
                f"served for {state.llm_id!r}"
            )
        return await _app_chat(request, state, model.removeprefix("app:"), messages, head, opts)
    llm = state.llm
    if not llm.tokenizer.has_chat_template:
        raise bad_request(f"model {model!r} has no chat template: use /v1/completions")
    from ayo.engines.llm import ContextLengthExceeded

    if tooling.active:
        if params.grammar is not None:
            raise bad_request(
                "fields 'tools' and 'response_format' (or guided_*) each constrain the output: "
                "give one, or tool_choice 'none'"
            )
        grammar = tool_grammar(tooling.tools, tooling.choice, tooling.parallel)
        params = dataclasses.replace(params, grammar=grammar)
    try:
        ids = await _render(llm, messages, tooling.tools if tooling.active else [])
    except ContextLengthExceeded as exc:
        raise ApiError(422, "context_length_exceeded", f"field 'messages': {exc}") from None
    except Exception as exc:  # a template that rejects these messages (roles, order)
        raise bad_request(
            f"field 'messages' does not fit the model's chat template: {exc}"
        ) from None
    params = fit_sampling(llm, [len(ids)], params, max_tokens, limit)
    pieces = generate(state.app, [ids], params, state.config.query_timeout_s)
    logprobs = (lambda tokens: chat_logprobs(llm, tokens)) if params.logprobs is not None else None
    if not opts.stream:
        text, reason, count, tokens, cached = "", None, 0, [], 0
        async for p in pieces:
            text += p.text
            tokens += p.tokens
            if p.finish_reason is not None:
                reason, count, cached = p.finish_reason, p.completion_tokens, p.cached_tokens
        usage = usage_json(len(ids), count, cached)
        lp = logprobs(tokens) if logprobs else None
        calls: list[ToolCall] = []
        if tooling.active:
            text, calls = parse_calls(text)
        return web.json_response(_chat_body(head, text, reason, usage, lp, calls))
    parser = ToolCallParser() if tooling.active else None
    return await _chatstream_chunks(request, pieces, head, opts, len(ids), logprobs, parser)


def _finish_reason(reason: str | None, calls: bool) -> str | None:
    """OpenAI's ``tool_calls`` where the model ended its turn with calls."""
    return "tool_calls" if calls and reason == "stop" else reason


def _chat_body(
    head: dict[str, Any],
    text: str,
    reason: str | None,
    usage: dict,
    logprobs: Any = None,
    calls: Sequence[ToolCall] = (),
) -> dict:
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if calls:
        message["content"] = text.strip() or None
        message["tool_calls"] = [c.to_openai() for c in calls]
    choice = {
        "index": 0,
        "message": message,
        "logprobs": logprobs,
        "finish_reason": _finish_reason(reason, bool(calls)),
    }
    return {**head, "choices": [choice], "usage": usage}


def _call_deltas(deltas: list[CallDelta]) -> tuple[str, list[dict[str, Any]]]:
    """A piece's content and its tool-call deltas as OpenAI streams them (per call index: its
    id, type and name first, then pieces of its arguments)."""
    content, by_index = "", {}
    for d in deltas:
        if d.index < 0:
            content += d.content
            continue
        entry = by_index.setdefault(d.index, {"index": d.index})
        if d.id:
            entry.update(id=d.id, type="function")
            entry.setdefault("function", {})["name"] = d.name
        if d.arguments:
            fn = entry.setdefault("function", {})
            fn["arguments"] = fn.get("arguments", "") + d.arguments
    for entry in by_index.values():
        entry.setdefault("function", {}).setdefault("arguments", "")
    return content, list(by_index.values())


def _chatstream_chunks(request, pieces, head, opts, n_prompt, logprobs=None, parser=None):
    chunk_head = {**head, "object": "chat.completion.chunk"}

    def chunk(p: Any) -> dict[str, Any]:
        text, calls = p.text, []
        if parser is not None:
            deltas = parser.feed(p.text)
            if p.finish_reason is not None:
                deltas += parser.finish()
            text, calls = _call_deltas(deltas)
        delta: dict[str, Any] = {"content": text} if text else {}
        if calls:
            delta["tool_calls"] = calls
        lp = logprobs(p.tokens) if logprobs else None
        made = parser is not None and bool(parser.calls)
        reason = _finish_reason(p.finish_reason, made)
        choice = {"index": 0, "delta": delta, "logprobs": lp, "finish_reason": reason}
        return {**chunk_head, "choices": [choice]}

    first = {
        **chunk_head,
        "choices": [
            {
                "index": 0,
                "delta": {"role": "assistant", "content": ""},
                "logprobs": None,
                "finish_reason": None,
            }
        ],
    }
    return stream_chunks(request, pieces, chunk, chunk_head, opts, n_prompt, first)


async def _app_chat(
    request: web.Request,
    state: ServerState,
    name: str,
    messages: list[dict[str, str]],
    head: dict[str, Any],
    opts: StreamOptions,
) -> web.StreamResponse:
    """Run app ``name`` on the last user message; its ``answer`` is the assistant's reply."""
    from ayo.server.mapping import to_api_error
    from ayo.server.openai.generate import Piece
    from ayo.server.routes_apps import app_inputs

    question = last_user_message(messages)
    needs = [i.name for i in app_inputs(state, name) if i.required and i.name != "question"]
    if needs:
        raise bad_request(
            f"app {name!r} needs inputs {needs} besides the question: use POST /v1/apps/{name}/query"
        )
    inputs = {"question": question}
    deadline = state.config.query_timeout_s
    n_prompt = count_tokens(state.llm, question)
    if not opts.stream:
        try:
            result = await state.app.run(name, inputs, deadline=deadline)
        except Exception as exc:
            raise to_api_error(exc) from None
        answer = str(result.outputs.get("answer", ""))
        usage = usage_json(n_prompt, count_tokens(state.llm, answer))
        return web.json_response(_chat_body(head, answer, "stop", usage))

    async def pieces() -> AsyncIterator[Piece]:
        answer = ""
        events = state.app.stream(name, inputs, deadline=deadline)
        try:
            async for event in events:
                if event.result is not None:
                    break
                answer += event.delta
                if event.delta:
                    yield Piece(0, event.delta)
        except Exception as exc:
            raise to_api_error(exc) from None
        finally:
            await events.aclose()
        yield Piece(0, "", "stop", count_tokens(state.llm, answer))

    return await _chatstream_chunks(request, pieces(), head, opts, n_prompt)
