"""The batch scheduler: decodes and chunked prefills under one token budget per step.

Running sequences go first (in arrival order), then waiting ones are admitted while the budget,
the sequence cap and the free blocks allow. When blocks run out, an idle sequence (one holding KV
nobody is computing on, least recently used first) or else the newest running one is preempted:
its blocks are dropped and it is recomputed later (its full blocks usually come straight back
from the prefix cache).

With a step order (``Scheduler.order``, set by the runtime from its batching policy), running
and waiting sequences are taken together in that order instead: the token budget goes to the
first ones, a waiting sequence may take the blocks of a running one ranked below it, and the
lowest-ranked running sequence is the one preempted. Without one (``fcfs``) the order is the
one above, unchanged.

Background work (tokens appended with ``Prefill.background``: a prompt's early part, prefilled
while the rest is still being produced) runs only in a step that has nothing else to compute;
a sequence's foreground prefill or decode takes its background tokens along.
"""

from __future__ import annotations

import logging
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field

from .block_manager import BlockManager
from .sequence import SeqStatus, Sequence

log = logging.getLogger(__name__)


@dataclass
class ScheduledChunk:
    """Compute tokens ``[start, start + num_tokens)`` of ``seq`` this step."""

    seq: Sequence
    start: int
    num_tokens: int

    @property
    def end(self) -> int:
        return self.start + self.num_tokens


@dataclass
class SchedulerOutput:
    chunks: list[ScheduledChunk] = field(default_factory=list)  # single-token chunks first
    preempted: list[Sequence] = field(default_factory=list)  # lost their KV this step
    rejected: list[Sequence] = field(default_factory=list)  # can never fit the cache

    @property
    def num_tokens(self) -> int:
        return sum(c.num_tokens for c in self.chunks)


