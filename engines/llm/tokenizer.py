"""The LLM's tokenizer as plans use it: text to token ids without special tokens (a plan renders
whole prompts, chat template included), ids back to text, chat messages to the prompt text."""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from typing import Any

from .errors import ContextLengthExceeded, InvalidRequest

_MARK = "\ue000{}\ue001"  # private-use characters: no template or message contains them
_MARKS = re.compile("\ue000(\\d+)\ue001")


class ChatTokenizer:
    """A Hugging Face tokenizer (``hf``) with the plans' ``Tokenizer`` interface.

    Args:
        hf: a ``transformers`` tokenizer (None: a model without one; every call raises).
        max_model_len: the engine's context window: a text longer than any text of that many
            tokens could be (``max_model_len * max_token_chars`` characters) is refused at once,
            with ``ContextLengthExceeded``, without spending time proportional to it.
    """

    def __init__(self, hf: Any, max_model_len: int | None = None) -> None:
        self.hf = hf
        self.max_model_len = max_model_len

    def _require(self) -> Any:
        if self.hf is None:
            raise InvalidRequest("this model has no tokenizer: pass token ids")
        return self.hf

    @functools.cached_property
    def max_token_chars(self) -> int:
        """The most characters one token stands for (the longest vocabulary entry; byte-level
        entries count bytes, never fewer than the characters they decode to)."""
        return max(map(len, self._require().get_vocab()), default=1)

    def _check_chars(self, chars: int) -> None:
        """``ContextLengthExceeded`` for a text of ``chars`` characters that no window holds."""
        if self.max_model_len is not None and chars > self.max_model_len * self.max_token_chars:
            raise ContextLengthExceeded(
                f"the text has {chars} characters: more than the context window of "
                f"{self.max_model_len} tokens holds (a token is at most {self.max_token_chars} "
                "characters); shorten it"
            )

    def tokenize(self, text: str, *, add_special_tokens: bool = False) -> list[int]:
        """Text -> token ids (raises ``ContextLengthExceeded`` for a text no window holds)."""
        hf = self._require()
        self._check_chars(len(text))
        return hf(text, add_special_tokens=add_special_tokens)["input_ids"]

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (no special tokens; an empty text has none)."""
        return self.tokenize(text) if text else []

    @functools.cached_property
    def _control(self) -> re.Pattern[str] | None:
        """Matches the spelling of any control token (``<|im_end|>``, ...)."""
        specials = [t.content for t in self._require().added_tokens_decoder.values() if t.special]
        if not specials:
            return None
        return re.compile("|".join(map(re.escape, sorted(specials, key=len, reverse=True))))

    def encode_parts(self, parts: Sequence[tuple[str, bool]]) -> list[int]:
        """Token ids of the parts' text, joined: ``(text, is_data)``. Template text may hold
        control tokens; data (a user's message or question, a retrieved passage, a tool's
        result) is text only: a control token's spelling in it is tokenized as the characters
        it is, so it can never close a turn or open a system one. Text without such spellings
        is tokenized as one string (as :meth:`encode` would); a data part with one is
        tokenized on its own."""
        hf = self._require()
        self._check_chars(sum(len(text) for text, _ in parts))
        control = self._control
        ids: list[int] = []
        run: list[str] = []
        for text, data in parts:
            if data and control is not None and control.search(text):
                ids += self.encode("".join(run))
                run = []
                ids += hf(text, add_special_tokens=False, split_special_tokens=True)["input_ids"]
            else:
                run.append(text)
        return ids + self.encode("".join(run))

    def render_chat_parts(
        self,
        messages: list[dict[str, Any]],
        add_generation_prompt: bool = True,
        tools: list[dict[str, Any]] | None = None,
    ) -> list[tuple[str, bool]] | None:
        """``messages`` in the chat template (up to the answer with ``add_generation_prompt``),
        as ``encode_parts`` parts: each message's content is data. ``tools`` (OpenAI's
        ``tools`` list) go to a template that renders them. None without a template."""
        if not self.has_chat_template:
            return None
        marked = [{**m, "content": _MARK.format(i)} for i, m in enumerate(messages)]
        extra = {"tools": tools} if tools else {}
        text = self.hf.apply_chat_template(
            marked, tokenize=False, add_generation_prompt=add_generation_prompt, **extra
        )
        parts: list[tuple[str, bool]] = []
        for k, piece in enumerate(_MARKS.split(text)):
            if k % 2 == 0:
                parts.append((piece, False))
            else:
                parts.append((str(messages[int(piece)].get("content") or ""), True))
        return parts

    def decode(self, ids: list[int]) -> str:
        return self._require().decode(ids)

    @property
    def renders_tools(self) -> bool:
        """The chat template renders ``tools`` and tool calls itself (else
        ``tools.plain_messages`` writes them into the conversation)."""
        template = getattr(self.hf, "chat_template", None) if self.hf is not None else None
        return isinstance(template, str) and "tools" in template and "tool_calls" in template

    @property
    def has_chat_template(self) -> bool:
        return self.hf is not None and getattr(self.hf, "chat_template", None) is not None

    def render_chat(self, messages: list[dict[str, str]]) -> str | None:
        """``messages`` in the model's chat template up to where the answer starts (None: the
        model has no template, so prompts stay plain text)."""
        if not self.has_chat_template:
            return None
        return self.hf.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
