"""Interactive queries while a large document is ingested, on one real server.

    python -m benchmarks.isolation [--document-mb 12] [--queries 20] [--corpus-limit 500]

Starts ``python -m ayo.server`` (127.0.0.1, a temporary data dir holding the first
``--corpus-limit`` wiki documents, ``--max-body-mb`` raised to fit the document). Then, one at a
time, ``--queries`` naive_rag queries (answerable fanoutqa questions) and as many
``/v1/embeddings`` calls, idle; then the same again while one ``--document-mb`` document (wiki
summaries concatenated) is posted to ``/v1/collections/big/documents``; then it waits for that
ingest's acknowledgement and reports its throughput. Also reported: the queries' answers are the
same idle and loaded (greedy), and the server exits 0 on SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import time

import aiohttp

from .common import machine, print_table, setup_benchmark_logging
from .e2e_core import percentile
from .server_process import ServerProcess
from .workloads import answerable_questions

log = logging.getLogger("benchmarks.isolation")


def big_document(megabytes: float) -> str:
    from ayo.engines.corpus import load_wiki

    text = "\n\n".join(a.extract for a in load_wiki())
    target = int(megabytes * 2**20)
    return (text * (target // len(text) + 1))[:target]


async def timed_queries(s: aiohttp.ClientSession, url: str, questions: list[str]) -> dict:
    latencies, embed_latencies, answers = [], [], []
    for q in questions:
        start = time.perf_counter()
        async with s.post(f"{url}/v1/apps/naive_rag/query", json={"inputs": {"question": q}}) as r:
            body = await r.json()
            if r.status != 200:
                raise RuntimeError(f"query failed: {r.status} {body}")
        latencies.append(time.perf_counter() - start)
        answers.append(body["outputs"]["answer"])
        start = time.perf_counter()
        body = {"model": "all-minilm-l6-v2", "input": q}
        async with s.post(f"{url}/v1/embeddings", json=body) as r:
            await r.read()
            assert r.status == 200
        embed_latencies.append(time.perf_counter() - start)
    return {"query": latencies, "embed": embed_latencies, "answers": answers}


async def run(args: argparse.Namespace, url: str) -> tuple[dict, dict, dict]:
    questions = [q.text for q in answerable_questions()[: args.queries]]
    text = big_document(args.document_mb)
    timeout = aiohttp.ClientTimeout(total=None)
    async with aiohttp.ClientSession(timeout=timeout) as s:
        await timed_queries(s, url, questions[:2])  # warm-up
        log.info("idle: %d queries", len(questions))
        idle = await timed_queries(s, url, questions)
        log.info("posting a %.1f MB document", len(text) / 2**20)
        started = time.perf_counter()

        async def ingest() -> dict:
            body = {"documents": [{"id": "big", "title": "Big", "text": text}]}
            async with s.post(f"{url}/v1/collections/big/documents", json=body) as r:
                ack = await r.json()
                if r.status != 200:
                    raise RuntimeError(f"ingest failed: {r.status} {ack}")
            return {**ack, "seconds": time.perf_counter() - started}

        job = asyncio.ensure_future(ingest())
        await asyncio.sleep(2)  # the document is received and being chunked
        log.info("during the ingest: %d queries", len(questions))
        loaded = await timed_queries(s, url, questions)
        if job.done():
            log.warning("the ingest ended before the loaded queries did: raise --document-mb")
        loaded["ingest_running"] = not job.done()
        log.info("waiting for the ingest's acknowledgement")
        ack = await job
    return idle, loaded, ack


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--document-mb", type=float, default=12.0)
    ap.add_argument("--queries", type=int, default=20)
    ap.add_argument("--corpus-limit", type=int, default=500)
    args = ap.parse_args()
    setup_benchmark_logging()
    body_mb = str(max(16.0, args.document_mb + 2))
    server_args = ["--corpus", "wiki", "--corpus-limit", str(args.corpus_limit),
                   "--max-body-mb", body_mb, "--max-document-mb", body_mb]  # fmt: skip
    with ServerProcess(server_args) as server:
        idle, loaded, ack = asyncio.run(run(args, server.url))
        code = server.stop()
    mb = args.document_mb
    print(f"\nnaive_rag queries one at a time, idle and during a {mb:g} MB ingest, on {machine()}")
    rows = []
    for name, key in (("naive_rag query", "query"), ("/v1/embeddings", "embed")):
        for label, r in (("idle", idle), ("during the ingest", loaded)):
            xs = r[key]
            rows.append([name, label, len(xs), f"{percentile(xs, 50):.2f}",
                         f"{percentile(xs, 99):.2f}", f"{max(xs):.2f}"])  # fmt: skip
    print_table(["request", "when", "n", "p50 s", "p99 s", "max s"], rows)
    same = sum(a == b for a, b in zip(idle["answers"], loaded["answers"]))
    print(f"answers equal idle and loaded: {same}/{len(idle['answers'])}")
    print(f"ingest still running after the loaded queries: {loaded['ingest_running']}")
    print(f"ingest of {mb:g} MB: {ack['chunks']} chunks acknowledged after {ack['seconds']:.0f} s "
          f"({mb * 1024 / ack['seconds']:.1f} KB/s)")  # fmt: skip
    print(f"SIGTERM: exit {code} after {server.exit_s:.1f} s")


if __name__ == "__main__":
    main()
