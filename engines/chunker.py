"""Token-aware chunking with overlap, counted in the embedder's own tokens.

A text is cut into windows of ``chunk_tokens`` tokens that overlap by ``overlap`` tokens; each
chunk is the original text between its first token's start and last token's end (so no
detokenization artefacts). A text that fits in one window is one chunk.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from dataclasses import dataclass

TokenSpans = Callable[[str], list[tuple[int, int]]]


@dataclass(frozen=True)
class ChunkerConfig:
    """``chunk_tokens`` per chunk (>= 8), ``overlap`` tokens shared by neighbours (< half)."""

    chunk_tokens: int = 256
    overlap: int = 30

    def __post_init__(self) -> None:
        if self.chunk_tokens < 8:
            raise ValueError(f"chunk_tokens must be >= 8, got {self.chunk_tokens}")
        if not 0 <= self.overlap < self.chunk_tokens // 2:
            raise ValueError(
                f"overlap must be in [0, chunk_tokens / 2), got {self.overlap} for "
                f"chunk_tokens {self.chunk_tokens}"
            )


class Chunker:
    """Splits texts with a tokenizer's character spans (``Embedder.token_spans``)."""

    def __init__(self, token_spans: TokenSpans, config: ChunkerConfig | None = None) -> None:
        self.token_spans = token_spans
        self.config = config or ChunkerConfig()

    def split(
        self, text: str, max_tokens: int | None = None, stop: threading.Event | None = None
    ) -> list[str]:
        """Chunks of ``text``; ``max_tokens`` lowers the window (e.g. room for a title).
        ``stop`` set by another thread ends a long split early (``InterruptedError``)."""
        size = min(self.config.chunk_tokens, max_tokens or self.config.chunk_tokens)
        size = max(size, 2 * self.config.overlap + 1, 8)
        spans = [s for s in self.spans(text, stop) if s[1] > s[0]]
        if len(spans) <= size:
            return [text.strip()] if text.strip() else []
        step = size - self.config.overlap
        chunks = []
        for start in range(0, len(spans), step):
            end = min(start + size, len(spans))
            chunks.append(text[spans[start][0] : spans[end - 1][1]])
            if end == len(spans):
                break
        return chunks

    def spans(self, text: str, stop: threading.Event | None = None) -> list[tuple[int, int]]:
        """The text's token spans, tokenized in sections of about ``SECTION_CHARS`` cut where
        a whitespace run begins (tokenizers split words there, so the spans are the whole
        text's); between sections, ``stop`` is checked."""
        spans: list[tuple[int, int]] = []
        start = 0
        while start < len(text):
            end = len(text)
            if end - start > SECTION_CHARS:
                end = _run_start(text, start + SECTION_CHARS)
            if stop is not None and stop.is_set():
                raise InterruptedError("chunking stopped")
            spans += [(a + start, b + start) for a, b in self.token_spans(text[start:end])]
            start = end
        return spans


SECTION_CHARS = 256 * 1024


def _run_start(text: str, pos: int) -> int:
    """The start of the first whitespace run at or after ``pos`` (the text's end if none)."""
    match = _WHITESPACE_RUN.search(text, pos)
    return match.start() if match else len(text)


_WHITESPACE_RUN = re.compile(r"(?<=\S)\s")
