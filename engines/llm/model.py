"""The Llama-family decoder (Llama, Mistral, Qwen2, SmolLM2) written on ``ayo.kernels``.

Weights are plain tensors; q/k/v and gate/up are fused into one matmul each. The forward pass
takes a packed batch (decode tokens first, then prefill chunks) and the paged KV caches.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ayo import kernels

from .attention import DecodeGroup, decode_matmul, plan_decode, prefill_matmul, uses_matmul
from .config import ModelConfig
from .formats import DENSE_FORMATS, QUANTIZED_FORMATS
from .linear import onednn_linear, pack_weight, uses_packed_linear
from .quant import Blocks, QuantLinear, dense_linear, format_key, quantize, quantized_linear


@dataclass
class AttentionMetadata:
    """Where the packed tokens of one step go in the paged cache and what they attend to.

    The first ``num_decode`` tokens are single-token steps of ``num_decode`` sequences; the rest
    are prefill chunks of the remaining sequences.
    """

    slot_mapping: torch.Tensor  # [T] int64: block * block_size + offset of each token
    num_decode: int
    decode_block_tables: torch.Tensor  # [num_decode, max_blocks] int32
    decode_seq_lens: torch.Tensor  # [num_decode] int32, context length including the new token
    prefill_block_tables: torch.Tensor  # [P, max_blocks] int32
    prefill_cu_q_lens: torch.Tensor  # [P + 1] int32 offsets into the prefill tokens
    prefill_seq_lens: torch.Tensor  # [P] int32 total lengths including the chunk


@dataclass
class StepTensors:
    """What every layer of one step reads, derived from the metadata once per step (CPU path)."""

    cos: torch.Tensor  # [T, 1, D/2] model dtype: rotary rows of the step's positions
    sin: torch.Tensor
    decode: list[DecodeGroup]  # gather indices and masks of the decode tokens


Linear = torch.Tensor | QuantLinear  # a dense (maybe oneDNN-packed) or quantized weight


@dataclass
class LayerWeights:
    input_norm: torch.Tensor
    qkv: Linear
    qkv_bias: torch.Tensor | None
    o_proj: Linear
    post_norm: torch.Tensor
    gate_up: Linear
    down: Linear


class LlamaModel:
    """Inference-only decoder. ``forward`` returns float32 logits of the requested rows.

    ``dtype`` is the activations' (and the KV cache's); ``weights`` the matmul weights' format
    (``quant.WEIGHT_FORMATS``; None: dense in ``dtype``). ``blocks`` are a GGUF file's own
    quantized tensors by name (``loader.LoadedModel.blocks``), repacked as they are where the
    format holds them (``engines/llm/quant.py``).
    """

    def __init__(
        self,
        config: ModelConfig,
        weights: dict[str, torch.Tensor],
        dtype: torch.dtype,
        attention: str = "auto",
        packed_linear: bool | None = None,
        weight_format: str | None = None,
        blocks: dict[str, Blocks] | None = None,
        dense_from: int | None = None,
    ):
        self.config = config
        self.dtype = dtype
        blocks = blocks or {}

        def w(name: str) -> torch.Tensor:
            if name not in weights:
                raise KeyError(f"checkpoint lacks {name}")
            return weights[name].to(dtype).contiguous()

        self.embed = w("model.embed_tokens.weight")
        device = self.embed.device
        dense_format = {v: k for k, v in DENSE_FORMATS.items()}[str(dtype).removeprefix("torch.")]
        self.weight_format = weight_format or dense_format
        quantized = self.weight_format in QUANTIZED_FORMATS
        if not quantized and self.weight_format != dense_format:
            raise ValueError(f"{self.weight_format} weights are dense; the model is {dtype}")
        if quantized and device.type != "cpu":
            raise ValueError(f"{self.weight_format} weights run on the CPU only")
        if quantized and dense_from is None:
            from .config import measured_formats

            key = format_key(self.weight_format, str(dtype).removeprefix("torch."))
            dense_from = int(measured_formats((key,))[key]["dense_from"])
        self.dense_from = dense_from or 0  # quantized: rows from which the dense copy runs
        # On the CPU the matmuls go through oneDNN with weights reordered once into its blocked
        # layout: at batch 1 to 16 it streams the weights 1.7-2.4x faster than F.linear's BLAS
        # on CPUs where that BLAS takes a generic path (benchmarks.llm_engine shows both).
        if packed_linear is None:
            packed_linear = uses_packed_linear(device, dtype)
        self.linear = (
            quantized_linear if quantized else onednn_linear if packed_linear else F.linear
        )
        pack = pack_weight if packed_linear else (lambda t: t)
        self.dense_bytes = 0  # quantized: the dense copies' bytes (memory, not decode reads)

        def linear(names: list[str], fmt: str | None = None) -> Linear:
            """The weights ``names`` stacked by rows, in this model's format (or ``fmt``)."""
            if not quantized:
                return pack(torch.cat([w(n) for n in names]).contiguous())

            def dense() -> torch.Tensor:
                return torch.cat([weights[n].float() for n in names])

            lin = quantize(
                dense, Blocks.stack([blocks.get(n) for n in names]), fmt or self.weight_format
            )
            if self.dense_from:
                full = dense().to(dtype)
                lin.keep_dense(dense_linear(full, dtype), self.dense_from, full.nbytes)
                self.dense_bytes += full.nbytes
            return lin

        self.layers: list[LayerWeights] = []
        for i in range(config.num_layers):
            p = f"model.layers.{i}."
            a = p + "self_attn."
            bias = None
            if config.attention_bias:
                bias = torch.cat([w(a + f"{n}_proj.bias") for n in "qkv"]).contiguous()
            self.layers.append(
                LayerWeights(
                    input_norm=w(p + "input_layernorm.weight"),
                    qkv=linear([a + f"{n}_proj.weight" for n in "qkv"]),
                    qkv_bias=bias,
                    o_proj=linear([a + "o_proj.weight"]),
                    post_norm=w(p + "post_attention_layernorm.weight"),
                    gate_up=linear([p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"]),
                    down=linear([p + "mlp.down_proj.weight"]),
                )
            )
        self.norm = w("model.norm.weight")
        tied = config.tie_word_embeddings or "lm_head.weight" not in weights
        head = "model.embed_tokens.weight" if tied else "lm_head.weight"
        # Tied: the embedding stays dense for the lookup; a packed lm_head is its own copy. With
        # int4 weights the lm_head is int8, as llama.cpp's Q4 files keep theirs at Q8_0.
        self.lm_head = linear([head], "int8" if self.weight_format == "int4" else None)
        self.cos_sin = kernels.rotary_cos_sin_cache(
            config.head_dim,
            config.max_position_embeddings,
            config.rope_theta,
            scaling_factor=config.rope_scaling_factor,
        )
        self.scale = config.head_dim**-0.5
        # Bound once: the per-layer calls below go straight to the backend's function.
        self.cpu_attention = uses_matmul(attention, device)
        impl = kernels.implementation
        self.rms_norm = impl("rms_norm", device)
        self.silu_and_mul = impl("silu_and_mul", device)
        self.apply_rotary = impl("apply_rotary", device)
        self.write_kv_cache = impl("write_kv_cache", device)
        self.decode_attention = impl("paged_decode_attention", device)
        self.prefill_attention = (
            prefill_matmul if self.cpu_attention else impl("paged_prefill_attention", device)
        )

    @property
    def weight_bytes(self) -> int:
        """Bytes read per decode step: every weight once (the tied embedding counted once)."""
        tensors = [self.norm, self.lm_head]
        for lw in self.layers:
            tensors += [lw.input_norm, lw.qkv, lw.o_proj, lw.post_norm, lw.gate_up, lw.down]
        return sum(
            t.numel() * t.element_size() if isinstance(t, torch.Tensor) else t.nbytes
            for t in tensors
        )

    def step_tensors(
        self, positions: torch.Tensor, meta: AttentionMetadata, block_size: int
    ) -> StepTensors:
        """Rotary rows and decode gather plans of one step, for all layers (CPU path)."""
        half = self.config.head_dim // 2
        rows = self.cos_sin[positions]
        cos = rows[:, None, :half].to(self.dtype)
        sin = rows[:, None, half:].to(self.dtype)
        decode = []
        if meta.num_decode:
            decode = plan_decode(meta.decode_block_tables, meta.decode_seq_lens, block_size)
        return StepTensors(cos, sin, decode)

    @torch.inference_mode()
    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        meta: AttentionMetadata,
        kv_caches: list[tuple[torch.Tensor, torch.Tensor]],
        logit_rows: torch.Tensor,
    ) -> torch.Tensor:
        """``input_ids, positions [T]`` -> float32 logits ``[len(logit_rows), vocab]``."""
        eps = self.config.rms_norm_eps
        step = None
        if self.cpu_attention:
            step = self.step_tensors(positions, meta, kv_caches[0][0].shape[1])
        h = F.embedding(input_ids, self.embed)
        residual: torch.Tensor | None = None
        for lw, (k_cache, v_cache) in zip(self.layers, kv_caches):
            if residual is None:
                residual = h
                h = self.rms_norm(h, lw.input_norm, eps, None)
            else:
                h, residual = self.rms_norm(h, lw.input_norm, eps, residual)
            h = self._attention(h, lw, positions, meta, step, k_cache, v_cache)
            h, residual = self.rms_norm(h, lw.post_norm, eps, residual)
            h = self.linear(self.silu_and_mul(self.linear(h, lw.gate_up)), lw.down)
        h, residual = h[logit_rows], residual[logit_rows]
        h, _ = self.rms_norm(h, self.norm, eps, residual)
        return self.linear(h, self.lm_head).float()

    def _attention(
        self,
        h: torch.Tensor,
        lw: LayerWeights,
        positions: torch.Tensor,
        meta: AttentionMetadata,
        step: StepTensors | None,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
    ) -> torch.Tensor:
        cfg = self.config
        n = h.shape[0]
        qkv = self.linear(h, lw.qkv, lw.qkv_bias)
        qk_size = cfg.q_size + cfg.kv_size
        k = qkv[:, cfg.q_size : qk_size].view(n, cfg.num_kv_heads, cfg.head_dim)
        v = qkv[:, qk_size:].view(n, cfg.num_kv_heads, cfg.head_dim)
        if step is None:
            q = qkv[:, : cfg.q_size].view(n, cfg.num_heads, cfg.head_dim)
            self.apply_rotary(q, k, positions, self.cos_sin)
            self.write_kv_cache(k, v, k_cache, v_cache, meta.slot_mapping)
        else:
            # q and k rotated together, in place: one view of both over the fused projection
            qk = qkv[:, :qk_size].view(n, cfg.num_heads + cfg.num_kv_heads, cfg.head_dim)
            rotate_in_place(qk, step.cos, step.sin)
            q = qk[:, : cfg.num_heads]
            k_cache.view(-1, cfg.num_kv_heads, cfg.head_dim).index_copy_(0, meta.slot_mapping, k)
            v_cache.view(-1, cfg.num_kv_heads, cfg.head_dim).index_copy_(0, meta.slot_mapping, v)
        nd = meta.num_decode
        if nd == n and step is not None:
            out = decode_matmul(q, k_cache, v_cache, step.decode, self.scale)
        elif nd == n:
            out = self.decode_attention(
                q, k_cache, v_cache, meta.decode_block_tables, meta.decode_seq_lens, self.scale
            )
        else:
            out = torch.empty_like(q)
            if nd and step is not None:
                out[:nd] = decode_matmul(q[:nd], k_cache, v_cache, step.decode, self.scale)
            elif nd:
                out[:nd] = self.decode_attention(
                    q[:nd], k_cache, v_cache, meta.decode_block_tables, meta.decode_seq_lens,
                    self.scale,
                )  # fmt: skip
            out[nd:] = self.prefill_attention(
                q[nd:],
                k_cache,
                v_cache,
                meta.prefill_block_tables,
                meta.prefill_cu_q_lens,
                meta.prefill_seq_lens,
                self.scale,
            )
        return self.linear(out.reshape(n, cfg.q_size), lw.o_proj)


def rotate_in_place(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> None:
    """NeoX / Llama half rotation of ``x [T, H, D]`` in place, rounding exactly as Hugging Face's
    ``x * cos + rotate_half(x) * sin`` does: ``x1' = x1*cos - x2*sin``, ``x2' = x2*cos + x1*sin``."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    x1_sin = x1 * sin
    x2_sin = x2 * sin
    x1.mul_(cos).sub_(x2_sin)
    x2.mul_(cos).add_(x1_sin)
