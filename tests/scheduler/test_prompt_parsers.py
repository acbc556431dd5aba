"""Prompt templates and the incremental item parsers."""

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ayo.scheduler import Prompt, PromptError, RegexTokenizer
from ayo.scheduler.ir.parsers import ItemParser, parse_items


def test_placeholders_in_order_and_escapes() -> None:
    p = Prompt("Q: {question} {{literal}} C: {context} again {question}")
    assert p.placeholders == ("question", "context")
    assert p.render({"question": "a", "context": "b"}) == "Q: a {literal} C: b again a"


def test_unbound_and_unknown_placeholders_are_named() -> None:
    p = Prompt("Q: {question} C: {context}")
    with pytest.raises(PromptError, match=r"placeholder \{context\} is not bound"):
        p.check_bindings({"question"}, node="synth")
    with pytest.raises(PromptError, match="binding 'contxt' names no placeholder"):
        p.check_bindings({"question", "context", "contxt"})
    with pytest.raises(PromptError, match="format spec"):
        Prompt("{x:>10}")
    with pytest.raises(PromptError, match="malformed"):
        Prompt("{unclosed")


def test_split_offset_and_static_prefix() -> None:
    p = Prompt("Sys {{x}}. Q: {question}\nContext: {context}\nEnd {question}")
    off = p.split_offset({"question"})
    assert p.template[off:].startswith("{context}")
    assert p.static_prefix(off) == "Sys {x}. Q: \nContext: "
    assert p.split_offset({"question", "context"}) == len(p.template)
    assert p.split_offset(set()) == p.template.index("{question}")


def test_regex_tokenizer_round_trips() -> None:
    tok = RegexTokenizer()
    text = "Hello,  world!\nSecond line: 42 items."
    assert tok.decode(tok.encode(text)) == text
    assert tok.encode("Hello") == tok.encode("Hello")


LINES = "1. first query\n- second query\n\n   third  \nfourth"


def test_line_items_with_markers_and_limit() -> None:
    assert parse_items(LINES, "lines") == ["first query", "second query", "third", "fourth"]
    assert parse_items(LINES, "lines", max_items=2) == ["first query", "second query"]


def test_json_items_incremental() -> None:
    parser = ItemParser("json")
    assert parser.feed('Sure: ["alpha", "be') == ["alpha"]
    assert parser.feed('ta", 3') == ["beta"]
    assert parser.feed("7, ") == ["37"]
    assert parser.feed('"x"] trailing "y"') == ["x"]
    assert parser.finish() == []


@settings(max_examples=60, deadline=None)
@given(
    items=st.lists(st.text(alphabet="abc xyz,[]\"'", min_size=0, max_size=8), max_size=5),
    cuts=st.lists(st.integers(min_value=0, max_value=200), max_size=6),
    mode=st.sampled_from(["lines", "json"]),
)
def test_streamed_parse_equals_whole_parse(items: list[str], cuts: list[int], mode: str) -> None:
    import json

    text = json.dumps(items) if mode == "json" else "\n".join(items)
    bounds = sorted({0, len(text), *(c % (len(text) + 1) for c in cuts)})
    parser = ItemParser(mode)
    got = []
    for a, b in itertools.pairwise(bounds):
        got += parser.feed(text[a:b])
    got += parser.finish()
    assert got == parse_items(text, mode)
    if mode == "json":  # each distinct non-empty item once, in order
        seen: set[str] = set()
        expected = []
        for item in items:
            key = " ".join(item.lower().split()).strip(" \t.,;:!?\"'()[]")
            if key and key not in seen:
                seen.add(key)
                expected.append(item)
        assert got == expected


def test_repeated_and_empty_items_are_dropped_and_full_says_when_done() -> None:
    parser = ItemParser("lines", max_items=3)
    assert parser.feed("1. Paris\n2. paris.\n- \n3. Lyon\n") == ["Paris", "Lyon"]
    assert not parser.full
    assert parser.feed("Lyon\nNice\nToulouse\n") == ["Nice"]
    assert parser.full
    assert parser.finish() == []
