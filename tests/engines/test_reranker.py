"""Reranker: the cross-encoder path against transformers; the default embedding scorer."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ayo.engines import InvalidRequest, Reranker
from ayo.engines.records import Doc, RerankRequest
from ayo.engines.reranker import CrossEncoderScorer, LexicalScorer

QUERY = "What is the capital of France?"
PASSAGES = [
    "Paris is the capital and largest city of France.",
    "Bananas are rich in potassium.",
    "France borders Spain, Italy, Germany and Belgium. " * 12,  # > 64 tokens: truncated
    "The Eiffel Tower is in Paris.",
    "z",
]
DOCS = tuple(Doc(f"p{i}", text) for i, text in enumerate(PASSAGES))


def _request(query: str, top_k: int = len(PASSAGES), docs: tuple = DOCS) -> RerankRequest:
    return RerankRequest(query, docs, top_k)


def _order(docs: list[Doc]) -> list[int]:
    return [int(d.id[1:]) for d in docs]


@pytest.fixture(scope="module")
def tiny_cross_encoder(tmp_path_factory, minilm):
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=minilm.tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2,
        num_attention_heads=2, intermediate_size=48, max_position_embeddings=64, num_labels=1,
    )  # fmt: skip
    path = tmp_path_factory.mktemp("tiny-ce")
    BertForSequenceClassification(config).eval().save_pretrained(path)
    minilm.tokenizer.save_pretrained(path)
    return path


def _reference_scores(path, query, passages):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForSequenceClassification.from_pretrained(path).eval()
    out = []
    with torch.inference_mode():
        for p in passages:  # one pair at a time: no padding at all
            enc = tok(query, p, truncation="longest_first", max_length=64, return_tensors="pt")
            out.append(model(**enc).logits[0, 0].item())
    return np.array(out, dtype=np.float32)


async def test_cross_encoder_matches_transformers(tiny_cross_encoder):
    reranker = Reranker.from_model(tiny_cross_encoder)
    assert reranker.scorer == f"cross-encoder:{tiny_cross_encoder.name}"
    want = _reference_scores(tiny_cross_encoder, QUERY, PASSAGES)
    (result,) = await reranker.rerank([_request(QUERY)])
    order = _order(result)
    np.testing.assert_allclose([d.score for d in result], want[order], rtol=1e-5, atol=1e-4)
    assert order == np.argsort(-want, kind="stable").tolist()
    # Two requests in one call: one scorer batch of every pair, each scored as alone.
    other = "Which fruit has potassium?"
    before = reranker.stats().batches
    both = await reranker.rerank([_request(QUERY, 2), _request(other)])
    assert reranker.stats().batches == before + 1
    assert _order(both[0]) == order[:2]
    np.testing.assert_allclose(
        sorted(d.score for d in both[1]),
        sorted(_reference_scores(tiny_cross_encoder, other, PASSAGES)),
        rtol=1e-5, atol=1e-4,
    )  # fmt: skip
    reranker.close()


def test_cross_encoder_two_labels_scores_last_label(tiny_cross_encoder, tmp_path, minilm):
    from transformers import BertConfig, BertForSequenceClassification

    config = BertConfig.from_pretrained(tiny_cross_encoder, num_labels=2)
    BertForSequenceClassification(config).eval().save_pretrained(tmp_path)
    minilm.tokenizer.save_pretrained(tmp_path)
    scorer = CrossEncoderScorer(tmp_path)
    got = np.array(scorer.execute(_pairs()))
    assert (got <= 0).all()  # log-probabilities
    scorer.close()


def _pairs():
    from ayo.engines.reranker import PairRequest

    return [PairRequest(QUERY, p) for p in PASSAGES[:3]]


async def test_default_reranker_scores_with_the_embedder(minilm):
    reranker = Reranker.from_model(embedder=minilm)
    assert reranker.scorer == "embedding-cosine:all-minilm-l6-v2"
    (result,) = await reranker.rerank([_request(QUERY, 3)])
    vectors = minilm.embed_sync([QUERY, *PASSAGES]).vectors
    want = vectors[1:] @ vectors[0]
    assert _order(result) == np.argsort(-want)[:3].tolist() and result[0].id == "p0"
    np.testing.assert_allclose([d.score for d in result], want[_order(result)], atol=1e-5)
    with pytest.raises(InvalidRequest):
        await reranker.rerank([_request("  ")])
    with pytest.raises(InvalidRequest):
        await reranker.rerank([_request(QUERY, docs=(Doc("a", "ok"), Doc("b", "")))])
    with pytest.raises(InvalidRequest):
        _request(QUERY, top_k=0)
    assert await reranker.rerank([_request(QUERY, docs=())]) == [[]]


async def test_bm25_reranker_fuses_its_order_with_the_retrievals():
    """The BM25 reranker moves a passage that shares the query's words up, without discarding
    the order the passages came in: each scores 1/(61+rank) in both orders, summed."""
    reranker = Reranker.of_kind("bm25")
    assert isinstance(reranker.backend, LexicalScorer) and reranker.fuse
    docs = (Doc("a", "rivers and valleys"), Doc("b", "bread and glass"),
            Doc("c", "the capital of France is Paris"))  # fmt: skip
    (fused,) = await reranker.rerank([RerankRequest("capital of France", docs, 3)])
    assert [d.id for d in fused] == ["a", "c", "b"]  # c: last retrieved, first by BM25
    assert fused[1].score == pytest.approx(1 / 63 + 1 / 61, abs=1e-6)
