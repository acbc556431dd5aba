"""The incremental pending queues give exactly the batches of the reference policies
(``form_batch(order(pending, now), limits)``) under random arrivals, withdrawals and takes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ayo.scheduler.batching.pending_queue import make_queue
from ayo.scheduler.batching.policies import (
    POLICIES,
    BatchLimits,
    PendingRequest,
    form_batch,
    make_order,
)

# Times are multiples of 1/8 s and costs multiples of 125 ms, so the reference's float
# arithmetic and the queue's (aging folded into a fixed key) round the same way.
_request = st.tuples(
    st.integers(1, 5),  # query
    st.integers(0, 4),  # depth
    st.integers(1, 3),  # items
    st.integers(0, 40),  # tokens
    st.integers(0, 6),  # remaining, x125 ms
    st.integers(0, 3),  # extra query remaining (slack), x125 ms
    st.one_of(st.none(), st.integers(0, 40)),  # deadline, x1/8 s after arrival
)
_push = st.tuples(st.just("push"), _request)
_tick = st.tuples(st.just("tick"), st.integers(1, 4))
_take = st.tuples(
    st.just("take"), st.tuples(st.integers(1, 6), st.one_of(st.none(), st.integers(1, 60)))
)
_op = st.one_of(
    _push,
    _push,
    _push,
    _tick,
    _tick,
    _take,
    _take,
    st.tuples(st.just("withdraw"), st.integers(0, 50)),
)


def _run(policy: str, ops: list) -> int:
    order, queue = make_order(policy), make_queue(policy)
    pending: list[PendingRequest] = []
    now, seq, batches = 0.0, 0, 0
    for kind, arg in ops:
        if kind == "push":
            q, depth, items, tokens, rem, slack, deadline = arg
            r = PendingRequest(
                q, f"n{seq}", None, items, tokens, depth, rem * 125.0, (rem + slack) * 125.0,
                None if deadline is None else now + deadline / 8, now, seq,
            )  # fmt: skip
            seq += 1
            pending.append(r)
            queue.push(r)
        elif kind == "tick":
            now += arg / 8
        elif kind == "withdraw" and pending:
            r = pending.pop(arg % len(pending))
            assert queue.remove(r) and not queue.remove(r)
        elif kind == "take" and pending:
            limits = BatchLimits(max_items=arg[0], max_tokens=arg[1])
            expected = form_batch(order(pending, now), limits)
            got = queue.take(limits, now)
            assert [r.node_id for r in got] == [r.node_id for r in expected]
            for r in got:
                pending.remove(r)
            batches += 1
        assert len(queue) == len(pending)
        assert queue.items == sum(r.items for r in pending)
    return batches


@pytest.mark.parametrize("policy", POLICIES)
@settings(max_examples=150, deadline=None)
@given(ops=st.lists(_op, max_size=60))
def test_queue_batches_equal_the_reference_policy(policy: str, ops: list) -> None:
    _run(policy, ops)


@pytest.mark.parametrize("policy", POLICIES)
def test_many_withdrawals_rebuild_and_keep_the_order(policy: str) -> None:
    ops: list = [("push", (i % 7, i % 3, 1, 0, i % 5, i % 2, None)) for i in range(300)]
    ops += [("withdraw", 7 * i) for i in range(200)]  # the queue rebuilds past 150
    ops += [("take", (8, None))] * 12
    assert _run(policy, ops) == 12
