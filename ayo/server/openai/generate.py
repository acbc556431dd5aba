"""Running OpenAI-style generations through the runtime.

Each prompt is one query of the ``@completion`` workflow (``ayo.apps.completion``: one Generate
primitive, a prefill and a decode on a sequence of its own), run by the App as any app query is:
it holds one of the App's query slots (waiting for one when all are taken, 429 only when the
line is full), its LLM work is ordered by the runtime's policy in the engine's steps, and it
shows in ``/metrics`` and traces. Leaving a generation early (client gone, error) cancels the
query, which closes its sequence: its KV blocks are freed within an engine step.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

from ayo.engines.llm.sampling import SamplingParams
from ayo.server.errors import ApiError

OFFLOAD_CHARS = 64 * 1024  # a prompt longer than this is tokenized off the event loop


@dataclass(frozen=True)
class Piece:
    """Text produced for prompt ``index``; ``finish_reason`` and ``completion_tokens`` are set
    on the last piece of that prompt. ``tokens``: the generated tokens behind this text, as
    (token id, its ``TokenLogprobs``), when the request asked for log-probabilities."""

    index: int
    text: str
    finish_reason: str | None = None
    completion_tokens: int = 0
    tokens: tuple[tuple[int, Any], ...] = ()
    cached_tokens: int = 0  # on the last piece: prompt tokens the prefix cache served


def engine_error(exc: BaseException) -> ApiError:
    """The HTTP error for a failed generation (the runtime's and the engine's errors)."""
    from ayo.server.mapping import to_api_error

    return to_api_error(exc)


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


def fit_sampling(
    llm: Any,
    prompt_lengths: Sequence[int],
    params: SamplingParams,
    max_tokens: int | None,
    limit: int,
) -> SamplingParams:
    """``params`` with its ``max_tokens`` after checking lengths against the context window:
    422 when a prompt leaves no room, 400 when ``max_tokens`` exceeds the window or ``limit``.
    A prompt plus ``max_tokens`` beyond the window is served, ending with ``length`` at the
    window. ``max_tokens`` None: what is left of the window, at most ``limit``."""
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
    asked = max_tokens or min(limit, window - longest)
    if asked > most:
        raise ApiError(
            400,
            "invalid_request_error",
            f"field 'max_tokens' is {asked}; at most {most} (context window {window}, "
            f"server limit {limit})",
        )
    return dataclasses.replace(params, max_tokens=asked)


async def generate_one(
    app: Any, index: int, ids: list[int], params: SamplingParams, deadline: float
) -> AsyncIterator[Piece]:
    """Pieces of one prompt's generation (one ``@completion`` query); leaving early cancels
    the query."""
    pieces: asyncio.Queue[Any] = asyncio.Queue()
    query = asyncio.ensure_future(
        app.complete(ids, params, deadline=deadline, on_piece=pieces.put_nowait)
    )
    query.add_done_callback(lambda _: pieces.put_nowait(None))
    tokens: list[tuple[int, Any]] = []  # tokens whose text is not out yet
    try:
        while (piece := await pieces.get()) is not None:
            if piece.logprobs is not None:
                tokens.append((piece.token_id, piece.logprobs))
            if piece.text:
                yield Piece(index, piece.text, tokens=tuple(tokens))
                tokens.clear()
        end = query.result()
        cached = getattr(end, "num_cached_tokens", 0) or 0
        yield Piece(index, "", end.finish_reason, len(end.token_ids), tuple(tokens), cached)
    finally:
        if not query.done():
            query.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await query


async def generate(
    app: Any, prompts: list[list[int]], params: SamplingParams, deadline: float
) -> AsyncIterator[Piece]:
    """Pieces of every prompt's generation, interleaved as they are produced (all prompts run
    at once). Errors become ``ApiError``; leaving early cancels every generation."""
    if len(prompts) == 1:
        try:
            async for piece in generate_one(app, 0, prompts[0], params, deadline):
                yield piece
        except ApiError:
            raise
        except Exception as exc:
            raise engine_error(exc) from exc
        return
    queue: asyncio.Queue[Piece | BaseException | None] = asyncio.Queue()

    async def pump(i: int, ids: list[int]) -> None:
        try:
            async for piece in generate_one(app, i, ids, params, deadline):
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
