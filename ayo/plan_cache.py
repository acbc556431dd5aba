"""Plan cache: compiled plans keyed by (workflow, config, input-size bucket)."""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Hashable, Mapping
from dataclasses import dataclass

from ayo.apps.base import AppTemplate
from ayo.passes import CompileContext, compile_workflow
from ayo.scheduler import DEFAULT_PROFILES, EngineProfile, Plan, RegexTokenizer, Tokenizer
from ayo.workflow import InputShape, Workflow

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class CacheStats:
    hits: int
    misses: int
    entries: int

    @property
    def hit_rate(self) -> float:
        total = self.hits + self.misses
        return self.hits / total if total else 0.0


class PlanCache:
    """Compiles each (workflow or app, optimize flag, size bucket) once; later lookups return the
    same immutable ``Plan``. The engine profiles and tokenizer are this cache's fixed config.
    Least recently used entries beyond ``max_entries`` are dropped."""

    def __init__(
        self,
        profiles: Mapping[str, EngineProfile] | None = None,
        tokenizer: Tokenizer | None = None,
        max_entries: int = 1024,
    ) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries must be >= 1, got {max_entries}")
        self.profiles = dict(profiles if profiles is not None else DEFAULT_PROFILES)
        self.tokenizer = tokenizer or RegexTokenizer()
        self.max_entries = max_entries
        # The config is fixed per cache; its hash stands for it in every key.
        self._config_key = hash(tuple(sorted(self.profiles.items())))
        self._plans: OrderedDict[Hashable, Plan] = OrderedDict()
        self._hits = 0
        self._misses = 0

    def get(self, target: AppTemplate | Workflow, shape: InputShape, optimize: bool = True) -> Plan:
        """The plan for ``target`` on queries of ``shape``."""
        bucket = shape.bucket()
        ident = ("app", target.name) if isinstance(target, AppTemplate) else target
        key = (ident, self._config_key, optimize, bucket)
        plan = self._plans.get(key)
        if plan is not None:
            self._hits += 1
            self._plans.move_to_end(key)
            return plan
        self._misses += 1
        workflow = target.workflow(bucket) if isinstance(target, AppTemplate) else target
        ctx = CompileContext(self.profiles, self.tokenizer, bucket)
        plan = compile_workflow(workflow, ctx, optimize=optimize)
        self._plans[key] = plan
        if len(self._plans) > self.max_entries:
            self._plans.popitem(last=False)
        logger.debug("compiled plan %s (optimize=%s, shape=%s)", plan.name, optimize, bucket.sizes)
        return plan

    @property
    def stats(self) -> CacheStats:
        return CacheStats(self._hits, self._misses, len(self._plans))

    def clear(self) -> None:
        self._plans.clear()
        self._hits = self._misses = 0
