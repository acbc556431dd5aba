"""Engine instances in Ray actors, scheduled by the same runtime (the optional ``ray`` extra).

The asyncio runtime, its graph scheduler and the engine schedulers stay in the driver; an
engine registered as a :class:`RemoteEngine` is built *on the chosen node* by a factory (so its
model is loaded there), hosted in one Ray actor (:class:`EngineHost`), and called per batch::

    from ayo.cluster.remote import RemoteEngine, start_loopback_ray

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
import inspect
import logging
import os
import sys
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from ayo.engines.llm.outputs import DecodeEnd, DecodePiece
from ayo.engines.llm.sampling import SamplingParams
from ayo.engines.records import Doc, RerankRequest
from ayo.scheduler import KINDS

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
        if self.engine.kind == "llm":
            self.engine.set_step_order(order)
        self._started = False
        self.pid = os.getpid()  # a restarted actor is a new process

    async def _ready(self) -> Any:
        if not self._started:
            await self.engine.start()
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
        """``engine.method(*args, **kwargs)``, awaited when it returns an awaitable (a plain
        method such as ``prefill_when_idle`` returns None)."""
        result = getattr(await self._ready(), method)(*args, **kwargs)
        return await result if inspect.isawaitable(result) else result

    async def kv_usage(self) -> float:
        return (await self._ready()).kv_usage()

    async def decode(
        self, seq: Any, params: SamplingParams, info: Any
    ) -> AsyncIterator[DecodePiece | DecodeEnd]:
        """The pieces, then the stream's end (a Ray streaming generator)."""
        stream = (await self._ready()).decode(seq, params, info=info)
        async with contextlib.aclosing(stream) as pieces:
            async for piece in pieces:
                yield piece
        yield stream.end

    async def tokenizer(self) -> Any:
        """The LLM's tokenizer for the driver's plans (picklable: an ``LLMEngine``'s is a
        ``ChatTokenizer`` over a Hugging Face tokenizer)."""
        return (await self._ready()).tokenizer

    async def stop(self) -> None:
        if self._started:
            await self.engine.stop()
        self._started = False


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
        self.actor: Any = None
        self.node_id = ""
        self.pid = 0  # the actor's process: a new one after a restart
        self.restarts = 0  # restarts seen (a new process answering)
        self.failures = 0  # calls failed because the actor failed or died
        self.last_error = ""
        self._tokenizer: Any = None
        self._order: Any = None
        self._kv_usage = 0.0  # the actor's, as of its last open or close
        self._pending: set[asyncio.Task[None]] = set()  # background calls nobody awaits

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
            self._tokenizer = await self._remote("tokenizer")
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
    async def embed(self, texts: list[str], *, info: Any = None) -> Any:
        return await self._call("embed", texts, info=info)

    async def search(self, *args: Any, info: Any = None) -> list[list[Doc]]:
        # (collection, vectors, k) for a vector index, (queries, k) for a keyword index
        return await self._call("search", *args, info=info)

    async def ingest(
        self, collection: str, docs: list[Doc], vectors: Any, *, info: Any = None
    ) -> None:
        await self._call("ingest", collection, docs, vectors, info=info)

    async def drop(self, collection: str) -> None:
        await self._call("drop", collection)

    async def rerank(
        self, requests: Sequence[RerankRequest], *, info: Any = None
    ) -> list[list[Doc]]:
        return await self._call("rerank", list(requests), info=info)

    # -- the LLM: sequences live in the actor ------------------------------------------------
    @property
    def tokenizer(self) -> Any:
        if self._tokenizer is None:
            raise RemoteEngineError("the remote LLM's tokenizer arrives when the engine starts")
        return self._tokenizer

    def set_step_order(self, order: Any) -> None:
        """The runtime's policy orders the remote engine's steps: given to the actor when it is
        built, and again by Ray at a restart (the runtime sets it before it starts engines)."""
        self._order = order

    def kv_usage(self) -> float:
        """The actor's KV usage as of its last open or close (replicas are balanced by it)."""
        return self._kv_usage

    async def _refresh_kv_usage(self) -> None:
        with contextlib.suppress(Exception):  # a load figure: a dead actor shows elsewhere
            self._kv_usage = await self.actor.kv_usage.remote()

    async def open(self) -> Any:
        seq = await self._call("open")
        await self._refresh_kv_usage()
        return seq

    async def prefill(self, seq: Any, tokens: list[int], *, info: Any = None) -> None:
        await self._call("prefill", seq, list(tokens), info=info)

    def prefill_when_idle(self, seq: Any, tokens: list[int], *, info: Any = None) -> None:
        """Sent at once, not awaited: the actor's engine computes the tokens when idle (a
        refused prefill fails the sequence, and its next call here raises that error)."""
        if self.actor is None:
            raise RemoteEngineError(f"remote {self.kind} engine is not started")
        ref = self.actor.call.remote("prefill_when_idle", seq, list(tokens), info=info)
        task = asyncio.ensure_future(self._settle(ref))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _settle(self, ref: Any) -> None:
        try:
            await ref
        except Exception as exc:  # the actor died: its sequences' next calls fail too
            log.debug("remote background prefill: %s", exc)

    def decode(self, seq: Any, params: SamplingParams, *, info: Any = None) -> RemoteDecode:
        if self.actor is None:
            raise RemoteEngineError(f"remote {self.kind} engine is not started")
        return RemoteDecode(self, seq, params, info)

    async def score(self, seq: Any, candidates: list[str], *, info: Any = None) -> list[float]:
        return await self._call("score", seq, list(candidates), info=info)

    async def close(self, seq: Any) -> None:
        await self._call("close", seq)
        await self._refresh_kv_usage()


class RemoteDecode:
    """A decode in a remote engine's actor: its pieces streamed back (a Ray streaming
    generator), ``end`` once they are over. Closing it early stops the actor's decode."""

    def __init__(self, remote: RemoteEngine, seq: Any, params: SamplingParams, info: Any) -> None:
        self._remote = remote
        self._refs = remote.actor.decode.options(num_returns="streaming").remote(seq, params, info)
        self.end: DecodeEnd | None = None

    def __aiter__(self) -> RemoteDecode:
        return self

    async def __anext__(self) -> DecodePiece:
        if self.end is not None:
            raise StopAsyncIteration
        try:
            item = await (await anext(self._refs))
        except StopAsyncIteration:
            raise
        except asyncio.CancelledError:
            await self.aclose()
            raise
        except Exception as exc:
            raise self._remote._error(exc) from exc
        if isinstance(item, DecodeEnd):
            self.end = item
            raise StopAsyncIteration
        return item

    async def aclose(self) -> None:
        """Stop the decode in the actor too (a stop string met, a cancelled query)."""
        if self.end is None:
            with contextlib.suppress(Exception):
                _ray().cancel(self._refs)
