"""Engine schedulers: batching policies (the paper's two-query example), limits, failure
isolation, backpressure, cancellation, load balancing."""

import asyncio

import pytest

from ayo.scheduler.batching.engine_scheduler import (
    EnginePool,
    EngineScheduler,
    EngineStopped,
    QueueFull,
)
from ayo.scheduler.batching.policies import (
    BatchLimits,
    CriticalPathOrder,
    PendingRequest,
    form_batch,
    make_order,
    order_depth,
)


class RecordingEngine:
    """Echoes payloads; records each batch; can be held closed; fails payloads named 'bad'."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.gate = asyncio.Event()
        self.gate.set()

    async def run_batch(self, payloads):
        self.batches.append(list(payloads))
        await self.gate.wait()
        if "explode" in payloads:
            raise RuntimeError("engine fell over")
        return [ValueError(f"bad input {p}") if p == "bad" else p.upper() for p in payloads]


def req(query, node, depth=0, remaining=0.0, query_remaining=None, **kw):
    return PendingRequest(
        query_id=query,
        node_id=node,
        payload=node,
        depth=depth,
        remaining_ms=remaining,
        query_remaining_ms=remaining if query_remaining is None else query_remaining,
        **kw,
    )


async def _submit_held(policy: str, requests, max_items=2, **options):
    """Queue ``requests`` behind a blocker batch, then release: the first real batch shows the
    policy's choice."""
    engine = RecordingEngine()
    sched = EngineScheduler(
        engine, "e", policy=policy, limits=BatchLimits(max_items=max_items), **options
    )
    sched.start()
    engine.gate.clear()
    blocker = asyncio.create_task(sched.submit(req(99, "blocker")))
    await asyncio.sleep(0)
    tasks = [asyncio.create_task(sched.submit(r)) for r in requests]
    await asyncio.sleep(0)
    engine.gate.set()
    await asyncio.gather(blocker, *tasks)
    await sched.stop()
    return engine.batches[1:]


def paper_example():
    """Query 1: A (deep, on its critical path) and B (its child E also waits on D, which runs
    elsewhere, so B has slack). Query 2: G. All three wait for the same engine."""
    a = req(1, "A", depth=3, remaining=30.0, query_remaining=30.0)
    b = req(1, "B", depth=1, remaining=10.0, query_remaining=30.0)
    g = req(2, "G", depth=2, remaining=20.0, query_remaining=20.0)
    return a, b, g


async def test_depth_batches_a_with_g_not_b():
    batches = await _submit_held("depth", paper_example())
    assert sorted(batches[0]) == ["A", "G"]
    assert batches[1] == ["B"]


async def test_fcfs_batches_a_with_b():
    batches = await _submit_held("fcfs", paper_example())
    assert batches[0] == ["A", "B"]


async def test_critical_path_batches_the_zero_slack_primitives():
    batches = await _submit_held("critical_path", paper_example())
    assert sorted(batches[0]) == ["A", "G"]


def test_depth_order_round_robins_over_queries_by_age():
    rs = [
        req(1, "a1", depth=2, enqueued_at=0.0, seq=0),
        req(1, "a2", depth=2, enqueued_at=0.0, seq=1),
        req(1, "a3", depth=1, enqueued_at=0.0, seq=2),
        req(2, "b1", depth=5, enqueued_at=1.0, seq=3),
        req(2, "b2", depth=4, enqueued_at=1.0, seq=4),
    ]
    assert [r.node_id for r in order_depth(rs, 2.0)] == ["a1", "a2", "b1", "a3", "b2"]


def test_critical_path_aging_prevents_starvation():
    order = CriticalPathOrder(aging_ms_per_ms=1.0)
    long_job = req(1, "long", remaining=500.0, enqueued_at=0.0, seq=0)
    short_job = req(2, "short", remaining=10.0, enqueued_at=0.6, seq=1)
    # At t=0.61 the long job has waited 610 ms: 500 - 610 < 10 - 10.
    assert order([long_job, short_job], 0.61)[0] is long_job
    assert order([long_job, short_job], 0.1)[0] is short_job


