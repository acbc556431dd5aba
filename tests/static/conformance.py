"""The static proof that every engine implements its protocols (``ayo.scheduler.ir.engine_api``).

Not run: checked by mypy (``tests/static/test_conformance.py``). Each function below assigns an
engine to the protocols it must satisfy; mypy rejects a missing method, a parameter of another
name or kind (``info`` is required and keyword-only), or an incompatible return type. Nothing at
run time asks an engine what it can do: this file is where that is settled.
"""

from __future__ import annotations

from ayo.cluster.remote import RemoteEngine
from ayo.engines.collection_index import CollectionIndex, CollectionKeywordIndex
from ayo.engines.embedder import Embedder
from ayo.engines.llm import LLMEngine
from ayo.engines.reranker import Reranker
from ayo.scheduler.batching.llm_proxy import BatchedLLM
from ayo.scheduler.batching.proxies import (
    BatchedEmbedder,
    BatchedIndex,
    BatchedKeywordIndex,
    BatchedReranker,
)
from ayo.scheduler.ir.engine_api import (
    EmbedderProtocol,
    Engine,
    KeywordIndexProtocol,
    LLMProtocol,
    RerankerProtocol,
    VectorIndexProtocol,
)
from ayo.scheduler.sim.fakes import FakeEmbedder, FakeIndex, FakeKeywordIndex, FakeLLM, FakeReranker
from ayo.scheduler.sim.simulation import SimEmbedder, SimIndex, SimKeywordIndex, SimLLM, SimReranker
from benchmarks.peers import RecordingLLM
from benchmarks.scheduler import NullEmbedder, NullIndex, NullLLM

# -- the embedded engines -------------------------------------------------------------------------


def llm(e: LLMEngine) -> tuple[Engine, LLMProtocol]:
    return e, e


def embedder(e: Embedder) -> tuple[Engine, EmbedderProtocol]:
    return e, e


def reranker(e: Reranker) -> tuple[Engine, RerankerProtocol]:
    return e, e


def index(e: CollectionIndex) -> tuple[Engine, VectorIndexProtocol]:
    return e, e


def keyword(e: CollectionKeywordIndex) -> tuple[Engine, KeywordIndexProtocol]:
    return e, e


# -- an engine in a Ray actor: one class for every kind ----------------------------------------------


def remote(
    e: RemoteEngine,
) -> tuple[
    Engine,
    LLMProtocol,
    EmbedderProtocol,
    VectorIndexProtocol,
    KeywordIndexProtocol,
    RerankerProtocol,
]:
    return e, e, e, e, e, e


# -- the fakes and the simulated engines (tests, the simulator) --------------------------------------


def fakes(
    a: FakeLLM, b: FakeEmbedder, c: FakeIndex, d: FakeKeywordIndex, f: FakeReranker
) -> tuple[
    LLMProtocol, EmbedderProtocol, VectorIndexProtocol, KeywordIndexProtocol, RerankerProtocol
]:
    return a, b, c, d, f


def fakes_are_engines(
    a: FakeLLM, b: FakeEmbedder, c: FakeIndex, d: FakeKeywordIndex, f: FakeReranker
) -> tuple[Engine, Engine, Engine, Engine, Engine]:
    return a, b, c, d, f


def simulated(
    a: SimLLM, b: SimEmbedder, c: SimIndex, d: SimKeywordIndex, f: SimReranker
) -> tuple[
    LLMProtocol, EmbedderProtocol, VectorIndexProtocol, KeywordIndexProtocol, RerankerProtocol
]:
    return a, b, c, d, f


def simulated_are_engines(
    a: SimLLM, b: SimEmbedder, c: SimIndex, d: SimKeywordIndex, f: SimReranker
) -> tuple[Engine, Engine, Engine, Engine, Engine]:
    return a, b, c, d, f


# -- the benchmarks' engines -------------------------------------------------------------------------


def benchmark_engines(
    a: NullLLM, b: NullEmbedder, c: NullIndex, d: RecordingLLM
) -> tuple[LLMProtocol, EmbedderProtocol, VectorIndexProtocol, LLMProtocol, Engine]:
    return a, b, c, d, d


# -- the runtime's proxies: what plans call -------------------------------------------------------


def proxies(
    a: BatchedLLM, b: BatchedEmbedder, c: BatchedIndex, d: BatchedKeywordIndex, f: BatchedReranker
) -> tuple[
    LLMProtocol, EmbedderProtocol, VectorIndexProtocol, KeywordIndexProtocol, RerankerProtocol
]:
    return a, b, c, d, f
