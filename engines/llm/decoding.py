"""The decode and score half of the engine core: sampling, stop rules, streaming, scoring.

:class:`Decoder` is owned by ``EngineCore``, which passes it what it works with: the tokenizer
and the model's limits, the block manager and the scheduler, the counters, and the core's
``post`` (results to the event loop), ``fail`` (one sequence fails) and ``close`` (a sequence
ends) operations.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from collections.abc import Sequence as Sequence_
from typing import Any

import torch

from ayo import kernels

from ..isolation import run_isolated
from .block_manager import BlockManager
from .commands import Decode, Score
from .detokenizer import IncrementalDetokenizer
from .errors import InvalidRequest
from .grammar import GrammarMatcher, allocate_bitmask
from .outputs import CandidateScore, DecodeEnd, DecodePiece, EngineCounters, TokenLogprobs
from .runner import sample_tokens
from .sampling import SamplingParams
from .scheduler import Scheduler
from .sequence import DecodeState, ScoreState, SeqStatus, Sequence
from .stop import find_stop, held_back


def apply_penalties(
    logits: torch.Tensor, params: SamplingParams, token_ids: list[int], output_ids: list[int]
) -> None:
    """Penalize ``logits [V]`` in place for the tokens seen so far (see ``SamplingParams``):
    ``token_ids`` the whole sequence (prompt and output), ``output_ids`` the output alone."""
    if params.repetition_penalty != 1.0:
        seen = torch.tensor(token_ids, dtype=torch.long).unique()
        score = logits[seen]
        p = params.repetition_penalty
        logits[seen] = torch.where(score < 0, score * p, score / p)
    if (params.frequency_penalty or params.presence_penalty) and output_ids:
        ids, counts = torch.tensor(output_ids, dtype=torch.long).unique(return_counts=True)
        logits[ids] -= params.frequency_penalty * counts.to(logits.dtype) + params.presence_penalty


Post = Callable[..., None]  # EngineCore.post: fn(*args) later, on the event loop


class Decoder:
    """Starts decodes and scores on the engine core's sequences, samples the next token of each
    decoding sequence a step computed, applies the stop rules and streams pieces; scores
    candidates on forks of a sequence.

    Args:
        tokenizer: the Hugging Face tokenizer (incremental detokenization).
        eos_ids: the model's end-of-sequence tokens.
        max_model_len: the context window.
        bm: the core's block manager (forks for scoring, freeing).
        scheduler: the core's scheduler (decoding sequences are submitted to it).
        counters: the core's counters (``generated``).
        post: the core's ``post`` (callbacks to the event loop).
        fail: the core's ``fail_one(seq, exc)`` (one sequence fails, the step goes on).
        close: the core's ``close(seq, reason)`` (a sequence ends).
        check_tokens: the core's ``check_tokens(ids, have)`` (range and window).
    """

    def __init__(
        self,
        *,
        tokenizer: Any,
        eos_ids: frozenset[int],
        max_model_len: int,
        bm: BlockManager,
        scheduler: Scheduler,
        counters: EngineCounters,
        post: Post,
        fail: Callable[[Sequence, BaseException], None],
        close: Callable[..., None],
        check_tokens: Callable[[list[int], int], None],
    ) -> None:
        self.tokenizer = tokenizer
        self.eos_ids = eos_ids
        self.max_model_len = max_model_len
        self.bm = bm
        self.scheduler = scheduler
        self.counters = counters
        self.post = post
        self.fail = fail
        self.close = close
        self.check_tokens = check_tokens
        self.next_child_id = -1  # score forks take negative ids

    def start_decode(self, seq: Sequence, cmd: Decode) -> None:
        if seq.decode is not None:
            raise InvalidRequest(f"sequence {seq.seq_id} is already decoding")
        if seq.num_tokens == 0:
            raise InvalidRequest("prefill the sequence before decoding (it has no tokens)")
        if seq.num_tokens >= self.max_model_len:
            raise InvalidRequest(f"sequence {seq.seq_id} already fills the context window")
        generator = None
        if cmd.params.temperature > 0:
            generator = torch.Generator()
            if cmd.params.seed is None:
                generator.seed()
            else:
                generator.manual_seed(cmd.params.seed)
        seq.decode = DecodeState(
            params=cmd.params,
            emit=cmd.emit,
            detok=IncrementalDetokenizer(self.tokenizer, seq.token_ids),
            generator=generator,
            close_on_finish=cmd.close_on_finish,
            start_len=seq.num_tokens,
            started=cmd.submitted,
            grammar_pending=cmd.grammar,
        )
        if cmd.grammar is None or cmd.grammar.done():
            self.resume(seq)
        # else: GrammarReady resumes it once the grammar has compiled

    def resume(self, seq: Sequence) -> None:
        """Begin a decode whose grammar (if any) is compiled: its first token comes from the
        prefill's logits, or the sequence is scheduled."""
        st = seq.decode
        if st.grammar_pending is not None:
            fut, st.grammar_pending = st.grammar_pending, None
            try:
                st.grammar = GrammarMatcher(fut.result())
            except InvalidRequest as exc:  # the caller's grammar: its decode ends with why
                self.close(seq, reason="error", error=exc)
                return
            except Exception as exc:
                self.fail(seq, exc)
                return
        if seq.num_uncomputed == 0 and seq.last_logits is not None:
            self.sample([(seq, seq.last_logits)])  # the prefill already gave the next logits
        else:
            if seq.num_uncomputed == 0:  # KV kept but logits not: recompute from the cache
                self.bm.free(seq)
            self.scheduler.submit(seq)

    def sample(self, rows: list[tuple[Sequence, torch.Tensor]]) -> None:
        """One token for each sequence. When the batch's sampling raises, halves are sampled
        again (``run_isolated``), so only the sequence whose parameters or state caused it
        fails."""
        tokens = run_isolated(rows, self._sample_tokens, "sampling")
        now = time.perf_counter()
        for (seq, _), drawn in zip(rows, tokens):
            if isinstance(drawn, Exception):
                self.fail(seq, drawn)
                continue
            self.counters.generated += 1
            try:
                self._accept(seq, *drawn, now)
            except Exception as exc:
                self.fail(seq, exc)

    def _sample_tokens(
        self, rows: Sequence_[tuple[Sequence, torch.Tensor]]
    ) -> list[tuple[int, TokenLogprobs | None]]:
        logits = torch.stack([r for _, r in rows])  # a copy: the penalties do not touch rows
        asked = [i for i, (seq, _) in enumerate(rows) if seq.decode.params.logprobs is not None]
        # the model's own distribution, before penalties, grammar and temperature
        logp = torch.log_softmax(logits[asked].float(), dim=-1) if asked else None
        constrained = []
        for i, (seq, _) in enumerate(rows):
            if seq.decode.params.penalized:
                apply_penalties(logits[i], seq.decode.params, seq.token_ids, seq.decode.output_ids)
            if seq.decode.grammar is not None:
                constrained.append(i)
        if constrained:  # every constrained row's grammar mask, applied in one call
            bitmask = allocate_bitmask(len(constrained), logits.shape[1])
            for k, i in enumerate(constrained):
                rows[i][0].decode.grammar.fill(bitmask, k)
            kernels.apply_token_bitmask(logits, bitmask, torch.tensor(constrained))
        tokens = sample_tokens(logits, [seq.decode for seq, _ in rows])
        out: list[tuple[int, TokenLogprobs | None]] = [(t, None) for t in tokens]
        for k, i in enumerate(asked):
            top = rows[i][0].decode.params.logprobs
            values, ids = logp[k].topk(top) if top else (logp[k][:0], logp[k][:0].long())
            alternatives = tuple(zip(ids.tolist(), values.tolist()))
            out[i] = (tokens[i], TokenLogprobs(float(logp[k, tokens[i]]), alternatives))
        return out

    def _accept(self, seq: Sequence, tok: int, logprobs: TokenLogprobs | None, now: float) -> None:
        st = seq.decode
        params = st.params
        if st.grammar is not None:
            st.grammar.accept(tok)
        seq.append([tok])
        st.output_ids.append(tok)
        st.token_times.append(now - st.started)
        emitted = len(st.text) - held_back(st.text, params.stop) if params.stop else len(st.text)
        reason = None
        if tok in self.eos_ids and (not params.ignore_eos or st.grammar is not None):
            reason = "stop"
        else:
            st.text += st.detok.add(tok)
            if st.grammar is not None and st.grammar.done:
                reason = "stop"  # the grammar is complete: nothing may follow
        stop_hit = False
        if params.stop:
            cut = find_stop(st.text, params.stop, emitted)
            if cut != -1:
                st.text, reason, stop_hit = st.text[:cut], "stop", True
        if reason is None and (
            len(st.output_ids) >= params.max_tokens or seq.num_tokens >= self.max_model_len
        ):
            reason = "length"
        if reason is not None and not stop_hit:
            st.text += st.detok.flush()
        end = len(st.text)
        if reason is None and params.stop:
            end -= held_back(st.text, params.stop)
        piece = DecodePiece(tok, st.text[emitted:end], len(st.output_ids) - 1, logprobs)
        self.post(st.emit, piece)
        if reason is not None:
            self.end_decode(seq, reason)
        elif seq.status == SeqStatus.IDLE:
            self.scheduler.submit(seq)

    def end_decode(self, seq: Sequence, reason: str, error: BaseException | None = None) -> None:
        """The decode's end goes to its stream; the sequence closes (``close_on_finish``) or
        keeps its KV, idle."""
        st, seq.decode = seq.decode, None
        first = st.token_times[0] if st.token_times else 0.0
        end = DecodeEnd(
            finish_reason=reason,
            token_ids=tuple(st.output_ids),
            text=st.text,
            time_to_first_token_s=first,
            token_times_s=tuple(st.token_times),
            num_prompt_tokens=st.start_len,
            num_cached_tokens=seq.num_cached_tokens,
            error=error,
        )
        self.post(st.emit, end)
        if error is not None or seq.status == SeqStatus.CLOSED:
            return
        if st.close_on_finish:
            self.close(seq, reason=reason)
        elif seq.status == SeqStatus.RUNNING and not seq.has_work:
            self.scheduler.retire(seq)

    # ---- score ----------------------------------------------------------------------------

    def start_score(self, parent: Sequence, cmd: Score) -> None:
        """Fork the sequence once per candidate; each fork computes its candidate's tokens and
        keeps the log-probability of each (``score_rows``)."""
        if parent.num_tokens == 0:
            raise InvalidRequest("score needs a prefilled context (the sequence has no tokens)")
        if not cmd.candidates or any(not c for c in cmd.candidates):
            raise InvalidRequest("score needs one or more non-empty candidates")
        for cand in cmd.candidates:
            self.check_tokens(cand, parent.num_tokens)
        results: list[CandidateScore | None] = [None] * len(cmd.candidates)
        failed = []

        def done(i: int, cand: list[int], logprobs: list[float]) -> None:
            results[i] = CandidateScore(cand, logprobs)
            if all(r is not None for r in results):
                self.post(cmd.on_done, results)

        def error(exc: BaseException) -> None:
            if not failed:
                failed.append(exc)
                self.post(cmd.on_error, exc)

        ctx = parent.num_tokens
        for i, cand in enumerate(cmd.candidates):
            child = Sequence(self.next_child_id, parent.token_ids + cand)
            child.info = parent.info
            self.next_child_id -= 1
            child.score = ScoreState(ctx, lambda lp, i=i, cand=cand: done(i, cand, lp), error)
            self.bm.fork(parent, child, ctx - 1)
            self.scheduler.submit(child)

    def score_rows(self, seq: Sequence, start: int, end: int, rows: torch.Tensor) -> None:
        """A scoring fork's logits of positions ``[start, end)``; once all are in, the
        candidate's log-probabilities go to its caller and the fork is dropped."""
        positions = seq.logit_positions(start, end)
        if len(rows):
            logp = torch.log_softmax(rows, dim=-1)
            targets = torch.tensor([seq.token_ids[p + 1] for p in positions])
            values = logp.gather(1, targets[:, None])[:, 0].tolist()
            seq.score.logprobs.update(zip(positions, values))
        if seq.num_computed_tokens == seq.num_tokens:
            st, seq.score = seq.score, None
            st.on_done([st.logprobs[p] for p in range(st.context_len - 1, seq.num_tokens - 1)])
            self.scheduler.remove(seq)
            self.bm.free(seq)
            seq.status = SeqStatus.CLOSED
