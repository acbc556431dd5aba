"""App templates: a named workflow factory, specialized by which inputs a query brings."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from ayo.scheduler import PlanError
from ayo.workflow import InputShape, Workflow


@dataclass(frozen=True)
class AppTemplate:
    """A built-in application. ``build(shape, **options)`` returns the workflow for queries of
    that shape (an optional input that is absent removes its branch); ``options`` are the
    builder's keyword arguments this template passes (see :meth:`with_options`)."""

    name: str
    description: str
    required: tuple[str, ...]
    optional: tuple[str, ...]
    build: Callable[..., Workflow]
    options: tuple[tuple[str, object], ...] = ()

    def workflow(self, shape: InputShape) -> Workflow:
        missing = [n for n in self.required if not shape.has(n)]
        if missing:
            raise PlanError(f"app {self.name!r} needs inputs {missing}", node="input")
        unknown = [n for n, _ in shape.sizes if n not in self.required + self.optional]
        if unknown:
            raise PlanError(
                f"app {self.name!r} has no inputs {unknown} (inputs: {self.required + self.optional})",
                node="input",
            )
        return self.build(shape, **dict(self.options))

    def with_options(self, **options: object) -> AppTemplate:
        """The same app (name, inputs) built with other options, e.g. ``answer_tokens=10``
        (every built-in app's cap on each answer) or advanced_rag's ``synthesis="refine"``.
        Raises ``TypeError`` for an option its builder does not take, and what the builder
        raises for a bad value."""
        variant = replace(self, options=tuple(sorted({**dict(self.options), **options}.items())))
        variant.workflow(variant.example_shape())  # a bad option fails here, not per query
        return variant

    def example_shape(self, documents: int = 8) -> InputShape:
        """A typical query shape: every input present, ``documents`` documents."""
        sizes = {n: 1 for n in self.required + self.optional}
        if "documents" in sizes:
            sizes["documents"] = documents
        return InputShape.from_sizes(**sizes)
