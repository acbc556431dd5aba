"""What the benchmarks ask: questions, and the documents each query brings.

Two workloads:

- ``default``: the apps as a user of the embedded server calls them. fanoutqa dev questions;
  naive_rag, advanced_rag and search_gen search the stored ``wiki`` collection, contextual_rag
  gets three seeded wiki summaries per query; answers up to the apps' own ceiling (96 tokens,
  ending at two sentences).
- ``paper``: the shape of Teola's document QA workloads, where the user brings the documents:
  each query brings its own passages, ``PAPER.passages`` of them (seeded per query, the gold
  article's among them, the rest other wiki summaries), cut as the apps' Indexing cuts them
  (at most 64 words, ~80 tokens), embedded and indexed for that query alone and dropped after.
  Answers are capped at ``PAPER.answer_tokens`` (10, the Ayo prototype's example); query
  expansion and contextual retrieval's per-passage context keep the apps' own ceilings (64 and
  48 tokens, one line). contextual_rag writes one LLM context per passage, so its queries bring
  ``PAPER.contextual_passages``: at 300 passages one query would take minutes on a 2-core CPU.
  Questions: fanoutqa dev sub-questions whose answer is in one packaged wiki summary (the gold
  article), so the answer is among the passages.
"""

from __future__ import annotations

import importlib.util
import json
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

WORKLOADS = ("default", "paper")
CHUNK_WORDS = 64  # the apps' Indexing: a passage is at most this many words


@dataclass(frozen=True)
class PaperShape:
    """The ``paper`` workload's sizes (see the module doc)."""

    passages: tuple[int, int] = (300, 700)  # per query, drawn uniformly (seeded)
    answer_tokens: int = 10
    contextual_passages: tuple[int, int] = (12, 20)


PAPER = PaperShape()


@dataclass(frozen=True)
class Question:
    text: str
    gold: str
    title: str  # the wiki article that holds the answer


@dataclass(frozen=True)
class Workload:
    """Questions, the documents each app's query ``i`` brings (by app; an app absent brings
    none), and the answer cap (None: the apps' own)."""

    name: str
    questions: tuple[str, ...]
    documents: Mapping[str, tuple[tuple[str, ...], ...]] = field(default_factory=dict)
    answer_tokens: int | None = None

    def describe(self) -> str:
        sizes = {
            app: f"{min(map(len, docs))}-{max(map(len, docs))}"
            for app, docs in self.documents.items()
            if docs
        }
        docs = ", ".join(f"{app} {n} documents" for app, n in sizes.items()) or "no documents"
        cap = (
            f"answers <= {self.answer_tokens} tokens"
            if self.answer_tokens
            else "answers as the apps cap them"
        )
        return f"workload {self.name}: {len(self.questions)} questions, {docs} per query, {cap}"


