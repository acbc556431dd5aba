"""Tool calls: how a model is told about tools, how its calls are written and constrained, and
how they are read back out of the decoded text (whole or as it streams).

The call format is the one Hermes/Qwen-style chat templates use, a JSON object between tags::

    <tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    </tool_call>

A model whose chat template renders ``tools`` is shown them by its template; a model without
(SmolLM2, the embedded default) gets :func:`tools_system_prompt` in its system message, and its
assistant calls and ``tool`` results are written into the conversation as text
(:func:`plain_messages`). Either way the calls are constrained by :func:`tool_grammar`, a
structural tag built from the tools' JSON schemas: the name is one of the tools', the arguments
are valid against that tool's schema, so every call parses and validates however small the model.

Torch-free: the server and the workflow's agents import it without loading the engine.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import InvalidRequest
from .sampling import Grammar

CALL_BEGIN = "<tool_call>"
CALL_END = "</tool_call>"
RESPONSE_BEGIN = "<tool_response>"
RESPONSE_END = "</tool_response>"
NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")  # OpenAI's function-name rule
TOOL_CHOICES = ("auto", "none", "required")


@dataclass(frozen=True)
class Tool:
    """A function the model may call: ``parameters`` is its arguments' JSON schema."""

    name: str
    description: str = ""
    parameters: Mapping[str, Any] = field(default_factory=lambda: {"type": "object"})

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not NAME.match(self.name):
            raise InvalidRequest(
                f"a tool's name is 1-64 letters, digits, '_', '.' or '-', got {self.name!r:.80}"
            )
        if not isinstance(self.description, str):
            raise InvalidRequest(f"tool {self.name!r}: description must be a string")
        if not isinstance(self.parameters, Mapping):
            raise InvalidRequest(f"tool {self.name!r}: parameters must be a JSON schema object")

    def to_openai(self) -> dict[str, Any]:
        fn = {"name": self.name, "description": self.description, "parameters": self.parameters}
        return {"type": "function", "function": fn}


@dataclass(frozen=True)
class ToolChoice:
    """``auto`` (text or calls), ``none`` (text only), ``required`` (at least one call) or
    ``function`` (exactly one call, of ``name``)."""

    mode: str = "auto"
    name: str | None = None


@dataclass(frozen=True)
class ToolCall:
    """A call the model wrote: ``arguments`` is its JSON text, as OpenAI's API carries it."""

    id: str
    name: str
    arguments: str

    def to_openai(self) -> dict[str, Any]:
        fn = {"name": self.name, "arguments": self.arguments}
        return {"id": self.id, "type": "function", "function": fn}

    def parsed_arguments(self) -> Any:
        return json.loads(self.arguments or "{}")

    @property
    def complete(self) -> bool:
        """Its arguments are whole JSON (not cut short by ``max_tokens``)."""
        try:
            json.loads(self.arguments)
        except ValueError:
            return False
        return True


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def parse_tools(raw: Any) -> list[Tool]:
    """OpenAI's ``tools`` list (``[{"type": "function", "function": {name, description,
    parameters}}]``) as :class:`Tool`s; ``InvalidRequest`` naming the item that is wrong."""
    if not isinstance(raw, list):
        raise InvalidRequest("tools must be a list of {'type': 'function', 'function': {...}}")
    tools: list[Tool] = []
    for i, item in enumerate(raw):
        where = f"tools[{i}]"
        if not isinstance(item, dict) or item.get("type", "function") != "function":
            raise InvalidRequest(f"{where} must be {{'type': 'function', 'function': {{...}}}}")
        fn = item.get("function")
        if not isinstance(fn, dict):
            raise InvalidRequest(f"{where}.function must be an object with a 'name'")
        params = fn.get("parameters")
        if params is None:
            params = {"type": "object", "properties": {}}
        try:
            tool = Tool(fn.get("name"), fn.get("description") or "", params)  # type: ignore[arg-type]
        except InvalidRequest as exc:
            raise InvalidRequest(f"{where}.function: {exc}") from None
        if any(t.name == tool.name for t in tools):
            raise InvalidRequest(f"{where}.function.name {tool.name!r} is given twice")
        tools.append(tool)
    return tools


