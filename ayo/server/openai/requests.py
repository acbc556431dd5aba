"""Parsing OpenAI-style request bodies into typed requests (400 naming the field when wrong).

Follows the OpenAI API where it is served (``max_tokens``/``max_completion_tokens``,
``temperature`` default 1, ``stop`` string or list, ``stream_options.include_usage``,
``frequency_penalty`` and ``presence_penalty``); fields that would change the output but are not
implemented (``n`` > 1, ``echo``, the legacy ``functions``, ``logit_bias``) are refused with 400
rather than ignored. Unknown fields are ignored, as OpenAI-compatible servers do (clients send
vendor extras). Extensions (as vLLM's server): ``top_k``, ``ignore_eos`` and
``repetition_penalty``.

Structured output: ``response_format`` ``{"type": "json_object"}`` (any JSON object) and
``{"type": "json_schema", "json_schema": {"name", "schema", "strict"}}`` (JSON valid against the
schema), and vLLM's extensions ``guided_json`` (a schema), ``guided_regex`` and
``guided_choice`` (a list of strings); at most one of them. A schema the grammar library cannot
compile is a 400 from the engine, naming the problem.

Tool calls (chat): ``tools``, ``tool_choice`` (``auto``, ``none``, ``required`` or a named
function), ``parallel_tool_calls``; assistant messages with ``tool_calls`` and ``tool`` messages
answering them by ``tool_call_id`` (400 naming an id no earlier call made). Calls are
constrained by a grammar built from the tools' schemas (``ayo.engines.llm.tools``), so tools and
``response_format`` are not given together.

Log-probabilities: chat's ``logprobs`` / ``top_logprobs`` and completions' ``logprobs`` N, each
token's from the model's own distribution (before penalties, grammar and temperature).
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from typing import Any

from ayo.engines.errors import InvalidRequest
from ayo.engines.llm.sampling import MAX_LOGPROBS, Grammar, SamplingParams
from ayo.engines.llm.tools import (
    Tool,
    ToolCall,
    ToolChoice,
    check_tool_messages,
    parse_tool_choice,
    parse_tools,
)
from ayo.server.errors import ApiError, bad_request, field, integral, not_found, number_in
from ayo.server.patterns import PROMPT_CHARACTER
from ayo.server.state import ServerState

MAX_STOP_STRINGS = 16
MAX_SEED = 2**63 - 1  # torch generators take a signed 64-bit seed
MAX_TOP_K = 1 << 20
COMPLETIONS_DEFAULT_MAX_TOKENS = 16  # OpenAI's default for /v1/completions


@dataclass(frozen=True)
class StreamOptions:
    stream: bool
    include_usage: bool


def parse_model(body: dict[str, Any]) -> str:
    return field(body, "model", str, required=True)


def parse_stream(body: dict[str, Any]) -> StreamOptions:
    stream = field(body, "stream", bool, False)
    opts = {k: v for k, v in field(body, "stream_options", dict, {}).items() if v is not None}
    if opts and not stream:
        raise bad_request("field 'stream_options' is only allowed with 'stream': true")
    return StreamOptions(stream, field(opts, "include_usage", bool, False))


def parse_sampling(
    body: dict[str, Any], *, default_max_tokens: int | None, limit: int, chat: bool = True
) -> tuple[SamplingParams, int | None]:
    """The sampling fields of a completion or chat request, range-checked (``max_tokens`` and
    ``max_completion_tokens`` within 1..``limit``, the server's max_tokens_limit), as the
    engine's :class:`SamplingParams`, and the ``max_tokens`` asked for (None: as many as the
    context window leaves, at most ``limit``: ``fit_sampling`` sets it once the prompt's length
    is known; until then the params carry ``limit``)."""
    _refuse_unsupported(body)
    max_tokens = field(body, "max_completion_tokens", int, None)
    if max_tokens is None:
        max_tokens = field(body, "max_tokens", int, default_max_tokens)
    for name in ("max_tokens", "max_completion_tokens"):  # both checked, even the unused one
        number_in(field(body, name, int, None), name, 1, limit)
    temperature = field(body, "temperature", float, 1.0)
    number_in(temperature, "temperature", 0.0, 2.0)
    top_p = field(body, "top_p", float, 1.0)
    if not 0 < top_p <= 1:
        raise bad_request(f"field 'top_p' must be in (0, 1], got {top_p}")
    top_k = field(body, "top_k", int, 0)
    number_in(top_k, "top_k", -1, MAX_TOP_K)  # -1 (vLLM) and 0 both keep every token
    seed = field(body, "seed", int, None)
    number_in(seed, "seed", 0, MAX_SEED)
    repetition_penalty = field(body, "repetition_penalty", float, 1.0)
    if not 0 < repetition_penalty <= 2:
        raise bad_request(
            f"field 'repetition_penalty' must be in (0, 2] (1 = off), got {repetition_penalty}"
        )
    penalties = {}
    for name in ("frequency_penalty", "presence_penalty"):
        penalties[name] = field(body, name, float, 0.0)
        number_in(penalties[name], name, -2.0, 2.0)
    params = SamplingParams(
        max_tokens=max_tokens or limit,
        temperature=temperature,
        top_p=top_p,
        top_k=max(top_k, 0),
        seed=seed,
        stop=parse_stop(body),
        ignore_eos=field(body, "ignore_eos", bool, False),
        repetition_penalty=repetition_penalty,
        grammar=parse_grammar(body),
        logprobs=parse_logprobs(body, chat),
        **penalties,
    )
    return params, max_tokens


MAX_COMPLETION_LOGPROBS = 5  # OpenAI's limit on /v1/completions


def parse_logprobs(body: dict[str, Any], chat: bool) -> int | None:
    """How many alternatives each token's log-probability comes with (None: no logprobs).
    Chat: ``logprobs`` true, ``top_logprobs`` 0-20 (only with it); completions: ``logprobs``
    0-5, as OpenAI's APIs take them."""
    if not chat:
        if body.get("top_logprobs") is not None:
            raise bad_request("field 'top_logprobs' is a chat field: completions take 'logprobs' N")
        n = field(body, "logprobs", int, None)
        number_in(n, "logprobs", 0, MAX_COMPLETION_LOGPROBS)
        return n
    want = field(body, "logprobs", bool, False)
    top = field(body, "top_logprobs", int, None)
    number_in(top, "top_logprobs", 0, MAX_LOGPROBS)
    if top is not None and not want:
        raise bad_request("field 'top_logprobs' needs 'logprobs': true")
    return (top or 0) if want else None


