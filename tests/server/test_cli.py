"""``python -m ayo.server`` as a real process: refusing to expose itself without a key, config
validation, and a restart that keeps ingested documents without re-embedding the corpus."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import aiohttp
import pytest

from ayo.cluster import is_loopback
from ayo.server.__main__ import build_parser, load_config
from ayo.server.config import ServerConfig

from .helpers import ServerProcess

CORPUS = 12


def _run_cli(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    import subprocess

    proc = subprocess.run(
        [sys.executable, "-m", "ayo.server", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )
    return proc.returncode, proc.stderr


def test_binding_beyond_loopback_needs_an_api_key(tmp_path: Path) -> None:
    code, err = _run_cli("--host", "0.0.0.0", "--data-dir", str(tmp_path), env={"AYO_API_KEY": ""})
    assert code == 2
    assert "--api-key" in err and "AYO_API_KEY" in err and "Traceback" not in err
    assert not any(tmp_path.iterdir())  # refused before loading or writing anything
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.4")


def test_config_file_flags_and_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "server.json"
    path.write_text(json.dumps({"port": 9001, "max-body-mb": 2, "host": "0.0.0.0", "api_key": "k"}))
    config = load_config(build_parser().parse_args(["--config", str(path), "--port", "9002"]))
    assert (config.port, config.max_body_bytes, config.host) == (9002, 2 * 2**20, "0.0.0.0")
    monkeypatch.setenv("AYO_API_KEY", "from-env")
    assert load_config(build_parser().parse_args(["--host", "0.0.0.0"])).api_key == "from-env"
    monkeypatch.setenv("AYO_DATA_DIR", str(tmp_path / "d"))
    assert ServerConfig().data_path == tmp_path / "d"
    from ayo.runtime.corpus import default_data_dir

    assert default_data_dir() == ServerConfig().data_path  # the CLI and the server agree
    assert ServerConfig().gc_tuning is True
    assert load_config(build_parser().parse_args(["--no-gc-tuning"])).gc_tuning is False
    assert ServerConfig().dtype == "auto"
    assert load_config(build_parser().parse_args(["--dtype", "float32"])).dtype == "float32"
    args = ["--dtype", "bfloat16", "--weights", "int4"]  # quantized: either activation dtype
    assert load_config(build_parser().parse_args(args)).weights == "int4"
    for bad, needle in [
        ({"prot": 1}, "unknown keys ['prot']"),
        ({"port": "80"}, "'port' must be of type int"),
        ({"gc_tuning": "yes"}, "'gc_tuning' must be of type bool"),
        ({"port": True}, "'port' must be of type int"),
        ({"port": 70000}, "port must be 0..65535"),
        ({"max_concurrent_queries": 0}, "max_concurrent_queries must be >= 1"),
        ({"dtype": "float16"}, "dtype must be auto, float32 or bfloat16, got 'float16'"),
        ({"weights": "int3"}, "weights must be auto or one of fp32, bf16, int8, int4, got 'int3'"),
        ({"dtype": "bfloat16", "weights": "fp32"}, "fp32 weights are dense float32, not dtype"),
    ]:
        path.write_text(json.dumps(bad))
        with pytest.raises(ValueError, match=re.escape(needle)):
            load_config(build_parser().parse_args(["--config", str(path)]))


SHUTDOWN_S = 2


@pytest.mark.slow  # two real server starts (models load in each): ~30-50 s on 2 cores
async def test_restart_keeps_documents_and_embeds_nothing(tmp_path: Path) -> None:
    """Also: SIGTERM during a large ingest exits 0 within the shutdown bound; the acknowledged
    document survives, the interrupted one (never acknowledged) is not half stored."""
    import asyncio
    import time

    docs = [{"id": "zorblax", "text": "Zorblax is a purple gas giant orbiting the star Quenthari."}]
    big = [{"id": "big", "text": "A long page about the moons of Zorblax. " * 40_000}]  # 1.6 MB
    args = ("--shutdown-timeout-s", str(SHUTDOWN_S), "--max-body-mb", "4")
    first = ServerProcess(tmp_path, corpus_limit=CORPUS, args=args, profile=True)
    await first.start()
    try:
        async with aiohttp.ClientSession() as s:
            async with s.get(first.url + "/health") as r:
                assert (await r.json())["embedded_at_startup"] == CORPUS
            url = first.url + "/v1/collections/notes/documents"
            async with s.post(url, json={"documents": docs}) as r:
                assert (await r.json())["ingested"] == 1
            pending = asyncio.ensure_future(s.post(url, json={"documents": big}))
            await asyncio.sleep(1.5)  # the big ingest is chunking or embedding now
            start = time.monotonic()
            code = await first.stop()
            stopped_in = time.monotonic() - start
            with pytest.raises(aiohttp.ClientError):  # answered by no acknowledgement
                (await pending).raise_for_status()
    finally:
        first.kill()
    assert code == 0, first.log()
    assert stopped_in < SHUTDOWN_S + 8, (stopped_in, first.log())  # the wait, then the close
    assert "cancelled 1 request(s) still running" in first.log()
    assert "cancelled 1 ingest(s)" in first.log()
    assert f"{CORPUS} documents embedded at startup" in first.log()
    assert "closed the engines" in first.log()
    # the first start on this data directory measured the engines, before it listened
    log = first.log()
    assert "measuring engine profiles on this machine" in log
    assert log.index("profiling engine 1/") < log.index("listening on"), log
    stored = list((tmp_path / "profiles").glob("*.json"))
    assert len(stored) == 1 and set(json.loads(stored[0].read_text())) == {
        "llm",
        "embedder",
        "index",
        "index.Ingest",
        "keyword",
        "reranker",
    }

    second = ServerProcess(tmp_path, corpus_limit=CORPUS, profile=True)
    await second.start()
    try:
        async with aiohttp.ClientSession() as s:
            async with s.get(second.url + "/health") as r:
                assert (await r.json())["embedded_at_startup"] == 0
            async with s.get(second.url + "/v1/collections") as r:
                counts = {c["name"]: c["documents"] for c in (await r.json())["collections"]}
            assert counts == {"wiki": CORPUS, "notes": 1}
            async with s.get(second.url + "/v1/collections/notes/documents") as r:
                listing = await r.json()
            assert [d["id"] for d in listing["documents"]] == ["zorblax"]
            assert listing["next"] is None
            body = {"query": "Which star does Zorblax orbit?", "k": 1}
            async with s.post(second.url + "/v1/collections/notes/search", json=body) as r:
                hit = (await r.json())["results"][0][0]
            assert hit["document"] == "zorblax" and "Quenthari" in hit["text"]
            async with s.get(second.url + "/metrics") as r:
                assert "ayo_corpus_embedded_at_startup 0.0" in await r.text()
        assert f"{CORPUS} already stored, 0 to embed" in second.log()
        assert "0 documents embedded at startup" in second.log()
        assert f"engine profiles measured on this machine: {stored[0]}" in second.log()
        assert "measuring engine profiles" not in second.log()
    finally:
        code = await second.stop()
        second.kill()
    assert code == 0, second.log()
