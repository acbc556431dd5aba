"""Agents on a real external workload: the Berkeley Function Calling Leaderboard's
``multi_turn_base`` conversations replayed through the server's OpenAI tool API, the tools run
for real by BFCL's own executable backends, scored by BFCL's own multi-turn checker.

    python -m benchmarks.agents                      # a seeded sample of 10 of the 200
    python -m benchmarks.agents --entries 200        # all of them (hours on a CPU)
    python -m benchmarks.agents --url http://127.0.0.1:8000   # a server already running
    python -m benchmarks.agents --rag 5              # agent_rag next to advanced_rag instead

Data: the ``bfcl-eval`` wheel, installed ``--no-deps`` by ``scripts/setup.sh`` (its declared
dependencies are heavy; the backends and the checker need only the standard library and
``mpmath``). Each entry's tools are its classes' function docs, converted to OpenAI tools.

The loop is BFCL's (``inference_multi_turn_FC``): each user turn is appended to one growing
conversation; each step the model answers or calls tools; the calls run (BFCL's
``execute_multi_turn_func_call``, state kept across turns), their results go back as ``tool``
messages; a turn ends at a reply without calls or at ``--max-steps`` (BFCL allows 20; a 135M
model on a CPU gets 5 by default, stated in the table). ``--tool-choice required-first``
(default) makes each turn's first step a call (one, ``parallel_tool_calls`` false): left to
``auto``, SmolLM2-135M rarely calls anything, and nothing would be measured.

Reported: calls parsed and schema-valid (the grammar's promise: 100%), tool errors (the
backend's ``Error during execution`` or ``{"error": ...}`` results), turns completed (ended by
a reply, not the step limit), BFCL accuracy (the checker's verdict per entry; reported, not a
target: the model is 135M), mean latency per turn, and per LLM call the prompt tokens
computed against those served by the prefix cache (``usage.prompt_tokens_details``).
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import logging
import random
import statistics
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .common import machine, print_table, setup_benchmark_logging
from .workloads import data_file

log = logging.getLogger("benchmarks.agents")
MODEL = "smollm2-135m-instruct"
BFCL_TYPES = {"dict": "object", "float": "number", "tuple": "array", "list": "array",
              "any": "string", "bool": "boolean", "int": "integer", "str": "string"}  # fmt: skip


# ---- BFCL's data, as OpenAI tools ----------------------------------------------------------


def load_entries() -> list[dict[str, Any]]:
    path = data_file("bfcl_eval", "data", "BFCL_v4_multi_turn_base.json")
    answers = data_file("bfcl_eval", "data", "possible_answer", "BFCL_v4_multi_turn_base.json")
    truth = {a["id"]: a["ground_truth"] for a in map(json.loads, _lines(answers))}
    entries = [json.loads(line) for line in _lines(path)]
    for e in entries:
        e["ground_truth"] = truth[e["id"]]
    return entries


def _lines(path: Path) -> list[str]:
    return [line for line in path.read_text().splitlines() if line.strip()]


def class_docs(cls: str) -> list[dict[str, Any]]:
    from bfcl_eval.constants.executable_backend_config import MULTI_TURN_FUNC_DOC_FILE_MAPPING

    path = data_file(
        "bfcl_eval", "data", "multi_turn_func_doc", MULTI_TURN_FUNC_DOC_FILE_MAPPING[cls]
    )
    return [json.loads(line) for line in _lines(path)]


def to_schema(spec: dict[str, Any]) -> dict[str, Any]:
    """A BFCL parameter spec (``dict``, ``float``, ``tuple``... types) as JSON Schema."""
    out = {k: v for k, v in spec.items() if k not in ("type", "properties", "items", "default")}
    out["type"] = BFCL_TYPES.get(spec.get("type", "string"), spec.get("type", "string"))
    if "properties" in spec:
        out["properties"] = {k: to_schema(v) for k, v in spec["properties"].items()}
    if "items" in spec:
        out["items"] = to_schema(spec["items"])
    return out


def entry_tools(entry: dict[str, Any]) -> list[dict[str, Any]]:
    tools = []
    for cls in entry["involved_classes"]:
        for doc in class_docs(cls):
            if doc["name"] in entry.get("excluded_function", ()):
                continue
            params = to_schema({**doc["parameters"], "type": "dict"})
            fn = {
                "name": doc["name"],
                "description": doc["description"][:300],
                "parameters": params,
            }
            tools.append({"type": "function", "function": fn})
    return tools


def call_string(name: str, arguments: dict[str, Any]) -> str:
    """A call as BFCL's executor takes it: ``name(key=repr(value), ...)``."""
    return f"{name}({', '.join(f'{k}={v!r}' for k, v in arguments.items())})"


