"""Engine instances in Ray actors, scheduled by the same runtime (the optional ``ray`` extra).

The asyncio runtime, its graph scheduler and the engine schedulers stay in the driver; an
engine registered as a :class:`RemoteEngine` is built *on the chosen node* by a factory (so its
model is loaded there), hosted in one Ray actor (:class:`EngineHost`), and called per batch::

    from ayo.remote import RemoteEngine, start_loopback_ray

    start_loopback_ray()                     # or ray.init(address=...) for a real cluster
    app.add_engine("embedder", RemoteEngine(make_embedder, "embedder", resources={"cpu_node": 1}))

An LLM actor keeps its sequences' KV resident: the driver holds only sequence handles, so a
partial prefill or a decode on a live sequence goes to the actor holding it, and decoded pieces
stream back (a Ray streaming generator). If the actor dies, calls on it fail with
:class:`RemoteEngineError` naming the engine and its node (only the queries with work there
fail); Ray restarts it (``max_restarts``) and the next calls build the engine afresh there.

Ray's default start-up reaches beyond the machine (a UDP connect to 8.8.8.8 to pick an address,
the dashboard asking a cloud-metadata address). :func:`loopback_environment` is the start-up
that stays on 127.0.0.1 (see ``shared/ENVIRONMENT.md``); tests and benchmarks use only it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import logging
import os
import sys
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

from ayo.engine_set import KINDS

log = logging.getLogger(__name__)


def _ray() -> Any:
    try:
        import ray
    except ImportError as exc:  # the extra is optional: say how to get it
        raise RuntimeError("remote engines need Ray: pip install -e '.[ray]'") from exc
    return ray


def _loopback_node_address() -> None:
    """Ray picks its node address by a UDP connect to 8.8.8.8 unless
    ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``, which it reads once, when ``ray`` is imported: set
    it before that, or, when ``ray`` is already imported, the constant it was read into."""
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    constants = sys.modules.get("ray._private.ray_constants")
    if constants is not None:
        constants.ENABLE_RAY_CLUSTER = False


class RemoteEngineError(RuntimeError):
    """A remote engine's actor failed or died; names the engine and the node it ran on."""


@contextlib.contextmanager
def loopback_environment(root: str | Path | None = None) -> Iterator[dict[str, str]]:
    """The environment under which Ray starts on 127.0.0.1 only; start Ray's processes (and
    connect to them) inside it. It sets the node address to loopback, no auth token file, no
    usage reporting and Ray's temporary files under ``root`` (these stay set), and a ``HOME``
    holding a local-provider bootstrap config, which Ray reads when it starts (restored on exit,
    so the driver's own data directories do not move; Ray's processes keep it)."""
    root = Path(root or tempfile.mkdtemp(prefix="ayo-ray-"))
    (root / "ray").mkdir(parents=True, exist_ok=True)
    (root / "ray_bootstrap_config.yaml").write_text("provider: {type: local}\n")
    env = {
        "RAY_TMPDIR": str(root),
        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
        "RAY_AUTH_MODE": "disabled",
        "RAY_USAGE_STATS_ENABLED": "0",
        # with reporting off, a cluster not started by ray.init still pings the report URL once
        # ("usage disabled"): point it at a closed loopback port
        "RAY_USAGE_STATS_REPORT_URL": "http://127.0.0.1:9/",
    }
    os.environ.update(env)
    _loopback_node_address()
    home = os.environ.get("HOME")
    os.environ["HOME"] = str(root)
    try:
        yield {**env, "HOME": str(root)}
    finally:
        if home is None:
            os.environ.pop("HOME", None)
        else:
            os.environ["HOME"] = home


LOOPBACK = "127.0.0.1"


def start_loopback_ray(num_cpus: int = 2, **init_options: Any) -> Any:
    """``ray.init`` of a one-node cluster that talks only over loopback (returns Ray's context)."""
    ray = _ray()
    with loopback_environment() as env:
        options = {"num_cpus": num_cpus, "include_dashboard": False,
                   "_temp_dir": env["RAY_TMPDIR"], "_node_ip_address": LOOPBACK}  # fmt: skip
        return ray.init(**{**options, **init_options})


