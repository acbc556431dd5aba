"""Requests from the asyncio side to the worker thread. Callbacks run on the event loop."""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from .sampling import SamplingParams


@dataclass
class Command:
    seq_id: int


@dataclass
class Work(Command):
    """A command that gives a sequence compute. ``info``: the caller's request info (opaque to
    the engine), which the step order reads (``LLMEngine.set_step_order``); None keeps the
    sequence's."""

    info: object = field(default=None, kw_only=True)


@dataclass
class Open(Command):
    pass


@dataclass
class Prefill(Work):
    """Append ``token_ids``; ``on_done`` once their KV is computed. ``background``: nobody
    waits for them: computed in a step with nothing else to do, or together with the
    sequence's next prefill or decode, whichever comes first."""

    token_ids: list[int]
    on_done: Callable[[], None] | None = None
    on_error: Callable[[BaseException], None] | None = None
    background: bool = False


@dataclass
class Decode(Work):
    """Generate on the sequence. ``grammar``: the compiled ``params.grammar`` (a future from
    ``GrammarCompiler.submit``); the decode starts once it is done (``GrammarReady``)."""

    params: SamplingParams
    emit: Callable[[object], None]  # receives DecodePiece, then one DecodeEnd
    close_on_finish: bool = False
    submitted: float = field(default_factory=time.perf_counter)  # TTFT counts from here
    grammar: concurrent.futures.Future | None = None


@dataclass
class GrammarReady(Command):
    """The grammar a decode waits for has compiled (or failed to)."""

    future: concurrent.futures.Future


@dataclass
class Abort(Command):
    """The consumer of a decode stream went away: close the sequence if that decode still runs."""

    emit: Callable[[object], None]


@dataclass
class Score(Work):
    candidates: list[list[int]]
    on_done: Callable[[list], None]
    on_error: Callable[[BaseException], None]


@dataclass
class Close(Command):
    on_done: Callable[[], None] | None = None
