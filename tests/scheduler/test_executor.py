"""The reference executor on hand-written plans and the deterministic fake engines."""

import asyncio
import logging

import pytest

from ayo.scheduler import (
    Edge,
    EdgeKind,
    ExecutionError,
    GraphRun,
    Plan,
    Port,
    PortType,
    Prompt,
    validate,
)
from ayo.scheduler.ir import primitives as P
from ayo.scheduler.ir.configs import FullPrefillConfig, PartialPrefillConfig
from ayo.scheduler.sim.fakes import FakeEmbedder, FakeLLM, fake_engines

T, TL, DL = PortType.TEXT, PortType.TEXT_LIST, PortType.DOC_LIST
EXPAND = Prompt("Write queries for: {q}\n")


def _expand_search_plan(streamed: bool, max_items: int = 0) -> Plan:
    """q -> Prefill -> Decode(lines) -> Embed -> Search -> (Aggregate) -> output.docs"""
    dec = P.decode("dec", "llm", 32, parse="lines", max_items=max_items)
    nodes = [
        P.input_node([Port("q", T)]),
        P.prefill("pre", "llm", EXPAND),
        dec.with_(op=dec.op.PARTIAL_DECODE) if streamed else dec,
        P.embed("emb", "embedder"),
        P.search("srch", "index", 2, "default"),
        P.output_node([Port("docs", DL)]),
    ]
    kind = EdgeKind.STREAM if streamed else EdgeKind.VALUE
    edges = [
        Edge("input", "q", "pre", "q"),
        Edge("pre", "seq", "dec", "seq"),
        Edge("dec", "items", "emb", "texts", kind),
        Edge("emb", "vectors", "srch", "vectors", kind),
    ]
    if streamed:
        nodes.append(P.aggregate("collect", "concat", DL))
        edges += [
            Edge("srch", "docs", "collect", "items", EdgeKind.STREAM),
            Edge("collect", "value", "output", "docs"),
        ]
    else:
        edges.append(Edge("srch", "docs", "output", "docs"))
    return validate(Plan("expand_search", tuple(nodes), tuple(edges)))


@pytest.mark.parametrize("max_items", [0, 1, 2])
async def test_partial_decode_stream_equals_whole_decode(max_items: int) -> None:
    outs = []
    for streamed in (False, True):
        engines = fake_engines()
        outs.append(
            await GraphRun(_expand_search_plan(streamed, max_items), {"q": "rivers"}, engines).run()
        )
        assert engines["llm"].open_sequences == 0
    assert outs[0] == outs[1]
    assert len(outs[0]["docs"]) == 2 * (
        max_items or len(FakeLLM().answer(EXPAND.render({"q": "rivers"})).split("\n"))
    )


class _SlowEmbedder(FakeEmbedder):
    async def embed(self, texts: list[str], *, info=None) -> list[list[float]]:
        await asyncio.sleep(0.02)
        return await super().embed(texts, info=info)


async def test_chunks_queued_during_a_call_go_into_the_next_call_together() -> None:
    """The expansion writes its queries faster than the embedder embeds: the first goes alone,
    the ones that arrived meanwhile go in one call (one fixed cost), and nothing changes."""
    outs, calls = [], []
    for streamed in (False, True):
        engines = {**fake_engines(), "embedder": _SlowEmbedder(), "llm": _FourQueriesLLM()}
        outs.append(await GraphRun(_expand_search_plan(streamed), {"q": "rivers"}, engines).run())
        calls.append(engines["embedder"].calls)
    assert outs[0] == outs[1] and len(outs[0]["docs"]) == 2 * 4
    assert calls == [1, 2]  # one call per query would be [1, 4]


class _FourQueriesLLM(FakeLLM):
    def answer(self, prompt: str) -> str:
        return "rivers\nstars\nbread\nglass"


class _SilentLLM(FakeLLM):
    def answer(self, prompt: str) -> str:
        return "   \n"  # no item at all


async def test_stream_with_no_items_ends_instead_of_hanging() -> None:
    engines = {**fake_engines(), "llm": _SilentLLM()}
    out = await asyncio.wait_for(
        GraphRun(_expand_search_plan(True), {"q": "x"}, engines).run(), timeout=5
    )
    assert out == {"docs": []}


