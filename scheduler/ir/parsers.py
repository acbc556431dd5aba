"""Incremental parsers of decoded text: list items, and where an answer's sentences end.

``Decode`` and ``PartialDecode`` of a list feed the same :class:`ItemParser` piece by piece (and
stop the decode once it is full), so the two give the same items by construction;
:func:`parse_items` parses a whole text the same way.
"""

from __future__ import annotations

import json
import re

_MARKER = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s+")
_DECODER = json.JSONDecoder()
_EDGE = " \t.,;:!?\"'()[]"


class ItemParser:
    """Feed text deltas, get back the items completed so far.

    ``mode`` "lines": one item per non-empty line, list markers ("- ", "1. ") removed.
    ``mode`` "json": the items of a JSON array of strings (other scalars become their text).
    An item equal to an earlier one (ignoring case, spaces and punctuation around it) or
    empty once list markers are removed is dropped. At most ``max_items`` items are returned
    in total (0 means no limit).
    """

    def __init__(self, mode: str, max_items: int = 0) -> None:
        if mode not in ("lines", "json"):
            raise ValueError(f"parse mode must be 'lines' or 'json', got {mode!r}")
        self.mode = mode
        self.max_items = max_items
        self._buf = ""
        self._pos = 0
        self._emitted = 0
        self._seen: set[str] = set()
        self._closed = False

    def feed(self, delta: str) -> list[str]:
        """Append ``delta``; return the newly completed items."""
        self._buf += delta
        items = self._lines(final=False) if self.mode == "lines" else self._json()
        return self._limit(items)

    @property
    def full(self) -> bool:
        """``max_items`` items are out: nothing more will be returned."""
        return bool(self.max_items) and self._emitted >= self.max_items

    def finish(self) -> list[str]:
        """No more text: return the last items (a final line without a newline)."""
        items = self._lines(final=True) if self.mode == "lines" else []
        return self._limit(items)

    def _limit(self, items: list[str]) -> list[str]:
        fresh = []
        for item in items:
            key = " ".join(item.lower().split()).strip(_EDGE)
            if key and key not in self._seen:
                self._seen.add(key)
                fresh.append(item)
        if self.max_items:
            fresh = fresh[: max(0, self.max_items - self._emitted)]
        self._emitted += len(fresh)
        return fresh

    def _lines(self, final: bool) -> list[str]:
        parts = self._buf.split("\n")
        self._buf = "" if final else parts.pop()
        out = [_MARKER.sub("", p).strip() for p in parts]
        return [p for p in out if p]

    def _json(self) -> list[str]:
        items: list[str] = []
        buf = self._buf
        if self._pos == 0:
            start = buf.find("[")
            if start < 0:
                return items
            self._pos = start + 1
        while not self._closed:
            while self._pos < len(buf) and buf[self._pos] in " \t\r\n,":
                self._pos += 1
            if self._pos >= len(buf):
                break
            if buf[self._pos] == "]":
                self._closed = True
                break
            try:
                value, end = _DECODER.raw_decode(buf, self._pos)
            except json.JSONDecodeError:
                break  # incomplete item: wait for more text
            if end >= len(buf) and not isinstance(value, str):
                break  # a number may still be growing
            items.append(value if isinstance(value, str) else json.dumps(value))
            self._pos = end
        return items


_SENTENCE_END = re.compile(r"[.!?][\"')\]]*\s")


class SentenceLimit:
    """Feed text deltas; :attr:`text` is the text so far, cut after the ``max_sentences``-th
    sentence once it is complete (its end mark followed by a space or a newline), and
    :attr:`done` says so. A cut never falls inside a number ("3.5") or a closing quote."""

    def __init__(self, max_sentences: int) -> None:
        if max_sentences < 1:
            raise ValueError(f"max_sentences must be >= 1, got {max_sentences}")
        self.max_sentences = max_sentences
        self.text = ""
        self.done = False
        self._ends = 0
        self._scanned = 0

    def feed(self, delta: str) -> None:
        if self.done:
            return
        self.text += delta
        # rescan a little of the old text: an end mark (and closing quotes) at its end waits
        # for the space that follows it
        for m in _SENTENCE_END.finditer(self.text, max(0, self._scanned - 8)):
            if m.end() <= self._scanned:
                continue
            self._ends += 1
            if self._ends >= self.max_sentences:
                self.text, self.done = self.text[: m.end() - 1], True
                return
        self._scanned = len(self.text)


def parse_items(text: str, mode: str, max_items: int = 0) -> list[str]:
    """Parse a whole decoded text (what ``Decode`` does)."""
    parser = ItemParser(mode, max_items)
    return parser.feed(text) + parser.finish()
