"""The errors every engine raises, one hierarchy.

A request-level error (``InvalidRequest`` and its subclasses) fails only the request that caused
it; the engine keeps serving. ``EngineError`` is the base a caller catches to handle any of them.
"""

from __future__ import annotations


class EngineError(Exception):
    """Base of every error an engine reports."""


class EngineClosed(EngineError):
    """The engine was closed; it accepts no new requests."""


class ModelNotFound(EngineError):
    """A model name or path could not be resolved to a local model folder."""


class InvalidRequest(EngineError, ValueError):
    """A request is malformed (empty text, bad ``k``, ...). Only that request fails."""


class UnknownCollection(InvalidRequest, KeyError):
    """A named collection does not exist."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else "unknown collection"


class DuplicateId(InvalidRequest):
    """An id being added already exists (in the collection, or twice in the same request)."""


class AlreadyStored(DuplicateId):
    """A document id being ingested is stored already (a conflict with the collection's state,
    where ``DuplicateId`` alone may also mean an id repeated within one request)."""


class DimensionMismatch(InvalidRequest):
    """A vector's dimension differs from the collection's."""