def parse_tool_choice(raw: Any, tools: Sequence[Tool]) -> ToolChoice:
    """OpenAI's ``tool_choice``: a mode string or ``{"type": "function", "function": {name}}``
    (default ``auto`` with tools, ``none`` without)."""
    if raw is None:
        return ToolChoice("auto" if tools else "none")
    if isinstance(raw, str):
        if raw not in TOOL_CHOICES:
            raise InvalidRequest(
                f"tool_choice must be one of {list(TOOL_CHOICES)} or a named function, got "
                f"{raw!r:.40}"
            )
        if raw == "required" and not tools:
            raise InvalidRequest("tool_choice 'required' needs tools")
        return ToolChoice(raw)
    name = raw.get("function", {}).get("name") if isinstance(raw, dict) else None
    if not isinstance(name, str):
        raise InvalidRequest(
            "tool_choice must be a string or {'type': 'function', 'function': {'name': ...}}"
        )
    if all(t.name != name for t in tools):
        raise InvalidRequest(
            f"tool_choice names function {name!r:.80}, which is not among the tools "
            f"{[t.name for t in tools]}"
        )
    return ToolChoice("function", name)


def call_prefix(name: str) -> str:
    """What a call is written as up to its arguments."""
    return f'{CALL_BEGIN}\n{{"name": {json.dumps(name)}, "arguments": '


CALL_SUFFIX = "}\n" + CALL_END


def call_text(call: ToolCall) -> str:
    """A call as the model writes it (assistant turns in the conversation)."""
    return call_prefix(call.name) + (call.arguments or "{}") + CALL_SUFFIX


def tool_grammar(
    tools: Sequence[Tool], choice: ToolChoice, parallel: bool = True
) -> Grammar | None:
    """The grammar a decode with ``tools`` follows (None: free text, for ``none``).

    ``auto``: any text, in which each ``<tool_call>`` opens a call that must be complete and
    valid; ``required``: one or more calls and nothing else; ``function``: exactly one call of
    that function. ``parallel`` False: at most one call."""
    if choice.mode == "none" or not tools:
        return None
    # free text never spells a tool result's tag (a small model echoes the results it read)
    chosen = [t for t in tools if choice.mode != "function" or t.name == choice.name]
    tags = [
        {
            "type": "tag",
            "begin": call_prefix(t.name),
            "content": {
                "type": "json_schema",
                "json_schema": dict(t.parameters),
                "max_whitespace_cnt": 1,  # no indented JSON: fewer tokens per call
            },
            "end": CALL_SUFFIX,
        }
        for t in chosen
    ]
    single = choice.mode == "function" or not parallel
    if choice.mode == "auto":
        fmt: dict[str, Any] = {
            "type": "triggered_tags",
            "triggers": [CALL_BEGIN],
            "tags": tags,
            "stop_after_first": single,
            "excludes": [RESPONSE_BEGIN[:-1]],  # nor <tool_response_json>
        }
    else:
        fmt = {
            "type": "tags_with_separator",
            "tags": tags,
            "separator": "\n",
            "at_least_one": True,
            "stop_after_first": single,
        }
    return Grammar.structural_tag({"type": "structural_tag", "format": fmt})


def answer_grammar() -> Grammar:
    """Free text that spells no tool tag (nor one like it: a small model writes
    ``<tool_response_json>`` or ``<tool-call>``): an agent's answer after it has read tool
    results."""
    fmt = {"type": "any_text", "excludes": ["<tool", "</tool"]}
    return Grammar.structural_tag({"type": "structural_tag", "format": fmt})


def tools_system_prompt(tools: Sequence[Tool]) -> str:
    """How a model without a tool template is told about ``tools`` (its system message)."""
    listed = "\n".join(json.dumps(t.to_openai(), ensure_ascii=False) for t in tools)
    return (
        "You can call functions to help with the user's request. The functions, each with "
        f"the JSON schema of its arguments:\n<tools>\n{listed}\n</tools>\n"
        "To call a function, write the call as a JSON object between tags, one per call:\n"
        f'{CALL_BEGIN}\n{{"name": "<function name>", "arguments": {{<arguments>}}}}\n'
        f"{CALL_END}\n"
        f"Each result comes back in a {RESPONSE_BEGIN} message. When you have what you need, "
        "answer the user without tags."
    )


