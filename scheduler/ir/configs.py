"""Each op's node settings: a frozen, hashable dataclass per op, read by attribute.

``micro_batch`` lives on the ops that can run their item port in micro-batches (stage
decomposition sets it; 0: the whole input at once): Embed, Ingest, Search, KeywordSearch, a
Prefill mapped over a list and a Decode over a list of sequences. ``item_port`` names the input a node may take as a stream
when it differs from its op's default (``OpInfo.item_port``): a Prefill mapped over a list, a
Decode over a list of sequences, a Map whose function works item by item.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ayo.engines.llm.sampling import SamplingParams

from .prompt import Prompt


class FrozenConfig(dict):  # type: ignore[type-arg]
    """An immutable, hashable mapping: a Map function's own parameters (open-ended by nature:
    ``chunk_words``, ``limit``, ``threshold``, ...; values must be hashable)."""

    __slots__ = ("_hash",)

    def __init__(self, items: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        merged = dict(items or {}, **kwargs)
        super().__init__(sorted(merged.items()))
        self._hash = hash(tuple(self.items()))

    def __hash__(self) -> int:  # type: ignore[override]
        return self._hash

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FrozenConfig) and dict.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self == other

    def __repr__(self) -> str:
        return f"FrozenConfig({dict.__repr__(self)})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (FrozenConfig, (dict(self),))

    def _immutable(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError("FrozenConfig is immutable; use with_(...) for a changed copy")

    __setitem__ = __delitem__ = __ior__ = _immutable  # type: ignore[assignment]
    clear = pop = popitem = setdefault = update = _immutable  # type: ignore[assignment]

    def __copy__(self) -> FrozenConfig:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> FrozenConfig:
        return self

    def with_(self, **changes: Any) -> FrozenConfig:
        """A copy with ``changes`` applied."""
        return FrozenConfig(self, **changes)


@dataclass(frozen=True, slots=True)
class NodeConfig:
    """Base of every op's settings (Input, Output and Condition have none beyond it)."""

    @property
    def item_port(self) -> str:
        """The input this node takes as a stream, when it differs from its op's default."""
        return ""

    @property
    def prompt_or_none(self) -> Prompt | None:
        """The node's prompt (the prefill ops), else None."""
        return None

    def with_(self, **changes: Any) -> NodeConfig:
        """A copy with fields replaced."""
        return replace(self, **changes)


@dataclass(frozen=True, slots=True)
class BatchedConfig(NodeConfig):
    """An op that may run its item port in micro-batches of ``micro_batch`` items, sending each
    on as a chunk of a stream (0: the whole input at once)."""

    micro_batch: int = field(default=0, kw_only=True)


@dataclass(frozen=True, slots=True)
class EmbedConfig(BatchedConfig):
    pass


TEMP_COLLECTION = "@query"  # an Ingest's collection of the query's own documents


@dataclass(frozen=True, slots=True)
class IngestConfig(BatchedConfig):
    """``collection``: a stored one, or ``"@query"`` for one of the query's own."""

    collection: str


@dataclass(frozen=True, slots=True)
class SearchConfig(BatchedConfig):
    """``collection`` None: it arrives on the ``collection`` input port."""

    k: int
    collection: str | None = None


@dataclass(frozen=True, slots=True)
class KeywordSearchConfig(BatchedConfig):
    k: int


@dataclass(frozen=True, slots=True)
class RerankConfig(NodeConfig):
    top_k: int


@dataclass(frozen=True, slots=True)
class PrefillConfig(BatchedConfig):
    """``map_over``: the placeholder that takes a list, one sequence per item ("" for none)."""

    prompt: Prompt
    map_over: str = ""

    @property
    def item_port(self) -> str:
        return self.map_over

    @property
    def prompt_or_none(self) -> Prompt | None:
        return self.prompt


@dataclass(frozen=True, slots=True)
class PartialPrefillConfig(NodeConfig):
    """The prompt's template before character ``split_at`` (its early part)."""

    prompt: Prompt
    split_at: int

    @property
    def prompt_or_none(self) -> Prompt | None:
        return self.prompt


@dataclass(frozen=True, slots=True)
class FullPrefillConfig(NodeConfig):
    prompt: Prompt

    @property
    def prompt_or_none(self) -> Prompt | None:
        return self.prompt


@dataclass(frozen=True, slots=True)
class DecodeConfig(BatchedConfig):
    """``params``: how tokens are chosen and when the decode ends (``max_tokens``, ``stop``).
    ``parse``: ``text``, or the list items it writes (``lines``, ``json``: at most
    ``max_items`` when > 0); ``max_sentences`` > 0 ends a text after that many sentences;
    ``over_list``: one decode per sequence of a SeqList."""

    params: SamplingParams = field(default_factory=SamplingParams)
    parse: str = "text"
    max_items: int = 0
    max_sentences: int = 0
    over_list: bool = False

    @property
    def item_port(self) -> str:
        return "seqs" if self.over_list else ""


@dataclass(frozen=True, slots=True)
class ScoreConfig(NodeConfig):
    options: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class AgentConfig(NodeConfig):
    """An agent's loop: ``system`` and the ``task`` (the first user message, placeholders
    filled with the node's inputs); ``tools`` by registered name; at most ``max_steps`` LLM
    steps of at most ``max_tokens`` each (the first ``required_steps`` must call a tool, the
    last one has none, so it answers); ``parallel``: several calls a step; the
    built-in ``search`` tool reads ``k`` passages of ``collection`` with engines ``embedder``
    and ``index``. The answer (a step that calls no tool) ends at a ``stop`` string or after
    ``max_sentences`` sentences (0: no limit), as a Synthesis answer does."""

    task: Prompt
    system: str = ""
    tools: tuple[str, ...] = ()
    max_steps: int = 4
    max_tokens: int = 96
    required_steps: int = 0
    parallel: bool = True
    embedder: str = "embedder"
    index: str = "index"
    collection: str = "default"
    k: int = 2
    stop: tuple[str, ...] = ()
    max_sentences: int = 0


@dataclass(frozen=True, slots=True)
class AggregateConfig(NodeConfig):
    mode: str


@dataclass(frozen=True, slots=True)
class MapConfig(NodeConfig):
    """``fn``: the registered map function; ``params``: its own parameters."""

    fn: str
    params: FrozenConfig = field(default_factory=FrozenConfig)
    map_item_port: str = ""

    @property
    def item_port(self) -> str:
        return self.map_item_port


def micro_batch(config: NodeConfig) -> int:
    """The node's micro-batch size (0: none, or an op that takes no micro-batches)."""
    return config.micro_batch if isinstance(config, BatchedConfig) else 0