GUIDED = ("guided_json", "guided_regex", "guided_choice")


def parse_grammar(body: dict[str, Any]) -> Grammar | None:
    """The grammar a request's ``response_format`` or ``guided_*`` field asks for (None: free
    text); 400 naming the field when it is malformed or more than one is given."""
    fmt = field(body, "response_format", dict, None)
    kind = None if fmt is None else fmt.get("type", "text")
    given = [n for n in GUIDED if body.get(n) is not None]
    if kind not in (None, "text"):
        given.insert(0, "response_format")
    if len(given) > 1:
        raise bad_request(f"fields {given} each constrain the output: give at most one")
    try:
        if kind == "json_object":
            return Grammar.json_object()
        if kind == "json_schema":
            spec = fmt.get("json_schema")
            if not isinstance(spec, dict) or "schema" not in spec:
                raise bad_request(
                    "field 'response_format.json_schema' must be an object with a 'schema' "
                    '(e.g. {"name": "answer", "schema": {"type": "object"}, "strict": true})'
                )
            return Grammar.json_schema(spec["schema"])
        if kind not in (None, "text"):
            raise bad_request(
                "field 'response_format.type' must be 'text', 'json_object' or 'json_schema', "
                f"got {kind!r:.40}"
            )
        if body.get("guided_json") is not None:
            return Grammar.json_schema(body["guided_json"])
        if body.get("guided_regex") is not None:
            return Grammar.regex(field(body, "guided_regex", str))
        if body.get("guided_choice") is not None:
            return Grammar.choice(field(body, "guided_choice", list))
    except InvalidRequest as exc:
        where = given[0] if given else "response_format"
        raise bad_request(f"field {where!r}: {exc}") from None
    return None