# ---- one conversation ------------------------------------------------------------------------


@dataclass
class Tally:
    calls: int = 0
    cut: int = 0
    parsed: int = 0
    valid: int = 0
    tool_errors: int = 0
    turns: int = 0
    turns_completed: int = 0
    turn_s: list[float] = field(default_factory=list)
    llm_calls: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    correct: int = 0
    entries: int = 0


async def replay(client: Any, entry: dict[str, Any], args: argparse.Namespace, t: Tally) -> bool:
    """One BFCL conversation through the chat API; True if BFCL's checker accepts it."""
    import jsonschema
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_utils import (
        execute_multi_turn_func_call,
    )

    tools = entry_tools(entry)
    schemas = {x["function"]["name"]: x["function"]["parameters"] for x in tools}
    run_name = f"ayo_{uuid.uuid4().hex[:8]}"  # BFCL keeps instances by name: one per run
    config, classes = copy.deepcopy(entry["initial_config"]), entry["involved_classes"]
    execute_multi_turn_func_call([], config, classes, run_name, entry["id"])
    messages: list[dict[str, Any]] = []
    decoded: list[list[list[str]]] = []
    for turn in entry["question"]:
        messages += turn
        steps: list[list[str]] = []
        start = time.perf_counter()
        completed = False
        for step in range(args.max_steps):
            first = step == 0 and args.tool_choice == "required-first"
            reply = await client.chat.completions.create(
                model=MODEL, messages=messages, tools=tools, temperature=0,
                max_tokens=args.max_tokens, tool_choice="required" if first else "auto",
                parallel_tool_calls=not first,
            )  # fmt: skip
            t.llm_calls += 1
            usage = reply.usage
            t.prompt_tokens += usage.prompt_tokens
            details = getattr(usage, "prompt_tokens_details", None)
            t.cached_tokens += (getattr(details, "cached_tokens", 0) or 0) if details else 0
            message = reply.choices[0].message
            calls = message.tool_calls or []
            if not calls:
                messages.append({"role": "assistant", "content": message.content or ""})
                completed = True
                break
            strings, kept = [], []
            for c in calls:
                t.calls += 1
                try:
                    arguments = json.loads(c.function.arguments)
                except ValueError:
                    if reply.choices[0].finish_reason == "length" and c is calls[-1]:
                        t.cut += 1  # cut short by max_tokens: not run
                    continue
                if c.function.name not in schemas or not isinstance(arguments, dict):
                    continue
                t.parsed += 1
                try:
                    jsonschema.validate(arguments, schemas[c.function.name])
                    t.valid += 1
                except jsonschema.ValidationError:
                    pass
                strings.append(call_string(c.function.name, arguments))
                kept.append(c)
            results, _ = execute_multi_turn_func_call(
                strings, config, classes, run_name, entry["id"]
            )
            steps.append(strings)
            messages.append(
                {"role": "assistant", "content": message.content or "",
                 "tool_calls": [c.model_dump() for c in kept]}
            )  # fmt: skip
            for c, result in zip(kept, results):
                if "Error during execution" in result or '"error"' in result[:20]:
                    t.tool_errors += 1
                messages.append({"role": "tool", "tool_call_id": c.id, "content": result[:1500]})
        t.turns += 1
        t.turns_completed += completed
        t.turn_s.append(time.perf_counter() - start)
        decoded.append([s for s in steps if s])
    verdict = multi_turn_checker(decoded, entry["ground_truth"], entry, "multi_turn_base", run_name)
    t.entries += 1
    t.correct += bool(verdict.get("valid"))
    return bool(verdict.get("valid"))


