"""Health, apps and plans, ingestion and collections, metrics, the OpenAPI document."""

from __future__ import annotations

import re
import shutil

import aiohttp
import pytest

from ayo.apps import APPS
from ayo.runtime.defaults import DEFAULT_RESOURCES, default_tokenizer
from ayo.runtime.plan_cache import PlanCache
from ayo.scheduler import plan_to_json
from ayo.workflow import InputShape
from tests.server.conftest import CORPUS_LIMIT


async def _json(url: str) -> dict:
    async with aiohttp.ClientSession() as s, s.get(url) as r:
        assert r.status == 200, await r.text()
        return await r.json()


async def test_health_lists_models_and_apps(server: object) -> None:
    health = await _json(server.url + "/health")
    assert health["status"] == "ok"
    assert health["models"][:2] == ["smollm2-135m-instruct", "all-minilm-l6-v2"]
    assert set(APPS) <= set(health["apps"]) and "app:naive_rag" in health["models"]
    assert health["embedded_at_startup"] == CORPUS_LIMIT  # a fresh data dir
    llm = health["llm"]  # the test server runs float32: weights fp32, as configured
    assert (llm["dtype"], llm["weights"], llm["weights_reason"]) == (
        "float32",
        "fp32",
        "as configured",
    )


async def test_apps_list_inputs_and_the_plans_the_cli_prints(server: object) -> None:
    apps = {a["name"]: a for a in (await _json(server.url + "/v1/apps"))["apps"]}
    assert set(APPS) | {"short_rag", "long_answer"} == set(apps)
    rag = apps["advanced_rag"]
    assert rag["inputs"] == [
        {"name": "question", "type": "string", "required": True},
        {"name": "documents", "type": "array of strings", "required": False},
    ]
    # the server's engines share resources as the default engines do (the judge is the LLM)
    shared = {k: v for k, v in server.state.app.engines.resources().items() if k != v}
    assert shared == DEFAULT_RESOURCES
    plans = PlanCache(tokenizer=default_tokenizer(), resources=DEFAULT_RESOURCES)
    for optimize in (True, False):
        served = await _json(f"{server.url}/v1/apps?optimize={str(optimize).lower()}")
        served = {a["name"]: a["plan"] for a in served["apps"]}
        for name, app in APPS.items():
            # a query of the required inputs, as `python -m ayo plan NAME --documents 0` (16
            # documents where they are required)
            sizes = {n: 16 if n == "documents" else 1 for n in app.required}
            expected = plans.get(app, InputShape.from_sizes(**sizes), optimize=optimize)
            assert served[name] == plan_to_json(expected), name


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz `dot` is not installed")
async def test_plan_svg_draws_both_plans(server: object) -> None:
    pictures = []
    async with aiohttp.ClientSession() as s:
        for query in ("", "?optimize=false"):
            async with s.get(f"{server.url}/v1/apps/advanced_rag/plan.svg{query}") as r:
                assert r.status == 200 and r.content_type == "image/svg+xml"
                pictures.append(await r.text())
    assert all(p.lstrip().startswith("<?xml") and "<svg" in p for p in pictures)
    assert pictures[0] != pictures[1]  # the optimized plan differs from the module-by-module one


