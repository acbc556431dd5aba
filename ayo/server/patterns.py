"""Text patterns the request checks and the OpenAPI document share (one definition of each)."""

from __future__ import annotations

# Holds a character Python's str.strip() keeps (the server's test of a blank text): ECMA's \s
# lacks \x1c-\x1f and \x85, which Python counts as whitespace.
NOT_WHITESPACE = r"[^\s\x1c-\x1f\x85]"
NON_BLANK = {"type": "string", "pattern": NOT_WHITESPACE}
# a prompt holds a character other than control characters (some encode to no token at all)
PROMPT_CHARACTER = "[^\\x00-\\x08\\x0b\\x0c\\x0e-\\x1f]"
PROMPT_TEXT = {"type": "string", "pattern": PROMPT_CHARACTER}