# ---- agent_rag next to advanced_rag -------------------------------------------------------------


def multi_hop_questions(n: int, seed: int) -> list[tuple[str, list[str]]]:
    """fanoutqa dev questions with at least 3/4 of their evidence articles in the packaged wiki
    (all of them: only 3 questions) and at most 4 answer parts, with those parts (strings and
    numbers) for loose accuracy."""
    from ayo.engines.corpus import load_wiki

    titles = {a.title for a in load_wiki()}
    dev = json.loads(data_file("fanoutqa", "data", "fanout-final-dev.json").read_text())

    def evidence(node: dict[str, Any]) -> list[str]:
        own = [(node.get("evidence") or {}).get("title")]
        return [x for x in own if x] + [
            t for c in node.get("decomposition") or () for t in evidence(c)
        ]

    def leaves(answer: Any) -> list[str]:
        if isinstance(answer, dict):
            return [x for v in answer.values() for x in leaves(v)]
        if isinstance(answer, list):
            return [x for v in answer for x in leaves(v)]
        return [str(answer)]

    good = [
        (q["question"], leaves(q["answer"]))
        for q in dev
        if evidence(q)
        and 4 * len(set(evidence(q)) & titles) >= 3 * len(set(evidence(q)))
        and len(leaves(q["answer"])) <= 4
    ]
    return random.Random(seed).sample(good, min(n, len(good)))


def compact_trace(chrome: dict[str, Any]) -> list[str]:
    """A query's Chrome trace as lines: start and end (ms from the query's start), engine and
    primitive, in start order (queueing events left out)."""
    events = chrome["traceEvents"]
    rows = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M"}
    spans = sorted((e for e in events if e["ph"] == "X"), key=lambda e: e["ts"])
    return [f"{e['ts'] / 1e3:8.0f} {(e['ts'] + e['dur']) / 1e3:8.0f} ms  {rows[e['tid']]:<9} "
            f"{e['name']}" for e in spans]  # fmt: skip


def loose_accuracy(answer: str, gold: list[str]) -> float:
    """fanoutqa's loose accuracy: the share of the answer's parts found in the text, each as
    whole words (a "3" inside "2023" is not found)."""
    from .quality import normalize

    text = f" {normalize(answer)} "
    return sum(f" {normalize(g)} " in text for g in gold) / len(gold)


async def rag(url: str, n: int, seed: int) -> None:
    import aiohttp

    questions = multi_hop_questions(n, seed)
    rows, scores = [], {"agent_rag": [], "advanced_rag": []}
    traces: list[tuple[str, list[str]]] = []
    async with aiohttp.ClientSession() as s:
        for question, gold in questions:
            for app in ("agent_rag", "advanced_rag"):
                start = time.perf_counter()
                async with s.post(f"{url}/v1/apps/{app}/query",
                                  json={"inputs": {"question": question}, "trace": True}) as r:  # fmt: skip
                    body = await r.json()
                if app == "agent_rag":
                    traces.append((question, compact_trace(body["trace"])))
                seconds = time.perf_counter() - start
                answer = body["outputs"]["answer"]
                acc = loose_accuracy(answer, gold)
                scores[app].append((acc, seconds))
                trace = ""
                if app == "agent_rag":
                    trace = " | ".join(
                        f"step{st['step']}: "
                        + (
                            ", ".join(f"{c['name']}({c['arguments']})" for c in st.get("calls", ()))
                            or "answer"
                        )
                        for st in body["outputs"]["steps"][:-1]
                    )
                rows.append([app, question[:60], gold[:3], answer[:80], f"{acc:.2f}",
                             f"{seconds:.1f}", trace[:160]])  # fmt: skip
    print_table(["app", "question", "gold", "answer", "loose acc", "s", "agent steps"], rows)
    for question, spans in traces:
        print(f"\nagent_rag trace: {question}")
        for line in spans:
            print("  " + line)
    print_table(
        ["app", "questions", "mean loose accuracy", "mean latency s"],
        [[a, len(v), f"{statistics.mean(x for x, _ in v):.2f}",
          f"{statistics.mean(y for _, y in v):.1f}"] for a, v in scores.items()],
    )  # fmt: skip