def start_loopback_cluster(
    workers: list[dict[str, Any]], head_cpus: int = 1, object_store_mb: int = 100
) -> Any:
    """A cluster of Ray nodes on this machine, all on 127.0.0.1 (``ray.cluster_utils.Cluster``:
    a head, then one node per ``workers`` entry, e.g. ``{"num_cpus": 2, "resources":
    {"worker": 1}}``), with this process connected as its driver. Returns the cluster (call
    ``ray.shutdown()`` then its ``shutdown()``). For tests and benchmarks of remote engines."""
    ray = _ray()
    from ray.cluster_utils import Cluster

    store = object_store_mb * 2**20
    with loopback_environment() as env:
        head = {"num_cpus": head_cpus, "include_dashboard": False, "temp_dir": env["RAY_TMPDIR"],
                "object_store_memory": store, "node_ip_address": LOOPBACK}  # fmt: skip
        cluster = Cluster(initialize_head=True, head_node_args=head)
        for node in workers:
            cluster.add_node(**{"object_store_memory": store, "node_ip_address": LOOPBACK, **node})
        ray.init(address=cluster.address, _node_ip_address=LOOPBACK)
    return cluster


class EngineHost:
    """Runs in the actor: builds the engine with ``factory`` (on this node), gives it the
    runtime's step ``order`` (an LLM), starts it on first use, and serves the engine protocols'
    calls. Ray restarts an actor by running this again with the same arguments."""

    def __init__(self, factory: Callable[[], Any], order: Any = None) -> None:
        self.engine = factory()
        if order is not None and hasattr(self.engine, "set_step_order"):
            self.engine.set_step_order(order)
        self._started = False
        self.pid = os.getpid()  # a restarted actor is a new process

    async def _ready(self) -> Any:
        if not self._started:
            start = getattr(self.engine, "start", None)
            if start is not None:
                await start()
            self._started = True
        return self.engine

    async def info(self) -> dict[str, Any]:
        """Where this actor runs (node, process) and whether its engine has started."""
        node = _ray().get_runtime_context().get_node_id()
        return {"node": node, "pid": self.pid, "started": self._started}

    async def apply(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(engine, *args)`` here, next to the engine (operations the protocols lack)."""
        result = fn(await self._ready(), *args)
        return await result if inspect.isawaitable(result) else result

    async def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        engine = await self._ready()
        fn = getattr(engine, method)
        if "info" in kwargs and (kwargs["info"] is None or not _takes_info(fn)):
            del kwargs["info"]  # an engine without a step order (the fakes) takes none
        result = fn(*args, **kwargs)
        if hasattr(result, "__await__"):
            result = await result
        return result

    async def decode(self, seq: Any, params: Any, info: Any = None) -> AsyncIterator[str]:
        engine = await self._ready()
        if info is None or not _takes_info(engine.decode):
            stream = engine.decode(seq, params)
        else:
            stream = engine.decode(seq, params, info=info)
        async with contextlib.aclosing(stream) as pieces:
            async for piece in pieces:
                yield piece

    async def tokenizer(self) -> tuple[bool, Any]:
        """The LLM's tokenizer for the driver's plans (picklable): (True, the Hugging Face
        tokenizer) for an ``LLMAdapter`` over our engine, else (False, the engine's own
        ``tokenizer``, which already has the plans' ``encode``/``decode``)."""
        engine = await self._ready()
        inner = getattr(engine, "engine", None)
        if inner is not None and hasattr(inner, "tokenizer"):
            return True, inner.tokenizer
        return False, engine.tokenizer

    async def stop(self) -> None:
        if self._started and hasattr(self.engine, "stop"):
            await self.engine.stop()
        self._started = False


@functools.cache
def _function_takes_info(fn: Callable[..., Any]) -> bool:
    return "info" in inspect.signature(fn).parameters


def _takes_info(method: Callable[..., Any]) -> bool:
    """Whether ``method`` takes ``info=`` (read once per function, not per call)."""
    return _function_takes_info(getattr(method, "__func__", method))


class _LocalTokenizer:
    """What ``EngineTokenizer`` needs of an engine, over a tokenizer fetched from the actor
    (the actor's engine checks the ids again when they are prefilled)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer

    def encode(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]


class RemoteEngine:
    """An engine of ``kind`` built by ``factory`` in a Ray actor; the driver-side object the
    App registers (``App.add_engine(name, RemoteEngine(...))``).

    Args:
        factory: builds the engine, *on the actor's node* (a picklable callable: a function or
            a ``functools.partial``), e.g. ``functools.partial(default_llm, dtype="float32")``.
        kind: one of ``llm``, ``embedder``, ``index``, ``keyword``, ``reranker``.
        resources: Ray custom resources that choose the node (``{"worker": 1}``).
        num_cpus: CPUs the actor reserves (its engine's threads should match).
        max_restarts: how often Ray rebuilds a dead actor.
        start_timeout_s: how long ``start`` waits for the actor to be placed and built (a
            resource no node has leaves it pending forever otherwise).
    """

    def __init__(
        self,
        factory: Callable[[], Any],
        kind: str,
        *,
        resources: dict[str, float] | None = None,
        num_cpus: float = 1,
        max_restarts: int = 1,
        start_timeout_s: float = 300.0,
    ) -> None:
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
        self.factory = factory
        self.kind = kind
        self.resources = dict(resources or {})
        self.num_cpus = num_cpus
        self.max_restarts = max_restarts
        self.start_timeout_s = start_timeout_s
        self.engine_kind = kind  # what App.add_engine registers it as
        self.actor: Any = None
        self.node_id = ""
        self.pid = 0  # the actor's process: a new one after a restart
        self.restarts = 0  # restarts seen (a new process answering)
        self.failures = 0  # calls failed because the actor failed or died
        self.last_error = ""
        self._tokenizer: Any = None
        self._order: Any = None

    def __repr__(self) -> str:
        return f"RemoteEngine({self.kind}, resources={self.resources}, node={self.node_id[:12]})"

    # -- lifecycle ----------------------------------------------------------------------------
    async def start(self) -> None:
        ray = _ray()
        host = ray.remote(EngineHost).options(
            num_cpus=self.num_cpus,
            resources=self.resources or None,
            max_restarts=self.max_restarts,
            max_task_retries=0,  # a call that died with its actor fails; the next one restarts
        )
        self.actor = host.remote(self.factory, self._order)
        try:
            info = await asyncio.wait_for(self._remote("info"), self.start_timeout_s)
        except asyncio.TimeoutError:
            ray.kill(self.actor)
            self.actor = None
            raise RemoteEngineError(
                f"remote {self.kind} engine: no node took it within {self.start_timeout_s:g} s "
                f"(needs {self.num_cpus} CPUs and resources {self.resources}; custom resources "
                "are consumed: give each actor a fraction, e.g. {'worker': 0.1})"
            ) from None
        self.node_id, self.pid = info["node"], info["pid"]
        if self.kind == "llm":
            from ayo.adapters import EngineTokenizer

            hf, tokenizer = await self._remote("tokenizer")
            self._tokenizer = EngineTokenizer(_LocalTokenizer(tokenizer)) if hf else tokenizer
        log.info("remote %s engine on node %s", self.kind, self.node_id)

    async def stop(self) -> None:
        if self.actor is None:
            return
        try:
            await self._remote("stop")
        except Exception as exc:  # a dead actor has nothing left to stop; kill it anyway
            log.debug("stopping remote %s engine: %s", self.kind, exc)
        _ray().kill(self.actor)
        self.actor = None

    async def _remote(self, method: str, *args: Any, **kwargs: Any) -> Any:
        if self.actor is None:
            raise RemoteEngineError(f"remote {self.kind} engine is not started")
        try:
            return await getattr(self.actor, method).remote(*args, **kwargs)
        except Exception as exc:
            raise self._error(exc) from exc

    def _error(self, exc: Exception) -> Exception:
        ray = _ray()
        if isinstance(exc, ray.exceptions.RayTaskError):
            return exc.as_instanceof_cause()  # the engine's own error, as raised there
        self.failures += 1
        self.last_error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        return RemoteEngineError(
            f"remote {self.kind} engine on node {self.node_id or '?'} failed: "
            f"{type(exc).__name__}: {exc}"
        )

    async def health(self, timeout_s: float = 2.0) -> dict[str, Any]:
        """The instance as ``/health`` shows it: ``state`` is ``alive`` (its actor answered
        within ``timeout_s``), ``down`` (dead, restarting or not answering) or ``stopped``;
        with its node, process, the restarts seen and the calls that failed on it."""
        state = "stopped"
        if self.actor is not None:
            try:  # straight to the actor: a failed ping is no failed call
                info = await asyncio.wait_for(self._info(), timeout_s)
            except asyncio.TimeoutError:
                state, self.last_error = "down", f"no answer to a ping within {timeout_s:g} s"
            except Exception as exc:  # dead, or restarting
                state, self.last_error = "down", f"{type(exc).__name__} (ping)"
            else:
                state = "alive"
                if info["pid"] != self.pid:
                    self.restarts += 1
                    self.node_id, self.pid = info["node"], info["pid"]
        return {"kind": self.kind, "where": "remote", "state": state, "node": self.node_id,
                "pid": self.pid, "resources": self.resources, "restarts": self.restarts,
                "failures": self.failures, "last_error": self.last_error}  # fmt: skip

    async def _info(self) -> dict[str, Any]:
        return await self.actor.info.remote()

    async def apply(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(engine, *args)`` in the actor, next to the engine (``fn`` must be picklable:
        a module-level function); for operations the engine protocols lack."""
        return await self._remote("apply", fn, *args)

    async def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return await self._remote("call", method, *args, **kwargs)

    # -- retrieval engines ------------------------------------------------------------------
    async def embed(self, texts: list[str]) -> list[Any]:
        return await self._call("embed", texts)

    async def search(self, *args: Any) -> list[list[Any]]:
        return await self._call("search", *args)  # (collection, vectors, k) or (queries, k)

    async def ingest(self, collection: str, docs: list[Any], vectors: list[Any]) -> None:
        await self._call("ingest", collection, docs, vectors)

    async def drop(self, collection: str) -> None:
        await self._call("drop", collection)

    async def rerank(self, query: str, passages: list[Any], top_k: int) -> list[Any]:
        return await self._call("rerank", query, passages, top_k)

    # -- the LLM: sequences live in the actor ------------------------------------------------
    @property
    def tokenizer(self) -> Any:
        if self._tokenizer is None:
            raise RemoteEngineError("the remote LLM's tokenizer arrives when the engine starts")
        return self._tokenizer

    async def open(self) -> Any:
        return await self._call("open")

    def set_step_order(self, order: Any) -> None:
        """The runtime's policy orders the remote engine's steps: given to the actor when it is
        built, and again by Ray at a restart (the runtime sets it before it starts engines)."""
        self._order = order

    async def prefill(self, seq: Any, tokens: list[int], info: Any = None) -> None:
        await self._call("prefill", seq, list(tokens), info=info)

    async def decode(self, seq: Any, params: Any, info: Any = None) -> AsyncIterator[str]:
        if self.actor is None:
            raise RemoteEngineError(f"remote {self.kind} engine is not started")
        stream = self.actor.decode.options(num_returns="streaming").remote(seq, params, info)
        finished = False
        try:
            async for ref in stream:
                yield await ref
            finished = True
        except Exception as exc:
            raise self._error(exc) from exc
        finally:
            if not finished:  # the caller stopped reading (a stop string, a cancelled query):
                with contextlib.suppress(Exception):  # stop the decode in the actor too
                    _ray().cancel(stream)

    async def score(self, seq: Any, candidates: list[str], info: Any = None) -> list[float]:
        return await self._call("score", seq, list(candidates), info=info)

    async def close(self, seq: Any) -> None:
        await self._call("close", seq)
