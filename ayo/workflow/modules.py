"""Retrieval modules (Indexing, Embed, Search, KeywordSearch, Rerank) and their decomposition."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ayo.scheduler import PlanError, PortType
from ayo.scheduler.ir import primitives as P

from .core import Module
from .lowering import Lowering, Source
from .refs import PortRef

T, TL, DL, V, B = (
    PortType.TEXT,
    PortType.TEXT_LIST,
    PortType.DOC_LIST,
    PortType.VECTORS,
    PortType.BOOL,
)
TEMP = "@query"  # Indexing into a collection that lives as long as the query


def as_list(b: Lowering, source: Source, suffix: str) -> Source:
    """A TextList source for a Text or TextList source (wraps a single text in a list)."""
    if source.type == TL:
        return source
    node = b.add(P.map_node(f"{b.module}.{suffix}", "to_list"))
    b.wire(source, node, "text")
    return b.out(node)


@dataclass(frozen=True)
class Indexing(Module):
    """documents (TextList) -> chunks -> [LLM context per chunk] -> Embed -> Ingest.

    Output ``collection`` (Text): the collection written (``"@query"``: one per query, dropped
    when the query ends). With ``context_prompt`` (placeholder ``{chunk}``) an LLM writes a
    context for each chunk, prepended before embedding (contextual retrieval).
    """

    id: str
    documents: PortRef
    collection: str = TEMP
    chunk_words: int = 64
    embedder: str = "embedder"
    index: str = "index"
    context_prompt: object = None  # a Prompt with placeholder {chunk}, or None
    llm: str = "llm"
    context_max_tokens: int = 48
    context_stop: tuple[str, ...] = ("\n",)  # the context is one line

    def __post_init__(self) -> None:
        if self.chunk_words < 1:
            raise PlanError(f"chunk_words must be >= 1, got {self.chunk_words}", node=self.id)
        if self.context_prompt is not None:
            self.context_prompt.check_bindings({"chunk"}, node=self.id)

    def refs(self) -> dict[str, PortRef]:
        return {"documents": self.documents}

    def check(self, types: Mapping[str, PortType]) -> None:
        self.expect(types, "documents", TL)

    def output_types(self, types: Mapping[str, PortType]) -> dict[str, PortType]:
        return {"collection": T}

    def lower(self, b: Lowering) -> dict[str, Source]:
        m = self.id
        chunk = b.add(P.map_node(f"{m}.chunk", "chunk_documents", chunk_words=self.chunk_words))
        b.wire(b.src(self.documents), chunk, "documents")
        docs = b.out(chunk)
        if self.context_prompt is not None:
            texts = b.add(P.map_node(f"{m}.chunk_texts", "doc_texts"))
            b.wire(docs, texts, "docs")
            pre = b.add(
                P.prefill(f"{m}.context_prefill", self.llm, self.context_prompt, map_over="chunk")
            )
            b.wire(b.out(texts), pre, "chunk")
            dec = b.add(
                P.decode(
                    f"{m}.context_decode",
                    self.llm,
                    self.context_max_tokens,
                    over_list=True,
                    stop=self.context_stop,
                )
            )
            b.wire(b.out(pre), dec, "seqs")
            attach = b.add(P.map_node(f"{m}.attach", "attach_context"))
            b.wire(docs, attach, "docs")
            b.wire(b.out(dec), attach, "contexts")
            docs = b.out(attach)
        emb = b.add(P.embed(f"{m}.embed", self.embedder, texts=DL))
        b.wire(docs, emb, "texts")
        ing = b.add(P.ingest(f"{m}.ingest", self.index, self.collection))
        b.wire(docs, ing, "docs")
        b.wire(b.out(emb), ing, "vectors")
        return {"collection": b.out(ing)}


@dataclass(frozen=True)
class Embed(Module):
    """texts (Text, TextList or DocList) -> ``vectors``, one per text."""

    id: str
    texts: PortRef
    embedder: str = "embedder"

    def refs(self) -> dict[str, PortRef]:
        return {"texts": self.texts}

    def check(self, types: Mapping[str, PortType]) -> None:
        self.expect(types, "texts", T, TL, DL)

    def output_types(self, types: Mapping[str, PortType]) -> dict[str, PortType]:
        return {"vectors": V}

    def lower(self, b: Lowering) -> dict[str, Source]:
        source = b.src(self.texts)
        texts = as_list(b, source, "as_list") if source.type == T else source
        node = b.add(P.embed(f"{self.id}.embed", self.embedder, texts=texts.type))
        b.wire(texts, node, "texts")
        return {"vectors": b.out(node)}


@dataclass(frozen=True)
class Search(Module):
    """query (Text or TextList) -> Embed -> Search: the top ``k`` docs per query, concatenated.

    ``collection``: a collection name, or a reference to one (an Indexing's output).
    """

    id: str
    query: PortRef
    k: int = 3
    collection: str | PortRef = "default"
    embedder: str = "embedder"
    index: str = "index"

    def refs(self) -> dict[str, PortRef]:
        refs = {"query": self.query}
        if isinstance(self.collection, PortRef):
            refs["collection"] = self.collection
        return refs

    def check(self, types: Mapping[str, PortType]) -> None:
        self.expect(types, "query", T, TL)
        if "collection" in types:
            self.expect(types, "collection", T)

    def output_types(self, types: Mapping[str, PortType]) -> dict[str, PortType]:
        return {"docs": DL}

    def lower(self, b: Lowering) -> dict[str, Source]:
        queries = as_list(b, b.src(self.query), "as_list")
        emb = b.add(P.embed(f"{self.id}.embed", self.embedder))
        b.wire(queries, emb, "texts")
        named = None if isinstance(self.collection, PortRef) else self.collection
        node = b.add(P.search(f"{self.id}.search", self.index, self.k, named))
        b.wire(b.out(emb), node, "vectors")
        if isinstance(self.collection, PortRef):
            b.wire(b.src(self.collection), node, "collection")
        return {"docs": b.out(node)}


@dataclass(frozen=True)
class KeywordSearch(Module):
    """query (Text or TextList) -> the top ``k`` docs by keywords, per query, concatenated."""

    id: str
    query: PortRef
    k: int = 4
    engine: str = "keyword"

    def refs(self) -> dict[str, PortRef]:
        return {"query": self.query}

    def check(self, types: Mapping[str, PortType]) -> None:
        self.expect(types, "query", T, TL)

    def output_types(self, types: Mapping[str, PortType]) -> dict[str, PortType]:
        return {"docs": DL}

    def lower(self, b: Lowering) -> dict[str, Source]:
        queries = as_list(b, b.src(self.query), "as_list")
        node = b.add(P.keyword_search(f"{self.id}.search", self.engine, self.k))
        b.wire(queries, node, "queries")
        return {"docs": b.out(node)}


@dataclass(frozen=True)
class Rerank(Module):
    """(query, docs) -> the hits of all queries fused by reciprocal rank, one copy each (see
    ``fuse_ranks``), the first ``candidates`` of them (0: all) -> the ``top_k`` docs by the
    reranker."""

    id: str
    query: PortRef
    docs: PortRef
    top_k: int = 3
    engine: str = "reranker"
    candidates: int = 0

    def refs(self) -> dict[str, PortRef]:
        return {"query": self.query, "docs": self.docs}

    def check(self, types: Mapping[str, PortType]) -> None:
        self.expect(types, "query", T)
        self.expect(types, "docs", DL)

    def output_types(self, types: Mapping[str, PortType]) -> dict[str, PortType]:
        return {"docs": DL}

    def lower(self, b: Lowering) -> dict[str, Source]:
        limit = {"limit": self.candidates} if self.candidates else {}
        unique = b.add(P.map_node(f"{self.id}.fuse", "fuse_ranks", **limit))
        b.wire(b.src(self.docs), unique, "docs")
        node = b.add(P.rerank(f"{self.id}.rerank", self.engine, self.top_k))
        b.wire(b.src(self.query), node, "query")
        b.wire(b.out(unique), node, "docs")
        return {"docs": b.out(node)}
