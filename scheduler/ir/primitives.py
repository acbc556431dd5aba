"""Constructors for primitive nodes with the right ports for each op.

These are what module decomposition emits; users may also call them to write a plan by hand.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from ayo.engines.llm.sampling import SamplingParams

from .configs import (
    AgentConfig,
    AggregateConfig,
    DecodeConfig,
    EmbedConfig,
    FrozenConfig,
    IngestConfig,
    KeywordSearchConfig,
    MapConfig,
    NodeConfig,
    PrefillConfig,
    RerankConfig,
    ScoreConfig,
    SearchConfig,
)
from .errors import PlanError
from .functions import get_map
from .graph import INPUT_ID, OUTPUT_ID, Node
from .ops import Op
from .ports import Port, PortType
from .prompt import Prompt

T, TL, V, DL, SEQ, SEQS = (
    PortType.TEXT,
    PortType.TEXT_LIST,
    PortType.VECTORS,
    PortType.DOC_LIST,
    PortType.SEQ,
    PortType.SEQ_LIST,
)
DECODE_PARSE = ("text", "lines", "json")
AGGREGATE_MODES = ("concat", "same", "coalesce", "merge")


def input_node(ports: Iterable[Port]) -> Node:
    return Node(INPUT_ID, Op.INPUT, outputs=tuple(ports))


def output_node(ports: Iterable[Port]) -> Node:
    return Node(OUTPUT_ID, Op.OUTPUT, inputs=tuple(ports))


def control_port(index: int) -> Port:
    """An ordering-only input (module-by-module execution); dependency pruning removes it."""
    return Port(f"after_{index}", PortType.ANY, control=True)


def embed(node_id: str, engine: str, texts: PortType = TL, module: str = "") -> Node:
    """texts (TextList or DocList) -> vectors."""
    if texts not in (TL, DL):
        raise PlanError(f"Embed takes TextList or DocList, not {texts.value}", node=node_id)
    return Node(
        node_id,
        Op.EMBED,
        engine,
        EmbedConfig(),
        (Port("texts", texts),),
        (Port("vectors", V),),
        module,
    )


def ingest(node_id: str, engine: str, collection: str, module: str = "") -> Node:
    """docs + vectors -> collection name. ``collection`` "@query" makes a per-query collection."""
    return Node(
        node_id,
        Op.INGEST,
        engine,
        IngestConfig(collection),
        (Port("docs", DL, aligned=True), Port("vectors", V)),
        (Port("collection", T),),
        module,
    )


def search(node_id: str, engine: str, k: int, collection: str | None, module: str = "") -> Node:
    """vectors -> top-k docs per vector, concatenated. ``collection`` None: an input port."""
    if k < 1:
        raise PlanError(f"Search k must be >= 1, got {k}", node=node_id)
    ins = (Port("vectors", V),) + ((Port("collection", T),) if collection is None else ())
    cfg = SearchConfig(k, collection)
    return Node(node_id, Op.SEARCH, engine, cfg, ins, (Port("docs", DL),), module)


def keyword_search(node_id: str, engine: str, k: int, module: str = "") -> Node:
    """queries -> top-k docs per query, concatenated."""
    if k < 1:
        raise PlanError(f"KeywordSearch k must be >= 1, got {k}", node=node_id)
    return Node(
        node_id,
        Op.KEYWORD_SEARCH,
        engine,
        KeywordSearchConfig(k),
        (Port("queries", TL),),
        (Port("docs", DL),),
        module,
    )


def rerank(node_id: str, engine: str, top_k: int, module: str = "") -> Node:
    """(query, docs) -> the ``top_k`` docs by relevance."""
    if top_k < 1:
        raise PlanError(f"Rerank top_k must be >= 1, got {top_k}", node=node_id)
    return Node(
        node_id,
        Op.RERANK,
        engine,
        RerankConfig(top_k),
        (Port("query", T), Port("docs", DL)),
        (Port("docs", DL),),
        module,
    )


def prefill(
    node_id: str, engine: str, prompt: Prompt, map_over: str = "", module: str = ""
) -> Node:
    """Placeholders -> a sequence with the rendered prompt prefilled.

    With ``map_over`` the named placeholder takes a TextList and one sequence per item is
    prefilled (output SeqList); the node then consumes that list as a stream when offered one.
    """
    if "seq" in prompt.placeholders:
        raise PlanError(
            "placeholder name {seq} is reserved for the sequence port; rename it", node=node_id
        )
    if map_over and map_over not in prompt.placeholders:
        raise PlanError(f"map_over {map_over!r} is not a placeholder of the prompt", node=node_id)
    ins = tuple(Port(p, TL if p == map_over else T) for p in prompt.placeholders)
    cfg = PrefillConfig(prompt, map_over)
    out = Port("seqs", SEQS) if map_over else Port("seq", SEQ)
    return Node(node_id, Op.PREFILL, engine, cfg, ins, (out,), module)


def decode(
    node_id: str,
    engine: str,
    max_tokens: int,
    parse: str = "text",
    max_items: int = 0,
    over_list: bool = False,
    module: str = "",
    stop: tuple[str, ...] = (),
    sampling: SamplingParams | None = None,
    max_sentences: int = 0,
) -> Node:
    """A sequence -> its generated text (``parse`` "text") or the list items it writes
    ("lines", "json"; at most ``max_items`` when > 0: the decode ends once it has written
    them). ``over_list``: SeqList -> TextList. Generation stops at ``max_tokens``, the model's
    end-of-turn token, a ``stop`` string or (``parse`` "text") after ``max_sentences`` sentences
    when > 0, choosing tokens by ``sampling`` (greedy when None; its own ``max_tokens`` and
    ``stop`` are replaced by these)."""
    if max_tokens < 1:
        raise PlanError(f"Decode max_tokens must be >= 1, got {max_tokens}", node=node_id)
    try:
        params = dataclasses.replace(
            sampling or SamplingParams(), max_tokens=max_tokens, stop=tuple(stop)
        )
    except ValueError as exc:
        raise PlanError(f"Decode: {exc}", node=node_id) from None
    if parse not in DECODE_PARSE:
        raise PlanError(f"Decode parse must be one of {DECODE_PARSE}, got {parse!r}", node=node_id)
    if max_sentences < 0 or (max_sentences and parse != "text"):
        raise PlanError("Decode max_sentences must be >= 0, with parse 'text'", node=node_id)
    if over_list and parse != "text":
        raise PlanError("Decode over a list of sequences returns one text each", node=node_id)
    cfg = DecodeConfig(params, parse, max_items, max_sentences, over_list)
    if over_list:
        return Node(
            node_id, Op.DECODE, engine, cfg, (Port("seqs", SEQS),), (Port("texts", TL),), module
        )
    out = Port("text", T) if parse == "text" else Port("items", TL)
    return Node(node_id, Op.DECODE, engine, cfg, (Port("seq", SEQ),), (out,), module)


def score(node_id: str, engine: str, options: tuple[str, ...], module: str = "") -> Node:
    """A sequence -> ``probs``: the probability of each option as the continuation of the
    sequence, normalized over the options (one prefill of each option, no decode)."""
    options = tuple(options)
    if len(options) < 2 or any(not isinstance(o, str) or not o for o in options):
        raise PlanError(f"Score needs two or more non-empty options, got {options!r}", node=node_id)
    return Node(
        node_id,
        Op.SCORE,
        engine,
        ScoreConfig(options),
        (Port("seq", SEQ),),
        (Port("probs", PortType.ANY),),
        module,
    )


def generate(node_id: str, engine: str, module: str = "") -> Node:
    """(``prompt`` token ids, ``params`` sampling) -> ``completion``: the prompt prefilled into
    a new sequence and decoded under ``params`` (an OpenAI completion); the completion is the
    decode's end (text, finish reason, token counts)."""
    return Node(
        node_id,
        Op.GENERATE,
        engine,
        NodeConfig(),
        (Port("prompt", PortType.ANY), Port("params", PortType.ANY)),
        (Port("completion", PortType.ANY),),
        module,
    )