async def test_ingest_list_and_retrieve(server: object) -> None:
    docs = [
        {"id": "zorblax", "title": "Zorblax",
         "text": "Zorblax is a purple gas giant orbiting the star Quenthari, discovered in 2091.",
         "metadata": {"source": "test"}},
        {"id": "quill", "text": "The quill pen was the main writing tool in Europe for centuries."},
    ]  # fmt: skip
    url = server.url + "/v1/collections/notes/documents"
    async with aiohttp.ClientSession() as s:
        async with s.post(url, json={"documents": docs}) as r:
            assert r.status == 200, await r.text()
            assert await r.json() == {"collection": "notes", "ingested": 2, "duplicates": 0,
                                      "chunks": 2, "truncated_chunks": 0}  # fmt: skip
        async with s.post(url, json={"documents": docs[:1]}) as r:
            assert (await r.json())["duplicates"] == 1
        async with s.post(url, json={"documents": docs[:1], "on_duplicate": "error"}) as r:
            assert r.status == 409 and "zorblax" in (await r.json())["error"]["message"]
        # and into the collection the apps search
        wiki = server.url + f"/v1/collections/{server.state.config.collection}/documents"
        async with s.post(wiki, json={"documents": docs[:1]}) as r:
            assert (await r.json())["ingested"] == 1
    collections = {
        c["name"]: c for c in (await _json(server.url + "/v1/collections"))["collections"]
    }
    assert collections["notes"]["documents"] == 2 and collections["notes"]["dim"] == 384
    assert collections["wiki"]["documents"] == CORPUS_LIMIT + 1
    one = await _json(server.url + "/v1/collections/notes")
    assert one["documents"] == 2 and one["vectors"] == 2
    body = {"inputs": {"question": "Which star does Zorblax orbit?"}}
    async with (
        aiohttp.ClientSession() as s,
        s.post(server.url + "/v1/apps/short_rag/query", json=body) as r,
    ):
        assert r.status == 200, await r.text()
        result = await r.json()
    assert result["outputs"]["docs"][0]["id"].startswith("zorblax#")
    assert "Quenthari" in result["outputs"]["docs"][0]["text"]


async def test_metrics_expose_the_key_series(server: object) -> None:
    """An app query and a chat completion both show in the per-primitive series: the chat
    completion is a query of the ``@completion`` workflow (one Generate primitive on the LLM)."""
    async with aiohttp.ClientSession() as s:
        body = {"inputs": {"question": "Who was Plato?"}}
        async with s.post(server.url + "/v1/apps/short_rag/query", json=body) as r:
            assert r.status == 200
        chat = {"model": "smollm2-135m-instruct", "max_tokens": 4,
                "messages": [{"role": "user", "content": "Hello"}]}  # fmt: skip
        async with s.post(server.url + "/v1/chat/completions", json=chat) as r:
            assert r.status == 200
        async with s.get(server.url + "/metrics") as r:
            assert r.status == 200 and r.content_type == "text/plain"
            text = await r.text()
    for series in (
        'ayo_queries_total{app="short_rag"}',
        'ayo_query_latency_seconds_bucket{app="short_rag"',
        'ayo_batch_size_bucket{engine="llm"',
        'ayo_primitive_latency_seconds_bucket{engine="embedder"',
        'ayo_engine_queue_depth{engine="llm"}',
        "ayo_llm_kv_usage_ratio",
        "ayo_llm_kv_blocks_total",
        "ayo_llm_prefix_cache_hit_rate",
        'ayo_llm_sequences{state="running"}',
        'ayo_server_in_flight{kind="query"}',
        'ayo_server_in_flight{kind="waiting"}',
        "ayo_corpus_embedded_at_startup",
        'ayo_queries_total{app="@completion"}',
        'ayo_primitive_latency_seconds_bucket{engine="llm",le="+Inf",op="Generate"}',
    ):
        assert series in text, series
    total = float(re.search(r"^ayo_llm_kv_blocks_total (\S+)$", text, re.M).group(1))
    assert total == server.state.llm.stats().num_blocks


async def test_openapi_covers_every_route(server: object) -> None:
    from ayo.server.app import create_app

    doc = await _json(server.url + "/openapi.json")
    assert doc["openapi"].startswith("3.1")
    routes = [(r.resource.canonical, r.method) for r in create_app(server.state).router.routes()
              if r.method != "HEAD"]  # fmt: skip
    assert len(routes) >= 10
    for path, method in routes:
        # the query route is documented once per app (each with that app's inputs)
        concrete = [f"/v1/apps/{a}/query" for a in server.state.app_names]
        for p in concrete if path == "/v1/apps/{name}/query" else [path]:
            assert p in doc["paths"], p
            assert method.lower() in doc["paths"][p], (p, method)
    inputs = doc["paths"]["/v1/apps/short_rag/query"]["post"]["requestBody"]["content"][
        "application/json"
    ]["schema"]["properties"]["inputs"]
    assert inputs["required"] == ["question"] and inputs["additionalProperties"] is False
