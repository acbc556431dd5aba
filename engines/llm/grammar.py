"""Structured output: a :class:`~.sampling.Grammar` compiled against the model's vocabulary, one
matcher per constrained decode, and the batch's token bitmask.

The grammar library is xgrammar, chosen by ``python -m benchmarks.grammar`` (docs/engines.md):
on this CPU its matchers fill their masks and accept a token in ~16 us at batch 1 and ~80 us for
16 sequences, against ~40 and ~450 us for llguidance; both are far below a decode step (46 and
115 ms).
The mask is applied by our own kernel (``ayo.kernels.apply_token_bitmask``): one call for the
batch's constrained rows, a Triton kernel on a GPU.

Compilation takes milliseconds (more for large schemas), so it never runs on the engine's worker
thread nor on the event loop: ``GrammarCompiler.submit`` compiles on a thread of its own and
caches the result by grammar (an LRU of ``max_entries``); a decode waits for its grammar without
holding up the other sequences' steps.
"""

from __future__ import annotations

import concurrent.futures
import json
import logging
import re
import threading
from collections import OrderedDict
from typing import Any

import numpy as np
import torch

from .errors import InvalidRequest
from .sampling import Grammar

log = logging.getLogger(__name__)
_LOCATION = re.compile(r"\[[\d:]+\] \S+:\d+: ")  # xgrammar's "[16:27:01] file.cc:4944: "


class GrammarCompiler:
    """Compiles grammars for one vocabulary (the model's ``vocab_size`` logits; the tokenizer's
    tokens; ``stop_ids`` end a constrained decode as they end a free one)."""

    def __init__(
        self, hf_tokenizer: Any, vocab_size: int, stop_ids: frozenset[int], max_entries: int = 256
    ) -> None:
        self.hf_tokenizer = hf_tokenizer
        self.vocab_size = vocab_size
        self.stop_ids = sorted(stop_ids)
        self.max_entries = max_entries
        self._compiler: Any = None  # built on first use (reading the vocabulary takes ~0.3 s)
        self._json_tokens: torch.Tensor | None = None  # the tokens JSON text may use (a mask)
        self._cache: OrderedDict[Grammar, Any] = OrderedDict()
        self._pending: dict[Grammar, concurrent.futures.Future] = {}
        self._lock = threading.Lock()
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="ayo-grammar")

    def submit(self, grammar: Grammar) -> concurrent.futures.Future:
        """A future of the compiled grammar: already done when cached; one compile per grammar
        however many decodes ask for it meanwhile. Its exception is ``InvalidRequest`` naming
        what the library refused."""
        with self._lock:
            if grammar in self._cache:
                self._cache.move_to_end(grammar)
                fut: concurrent.futures.Future = concurrent.futures.Future()
                fut.set_result(self._cache[grammar])
                return fut
            fut = self._pending.get(grammar)
            if fut is None:
                fut = self._pending[grammar] = self._pool.submit(self._compile, grammar)
            return fut

    def compile(self, grammar: Grammar) -> Any:
        """The compiled grammar, compiled in the caller's thread when not cached."""
        return self.submit(grammar).result()

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _compile(self, grammar: Grammar) -> Any:
        """Compile on the pool's thread: the library's refusal (RuntimeError, ValueError) is the
        caller's ``InvalidRequest``; anything else is ours and reaches the decode as it is."""
        try:
            compiled = self._build(grammar)
        except InvalidRequest:
            raise
        except (RuntimeError, ValueError) as exc:  # the library's message names the problem
            why = _LOCATION.sub("", str(exc)).strip()
            raise InvalidRequest(f"the {grammar.kind} grammar does not compile: {why}") from None
        else:
            with self._lock:  # cached before it stops being pending: no second compile
                self._cache[grammar] = compiled
                while len(self._cache) > self.max_entries:
                    self._cache.popitem(last=False)
            return compiled
        finally:
            with self._lock:
                self._pending.pop(grammar, None)

    def _build(self, grammar: Grammar) -> Any:
        import xgrammar as xgr

        if self._compiler is None:
            if self.hf_tokenizer is None:
                raise InvalidRequest("this model has no tokenizer: constrained decoding needs one")
            info = xgr.TokenizerInfo.from_huggingface(
                self.hf_tokenizer, vocab_size=self.vocab_size, stop_token_ids=self.stop_ids
            )
            self._json_tokens = _without_control_bytes(info.decoded_vocab, self.vocab_size)
            self._compiler = xgr.GrammarCompiler(info, max_threads=1, cache_enabled=False)
        c = self._compiler
        if grammar.kind == "json_object":
            return Compiled(
                c.compile_json_schema('{"type": "object"}', any_whitespace=False), self._json_tokens
            )
        if grammar.kind == "json_schema":
            compiled = c.compile_json_schema(grammar.spec, any_whitespace=False, strict_mode=True)
            return Compiled(compiled, self._json_tokens)
        if grammar.kind == "regex":
            return Compiled(c.compile_regex(grammar.spec))
        if grammar.kind == "structural_tag":  # free text around the tags: no JSON-only mask
            return Compiled(c.compile_structural_tag(grammar.spec), ends_by_stop_token=True)
        # choice: an EBNF alternation of string literals (JSON's escapes are the EBNF's)
        options = " | ".join(json.dumps(o) for o in grammar.schema)
        return Compiled(c.compile_grammar(f"root ::= {options}"))


