"""The plan IR and its validation: every broken plan is rejected with the node named."""

import dataclasses

import pytest

from ayo.scheduler import (
    CycleError,
    Edge,
    EdgeKind,
    FrozenConfig,
    Node,
    Op,
    Plan,
    PlanError,
    Port,
    PortType,
    PortTypeError,
    StreamError,
    UnboundPortError,
    UnknownPortError,
    validate,
)
from ayo.scheduler.ir import primitives as P
from ayo.scheduler.ir.configs import MapConfig, SearchConfig
from ayo.scheduler.ir.render import plan_to_json

T, TL = PortType.TEXT, PortType.TEXT_LIST


def _chain() -> tuple[list[Node], list[Edge]]:
    """input.q -> to_list -> embed -> search -> format -> output.answer"""
    nodes = [
        P.input_node([Port("q", T)]),
        P.map_node("wrap", "to_list"),
        P.embed("emb", "embedder"),
        P.search("srch", "index", 2, "default"),
        P.map_node("fmt", "format_docs"),
        P.output_node([Port("answer", T)]),
    ]
    edges = [
        Edge("input", "q", "wrap", "text"),
        Edge("wrap", "value", "emb", "texts"),
        Edge("emb", "vectors", "srch", "vectors"),
        Edge("srch", "docs", "fmt", "docs"),
        Edge("fmt", "value", "output", "answer"),
    ]
    return nodes, edges


def test_valid_chain_topology_and_depth() -> None:
    nodes, edges = _chain()
    plan = validate(Plan("chain", tuple(nodes), tuple(edges)))
    assert plan.topo_order == ("input", "wrap", "emb", "srch", "fmt", "output")
    assert plan.depth == {"output": 0, "fmt": 1, "srch": 2, "emb": 3, "wrap": 4, "input": 5}


def test_plans_are_values() -> None:
    a = Plan("chain", *map(tuple, _chain()))
    b = Plan("chain", *map(tuple, _chain()))
    assert a == b and hash(a) == hash(b)
    assert FrozenConfig(k=1, x="a") == FrozenConfig({"x": "a", "k": 1})
    assert hash(FrozenConfig(k=1)) == hash(FrozenConfig(k=1))
    with pytest.raises(ValueError, match="duplicate input port"):
        Node("n", Op.MAP, inputs=(Port("a", T), Port("a", T)))


def test_frozen_config_is_a_read_only_hashable_dict() -> None:
    import copy
    import pickle

    config = FrozenConfig(k=3, collection="wiki")
    assert (
        config["k"] == 3 and config.get("missing", 0) == 0 and list(config) == ["collection", "k"]
    )
    for mutate in (
        lambda c: c.__setitem__("k", 4),
        lambda c: c.__delitem__("k"),
        lambda c: c.update(k=4),
        lambda c: c.pop("k"),
        lambda c: c.popitem(),
        lambda c: c.setdefault("x", 1),
        lambda c: c.clear(),
    ):
        with pytest.raises(TypeError, match="immutable"):
            mutate(config)
    assert config == FrozenConfig(collection="wiki", k=3) and config["k"] == 3
    assert config != {"collection": "wiki", "k": 3}  # equal only to another FrozenConfig
    assert pickle.loads(pickle.dumps(config)) == config
    assert copy.deepcopy(config) is config
    changed = config.with_(k=5)
    assert changed["k"] == 5 and config["k"] == 3 and hash(changed) != hash(config)


def test_to_json_has_exactly_the_documented_fields() -> None:
    plan = Plan("chain", *map(tuple, _chain()))
    data = plan_to_json(plan)
    assert set(data) == {"nodes", "edges"}
    assert data["nodes"][2] == {"id": "emb", "op": "Embed", "engine": "embedder", "module": ""}
    assert data["edges"][1] == {
        "src": "wrap",
        "src_port": "value",
        "dst": "emb",
        "dst_port": "texts",
        "kind": "value",
    }


def test_cycle_is_rejected_naming_a_node() -> None:
    nodes, edges = _chain()
    nodes[1] = nodes[1].with_(inputs=(*nodes[1].inputs, Port("loop", PortType.ANY, control=True)))
    edges.append(Edge("fmt", "value", "wrap", "loop"))
    with pytest.raises(CycleError, match=r"\[build\] node 'wrap': cycle through nodes") as err:
        validate(Plan("c", tuple(nodes), tuple(edges)))
    assert err.value.node == "wrap" and err.value.pass_name == "build"


def test_unbound_and_doubly_bound_ports() -> None:
    nodes, edges = _chain()
    with pytest.raises(UnboundPortError, match="node 'srch': input port 'vectors' is not bound"):
        validate(Plan("u", tuple(nodes), tuple(e for e in edges if e.dst != "srch")))
    with pytest.raises(UnboundPortError, match="node 'emb': input port 'texts' is bound 2 times"):
        validate(Plan("d", tuple(nodes), (*edges, Edge("wrap", "value", "emb", "texts"))))


