"""Answer quality of every built-in app on the embedded default, on two question splits.

    python -m benchmarks.quality [--splits tune,held] [--apps naive_rag,...]
        [--dtypes float32,auto,int4] [--styles chat] [--unoptimized] [--json PATH]

Questions: fanoutqa dev sub-questions whose evidence article is one of the packaged wiki
summaries and whose answer string is in that summary (71), so retrieval can find it and the
model can copy it; plus the questions users reported. Two splits, reported apart:

- ``tune``: the 5 reported questions and the seed-0 sample of 30 that every earlier version of
  this benchmark used: the apps' prompts and choices were tuned on it;
- ``held``: the other 41 answerable questions, which no tuning looked at.

Each app answers each question (``contextual_rag``, which needs documents, gets the gold
article and two seeded other summaries). Per app, split and dtype (``--dtypes`` takes dtypes,
which run dense weights, and the LLM's quantized weights formats: int8, int4):

- accuracy: the answer contains the gold answer (case, punctuation and thousands separators
  ignored);
- gold in ctx: the gold article is among the passages the answer was written from (the app's
  ``sources``; search_gen's keyword hits when it searched; agent_rag's search results); the
  dense search's top 3 for the question alone is reported beside it;
- acc/ctx: accuracy among the questions with the gold article in context;
- ramble: the answer repeats a 4-word phrase three times, invents a "Question:" turn, or ran to
  ``max_tokens``;
- answer tokens (mean), generated tokens per LLM call (mean, all calls of the query), latency.

``--styles chat,legacy`` also runs the apps as they were before chat templates and stopping
(``benchmarks/quality_legacy.py``). search_gen's judge is scored on a labelled set: fact
questions (should search) and chit-chat (should not). The wiki collection is ingested first if
missing (minutes).
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

from ayo.engines.llm.formats import DENSE_FORMATS, WEIGHT_FORMATS

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
    """One app, split, dtype, prompt style and plan mode over the split's questions."""

    app: str
    split: str
    dtype: str
    style: str
    optimized: bool
    answers: list[str] = field(default_factory=list)
    sources: list[list[str]] = field(default_factory=list)  # the app's, where it has them
    correct: list[bool] = field(default_factory=list)
    hits: list[bool] = field(default_factory=list)
    rambled: list[bool] = field(default_factory=list)
    answer_tokens: list[int] = field(default_factory=list)
    tokens_per_call: list[float] = field(default_factory=list)
    latency_s: list[float] = field(default_factory=list)

    @property
    def accuracy(self) -> float:
        return sum(self.correct) / len(self.correct)

    @property
    def accuracy_given_gold(self) -> float | None:
        """Accuracy over the questions whose gold article was in the answer's context."""
        given = [c for c, h in zip(self.correct, self.hits) if h]
        return sum(given) / len(given) if given else None

    def row(self) -> list[object]:
        n = len(self.correct)
        hit = sum(self.hits) / n if self.hits else None
        given = self.accuracy_given_gold
        return [
            self.app,
            self.split,
            self.dtype,
            self.style,
            "yes" if self.optimized else "no",
            n,
            f"{self.accuracy:.0%}",
            "-" if hit is None else f"{hit:.0%}",
            "-" if given is None else f"{given:.0%}",
            f"{sum(self.rambled) / n:.0%}",
            f"{statistics.mean(self.answer_tokens):.1f}",
            f"{statistics.mean(self.tokens_per_call):.1f}",
            f"{statistics.mean(self.latency_s):.2f}",
        ]


