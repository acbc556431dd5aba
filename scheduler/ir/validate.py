"""Plan checks run after building and after every pass.

Checked: unique node ids, one ``input`` and one ``output`` node, edges name existing nodes and
ports, every input port bound by exactly one edge, port types match, prompt placeholders and map
functions agree with the ports, no cycle, and streams are
well formed (consumed by a primitive that takes a stream on that port, continued as streams by
it, and closed by an Aggregate before anything that needs the whole value).
"""

from __future__ import annotations

from collections import Counter

from .configs import (
    AgentConfig,
    AggregateConfig,
    DecodeConfig,
    EmbedConfig,
    FullPrefillConfig,
    IngestConfig,
    KeywordSearchConfig,
    MapConfig,
    NodeConfig,
    PartialPrefillConfig,
    PrefillConfig,
    RerankConfig,
    ScoreConfig,
    SearchConfig,
    micro_batch,
)
from .errors import (
    CycleError,
    PlanError,
    PortTypeError,
    PromptError,
    StreamError,
    UnboundPortError,
    UnknownPortError,
)
from .functions import MAP_FUNCTIONS
from .graph import INPUT_ID, OUTPUT_ID, EdgeKind, Node, Plan
from .ops import Op
from .ports import compatible
from .prompt import Prompt

_CONFIGS: dict[Op, type[NodeConfig]] = {
    Op.EMBED: EmbedConfig,
    Op.INGEST: IngestConfig,
    Op.SEARCH: SearchConfig,
    Op.KEYWORD_SEARCH: KeywordSearchConfig,
    Op.RERANK: RerankConfig,
    Op.PREFILL: PrefillConfig,
    Op.PARTIAL_PREFILL: PartialPrefillConfig,
    Op.FULL_PREFILL: FullPrefillConfig,
    Op.DECODE: DecodeConfig,
    Op.PARTIAL_DECODE: DecodeConfig,
    Op.SCORE: ScoreConfig,
    Op.GENERATE: NodeConfig,
    Op.AGENT: AgentConfig,
    Op.AGGREGATE: AggregateConfig,
    Op.MAP: MapConfig,
}


def validate(plan: Plan, pass_name: str = "build") -> Plan:
    """Return ``plan`` unchanged when valid; raise a ``PlanError`` subclass naming the node."""
    ids = Counter(n.id for n in plan.nodes)
    dup = [i for i, c in ids.items() if c > 1]
    if dup:
        raise PlanError("duplicate node id", pass_name=pass_name, node=dup[0])
    for special, op in ((INPUT_ID, Op.INPUT), (OUTPUT_ID, Op.OUTPUT)):
        if special not in plan.node_map or plan.node(special).op != op:
            raise PlanError(f"plan needs a node {special!r} of op {op.value}", pass_name=pass_name)
    _check_edges(plan, pass_name)
    for n in plan.nodes:
        _check_config(n, pass_name)
    _check_acyclic(plan, pass_name)
    _check_streams(plan, pass_name)
    return plan


def _check_edges(plan: Plan, pass_name: str) -> None:
    bound: Counter[tuple[str, str]] = Counter()
    for e in plan.edges:
        for nid in (e.src, e.dst):
            if nid not in plan.node_map:
                raise UnknownPortError(
                    f"edge {e} names unknown node {nid!r}", pass_name=pass_name, node=nid
                )
        src_port = plan.node(e.src).output(e.src_port)
        if src_port is None:
            raise UnknownPortError(
                f"has no output port {e.src_port!r}", pass_name=pass_name, node=e.src
            )
        dst_port = plan.node(e.dst).input(e.dst_port)
        if dst_port is None:
            raise UnknownPortError(
                f"has no input port {e.dst_port!r}", pass_name=pass_name, node=e.dst
            )
        if not dst_port.control and not compatible(src_port.type, dst_port.type):
            raise PortTypeError(
                f"input {e.dst_port!r} expects {dst_port.type.value} but {e.src}.{e.src_port} "
                f"gives {src_port.type.value}",
                pass_name=pass_name,
                node=e.dst,
            )
        if (
            e.kind == EdgeKind.STREAM
            and not src_port.type.is_list
            and plan.node(e.dst).op != Op.AGGREGATE
        ):
            raise StreamError(
                f"stream on {e.src_port!r} of non-list type {src_port.type.value} must go to an Aggregate",
                pass_name=pass_name,
                node=e.src,
            )
        bound[(e.dst, e.dst_port)] += 1
    for n in plan.nodes:
        for p in n.inputs:
            count = bound[(n.id, p.name)]
            if count != 1:
                what = "is not bound" if count == 0 else f"is bound {count} times"
                raise UnboundPortError(
                    f"input port {p.name!r} {what}", pass_name=pass_name, node=n.id
                )


