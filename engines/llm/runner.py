"""ModelRunner: owns the model and the paged KV caches, turns a scheduler output into one
packed forward pass, and samples."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch

from ayo import kernels

from .config import EngineConfig, ModelConfig
from .model import AttentionMetadata, LlamaModel
from .scheduler import ScheduledChunk
from .sequence import DecodeState

log = logging.getLogger(__name__)


@dataclass
class StepLogits:
    """Logits of one step: ``logits[offsets[i]:offsets[i + 1]]`` belong to chunk ``i``."""

    logits: torch.Tensor  # [R, vocab] float32
    offsets: list[int]

    def of(self, i: int) -> torch.Tensor:
        return self.logits[self.offsets[i] : self.offsets[i + 1]]


@dataclass
class StepInputs:
    """One step's packed forward-pass inputs, built once per step (``ModelRunner.prepare``)."""

    token_ids: torch.Tensor  # [T] int64: the chunks' tokens, decodes first
    positions: torch.Tensor  # [T] int64: each token's position in its sequence
    meta: AttentionMetadata  # where the tokens go in the paged cache and what they attend to
    logit_rows: torch.Tensor  # [R] int64: the rows whose next-token logits are needed
    offsets: list[int]  # logit_rows[offsets[i]:offsets[i + 1]] belong to chunk i


def kv_block_bytes(model: ModelConfig, config: EngineConfig) -> int:
    """Bytes of one block over all layers, K and V."""
    elem = torch.empty((), dtype=config.torch_dtype).element_size()
    return 2 * model.num_layers * config.block_size * model.kv_size * elem


class ModelRunner:
    """Runs :class:`LlamaModel` over packed chunks; allocates ``num_blocks`` blocks per layer."""

    def __init__(self, model: LlamaModel, config: EngineConfig, num_blocks: int):
        self.model = model
        self.block_size = config.block_size
        mc = model.config
        shape = (num_blocks, config.block_size, mc.num_kv_heads, mc.head_dim)
        self.kv_caches = [
            (torch.zeros(shape, dtype=model.dtype), torch.zeros(shape, dtype=model.dtype))
            for _ in range(mc.num_layers)
        ]
        log.info("KV cache: %d blocks of %d tokens per layer", num_blocks, config.block_size)

    def _tables(self, chunks: list[ScheduledChunk]) -> torch.Tensor:
        bs = self.block_size
        width = max((c.end + bs - 1) // bs for c in chunks)
        rows = [c.seq.block_table[:width] for c in chunks]
        return torch.tensor([r + [0] * (width - len(r)) for r in rows], dtype=torch.int32)

    def prepare(self, chunks: list[ScheduledChunk]) -> StepInputs:
        bs = self.block_size
        ids: list[int] = []
        positions: list[int] = []
        slots: list[int] = []
        rows: list[int] = []
        offsets = [0]
        for c in chunks:
            seq, base = c.seq, len(ids)
            ids += seq.token_ids[c.start : c.end]
            positions += range(c.start, c.end)
            table = seq.block_table
            slots += [table[p // bs] * bs + p % bs for p in range(c.start, c.end)]
            rows += [base + p - c.start for p in seq.logit_positions(c.start, c.end)]
            offsets.append(len(rows))
        nd = 0
        while nd < len(chunks) and chunks[nd].num_tokens == 1:
            nd += 1
        decode, prefill = chunks[:nd], chunks[nd:]
        empty = torch.zeros((0, 1), dtype=torch.int32)
        meta = AttentionMetadata(
            slot_mapping=torch.tensor(slots, dtype=torch.int64),
            num_decode=nd,
            decode_block_tables=self._tables(decode) if decode else empty,
            decode_seq_lens=torch.tensor([c.end for c in decode], dtype=torch.int32),
            prefill_block_tables=self._tables(prefill) if prefill else empty,
            prefill_cu_q_lens=torch.tensor(
                [0, *torch.tensor([c.num_tokens for c in prefill]).cumsum(0).tolist()],
                dtype=torch.int32,
            ),
            prefill_seq_lens=torch.tensor([c.end for c in prefill], dtype=torch.int32),
        )
        return StepInputs(
            token_ids=torch.tensor(ids, dtype=torch.int64),
            positions=torch.tensor(positions, dtype=torch.int64),
            meta=meta,
            logit_rows=torch.tensor(rows, dtype=torch.int64),
            offsets=offsets,
        )

    def run(self, chunks: list[ScheduledChunk]) -> StepLogits:
        """One forward pass over the chunks; logits only at the positions sequences need."""
        step = self.prepare(chunks)
        logits = self.model.forward(
            step.token_ids, step.positions, step.meta, self.kv_caches, step.logit_rows
        )
        return StepLogits(logits, step.offsets)


def sample_tokens(logits: torch.Tensor, states: list[DecodeState]) -> list[int]:
    """One token per row of ``logits [R, V]`` under each row's sampling params; greedy rows
    take the argmax, sampled rows draw with their own (seeded) generator."""
    if all(s.params.temperature == 0 for s in states):
        return logits.argmax(dim=1).tolist()
    vocab = logits.shape[1]
    noise = torch.ones(len(states), vocab)
    for i, s in enumerate(states):
        if s.params.temperature > 0:
            noise[i].exponential_(generator=s.generator)
    return kernels.sample(
        logits,
        torch.tensor([s.params.temperature for s in states]),
        torch.tensor([s.params.top_k for s in states]),
        torch.tensor([s.params.top_p for s in states]),
        exp_noise=noise,
    ).tolist()