def parse_stop(body: dict[str, Any]) -> tuple[str, ...]:
    stop = field(body, "stop", (str, list), None)
    if stop is None:
        return ()
    stops = [stop] if isinstance(stop, str) else stop
    if len(stops) > MAX_STOP_STRINGS or any(not isinstance(s, str) or not s for s in stops):
        raise bad_request(
            f"field 'stop' must be a non-empty string or a list of at most {MAX_STOP_STRINGS} "
            f"non-empty strings, got {stop!r:.80}"
        )
    return tuple(stops)


def _refuse_unsupported(body: dict[str, Any]) -> None:
    n = field(body, "n", int, 1)
    if n != 1:
        raise bad_request(f"field 'n' must be 1 (one choice per prompt is served), got {n}")
    best_of = field(body, "best_of", int, 1)
    if best_of != 1:
        raise bad_request(f"field 'best_of' must be 1, got {best_of}")
    for name in ("echo", "suffix", "logit_bias", "functions", "function_call"):
        value = body.get(name)
        if value not in (None, False, 0, "", [], {}):
            raise bad_request(f"field {name!r} is not supported by this server")


def parse_prompts(body: dict[str, Any]) -> list[str | list[int]]:
    """``prompt``: a string, a list of strings, a list of token ids, or a list of those."""
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        prompts: list[Any] = [prompt]
    elif isinstance(prompt, list) and prompt and all(_is_token(t) for t in prompt):
        prompts = [prompt]
    elif isinstance(prompt, list) and prompt:
        prompts = prompt
    else:
        raise bad_request(
            "field 'prompt' must be a string, a list of strings, a list of token ids or a list "
            f"of token-id lists (non-empty), got {str(prompt)[:80]}"
        )
    for p in prompts:
        ok = isinstance(p, str) or (isinstance(p, list) and all(_is_token(t) for t in p))
        if isinstance(p, str) and not _PROMPT_TEXT.search(p):
            ok = False  # control characters alone (some encode to no token)
        if not ok or not p:
            raise bad_request(f"field 'prompt' has an invalid or empty item: {str(p)[:80]}")
    return [p if isinstance(p, str) else [integral(t) for t in p] for p in prompts]


_PROMPT_TEXT = re.compile(PROMPT_CHARACTER)


def _is_token(t: Any) -> bool:
    return integral(t) is not None


ROLES = ("system", "developer", "user", "assistant", "tool")


@dataclass(frozen=True)
class ToolFields:
    tools: list[Tool]
    choice: ToolChoice
    parallel: bool

    @property
    def active(self) -> bool:
        """The model may call tools (their calls are parsed out of its answer)."""
        return bool(self.tools) and self.choice.mode != "none"


def parse_tool_fields(body: dict[str, Any]) -> ToolFields:
    """``tools``, ``tool_choice`` and ``parallel_tool_calls`` (400 naming what is wrong)."""
    try:
        tools = parse_tools(field(body, "tools", list, []))
        choice = parse_tool_choice(body.get("tool_choice"), tools)
    except InvalidRequest as exc:
        raise bad_request(f"field {exc}") from None  # "tools[1].function: ..."
    return ToolFields(tools, choice, field(body, "parallel_tool_calls", bool, True))


