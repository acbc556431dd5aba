"""Tool calls in the engine: calls written under the tools' grammar parse and validate against
their tool's schema whatever the model samples (a random-weight model at a high temperature),
and the streaming reader gives the same content and calls however the text is cut."""

from __future__ import annotations

import itertools
import json

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ayo.engines.llm import LLMEngine, SamplingParams
from ayo.engines.llm.tools import (
    Tool,
    ToolCall,
    ToolCallParser,
    ToolChoice,
    call_text,
    parse_calls,
    tool_grammar,
)

from .test_grammar import random_smol  # noqa: F401  (the module's fixture, shared)

TOOLS = [
    Tool("add", "Add two integers", {
        "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"], "additionalProperties": False}),
    Tool("search", "Search the wiki", {
        "type": "object", "properties": {"query": {"type": "string", "maxLength": 12},
                                         "k": {"type": "integer", "minimum": 1, "maximum": 5}},
        "required": ["query"], "additionalProperties": False}),
]  # fmt: skip
SCHEMAS = {t.name: t.parameters for t in TOOLS}


@pytest.mark.parametrize(
    "choice, parallel",
    [(ToolChoice("required"), True), (ToolChoice("function", "search"), False),
     (ToolChoice("auto"), True)],
)  # fmt: skip
async def test_every_call_parses_and_validates_under_sampling(random_smol, choice, parallel):  # noqa: F811
    grammar = tool_grammar(TOOLS, choice, parallel)
    tokens = 30 if choice.mode == "auto" else 120  # auto: random text rarely opens a call
    params = SamplingParams(max_tokens=tokens, temperature=1.5, seed=7, grammar=grammar)
    async with LLMEngine.from_model(random_smol, num_threads=1) as llm:
        results = await llm.generate([f"call {i}" for i in range(6)], params)
    calls = 0
    for r in results:
        content, made = parse_calls(r.text)
        if r.finish_reason == "length":
            made = [c for c in made if c.complete]  # the last one may be cut short
        else:
            assert r.finish_reason == "stop"
        if choice.mode == "function":
            assert [c.name for c in made] == ["search"] and r.finish_reason == "stop"
        if choice.mode != "auto":
            assert content.strip() == "" and made
        for c in made:
            jsonschema.validate(c.parsed_arguments(), SCHEMAS[c.name])
        calls += len(made)
    assert calls >= 6 or choice.mode == "auto"


_texts = st.text(st.sampled_from('ab <>/{}\n"_'), max_size=12)


@settings(max_examples=60, deadline=None)
@given(
    before=_texts,
    args=st.lists(st.dictionaries(st.sampled_from("xyz"), st.integers() | _texts), max_size=3),
    cuts=st.lists(st.integers(1, 7), min_size=1, max_size=40),
)
def test_streamed_reading_equals_whole_reading(before, args, cuts):
    """Content then calls, read in pieces of random sizes: the deltas joined are the content
    and the calls read whole; every call's id and name come first, then its arguments."""
    calls = [ToolCall("", "add" if i % 2 else "search", json.dumps(a)) for i, a in enumerate(args)]
    text = before.replace("<tool_call>", "") + "".join(call_text(c) + "\n" for c in calls)
    parser, deltas, at = ToolCallParser(), [], 0
    for n in itertools.cycle(cuts):
        if at >= len(text):
            break
        deltas += parser.feed(text[at : at + n])
        at += n
    deltas += parser.finish()
    content, whole = parse_calls(text)
    assert "".join(d.content for d in deltas) == content == parser.content
    assert [(c.name, c.arguments) for c in parser.calls] == [(c.name, c.arguments) for c in whole]
    assert [(c.name, c.arguments) for c in whole] == [(c.name, c.arguments) for c in calls]
    for i, call in enumerate(parser.calls):
        mine = [d for d in deltas if d.index == i]
        assert mine[0].id == call.id and mine[0].name == call.name and mine[-1].call == call
        assert "".join(d.arguments for d in mine) == call.arguments


def test_a_call_cut_short_is_returned_as_written():
    content, [call] = parse_calls('Sure.<tool_call>\n{"name": "add", "arguments": {"a": 1')
    assert content == "Sure." and call.name == "add" and call.arguments == '{"a": 1'
    assert not call.complete
    content, calls = parse_calls('<tool_call>\n{"na')  # not even a name: it is text
    assert content == '<tool_call>\n{"na' and calls == []


def test_a_template_that_renders_tools_gets_them_and_the_calls():
    """A chat template with a tools section (as Hermes/Qwen templates have) is given the tools
    and the assistant's calls (arguments as objects); contents stay data."""
    import copy

    from ayo.engines.llm.tokenizer import ChatTokenizer
    from ayo.engines.llm.tools import chat_messages
    from ayo.runtime.defaults import default_tokenizer

    hf = copy.deepcopy(default_tokenizer().hf)
    hf.chat_template = (
        "{% for t in tools or [] %}[tool {{ t.function.name }}]{% endfor %}"
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}"
        "{% for c in m.tool_calls or [] %}[call {{ c.function.name }} "
        "{{ c.function.arguments.a }}]{% endfor %}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    tok = ChatTokenizer(hf)
    assert tok.renders_tools
    messages = [
        {"role": "user", "content": "add 1 and 2"},
        {"role": "assistant", "content": "", "tool_calls": [ToolCall("c1", "add", '{"a": 1}')]},
        {"role": "tool", "tool_call_id": "c1", "content": "3"},
    ]
    plain, listed = chat_messages(messages, TOOLS, tok.renders_tools)
    text = "".join(t for t, _ in tok.render_chat_parts(plain, tools=listed))
    assert text.startswith("[tool add][tool search]<|im_start|>user\nadd 1 and 2")
    assert "[call add 1]" in text and "<|im_start|>tool\n3<|im_end|>" in text
    assert not ChatTokenizer(default_tokenizer().hf).renders_tools  # SmolLM2's has no tools
