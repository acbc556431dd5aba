"""The engine schedulers: per engine instance, a queue of pending primitive requests in the
order of a batching policy, the batches it forms, admission to bounded resources (an LLM's
running decodes), the request info the graph scheduler hands them, and the batching proxies
(engine-shaped objects the handlers call) that route each call to a scheduler.

``ayo.scheduler.batching`` keeps the policy names it always had (``POLICIES``,
``PendingRequest``, ``BatchLimits``, ``make_order``, ...): they live in :mod:`.policies`.
"""

from .policies import (
    POLICIES,
    BatchLimits,
    CriticalPathOrder,
    Order,
    PendingRequest,
    form_batch,
    make_order,
    order_depth,
    order_fcfs,
    sequence_order,
)

__all__ = [
    "POLICIES",
    "BatchLimits",
    "CriticalPathOrder",
    "Order",
    "PendingRequest",
    "form_batch",
    "make_order",
    "order_depth",
    "order_fcfs",
    "sequence_order",
]
