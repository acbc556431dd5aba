"""LLMEngine: the asyncio face of the engine; a worker thread runs the step loop.

The event loop never blocks on the model: requests become commands in a queue guarded by a
``threading.Condition`` (the worker sleeps on it when idle), and results come back through
``loop.call_soon_threadsafe``. Torch releases the GIL inside its kernels, so the loop stays live.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import logging
import os
import threading
from collections import deque
from collections.abc import Callable
from collections.abc import Sequence as Seq
from typing import Any

from ..base import release_openmp_threads, set_worker_threads
from .commands import Abort, Close, Command, Decode, GrammarReady, Open, Prefill, Score
from .config import EngineConfig
from .core import EngineCore, StepRecord
from .errors import (
    ContextLengthExceeded,
    EngineClosed,
    EngineError,
    InvalidRequest,
    UnknownSequence,
)
from .grammar import GrammarCompiler
from .loader import load_model, load_tokenizer, resolve_model_path
from .model import LlamaModel
from .outputs import CandidateScore, GenerationResult, LLMStats, SequenceHandle
from .runner import ModelRunner, kv_block_bytes
from .sampling import SamplingParams
from .stream import DecodeStream
from .tokenizer import ChatTokenizer
from .tools import Tool, chat_messages

log = logging.getLogger(__name__)
Prompt = str | Seq[int]
IDLE_GRACE_S = 0.02  # how long the engine stays idle before it computes background prefills


class LLMEngine:
    """A paged-KV LLM engine with prefill / decode / score primitives on live sequences; the
    plans' LLM interface (``ayo.scheduler.ir.engine_api.LLMProtocol``).

    Args:
        model: the loaded model.
        tokenizer: its Hugging Face tokenizer (``hf_tokenizer``; ``tokenizer`` is the plans'
            :class:`ChatTokenizer` over it), or None for a model driven by token ids only.
        config: limits and modes.
    """

    kind = "llm"

    def __init__(self, model: LlamaModel, tokenizer, config: EngineConfig | None = None):
        config = config or EngineConfig()
        mc = model.config
        if model.dtype != config.torch_dtype:
            raise InvalidRequest(f"model is {model.dtype}, config asks for {config.dtype}")
        if model.weight_format != config.weights:
            raise InvalidRequest(
                f"model weights are {model.weight_format}, config asks for {config.weights}"
            )
        num_blocks = config.num_blocks or max(
            1, int(config.kv_cache_gib * 2**30) // kv_block_bytes(mc, config)
        )
        if config.max_model_len is not None and config.max_model_len > mc.max_position_embeddings:
            raise InvalidRequest(
                f"max_model_len {config.max_model_len} exceeds the model's "
                f"{mc.max_position_embeddings} positions"
            )
        self.config = config
        self.model = model
        self.hf_tokenizer = tokenizer
        self.max_model_len = min(
            config.max_model_len or mc.max_position_embeddings, num_blocks * config.block_size
        )
        self.tokenizer = ChatTokenizer(tokenizer, self.max_model_len)
        self._core = EngineCore(
            ModelRunner(model, config, num_blocks), config, tokenizer, self.max_model_len
        )
        self.grammars = GrammarCompiler(tokenizer, mc.vocab_size, self._core.eos_ids)
        self._commands: deque[Command] = deque()
        self._cond = threading.Condition()
        self._ids = itertools.count()
        self._opened: set[int] = set()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping = False

    @classmethod
    def from_model(
        cls, model: str | os.PathLike = "smollm2-135m-instruct", *, tokenizer=None, **config
    ) -> LLMEngine:
        """Load ``model`` (an embedded name, a Hugging Face folder or a .gguf file) and build an
        engine; keyword arguments are :class:`EngineConfig` fields (or ``config=``). Blocks for
        the load (seconds); nothing is fetched from a hub."""
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        cfg = config.pop("config", None)
        if cfg is None:
            unknown = set(config) - set(EngineConfig.__dataclass_fields__)
            if unknown:
                raise InvalidRequest(
                    f"unknown engine options {sorted(unknown)}; EngineConfig has "
                    f"{sorted(EngineConfig.__dataclass_fields__)}"
                )
            cfg = EngineConfig(**config)
        loaded = load_model(resolve_model_path(model))
        tok = tokenizer if tokenizer is not None else load_tokenizer(loaded)
        model_ = LlamaModel(
            loaded.config,
            loaded.weights,
            cfg.torch_dtype,
            cfg.attention,
            weight_format=cfg.weights,
            blocks=loaded.blocks,
            dense_from=None if cfg.dense_prefill else 0,
        )
        return cls(model_, tok, cfg)

    @classmethod
    async def load(cls, model: str | os.PathLike = "smollm2-135m-instruct", **kwargs) -> LLMEngine:
        """``from_model`` in a thread, so the event loop keeps running during the load."""
        return await asyncio.to_thread(lambda: cls.from_model(model, **kwargs))

    # ---- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the worker thread (idempotent)."""
        if self._stopping:
            raise EngineClosed("the engine was stopped; build a new one")
        if self._thread is None:
            # The thread that built the model and zeroed the KV cache (the event loop's, as a
            # rule) holds an OpenMP team; idle beside the worker's, it throttles the worker's
            # (a batch-1 fp32 step took 50-54 ms instead of 28-34 on 2 cores).
            release_openmp_threads()
            self._loop = asyncio.get_running_loop()
            self._thread = threading.Thread(target=self._work, name="ayo-llm-engine", daemon=True)
            self._thread.start()

    async def stop(self) -> None:
        """Stop the worker; every pending request fails with ``EngineClosed``."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        self.grammars.close()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join)

    async def __aenter__(self) -> LLMEngine:
        await self.start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.stop()

    def _send(self, *cmds: Command) -> None:
        if self._stopping:
            raise EngineClosed("the engine is stopped")
        if self._thread is None:
            raise EngineError("the engine is not started: await engine.start() or use async with")
        with self._cond:
            self._commands.extend(cmds)
            self._cond.notify()

    def _work(self) -> None:
        if self.config.num_threads:
            set_worker_threads(self.config.num_threads)
        core = self._core
        try:
            while True:
                with self._cond:
                    idle = not self._commands and not core.has_work and not self._stopping
                if idle:  # going to sleep: the other engines' OpenMP teams run unthrottled
                    release_openmp_threads()
                with self._cond:
                    while not self._commands and not core.has_work and not self._stopping:
                        self._cond.wait()
                    if core.only_background and not self._commands and not self._stopping:
                        # Work that usually follows at once (a decode after its prefill, the
                        # next call of a chain) must not find a background step in its way.
                        self._cond.wait(IDLE_GRACE_S)
                    if self._stopping:
                        break
                    cmds = list(self._commands)
                    self._commands.clear()
                try:
                    for cmd in cmds:
                        core.handle(cmd)
                    # Background work runs after a whole grace period without commands: one
                    # that came in it (a sequence opened) usually announces foreground work.
                    if core.has_work and not (cmds and core.only_background):
                        core.step()
                except Exception as exc:  # an engine bug: fail what is in flight, keep serving
                    log.exception("engine step failed; failing all in-flight sequences")
                    core.fail_all(exc)
                self._flush()
        except BaseException:
            log.exception("the engine's worker died")
        finally:
            self._stopping = True
            with self._cond:
                cmds = list(self._commands)
                self._commands.clear()
            closed = EngineClosed("the engine stopped")
            for cmd in cmds:
                for name in ("on_error", "emit"):
                    core.post(getattr(cmd, name, None), closed)
            core.fail_all(closed)
            self._flush()

    def _flush(self) -> None:
        items, self._core.outbox = self._core.outbox, []
        if items and self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(_run_callbacks, items)

    # ---- tokens ---------------------------------------------------------------------------

    @property
    def max_token_chars(self) -> int:
        """The most characters one token stands for (``ChatTokenizer.max_token_chars``)."""
        return self.tokenizer.max_token_chars

    def tokenize(self, text: str, *, add_special_tokens: bool = False) -> list[int]:
        """Text -> token ids. A text longer than the context window could hold however it
        tokenizes (over ``max_model_len * max_token_chars`` characters) raises
        ``ContextLengthExceeded`` at once, without spending time proportional to it."""
        return self.tokenizer.tokenize(text, add_special_tokens=add_special_tokens)

    def encode(self, prompt: Prompt, *, add_special_tokens: bool = False) -> list[int]:
        """Text -> token ids (a token-id list passes through, checked)."""
        if isinstance(prompt, str):
            ids = self.tokenize(prompt, add_special_tokens=add_special_tokens)
        else:
            ids = [int(t) for t in prompt]
        if not ids:
            raise InvalidRequest("the prompt is empty")
        self._core.check_tokens(ids, 0)
        return ids

    def apply_chat_template(
        self,
        messages: list[dict],
        add_generation_prompt: bool = True,
        tools: Seq[Tool] = (),
    ) -> list[int]:
        """Render chat ``messages`` with the model's template and tokenize once; the messages'
        contents are data (``ChatTokenizer.encode_parts``): a control token's spelling in a
        message is text, never a turn boundary. ``tools`` and assistant ``tool_calls`` are
        rendered by a template that can, else written as text (``tools.plain_messages``)."""
        if self.hf_tokenizer is None:
            raise InvalidRequest("this model has no tokenizer (and so no chat template)")
        messages, listed = chat_messages(messages, tools, self.tokenizer.renders_tools)
        parts = self.tokenizer.render_chat_parts(messages, add_generation_prompt, listed)
        if parts is None:
            raise InvalidRequest("this model has no chat template: send a plain prompt")
        return self.tokenizer.encode_parts(parts)

    # ---- primitives -----------------------------------------------------------------------

    async def open(self, prompt: Prompt | None = None) -> SequenceHandle:
        """Open an empty sequence (prefilled with ``prompt`` first, if given)."""
        seq = SequenceHandle(next(self._ids))
        self._send(Open(seq.seq_id))
        self._opened.add(seq.seq_id)
        if prompt is not None:
            await self.prefill(seq, prompt)
        return seq

    def _check(self, seq: SequenceHandle) -> int:
        if not isinstance(seq, SequenceHandle) or seq.seq_id not in self._opened:
            raise UnknownSequence(f"{seq!r} was not opened by this engine")
        return seq.seq_id

    def set_step_order(self, order: Callable[[list[Any]], list[Any]] | None) -> None:
        """Let ``order`` decide which sequences enter each step, and in what order they share
        its token budget (see ``engines/llm/scheduler.py``). It gets the sequences with work
        (each with ``.info``: the ``info`` of its latest prefill, decode or score, or None) and
        returns them ranked, first served first; it runs on the worker thread, so it must only
        read. None restores arrival order."""
        self._core.scheduler.order = order

    def record_steps(self, on: bool = True) -> list[StepRecord]:
        """Start (``on``) or stop recording every model step; returns the records so far (a
        live list while recording: read it once the engine is idle). For traces and Gantt
        pictures of which queries shared each step."""
        core = self._core
        log_ = core.step_log if core.step_log is not None else []
        core.step_log = log_ if on else None
        return log_

    async def prefill(
        self, seq: SequenceHandle, tokens_or_text: Prompt, *, info: object = None
    ) -> None:
        """Append tokens (text is tokenized without special tokens) and return once their KV is
        computed. Call it several times to prefill a prompt in parts. ``info``: what the step
        order knows of the caller (:meth:`set_step_order`)."""
        sid = self._check(seq)
        ids = self.encode(tokens_or_text)
        fut = asyncio.get_running_loop().create_future()
        self._send(Prefill(sid, ids, *_resolvers(fut), info=info))
        await fut

    def prefill_when_idle(
        self, seq: SequenceHandle, tokens: Seq[int], *, info: object = None
    ) -> None:
        """Append ``tokens`` without waiting for their KV: they are computed in a step that has
        nothing else to do (after ``IDLE_GRACE_S`` of idleness), or together with the
        sequence's next :meth:`prefill` or :meth:`decode` if that comes first, so on a busy
        engine they add no step. Returns at once; a refused prefill (a token out of range, the
        context window) fails the sequence, and its next call raises that error."""
        sid = self._check(seq)
        ids = [int(t) for t in tokens]
        if ids:
            self._send(Prefill(sid, ids, background=True, info=info))

    def decode(
        self,
        seq: SequenceHandle,
        params: SamplingParams | None = None,
        *,
        info: object = None,
        **kw,
    ) -> DecodeStream:
        """Start generating on ``seq``; returns an async iterator of pieces. ``kw`` builds the
        :class:`SamplingParams` when ``params`` is not given; ``info`` as in :meth:`prefill`."""
        sid = self._check(seq)
        params = params or SamplingParams(**kw)
        cap = self.config.max_new_tokens
        if cap is not None and params.max_tokens > cap:
            params = dataclasses.replace(params, max_tokens=cap)
        stream = DecodeStream(sid, self._abort)
        self._send(Decode(sid, params, stream.emit, info=info, grammar=self._grammar(sid, params)))
        return stream

    def _grammar(self, seq_id: int, params: SamplingParams):
        """The future of ``params.grammar`` compiled (None: a free decode); when it is still
        compiling, the worker hears of its end by a ``GrammarReady`` command."""
        if params.grammar is None:
            return None
        fut = self.grammars.submit(params.grammar)
        if not fut.done():
            fut.add_done_callback(lambda f: self._send_if_running(GrammarReady(seq_id, f)))
        return fut

    def _send_if_running(self, cmd: Command) -> None:
        with contextlib.suppress(EngineError):  # stopped meanwhile: its decodes failed already
            self._send(cmd)

    def _abort(self, seq_id: int, emit) -> None:
        if not self._stopping and self._thread is not None:
            self._send(Abort(seq_id, emit))

    async def score(
        self, seq: SequenceHandle, candidates: Seq[Prompt], *, info: object = None
    ) -> list[float]:
        """The log-probability of each candidate as the continuation of the sequence's tokens
        (the sum over its tokens; :meth:`score_tokens` gives them one by one)."""
        return [c.logprob for c in await self.score_tokens(seq, candidates, info=info)]

    async def score_tokens(
        self, seq: SequenceHandle, candidates: Seq[Prompt], *, info: object = None
    ) -> list[CandidateScore]:
        """Each candidate's tokens and their log-probabilities after the sequence's tokens."""
        sid = self._check(seq)
        cands = [self.encode(c) for c in candidates]
        fut = asyncio.get_running_loop().create_future()
        self._send(Score(sid, cands, *_resolvers(fut), info=info))
        return await fut

    async def close(self, seq: SequenceHandle) -> None:
        """Release the sequence's blocks (full ones stay in the prefix cache). Idempotent."""
        sid = self._check(seq)
        fut = asyncio.get_running_loop().create_future()
        self._send(Close(sid, _resolvers(fut)[0]))
        await fut

    async def generate(
        self, prompts: Prompt | Seq[Prompt], params: SamplingParams | None = None
    ) -> list[GenerationResult]:
        """Generate for each prompt (a string, tokenized with the tokenizer's special tokens,
        or token ids); all prompts run batched. Returns one result per prompt."""
        params = params or SamplingParams()
        if isinstance(prompts, str) or (prompts and isinstance(prompts[0], int)):
            prompts = [prompts]
        encoded = [self.encode(p, add_special_tokens=True) for p in prompts]
        for ids in encoded:
            if len(ids) >= self.max_model_len:
                raise ContextLengthExceeded(
                    f"a prompt of {len(ids)} tokens leaves no room in the context window of "
                    f"{self.max_model_len}; shorten it"
                )
        streams = []
        for ids in encoded:
            sid = next(self._ids)
            stream = DecodeStream(sid, self._abort)
            self._send(
                Open(sid),
                Prefill(sid, ids, None, stream.emit),
                Decode(
                    sid,
                    params,
                    stream.emit,
                    close_on_finish=True,
                    grammar=self._grammar(sid, params),
                ),
            )
            streams.append(stream)
        ends = await asyncio.gather(*(s.collect() for s in streams))
        return [GenerationResult.from_end(end) for end in ends]

    def stats(self) -> LLMStats:
        """Counts of sequences and blocks, prefix-cache hit rate, throughput (thread-safe)."""
        return self._core.stats()

    def reset_prefix_cache(self) -> None:
        """Forget every cached block (benchmarks compare runs from a cold cache). Call it only
        while the engine is idle: blocks in use stay as they are."""
        self._core.bm.hash_to_block.clear()

    def kv_usage(self) -> float:
        """The share of KV blocks in use, 0..1 (replicas are balanced by it)."""
        stats = self._core.bm.stats()
        return stats.used / max(1, stats.num_blocks)

    async def health(self, timeout_s: float = 2.0) -> dict[str, Any]:
        """As ``/health`` lists an engine instance: here, in this process."""
        return {"where": "local", "state": "stopped" if self._stopping else "alive"}


def _resolvers(fut: asyncio.Future):
    def done(value=None) -> None:
        if not fut.done():
            fut.set_result(value)

    def error(exc: BaseException) -> None:
        if not fut.done():
            fut.set_exception(exc)

    return done, error


def _run_callbacks(items) -> None:
    for fn, args in items:
        try:
            fn(*args)
        except Exception:
            log.exception("engine callback failed")
