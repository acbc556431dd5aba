"""EngineCore: the synchronous engine the worker thread drives.

``step()`` is schedule -> run -> postprocess. Commands from the asyncio side mutate sequences
only here, between steps. Results leave through ``post`` (callbacks run on the event loop).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from collections.abc import Sequence as Sequence_
from dataclasses import dataclass

import torch

from ..isolation import run_isolated
from .block_manager import BlockManager
from .commands import Abort, Close, Command, Decode, GrammarReady, Open, Prefill, Work
from .config import EngineConfig
from .decoding import Decoder
from .errors import (
    ContextLengthExceeded,
    EngineError,
    InvalidRequest,
    SequenceClosed,
)
from .outputs import EngineCounters, LLMStats
from .runner import ModelRunner
from .scheduler import ScheduledChunk, Scheduler
from .sequence import PrefillWaiter, SeqStatus, Sequence

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StepRecord:
    """One model step: when it ran (``time.perf_counter`` seconds) and, per scheduled chunk,
    the request info's query id (None without one) and the tokens it computed."""

    start: float
    end: float
    chunks: tuple[tuple[object, int], ...]

    @classmethod
    def of(cls, start: float, end: float, chunks: list[ScheduledChunk]) -> StepRecord:
        parts = tuple((getattr(c.seq.info, "query_id", None), c.num_tokens) for c in chunks)
        return cls(start, end, parts)


