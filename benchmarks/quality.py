"""Answer quality of the built-in apps on the embedded default, before and after in one run.

    python -m benchmarks.quality [--questions 30] [--apps naive_rag,advanced_rag,search_gen]
        [--styles chat,legacy] [--unoptimized] [--json PATH]

Questions (seeded sample): fanoutqa dev sub-questions whose evidence article is one of the
packaged wiki summaries and whose answer string is in that summary, so retrieval can find it
and the model can copy it; plus the questions users reported. Each app answers each question in
each prompt style: ``chat`` (today's apps) and ``legacy`` (the apps before chat templates and
stopping, ``benchmarks/quality_legacy.py``). Reported per app and style:

- accuracy: the answer contains the gold answer (case, punctuation and thousands separators
  ignored);
- gold in ctx: the gold article is among the passages the answer was written from (the app's
  ``sources``: the search's top 2 for naive_rag, the reranked top 3 for advanced_rag); the
  dense search's top 3 for the question alone is reported beside it;
- ramble: the answer repeats a 4-word phrase three times, invents a "Question:" turn, or ran to
  ``max_tokens``;
- answer tokens (mean), generated tokens per LLM call (mean, all calls of the query), latency.

search_gen's judge is also scored on a labelled set: fact questions (should search) and
chit-chat (should not). The wiki collection is ingested first if missing (minutes).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import random
import re
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .common import machine, print_table, setup_benchmark_logging
from .workloads import Question, answerable_questions

log = logging.getLogger("benchmarks.quality")

# What users reported (issue 17), with a gold string where the answer has one.
REPORTED = (
    ("Who wrote Pride and Prejudice?", "Austen", "Pride and Prejudice"),
    ("What is the capital of Australia?", "Canberra", "Canberra"),
    ("How does photosynthesis work?", "light", "Photosynthesis"),
    ("Who wrote Hamlet?", "Shakespeare", "Hamlet"),
    ("What is a black hole?", "gravitational", "Black hole"),
)
CHITCHAT = (
    "Hi there!",
    "How are you today?",
    "Thanks, that was helpful.",
    "Good morning!",
    "Can you say that again more politely?",
    "I'm bored.",
    "Tell me a joke.",
    "Nice to meet you.",
    "What's up?",
    "Goodbye!",
)
STYLES = ("chat", "legacy")


def normalize(text: str) -> str:
    text = re.sub(r"(?<=\d),(?=\d{3})", "", text.lower())
    return " ".join(re.sub(r"[^\w\s]", " ", text).split())


def contains_gold(answer: str, gold: str) -> bool:
    return normalize(gold) in normalize(answer)


def rambles(answer: str, tokens: int, max_tokens: int) -> bool:
    words = normalize(answer).split()
    grams = [tuple(words[i : i + 4]) for i in range(len(words) - 3)]
    repeated = any(grams.count(g) >= 3 for g in set(grams))
    return repeated or "question:" in answer.lower() or tokens >= max_tokens


@dataclass
class Cell:
    """One app, style and plan mode over the question set."""

    app: str
    style: str
    optimized: bool
    answers: list[str] = field(default_factory=list)
    correct: list[bool] = field(default_factory=list)
    hits: list[bool] = field(default_factory=list)
    rambled: list[bool] = field(default_factory=list)
    answer_tokens: list[int] = field(default_factory=list)
    tokens_per_call: list[float] = field(default_factory=list)
    latency_s: list[float] = field(default_factory=list)

    def row(self) -> list[object]:
        n = len(self.correct)
        acc = sum(self.correct) / n
        hit = sum(self.hits) / n if self.hits else float("nan")
        return [
            self.app,
            self.style,
            "yes" if self.optimized else "no",
            n,
            f"{acc:.0%}",
            f"{hit:.0%}" if self.hits else "-",
            f"{acc / hit:.0%}" if self.hits and hit else "-",
            f"{sum(self.rambled) / n:.0%}",
            f"{statistics.mean(self.answer_tokens):.1f}",
            f"{statistics.mean(self.tokens_per_call):.1f}",
            f"{statistics.mean(self.latency_s):.2f}",
        ]


HEADERS = [
    "app",
    "prompts",
    "optimized",
    "n",
    "accuracy",
    "gold in ctx",
    "acc/ctx",
    "ramble",
    "answer tok",
    "tok/LLM call",
    "latency s",
]


def build_app(args: argparse.Namespace) -> Any:
    from ayo.runtime.app import App
    from ayo.runtime.defaults import EngineOptions, load_default_engines

    from .quality_legacy import LEGACY_APPS

    app = App()
    engines = load_default_engines(
        EngineOptions(
            dtype=args.dtype,
            data_dir=args.data_dir,
            collection=args.collection,
            llm_threads=args.llm_threads or None,
            reranker=args.reranker,
        )
    )
    for name, engine in engines.by_name().items():
        app.add_engine(name, engine)
    app.closing.append(engines.close)
    for template in LEGACY_APPS.values():
        app.add_workflow(template)
    return app


def _max_tokens(app_name: str, style: str) -> int:
    from ayo.apps.rag import ANSWER_TOKENS

    return ANSWER_TOKENS if style == "chat" else 64


async def ask(app: Any, name: str, style: str, question: str, optimize: bool) -> tuple[Any, float]:
    """The query's result and its mean generated tokens per LLM decode."""
    engine = app.engines.instances("llm")[0]
    before = engine.stats().generated_tokens
    target = name if style == "chat" else f"{name}@legacy"
    result = await app.run(target, {"question": question}, optimize=optimize)
    calls = sum(
        1 for s in result.trace.spans if "decode" in s.node_id or s.node_id.endswith("score")
    )
    generated = engine.stats().generated_tokens - before
    return result, generated / max(1, calls)


