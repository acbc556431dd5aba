"""Incremental detokenization: text deltas that are right for multi-byte and merged tokens."""

from __future__ import annotations


class IncrementalDetokenizer:
    """Turns a growing list of token ids into text deltas.

    Decodes a small window (``prefix_offset:``) and emits only what extends the window's
    previously decoded text; a trailing U+FFFD (an incomplete UTF-8 sequence) is held back until
    the next token completes it. A few context tokens before the first new one keep leading-space
    and merge rules right.
    """

    def __init__(self, tokenizer, context_ids: list[int], context_window: int = 5):
        self.tokenizer = tokenizer
        self.ids = list(context_ids[-context_window:])
        self.prefix_offset = 0
        self.read_offset = len(self.ids)

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True) if ids else ""

    def add(self, token_id: int) -> str:
        """Add one token; returns the newly complete text (possibly empty)."""
        if self.tokenizer is None:
            return ""
        self.ids.append(token_id)
        prefix = self._decode(self.ids[self.prefix_offset : self.read_offset])
        full = self._decode(self.ids[self.prefix_offset :])
        if len(full) > len(prefix) and not full.endswith("\ufffd"):
            delta = full[len(prefix) :]
            self.prefix_offset = self.read_offset
            self.read_offset = len(self.ids)
            return delta
        return ""

    def flush(self) -> str:
        """Whatever is held back at the end of generation (e.g. a lone partial character)."""
        if self.tokenizer is None or self.read_offset == len(self.ids):
            return ""
        prefix = self._decode(self.ids[self.prefix_offset : self.read_offset])
        full = self._decode(self.ids[self.prefix_offset :])
        self.read_offset = len(self.ids)
        return full[len(prefix) :]
