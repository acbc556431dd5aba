"""benchmarks.peers' pure parts: what the LlamaIndex side is told to mirror, and the per-question
check that both sides did the same work (no models, no LlamaIndex)."""

from __future__ import annotations

import pytest

from ayo.apps import get_app
from ayo.workflow import InputShape, QueryExpansion, Synthesis
from benchmarks import peers
from benchmarks.peers_llamaindex import llama_template, parse_lines
from scheduler.parsers import ItemParser


def test_app_spec_reads_the_settings_from_our_workflows():
    naive, advanced = peers.app_spec("naive_rag"), peers.app_spec("advanced_rag")
    flow = get_app("advanced_rag").workflow(InputShape.of({"question": ""}))
    expand = next(m for m in flow.modules if isinstance(m, QueryExpansion))
    synth = next(m for m in flow.modules if isinstance(m, Synthesis))
    assert set(naive) == {"k", "answer", "max_tokens"} and naive["k"] >= 1
    assert advanced["queries"] == expand.n and advanced["expand"] == expand.prompt.template
    assert advanced["refine"] == synth.refine_prompt.template
    assert advanced["max_tokens"] == [expand.max_tokens, synth.max_tokens]


def test_app_spec_refuses_an_app_the_peer_does_not_implement():
    with pytest.raises(ValueError, match="neither"):
        peers.app_spec("search_gen")


def test_one_new_token_cap_for_all_calls():
    specs = {"a": {"max_tokens": [64, 128]}, "b": {"max_tokens": [96]}}
    assert peers.max_new_tokens(specs, 32) == 32
    with pytest.raises(ValueError, match="--max-tokens <= 64"):
        peers.max_new_tokens(specs, 100)


def _run(answer: str, *calls: tuple[str, list[int], int]) -> dict:
    return {"answer": answer,
            "calls": [{"prompt": p, "prompt_ids": i, "generated": g} for p, i, g in calls]}  # fmt: skip


def test_compare_serial_counts_equal_work_and_names_the_first_difference():
    same = _run("A", ("p1", [1, 2], 5), ("p2", [3], 7))
    ours = [same, _run("A", ("p1", [1, 2], 5)), _run("B", ("question: x", [1], 4))]
    theirs = [same, _run("A", ("p1", [1, 2], 6)), _run("B", ("question: y", [1], 4))]
    check = peers.compare_serial(ours, theirs)
    assert check["n"] == 3
    assert check["equal"] == {"prompts": 2, "prompt ids": 3, "new tokens": 2, "answers": 3}
    diffs = {d["question"]: d for d in check["differences"]}
    assert set(diffs) == {1, 2}
    assert diffs[1]["what"] == "5 new tokens vs 6"
    assert diffs[2]["what"] == "prompts differ at char 10"
    assert peers.first_difference(same, _run("A")) == {"what": "2 LLM calls vs 0"}


def test_peer_parses_queries_and_renames_placeholders_as_ours():
    for text in ("1. first\n\n- second\n  * third  \n", "a\n2) b\n• c", "-x\n  \n10. y"):
        ours = ItemParser("lines")
        assert parse_lines(text) == ours.feed(text) + ours.finish()
    assert parse_lines("1. first\n- second") == ["first", "second"]
    template = llama_template("Q: {question}\nC: {context}", {"question": "query_str",
                              "context": "context_str"})  # fmt: skip
    assert template == "Q: {query_str}\nC: {context_str}"
