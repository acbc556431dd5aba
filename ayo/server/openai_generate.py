"""Running OpenAI-style generations on the raw LLM engine.

Each prompt is one engine sequence: ``open`` -> ``prefill`` -> ``decode`` -> ``close``. The engine
batches these with everything else it runs (the apps' LLM primitives included). Leaving a
generation early (client gone, error) aborts the decode and closes the sequence, so its KV
blocks are freed within an engine step.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

from ayo.scheduler.runtime.handlers import OFFLOAD_CHARS
from ayo.server.errors import ApiError
from ayo.server.openai_requests import Sampling


@dataclass(frozen=True)
class Piece:
    """Text produced for prompt ``index``; ``finish_reason`` and ``completion_tokens`` are set
    on the last piece of that prompt."""

    index: int
    text: str
    finish_reason: str | None = None
    completion_tokens: int = 0


def engine_error(exc: BaseException) -> ApiError:
    """The HTTP error for an LLM-engine exception."""
    from ayo.engines.llm import ContextLengthExceeded, EngineClosed, InvalidRequest

    if isinstance(exc, ContextLengthExceeded):
        return ApiError(422, "context_length_exceeded", str(exc))
    if isinstance(exc, InvalidRequest):
        return ApiError(400, "invalid_request_error", str(exc))
    if isinstance(exc, EngineClosed):
        return ApiError(503, "unavailable", "the LLM engine is stopped (server shutting down)")
    return ApiError(500, "server_error", f"the LLM engine failed: {type(exc).__name__}")


async def encode_prompt(llm: Any, prompt: str | list[int]) -> list[int]:
    """Token ids of a completion prompt (text without special tokens: SmolLM2's tokenizer adds
    none anyway); out-of-vocabulary ids -> 400, an empty prompt -> 400."""
    from ayo.engines.llm import ContextLengthExceeded, InvalidRequest

    try:
        if isinstance(prompt, str):
            if len(prompt) > OFFLOAD_CHARS:  # tokenized off the event loop
                return list(await asyncio.to_thread(llm.tokenize, prompt)) or _empty()
            return list(llm.tokenize(prompt)) or _empty()
        return llm.encode(list(prompt))
    except ContextLengthExceeded as exc:
        if isinstance(prompt, str):  # longer than any window: refused before tokenizing
            raise ApiError(422, "context_length_exceeded", f"field 'prompt': {exc}") from None
        return list(prompt)  # checked (422) by fit_sampling with its count
    except InvalidRequest as exc:
        raise ApiError(400, "invalid_request_error", f"field 'prompt': {exc}") from None


def _empty() -> list[int]:
    raise ApiError(400, "invalid_request_error", "field 'prompt' encodes to no tokens")


def fit_sampling(llm: Any, prompt_lengths: Sequence[int], sampling: Sampling, limit: int):
    """The engine's ``SamplingParams`` after checking lengths against the context window:
    422 when a prompt leaves no room, 400 when ``max_tokens`` exceeds the window or ``limit``.
    A prompt plus ``max_tokens`` beyond the window is served, ending with ``length`` at the
    window. ``max_tokens`` None: what is left of the window, at most ``limit``."""
    from ayo.engines.llm import SamplingParams

    window = llm.max_model_len
    longest = max(prompt_lengths)
    if longest >= window:
        raise ApiError(
            422,
            "context_length_exceeded",
            f"this model's context window is {window} tokens and the prompt has {longest}; "
            "shorten the prompt (or the messages)",
        )
    most = min(window, limit)
    max_tokens = sampling.max_tokens or min(limit, window - longest)
    if max_tokens > most:
        raise ApiError(
            400,
            "invalid_request_error",
            f"field 'max_tokens' is {max_tokens}; at most {most} (context window {window}, "
            f"server limit {limit})",
        )
    return SamplingParams(
        max_tokens=max_tokens,
        temperature=sampling.temperature,
        top_k=sampling.top_k,
        top_p=sampling.top_p,
        seed=sampling.seed,
        stop=sampling.stop,
        ignore_eos=sampling.ignore_eos,
        repetition_penalty=sampling.repetition_penalty,
        frequency_penalty=sampling.frequency_penalty,
        presence_penalty=sampling.presence_penalty,
    )


async def generate_one(llm: Any, index: int, ids: list[int], params: Any) -> AsyncIterator[Piece]:
    """Pieces of one prompt's generation; the sequence is closed however this ends."""
    seq = await llm.open()
    try:
        await llm.prefill(seq, ids)
        stream = llm.decode(seq, params)
        try:
            async for piece in stream:
                if piece.text:
                    yield Piece(index, piece.text)
        finally:
            await stream.aclose()  # aborts the decode when we leave early
        end = stream.end
        yield Piece(index, "", end.finish_reason, len(end.token_ids))
    finally:
        await llm.close(seq)


async def generate(llm: Any, prompts: list[list[int]], params: Any) -> AsyncIterator[Piece]:
    """Pieces of every prompt's generation, interleaved as they are produced (all prompts run
    at once). Engine errors become ``ApiError``; leaving early cancels every generation."""
    if len(prompts) == 1:
        try:
            async for piece in generate_one(llm, 0, prompts[0], params):
                yield piece
        except ApiError:
            raise
        except Exception as exc:
            raise engine_error(exc) from exc
        return
    queue: asyncio.Queue[Piece | BaseException | None] = asyncio.Queue()

    async def pump(i: int, ids: list[int]) -> None:
        try:
            async for piece in generate_one(llm, i, ids, params):
                queue.put_nowait(piece)
        except Exception as exc:
            queue.put_nowait(exc)
        finally:
            queue.put_nowait(None)

    tasks = [asyncio.ensure_future(pump(i, ids)) for i, ids in enumerate(prompts)]
    try:
        running = len(tasks)
        while running:
            item = await queue.get()
            if item is None:
                running -= 1
            elif isinstance(item, ApiError):
                raise item
            elif isinstance(item, BaseException):
                raise engine_error(item) from item
            else:
                yield item
    finally:
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
