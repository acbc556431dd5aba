"""Hostile and malformed requests against a real server: what each gets, and what it costs the
others (a valid chat completion runs beside each one).

    python -m benchmarks.abuse [--url http://127.0.0.1:8000]

Without ``--url`` it starts ``python -m ayo.server`` (127.0.0.1, a temporary data dir, the first
100 wiki documents, the default 16 MiB body limit). Each case prints its status, its time and the
start of its body, and the status of the valid request that ran at the same time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

import aiohttp

from .common import machine, print_table, setup_benchmark_logging
from .server_process import ServerProcess

CHAT = "/v1/chat/completions"
MODEL = "smollm2-135m-instruct"
VALID = {"model": MODEL, "messages": [{"role": "user", "content": "Name a color."}],
         "max_tokens": 24, "temperature": 0}  # fmt: skip


def _chat(**extra: object) -> bytes:
    return json.dumps({**VALID, **extra}).encode()


def cases() -> list[tuple[str, str, str, bytes, dict[str, str]]]:
    """(name, method, path, body, headers)."""
    js = {"content-type": "application/json"}
    deep = b"[" * 100_000 + b"]" * 100_000
    surrogate = '"\\ud800"'  # valid JSON, not valid Unicode

    def raw(template: str) -> bytes:
        return template.replace("SURROGATE", surrogate).encode()

    return [
        ("temperature NaN", "POST", CHAT, _chat().replace(b'"temperature": 0', b'"temperature": NaN'), js),
        ("seed 2**70", "POST", CHAT, _chat(seed=2**70), js),
        ("top_p 5e-324", "POST", CHAT, _chat(top_p=5e-324, temperature=1.0, seed=1), js),
        ("JSON nested 10^5 deep (query)", "POST", "/v1/apps/naive_rag/query", deep, js),
        ("JSON nested 10^5 deep (chat)", "POST", CHAT, deep, js),
        ("lone surrogate: app query", "POST", "/v1/apps/naive_rag/query",
         raw('{"inputs": {"question": SURROGATE}}'), js),
        ("lone surrogate: embeddings", "POST", "/v1/embeddings",
         raw('{"model": "all-minilm-l6-v2", "input": SURROGATE}'), js),
        ("lone surrogate: ingest", "POST", "/v1/collections/abuse/documents",
         raw('{"documents": [{"id": "a", "text": SURROGATE}]}'), js),
        ("lone surrogate: chat", "POST", CHAT,
         raw('{"model": "' + MODEL + '", "messages": [{"role": "user", "content": SURROGATE}]}'), js),
        ("10 MB question", "POST", "/v1/apps/naive_rag/query",
         json.dumps({"inputs": {"question": "word " * (2 * 2**20)}}).encode(), js),
        ("empty documents", "POST", "/v1/collections/abuse/documents", b'{"documents": []}', js),
        ("query \"\"", "POST", "/v1/collections/wiki/search", b'{"query": ""}', js),
        ("empty prompt", "POST", "/v1/completions", json.dumps({"model": MODEL, "prompt": ""}).encode(), js),
        ("empty input", "POST", "/v1/embeddings", b'{"model": "all-minilm-l6-v2", "input": ""}', js),
        ("PUT /v1/completions (Allow?)", "PUT", "/v1/completions", b"{}", js),
        ("stream_options: null", "POST", CHAT, _chat(stream_options=None), js),
        ("plan.svg?optimize=null", "GET", "/v1/apps/naive_rag/plan.svg?optimize=null", b"", {}),
        ("text/plain body", "POST", CHAT, _chat(), {"content-type": "text/plain"}),
    ]  # fmt: skip


async def one(s: aiohttp.ClientSession, url: str, case: tuple) -> list[object]:
    name, method, path, body, headers = case

    async def valid() -> int:
        async with s.post(url + CHAT, json=VALID) as r:
            await r.read()
            return r.status

    async def hostile() -> tuple[int, float, str, str]:
        start = time.perf_counter()
        async with s.request(method, url + path, data=body or None, headers=headers) as r:
            text = (await r.read()).decode(errors="replace")
            return r.status, time.perf_counter() - start, text, r.headers.get("Allow", "")

    (status, took, text, allow), beside = await asyncio.gather(hostile(), valid())
    try:
        shown = json.loads(text)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        shown = text
    if allow:
        shown = f"Allow: {allow}; {shown}"
    return [name, status, f"{took:.2f}", beside, shown[:110].replace("\n", " ")]


async def run(url: str) -> list[list[object]]:
    timeout = aiohttp.ClientTimeout(total=600)
    async with aiohttp.ClientSession(timeout=timeout) as s:
        return [await one(s, url, case) for case in cases()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url")
    args = ap.parse_args()
    setup_benchmark_logging()
    if args.url:
        rows = asyncio.run(run(args.url.rstrip("/")))
        errors: list[str] = []
    else:
        with ServerProcess(["--corpus", "wiki", "--corpus-limit", "100"]) as server:
            rows = asyncio.run(run(server.url))
            server.stop()
            errors = server.errors()
    print(f"\nHostile requests against ayo.server on {machine()}")
    print_table(["case", "status", "s", "valid beside", "message"], rows)
    print(f"server log lines at ERROR or with a traceback: {len(errors)}")
    for line in errors[:10]:
        print("  ", line[:200])


if __name__ == "__main__":
    main()
