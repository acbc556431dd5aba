"""Prompt templates with named placeholders, and the tokenizer interface used to split them."""

from __future__ import annotations

import re
import string
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from .errors import PromptError


class Tokenizer(Protocol):
    """Turns text into token ids without adding special tokens (no BOS per call), and back."""

    def encode(self, text: str) -> list[int]: ...

    def encode_parts(self, parts: Sequence[tuple[str, bool]]) -> list[int]:
        """The ids of the parts' joined text, ``(text, is_data)``: data (a question, a
        retrieved passage) is tokenized as text, never as control tokens."""
        ...

    def decode(self, ids: list[int]) -> str: ...

    def render_chat(self, messages: list[dict[str, str]]) -> str | None:
        """The messages (``[{"role", "content"}]``) in the model's chat template, ending where
        the assistant's answer begins; None when the model has no template (a base model)."""
        ...

    def render_chat_parts(
        self,
        messages: list[dict[str, Any]],
        add_generation_prompt: bool = True,
        tools: list[dict[str, Any]] | None = None,
    ) -> list[tuple[str, bool]] | None:
        """The messages in the chat template as ``encode_parts`` parts (each content is data),
        ``tools`` (OpenAI's list) given to a template that renders them; None without one."""
        ...

    @property
    def renders_tools(self) -> bool:
        """The chat template renders ``tools`` and tool calls itself."""
        ...


ROLES = ("system", "user", "assistant")
_SENTINEL = "\ue000{}\ue001"  # private-use characters: no chat template or text contains them


@dataclass(frozen=True)
class Prompt:
    """A template such as ``"Question: {question}\\nContext: {context}"``.

    Placeholders are ``{name}`` with a Python identifier; ``{{`` and ``}}`` are literal braces.
    Format specs and conversions are rejected so rendering is plain substitution.

    A chat prompt (:meth:`chat`) also keeps its ``messages``: the plan compiler renders them
    with the model's chat template (:meth:`for_model`) before any pass reads the template;
    ``template`` is then their plain-text form, what a base model (no template) gets.
    """

    template: str
    messages: tuple[tuple[str, str], ...] = ()
    placeholders: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "placeholders", _parse(self.template))
        for role, text in self.messages:
            if role not in ROLES:
                raise PromptError(f"message role must be one of {ROLES}, got {role!r}")
            _parse(text)

    @classmethod
    def chat(cls, user: str, *, system: str = "", assistant: str = "") -> Prompt:
        """A prompt of chat messages: an optional ``system`` instruction, the ``user`` turn and
        an optional start of the ``assistant``'s answer, each a template with placeholders.
        Keep what arrives late (retrieved ``{context}``) after what is known at once (the
        question), so the early part stays a prefix that the prefill split computes ahead."""
        messages = [("system", system)] if system else []
        messages.append(("user", user))
        plain = [system, user] if system else [user]
        plain.append(assistant)
        return cls(
            "\n".join(plain), tuple(messages) + ((("assistant", assistant),) if assistant else ())
        )

    def for_model(self, render_chat: Callable[[list[dict[str, str]]], str | None] | None) -> Prompt:
        """This prompt as the model reads it: a chat prompt's messages rendered with
        ``render_chat`` (a tokenizer's, see :class:`Tokenizer`), placeholders kept; the plain
        ``template`` when there is no renderer or the model has no chat template. A prompt
        without messages is returned as it is."""
        if not self.messages:
            return self
        plain = Prompt(self.template)
        if render_chat is None:
            return plain
        names: list[str] = []

        def mark(text: str) -> str:
            out = []
            for literal, name, _, _ in string.Formatter().parse(text):
                out.append(literal)
                if name is not None:
                    if name not in names:
                        names.append(name)
                    out.append(_SENTINEL.format(names.index(name)))
            return "".join(out)

        turns = [(r, mark(t)) for r, t in self.messages]
        prefix = turns.pop()[1] if turns[-1][0] == "assistant" else ""
        rendered = render_chat([{"role": r, "content": t} for r, t in turns])
        if rendered is None:
            return plain
        template = (rendered + prefix).replace("{", "{{").replace("}", "}}")
        for i, name in enumerate(names):
            template = template.replace(_SENTINEL.format(i), "{" + name + "}")
        formatted = Prompt(template)
        if set(formatted.placeholders) != set(names):
            raise PromptError(
                "the chat template dropped or repeated a placeholder "
                f"(had {names}, rendered {list(formatted.placeholders)})"
            )
        return formatted

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
        return "".join(text for text, _ in self.render_parts(values))

    def render_parts(self, values: Mapping[str, object]) -> list[tuple[str, bool]]:
        """:meth:`render` as ``Tokenizer.encode_parts`` takes it: the template's literal text
        ``(text, False)`` and each placeholder's value ``(value, True)``, in order."""
        parts = []
        for literal, name, _, _ in string.Formatter().parse(self.template):
            if literal:
                parts.append((literal, False))
            if name is not None:
                if name not in values:
                    raise PromptError(f"placeholder {{{name}}} is not bound")
                parts.append((str(values[name]), True))
        return parts

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


def _parse(template: str) -> tuple[str, ...]:
    """The placeholder names of ``template`` in order of first use (checked)."""
    names: list[str] = []
    try:
        parsed = list(string.Formatter().parse(template))
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
    return tuple(names)


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
        return [self.piece_id(piece) for piece in self._PIECE.findall(text)]

    def piece_id(self, piece: str) -> int:
        """The id of ``piece`` as one token (a fake LLM's five-character "tokens" too)."""
        if piece not in self._vocab:
            self._vocab[piece] = len(self._pieces)
            self._pieces.append(piece)
        return self._vocab[piece]

    def encode_parts(self, parts: Sequence[tuple[str, bool]]) -> list[int]:
        """No control tokens here: the joined text."""
        return self.encode("".join(text for text, _ in parts))

    def decode(self, ids: list[int]) -> str:
        return "".join(self._pieces[i] for i in ids)

    def render_chat(self, messages: list[dict[str, str]]) -> str | None:
        """No chat template: prompts stay plain text."""
        return None

    def render_chat_parts(
        self,
        messages: list[dict[str, Any]],
        add_generation_prompt: bool = True,
        tools: list[dict[str, Any]] | None = None,
    ) -> list[tuple[str, bool]] | None:
        return None

    renders_tools = False
