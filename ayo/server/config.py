"""The server's configuration: one validated dataclass, from a JSON file and/or flags."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from ayo.cluster import Placement, is_loopback
from ayo.engines.llm.formats import DENSE_FORMATS, WEIGHT_FORMATS
from ayo.runtime.corpus import default_data_dir
from ayo.runtime.defaults import PLACEABLE


@dataclass(frozen=True)
class ServerConfig:
    """Everything ``python -m ayo.server`` takes (the flags mirror these names with dashes).

    Attributes:
        host, port: where to listen (port 0: any free port, logged at start).
        data_dir: the RetrievalStore folder (collections, vectors); None: :func:`default_data_dir`.
        model: LLM id (``smollm2-135m-instruct``), a Hugging Face folder or a .gguf file.
        embedder: embedder id (``all-minilm-l6-v2``) or a sentence-transformers folder.
        dtype: the LLM's activations: ``auto`` (with ``weights`` auto: the format measured
            fastest on this CPU, see ``EngineConfig``; else the weights format's own),
            ``float32`` (with fp32 weights token for token equal to transformers, and the
            same answer whatever else runs) or ``bfloat16`` (rounding depends on the batch
            and on prefix-cache hits, so an answer can change with the load).
        weights: the LLM's matmul weights: ``auto``, ``fp32``, ``bf16``, ``int8``, ``int4``
            (``engines/llm/quant.py``; docs/benchmarks.md compares them).
        api_key: required as ``Authorization: Bearer KEY`` when set; needed beyond loopback.
        corpus: ``wiki``, ``none`` or a file/folder of .txt/.md/.jsonl, ingested into
            ``collection`` at start (only what is missing).
        corpus_limit: ingest only the first N corpus documents (trials, tests).
        collection: the collection apps search when a query brings no documents.
        max_body_mb: request bodies above this are refused (413).
        max_document_mb: an ingested document whose text is larger is refused (413).
        max_concurrent_queries: queries in flight at once (app queries, OpenAI completions and
            embeddings, collection searches); more wait for a slot, under their deadline.
        max_queued_queries: queries that may wait for a slot; beyond it a new one gets 429.
        query_timeout_s: a query's deadline when the request gives none (never hang).
        max_tokens_limit: the largest ``max_tokens`` an OpenAI-style request may ask for.
        shutdown_timeout_s: on SIGTERM, how long requests in flight may take before they are
            cancelled (an ingest not yet acknowledged is cancelled and stores nothing).
        log_level: DEBUG, INFO, WARNING, ERROR.
        profile_engines: at the first start on this machine (no profile stored in the data
            directory for this CPU, model, dtype and thread count), measure the engines (a few
            seconds, logged) and store their profile; later starts load it. The plans and the
            critical-path policy read it (False: a stored profile if any, else the constants).
        ray_address: a Ray cluster to join (``HOST:6379``, as ``ray start --head`` printed);
            needed when ``placement`` puts an engine on a Ray node. A loopback address is
            joined with the loopback-only start-up (``ayo.cluster``).
        placement: where the apps' engines run, by engine name (``llm``, which the judge
            shares, ``embedder``, ``reranker``): ``"local"``, an object ``{"resources":
            {"gpu_node": 0.5}, "num_cpus": 4, "max_restarts": 1}`` for a Ray actor on the node
            holding those resources, or a list of these (replicas behind one scheduler). The
            local LLM and embedder are loaded either way: the OpenAI endpoints, ingest and the
            plans' tokenizer use them. The indexes stay with the data directory.
        gc_tuning: once loaded, freeze the startup heap and raise the young-generation GC
            threshold (:func:`ayo.scheduler.runtime.serving_gc.configure_gc_for_serving`): halves the
            runtime's per-primitive cost under load; False keeps CPython's defaults.
    """

    host: str = "127.0.0.1"
    port: int = 8000
    data_dir: str | None = None
    model: str = "smollm2-135m-instruct"
    embedder: str = "all-minilm-l6-v2"
    dtype: str = "auto"
    weights: str = "auto"
    api_key: str | None = None
    corpus: str = "wiki"
    corpus_limit: int | None = None
    collection: str = "wiki"
    max_body_mb: float = 16.0
    max_document_mb: float = 16.0
    max_concurrent_queries: int = 64
    max_queued_queries: int = 1024
    query_timeout_s: float = 300.0
    max_tokens_limit: int = 2048
    shutdown_timeout_s: float = 10.0
    log_level: str = "INFO"
    profile_engines: bool = True
    ray_address: str | None = None
    placement: dict[str, Any] | None = None
    gc_tuning: bool = True

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port must be 0..65535 (0: any free port), got {self.port}")
        for name in ("max_body_mb", "max_document_mb", "shutdown_timeout_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.max_concurrent_queries < 1:
            raise ValueError(
                f"max_concurrent_queries must be >= 1, got {self.max_concurrent_queries}"
            )
        if self.max_queued_queries < 0:
            raise ValueError(f"max_queued_queries must be >= 0, got {self.max_queued_queries}")
        if self.query_timeout_s <= 0:
            raise ValueError(f"query_timeout_s must be > 0 seconds, got {self.query_timeout_s}")
        if self.max_tokens_limit < 1:
            raise ValueError(f"max_tokens_limit must be >= 1, got {self.max_tokens_limit}")
        if self.corpus_limit is not None and self.corpus_limit < 0:
            raise ValueError(f"corpus_limit must be >= 0, got {self.corpus_limit}")
        if self.log_level.upper() not in ("DEBUG", "INFO", "WARNING", "ERROR"):
            raise ValueError(
                f"log_level must be DEBUG, INFO, WARNING or ERROR, got {self.log_level!r}"
            )
        if self.api_key is not None and not self.api_key.strip():
            raise ValueError("api_key is empty: give a key or leave it unset")
        if not self.collection:
            raise ValueError("collection must be a non-empty name")
        if self.dtype not in ("auto", "float32", "bfloat16"):
            raise ValueError(f"dtype must be auto, float32 or bfloat16, got {self.dtype!r}")
        if self.weights not in ("auto", *WEIGHT_FORMATS):
            raise ValueError(
                f"weights must be auto or one of {', '.join(WEIGHT_FORMATS)}, got {self.weights!r}"
            )
        if self.dtype != "auto" and DENSE_FORMATS.get(self.weights, self.dtype) != self.dtype:
            raise ValueError(
                f"{self.weights} weights are dense {DENSE_FORMATS[self.weights]}, not dtype "
                f"{self.dtype} (leave dtype auto)"
            )
        if self.placement:
            self.placements()  # raises on a fault, naming it
            if self.remote_placed and not self.ray_address:
                raise ValueError(
                    "placement puts engines on Ray nodes: give ray_address, the cluster's head "
                    "(HOST:6379, as `ray start --head` printed it)"
                )

    def placements(self) -> dict[str, list[Any]]:
        """``placement`` parsed: engine name -> its instances' :class:`ayo.cluster.Placement`."""
        unknown = sorted(set(self.placement or {}) - set(PLACEABLE))
        if unknown:
            raise ValueError(
                f"placement: unknown engines {unknown}; placeable: {list(PLACEABLE)} (the "
                "indexes stay with the data directory the server ingests into)"
            )
        out = {name: Placement.parse(name, v) for name, v in (self.placement or {}).items()}
        for name, ps in out.items():
            if sum(p.local for p in ps) > 1:
                raise ValueError(f"placement of {name!r}: the server has one local instance")
        return out

    @property
    def remote_placed(self) -> bool:
        """Whether some engine instance runs in a Ray actor."""
        return any(not p.local for ps in self.placements().values() for p in ps)

    @property
    def max_body_bytes(self) -> int:
        return int(self.max_body_mb * 2**20)

    @property
    def data_path(self) -> Path:
        return Path(self.data_dir).expanduser() if self.data_dir else default_data_dir()

    def check_exposure(self) -> None:
        """Refuse to serve beyond loopback without an API key (ValueError says how)."""
        if not is_loopback(self.host) and not self.api_key:
            raise ValueError(
                f"--host {self.host} is reachable beyond this machine: set an API key with "
                "--api-key KEY or the AYO_API_KEY environment variable (clients then send "
                "'Authorization: Bearer KEY'), or bind to 127.0.0.1"
            )

    @classmethod
    def from_file(cls, path: str | Path) -> dict[str, Any]:
        """The options of a JSON config file (keys as the field names; dashes allowed), checked
        for unknown keys. Returns a dict to merge with flags before building the config."""
        try:
            data = json.loads(Path(path).read_text())
        except OSError as exc:
            raise ValueError(f"cannot read config file {path}: {exc}") from None
        except json.JSONDecodeError as exc:
            raise ValueError(f"config file {path} is not valid JSON: {exc}") from None
        if not isinstance(data, dict):
            raise ValueError(f"config file {path} must hold a JSON object")
        data = {k.replace("-", "_"): v for k, v in data.items()}
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"config file {path}: unknown keys {unknown}; known: {sorted(known)}")
        return data

    @classmethod
    def build(cls, **options: Any) -> ServerConfig:
        """A config from options, type-checked (a JSON string where a number belongs fails
        here with the key's name)."""
        for f in fields(cls):
            if f.name in options and options[f.name] is not None:
                value = options[f.name]
                kind = str(f.type)
                ok = (
                    (isinstance(value, bool) and "bool" in kind)
                    or (isinstance(value, str) and "str" in kind)
                    or (isinstance(value, int) and not isinstance(value, bool) and "int" in kind)
                    or (
                        isinstance(value, (int, float))
                        and not isinstance(value, bool)
                        and "float" in kind
                    )
                    or (isinstance(value, dict) and "dict" in kind)
                )
                if not ok:
                    raise ValueError(f"option {f.name!r} must be of type {kind}, got {value!r}")
        return cls(**options)

    def public(self) -> dict[str, Any]:
        """The config without secrets (for logs and /health)."""
        out = asdict(self)
        out["api_key"] = "***" if self.api_key else None
        out["data_dir"] = str(self.data_path)
        return out