def _check_config(node: Node, pass_name: str) -> None:
    """Ports that must agree with the config: prompt placeholders, map function signatures."""
    data = {p.name for p in node.inputs if not p.control}
    want_config = _CONFIGS.get(node.op)
    if want_config is not None and not isinstance(node.config, want_config):
        raise PlanError(
            f"{node.op.value} needs a {want_config.__name__}, got {type(node.config).__name__}",
            pass_name=pass_name,
            node=node.id,
        )
    if node.op in (Op.PREFILL, Op.PARTIAL_PREFILL, Op.FULL_PREFILL):
        prompt = node.config.prompt_or_none
        if not isinstance(prompt, Prompt):
            raise PlanError("needs a Prompt in config 'prompt'", pass_name=pass_name, node=node.id)
        want = set(prompt.placeholders) | ({"seq"} if node.op == Op.FULL_PREFILL else set())
        ok = data <= want if node.op == Op.PARTIAL_PREFILL else data == want
        if not ok:
            raise PromptError(
                f"input ports {sorted(data)} do not match the prompt's placeholders {sorted(want)}",
                pass_name=pass_name,
                node=node.id,
            )
    elif isinstance(node.config, AgentConfig):
        if data != set(node.config.task.placeholders):
            raise PromptError(
                f"input ports {sorted(data)} do not match the task's placeholders "
                f"{sorted(node.config.task.placeholders)}",
                pass_name=pass_name,
                node=node.id,
            )
    elif isinstance(node.config, MapConfig):
        fn = MAP_FUNCTIONS.get(node.config.fn)
        if fn is None:
            raise PlanError(
                f"unknown map function {node.config.fn!r}", pass_name=pass_name, node=node.id
            )
        if data != {p.name for p in fn.inputs}:
            raise UnknownPortError(
                f"map {fn.name!r} takes {sorted(p.name for p in fn.inputs)}, node has {sorted(data)}",
                pass_name=pass_name,
                node=node.id,
            )


def _check_acyclic(plan: Plan, pass_name: str) -> None:
    order = plan.topo_order
    if len(order) != len(plan.nodes):
        stuck = [n.id for n in plan.nodes if n.id not in set(order)]
        raise CycleError(f"cycle through nodes {stuck}", pass_name=pass_name, node=stuck[0])


def _check_streams(plan: Plan, pass_name: str) -> None:
    for n in plan.nodes:
        streams_in = [e for e in plan.in_edges(n.id) if e.kind == EdgeKind.STREAM]
        streams_out = [e for e in plan.out_edges(n.id) if e.kind == EdgeKind.STREAM]
        if len(streams_in) > 1:
            raise StreamError("takes more than one stream input", pass_name=pass_name, node=n.id)
        if streams_in:
            port = streams_in[0].dst_port
            if n.op == Op.AGGREGATE:
                if streams_out:
                    raise StreamError(
                        "an Aggregate closes its stream", pass_name=pass_name, node=n.id
                    )
                continue
            if n.op == Op.OUTPUT or port != n.item_port:
                raise StreamError(
                    f"input {port!r} cannot take a stream; close it with an Aggregate first",
                    pass_name=pass_name,
                    node=n.id,
                )
        produces = bool(streams_in) or n.op == Op.PARTIAL_DECODE or micro_batch(n.config) > 0
        outs = plan.out_edges(n.id)
        if produces and any(e.kind != EdgeKind.STREAM for e in outs):
            raise StreamError(
                "produces a stream but has value out-edges", pass_name=pass_name, node=n.id
            )
        if not produces and streams_out:
            raise StreamError(
                "has stream out-edges but produces no stream", pass_name=pass_name, node=n.id
            )