class Scheduler:
    """Owns the waiting queue, the running list and the idle set. Worker thread only."""

    def __init__(self, block_manager: BlockManager, max_num_batched_tokens: int, max_num_seqs: int):
        self.bm = block_manager
        self.max_num_batched_tokens = max_num_batched_tokens
        self.max_num_seqs = max_num_seqs
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.idle: OrderedDict[int, Sequence] = OrderedDict()  # LRU order
        self.background: OrderedDict[int, Sequence] = OrderedDict()  # arrival order
        self.num_preemptions = 0
        # The step order: sequences with work -> the same sequences, first served first.
        self.order: Callable[[list[Sequence]], list[Sequence]] | None = None

    @property
    def has_work(self) -> bool:
        return bool(self.waiting or self.running or self.background)

    @property
    def only_background(self) -> bool:
        """There is background work and nothing else to compute."""
        if self.waiting:
            return False
        foreground = any(s.num_uncomputed and not s.background for s in self.running)
        return not foreground and (
            bool(self.background) or any(s.num_uncomputed for s in self.running)
        )

    def add_idle(self, seq: Sequence) -> None:
        seq.status = SeqStatus.IDLE
        self.idle[seq.seq_id] = seq
        self.idle.move_to_end(seq.seq_id)

    def submit(self, seq: Sequence) -> None:
        """``seq`` has work somebody waits for: queue it (no-op if already queued or running);
        its background tokens, if any, are computed with it."""
        seq.background = False
        if seq.status in (SeqStatus.WAITING, SeqStatus.RUNNING):
            return
        self.idle.pop(seq.seq_id, None)
        self.background.pop(seq.seq_id, None)
        seq.status = SeqStatus.WAITING
        self.waiting.append(seq)

    def submit_background(self, seq: Sequence) -> None:
        """``seq`` has tokens nobody waits for: compute them in a step with nothing else to
        do (a sequence already queued or running computes them with its own work)."""
        if seq.status != SeqStatus.IDLE:
            return
        self.idle.pop(seq.seq_id, None)
        seq.status = SeqStatus.BACKGROUND
        seq.background = True
        self.background[seq.seq_id] = seq

    def remove(self, seq: Sequence) -> None:
        """Forget the sequence wherever it is (its blocks are the caller's to free)."""
        if seq.status == SeqStatus.RUNNING:
            self.running.remove(seq)
        elif seq.status == SeqStatus.WAITING:
            self.waiting.remove(seq)
        elif seq.status == SeqStatus.BACKGROUND:
            self.background.pop(seq.seq_id, None)
        else:
            self.idle.pop(seq.seq_id, None)

    def retire(self, seq: Sequence) -> None:
        """A running sequence whose work is done becomes idle, keeping its KV."""
        self.running.remove(seq)
        seq.background = False
        self.add_idle(seq)

    def schedule(self) -> SchedulerOutput:
        if self.only_background:  # an idle step: the background work goes in
            while self.background:
                _, seq = self.background.popitem(last=False)
                seq.status = SeqStatus.WAITING
                self.waiting.append(seq)
            background = True
        else:
            background = False
        if self.order is not None:
            return self._schedule_ordered(self.order, background)
        out = SchedulerOutput()
        budget = self.max_num_batched_tokens
        scheduled: set[int] = set()
        for seq in list(self.running):
            if budget == 0 or len(out.chunks) >= self.max_num_seqs:
                break
            if seq.status != SeqStatus.RUNNING or seq.num_uncomputed == 0:
                continue  # preempted earlier in this loop, or waiting for a sample
            if seq.background and not background:
                continue  # background work waits for a step with nothing else
            n = min(seq.num_uncomputed, budget)
            while not self.bm.allocate(seq, seq.num_computed_tokens + n):
                victim = self._victim(exclude=scheduled)
                if victim is None or victim is seq:
                    self._preempt(seq, out)
                    break
                self._preempt(victim, out)
            if seq.status != SeqStatus.RUNNING:
                continue
            out.chunks.append(ScheduledChunk(seq, seq.num_computed_tokens, n))
            scheduled.add(seq.seq_id)
            budget -= n
        while self.waiting and budget > 0 and len(out.chunks) < self.max_num_seqs:
            seq = self.waiting[0]
            if not seq.block_table:
                self.bm.match_prefix(seq)
            n = min(seq.num_uncomputed, budget)
            while not self.bm.allocate(seq, seq.num_computed_tokens + n):
                victim = self._idle_victim()
                if victim is None:
                    break
                self._preempt(victim, out)
            else:
                self.waiting.popleft()
                seq.status = SeqStatus.RUNNING
                self.running.append(seq)
                out.chunks.append(ScheduledChunk(seq, seq.num_computed_tokens, n))
                budget -= n
                continue
            # It waits holding no blocks: prefix blocks it matched, kept while it waits, would
            # pin cache that running sequences need (and several waiting ones could pin it all).
            self.bm.free(seq)
            if not self.running and not out.chunks:  # nothing will ever free a block for it
                self.waiting.popleft()
                seq.status = SeqStatus.IDLE  # queued nowhere: the core closes it
                out.rejected.append(seq)
                continue
            break
        out.chunks.sort(key=lambda c: c.num_tokens != 1)
        return out

    def _schedule_ordered(self, order, background: bool) -> SchedulerOutput:
        out = SchedulerOutput()
        budget = self.max_num_batched_tokens
        ranked = order(
            [s for s in self.running if s.num_uncomputed and (background or not s.background)]
            + list(self.waiting)
        )
        rank = {s.seq_id: i for i, s in enumerate(ranked)}
        last = len(ranked)  # running sequences with nothing to compute rank below all
        scheduled: set[int] = set()
        preempted: set[int] = set()

        def victim(seq: Sequence) -> Sequence | None:
            """Idle KV first, then the lowest-ranked running sequence below ``seq``."""
            idle = self._idle_victim()
            if idle is not None:
                return idle
            below = [
                s for s in self.running
                if s.seq_id not in scheduled and rank.get(s.seq_id, last) > rank[seq.seq_id]
            ]  # fmt: skip
            return max(below, key=lambda s: rank.get(s.seq_id, last), default=None)

        for seq in ranked:
            if budget == 0 or len(out.chunks) >= self.max_num_seqs:
                break
            if seq.seq_id in preempted:
                continue  # lost its blocks this step: recomputed in a later one
            if seq.status == SeqStatus.WAITING and not seq.block_table:
                self.bm.match_prefix(seq)
            n = min(seq.num_uncomputed, budget)
            while not self.bm.allocate(seq, seq.num_computed_tokens + n):
                v = victim(seq)
                if v is None:
                    break
                preempted.add(v.seq_id)
                self._preempt(v, out)
            else:
                if seq.status == SeqStatus.WAITING:
                    self.waiting.remove(seq)
                    seq.status = SeqStatus.RUNNING
                    self.running.append(seq)
                out.chunks.append(ScheduledChunk(seq, seq.num_computed_tokens, n))
                scheduled.add(seq.seq_id)
                budget -= n
                continue
            if seq.status == SeqStatus.RUNNING:  # nothing ranked below it to take from
                preempted.add(seq.seq_id)
                self._preempt(seq, out)
                continue
            self.bm.free(seq)  # it waits holding no blocks (as above)
            if not self.running and not out.chunks:  # nothing will ever free a block for it
                self.waiting.remove(seq)
                seq.status = SeqStatus.IDLE  # queued nowhere: the core closes it
                out.rejected.append(seq)
                continue
            break  # the sequences ranked below it wait too
        out.chunks.sort(key=lambda c: c.num_tokens != 1)
        return out

    def _idle_victim(self) -> Sequence | None:
        return next((s for s in self.idle.values() if s.block_table), None)

    def _victim(self, exclude: set[int]) -> Sequence | None:
        victim = self._idle_victim()
        if victim is not None:
            return victim
        for seq in reversed(self.running):
            if seq.seq_id not in exclude:
                return seq
        return None

    def _preempt(self, seq: Sequence, out: SchedulerOutput) -> None:
        log.debug("preempting sequence %d (%d tokens)", seq.seq_id, seq.num_tokens)
        self.num_preemptions += 1
        self.bm.free(seq)
        seq.last_logits = None
        out.preempted.append(seq)
        if seq.status == SeqStatus.IDLE:
            return  # stays idle without KV; recomputed when next asked
        self.running.remove(seq)
        if seq.background:  # nobody waits for it: back to the background work
            seq.status = SeqStatus.BACKGROUND
            self.background[seq.seq_id] = seq
            return
        seq.status = SeqStatus.WAITING
        self.waiting.appendleft(seq)
