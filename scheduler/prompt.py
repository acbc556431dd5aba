"""Prompt templates with named placeholders, and the tokenizer interface used to split them."""

from __future__ import annotations

import re
import string
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from .errors import PromptError


class Tokenizer(Protocol):
    """Turns text into token ids without adding special tokens (no BOS per call)."""

    def encode(self, text: str) -> list[int]: ...


@dataclass(frozen=True)
class Prompt:
    """A template such as ``"Question: {question}\\nContext: {context}"``.

    Placeholders are ``{name}`` with a Python identifier; ``{{`` and ``}}`` are literal braces.
    Format specs and conversions are rejected so rendering is plain substitution.
    """

    template: str
    placeholders: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        names: list[str] = []
        try:
            parsed = list(string.Formatter().parse(self.template))
        except ValueError as exc:
            raise PromptError(f"malformed prompt template: {exc}") from None
        for _, name, spec, conv in parsed:
            if name is None:
                continue
            if not name.isidentifier():
                raise PromptError(f"placeholder {{{name}}} must be an identifier")
            if spec or conv:
                raise PromptError(f"placeholder {{{name}}} may not have a format spec")
            if name not in names:
                names.append(name)
        object.__setattr__(self, "placeholders", tuple(names))

    def check_bindings(self, bound: set[str] | Mapping[str, object], *, node: str = "") -> None:
        """Raise PromptError naming any placeholder not in ``bound`` or any bound name unused."""
        bound_names = set(bound)
        unbound = [p for p in self.placeholders if p not in bound_names]
        if unbound:
            raise PromptError(f"placeholder {{{unbound[0]}}} is not bound", node=node or None)
        unknown = sorted(bound_names - set(self.placeholders))
        if unknown:
            raise PromptError(
                f"binding {unknown[0]!r} names no placeholder of the prompt "
                f"(placeholders: {', '.join(self.placeholders) or 'none'})",
                node=node or None,
            )

    def render(self, values: Mapping[str, str]) -> str:
        """Substitute every placeholder; raises PromptError when one is missing."""
        try:
            return self.template.format_map(values)
        except KeyError:
            for name in self.placeholders:
                if name not in values:
                    raise PromptError(f"placeholder {{{name}}} is not bound") from None
            raise

    def split_offset(self, early: set[str]) -> int:
        """Character offset in the template where the first placeholder not in ``early`` starts.

        The template before this offset renders from early inputs only. Returns the template
        length when every placeholder is early.
        """
        pos = 0
        for literal, name, _, _ in string.Formatter().parse(self.template):
            pos += len(literal.replace("{", "{{").replace("}", "}}"))
            if name is None:
                continue
            if name not in early:
                return pos
            pos += len(name) + 2
        return len(self.template)

    def static_prefix(self, offset: int) -> str:
        """The literal text of the template before ``offset``, placeholders removed."""
        head = self.template[:offset]
        return "".join(lit for lit, _, _, _ in string.Formatter().parse(head))


class RegexTokenizer:
    """A deterministic stand-in tokenizer: words, runs of spaces, single punctuation marks.

    Ids come from a growing vocabulary, so equal text gives equal ids within one instance.
    Used to estimate prompt lengths at plan time and by the fake LLM in tests.
    """

    _PIECE = re.compile(r"\w+|\s+|[^\w\s]")

    def __init__(self) -> None:
        self._vocab: dict[str, int] = {}
        self._pieces: list[str] = []

    def encode(self, text: str) -> list[int]:
        ids = []
        for piece in self._PIECE.findall(text):
            if piece not in self._vocab:
                self._vocab[piece] = len(self._pieces)
                self._pieces.append(piece)
            ids.append(self._vocab[piece])
        return ids

    def decode(self, ids: list[int]) -> str:
        return "".join(self._pieces[i] for i in ids)
