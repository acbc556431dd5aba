"""How tokens are chosen: the one sampling type, from an HTTP request or a plan's Decode to
the engine's sampler (torch-free, so plans and the server import it without loading torch)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ..errors import InvalidRequest

GRAMMAR_KINDS = ("json_object", "json_schema", "regex", "choice", "structural_tag")
MAX_GRAMMAR_CHARS = 64 * 1024


@dataclass(frozen=True)
class Grammar:
    """What a constrained decode may write (``engines/llm/grammar.py`` enforces it):

    - ``json_object``: any JSON object;
    - ``json_schema``: JSON valid against ``spec``, a JSON Schema (as canonical JSON text);
    - ``regex``: text matching the regular expression ``spec`` in full;
    - ``choice``: exactly one of the strings in ``spec`` (a JSON list);
    - ``structural_tag``: xgrammar's structural tag ``spec`` (JSON): free text and tagged
      regions (``<tool_call>...</tool_call>``) whose content follows a JSON schema; tool calls
      (``ayo.engines.llm.tools``) are written under one.

    Build one with the class methods; equal grammars compile once (the engine caches them).
    """

    kind: str
    spec: str = ""

    def __post_init__(self) -> None:
        if self.kind not in GRAMMAR_KINDS:
            raise InvalidRequest(f"grammar kind must be one of {GRAMMAR_KINDS}, got {self.kind!r}")
        if not isinstance(self.spec, str) or len(self.spec) > MAX_GRAMMAR_CHARS:
            raise InvalidRequest(
                f"a grammar's spec is text of at most {MAX_GRAMMAR_CHARS} characters"
            )

    @classmethod
    def json_object(cls) -> Grammar:
        return cls("json_object")

    @classmethod
    def json_schema(cls, schema: dict[str, Any] | bool | str) -> Grammar:
        """A schema as an object (or ``true``), or its JSON text."""
        if isinstance(schema, str):
            try:
                schema = json.loads(schema)
            except ValueError as exc:
                raise InvalidRequest(f"the JSON schema is not JSON: {exc}") from None
        if not isinstance(schema, (dict, bool)):
            raise InvalidRequest(
                f"a JSON schema is an object (or a boolean), got {type(schema).__name__}"
            )
        return cls("json_schema", json.dumps(schema, sort_keys=True, separators=(",", ":")))

    @classmethod
    def regex(cls, pattern: str) -> Grammar:
        if not isinstance(pattern, str) or not pattern:
            raise InvalidRequest("a regex grammar needs a non-empty pattern")
        return cls("regex", pattern)

    @classmethod
    def choice(cls, options: list[str] | tuple[str, ...]) -> Grammar:
        if (
            not isinstance(options, (list, tuple))
            or not options
            or any(not isinstance(o, str) or not o for o in options)
        ):
            raise InvalidRequest("a choice grammar needs a list of non-empty strings")
        return cls("choice", json.dumps(list(options)))

    @classmethod
    def structural_tag(cls, tag: dict[str, Any]) -> Grammar:
        """An xgrammar structural tag (``{"type": "structural_tag", "format": {...}}``)."""
        if not isinstance(tag, dict) or tag.get("type") != "structural_tag":
            raise InvalidRequest('a structural tag is an object of "type": "structural_tag"')
        return cls("structural_tag", json.dumps(tag, sort_keys=True, separators=(",", ":")))

    @property
    def schema(self) -> Any:
        """The JSON schema (``json_schema``), the choices (``choice``); None otherwise."""
        return json.loads(self.spec) if self.kind in ("json_schema", "choice") else None


@dataclass(frozen=True)
class SamplingParams:
    """How to decode: ``temperature`` 0 is greedy; ``top_k`` 0 and ``top_p`` 1 keep everything;
    ``seed`` makes a sampled decode reproducible; generation stops at ``max_tokens``, at the
    model's end-of-sequence token (unless ``ignore_eos``) or when the text contains a ``stop``
    string (the string itself is left out of the text).

    Penalties, applied to the logits before sampling (greedy included): ``repetition_penalty``
    as transformers' ``RepetitionPenaltyLogitsProcessor`` (every token of the prompt and the
    output so far: a positive logit divided by it, a negative one multiplied; 1 is off);
    ``frequency_penalty`` and ``presence_penalty`` as OpenAI's API (over the output tokens:
    ``logit -= frequency * count + presence * (count > 0)``; 0 is off).

    ``logprobs``: each piece carries its token's log-probability and the ``logprobs`` likeliest
    alternatives (0 to 20; None: none).

    ``grammar``: constrained decoding (structured output): every token is one the grammar
    allows next, and the decode stops when the grammar is complete (see :class:`Grammar`).
    """

    max_tokens: int = 64
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = field(default_factory=tuple)
    ignore_eos: bool = False
    repetition_penalty: float = 1.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    grammar: Grammar | None = None
    logprobs: int | None = None

    def __post_init__(self) -> None:
        if isinstance(self.stop, str):
            object.__setattr__(self, "stop", (self.stop,))
        else:
            object.__setattr__(self, "stop", tuple(self.stop))
        # Written so that NaN fails every check (it compares false with everything).
        if not _is_int(self.max_tokens) or not self.max_tokens >= 1:
            raise InvalidRequest(f"max_tokens must be an integer >= 1, got {self.max_tokens}")
        if not 0 <= self.temperature <= MAX_TEMPERATURE:
            raise InvalidRequest(
                f"temperature must be in [0, {MAX_TEMPERATURE}] (0 = greedy), got {self.temperature}"
            )
        if not _is_int(self.top_k) or not self.top_k >= 0:
            raise InvalidRequest(f"top_k must be an integer >= 0 (0 keeps all), got {self.top_k}")
        if not 0 < self.top_p <= 1:
            raise InvalidRequest(f"top_p must be in (0, 1], got {self.top_p}")
        # A top_p below float32's range would round to 0 in the sampler; any tiny top_p keeps
        # exactly the likeliest token, as this one does.
        object.__setattr__(self, "top_p", max(float(self.top_p), MIN_TOP_P))
        if self.seed is not None and (not _is_int(self.seed) or not 0 <= self.seed < 2**63):
            raise InvalidRequest(f"seed must be an integer in [0, 2**63), got {self.seed}")
        if not 0 < self.repetition_penalty <= MAX_PENALTY:
            raise InvalidRequest(
                f"repetition_penalty must be in (0, {MAX_PENALTY}] (1 = off), got "
                f"{self.repetition_penalty}"
            )
        for name in ("frequency_penalty", "presence_penalty"):
            if not -2 <= getattr(self, name) <= 2:
                raise InvalidRequest(
                    f"{name} must be in [-2, 2] (0 = off), got {getattr(self, name)}"
                )
        if any(not isinstance(s, str) or not s for s in self.stop):
            raise InvalidRequest("stop strings must be non-empty strings")
        if self.logprobs is not None and (
            not _is_int(self.logprobs) or not 0 <= self.logprobs <= MAX_LOGPROBS
        ):
            raise InvalidRequest(
                f"logprobs must be an integer in [0, {MAX_LOGPROBS}] or None, got {self.logprobs}"
            )
        if self.grammar is not None and not isinstance(self.grammar, Grammar):
            raise InvalidRequest(f"grammar must be a Grammar, got {type(self.grammar).__name__}")

    @property
    def penalized(self) -> bool:
        return (
            self.repetition_penalty != 1.0
            or self.frequency_penalty != 0.0
            or self.presence_penalty != 0.0
        )


MAX_TEMPERATURE = 2.0
MIN_TOP_P = 1e-9
MAX_PENALTY = 2.0
MAX_LOGPROBS = 20  # OpenAI's top_logprobs limit


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