def test_critical_path_work_with_slack_waits_only_by_its_slack():
    """A request off its query's path (the question's embedding while the query's passages are
    embedded) ranks as its query with the slack added: behind its own query's path and behind
    work that arrived with it, but not behind every later query's path (it once starved so)."""
    order = CriticalPathOrder(aging_ms_per_ms=0.5)
    path = req(1, "passages", remaining=1000.0, query_remaining=1000.0, enqueued_at=0.0, seq=0)
    question = req(1, "question", remaining=10.0, query_remaining=1000.0, enqueued_at=0.0, seq=1)
    soon = req(2, "soon", remaining=900.0, query_remaining=900.0, enqueued_at=1.0, seq=2)
    later = req(3, "later", remaining=900.0, query_remaining=900.0, enqueued_at=5.0, seq=3)
    ranked = [r.node_id for r in order([path, question, soon, later], 6.0)]
    # keys: passages 1000, question 1000 + 990, soon 900 + 500, later 900 + 2500
    assert ranked == ["passages", "soon", "question", "later"]


def test_critical_path_deadline_first():
    order = CriticalPathOrder()
    relaxed = req(1, "relaxed", remaining=5.0, seq=0)
    due = req(2, "due", remaining=50.0, deadline=10.03, seq=1)  # 30 ms left, needs 50
    assert order([relaxed, due], 10.0)[0] is due


def test_form_batch_respects_item_and_token_limits():
    rs = [
        req(1, "x", items=3, tokens=100, seq=0),
        req(2, "y", items=3, tokens=10, seq=1),
        req(3, "z", items=1, tokens=10, seq=2),
    ]
    assert [r.node_id for r in form_batch(rs, BatchLimits(max_items=4))] == ["x", "z"]
    batch = form_batch(rs, BatchLimits(max_items=10, max_tokens=50))
    assert [r.node_id for r in batch] == ["x"]  # the first always runs, even if over the limit
    batch = form_batch(rs[1:], BatchLimits(max_items=10, max_tokens=50))
    assert [r.node_id for r in batch] == ["y", "z"]


def test_invalid_configuration_is_rejected():
    with pytest.raises(ValueError, match="unknown batching policy 'lifo'"):
        make_order("lifo")
    with pytest.raises(ValueError, match="max_items"):
        BatchLimits(max_items=0)
    with pytest.raises(ValueError, match="items must be >= 1"):
        req(1, "n", items=0)


async def test_failure_is_isolated_to_its_request_and_batch():
    engine = RecordingEngine()
    sched = EngineScheduler(engine, "e", limits=BatchLimits(max_items=8, max_wait_ms=20))
    sched.start()
    good, bad = sched.submit(req(1, "good")), sched.submit(req(2, "bad"))
    results = await asyncio.gather(good, bad, return_exceptions=True)
    assert results[0] == "GOOD"
    assert isinstance(results[1], ValueError) and "bad input" in str(results[1])
    assert engine.batches == [["good", "bad"]]
    # A batch that raises as a whole fails its own requests only; the engine keeps serving.
    boom = await asyncio.gather(
        sched.submit(req(3, "explode")), sched.submit(req(4, "fine")), return_exceptions=True
    )
    assert all(isinstance(r, RuntimeError) and "fell over" in str(r) for r in boom)
    assert await sched.submit(req(5, "after")) == "AFTER"
    await sched.stop()


async def test_max_wait_fills_a_batch_and_no_wait_dispatches_at_once():
    engine = RecordingEngine()
    sched = EngineScheduler(engine, "e", limits=BatchLimits(max_items=4, max_wait_ms=50))
    sched.start()
    first = asyncio.create_task(sched.submit(req(1, "a")))
    await asyncio.sleep(0.01)
    second = asyncio.create_task(sched.submit(req(2, "b")))
    await asyncio.gather(first, second)
    assert engine.batches == [["a", "b"]]
    await sched.stop()

    engine = RecordingEngine()
    sched = EngineScheduler(engine, "e", limits=BatchLimits(max_items=4))
    sched.start()
    await sched.submit(req(1, "a"))
    await sched.submit(req(2, "b"))
    assert engine.batches == [["a"], ["b"]]
    await sched.stop()