def parse_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    """``messages`` as ``[{"role", "content"}]`` with text content (a list of text parts is
    joined; ``developer`` is the template's ``system``); an assistant's ``tool_calls`` as
    :class:`ToolCall`s, a tool result's ``tool_call_id``. 400 for a tool result no earlier
    call asked for."""
    messages = field(body, "messages", list, required=True)
    if not messages:
        raise bad_request("field 'messages' must hold at least one message")
    out = []
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(m, dict):
            raise bad_request(f"field {where!r} must be an object with 'role' and 'content'")
        role = m.get("role")
        if role not in ROLES:
            raise bad_request(f"field '{where}.role' must be one of {list(ROLES)}, got {role!r}")
        message: dict[str, Any] = {
            "role": "system" if role == "developer" else role,
            "content": _text_content(m.get("content"), where),
        }
        if role == "assistant" and m.get("tool_calls"):
            message["tool_calls"] = _tool_calls(m["tool_calls"], where)
        if role == "tool":
            if not isinstance(m.get("tool_call_id"), str):
                raise bad_request(f"field '{where}.tool_call_id' (a string) is required")
            message["tool_call_id"] = m["tool_call_id"]
        out.append(message)
    try:
        check_tool_messages(out)
    except InvalidRequest as exc:
        raise bad_request(f"field 'messages': {exc}") from None
    return out


def _tool_calls(calls: Any, where: str) -> list[ToolCall]:
    """An assistant message's ``tool_calls`` (OpenAI's shape; ``arguments`` JSON text)."""
    if not isinstance(calls, list):
        raise bad_request(f"field '{where}.tool_calls' must be a list")
    out = []
    for j, c in enumerate(calls):
        at = f"{where}.tool_calls[{j}]"
        fn = c.get("function") if isinstance(c, dict) else None
        if not isinstance(fn, dict) or not isinstance(c.get("id"), str):
            raise bad_request(f"field {at!r} must be {{'id', 'type': 'function', 'function'}}")
        name, arguments = fn.get("name"), fn.get("arguments", "{}")
        if not isinstance(name, str) or not isinstance(arguments, str):
            raise bad_request(f"field '{at}.function' needs a string 'name' and 'arguments'")
        call = ToolCall(c["id"], name, arguments or "{}")
        if not call.complete:
            raise bad_request(f"field '{at}.function.arguments' must be JSON text")
        out.append(call)
    return out


def _text_content(content: Any, where: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text":
                raise bad_request(f"field '{where}.content' supports only text parts")
            text = part.get("text")
            if not isinstance(text, str):
                raise bad_request(f"field '{where}.content[].text' must be a string")
            texts.append(text)
        return "".join(texts)
    raise bad_request(f"field '{where}.content' must be a string or a list of text parts")


def last_user_message(messages: list[dict[str, str]]) -> str:
    for m in reversed(messages):
        if m["role"] == "user" and m["content"].strip():
            return m["content"]
    raise ApiError(400, "invalid_request_error", "an app model needs a non-empty user message")


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:24]}"


def check_model(state: ServerState, model: str, want: str) -> str:
    """The kind of ``model`` (``"llm"``, ``"embedder"``, ``"app"``): 404 for an unknown id, 400
    for a known id of the wrong kind (``want``: ``"llm"``, ``"chat"`` (the LLM or an app) or
    ``"embedder"``)."""
    if model not in state.model_ids:
        raise not_found(f"unknown model {model!r}; GET /v1/models lists {state.model_ids}")
    if model == state.llm_id:
        kind = "llm"
    elif model == state.embedder_id:
        kind = "embedder"
    else:
        kind = "app"
    if kind != want and not (want == "chat" and kind in ("llm", "app")):
        hint = {
            "llm": f"completions use {state.llm_id!r}; app models run on /v1/chat/completions",
            "chat": f"chat completions use {state.llm_id!r} or an 'app:NAME' model",
            "embedder": f"embeddings use {state.embedder_id!r}",
        }[want]
        raise bad_request(f"model {model!r} cannot serve this endpoint: {hint}")
    return kind
