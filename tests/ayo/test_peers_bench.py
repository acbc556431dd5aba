"""benchmarks.peers' pure parts: what the LlamaIndex side is told to mirror, and the per-question
check that both sides did the same work (no models, no LlamaIndex)."""

from __future__ import annotations

import pytest

from ayo.apps import ADVANCED_RAG, APPS, get_app
from ayo.apps.rag import REFINE
from ayo.scheduler.ir.parsers import ItemParser, SentenceLimit
from ayo.workflow import InputShape, QueryExpansion, Synthesis
from benchmarks import peers
from benchmarks.peers_llamaindex import (
    answer_cut,
    held_back,
    lines_done,
    llama_template,
    parse_lines,
)


def _chat(messages: list[dict[str, str]]) -> str:
    return "".join(f"<{m['role']}>{m['content']}</{m['role']}>" for m in messages) + "<assistant>"


def test_app_spec_reads_the_settings_from_our_workflows(monkeypatch):
    naive = peers.app_spec("naive_rag", _chat)
    advanced = peers.app_spec("advanced_rag", _chat)
    flow = get_app("advanced_rag").workflow(InputShape.of({"question": ""}))
    expand = next(m for m in flow.modules if isinstance(m, QueryExpansion))
    synth = next(m for m in flow.modules if isinstance(m, Synthesis))
    assert set(naive) == {"k", "answer", "max_tokens", "stop", "max_sentences"} and naive["k"] >= 1
    assert naive["answer"].startswith("<system>") and naive["answer"].endswith("<assistant>")
    assert advanced["queries"] == expand.n
    assert advanced["expand"] == expand.prompt.for_model(_chat).template
    assert advanced["top_k"] == 2 and "refine" not in advanced  # one answer over the top 2
    chain = ADVANCED_RAG.with_options(synthesis="refine", passages=3)
    monkeypatch.setitem(APPS, "advanced_refine", chain)  # the refine chain, as before
    refine = peers.app_spec("advanced_refine", _chat)
    assert refine["refine"] == REFINE.for_model(_chat).template and refine["top_k"] == 3
    assert advanced["max_tokens"] == [expand.max_tokens, synth.max_tokens]
    assert advanced["stop"] == list(synth.stop) and advanced["max_sentences"] == synth.max_sentences


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


def test_peer_ends_answers_where_ours_end():
    from ayo.engines.llm.stop import held_back as ours_held_back

    stops = ["\n\n", "\nQuestion:"]
    for text in ("Foo.\n", "Foo.\nQ", "Bar. \n\nBaz", "3.5 m. Tall. Yes", "A.\nQuestion: B"):
        assert held_back(text, stops) == ours_held_back(text, tuple(stops))
    assert answer_cut("Foo. Bar. Baz", stops, 2) == ("Foo. Bar.", True)
    assert answer_cut("Foo. Bar.", stops, 2) == ("Foo. Bar.", False)  # no space after it yet
    assert answer_cut("Foo. Bar.\n", stops, 2) == ("Foo. Bar.\n", False)  # held back
    assert answer_cut("Foo.\n\nBar", stops, 2) == ("Foo.", True)
    assert answer_cut("It is 3.5 m tall. Yes", stops, 1) == ("It is 3.5 m tall.", True)
    limit = SentenceLimit(1)
    for piece in ("It is 3", ".5 m", " tall. ", "Yes"):
        limit.feed(piece)
    assert limit.done and limit.text == "It is 3.5 m tall."
    assert lines_done("a\nb\nA\nc", 3) is False and lines_done("a\nb\nA\nc\n", 3) is True


def test_peer_parses_queries_and_renames_placeholders_as_ours():
    for text in (
        "1. first\n\n- second\n  * third  \n",
        "a\n2) b\n• c",
        "-x\n  \n10. y",
        "a\nA.\nb",
    ):
        ours = ItemParser("lines")
        assert parse_lines(text) == ours.feed(text) + ours.finish()
    assert parse_lines("1. first\n- second") == ["first", "second"]
    template = llama_template("Q: {question}\nC: {context}", {"question": "query_str",
                              "context": "context_str"})  # fmt: skip
    assert template == "Q: {query_str}\nC: {context_str}"
