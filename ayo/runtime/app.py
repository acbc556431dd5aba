"""The App API: engines by name, workflows by name, and queries run through the runtime.

    app = App()
    app.add_engine("llm", my_llm)            # each engine declares its kind
    app.add_engine("embedder", [e1, e2])     # two instances, load-balanced
    async with app:
        result = await app.run("advanced_rag", {"question": "..."}, deadline=5.0)
        async for event in app.stream("naive_rag", {"question": "..."}):
            print(event.delta, end="")

Every query is compiled (plan cache) and run by a :class:`GraphRun`; every engine call goes
through that engine's scheduler, so primitives of concurrent queries share batches.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ayo.apps import APPS, AppTemplate
from ayo.apps.completion import COMPLETION, EMBEDDING
from ayo.cluster import Placement, place
from ayo.passes import Optimize, pass_set
from ayo.runtime.engine_set import EngineSet, SchedulerConfig
from ayo.runtime.metrics import AppMetrics
from ayo.runtime.plan_cache import PlanCache
from ayo.runtime.tracing import Span, Trace
from ayo.scheduler import EngineProfile, Plan, RegexTokenizer
from ayo.scheduler.batching.engine_scheduler import BatchRecord, QueueFull
from ayo.scheduler.runtime.graph_run import DeadlineExceeded, GraphRun, answer_nodes
from ayo.scheduler.runtime.plan_costs import PlanCosts
from ayo.scheduler.sim.simulation import VirtualClockLoop
from ayo.workflow import InputShape, Workflow

if TYPE_CHECKING:
    from ayo.engines.llm.outputs import DecodeEnd, DecodePiece
    from ayo.engines.llm.sampling import SamplingParams
    from ayo.runtime.defaults import EngineOptions

_ANSWER = {COMPLETION.name: "completion"}  # the output a workflow streams (default "answer")

log = logging.getLogger(__name__)


def _passes(optimize: bool | Iterable[str]) -> Optimize:
    """``optimize`` as a plan-cache key: a bool as it is, pass names as a checked frozenset."""
    return optimize if isinstance(optimize, bool) else pass_set(optimize)


@dataclass(frozen=True)
class QueryResult:
    """A finished query: ``outputs`` by name, ``latency_ms`` end to end, its ``trace``."""

    app: str
    query_id: int
    outputs: dict[str, Any]
    latency_ms: float
    trace: Trace


@dataclass(frozen=True)
class StreamEvent:
    """From :meth:`App.stream`: answer text as it is written (``delta``), then the ``result``."""

    delta: str = ""
    result: QueryResult | None = None


class App:
    """Engines, workflows, plan cache, metrics; see the module doc.

    Args:
        profiles: engine profiles (by engine name or kind) for the passes and critical-path
            estimates; defaults per kind otherwise.
        policy: default batching policy of engines registered without a config.
        clock: seconds, monotonic; default: ``time.monotonic`` (asyncio's clock), or the loop's
            virtual clock when running on ``VirtualClockLoop`` (simulation).
        builtin_apps: register the built-in apps (``ayo.apps``).
        max_queries: queries in flight at once (app queries and OpenAI completions alike);
            more wait for a slot in arrival order, under their deadline. None: no limit.
        max_waiting: queries that may wait for a slot; beyond it, and for a caller that asks
            not to wait (``wait=False``) when no slot is free, ``QueueFull`` at once (HTTP
            429). None: no limit.
    """

    def __init__(
        self,
        *,
        profiles: Mapping[str, EngineProfile] | None = None,
        policy: str = "critical_path",
        clock: Callable[[], float] | None = None,
        builtin_apps: bool = True,
        max_queries: int | None = None,
        max_waiting: int | None = None,
    ) -> None:
        if max_queries is not None and max_queries < 1:
            raise ValueError(f"max_queries must be >= 1 or None, got {max_queries}")
        if max_waiting is not None and max_waiting < 0:
            raise ValueError(f"max_waiting must be >= 0 or None, got {max_waiting}")
        self.max_queries = max_queries
        self.max_waiting = max_waiting
        self._slots = asyncio.Semaphore(max_queries) if max_queries else None
        self.in_flight = 0
        self.waiting = 0  # queries waiting for a slot
        self.closing: list[Callable[[], None]] = []  # run by close(), after the engines stop
        self.profiles = dict(profiles or {})
        self._clock_option = clock
        self._clock: Callable[[], float] = clock or time.monotonic
        self.engines = EngineSet(self._on_batch, self._clock, policy)
        self.metrics = AppMetrics(self.engines.queue_depths)
        self._workflows: dict[str, AppTemplate | Workflow] = dict(APPS) if builtin_apps else {}
        self._internal: dict[str, Workflow] = {w.name: w for w in (COMPLETION, EMBEDDING)}
        self._plans: PlanCache | None = None
        self._costs: dict[int, tuple[Plan, PlanCosts]] = {}
        self._traces: dict[int, list[Span]] = {}  # query id -> its trace's spans
        self._ids = itertools.count(1)

    # -- registration ------------------------------------------------------------------------
    def add_engine(
        self,
        name: str,
        engine: Any | Sequence[Any],
        *,
        config: SchedulerConfig | None = None,
        placement: Placement | Sequence[Placement] | None = None,
        kind: str | None = None,
    ) -> None:
        """Register ``engine`` (or a list of instances) under ``name``, the name plans use.
        An engine declares its ``kind`` and implements that kind's protocol
        (``ayo.scheduler.ir.engine_api``); TypeError otherwise.

        With ``placement`` (an :class:`ayo.cluster.Placement`, or a list: replicas behind one
        scheduler), ``engine`` is a factory with the ``kind`` it builds: called here for a local
        instance, on the chosen Ray node for a remote one (``ayo.cluster.remote.RemoteEngine``)."""
        if placement is not None:
            if not callable(engine) or kind is None:
                raise ValueError(
                    f"engine {name!r}: with placement=, give a factory that builds the engine "
                    "and its kind= (llm, embedder, index, keyword, reranker)"
                )
            engine = place(name, engine, placement, kind)
        elif kind is not None:
            raise ValueError(
                f"engine {name!r}: kind= goes with placement=; an engine declares its own"
            )
        self.engines.add(name, engine, config=config)
        self._plans = None  # plans know which engines share a resource

    def add_workflow(self, workflow: AppTemplate | Workflow) -> None:
        """Register a workflow (or an app template) under its name."""
        self._workflows[workflow.name] = workflow

    @property
    def workflows(self) -> list[str]:
        return sorted(self._workflows)

    def workflow(self, name: str) -> AppTemplate | Workflow:
        """The workflow (or app template) registered as ``name``; KeyError lists the names."""
        return self._workflow(name)

    def use_profiles(self, profiles: Mapping[str, EngineProfile]) -> None:
        """Plan with these engine profiles from now on (measured ones, see ``ayo.runtime.profiling``):
        the plan cache and the per-plan costs the critical-path policy reads start afresh."""
        self.profiles = dict(profiles)
        self._plans = None
        self._costs.clear()

    @property
    def plans(self) -> PlanCache:
        if self._plans is None:
            has_llm = "llm" in self.engines.kinds()
            tokenizer = self.engines.instances("llm")[0].tokenizer if has_llm else RegexTokenizer()
            self._plans = PlanCache(self.profiles, tokenizer, resources=self.engines.resources())
        return self._plans

    def plan(
        self, name: str, inputs: Mapping[str, Any], optimize: bool | Iterable[str] = True
    ) -> Plan:
        """The plan a query of workflow ``name`` with ``inputs`` runs (from the plan cache)."""
        return self.plans.get(
            self._workflow(name), InputShape.of(inputs), optimize=_passes(optimize)
        )

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        """Start the engine schedulers (done by the first query otherwise)."""
        if self.engines.started:
            return
        if self._clock_option is None:  # asyncio's loops tell time.monotonic(); a simulated one not
            loop = asyncio.get_running_loop()
            self._clock = loop.time if isinstance(loop, VirtualClockLoop) else time.monotonic
            self.engines.clock = self._clock
        # the schedulers first: they give each LLM its step order before it starts (a remote
        # one is built with it, and rebuilt with it when Ray restarts its actor)
        self.engines.build()
        try:
            await self.engines.start_instances()
        except BaseException:
            await self.engines.stop()
            raise

    async def close(self) -> None:
        """Stop the schedulers (pending requests fail) and the engines' workers, then run the
        ``closing`` callbacks (e.g. the default engines' store is persisted)."""
        started = self.engines.started
        await self.engines.stop()
        if started:
            await self.engines.stop_instances()
        while self.closing:
            await asyncio.to_thread(self.closing.pop())

    async def __aenter__(self) -> App:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- queries -----------------------------------------------------------------------------
    def run(
        self,
        name: str,
        inputs: Mapping[str, Any],
        *,
        optimize: bool | Iterable[str] = True,
        deadline: float | None = None,
        wait: bool = True,
    ) -> Coroutine[Any, Any, QueryResult]:
        """Run workflow ``name`` on ``inputs``: ``await app.run(...)`` gives the
        :class:`QueryResult` (a plain method returning the query's coroutine, so awaiting it
        adds no frame to every resume of the query).

        Args:
            optimize: run the optimized plan (``False``: the module-by-module one; pass names,
                e.g. ``{"prune", "split"}``: a plan optimized by those alone, see
                ``ayo.passes.PASSES``).
            deadline: seconds from now; past it the query fails with ``DeadlineExceeded``.
            wait: when ``max_queries`` queries are in flight, wait for a slot (else raise
                ``QueueFull`` at once).

        Raises:
            KeyError: unknown workflow. ``PlanError``: inputs that do not fit it.
            ``ValueError``: an unknown pass name.
            ``ExecutionError``: a primitive failed (named in the message, cause chained).
        """
        # awaited by the caller
        return self._run(name, inputs, _passes(optimize), deadline, None, wait)

    async def complete(
        self,
        prompt: list[int],
        params: SamplingParams,
        *,
        deadline: float | None = None,
        wait: bool = True,
        on_piece: Callable[[DecodePiece], None] | None = None,
    ) -> DecodeEnd:
        """Decode ``params`` after ``prompt`` (token ids) on the LLM named ``llm``: the OpenAI
        endpoints' one-primitive workflow (``ayo.apps.completion``), run as any query is (the
        same admission, the LLM's step order, metrics and traces). ``on_piece`` gets each
        :class:`DecodePiece` as it is written (its text, and its log-probabilities when
        ``params.logprobs`` asks). Returns the decode's end: text, finish reason, token counts."""
        inputs = {"prompt": prompt, "params": params}
        result = await self._run(COMPLETION.name, inputs, True, deadline, on_piece, wait)
        return result.outputs["completion"]

    async def stream(
        self,
        name: str,
        inputs: Mapping[str, Any],
        *,
        optimize: bool | Iterable[str] = True,
        deadline: float | None = None,
        wait: bool = True,
    ) -> AsyncIterator[StreamEvent]:
        """Like :meth:`run`, yielding the answer's text as it is decoded, then the result.
        Leaving the loop early cancels the query (and releases its engine state)."""
        pieces: asyncio.Queue[Any] = asyncio.Queue()
        task = asyncio.ensure_future(
            self._run(name, inputs, _passes(optimize), deadline, pieces.put_nowait, wait)
        )
        task.add_done_callback(lambda _: pieces.put_nowait(None))
        try:
            while (piece := await pieces.get()) is not None:
                yield StreamEvent(delta=piece.text)
            yield StreamEvent(result=task.result())
        finally:
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def _run(
        self,
        name: str,
        inputs: Mapping[str, Any],
        optimize: Optimize,
        deadline: float | None,
        on_piece: Callable[[Any], None] | None,
        wait: bool,
    ) -> QueryResult:
        """One query, holding one of the ``max_queries`` slots (one coroutine for all of it:
        every engine result the query awaits resumes this frame stack)."""
        if deadline is not None and deadline <= 0:
            raise ValueError(f"deadline must be > 0 seconds, got {deadline}")
        target = self._workflow(name)
        arrived = self._clock()
        deadline_at = None if deadline is None else arrived + deadline
        slots = self._slots
        if slots is not None:
            await self._admit(slots, wait, deadline_at)
        self.in_flight += 1
        try:
            if not self.engines.started:
                await self.start()
            plan = self.plans.for_inputs(target, inputs, optimize)
            query_id = next(self._ids)
            start = self._clock()
            trace = Trace(origin=start)
            spans = self._traces[query_id] = trace.spans
            run = GraphRun(
                plan,
                inputs,
                self.engines.proxies,
                query_id=query_id,
                costs=self._plan_costs(plan),
                deadline=deadline_at,
                stream_nodes=answer_nodes(plan, _ANSWER.get(name, "answer"))
                if on_piece
                else frozenset(),
                on_piece=on_piece,
                on_control=lambda node, t0, t1, ok: spans.append(
                    Span(query_id, node.id, "control", t0, t0, t1, 1, ok)
                ),
                on_span=lambda node_id, where, t0, t1, ok: spans.append(
                    Span(query_id, node_id, where, t0, t0, t1, 1, ok)
                ),
                clock=self._clock,
            )
            try:
                outputs = await run.run()
            except BaseException as exc:
                self.metrics.query_failed(name, exc)
                raise
            finally:
                del self._traces[query_id]
            seconds = self._clock() - start
            self.metrics.query_done(name, seconds)
            return QueryResult(name, query_id, outputs, seconds * 1e3, trace)
        finally:
            self.in_flight -= 1
            if slots is not None:
                slots.release()

    @contextlib.asynccontextmanager
    async def slot(self, deadline: float | None = None, wait: bool = True) -> AsyncIterator[None]:
        """Hold one of the ``max_queries`` slots for work that is not a query but shares the
        engines (a collection search): admitted as a query is (``QueueFull``, or
        ``DeadlineExceeded`` after ``deadline`` seconds of waiting)."""
        slots = self._slots
        if slots is not None:
            deadline_at = None if deadline is None else self._clock() + deadline
            await self._admit(slots, wait, deadline_at)
        self.in_flight += 1
        try:
            yield
        finally:
            self.in_flight -= 1
            if slots is not None:
                slots.release()

    async def embed(
        self, texts: list[str], *, deadline: float | None = None, wait: bool = True
    ) -> list[Any]:
        """One vector per text from the embedder named ``embedder``: the ``/v1/embeddings``
        workflow (``ayo.apps.completion.EMBEDDING``), run as any query is."""
        result = await self._run(EMBEDDING.name, {"texts": list(texts)}, True, deadline, None, wait)
        return result.outputs["vectors"]

    async def _admit(self, slots: asyncio.Semaphore, wait: bool, deadline_at: float | None) -> None:
        """Take a query slot: at once if one is free; else wait in line, under the deadline,
        unless the caller asked not to wait or the line is full (``QueueFull``)."""
        if not slots.locked():
            await slots.acquire()
            return
        full = self.max_waiting is not None and self.waiting >= self.max_waiting
        if not wait or full:
            line = f" and {self.waiting} waiting" if full else ""
            raise QueueFull(
                f"{self.max_queries} queries are in flight{line} (App max_queries, "
                "max_waiting); retry later"
            )
        self.waiting += 1
        try:
            if deadline_at is None:
                await slots.acquire()
            else:
                budget = deadline_at - self._clock()
                try:
                    await asyncio.wait_for(slots.acquire(), max(budget, 0.0))
                except asyncio.TimeoutError:
                    raise DeadlineExceeded("(waiting for a slot)", budget * 1e3, []) from None
        finally:
            self.waiting -= 1

    def _workflow(self, name: str) -> AppTemplate | Workflow:
        target = self._workflows.get(name) or self._internal.get(name)
        if target is None:
            raise KeyError(f"unknown workflow {name!r}; registered: {self.workflows}")
        return target

    def _plan_costs(self, plan: Plan) -> PlanCosts:
        entry = self._costs.get(id(plan))
        if entry is None or entry[0] is not plan:
            missing = sorted({n.engine for n in plan.nodes if n.engine} - set(self.engines.proxies))
            if missing:
                raise KeyError(
                    f"workflow {plan.name!r} needs engines {missing}; registered: "
                    f"{sorted(self.engines.proxies)} (add them with App.add_engine)"
                )
            entry = self._costs[id(plan)] = (plan, PlanCosts.of(plan, self.profiles))
        return entry[1]

    def _on_batch(self, record: BatchRecord) -> None:
        primitives = record.requests
        self.metrics.batch(record)
        traces, size, ok = self._traces, len(record.requests), record.ok
        engine, started, ended = record.engine, record.started, record.ended
        for r in primitives:
            spans = traces.get(r.query_id)
            if spans is not None:
                spans.append(Span(r.query_id, r.node_id, engine, r.enqueued_at, started, ended,
                                  size, ok))  # fmt: skip

    # -- defaults ----------------------------------------------------------------------------
    @classmethod
    def fake(cls, delay_s: float = 0.0, **options: Any) -> App:
        """An App on the deterministic fake engines (``ayo.scheduler.sim.fakes``)."""
        from ayo.scheduler.sim.fakes import fake_engines

        app = cls(**options)
        for name, engine in fake_engines(delay_s).items():
            app.add_engine(name, engine)
        return app

    @classmethod
    def default(
        cls,
        data_dir: str | None = None,
        collection: str = "wiki",
        *,
        engines: EngineOptions | None = None,
        **options: Any,
    ) -> App:
        """An App on the embedded engines (``ayo.runtime.defaults``: LLM, embedder, reranker, indexes
        over the RetrievalStore in ``data_dir``, searching ``collection`` when a query brings no
        documents; ``engines`` sets the other options). Loads models (seconds). The plans read
        the engine profile measured on this machine when one is stored in the data directory
        (see :mod:`ayo.runtime.profiling`), else the constants. Raises RuntimeError naming what is
        missing."""
        import dataclasses

        from ayo.runtime.defaults import EngineOptions, load_default_engines

        base = engines or EngineOptions()
        loaded = load_default_engines(
            dataclasses.replace(base, data_dir=data_dir or base.data_dir, collection=collection)
        )
        if "profiles" not in options:
            from ayo.runtime.profiling import engine_profile_path, stored_profiles

            path = engine_profile_path(loaded.options.data_path, loaded.options.model, loaded.llm)
            options["profiles"] = stored_profiles(path)
        app = cls(**options)
        for name, engine in loaded.by_name().items():
            app.add_engine(name, engine)
        app.closing.append(loaded.close)
        return app