def agent(node_id: str, engine: str, config: AgentConfig, module: str = "") -> Node:
    """The task's placeholders -> ``answer`` (text) and ``steps`` (what happened, step by step):
    the model calls tools until it answers or ``max_steps`` (``runtime/agent.py``)."""
    from .tools import get_tool

    if not isinstance(config.task, Prompt):
        raise PlanError("an Agent's task must be a Prompt", node=node_id)
    for name in config.tools:
        try:
            get_tool(name)
        except KeyError as exc:
            raise PlanError(str(exc.args[0]), node=node_id) from None
    if config.max_steps < 1 or config.max_tokens < 1 or config.k < 1:
        raise PlanError("an Agent needs max_steps, max_tokens and k >= 1", node=node_id)
    if config.max_sentences < 0:
        raise PlanError("an Agent's max_sentences must be >= 0 (0: no limit)", node=node_id)
    if not 0 <= config.required_steps < config.max_steps:
        raise PlanError("an Agent's required_steps must be in [0, max_steps)", node=node_id)
    ins = tuple(Port(p, T) for p in config.task.placeholders)
    outs = (Port("answer", T), Port("steps", PortType.ANY))
    return Node(node_id, Op.AGENT, engine, config, ins, outs, module)


def condition(node_id: str, value_type: PortType, module: str = "") -> Node:
    """(flag, value) -> value on ``then`` when flag is true, else on ``else``; the other is skipped."""
    return Node(
        node_id,
        Op.CONDITION,
        "",
        NodeConfig(),
        (Port("flag", PortType.BOOL), Port("value", value_type)),
        (Port("then", value_type), Port("else", value_type)),
        module,
    )


def aggregate(node_id: str, mode: str, value_type: PortType, module: str = "") -> Node:
    """``concat``: a list stream -> the list; ``same``: a stream of equal values -> the value;
    ``coalesce``: inputs ``a``, ``b`` -> the first one not skipped; ``merge``: lists ``a + b``."""
    if mode not in AGGREGATE_MODES:
        raise PlanError(
            f"Aggregate mode must be one of {AGGREGATE_MODES}, got {mode!r}", node=node_id
        )
    ins = (
        (Port("a", value_type), Port("b", value_type))
        if mode in ("coalesce", "merge")
        else (Port("items", value_type),)
    )
    return Node(
        node_id,
        Op.AGGREGATE,
        "",
        AggregateConfig(mode),
        ins,
        (Port("value", value_type),),
        module,
    )


def map_node(node_id: str, fn: str, module: str = "", **params: object) -> Node:
    """Run registered map function ``fn`` (see ``functions.py``) with ``params`` as its config."""
    spec = get_map(fn)
    cfg = MapConfig(fn, FrozenConfig(params), spec.item_port)
    return Node(node_id, Op.MAP, "", cfg, spec.inputs, (Port("value", spec.output),), module)