def plain_messages(
    messages: Sequence[Mapping[str, Any]], tools: Sequence[Tool]
) -> list[dict[str, Any]]:
    """A conversation with tools for a template that renders neither ``tools`` nor tool
    calls: the tools go into the system message, each assistant's calls are written after its
    text as the model writes them, and consecutive ``tool`` results become one user turn of
    ``<tool_response>`` blocks. Contents stay messages' contents (data, never control tokens)."""
    out: list[dict[str, Any]] = []
    if tools:
        prompt = tools_system_prompt(tools)
        if messages and messages[0]["role"] == "system":
            prompt = f"{messages[0]['content']}\n\n{prompt}"
            messages = messages[1:]
        out.append({"role": "system", "content": prompt})
    for m in messages:
        if m["role"] == "tool":
            block = f"{RESPONSE_BEGIN}\n{m['content']}\n{RESPONSE_END}"
            if out and out[-1].get("from_tool"):
                out[-1]["content"] += "\n" + block
            else:
                out.append({"role": "user", "content": block, "from_tool": True})
            continue
        calls = m.get("tool_calls") or ()
        if m["role"] == "assistant" and calls:
            text = "\n".join([m["content"]] if m["content"] else [])
            written = "\n".join(call_text(c) for c in calls)
            out.append({"role": "assistant", "content": f"{text}\n{written}" if text else written})
            continue
        out.append({"role": m["role"], "content": m["content"]})
    for m in out:
        m.pop("from_tool", None)
    return out


def chat_messages(
    messages: Sequence[Mapping[str, Any]], tools: Sequence[Tool], native: bool
) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """The messages and ``tools`` argument for a chat template: a ``native`` one (it renders
    tools) gets OpenAI's tools and calls as Hugging Face templates take them; any other gets
    :func:`plain_messages` and no tools argument."""
    if not native:
        if not tools and not any(m.get("tool_calls") or m["role"] == "tool" for m in messages):
            return [dict(m) for m in messages], None
        return plain_messages(messages, tools), None
    out = []
    for m in messages:
        m = dict(m)
        if m.get("tool_calls"):
            m["tool_calls"] = [
                {
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.parsed_arguments()},
                }
                for c in m["tool_calls"]
            ]
        out.append(m)
    return out, [t.to_openai() for t in tools] or None


# ---- reading calls back ---------------------------------------------------------------------

_HEAD = re.compile(r'\s*\{\s*"name"\s*:\s*("(?:[^"\\]|\\.)*")\s*,\s*"arguments"\s*:')


@dataclass
class CallDelta:
    """What the decoded text added: ``content`` text, or for call ``index`` its start (``id``
    and ``name``), a piece of its ``arguments``, and ``call`` once it is complete."""

    content: str = ""
    index: int = -1
    id: str = ""
    name: str = ""
    arguments: str = ""
    call: ToolCall | None = None


