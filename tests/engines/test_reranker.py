"""Reranker: the cross-encoder path against transformers; the default embedding scorer."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import torch

from ayo.engines import InvalidRequest, Reranker
from ayo.engines.reranker import CrossEncoderScorer

QUERY = "What is the capital of France?"
PASSAGES = [
    "Paris is the capital and largest city of France.",
    "Bananas are rich in potassium.",
    "France borders Spain, Italy, Germany and Belgium. " * 12,  # > 64 tokens: truncated
    "The Eiffel Tower is in Paris.",
    "z",
]


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
    result = await reranker.rerank(QUERY, PASSAGES)
    np.testing.assert_allclose(result.scores, want[result.indices], rtol=1e-5, atol=1e-5)
    assert result.indices == np.argsort(-want, kind="stable").tolist()
    # Pairs of two queries at once share batches and still score the same.
    other = "Which fruit has potassium?"
    both = await asyncio.gather(
        reranker.rerank(QUERY, PASSAGES, 2), reranker.rerank(other, PASSAGES)
    )
    assert both[0].indices == result.indices[:2]
    np.testing.assert_allclose(
        sorted(both[1].scores), sorted(_reference_scores(tiny_cross_encoder, other, PASSAGES)),
        rtol=1e-5, atol=1e-5,
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
    result = await reranker.rerank(QUERY, PASSAGES, top_k=3)
    vectors = minilm.embed_sync([QUERY, *PASSAGES]).vectors
    want = vectors[1:] @ vectors[0]
    assert result.indices == np.argsort(-want)[:3].tolist() and result.indices[0] == 0
    np.testing.assert_allclose(result.scores, want[result.indices], atol=1e-5)
    with pytest.raises(InvalidRequest):
        await reranker.rerank("  ", PASSAGES)
    with pytest.raises(InvalidRequest):
        await reranker.rerank(QUERY, ["ok", ""])
    with pytest.raises(InvalidRequest):
        await reranker.rerank(QUERY, PASSAGES, top_k=0)
    assert (await reranker.rerank(QUERY, [])).indices == []