# ---- main ------------------------------------------------------------------------------------


async def bfcl(url: str, args: argparse.Namespace) -> Tally:
    import openai

    entries = load_entries()
    if args.entries < len(entries):
        entries = random.Random(args.seed).sample(entries, args.entries)
    client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="x", max_retries=0, timeout=600)
    tally = Tally()
    try:
        for i, entry in enumerate(entries):
            ok = await replay(client, entry, args, tally)
            log.info("%s (%d/%d): %s", entry["id"], i + 1, len(entries), "valid" if ok else "no")
    finally:
        await client.close()
    return tally


def report(t: Tally, args: argparse.Namespace) -> None:
    pct = lambda a, b: f"{100 * a / b:.1f}%" if b else "n/a"  # noqa: E731
    computed = t.prompt_tokens - t.cached_tokens
    print(f"\nBFCL multi_turn_base, {t.entries} entries (seed {args.seed}), {MODEL}, tool_choice "
          f"{args.tool_choice}, at most {args.max_steps} steps a turn; {machine()}")  # fmt: skip
    print_table(
        ["metric", "value"],
        [
            ["tool calls written", t.calls],
            ["cut short by max_tokens (not run)", t.cut],
            ["complete calls parsed (JSON, a known tool)", pct(t.parsed, t.calls - t.cut)],
            ["complete calls schema-valid", pct(t.valid, t.calls - t.cut)],
            ["tool errors (backend said error)", f"{t.tool_errors} of {t.parsed}"],
            ["turns completed (a reply)", f"{t.turns_completed} of {t.turns}"],
            ["BFCL accuracy", f"{t.correct} of {t.entries} ({pct(t.correct, t.entries)})"],
            ["mean latency per turn", f"{statistics.mean(t.turn_s or [0]):.2f} s"],
            ["LLM calls", t.llm_calls],
            ["prompt tokens per call: computed", f"{computed / max(t.llm_calls, 1):.0f}"],
            ["prompt tokens per call: from cache", f"{t.cached_tokens / max(t.llm_calls, 1):.0f}"],
        ],
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--entries", type=int, default=10, help="seeded sample of the 200 entries")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-steps", type=int, default=5, help="LLM steps per user turn")
    p.add_argument("--max-tokens", type=int, default=128, help="tokens per LLM step")
    p.add_argument("--tool-choice", choices=["required-first", "auto"], default="required-first")
    p.add_argument("--url", default="", help="a running server (default: start one)")
    p.add_argument("--rag", type=int, default=0, help="instead: agent_rag vs advanced_rag on N "
                   "fanoutqa multi-hop questions")  # fmt: skip
    args = p.parse_args(argv)
    setup_benchmark_logging()
    logging.getLogger("httpx").setLevel(logging.WARNING)

    async def go(url: str) -> None:
        if args.rag:
            await rag(url, args.rag, args.seed)
        else:
            report(await bfcl(url, args), args)

    if args.url:
        asyncio.run(go(args.url))
        return 0
    from ayo.runtime.corpus import default_data_dir

    from .server_process import ServerProcess

    # BFCL needs no documents; agent_rag searches the wiki, ingested once into the default
    # data directory (as `python -m ayo ingest` does) and read from there
    if args.rag:
        server = ServerProcess([], data_dir=default_data_dir())
    else:
        server = ServerProcess(["--corpus-limit", "0"])
    with server:
        asyncio.run(go(server.url))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
