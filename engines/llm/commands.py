"""Requests from the asyncio side to the worker thread. Callbacks run on the event loop."""

from __future__ import annotations

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
    params: SamplingParams
    emit: Callable[[object], None]  # receives DecodePiece, then one DecodeEnd
    close_on_finish: bool = False
    submitted: float = field(default_factory=time.perf_counter)  # TTFT counts from here


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
