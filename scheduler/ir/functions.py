"""Map functions: named, typed user code run by ``Map`` primitives.

A Map node names its function (config ``fn``) so plans stay hashable and printable; the
function and its port types live in this registry. ``per_item`` functions take lists and return
a list of the same length, so a stream can flow through them chunk by chunk.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ayo.engines.records import Doc, reciprocal_rank

from .ports import Port, PortType


@dataclass(frozen=True)
class MapFn:
    """``func(config, **inputs) -> value``.

    ``size(config, input_size)`` estimates the output list length from the item count of the
    first list input (None when unknown); stage decomposition uses it.
    """

    name: str
    func: Callable[..., Any]
    inputs: tuple[Port, ...]
    output: PortType
    item_port: str = ""
    size: Callable[[Mapping[str, Any], int | None], int | None] | None = None


MAP_FUNCTIONS: dict[str, MapFn] = {}


def register_map(fn: MapFn) -> MapFn:
    """Add ``fn`` to the registry; a name may be registered once."""
    if fn.name in MAP_FUNCTIONS and MAP_FUNCTIONS[fn.name] is not fn:
        raise ValueError(f"map function {fn.name!r} is already registered")
    MAP_FUNCTIONS[fn.name] = fn
    return fn


def get_map(name: str) -> MapFn:
    try:
        return MAP_FUNCTIONS[name]
    except KeyError:
        raise KeyError(f"unknown map function {name!r}; register it with register_map") from None


def _same(_: Mapping[str, Any], n: int | None) -> int | None:
    return n


def _chunk_documents(config: Mapping[str, Any], documents: list[str]) -> list[Doc]:
    words_per_chunk = int(config.get("chunk_words", 64))
    out = []
    for i, text in enumerate(documents):
        words = text.split()
        for j in range(0, max(len(words), 1), words_per_chunk):
            out.append(
                Doc(f"d{i}c{j // words_per_chunk}", " ".join(words[j : j + words_per_chunk]))
            )
    return out


def _format_docs(config: Mapping[str, Any], docs: list[Doc]) -> str:
    # Plain passages, a blank line apart: numbered ones ("[1] ...") made the 135M model answer
    # with the numbers and lists of passages.
    return "\n\n".join(d.text.strip() for d in docs)


def _select_doc(config: Mapping[str, Any], docs: list[Doc]) -> str:
    index = int(config["index"])
    return docs[index].text if index < len(docs) else ""


def _unique_docs(config: Mapping[str, Any], docs: list[Doc]) -> list[Doc]:
    seen: set[str] = set()
    out = []
    for d in docs:
        if d.id not in seen:
            seen.add(d.id)
            out.append(d)
    return out


def _fuse_ranks(config: Mapping[str, Any], docs: list[Doc]) -> list[Doc]:
    """Hits of several queries fused by reciprocal rank: a doc scores the sum of
    ``1 / (RRF_K + rank + 1)`` over the lists it is in; one copy each, best first (ties: the
    best rank it had, then its id, so the order never depends on the lists' arrival order);
    the first ``limit`` of them when the config sets one."""
    fused: dict[str, list] = {}
    for d in docs:
        entry = fused.get(d.id)
        if entry is None:
            fused[d.id] = [reciprocal_rank(d.rank), d.rank, d]
        else:
            entry[0] += reciprocal_rank(d.rank)
            entry[1] = min(entry[1], d.rank)
    order = sorted(fused.values(), key=lambda e: (-e[0], e[1], e[2].id))
    if config.get("limit"):
        order = order[: int(config["limit"])]
    return [Doc(d.id, d.text, round(score, 6), rank) for rank, (score, _, d) in enumerate(order)]


def _attach_context(config: Mapping[str, Any], docs: list[Doc], contexts: list[str]) -> list[Doc]:
    if len(docs) != len(contexts):
        raise ValueError(f"{len(docs)} chunks but {len(contexts)} contexts")
    return [Doc(d.id, f"{c.strip()}\n{d.text}", d.score) for d, c in zip(docs, contexts)]


def _parse_yes_no(config: Mapping[str, Any], text: str) -> bool:
    return text.strip().lower().startswith("yes")


def _first_probability(config: Mapping[str, Any], probs: tuple[float, ...]) -> float:
    return float(probs[0])


def _at_least(config: Mapping[str, Any], value: float) -> bool:
    return float(value) >= float(config["threshold"])


def _join_texts(config: Mapping[str, Any], a: str, b: str) -> str:
    return f"{a.strip()}\n{b.strip()}"


T, TL, DL = PortType.TEXT, PortType.TEXT_LIST, PortType.DOC_LIST
for _fn in (
    MapFn("to_list", lambda config, text: [text], (Port("text", T),), TL, size=lambda c, n: 1),
    MapFn(
        "chunk_documents",
        _chunk_documents,
        (Port("documents", TL),),
        DL,
        size=lambda c, n: None if n is None else n * int(c.get("est_chunks_per_doc", 4)),
    ),
    MapFn("format_docs", _format_docs, (Port("docs", DL),), T),
    MapFn("select_doc", _select_doc, (Port("docs", DL),), T),
    MapFn("unique_docs", _unique_docs, (Port("docs", DL),), DL, size=_same),
    MapFn("fuse_ranks", _fuse_ranks, (Port("docs", DL),), DL, size=_same),
    MapFn(
        "attach_context",
        _attach_context,
        (Port("docs", DL, aligned=True), Port("contexts", TL)),
        DL,
        item_port="contexts",
        size=_same,
    ),
    MapFn(
        "doc_texts",
        lambda config, docs: [d.text for d in docs],
        (Port("docs", DL),),
        TL,
        item_port="docs",
        size=_same,
    ),
    MapFn("doc_ids", lambda config, docs: [d.id for d in docs], (Port("docs", DL),), TL),
    MapFn("parse_yes_no", _parse_yes_no, (Port("text", T),), PortType.BOOL),
    MapFn("empty_text", lambda config, value: "", (Port("value", PortType.ANY),), T),
    MapFn("join_texts", _join_texts, (Port("a", T), Port("b", T)), T),
    MapFn("first_probability", _first_probability, (Port("probs", PortType.ANY),), PortType.ANY),
    MapFn("at_least", _at_least, (Port("value", PortType.ANY),), PortType.BOOL),
):
    register_map(_fn)
