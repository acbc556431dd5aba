"""Text embedder: a BERT-family encoder with the pooling its sentence-transformers files declare.

``Embedder.from_model("all-minilm-l6-v2")`` loads the packaged all-MiniLM-L6-v2 offline.
Each text is one request; the worker tokenizes everything it drained, sorts by length and packs
micro-batches under a token budget (``batch size x longest length <= max_batch_tokens``), so
short texts of one query ride with long texts of another without padding to the longest.
Texts longer than the model limit are truncated and reported (``Embedding.truncated``).
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .base import BatchConfig, BatchingEngine, release_openmp_threads
from .corpus import MINILM_NAMES, resolve_model
from .errors import InvalidRequest

logger = logging.getLogger(__name__)

POOLING_MODES = ("mean", "cls", "max", "mean_sqrt_len")


@dataclass(frozen=True)
class EmbedderConfig:
    """Embedder settings.

    Attributes:
        max_batch_tokens: padded tokens per forward pass (batch x longest), >= max_length.
            Smaller passes keep the activations in the CPU's caches: embedding 320 wiki
            passages (~60 tokens) with all-MiniLM-L6-v2 on a 2-core AMD EPYC took 8.6 s at
            8192, 5.9 s at 1024 and 6.0 s at 512 on one thread; 4.5, 3.4 and 3.8 s on two.
        max_length: token limit per text; None: the model's ``max_seq_length``.
        pooling: None: as declared by the model's ``1_Pooling/config.json`` (mean if absent).
        normalize: None: as declared (a ``Normalize`` module in ``modules.json``).
    """

    max_batch_tokens: int = 1024
    max_length: int | None = None
    pooling: str | None = None
    normalize: bool | None = None

    def __post_init__(self) -> None:
        if self.max_batch_tokens < 16:
            raise ValueError(f"max_batch_tokens must be >= 16, got {self.max_batch_tokens}")
        if self.max_length is not None and self.max_length < 4:
            raise ValueError(f"max_length must be >= 4, got {self.max_length}")
        if self.pooling is not None and self.pooling not in POOLING_MODES:
            raise ValueError(f"pooling must be one of {POOLING_MODES}, got {self.pooling!r}")


@dataclass(frozen=True)
class EmbedRequest:
    text: str


@dataclass(frozen=True)
class Embedding:
    """One text's vector: ``vector`` float32 ``[dim]``; ``num_tokens`` before truncation."""

    vector: np.ndarray
    num_tokens: int
    truncated: bool


@dataclass(frozen=True)
class EmbeddingBatch:
    """Vectors of many texts: ``vectors`` float32 ``[n, dim]``; per-text token counts/flags."""

    vectors: np.ndarray
    num_tokens: np.ndarray  # int64 [n], before truncation
    truncated: np.ndarray  # bool [n]

    @property
    def num_truncated(self) -> int:
        return int(self.truncated.sum())


