"""Plan cache: compiled plans keyed by (workflow, config, input-size bucket)."""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Hashable, Mapping
from dataclasses import dataclass

from ayo.apps.base import AppTemplate
from ayo.passes import CompileContext, Optimize, compile_workflow
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
    """Compiles each (workflow or app, passes, size bucket) once; later lookups return the
    same immutable ``Plan``. The engine profiles, the tokenizer and which engine names share a
    resource (``resources``, see ``CompileContext``) are this cache's fixed config.
    Least recently used entries beyond ``max_entries`` are dropped."""

    def __init__(
        self,
        profiles: Mapping[str, EngineProfile] | None = None,
        tokenizer: Tokenizer | None = None,
        max_entries: int = 1024,
        resources: Mapping[str, str] | None = None,
    ) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries must be >= 1, got {max_entries}")
        self.profiles = dict(profiles if profiles is not None else DEFAULT_PROFILES)
        self.tokenizer = tokenizer or RegexTokenizer()
        self.max_entries = max_entries
        self.resources = dict(resources or {})
        # The config is fixed per cache; its hash stands for it in every key.
        self._config_key = hash(
            (tuple(sorted(self.profiles.items())), tuple(sorted(self.resources.items())))
        )
        self._plans: OrderedDict[Hashable, Plan] = OrderedDict()
        # (id(target), optimize, raw input sizes) -> (target, its key in _plans)
        self._keys: dict[tuple, tuple] = {}
        self._hits = 0
        self._misses = 0

    def for_inputs(
        self,
        target: AppTemplate | Workflow,
        inputs: Mapping[str, object],
        optimize: Optimize = True,
    ) -> Plan:
        """The plan for a query with ``inputs``: :meth:`get` with ``InputShape.of(inputs)``,
        minus building the shape when inputs of these names and sizes were seen before."""
        sizes = tuple(
            (k, len(v) if isinstance(v, (list, tuple)) else 1)
            for k, v in inputs.items()
            if v is not None
        )
        seen = self._keys.get((id(target), optimize, sizes))
        if seen is not None and seen[0] is target:  # not another object with a reused id
            plan = self._plans.get(seen[1])
            if plan is not None:
                self._hits += 1
                self._plans.move_to_end(seen[1])
                return plan
        shape = InputShape.of(inputs)
        plan = self.get(target, shape, optimize)
        if len(self._keys) >= 4 * self.max_entries:
            self._keys.clear()
        self._keys[(id(target), optimize, sizes)] = (
            target,
            self._key(target, shape.bucket(), optimize),
        )
        return plan

    def _key(
        self, target: AppTemplate | Workflow, bucket: InputShape, optimize: Optimize
    ) -> Hashable:
        # an app by itself (a frozen template): two variants of one name are two plans; the
        # bucket's sizes, not the InputShape: a tuple hashes without a Python call
        return (target, self._config_key, optimize, bucket.sizes)

    def get(
        self, target: AppTemplate | Workflow, shape: InputShape, optimize: Optimize = True
    ) -> Plan:
        """The plan for ``target`` on queries of ``shape``."""
        bucket = shape.bucket()
        key = self._key(target, bucket, optimize)
        plan = self._plans.get(key)
        if plan is not None:
            self._hits += 1
            self._plans.move_to_end(key)
            return plan
        self._misses += 1
        workflow = target.workflow(bucket) if isinstance(target, AppTemplate) else target
        ctx = CompileContext(self.profiles, self.tokenizer, bucket, self.resources)
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
        self._keys.clear()
        self._hits = self._misses = 0
