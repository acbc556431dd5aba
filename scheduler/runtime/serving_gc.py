"""Garbage-collector settings for a serving process (opt in; the library never calls this).

With a thousand queries in flight the runtime keeps ~60 small objects per query alive, creates
no reference cycles of its own, and yet pays the cyclic collector on every allocation burst:
young collections every 700 allocations, and full collections that walk the whole heap (torch's
modules and a model's Python objects included) each time a quarter of it has been promoted.
Measured with ``python -m benchmarks.scheduler --overhead``, that was 25-35% of the runtime's
per-primitive cost at first; with the runtime allocating less per query it is nearer 5% (the
serving row against the same run with the collector off), while in a server the collector also
walks the models' objects, which is where freezing pays. The usual remedy of Python servers:

- ``gc.freeze()`` once startup is done (models loaded): what exists then moves to a permanent
  generation that collections skip;
- a larger young-generation threshold, so short-lived query objects die before a collection
  looks at them.

Cycles still get collected, only less often; :func:`restore_gc` undoes both.
"""

from __future__ import annotations

import gc
import logging

log = logging.getLogger(__name__)

_DEFAULT = gc.get_threshold()


def configure_gc_for_serving(young_threshold: int = 50_000, freeze: bool = True) -> None:
    """Call once after the engines are loaded (e.g. after ``App.start()``) in a server process.

    Args:
        young_threshold: allocations between young-generation collections (CPython's default
            is 700); the older generations keep collecting every 20 younger ones.
        freeze: move every object alive now out of the collector's reach (``gc.freeze()``).
    """
    if young_threshold < 1:
        raise ValueError(f"young_threshold must be >= 1, got {young_threshold}")
    gc.set_threshold(young_threshold, 20, 20)
    if freeze:
        gc.freeze()
    log.info(
        "gc tuned for serving: threshold %s, %d objects frozen",
        gc.get_threshold(),
        gc.get_freeze_count(),
    )


def restore_gc() -> None:
    """Back to CPython's defaults: thresholds as at import, nothing frozen."""
    gc.set_threshold(*_DEFAULT)
    gc.unfreeze()
