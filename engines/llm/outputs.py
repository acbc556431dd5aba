"""What the engine hands back: handles, decode pieces, results, stats."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class SequenceHandle:
    """A live sequence opened with ``LLMEngine.open``; pass it to prefill/decode/score/close."""

    seq_id: int


@dataclass(frozen=True)
class TokenLogprobs:
    """A generated token's log-probability and, most likely first, the ``top`` alternatives
    (token id, log-probability) asked for (``SamplingParams.logprobs``): the model's own
    distribution, before penalties, grammar and temperature (as vLLM reports by default)."""

    logprob: float
    top: tuple[tuple[int, float], ...] = ()


@dataclass(frozen=True)
class DecodePiece:
    """One generated token and the text it completes (may be empty while a multi-byte
    character or a stop string is still undecided); ``logprobs`` when the decode asked."""

    token_id: int
    text: str
    index: int  # 0 for the first generated token
    logprobs: TokenLogprobs | None = None


@dataclass(frozen=True)
class DecodeEnd:
    """The end of a decode stream: why it finished, what it produced and when."""

    finish_reason: str  # "stop" (end-of-sequence token or stop string), "length", "abort"
    token_ids: tuple[int, ...]
    text: str
    time_to_first_token_s: float
    token_times_s: tuple[float, ...]  # seconds from the decode's start to each token
    num_prompt_tokens: int
    num_cached_tokens: int
    error: BaseException | None = None


@dataclass(frozen=True)
class GenerationResult:
    """The result of one prompt of ``LLMEngine.generate``."""

    text: str
    token_ids: list[int]
    finish_reason: str
    num_prompt_tokens: int
    num_cached_tokens: int  # prompt tokens served from the prefix cache
    time_to_first_token_s: float
    time_per_output_token_s: float  # mean gap between tokens after the first (0 if one token)
    token_times_s: list[float] = field(default_factory=list)

    @classmethod
    def from_end(cls, end: DecodeEnd) -> GenerationResult:
        times = list(end.token_times_s)
        tpot = (times[-1] - times[0]) / (len(times) - 1) if len(times) > 1 else 0.0
        return cls(
            text=end.text,
            token_ids=list(end.token_ids),
            finish_reason=end.finish_reason,
            num_prompt_tokens=end.num_prompt_tokens,
            num_cached_tokens=end.num_cached_tokens,
            time_to_first_token_s=end.time_to_first_token_s,
            time_per_output_token_s=tpot,
            token_times_s=times,
        )


@dataclass(frozen=True)
class CandidateScore:
    """Log-probability of a candidate continuation given the sequence's tokens."""

    token_ids: list[int]
    token_logprobs: list[float]

    @property
    def logprob(self) -> float:
        return sum(self.token_logprobs)

    @property
    def mean_logprob(self) -> float:
        return self.logprob / len(self.token_logprobs)


@dataclass
class EngineCounters:
    """What the engine core counts as it runs (worker thread; ``stats`` reads a snapshot)."""

    steps: int = 0  # model steps run
    computed: int = 0  # tokens the model ran (prompts, recomputes, decode inputs)
    generated: int = 0  # tokens sampled
    busy_s: float = 0.0  # seconds spent in steps


@dataclass(frozen=True)
class LLMStats:
    running: int
    waiting: int
    idle: int  # open sequences holding KV that nobody computes on
    free_blocks: int
    cached_blocks: int
    used_blocks: int
    num_blocks: int
    prefix_cache_hit_rate: float
    preemptions: int
    steps: int
    generated_tokens: int
    tokens_computed: int  # every token the model ran (prompts, recomputes, decode inputs)
    tokens_per_s: float  # tokens computed per second of busy step time
    generated_tokens_per_s: float
