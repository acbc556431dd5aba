"""The primitive operations and what the passes and the scheduler need to know about each."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Op(str, Enum):
    """A task primitive (see DESIGN.md "Primitives"), plus the plan's INPUT and OUTPUT nodes."""

    INPUT = "Input"
    OUTPUT = "Output"
    EMBED = "Embed"
    INGEST = "Ingest"
    SEARCH = "Search"
    KEYWORD_SEARCH = "KeywordSearch"
    RERANK = "Rerank"
    PREFILL = "Prefill"
    PARTIAL_PREFILL = "PartialPrefill"
    FULL_PREFILL = "FullPrefill"
    DECODE = "Decode"
    PARTIAL_DECODE = "PartialDecode"
    SCORE = "Score"
    GENERATE = "Generate"
    AGENT = "Agent"
    CONDITION = "Condition"
    AGGREGATE = "Aggregate"
    MAP = "Map"

    @property
    def info(self) -> OpInfo:
        """Static facts about this op."""
        return _INFO[self]


@dataclass(frozen=True)
class OpInfo:
    """Static facts about an op.

    ``engine_kind``: which engine interface runs it ("" for control ops run by the scheduler).
    ``batchable``: primitives of many queries may share one engine batch.
    ``item_port``: the list input processed item by item; a stream may feed this port, and the
    op then runs once per chunk and emits a stream (empty: the op cannot consume a stream).
    """

    engine_kind: str
    batchable: bool
    item_port: str = ""


_INFO: dict[Op, OpInfo] = {
    Op.INPUT: OpInfo("", False),
    Op.OUTPUT: OpInfo("", False),
    Op.EMBED: OpInfo("embedder", True, "texts"),
    Op.INGEST: OpInfo("index", True, "vectors"),
    Op.SEARCH: OpInfo("index", True, "vectors"),
    Op.KEYWORD_SEARCH: OpInfo("keyword", True, "queries"),
    Op.RERANK: OpInfo("reranker", True),
    Op.PREFILL: OpInfo("llm", True),  # item_port set per node when it maps over a list
    Op.PARTIAL_PREFILL: OpInfo("llm", True),
    Op.FULL_PREFILL: OpInfo("llm", True),
    Op.DECODE: OpInfo("llm", True),
    Op.PARTIAL_DECODE: OpInfo("llm", True),
    Op.SCORE: OpInfo("llm", True),
    Op.GENERATE: OpInfo("llm", True),
    Op.AGENT: OpInfo("llm", False),  # a loop of LLM steps and tool calls (runtime/agent.py)
    Op.CONDITION: OpInfo("", False),
    Op.AGGREGATE: OpInfo("", False),
    Op.MAP: OpInfo("", False),
}
