"""What each primitive does, given its inputs and the engines.

A handler takes the node, its input values by port name, the query context and the primitive's
request info (which it passes, ``info=``, to every engine call), and returns its outputs by port
name. For a node consuming a stream the executor calls the same handler once per chunk, with the
item port holding that chunk's items, so streamed and whole runs agree. The engines are what
``ir.engine_api``'s protocols say they are: nothing is probed.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

from ayo.engines.llm.sampling import SamplingParams
from ayo.engines.records import RerankRequest

from ..batching.request_info import RequestInfo
from ..ir.configs import TEMP_COLLECTION
from ..ir.functions import get_map
from ..ir.graph import Node
from ..ir.ops import Op
from ..ir.parsers import ItemParser, SentenceLimit
from ..ir.prompt import Prompt
from ..ir.values import SKIPPED, Doc, SeqHandle
from .agent import run_agent

logger = logging.getLogger(__name__)


class QueryContext:
    """Per-query state the handlers need: the engines, the LLM sequences still open and the
    temporary collections made (both released when the query ends, however it ends)."""

    __slots__ = ("engines", "on_span", "open_seqs", "query_id", "temp_collections")

    def __init__(
        self,
        query_id: str,
        engines: Mapping[str, Any],
        on_span: Callable[[str, str, float, float, bool], None] | None = None,
    ) -> None:
        self.query_id = query_id
        self.engines = engines
        self.temp_collections: set[tuple[str, str]] = set()
        self.open_seqs: dict[tuple[str, int], Any] = {}
        # (node id, where, start, end, ok) of work a handler does off the engines (tool calls)
        self.on_span = on_span

    async def release(self) -> None:
        """Close sequences left open (a failed or cancelled query) and drop temp collections."""
        for (engine, _), seq in list(self.open_seqs.items()):
            await self.engines[engine].close(seq)
        self.open_seqs.clear()
        for engine, name in sorted(self.temp_collections):
            await self.engines[engine].drop(name)
        self.temp_collections.clear()

    async def open_seq(self, engine: str) -> Any:
        seq = await self.engines[engine].open()
        self.open_seqs[(engine, id(seq))] = seq
        return seq

    async def close_seq(self, engine: str, seq: Any) -> None:
        self.open_seqs.pop((engine, id(seq)), None)
        await self.engines[engine].close(seq)

    def engine(self, node: Node) -> Any:
        try:
            return self.engines[node.engine]
        except KeyError:
            raise KeyError(
                f"no engine named {node.engine!r} (has: {sorted(self.engines)})"
            ) from None


Info = RequestInfo | None
Handler = Callable[[Node, dict[str, Any], QueryContext, Info], Awaitable[dict[str, Any]]]

OFFLOAD_CHARS = 64 * 1024  # a text longer than this is tokenized off the event loop


async def _tokens(llm: Any, prompt: Prompt, values: Mapping[str, Any]) -> list[int]:
    """The rendered prompt's ids; the values (questions, passages) are data: a control token's
    spelling in them is text (``Tokenizer.encode_parts``)."""
    parts = prompt.render_parts(values)
    if sum(len(text) for text, _ in parts) > OFFLOAD_CHARS:
        return await asyncio.to_thread(llm.tokenizer.encode_parts, parts)
    return llm.tokenizer.encode_parts(parts)


async def _open_prefilled(ctx: QueryContext, engine: str, ids: list[int], info: Info) -> SeqHandle:
    llm = ctx.engines[engine]
    seq = await ctx.open_seq(engine)
    if ids:
        await llm.prefill(seq, ids, info=info)
    return SeqHandle(engine, seq, tuple(ids))


async def _prefill(
    node: Node, inputs: dict[str, Any], ctx: QueryContext, info: Info
) -> dict[str, Any]:
    llm, cfg = ctx.engine(node), node.config
    prompt, over = cfg.prompt, cfg.map_over
    if not over:
        ids = await _tokens(llm, prompt, inputs)
        return {"seq": await _open_prefilled(ctx, node.engine, ids, info)}
    ids = [await _tokens(llm, prompt, {**inputs, over: item}) for item in inputs[over]]
    seqs = await asyncio.gather(*(_open_prefilled(ctx, node.engine, i, info) for i in ids))
    return {"seqs": list(seqs)}


async def _partial_prefill(
    node: Node, inputs: dict[str, Any], ctx: QueryContext, info: Info
) -> dict[str, Any]:
    # The early text is a prefix of the full prompt. Its last token may merge with the text that
    # follows, so it is held back: FullPrefill tokenizes the whole prompt once and appends the rest.
    # Its KV is computed in the LLM's next idle gap, or with the FullPrefill if that comes first
    # (``prefill_when_idle``): the split never costs an engine step on a busy LLM.
    llm, cfg = ctx.engine(node), node.config
    ids = (await _tokens(llm, _head(cfg.prompt, cfg.split_at), inputs))[:-1]
    seq = await ctx.open_seq(node.engine)
    if ids:
        llm.prefill_when_idle(seq, ids, info=info)
    return {"seq": SeqHandle(node.engine, seq, tuple(ids))}


@functools.lru_cache(maxsize=1024)
def _head(prompt: Prompt, split_at: int) -> Prompt:
    """The template before ``split_at`` (parsed once per plan node, not per query)."""
    return Prompt(prompt.template[:split_at])


async def _full_prefill(
    node: Node, inputs: dict[str, Any], ctx: QueryContext, info: Info
) -> dict[str, Any]:
    llm, handle = ctx.engine(node), inputs["seq"]
    ids = await _tokens(llm, node.config.prompt, inputs)
    done = list(handle.prefilled)
    if ids[: len(done)] == done:
        if len(ids) > len(done):
            await llm.prefill(handle.seq, ids[len(done) :], info=info)
        return {"seq": SeqHandle(handle.engine, handle.seq, tuple(ids))}
    logger.warning(
        "node %s: early tokens are not a prefix of the full prompt; prefilling again", node.id
    )
    await ctx.close_seq(node.engine, handle.seq)
    return {"seq": await _open_prefilled(ctx, node.engine, ids, info)}


async def _decode_text(
    ctx: QueryContext, handle: SeqHandle, params: SamplingParams, info: Info
) -> str:
    llm = ctx.engines[handle.engine]
    try:
        return "".join([p.text async for p in llm.decode(handle.seq, params, info=info)])
    finally:
        await ctx.close_seq(handle.engine, handle.seq)


async def _decode(
    node: Node, inputs: dict[str, Any], ctx: QueryContext, info: Info
) -> dict[str, Any]:
    cfg = node.config
    if cfg.over_list:
        texts = await asyncio.gather(
            *(_decode_text(ctx, h, cfg.params, info) for h in inputs["seqs"])
        )
        return {"texts": list(texts)}
    if cfg.parse == "text" and cfg.max_sentences:
        text = await _decode_sentences(ctx, inputs["seq"], cfg.params, cfg.max_sentences, info)
        return {"text": text}
    if cfg.parse == "text":
        return {"text": await _decode_text(ctx, inputs["seq"], cfg.params, info)}
    return {"items": [item async for item in partial_decode_items(node, inputs, ctx, info)]}


async def _decode_sentences(
    ctx: QueryContext, handle: SeqHandle, params: SamplingParams, max_sentences: int, info: Info
) -> str:
    """The decoded text, ended (sequence closed, blocks freed) after ``max_sentences``."""
    limit = SentenceLimit(max_sentences)
    try:
        pieces = ctx.engines[handle.engine].decode(handle.seq, params, info=info)
        async with contextlib.aclosing(pieces):
            async for piece in pieces:
                limit.feed(piece.text)
                if limit.done:
                    break
    finally:
        await ctx.close_seq(handle.engine, handle.seq)
    return limit.text


async def partial_decode_items(
    node: Node, inputs: dict[str, Any], ctx: QueryContext, info: Info
) -> AsyncIterator[str]:
    """PartialDecode: yield each list item as soon as the parser sees it complete. The decode
    ends (its sequence closed, its blocks freed) once ``max_items`` items are out. Decode with
    a list parse runs this too, so both give the same items."""
    llm, cfg, handle = ctx.engine(node), node.config, inputs["seq"]
    parser = ItemParser(cfg.parse, cfg.max_items)
    try:
        async with contextlib.aclosing(llm.decode(handle.seq, cfg.params, info=info)) as pieces:
            async for piece in pieces:
                for item in parser.feed(piece.text):
                    yield item
                if parser.full:
                    return
        for item in parser.finish():
            yield item
    finally:
        await ctx.close_seq(handle.engine, handle.seq)


async def _score(
    node: Node, inputs: dict[str, Any], ctx: QueryContext, info: Info
) -> dict[str, Any]:
    llm, handle = ctx.engine(node), inputs["seq"]
    try:
        logprobs = await llm.score(handle.seq, list(node.config.options), info=info)
    finally:
        await ctx.close_seq(handle.engine, handle.seq)
    top = max(logprobs)
    weights = [math.exp(lp - top) for lp in logprobs]
    total = sum(weights)
    return {"probs": tuple(w / total for w in weights)}


async def _generate(
    node: Node, inputs: dict[str, Any], ctx: QueryContext, info: Info
) -> dict[str, Any]:
    ids, params = list(inputs["prompt"]), inputs["params"]
    handle = await _open_prefilled(ctx, node.engine, ids, info)
    llm = ctx.engines[handle.engine]
    try:
        stream = llm.decode(handle.seq, params, info=info)
        async for _ in stream:  # the pieces reach the query as they come (streamed answers)
            pass
    finally:
        await ctx.close_seq(handle.engine, handle.seq)
    return {"completion": stream.end}


async def _embed(
    node: Node, inputs: dict[str, Any], ctx: QueryContext, info: Info
) -> dict[str, Any]:
    texts = [t if isinstance(t, str) else t.text for t in inputs["texts"]]
    if not texts:
        return {"vectors": []}
    return {"vectors": list(await ctx.engine(node).embed(texts, info=info))}


def _collection(node: Node, ctx: QueryContext) -> str:
    name = node.config.collection
    if name != TEMP_COLLECTION:
        return name
    temp = f"{ctx.query_id}/{node.id}"
    ctx.temp_collections.add((node.engine, temp))
    return temp


async def _ingest(
    node: Node, inputs: dict[str, Any], ctx: QueryContext, info: Info
) -> dict[str, Any]:
    name = _collection(node, ctx)
    docs, vectors = inputs["docs"], inputs["vectors"]
    if len(docs) != len(vectors):
        raise ValueError(f"{len(docs)} docs but {len(vectors)} vectors")
    await ctx.engine(node).ingest(name, list(docs), list(vectors), info=info)
    return {"collection": name}


async def _search(
    node: Node, inputs: dict[str, Any], ctx: QueryContext, info: Info
) -> dict[str, Any]:
    cfg = node.config
    collection = inputs["collection"] if cfg.collection is None else cfg.collection
    if not inputs["vectors"]:
        return {"docs": []}
    hits = await ctx.engine(node).search(collection, list(inputs["vectors"]), cfg.k, info=info)
    return {"docs": _ranked(hits)}


async def _keyword_search(
    node: Node, inputs: dict[str, Any], ctx: QueryContext, info: Info
) -> dict[str, Any]:
    if not inputs["queries"]:
        return {"docs": []}
    hits = await ctx.engine(node).search(list(inputs["queries"]), node.config.k, info=info)
    return {"docs": _ranked(hits)}


def _ranked(hits: list[list[Doc]]) -> list[Doc]:
    """Each query's hits in order, with their rank in that query's list, concatenated."""
    return [
        d if d.rank == r else dataclasses.replace(d, rank=r)
        for per_query in hits
        for r, d in enumerate(per_query)
    ]


async def _rerank(
    node: Node, inputs: dict[str, Any], ctx: QueryContext, info: Info
) -> dict[str, Any]:
    if not inputs["docs"]:
        return {"docs": []}
    request = RerankRequest(inputs["query"], tuple(inputs["docs"]), node.config.top_k)
    (docs,) = await ctx.engine(node).rerank([request], info=info)
    return {"docs": list(docs)}


# Control primitives compute without waiting: plain functions, so the runtime can run them
# inline without a coroutine; the async handlers below wrap them for the executor.


def condition_values(node: Node, inputs: dict[str, Any], ctx: QueryContext) -> dict[str, Any]:
    if not isinstance(inputs["flag"], bool):
        raise TypeError(f"Condition flag must be a bool, got {type(inputs['flag']).__name__}")
    value = inputs["value"]
    return {"then": value, "else": SKIPPED} if inputs["flag"] else {"then": SKIPPED, "else": value}


def aggregate_values(node: Node, inputs: dict[str, Any], ctx: QueryContext) -> dict[str, Any]:
    # Stream modes (concat, same) are executor logic; these two take two values.
    if node.config.mode == "merge":
        return {"value": [*inputs["a"], *inputs["b"]]}
    return {"value": inputs["a"] if inputs["a"] is not SKIPPED else inputs["b"]}


def map_values(node: Node, inputs: dict[str, Any], ctx: QueryContext) -> dict[str, Any]:
    cfg = node.config
    spec = get_map(cfg.fn)
    return {"value": spec.func(cfg.params, **{p.name: inputs[p.name] for p in spec.inputs})}


SyncHandler = Callable[[Node, dict[str, Any], QueryContext], dict[str, Any]]

CONTROL_HANDLERS: dict[Op, SyncHandler] = {
    Op.CONDITION: condition_values,
    Op.AGGREGATE: aggregate_values,
    Op.MAP: map_values,
}


async def _condition(
    node: Node, inputs: dict[str, Any], ctx: QueryContext, info: Info
) -> dict[str, Any]:
    return condition_values(node, inputs, ctx)


async def _aggregate(
    node: Node, inputs: dict[str, Any], ctx: QueryContext, info: Info
) -> dict[str, Any]:
    return aggregate_values(node, inputs, ctx)


async def _map(node: Node, inputs: dict[str, Any], ctx: QueryContext, info: Info) -> dict[str, Any]:
    return map_values(node, inputs, ctx)


HANDLERS: dict[Op, Handler] = {
    Op.PREFILL: _prefill,
    Op.PARTIAL_PREFILL: _partial_prefill,
    Op.FULL_PREFILL: _full_prefill,
    Op.DECODE: _decode,
    Op.SCORE: _score,
    Op.GENERATE: _generate,
    Op.AGENT: run_agent,
    Op.EMBED: _embed,
    Op.INGEST: _ingest,
    Op.SEARCH: _search,
    Op.KEYWORD_SEARCH: _keyword_search,
    Op.RERANK: _rerank,
    Op.CONDITION: _condition,
    Op.AGGREGATE: _aggregate,
    Op.MAP: _map,
}