async def test_engine_error_fails_query_naming_the_primitive() -> None:
    class Broken(FakeEmbedder):
        async def embed(self, texts: list[str], *, info=None) -> list[list[float]]:
            raise RuntimeError("embedder is down")

    engines = {**fake_engines(), "embedder": Broken()}
    with pytest.raises(
        ExecutionError, match="primitive 'emb' \\(Embed\\) failed: RuntimeError: embedder is down"
    ):
        await GraphRun(_expand_search_plan(True), {"q": "x"}, engines).run()


async def test_missing_input_is_reported() -> None:
    with pytest.raises(ValueError, match=r"missing query inputs \['q'\]"):
        await GraphRun(_expand_search_plan(False), {}, fake_engines()).run()


class _RightToLeftTokenizer:
    """Cuts text into 3-character pieces counted from the end: a prefix of the text does not
    tokenize to a prefix of the whole text's tokens, the worst case for a prefill split."""

    def __init__(self) -> None:
        self.pieces: list[str] = []

    def encode(self, text: str) -> list[int]:
        cut = len(text) % 3
        parts = ([text[:cut]] if cut else []) + [text[i : i + 3] for i in range(cut, len(text), 3)]
        ids = []
        for p in parts:
            if p not in self.pieces:
                self.pieces.append(p)
            ids.append(self.pieces.index(p))
        return ids

    def encode_parts(self, parts: list[tuple[str, bool]]) -> list[int]:
        return self.encode("".join(text for text, _ in parts))

    def decode(self, ids: list[int]) -> str:
        return "".join(self.pieces[i] for i in ids)


PROMPT = Prompt(
    "A long system preamble that is the same for every query. Q: {q}\nContext: {ctx}\nA:"
)


def _answer_plan(split: bool) -> Plan:
    nodes = [
        P.input_node([Port("q", T)]),
        P.map_node("late", "join_texts"),
        P.output_node([Port("answer", T)]),
    ]
    edges = [Edge("input", "q", "late", "a"), Edge("input", "q", "late", "b")]
    if split:
        nodes += [
            P.prefill("pre", "llm", PROMPT).with_(
                id="pre.partial",
                op=P.Op.PARTIAL_PREFILL,
                config=PartialPrefillConfig(PROMPT, PROMPT.split_offset({"q"})),
            ),
            P.prefill("pre", "llm", PROMPT).with_(
                id="pre.full", op=P.Op.FULL_PREFILL, config=FullPrefillConfig(PROMPT)
            ),
        ]
        nodes[-2] = nodes[-2].with_(inputs=(Port("q", T),))
        nodes[-1] = nodes[-1].with_(inputs=(Port("seq", PortType.SEQ), *nodes[-1].inputs))
        edges += [
            Edge("input", "q", "pre.partial", "q"),
            Edge("input", "q", "pre.full", "q"),
            Edge("late", "value", "pre.full", "ctx"),
            Edge("pre.partial", "seq", "pre.full", "seq"),
            Edge("pre.full", "seq", "dec", "seq"),
        ]
    else:
        nodes.append(P.prefill("pre", "llm", PROMPT))
        edges += [
            Edge("input", "q", "pre", "q"),
            Edge("late", "value", "pre", "ctx"),
            Edge("pre", "seq", "dec", "seq"),
        ]
    nodes.append(P.decode("dec", "llm", 16))
    edges.append(Edge("dec", "text", "output", "answer"))
    return validate(Plan("answer", tuple(nodes), tuple(edges)))


@pytest.mark.parametrize("tokenizer", ["regex", "right_to_left"])
async def test_prefill_split_keeps_the_prompt_token_for_token(
    tokenizer: str, caplog: pytest.LogCaptureFixture
) -> None:
    outs, prefills = [], []
    for split in (False, True):
        llm = FakeLLM()
        if tokenizer == "right_to_left":
            llm.tokenizer = _RightToLeftTokenizer()
        with caplog.at_level(logging.WARNING, logger="ayo.scheduler.runtime.handlers"):
            outs.append(
                await GraphRun(
                    _answer_plan(split), {"q": "why is the sky blue?"}, {"llm": llm}
                ).run()
            )
        prefills.append(llm.prefill_calls)
        assert llm.open_sequences == 0
    assert outs[0] == outs[1]
    assert len(prefills[0]) == 1 and sum(prefills[1]) >= prefills[0][0]
    if tokenizer == "regex":  # split (the early part folded into the rest), nothing redone
        assert sum(prefills[1]) == prefills[0][0]
        assert "prefilling again" not in caplog.text
    else:
        assert "prefilling again" in caplog.text  # mismatch detected, whole prompt prefilled