class EngineCore:
    """Sequences, scheduler, block manager, runner and decoder; single-threaded."""

    def __init__(self, runner: ModelRunner, config: EngineConfig, tokenizer, max_model_len: int):
        mc = runner.model.config
        num_blocks = runner.kv_caches[0][0].shape[0]
        self.runner = runner
        self.tokenizer = tokenizer
        self.vocab_size = mc.vocab_size
        self.eos_ids = frozenset(mc.eos_token_ids)
        self.max_model_len = max_model_len
        self.bm = BlockManager(num_blocks, config.block_size, config.enable_prefix_caching)
        self.scheduler = Scheduler(self.bm, config.max_num_batched_tokens, config.max_num_seqs)
        self.seqs: dict[int, Sequence] = {}
        self.outbox: list[tuple[Callable, tuple]] = []
        self.counters = EngineCounters()
        self.step_log: list[StepRecord] | None = None  # recording when a list (record_steps)
        # sequences closed because their background prefill was refused, and why (bounded:
        # a caller that never comes back leaves one entry per sequence it opened)
        self.failed_background: dict[int, BaseException] = {}
        self.decoder = Decoder(
            tokenizer=tokenizer,
            eos_ids=self.eos_ids,
            max_model_len=max_model_len,
            bm=self.bm,
            scheduler=self.scheduler,
            counters=self.counters,
            post=self.post,
            fail=self._fail_one,
            close=self.close,
            check_tokens=self.check_tokens,
        )

    def post(self, fn: Callable | None, *args) -> None:
        if fn is not None:
            self.outbox.append((fn, args))

    # ---- the step -------------------------------------------------------------------------

    @property
    def has_work(self) -> bool:
        return self.scheduler.has_work

    @property
    def only_background(self) -> bool:
        """The next step would compute background prefills only (see ``Prefill.background``)."""
        return self.scheduler.only_background

    def step(self) -> None:
        t0 = time.perf_counter()
        out = self.scheduler.schedule()
        for seq in out.rejected:
            self._fail(seq, EngineError(f"sequence {seq.seq_id} does not fit the KV cache"))
        if not out.chunks:
            return
        self._run(out.chunks)
        t1 = time.perf_counter()
        c = self.counters
        c.steps += 1
        c.computed += out.num_tokens
        c.busy_s += t1 - t0
        if self.step_log is not None:
            self.step_log.append(StepRecord.of(t0, t1, out.chunks))

    def _run(self, chunks: list[ScheduledChunk]) -> None:
        """Run the chunks and postprocess them. When the forward pass raises, halves of the
        batch are run again (``run_isolated``; each half keeps decodes before prefills): the
        chunks whose own pass fails are failed with the cause, every other chunk goes on.
        Re-running is safe: a pass only rewrites the KV slots of its own chunks."""

        def forward(part: Sequence_[ScheduledChunk]) -> list[torch.Tensor]:
            logits = self.runner.run(list(part))
            return [logits.of(i) for i in range(len(part))]

        rows = run_isolated(chunks, forward, "model step")
        done = []
        for chunk, r in zip(chunks, rows):
            if isinstance(r, Exception):
                self._fail_one(chunk.seq, r)
            else:
                done.append((chunk, r))
        self._postprocess(done)

    def _postprocess(self, done: list[tuple[ScheduledChunk, torch.Tensor]]) -> None:
        to_sample: list[tuple[Sequence, torch.Tensor]] = []
        for chunk, rows in done:
            seq = chunk.seq
            try:
                seq.num_computed_tokens = chunk.end
                self.bm.commit(seq)
                if seq.score is not None:
                    self.decoder.score_rows(seq, chunk.start, chunk.end, rows)
                    continue
                self._resolve_waiters(seq)
                if chunk.end < seq.num_tokens:
                    continue
                if seq.decode is not None and seq.decode.grammar_pending is None:
                    to_sample.append((seq, rows[0]))
                else:  # no decode, or one whose grammar compiles: it samples from these
                    seq.last_logits = rows[0].clone()
                    if seq.status == SeqStatus.RUNNING:
                        self.scheduler.retire(seq)
            except Exception as exc:
                self._fail_one(seq, exc)
        if to_sample:
            self.decoder.sample(to_sample)

    def _fail_one(self, seq: Sequence, exc: BaseException) -> None:
        """An error that belongs to one sequence: it fails; the step goes on for the others."""
        log.error("sequence %d failed in the step", seq.seq_id, exc_info=exc)
        if seq.status != SeqStatus.CLOSED:
            self._fail(seq, exc)

    def _resolve_waiters(self, seq: Sequence) -> None:
        keep = []
        for w in seq.prefill_waiters:
            if w.target_len <= seq.num_computed_tokens:
                self.post(w.on_done)
            else:
                keep.append(w)
        seq.prefill_waiters = keep

    # ---- commands -------------------------------------------------------------------------

    def handle(self, cmd: Command) -> None:
        try:
            if isinstance(cmd, Open):
                self.seqs[cmd.seq_id] = seq = Sequence(cmd.seq_id)
                self.scheduler.add_idle(seq)
            elif isinstance(cmd, Work):
                seq = self._get(cmd.seq_id)
                if cmd.info is not None:
                    seq.info = cmd.info
                if isinstance(cmd, Prefill):
                    self._prefill(seq, cmd)
                elif isinstance(cmd, Decode):
                    self.decoder.start_decode(seq, cmd)
                else:
                    self.decoder.start_score(seq, cmd)
            elif isinstance(cmd, GrammarReady):
                seq = self.seqs.get(cmd.seq_id)
                if seq is not None and seq.decode and seq.decode.grammar_pending is cmd.future:
                    self.decoder.resume(seq)
            elif isinstance(cmd, Abort):
                seq = self.seqs.get(cmd.seq_id)
                if seq is not None and seq.decode is not None and seq.decode.emit is cmd.emit:
                    self.close(seq, reason="abort")
            elif isinstance(cmd, Close):
                self.failed_background.pop(cmd.seq_id, None)
                seq = self.seqs.get(cmd.seq_id)
                if seq is not None:
                    self.close(seq, reason="abort")
                self.post(cmd.on_done)
        except Exception as exc:  # the command's requester gets the error, nobody else
            if not isinstance(exc, InvalidRequest):
                log.exception("engine command %s failed", type(cmd).__name__)
                seq = self.seqs.get(getattr(cmd, "seq_id", None))
                if isinstance(cmd, Decode) and seq is not None and seq.decode is not None:
                    self._fail_one(seq, exc)  # its decode ends with the error
                    return
            on_error = getattr(cmd, "on_error", None)
            if on_error is None and isinstance(cmd, Decode):
                self.post(cmd.emit, exc)
            else:
                self.post(on_error, exc)

    def _get(self, seq_id: int) -> Sequence:
        seq = self.seqs.get(seq_id)
        if seq is None:
            failed = self.failed_background.pop(seq_id, None)
            if failed is not None:  # its background prefill failed: the caller learns why now
                raise failed
            raise SequenceClosed(f"sequence {seq_id} is closed; open a new one")
        return seq

    def check_tokens(self, token_ids: list[int], have: int) -> None:
        bad = [t for t in token_ids if not 0 <= t < self.vocab_size]
        if bad:
            raise InvalidRequest(f"token ids out of range [0, {self.vocab_size}): {bad[:5]}")
        if have + len(token_ids) > self.max_model_len:
            raise ContextLengthExceeded(
                f"{have + len(token_ids)} tokens exceed the context window of "
                f"{self.max_model_len}; shorten the prompt"
            )

    def _prefill(self, seq: Sequence, cmd: Prefill) -> None:
        try:
            if seq.decode is not None:
                raise InvalidRequest(f"sequence {seq.seq_id} is decoding; prefill after it ends")
            if not cmd.token_ids:
                raise InvalidRequest("prefill needs at least one token")
            self.check_tokens(cmd.token_ids, seq.num_tokens)
        except InvalidRequest as exc:
            if not cmd.background:
                raise
            # Nobody waits for a background prefill: the sequence fails, and its next call
            # raises this error (not a bare "closed").
            self.failed_background[seq.seq_id] = exc
            self._fail(seq, exc)
            return
        seq.append(cmd.token_ids)
        if cmd.background:
            self.scheduler.submit_background(seq)
            return
        seq.prefill_waiters.append(PrefillWaiter(seq.num_tokens, cmd.on_done, cmd.on_error))
        self.scheduler.submit(seq)

    def close(self, seq: Sequence, reason: str, error: BaseException | None = None) -> None:
        """Drop the sequence: end its decode, fail its waiters, free its blocks."""
        self.seqs.pop(seq.seq_id, None)
        if seq.decode is not None:
            self.decoder.end_decode(seq, reason, error)
        exc = error or SequenceClosed(f"sequence {seq.seq_id} was closed")
        for w in seq.prefill_waiters:
            self.post(w.on_error, exc)
        seq.prefill_waiters = []
        if seq.score is not None:
            self.post(seq.score.on_error, exc)
            seq.score = None
        self.scheduler.remove(seq)
        self.bm.free(seq)
        seq.status = SeqStatus.CLOSED

    def _fail(self, seq: Sequence, exc: BaseException) -> None:
        self.close(seq, reason="error", error=exc)

    def fail_all(self, exc: BaseException) -> None:
        for seq in [*self.seqs.values(), *self.scheduler.running, *self.scheduler.waiting]:
            if seq.status != SeqStatus.CLOSED:
                self.close(seq, reason="abort", error=exc)

    def stats(self) -> LLMStats:
        bs = self.bm.stats()
        c = self.counters
        busy = c.busy_s or float("inf")
        return LLMStats(
            running=len(self.scheduler.running),
            waiting=len(self.scheduler.waiting),
            idle=len(self.scheduler.idle),
            free_blocks=bs.free,
            cached_blocks=bs.cached,
            used_blocks=bs.used,
            num_blocks=bs.num_blocks,
            prefix_cache_hit_rate=bs.hit_rate,
            preemptions=self.scheduler.num_preemptions,
            steps=c.steps,
            tokens_computed=c.computed,
            generated_tokens=c.generated,
            tokens_per_s=c.computed / busy,
            generated_tokens_per_s=c.generated / busy,
        )
