"""Fixtures for the LLM engine tests: tiny random-weight peers and the SmolLM2 GGUF peer.

Every peer model is built or loaded once per session; its reference outputs come from Hugging
Face ``transformers`` greedy ``generate`` on the same weights.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")

TINY = dict(
    vocab_size=211,
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,  # grouped-query attention
    max_position_embeddings=256,
)


@dataclass
class Peer:
    path: Path
    hf: torch.nn.Module
    prompts: list[list[int]]
    expected: list[list[int]]  # transformers' greedy continuation of each prompt


def hf_greedy(model: torch.nn.Module, ids: list[int], n: int) -> list[int]:
    """transformers' greedy continuation of ``ids``: exactly ``n`` tokens, EOS not special."""
    model.generation_config.eos_token_id = None
    with torch.inference_mode():
        out = model.generate(
            torch.tensor([ids]),
            attention_mask=torch.ones(1, len(ids), dtype=torch.long),
            max_new_tokens=n,
            do_sample=False,
            pad_token_id=0,
        )
    return out[0, len(ids) :].tolist()


def _tiny(kind: str, root: Path) -> Peer:
    import transformers as tf

    torch.manual_seed(0)
    if kind == "llama":
        model = tf.LlamaForCausalLM(tf.LlamaConfig(**TINY))
    elif kind == "mistral":  # a sliding window: the engine caps its context there
        model = tf.MistralForCausalLM(tf.MistralConfig(**TINY, sliding_window=128))
    else:  # Qwen2: q/k/v biases, tied embeddings
        model = tf.Qwen2ForCausalLM(tf.Qwen2Config(**TINY, tie_word_embeddings=True))
    model.eval()
    path = root / kind
    model.save_pretrained(path)
    g = torch.Generator().manual_seed(1)
    prompts = [
        torch.randint(0, TINY["vocab_size"], (n,), generator=g).tolist() for n in (3, 19, 45)
    ]
    return Peer(path, model, prompts, [hf_greedy(model, p, 32) for p in prompts])


@pytest.fixture(scope="session", params=["llama", "qwen2"])
def tiny(request, tmp_path_factory) -> Peer:
    return _tiny(request.param, tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="session")
def tiny_mistral(tmp_path_factory) -> Peer:
    return _tiny("mistral", tmp_path_factory.mktemp("tiny_mistral"))


@pytest.fixture(scope="session")
def tiny_llama(tmp_path_factory) -> Peer:
    return _tiny("llama", tmp_path_factory.mktemp("tiny_llama"))


SMOL_QUESTIONS = [
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "Explain gravity to a child in two sentences.",
]


@dataclass
class SmolPeer:
    hf: torch.nn.Module
    loaded: object  # ayo.engines.llm.loader.LoadedModel (float32 weights)
    model: object  # our float32 LlamaModel, shared by the engines the tests build
    tokenizer: object
    prompts: list[list[int]]
    expected: list[list[int]]


@pytest.fixture(scope="session")
def smol() -> SmolPeer:
    """SmolLM2-135M-Instruct from its GGUF, loaded once by transformers (~15 s) and by us."""
    from transformers import AutoModelForCausalLM

    from ayo.engines.llm.loader import load_model, load_tokenizer, resolve_model_path
    from ayo.engines.llm.model import LlamaModel

    path = resolve_model_path("smollm2-135m-instruct")
    hf = AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, dtype=torch.float32
    )
    hf.eval()
    loaded = load_model(path)
    tok = load_tokenizer(loaded)
    prompts = []
    for q in SMOL_QUESTIONS:
        text = tok.apply_chat_template(
            [{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True
        )
        prompts.append(tok(text, add_special_tokens=False)["input_ids"])
    model = LlamaModel(loaded.config, loaded.weights, torch.float32)  # attention: CPU matmul
    return SmolPeer(hf, loaded, model, tok, prompts, [hf_greedy(hf, p, 32) for p in prompts])


@pytest.fixture(scope="session")
def greedy():
    """``hf_greedy`` as a fixture (test modules here are not a package)."""
    return hf_greedy