class Compiled:
    """A compiled grammar and, for JSON, the tokens JSON text may hold at all: xgrammar
    0.2.9's rule for a string with ``maxLength`` takes raw control characters (U+0000-U+001F),
    which JSON forbids unescaped (the random-schema test found ``".\\x19"``); compact JSON
    needs none of them anywhere, so tokens holding one are masked with the grammar's mask.

    ``ends_by_stop_token``: the grammar may end at many points and go on at each (free text
    around tool calls), so the decode ends when the model writes its stop token where the
    grammar may end; otherwise it ends the moment the grammar is complete."""

    def __init__(
        self, grammar: Any, allowed: torch.Tensor | None = None, ends_by_stop_token: bool = False
    ) -> None:
        self.grammar = grammar
        self.allowed = allowed
        self.ends_by_stop_token = ends_by_stop_token


def _without_control_bytes(vocab: list[bytes], vocab_size: int) -> torch.Tensor:
    """A bitmask row (the layout of ``allocate_bitmask``) of the tokens whose bytes hold no
    control character (< 0x20)."""
    ok = np.zeros(((vocab_size + 31) // 32) * 32, dtype=bool)
    for i, piece in enumerate(vocab[:vocab_size]):
        ok[i] = min(piece, default=0x20) >= 0x20
    return torch.from_numpy(np.packbits(ok, bitorder="little").view("<i4").astype(np.int32))


class GrammarMatcher:
    """Where one constrained decode stands in its grammar: fills its row of the batch's
    bitmask, advances with each accepted token. Owned by the worker thread (``DecodeState``);
    a preempted sequence keeps it (recompute redoes KV, not tokens)."""

    def __init__(self, compiled: Compiled) -> None:
        import xgrammar as xgr

        self._m = xgr.GrammarMatcher(
            compiled.grammar, terminate_without_stop_token=not compiled.ends_by_stop_token
        )
        self._allowed = compiled.allowed

    def fill(self, bitmask: torch.Tensor, row: int) -> None:
        self._m.fill_next_token_bitmask(bitmask, row)
        if self._allowed is not None:
            bitmask[row] &= self._allowed

    def accept(self, token: int) -> None:
        if not self._m.accept_token(token):
            raise InvalidRequest(f"token {token} does not continue the grammar")

    @property
    def done(self) -> bool:
        """The grammar is complete and nothing may follow: the decode ends (``stop``)."""
        return self._m.is_terminated()


def allocate_bitmask(rows: int, vocab_size: int) -> torch.Tensor:
    """An int32 ``[rows, ceil(vocab / 32)]`` bitmask, every token allowed."""
    return torch.full((rows, (vocab_size + 31) // 32), -1, dtype=torch.int32)
