"""Per-sequence state, owned and mutated only by the engine's worker thread."""

from __future__ import annotations

import concurrent.futures
import enum
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from .detokenizer import IncrementalDetokenizer
from .sampling import SamplingParams


class SeqStatus(enum.Enum):
    IDLE = "idle"  # holds its KV (maybe none yet), nothing asked of it
    WAITING = "waiting"  # has work, not admitted (new, or preempted: blocks dropped)
    RUNNING = "running"  # has work and KV blocks; scheduled every step
    BACKGROUND = "background"  # has tokens nobody waits for: computed when nothing else runs
    CLOSED = "closed"


@dataclass
class DecodeState:
    """An active ``decode`` on a sequence: what to sample and where pieces go."""

    params: SamplingParams
    emit: Callable[[object], None]  # called (in the worker) with DecodePiece or DecodeEnd
    detok: IncrementalDetokenizer
    generator: torch.Generator | None
    close_on_finish: bool = False
    start_len: int = 0  # sequence length when the decode began
    output_ids: list[int] = field(default_factory=list)
    text: str = ""
    started: float = field(default_factory=time.perf_counter)
    token_times: list[float] = field(default_factory=list)
    grammar: Any = None  # GrammarMatcher of a constrained decode
    grammar_pending: concurrent.futures.Future | None = None  # compiling: not started yet


@dataclass
class ScoreState:
    """A temporary child sequence scoring one candidate continuation of ``context_len`` tokens."""

    context_len: int
    on_done: Callable[[list[float]], None]
    on_error: Callable[[BaseException], None]
    # by position: a preempted child recomputes some positions, which then just overwrite
    logprobs: dict[int, float] = field(default_factory=dict)


@dataclass
class PrefillWaiter:
    target_len: int  # resolves once num_computed_tokens >= target_len
    on_done: Callable[[], None]
    on_error: Callable[[BaseException], None]


class Sequence:
    """One request's tokens, its KV block table and what is being asked of it.

    Invariants: ``0 <= num_computed_tokens <= num_tokens``; the block table covers at least the
    computed tokens; ``last_logits`` (if set) are the logits after the last token.
    """

    def __init__(self, seq_id: int, token_ids: list[int] | None = None):
        self.seq_id = seq_id
        self.token_ids: list[int] = list(token_ids or [])
        self.num_computed_tokens = 0
        self.num_cached_tokens = 0  # tokens whose KV came from the prefix cache
        self.num_hashed_blocks = 0  # leading blocks registered in the prefix cache
        self.block_table: list[int] = []
        self.status = SeqStatus.IDLE
        self.decode: DecodeState | None = None
        self.score: ScoreState | None = None
        self.prefill_waiters: list[PrefillWaiter] = []
        self.last_logits: torch.Tensor | None = None
        self.last_used = time.monotonic()
        self.info: object = None  # the latest caller's request info, for the step order
        # Its uncomputed tokens are background work (``Prefill.background``), also while a
        # step computes them (RUNNING): foreground work goes first.
        self.background = False

    def __repr__(self) -> str:
        return (
            f"Sequence({self.seq_id}, tokens={self.num_tokens}, "
            f"computed={self.num_computed_tokens}, {self.status.value})"
        )

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def num_uncomputed(self) -> int:
        return self.num_tokens - self.num_computed_tokens

    @property
    def has_work(self) -> bool:
        """Somebody waits on this sequence's compute (prefill, decode or score)."""
        return bool(self.prefill_waiters) or self.decode is not None or self.score is not None

    def append(self, token_ids: list[int]) -> None:
        self.token_ids.extend(token_ids)
        self.last_logits = None

    @property
    def prefix_match_limit(self) -> int:
        """Most leading tokens whose KV may come from the prefix cache: not the last one (its
        logits are needed) and, when scoring, none whose logits give a candidate's log-prob."""
        if self.score is not None:
            return self.score.context_len - 1
        return self.num_tokens - 1

    def logit_positions(self, start: int, end: int) -> range:
        """Positions in ``[start, end)`` whose next-token logits this sequence needs."""
        if self.score is not None:
            first = self.score.context_len - 1
            return range(max(start, first), min(end, self.num_tokens - 1))
        return range(end - 1, end) if end == self.num_tokens and end > start else range(0)