async def test_backpressure_and_queue_full():
    engine = RecordingEngine()
    engine.gate.clear()
    sched = EngineScheduler(engine, "e", limits=BatchLimits(max_items=1), max_queue=1)
    sched.start()
    running = asyncio.create_task(sched.submit(req(1, "a")))
    await asyncio.sleep(0)
    queued = asyncio.create_task(sched.submit(req(2, "b")))
    await asyncio.sleep(0)
    assert sched.queue_length == 1
    with pytest.raises(QueueFull):
        await sched.submit(req(3, "c"), wait=False)
    waiting = asyncio.create_task(sched.submit(req(4, "d")))  # waits for space
    await asyncio.sleep(0)
    assert not waiting.done()
    engine.gate.set()
    assert await asyncio.gather(running, queued, waiting) == ["A", "B", "D"]
    await sched.stop()


async def test_cancelled_request_is_withdrawn_before_it_runs():
    engine = RecordingEngine()
    engine.gate.clear()
    sched = EngineScheduler(engine, "e", limits=BatchLimits(max_items=1))
    sched.start()
    running = asyncio.create_task(sched.submit(req(1, "a")))
    await asyncio.sleep(0)
    doomed = asyncio.create_task(sched.submit(req(2, "b")))
    await asyncio.sleep(0)
    doomed.cancel()
    await asyncio.sleep(0)
    assert sched.queue_length == 0
    engine.gate.set()
    assert await running == "A"
    assert engine.batches == [["a"]]
    await sched.stop()


async def test_on_idle_is_called_when_nothing_is_queued_or_running():
    engine = RecordingEngine()
    engine.gate.clear()
    sched = EngineScheduler(engine, "e", limits=BatchLimits(max_items=1))
    idle: list[int] = []
    sched.on_idle = lambda: idle.append(sched.load)
    sched.start()
    first = asyncio.create_task(sched.submit(req(1, "a")))
    second = asyncio.create_task(sched.submit(req(2, "b")))
    await asyncio.sleep(0)
    engine.gate.set()
    assert await asyncio.gather(first, second) == ["A", "B"]
    assert idle == [0]  # once: after the second batch, not between the two
    engine.gate.clear()
    running = asyncio.create_task(sched.submit(req(3, "c")))
    await asyncio.sleep(0)
    doomed = asyncio.create_task(sched.submit(req(4, "d")))
    await asyncio.sleep(0)
    doomed.cancel()  # withdrawn while "c" still runs: not idle yet
    await asyncio.sleep(0)
    assert idle == [0]
    engine.gate.set()
    assert await running == "C"
    assert idle == [0, 0]
    await sched.stop()


async def test_stop_fails_pending_requests():
    engine = RecordingEngine()
    engine.gate.clear()
    sched = EngineScheduler(engine, "e", limits=BatchLimits(max_items=1))
    sched.start()
    running = asyncio.create_task(sched.submit(req(1, "a")))
    await asyncio.sleep(0)
    pending = asyncio.create_task(sched.submit(req(2, "b")))
    await asyncio.sleep(0)
    stopping = asyncio.create_task(sched.stop())
    await asyncio.sleep(0)
    engine.gate.set()
    await stopping
    assert await running == "A"
    with pytest.raises(EngineStopped):
        await pending


async def test_pool_sends_work_to_the_least_loaded_instance():
    engines = [RecordingEngine(), RecordingEngine()]
    engines[0].gate.clear()
    pool = EnginePool([EngineScheduler(e, f"e{i}") for i, e in enumerate(engines)])
    pool.start()
    stuck = asyncio.create_task(pool.submit(req(1, "a")))
    await asyncio.sleep(0)
    assert await pool.submit(req(2, "b")) == "B"
    assert engines[1].batches == [["b"]]
    engines[0].gate.set()
    await stuck
    await pool.stop()
