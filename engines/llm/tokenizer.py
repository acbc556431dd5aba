"""The LLM's tokenizer as plans use it: text to token ids without special tokens (a plan renders
whole prompts, chat template included), ids back to text, chat messages to the prompt text."""

from __future__ import annotations

import functools
from typing import Any

from .errors import ContextLengthExceeded, InvalidRequest


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

    def tokenize(self, text: str, *, add_special_tokens: bool = False) -> list[int]:
        """Text -> token ids (raises ``ContextLengthExceeded`` for a text no window holds)."""
        hf = self._require()
        if self.max_model_len is not None and len(text) > self.max_model_len * self.max_token_chars:
            raise ContextLengthExceeded(
                f"the text has {len(text)} characters: more than the context window of "
                f"{self.max_model_len} tokens holds (a token is at most {self.max_token_chars} "
                "characters); shorten it"
            )
        return hf(text, add_special_tokens=add_special_tokens)["input_ids"]

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (no special tokens; an empty text has none)."""
        return self.tokenize(text) if text else []

    def decode(self, ids: list[int]) -> str:
        return self._require().decode(ids)

    @property
    def has_chat_template(self) -> bool:
        return self.hf is not None and getattr(self.hf, "chat_template", None) is not None

    def render_chat(self, messages: list[dict[str, str]]) -> str | None:
        """``messages`` in the model's chat template up to where the answer starts (None: the
        model has no template, so prompts stay plain text)."""
        if not self.has_chat_template:
            return None
        return self.hf.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
