"""Stop-string handling for streamed text."""

from __future__ import annotations


def find_stop(text: str, stops: tuple[str, ...], search_from: int) -> int:
    """Index where the earliest stop string starts in ``text`` (searching from
    ``search_from`` minus the longest stop's length), or -1."""
    best = -1
    for s in stops:
        i = text.find(s, max(0, search_from - len(s) + 1))
        if i != -1 and (best == -1 or i < best):
            best = i
    return best


def held_back(text: str, stops: tuple[str, ...]) -> int:
    """How many trailing characters of ``text`` could still begin a stop string."""
    hold = 0
    for s in stops:
        for n in range(min(len(s) - 1, len(text)), hold, -1):
            if text.endswith(s[:n]):
                hold = n
                break
    return hold