def pack_by_tokens(lengths: list[int], budget: int) -> list[list[int]]:
    """Indices grouped longest first so that ``len(group) * longest_in_group <= budget``
    (a text longer than the budget gets a group of its own)."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    groups: list[list[int]] = []
    for i in order:
        if groups and (len(groups[-1]) + 1) * lengths[groups[-1][0]] <= budget:
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


def _read_st_layout(path: Path) -> tuple[str, bool, int | None, bool]:
    """(pooling, normalize, max_seq_length, do_lower_case) from sentence-transformers files."""
    pooling, normalize, max_len, lower = "mean", False, None, False
    modules_file = path / "modules.json"
    if not modules_file.is_file():
        logger.info("%s has no modules.json: mean pooling, no normalization", path)
        return pooling, normalize, max_len, lower
    for module in json.loads(modules_file.read_text()):
        kind = module.get("type", "")
        if kind.endswith(".Pooling"):
            cfg = json.loads((path / module["path"] / "config.json").read_text())
            modes = [m for m in POOLING_MODES if cfg.get(f"pooling_mode_{m}_tokens")]
            modes += ["cls"] if cfg.get("pooling_mode_cls_token") else []
            if len(modes) != 1:
                raise ValueError(f"{path}: unsupported pooling config {cfg}")
            pooling = modes[0]
        elif kind.endswith(".Normalize"):
            normalize = True
    st_file = path / "sentence_bert_config.json"
    if st_file.is_file():
        st = json.loads(st_file.read_text())
        max_len, lower = st.get("max_seq_length"), bool(st.get("do_lower_case", False))
    return pooling, normalize, max_len, lower


CHARS_PER_TOKEN_CAP = 64  # no real text averages more characters per token


class Embedder(BatchingEngine[EmbedRequest, Embedding]):
    """Text embedder, the plans' embedder engine: ``await embed(texts)`` -> float32
    ``[n, dim]``, the texts computed as one batch (packed by token budget)."""

    kind = "embedder"

    def __init__(
        self,
        model_path: str | Path,
        config: EmbedderConfig | None = None,
        batch: BatchConfig | None = None,
        model_name: str | None = None,
    ) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        import torch
        from transformers import AutoModel, AutoTokenizer

        self.config = config or EmbedderConfig()
        self.model_path = Path(model_path)
        self.model_name = model_name or self.model_path.name
        super().__init__(f"embedder:{self.model_name}", batch)
        pooling, normalize, st_max, self._lower = _read_st_layout(self.model_path)
        self.pooling = self.config.pooling or pooling
        self.normalize = normalize if self.config.normalize is None else self.config.normalize
        self.tokenizer = AutoTokenizer.from_pretrained(self.model_path)
        self.model = AutoModel.from_pretrained(self.model_path, dtype=torch.float32).eval()
        model_max = getattr(self.model.config, "max_position_embeddings", 512)
        self.max_length = min(self.config.max_length or st_max or model_max, model_max)
        # We always pass max_length explicitly; this silences "sequence too long" warnings when
        # the chunker tokenizes whole documents.
        self.tokenizer.model_max_length = 1 << 30
        self.dim = int(self.model.config.hidden_size)
        self.num_special_tokens = self.tokenizer.num_special_tokens_to_add(pair=False)
        if self.config.max_batch_tokens < self.max_length:
            raise ValueError(
                f"max_batch_tokens ({self.config.max_batch_tokens}) must be >= max_length "
                f"({self.max_length}) so that one full-length text fits"
            )
        logger.info(
            "embedder %s: dim %d, max_length %d, pooling %s, normalize %s",
            self.model_name, self.dim, self.max_length, self.pooling, self.normalize,
        )  # fmt: skip

    @classmethod
    def from_model(
        cls,
        name_or_path: str | Path = "all-minilm-l6-v2",
        config: EmbedderConfig | None = None,
        batch: BatchConfig | None = None,
    ) -> Embedder:
        """Load a known name (``all-minilm-l6-v2``) or a local model folder, offline."""
        path = resolve_model(name_or_path)
        known = str(name_or_path).lower() in MINILM_NAMES
        embedder = cls(path, config, batch, model_name="all-minilm-l6-v2" if known else path.name)
        release_openmp_threads()  # the loading thread's team must not throttle the workers'
        return embedder

    @property
    def max_content_tokens(self) -> int:
        """Tokens of text that fit in one input besides the special tokens."""
        return self.max_length - self.num_special_tokens

    def count_tokens(self, texts: list[str]) -> list[int]:
        """Each text's token count, special tokens included, before truncation (what an
        OpenAI embedding response reports as usage, capped at ``max_length``)."""
        cap = self.max_length * CHARS_PER_TOKEN_CAP
        texts = [(t.lower() if self._lower else t)[:cap] for t in texts]
        return [len(ids) for ids in self.tokenizer(texts, truncation=False)["input_ids"]]

    def token_spans(self, text: str) -> list[tuple[int, int]]:
        """Character spans of the text's tokens (no special tokens), for the chunker."""
        text = text.lower() if self._lower else text
        enc = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        return [tuple(span) for span in enc["offset_mapping"]]

    # -- async API ----------------------------------------------------------------------------
    async def embed(self, texts: list[str], *, info: object = None) -> np.ndarray:
        """Embed texts, as one batch: float32 ``[n, dim]`` (unit-norm when the model says so).
        ``info``: the runtime's request facts (unused: the batch is already formed).

        Raises ``InvalidRequest`` (empty text) for the first bad text; others are unaffected.
        """
        return (await self.embed_batch(texts)).vectors

    async def embed_batch(self, texts: list[str], *, background: bool = False) -> EmbeddingBatch:
        """Like :meth:`embed`, also returning token counts and truncation flags.
        ``background``: bulk work (ingest) that yields to every other request."""
        requests = [EmbedRequest(t) for t in texts]
        return self._collect(await self.submit_many(requests, background=background))

    def embed_sync(self, texts: list[str]) -> EmbeddingBatch:
        """Embed in the calling thread (scripts, benchmarks); raises the first error."""
        for text in texts:
            self.validate(EmbedRequest(text))
        results = self.execute([EmbedRequest(t) for t in texts])
        for r in results:
            if isinstance(r, BaseException):
                raise r
        return self._collect(results)

    def _collect(self, results: list) -> EmbeddingBatch:
        if not results:
            return EmbeddingBatch(np.zeros((0, self.dim), np.float32), np.zeros(0, np.int64),
                                  np.zeros(0, bool))  # fmt: skip
        return EmbeddingBatch(
            vectors=np.stack([r.vector for r in results]),
            num_tokens=np.array([r.num_tokens for r in results], dtype=np.int64),
            truncated=np.array([r.truncated for r in results], dtype=bool),
        )

    # -- engine -------------------------------------------------------------------------------
    def validate(self, request: EmbedRequest) -> None:
        if not isinstance(request.text, str):
            raise InvalidRequest(f"text must be a str, got {type(request.text).__name__}")
        if not request.text.strip():
            raise InvalidRequest("cannot embed an empty text")

    def on_worker_start(self) -> None:
        if self.batch_config.num_threads is not None:
            import torch

            torch.set_num_threads(self.batch_config.num_threads)

    def run_batch(self, requests: list[EmbedRequest]) -> list[Embedding]:
        # Only the first max_length tokens are embedded: a text is cut first at a length those
        # tokens cannot reach, so a huge input costs no more than a long one (its num_tokens
        # then counts the cut text).
        cap = self.max_length * CHARS_PER_TOKEN_CAP
        texts = [(r.text.lower() if self._lower else r.text)[:cap] for r in requests]
        full = self.tokenizer(texts, truncation=False)["input_ids"]
        lengths = [len(ids) for ids in full]
        truncated = [n > self.max_length for n in lengths]
        if any(truncated):
            cut = [i for i, t in enumerate(truncated) if t]
            short = self.tokenizer([texts[i] for i in cut], truncation=True,
                                   max_length=self.max_length)["input_ids"]  # fmt: skip
            for i, ids in zip(cut, short):
                full[i] = ids
            self._count_extra(truncated=len(cut))
            logger.debug(
                "%s: truncated %d texts to %d tokens", self.name, len(cut), self.max_length
            )
        vectors = np.empty((len(texts), self.dim), dtype=np.float32)
        for batch in pack_by_tokens([len(ids) for ids in full], self.config.max_batch_tokens):
            vectors[batch] = self._forward([full[i] for i in batch])
        self._count_extra(tokens=sum(len(ids) for ids in full))
        return [Embedding(vectors[i], lengths[i], truncated[i]) for i in range(len(texts))]

    def _forward(self, ids: list[list[int]]) -> np.ndarray:
        import torch

        enc = self.tokenizer.pad({"input_ids": ids}, return_tensors="pt")
        mask = enc["attention_mask"]
        with torch.inference_mode():
            hidden = self.model(input_ids=enc["input_ids"], attention_mask=mask).last_hidden_state
            pooled = self._pool(hidden, mask)
            if self.normalize:
                pooled = torch.nn.functional.normalize(pooled, p=2, dim=1)
        return pooled.float().numpy()

    def _pool(self, hidden, mask):
        import torch

        if self.pooling == "cls":
            return hidden[:, 0]
        m = mask.unsqueeze(-1).to(hidden.dtype)
        if self.pooling == "max":
            return hidden.masked_fill(m == 0, -1e9).max(dim=1).values
        summed, counts = (hidden * m).sum(dim=1), m.sum(dim=1).clamp(min=1e-9)
        return summed / (torch.sqrt(counts) if self.pooling == "mean_sqrt_len" else counts)