class ToolCallParser:
    """Splits decoded text into content and tool calls as it streams: ``feed`` each piece,
    then ``finish``; the deltas of both, joined, are the whole message (streamed and whole
    responses agree because both are read by this parser). A call's start is reported once
    its name is written, its arguments as they are written, and the call itself once its
    closing tag is (where an agent starts the tool, while the model writes on)."""

    def __init__(self) -> None:
        self._buf = ""
        self._in_call = False
        self._head_done = False
        self._args_sent = 0  # characters of the arguments already reported
        self.calls: list[ToolCall] = []
        self.content = ""
        self._id = ""
        self._name = ""

    def feed(self, text: str) -> list[CallDelta]:
        self._buf += text
        out: list[CallDelta] = []
        while True:
            if not self._in_call:
                at = self._buf.find(CALL_BEGIN)
                if at < 0:
                    keep = _partial_suffix(self._buf, CALL_BEGIN)
                    self._content(out, self._buf[: len(self._buf) - keep])
                    self._buf = self._buf[len(self._buf) - keep :]
                    return out
                self._content(out, self._buf[:at])
                self._buf = self._buf[at + len(CALL_BEGIN) :]
                self._in_call, self._head_done, self._args_sent = True, False, 0
                continue
            if not self._head_done:
                m = _HEAD.match(self._buf)
                if m is None:
                    end = self._buf.find(CALL_END)
                    if end < 0:
                        return out
                    self._call_done(out, self._buf[:end], None)  # not our shape: kept whole
                    continue
                self._id, self._name = new_call_id(), json.loads(m.group(1))
                self._head_done = True
                self._buf = self._buf[m.end() :]
                out.append(CallDelta(index=len(self.calls), id=self._id, name=self._name))
            # The call ends at "}\n</tool_call>": a JSON string holds no raw newline, so the
            # arguments cannot; until then, what may be the start of it is held back.
            end = self._buf.find(CALL_SUFFIX)
            if end < 0:
                args = self._buf[: len(self._buf) - _partial_suffix(self._buf, CALL_SUFFIX)]
            else:
                args = self._buf[:end]
            args = args.lstrip()
            if len(args) > self._args_sent:
                out.append(CallDelta(index=len(self.calls), arguments=args[self._args_sent :]))
                self._args_sent = len(args)
            if end < 0:
                return out
            self._buf = self._buf[end + len(CALL_SUFFIX) :]
            self._call_done(out, None, args)

    def finish(self) -> list[CallDelta]:
        """The rest: text held back (a partial tag), or a call cut short (``length``)."""
        out: list[CallDelta] = []
        if self._in_call:
            if self._head_done:  # cut short: its arguments as far as they were written
                args = self._buf.lstrip()
                if len(args) > self._args_sent:
                    out.append(CallDelta(index=len(self.calls), arguments=args[self._args_sent :]))
                self._buf = ""
                self._call_done(out, None, args)
            else:
                self._content(out, CALL_BEGIN + self._buf)
                self._in_call = False
        elif self._buf:
            self._content(out, self._buf)
        self._buf = ""
        return out

    def _content(self, out: list[CallDelta], text: str) -> None:
        if text:
            self.content += text
            out.append(CallDelta(content=text))

    def _call_done(self, out: list[CallDelta], raw: str | None, args: str | None) -> None:
        if raw is not None:  # a call whose head is not {"name": ..., "arguments": ...}
            try:
                obj = json.loads(raw)
                name, arguments = str(obj["name"]), json.dumps(obj.get("arguments", {}))
            except (ValueError, KeyError, TypeError):
                self._content(out, CALL_BEGIN + raw + CALL_END)
                self._buf = self._buf[len(raw) + len(CALL_END) :]
                self._in_call = False
                return
            self._buf = self._buf[len(raw) + len(CALL_END) :]
            self._id, self._name, args = new_call_id(), name, arguments
            out.append(CallDelta(index=len(self.calls), id=self._id, name=name))
            out.append(CallDelta(index=len(self.calls), arguments=arguments))
        call = ToolCall(self._id, self._name, args or "")
        self.calls.append(call)
        out.append(CallDelta(index=len(self.calls) - 1, call=call))
        self._in_call = False


def _partial_suffix(text: str, tag: str) -> int:
    """The length of the longest suffix of ``text`` that begins ``tag``."""
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if tag.startswith(text[-n:]):
            return n
    return 0


def parse_calls(text: str) -> tuple[str, list[ToolCall]]:
    """A whole decoded text's content and calls."""
    parser = ToolCallParser()
    parser.feed(text)
    parser.finish()
    return parser.content, parser.calls


def check_tool_messages(messages: Iterable[Mapping[str, Any]]) -> None:
    """Each ``tool`` message answers a call an earlier assistant message made (by
    ``tool_call_id``): ``InvalidRequest`` naming the id otherwise."""
    made: set[str] = set()
    for i, m in enumerate(messages):
        if m["role"] == "assistant":
            made.update(c.id for c in m.get("tool_calls") or ())
        elif m["role"] == "tool":
            cid = m.get("tool_call_id")
            if cid not in made:
                raise InvalidRequest(
                    f"messages[{i}] is a tool result for tool_call_id {cid!r:.80}, which no "
                    "earlier assistant message called"
                )