def data_file(package: str, *parts: str) -> Path:
    """A file inside an installed data package (found without importing it)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"the {package} package is not installed (scripts/setup.sh adds it)")
    return Path(spec.submodule_search_locations[0], *parts)


def fanoutqa_questions(n: int, seed: int) -> list[str]:
    """``n`` questions of the fanoutqa dev set, a seeded sample (the package is not imported)."""
    path = data_file("fanoutqa", "data", "fanout-final-dev.json")
    questions = [q["question"] for q in json.loads(path.read_text())]
    if n > len(questions):
        raise ValueError(f"{n} questions: the dev set has {len(questions)}")
    return random.Random(seed).sample(questions, n)


def answerable_questions() -> list[Question]:
    """fanoutqa dev sub-questions answered by one packaged wiki summary (answer in its text)."""
    from ayo.engines.corpus import load_wiki

    extracts = {a.title: a.extract.lower() for a in load_wiki()}
    dev = json.loads(data_file("fanoutqa", "data", "fanout-final-dev.json").read_text())
    found: dict[str, Question] = {}

    def walk(node: dict[str, Any]) -> None:
        title = (node.get("evidence") or {}).get("title")
        answer = node.get("answer")
        if (
            title in extracts
            and isinstance(answer, (str, int))
            and not isinstance(answer, bool)
            and len(str(answer)) >= 3
            and str(answer).lower() in extracts[title]
        ):
            found.setdefault(node["question"], Question(node["question"], str(answer), title))
        for child in node.get("decomposition") or ():
            walk(child)

    for q in dev:
        for child in q.get("decomposition") or ():
            walk(child)
    return sorted(found.values(), key=lambda q: q.text)


def wiki_documents(n: int, seed: int, per_query: int = 3) -> tuple[tuple[str, ...], ...]:
    """``per_query`` seeded wiki summaries for each of ``n`` queries."""
    from ayo.engines.corpus import load_wiki

    articles = load_wiki()
    rng = random.Random(seed)
    return tuple(tuple(a.extract for a in rng.sample(articles, per_query)) for _ in range(n))


def passages(text: str, words: int = CHUNK_WORDS) -> list[str]:
    """``text`` cut into passages of at most ``words`` words (as the apps' Indexing cuts)."""
    split = text.split()
    return [" ".join(split[i : i + words]) for i in range(0, len(split), words)]


def query_passages(
    gold: str, sizes: tuple[int, int], rng: random.Random, articles: Sequence[Any]
) -> tuple[str, ...]:
    """The passages one query brings: the gold article's, then other articles' until a count
    drawn from ``sizes`` (inclusive) is reached, shuffled."""
    want = rng.randint(*sizes)
    by_title = {a.title: a for a in articles}
    out = passages(by_title[gold].extract)[:want]
    for i in rng.sample(range(len(articles)), len(articles)):
        if len(out) >= want:
            break
        if articles[i].title != gold:
            out += passages(articles[i].extract)[: want - len(out)]
    rng.shuffle(out)
    return tuple(out)


def paper_workload(
    apps: Sequence[str], n: int, seed: int, shape: PaperShape = PAPER
) -> tuple[Workload, list[Question]]:
    """``n`` answerable questions (seeded) and, per app that takes documents, each query's own
    passages (see the module doc). Also returns the questions with their gold answers."""
    from ayo.apps import APPS
    from ayo.engines.corpus import load_wiki

    pool = answerable_questions()
    if n > len(pool):
        raise ValueError(f"{n} questions: {len(pool)} answerable ones exist")
    chosen = random.Random(seed).sample(pool, n)
    articles = load_wiki()
    documents: dict[str, tuple[tuple[str, ...], ...]] = {}
    for app in apps:
        template = APPS[app]
        if "documents" not in template.required + template.optional:
            continue
        sizes = shape.contextual_passages if app == "contextual_rag" else shape.passages
        rng = random.Random(f"{seed}:{app}")
        documents[app] = tuple(query_passages(q.title, sizes, rng, articles) for q in chosen)
    workload = Workload(
        "paper", tuple(q.text for q in chosen), documents, answer_tokens=shape.answer_tokens
    )
    return workload, chosen


def default_workload(apps: Sequence[str], n: int, seed: int) -> Workload:
    """``n`` fanoutqa dev questions; three seeded wiki summaries per query for the apps that
    require documents (contextual_rag)."""
    from ayo.apps import APPS

    needs = [a for a in apps if a in APPS and "documents" in APPS[a].required]
    docs = wiki_documents(n, seed) if needs else ()
    return Workload("default", tuple(fanoutqa_questions(n, seed)), {a: docs for a in needs}, None)


def workload(name: str, apps: Sequence[str], n: int, seed: int) -> Workload:
    if name == "paper":
        return paper_workload(apps, n, seed)[0]
    if name == "default":
        return default_workload(apps, n, seed)
    raise ValueError(f"unknown workload {name!r}; choose from {', '.join(WORKLOADS)}")