HEADERS = [
    "app",
    "split",
    "dtype",
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
RAG_APPS = ("naive_rag", "advanced_rag", "search_gen", "contextual_rag", "agent_rag")
CONTEXTUAL_DOCUMENTS = 3  # the gold article and two seeded others


def splits(tune_size: int, seed: int) -> dict[str, list[Question]]:
    """``tune``: the reported questions and the seeded sample earlier versions used;
    ``held``: every other answerable question."""
    pool = answerable_questions()
    tune = random.Random(seed).sample(pool, min(tune_size, len(pool)))
    chosen = {q.text for q in tune}
    held = [q for q in pool if q.text not in chosen]
    return {"tune": [Question(*r) for r in REPORTED] + tune, "held": held}


QUANTIZED = [f for f in WEIGHT_FORMATS if f not in DENSE_FORMATS]


def build_app(args: argparse.Namespace, dtype: str) -> Any:
    from ayo.apps import get_app
    from ayo.runtime.app import App
    from ayo.runtime.defaults import EngineOptions, load_default_engines

    from .quality_legacy import LEGACY_APPS

    app = App()
    quantized = dtype not in DENSE_FORMATS.values()
    engines = load_default_engines(
        EngineOptions(
            dtype="auto" if quantized else dtype,
            weights=dtype if quantized else "auto",
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
    for name, options in args.options.items():
        app.add_workflow(get_app(name).with_options(**options))
    return app


def _max_tokens(style: str) -> int:
    from ayo.apps.rag import ANSWER_TOKENS

    return ANSWER_TOKENS if style == "chat" else 64


def _inputs(
    name: str, q: Question, articles: dict[str, str], seed: int
) -> tuple[dict[str, Any], list[str]]:
    """The query's inputs, and the titles of the documents it brings (in their order)."""
    if name != "contextual_rag":
        return {"question": q.text}, []
    rng = random.Random(f"{seed}/{q.text}")
    gold = [q.title] if q.title in articles else []  # a reported question's may be absent
    others = rng.sample(
        sorted(t for t in articles if t != q.title), CONTEXTUAL_DOCUMENTS - len(gold)
    )
    titles = [*gold, *others]
    rng.shuffle(titles)
    return {"question": q.text, "documents": [articles[t] for t in titles]}, titles


async def ask(
    app: Any, name: str, style: str, inputs: dict[str, Any], optimize: bool
) -> tuple[Any, float]:
    """The query's result and its mean generated tokens per LLM decode."""
    engine = app.engines.instances("llm")[0]
    before = engine.stats().generated_tokens
    target = name if style == "chat" else f"{name}@legacy"
    result = await app.run(target, inputs, optimize=optimize)
    calls = sum(
        1 for s in result.trace.spans if "decode" in s.node_id or s.node_id.endswith("score")
    )
    generated = engine.stats().generated_tokens - before
    return result, generated / max(1, calls)


def _passage_of(passage: str, article: str) -> bool:
    """Whether ``passage`` was cut from ``article`` (its first words are in it)."""
    head = " ".join(normalize(passage).split()[:12])
    return bool(head) and head in normalize(article)


async def gold_in_context(
    app: Any, name: str, q: Question, titles: list[str], result: Any, article: str
) -> bool | None:
    """Whether the gold article was among the passages the answer was written from
    (``titles``: those of the documents the query brought, in order)."""
    out = result.outputs
    if name == "contextual_rag":  # temporary documents: "d{i}c{j}#..." ids
        return any(titles[int(s[1:].split("c")[0])] == q.title for s in out["sources"])
    if "sources" in out:
        return q.title in {s.split("#")[0] for s in out["sources"]}
    if name.startswith("search_gen"):  # the app's keyword search, as it ran when it searched
        if not out["searched"]:
            return False
        [docs] = await app.engines.instances("keyword")[0].search([q.text], 4)
        return q.title in {d.id.split("#")[0] for d in docs}
    if "steps" in out:  # an agent: the passages its searches returned
        found = [
            p
            for step in out["steps"]
            for call in step.get("calls", ())
            if call["name"] == "search"
            for p in str(call["result"]).split("\n\n")
        ]
        return any(_passage_of(p, article) for p in found)
    return None


async def bench(args: argparse.Namespace, questions: dict[str, list[Question]], dtype: str):
    from ayo.engines.corpus import load_wiki

    from .e2e import ensure_wiki

    app = build_app(args, dtype)
    await ensure_wiki(app.engines.instances("index")[0].store, args.collection)
    tokenizer = app.engines.instances("llm")[0].hf_tokenizer
    articles = {a.title: a.extract for a in load_wiki()}
    cells: list[Cell] = []
    judge: dict[str, list[bool]] = {}
    examples: dict[str, dict[str, str]] = {}
    search_hits: dict[str, float] = {}
    async with app:
        for split, qs in questions.items():
            search_hits[split] = await search_hit_rate(app, qs, 3)
            for name in args.apps:
                for style in args.styles:
                    for optimized in (True, False) if args.unoptimized else (True,):
                        cell = Cell(name, split, dtype, style, optimized)
                        t0 = time.perf_counter()
                        for q in qs:
                            inputs, titles = _inputs(name, q, articles, args.seed)
                            result, per_call = await ask(app, name, style, inputs, optimized)
                            answer = str(result.outputs["answer"]).strip()
                            ntok = len(tokenizer(answer, add_special_tokens=False)["input_ids"])
                            cell.answers.append(answer)
                            cell.sources.append(list(result.outputs.get("sources", ())))
                            cell.correct.append(contains_gold(answer, q.gold))
                            hit = await gold_in_context(
                                app, name, q, titles, result, articles.get(q.title, "")
                            )
                            if hit is not None:
                                cell.hits.append(hit)
                            cell.rambled.append(rambles(answer, ntok, _max_tokens(style)))
                            cell.answer_tokens.append(ntok)
                            cell.tokens_per_call.append(per_call)
                            cell.latency_s.append(result.latency_ms / 1e3)
                            if q.text in {r[0] for r in REPORTED} and optimized:
                                examples.setdefault(q.text, {})[f"{name} ({style})"] = answer
                        log.info("%s %s %s %s optimized=%s: %s in %.0f s", name, split, dtype,
                                 style, optimized, cell.row()[5:],
                                 time.perf_counter() - t0)  # fmt: skip
                        cells.append(cell)
                    if name == "search_gen" and split == "tune":
                        judge[style] = await judge_agreement(app, style, qs)
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


def _options(text: str) -> dict[str, dict[str, Any]]:
    """``app:key=value,...;app2:...`` -> {app: {key: value}} (ints where they parse)."""
    out: dict[str, dict[str, Any]] = {}
    for part in filter(None, text.split(";")):
        name, _, pairs = part.partition(":")
        for pair in filter(None, pairs.split(",")):
            key, _, value = pair.partition("=")
            out.setdefault(name, {})[key] = int(value) if value.lstrip("-").isdigit() else value
    return out


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.quality", description=__doc__.split("\n")[0]
    )
    p.add_argument("--questions", type=int, default=30, help="the tune split's sampled questions")
    p.add_argument("--splits", default="tune,held", help="tune (the tuning set), held (the rest)")
    p.add_argument("--apps", default=",".join(RAG_APPS))
    p.add_argument("--styles", default="chat", help="prompt styles: chat (today), legacy")
    p.add_argument("--options", type=_options, default={}, help="app options, e.g. "
                   "'advanced_rag:synthesis=refine' (AppTemplate.with_options)")  # fmt: skip
    p.add_argument("--unoptimized", action="store_true", help="also run the unoptimized plans "
                   "and check that their answers are the same")  # fmt: skip
    p.add_argument("--data-dir", default=None)
    p.add_argument("--collection", default="wiki")
    p.add_argument("--dtypes", default="float32,auto", help="float32, bfloat16, a quantized "
                   "weights format (int8, int4) or auto (the server's default: resolved "
                   "here, run once if it equals another)")  # fmt: skip
    p.add_argument("--llm-threads", type=int, default=0, help="0: torch's default")
    p.add_argument("--reranker", default="embedding", help="embedding (the default), bm25, or a "
                   "cross-encoder folder (see ayo.runtime.defaults.EngineOptions)")  # fmt: skip
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--quick", action="store_true", help="3 questions per split: a smoke run")
    args = p.parse_args(argv)
    args.apps = [a for a in args.apps.split(",") if a]
    args.styles = [s for s in args.styles.split(",") if s]
    args.splits = [s for s in args.splits.split(",") if s]
    if bad := [s for s in args.styles if s not in STYLES]:
        p.error(f"unknown styles {bad}; choose from {STYLES}")
    if bad := [s for s in args.splits if s not in ("tune", "held")]:
        p.error(f"unknown splits {bad}; choose from tune, held")
    known = ("auto", *DENSE_FORMATS.values(), *QUANTIZED)
    if bad := [d for d in args.dtypes.split(",") if d not in known]:
        p.error(f"unknown dtypes {bad}; choose from {', '.join(known)}")
    from ayo.engines.llm.config import EngineConfig

    args.auto = EngineConfig(dtype="auto").format_key
    args.dtypes = list(
        dict.fromkeys(args.auto if d == "auto" else d for d in args.dtypes.split(","))
    )
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    setup_benchmark_logging()
    questions = {s: qs for s, qs in splits(args.questions, args.seed).items() if s in args.splits}
    if args.quick:
        questions = {s: qs[:3] for s, qs in questions.items()}
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    runs = [asyncio.run(bench(args, questions, dtype)) for dtype in args.dtypes]
    cells: list[Cell] = [c for out in runs for c in out["cells"]]
    print(f"# {machine()}; started {started}; greedy; dtype auto resolves to {args.auto} here")
    for split, qs in questions.items():
        reported = sum(q.text in {r[0] for r in REPORTED} for q in qs)
        what = (
            f"{reported} reported by users + {len(qs) - reported} of the seed-{args.seed} "
            "sample used while tuning"
            if split == "tune"
            else "the answerable fanoutqa dev sub-questions no tuning saw"
        )
        print(f"# split {split}: {len(qs)} questions: {what}")
    if args.options:
        print(f"# app options: {args.options}")
    print_table(HEADERS, [c.row() for c in cells])
    for split, rate in runs[0]["search_hit3"].items():
        print(f"dense search of the question alone, top 3 ({split}): gold article in {rate:.0%}")
    for out in runs:
        for style, agree in out["judge"].items():
            print(f"search_gen judge ({style}): agrees with the label on {sum(agree)}/{len(agree)}"
                  f" ({sum(agree) / len(agree):.0%}): 10 fact questions, {len(CHITCHAT)} "
                  "chit-chat")  # fmt: skip
    if args.unoptimized:
        for c in cells:
            if not c.optimized:
                twin = next(
                    x
                    for x in cells
                    if (x.app, x.split, x.dtype, x.style, x.optimized)
                    == (c.app, c.split, c.dtype, c.style, True)
                )
                same = sum(a == b for a, b in zip(c.answers, twin.answers))
                print(
                    f"{c.app} {c.split} {c.dtype} ({c.style}): optimized == unoptimized answers "
                    f"{same}/{len(c.answers)}"
                )
    print("\nReported questions:")
    for question, answers in runs[0]["examples"].items():
        print(f"- {question}")
        for who, answer in answers.items():
            print(f"    {who}: {answer!r}")
    if args.json is not None:
        args.json.write_text(json.dumps({
            "machine": machine(), "started": started, "auto_format": args.auto,
            "options": args.options,
            "questions": {s: [q.__dict__ for q in qs] for s, qs in questions.items()},
            "cells": [c.__dict__ for c in cells], "judge": [o["judge"] for o in runs],
            "examples": runs[0]["examples"]}, indent=1))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