def test_type_mismatch_names_both_ends() -> None:
    nodes, edges = _chain()
    edges[1] = Edge("input", "q", "emb", "texts")  # Text into a TextList port
    edges.append(Edge("wrap", "value", "output", "answer"))
    edges = [e for e in edges if e.src != "fmt"]
    with pytest.raises(
        PortTypeError, match=r"node 'emb': input 'texts' expects TextList but input.q gives Text"
    ):
        validate(Plan("t", tuple(nodes), tuple(edges)), pass_name="lower")


def test_unknown_node_and_port() -> None:
    nodes, edges = _chain()
    with pytest.raises(UnknownPortError, match="'ghost'"):
        validate(Plan("g", tuple(nodes), (*edges, Edge("ghost", "x", "fmt", "docs"))))
    with pytest.raises(UnknownPortError, match="node 'srch': has no output port 'hits'"):
        validate(
            Plan(
                "g",
                tuple(nodes),
                tuple(e.with_(src_port="hits") if e.src == "srch" else e for e in edges),
            )
        )


def test_missing_input_or_output_node() -> None:
    nodes, edges = _chain()
    with pytest.raises(PlanError, match="plan needs a node 'output'"):
        validate(Plan("x", tuple(nodes[:-1]), tuple(e for e in edges if e.dst != "output")))


def test_stream_rules() -> None:
    nodes, edges = _chain()
    # A stream into a port that cannot take one (Map format_docs works on whole lists).
    streamed = [e.with_(kind=EdgeKind.STREAM) if e.src == "srch" else e for e in edges]
    with pytest.raises(
        StreamError, match="node 'srch': has stream out-edges but produces no stream"
    ):
        validate(Plan("s", tuple(nodes), tuple(streamed)))
    nodes[3] = nodes[3].with_(config={"micro_batch": 2})
    with pytest.raises(StreamError, match="node 'fmt': input 'docs' cannot take a stream"):
        validate(Plan("s", tuple(nodes), tuple(streamed)))
    # Closing the stream with an Aggregate makes it valid.
    nodes.append(P.aggregate("collect", "concat", PortType.DOC_LIST))
    fixed = [e for e in edges if e.src != "srch"] + [
        Edge("srch", "docs", "collect", "items", EdgeKind.STREAM),
        Edge("collect", "value", "fmt", "docs"),
    ]
    validate(Plan("s", tuple(nodes), tuple(fixed)))
    with pytest.raises(StreamError, match="node 'srch': produces a stream but has value out-edges"):
        validate(Plan("s", tuple(nodes), tuple(e.with_(kind=EdgeKind.VALUE) for e in fixed)))


def test_node_configs_are_typed_values() -> None:
    search = P.search("s", "index", 3, "wiki")
    assert search.config == SearchConfig(3, "wiki") and search.config.k == 3
    assert hash(search.config) == hash(SearchConfig(3, "wiki"))
    batched = search.with_(config={"micro_batch": 4})
    assert batched.config.micro_batch == 4 and search.config.micro_batch == 0
    with pytest.raises(dataclasses.FrozenInstanceError):
        search.config.k = 5  # type: ignore[misc]
    with pytest.raises(TypeError, match="config must be a NodeConfig"):
        Node("n", Op.SEARCH, "index", {"k": 3})  # type: ignore[arg-type]
    wrong = P.search("s", "index", 3, "wiki").with_(op=Op.RERANK)
    plan = Plan(
        "w",
        (
            P.input_node([Port("v", PortType.VECTORS)]),
            wrong,
            P.output_node([Port("d", PortType.DOC_LIST)]),
        ),
        (Edge("input", "v", "s", "vectors"), Edge("s", "docs", "output", "d")),
    )
    with pytest.raises(PlanError, match="Rerank needs a RerankConfig, got SearchConfig"):
        validate(plan)


def test_primitive_constructors_check_config() -> None:
    with pytest.raises(PlanError, match="k must be >= 1"):
        P.search("s", "index", 0, "default")
    with pytest.raises(PlanError, match="parse must be one of"):
        P.decode("d", "llm", 8, parse="yaml")
    with pytest.raises(PlanError, match="mode must be one of"):
        P.aggregate("a", "sum", TL)
    with pytest.raises(KeyError, match="unknown map function 'nope'"):
        P.map_node("m", "nope")


def test_config_must_agree_with_ports() -> None:
    from ayo.scheduler import Prompt, PromptError

    nodes, edges = _chain()
    nodes[4] = nodes[4].with_(config=MapConfig("select_doc", FrozenConfig(index=0)))  # same ports
    validate(Plan("m", tuple(nodes), tuple(edges)))
    nodes[4] = nodes[4].with_(config=MapConfig("join_texts"))
    with pytest.raises(UnknownPortError, match="node 'fmt': map 'join_texts' takes"):
        validate(Plan("m", tuple(nodes), tuple(edges)))
    pre = P.prefill("pre", "llm", Prompt("Q: {q}"))
    with pytest.raises(PromptError, match="node 'pre': input ports"):
        validate(
            Plan(
                "p",
                (
                    P.input_node([Port("q", T)]),
                    pre.with_(inputs=(Port("x", T),)),
                    P.output_node([]),
                ),
                (Edge("input", "q", "pre", "x"),),
            )
        )