async def bench(args: argparse.Namespace, questions: list[Question]) -> dict[str, Any]:
    from .e2e import ensure_wiki

    app = build_app(args)
    await ensure_wiki(app.engines.instances("index")[0].store, args.collection)
    tokenizer = app.engines.instances("llm")[0].hf_tokenizer
    cells: list[Cell] = []
    judge: dict[str, list[bool]] = {}
    examples: dict[str, dict[str, str]] = {}
    async with app:
        search_hits = await search_hit_rate(app, questions, 3)
        for name in args.apps:
            for style in args.styles:
                for optimized in (True, False) if args.unoptimized else (True,):
                    cell = Cell(name, style, optimized)
                    t0 = time.perf_counter()
                    for q in questions:
                        result, per_call = await ask(app, name, style, q.text, optimized)
                        answer = str(result.outputs["answer"]).strip()
                        ntok = len(tokenizer(answer, add_special_tokens=False)["input_ids"])
                        cell.answers.append(answer)
                        cell.correct.append(contains_gold(answer, q.gold))
                        if "sources" in result.outputs:
                            titles = {s.split("#")[0] for s in result.outputs["sources"]}
                            cell.hits.append(q.title in titles)
                        cell.rambled.append(rambles(answer, ntok, _max_tokens(name, style)))
                        cell.answer_tokens.append(ntok)
                        cell.tokens_per_call.append(per_call)
                        cell.latency_s.append(result.latency_ms / 1e3)
                        if q.text in {r[0] for r in REPORTED} and optimized:
                            examples.setdefault(q.text, {})[f"{name} ({style})"] = answer
                    log.info("%s %s optimized=%s: %s in %.0f s", name, style, optimized,
                             cell.row()[4:], time.perf_counter() - t0)  # fmt: skip
                    cells.append(cell)
                if name == "search_gen":
                    judge[style] = await judge_agreement(app, style, questions)
    return {"cells": cells, "judge": judge, "examples": examples, "search_hit3": search_hits}


