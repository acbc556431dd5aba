"""LLM modules: each call is a Prefill of the rendered prompt and a Decode of the answer."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ayo.scheduler import PlanError, PortType, Prompt, SamplingParams
from ayo.scheduler.ir import primitives as P

from .core import Module
from .lowering import Lowering, Source
from .refs import PortRef, freeze_bindings

T, TL, DL, B = PortType.TEXT, PortType.TEXT_LIST, PortType.DOC_LIST, PortType.BOOL
SYNTHESIS_MODES = ("one_shot", "refine", "tree")


def llm_call(
    b: Lowering,
    tag: str,
    prompt: Prompt,
    sources: Mapping[str, Source],
    llm: str,
    max_tokens: int,
    parse: str = "text",
    max_items: int = 0,
    stop: tuple[str, ...] = (),
    sampling: SamplingParams | None = None,
    max_sentences: int = 0,
) -> Source:
    """Prefill ``prompt`` with ``sources`` (DocList sources are formatted first), then Decode."""
    pre = prefill_prompt(b, tag, prompt, sources, llm)
    dec = b.add(
        P.decode(
            f"{b.module}.decode{tag}",
            llm,
            max_tokens,
            parse=parse,
            max_items=max_items,
            stop=stop,
            sampling=sampling,
            max_sentences=max_sentences,
        )
    )
    b.wire(pre, dec, "seq")
    return b.out(dec)


def prefill_prompt(
    b: Lowering, tag: str, prompt: Prompt, sources: Mapping[str, Source], llm: str
) -> Source:
    """A Prefill of ``prompt`` with ``sources`` (DocList sources are formatted first)."""
    pre = b.add(P.prefill(f"{b.module}.prefill{tag}", llm, prompt))
    for name in prompt.placeholders:
        source = sources[name]
        if source.type == DL:
            fmt = b.add(P.map_node(f"{b.module}.format{tag}", "format_docs"))
            b.wire(source, fmt, "docs")
            source = b.out(fmt)
        b.wire(source, pre, name)
    return b.out(pre)


class _LLMModule(Module):
    prompt: Prompt
    bind: tuple[tuple[str, PortRef], ...]

    def _freeze(self, bound_extra: set[str] = frozenset()) -> None:  # type: ignore[assignment]
        object.__setattr__(self, "bind", freeze_bindings(self.bind))
        if not isinstance(self.prompt, Prompt):
            raise PlanError(
                f"prompt must be a Prompt, got {type(self.prompt).__name__}", node=self.id
            )
        self.prompt.check_bindings(set(dict(self.bind)) | bound_extra, node=self.id)

    def refs(self) -> dict[str, PortRef]:
        return dict(self.bind)

    def check(self, types: Mapping[str, PortType]) -> None:
        for name in types:
            self.expect(types, name, T, DL)

    def _sources(self, b: Lowering) -> dict[str, Source]:
        return {name: b.src(ref) for name, ref in self.bind}


@dataclass(frozen=True)
class QueryExpansion(_LLMModule):
    """An LLM writes up to ``n`` queries, one per line (``parse="lines"``) or as a JSON array;
    the decode ends once the ``n``-th is complete. Output ``queries`` (TextList)."""

    id: str
    prompt: Prompt
    bind: tuple[tuple[str, PortRef], ...]
    n: int = 3
    llm: str = "llm"
    max_tokens: int = 64
    parse: str = "lines"
    stop: tuple[str, ...] = ()
    sampling: SamplingParams | None = None

    def __post_init__(self) -> None:
        self._freeze()
        if self.n < 1 or self.parse not in ("lines", "json"):
            raise PlanError(
                f"need n >= 1 and parse 'lines' or 'json', got n={self.n}, parse={self.parse!r}",
                node=self.id,
            )

    def output_types(self, types: Mapping[str, PortType]) -> dict[str, PortType]:
        return {"queries": TL}

    def lower(self, b: Lowering) -> dict[str, Source]:
        return {
            "queries": llm_call(
                b,
                "",
                self.prompt,
                self._sources(b),
                self.llm,
                self.max_tokens,
                self.parse,
                self.n,
                self.stop,
                self.sampling,
            )
        }


@dataclass(frozen=True)
class Judge(_LLMModule):
    """An LLM decides between ``options`` (default "Yes" / "No") by their probabilities as the
    start of its answer (a Score primitive: one prefill of each option, no decode). Output
    ``decision`` (Bool): the first option's share of the options' probability is at least
    ``threshold``; ``probability``: that share."""

    id: str
    prompt: Prompt
    bind: tuple[tuple[str, PortRef], ...]
    llm: str = "llm"
    options: tuple[str, ...] = ("Yes", "No")
    threshold: float = 0.5

    def __post_init__(self) -> None:
        self._freeze()
        if len(self.options) < 2 or not 0 <= self.threshold <= 1:
            raise PlanError(
                f"a judge needs two or more options and a threshold in [0, 1], got "
                f"{self.options!r} and {self.threshold}",
                node=self.id,
            )

    def output_types(self, types: Mapping[str, PortType]) -> dict[str, PortType]:
        return {"decision": B, "probability": PortType.ANY}

    def lower(self, b: Lowering) -> dict[str, Source]:
        pre = prefill_prompt(b, "", self.prompt, self._sources(b), self.llm)
        score = b.add(P.score(f"{self.id}.score", self.llm, self.options))
        b.wire(pre, score, "seq")
        first = b.add(P.map_node(f"{self.id}.probability", "first_probability"))
        b.wire(b.out(score), first, "probs")
        decide = b.add(P.map_node(f"{self.id}.decide", "at_least", threshold=self.threshold))
        b.wire(b.out(first), decide, "value")
        return {"decision": b.out(decide), "probability": b.out(first)}


@dataclass(frozen=True)
class Synthesis(_LLMModule):
    """Answer from context. ``one_shot``: one call with all context. ``refine``: a chain over the
    first ``steps`` docs of ``context`` (a DocList): the first call uses ``prompt``, each next one
    ``refine_prompt`` with the previous ``{answer}``. ``tree``: one ``prompt`` call per doc, then
    pairs of answers are merged with ``combine_prompt`` (``{answers}``) until one is left.
    Output ``answer`` (Text). Each call's answer ends at ``max_tokens``, the end of the model's
    turn, a ``stop`` string or after ``max_sentences`` sentences (0: no limit)."""

    id: str
    prompt: Prompt
    bind: tuple[tuple[str, PortRef], ...]
    mode: str = "one_shot"
    llm: str = "llm"
    max_tokens: int = 64
    steps: int = 3
    refine_prompt: Prompt | None = None
    combine_prompt: Prompt | None = None
    stop: tuple[str, ...] = ()
    sampling: SamplingParams | None = None
    max_sentences: int = 0

    def __post_init__(self) -> None:
        self._freeze()
        names = set(dict(self.bind))
        if self.mode not in SYNTHESIS_MODES:
            raise PlanError(
                f"mode must be one of {SYNTHESIS_MODES}, got {self.mode!r}", node=self.id
            )
        if self.mode == "one_shot":
            return
        if "context" not in names or self.steps < 1:
            raise PlanError(
                f"{self.mode} synthesis needs a 'context' binding and steps >= 1", node=self.id
            )
        extra = self.refine_prompt if self.mode == "refine" else self.combine_prompt
        if extra is None:
            raise PlanError(
                f"{self.mode} synthesis needs {'refine' if self.mode == 'refine' else 'combine'}_prompt",
                node=self.id,
            )
        if self.mode == "refine":
            extra.check_bindings(names | {"answer"}, node=self.id)
        else:
            extra.check_bindings((names - {"context"}) | {"answers"}, node=self.id)

    def check(self, types: Mapping[str, PortType]) -> None:
        super().check(types)
        if self.mode != "one_shot":
            self.expect(types, "context", DL)

    def output_types(self, types: Mapping[str, PortType]) -> dict[str, PortType]:
        return {"answer": T}

    def _call(
        self, b: Lowering, tag: str, prompt: Prompt | None, sources: Mapping[str, Source]
    ) -> Source:
        assert prompt is not None  # checked at construction
        return llm_call(
            b,
            tag,
            prompt,
            sources,
            self.llm,
            self.max_tokens,
            stop=self.stop,
            sampling=self.sampling,
            max_sentences=self.max_sentences,
        )

    def lower(self, b: Lowering) -> dict[str, Source]:
        sources = self._sources(b)
        if self.mode == "one_shot":
            return {"answer": self._call(b, "", self.prompt, sources)}
        contexts = []
        for i in range(self.steps):
            sel = b.add(P.map_node(f"{self.id}.select{i}", "select_doc", index=i))
            b.wire(sources["context"], sel, "docs")
            contexts.append(b.out(sel))
        if self.mode == "refine":
            answer = self._call(b, "0", self.prompt, {**sources, "context": contexts[0]})
            for i in range(1, self.steps):
                step = {**sources, "context": contexts[i], "answer": answer}
                answer = self._call(b, str(i), self.refine_prompt, step)
            return {"answer": answer}
        level = [
            self._call(b, str(i), self.prompt, {**sources, "context": c})
            for i, c in enumerate(contexts)
        ]
        k = 0
        while len(level) > 1:
            merged = []
            for j in range(0, len(level) - 1, 2):
                join = b.add(P.map_node(f"{self.id}.join{k}", "join_texts"))
                b.wire(level[j], join, "a")
                b.wire(level[j + 1], join, "b")
                step = {**sources, "answers": b.out(join)}
                step.pop("context")
                merged.append(self._call(b, f"_combine{k}", self.combine_prompt, step))
                k += 1
            level = merged + level[len(level) - len(level) % 2 :]
        return {"answer": level[0]}


@dataclass(frozen=True)
class Generate(Module):
    """A prompt given as token ids (``prompt``, Any) decoded under per-request sampling
    parameters (``params``, Any: a ``SamplingParams``): output ``completion`` (the decode's
    end: text, finish reason, token counts). The OpenAI endpoints' workflow: one Generate
    primitive, a prefill and a decode on a sequence of its own."""

    id: str
    prompt: PortRef
    params: PortRef
    llm: str = "llm"

    def refs(self) -> dict[str, PortRef]:
        return {"prompt": self.prompt, "params": self.params}

    def output_types(self, types: Mapping[str, PortType]) -> dict[str, PortType]:
        return {"completion": PortType.ANY}

    def lower(self, b: Lowering) -> dict[str, Source]:
        node = b.add(P.generate(f"{self.id}.generate", self.llm))
        b.wire(b.src(self.prompt), node, "prompt")
        b.wire(b.src(self.params), node, "params")
        return {"completion": b.out(node)}