async def search_hit_rate(app: Any, questions: list[Question], k: int) -> float:
    """How often the gold article is in the dense search's top ``k`` for the question alone."""
    embedder, index = app.engines.instances("embedder")[0], app.engines.instances("index")[0]
    vectors = await embedder.embed([q.text for q in questions])
    hits = await index.search("default", vectors, k)
    found = [q.title in {d.id.split("#")[0] for d in docs} for q, docs in zip(questions, hits)]
    return sum(found) / len(found)


async def judge_agreement(app: Any, style: str, questions: list[Question]) -> list[bool]:
    """search_gen's ``searched`` against the label: fact questions yes, chit-chat no."""
    labelled = [(q.text, True) for q in questions[:10]] + [(t, False) for t in CHITCHAT]
    target = "search_gen" if style == "chat" else "search_gen@legacy"
    agree = []
    for text, label in labelled:
        result = await app.run(target, {"question": text})
        agree.append(bool(result.outputs["searched"]) == label)
    return agree


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.quality", description=__doc__.split("\n")[0]
    )
    p.add_argument("--questions", type=int, default=30, help="sampled answerable questions")
    p.add_argument("--apps", default="naive_rag,advanced_rag,search_gen")
    p.add_argument("--styles", default="chat,legacy", help="prompt styles: chat (today), legacy")
    p.add_argument("--unoptimized", action="store_true", help="also run the unoptimized plans "
                   "and check that their answers are the same")  # fmt: skip
    p.add_argument("--data-dir", default=None)
    p.add_argument("--collection", default="wiki")
    p.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    p.add_argument("--llm-threads", type=int, default=0, help="0: torch's default")
    p.add_argument("--reranker", default="embedding", help="embedding (the default), bm25, or a "
                   "cross-encoder folder (see ayo.runtime.defaults.EngineOptions)")  # fmt: skip
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--quick", action="store_true", help="3 questions: a smoke run")
    args = p.parse_args(argv)
    args.apps = [a for a in args.apps.split(",") if a]
    args.styles = [s for s in args.styles.split(",") if s]
    if bad := [s for s in args.styles if s not in STYLES]:
        p.error(f"unknown styles {bad}; choose from {STYLES}")
    if args.quick:
        args.questions = 3
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    setup_benchmark_logging()
    pool = answerable_questions()
    sample = random.Random(args.seed).sample(pool, min(args.questions, len(pool)))
    reported = [Question(*r) for r in REPORTED]
    questions = reported + sample if not args.quick else reported[:1] + sample[:2]
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    out = asyncio.run(bench(args, questions))
    cells: list[Cell] = out["cells"]
    print(f"# {machine()}; LLM {args.dtype}; started {started}")
    print(f"# {len(questions)} questions: {len(reported)} reported by users + {len(sample)} of "
          f"{len(pool)} answerable fanoutqa dev sub-questions (seed {args.seed}); greedy")  # fmt: skip
    print_table(HEADERS, [c.row() for c in cells])
    print(f"dense search of the question alone, top 3: gold article in {out['search_hit3']:.0%}")
    for style, agree in out["judge"].items():
        print(f"search_gen judge ({style}): agrees with the label on {sum(agree)}/{len(agree)} "
              f"({sum(agree) / len(agree):.0%}): 10 fact questions, {len(CHITCHAT)} chit-chat")  # fmt: skip
    if args.unoptimized:
        for c in cells:
            if not c.optimized:
                twin = next(
                    x for x in cells if (x.app, x.style, x.optimized) == (c.app, c.style, True)
                )
                same = sum(a == b for a, b in zip(c.answers, twin.answers))
                print(
                    f"{c.app} ({c.style}): optimized == unoptimized answers {same}/{len(c.answers)}"
                )
    print("\nReported questions:")
    for question, answers in out["examples"].items():
        print(f"- {question}")
        for who, answer in answers.items():
            print(f"    {who}: {answer!r}")
    if args.json is not None:
        args.json.write_text(json.dumps({
            "machine": machine(), "started": started, "questions": [q.__dict__ for q in questions],
            "cells": [c.__dict__ for c in cells], "judge": out["judge"],
            "examples": out["examples"]}, indent=1))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
