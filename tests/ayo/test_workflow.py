"""Building workflows: every wrong wiring is an error that names the module and the port."""

import pytest

from ayo.scheduler import Node, Op, PlanError, Port, PortType, PortTypeError, Prompt, PromptError
from ayo.scheduler.ir.configs import EmbedConfig
from ayo.workflow import (
    Aggregate,
    Embed,
    Map,
    PortRef,
    Primitive,
    QueryExpansion,
    Rerank,
    Search,
    Synthesis,
    WorkflowBuilder,
    lower,
)

T, TL, DL = PortType.TEXT, PortType.TEXT_LIST, PortType.DOC_LIST
ANSWER = Prompt("Q: {question}\nC: {context}\nA:")


def test_unknown_placeholder_binding_is_named() -> None:
    wf = WorkflowBuilder("w")
    q = wf.input("question")
    with pytest.raises(PromptError, match="node 'synth': binding 'contxt' names no placeholder"):
        Synthesis("synth", ANSWER, {"question": q, "context": q, "contxt": q})


def test_unbound_placeholder_is_named() -> None:
    wf = WorkflowBuilder("w")
    q = wf.input("question")
    with pytest.raises(PromptError, match=r"node 'synth': placeholder \{context\} is not bound"):
        Synthesis("synth", ANSWER, {"question": q})
    refine = Prompt("{question} {context} {answer} {other}")  # {answer} is the module's own
    with pytest.raises(PromptError, match=r"placeholder \{other\} is not bound"):
        Synthesis(
            "synth", ANSWER, {"question": q, "context": q}, mode="refine", refine_prompt=refine
        )


def test_wrong_types_are_rejected_at_add() -> None:
    wf = WorkflowBuilder("w")
    q = wf.input("question")
    with pytest.raises(PortTypeError, match="node 'rr': input 'docs' expects DocList, got Text"):
        wf.add(Rerank("rr", query=q, docs=q))
    with pytest.raises(
        PortTypeError, match="node 'synth': input 'context' expects DocList, got Text"
    ):
        wf.add(
            Synthesis(
                "synth",
                ANSWER,
                {"question": q, "context": q},
                mode="tree",
                combine_prompt=Prompt("{question} {answers}"),
            )
        )


def test_references_must_exist_and_come_earlier() -> None:
    wf = WorkflowBuilder("w")
    q = wf.input("question")
    with pytest.raises(PlanError, match=r"node 'srch': input 'query' refers to later\.queries"):
        wf.add(Search("srch", query=PortRef("later", "queries")))
    handle = wf.add(Search("srch", query=q))
    with pytest.raises(
        PlanError, match=r"node 'srch': module has no output 'hits' \(outputs: docs\)"
    ):
        handle["hits"]
    with pytest.raises(PlanError, match="already used"):
        wf.add(Search("srch", query=q))
    with pytest.raises(PlanError, match="needs at least one output"):
        wf.build()
    with pytest.raises(PlanError, match="must be a port reference"):
        Map("m", "format_docs", {"docs": "srch.docs"})


def test_primitives_can_be_written_directly() -> None:
    wf = WorkflowBuilder("direct")
    q = wf.input("question")
    wrap = wf.add(Map("wrap", "to_list", {"text": q}))
    emb_node = Node(
        "x",
        Op.EMBED,
        "embedder",
        EmbedConfig(),
        inputs=(Port("texts", TL),),
        outputs=(Port("vectors", PortType.VECTORS),),
    )
    emb = wf.add(Primitive("emb", emb_node, {"texts": wrap["value"]}))
    wf.output("vectors", emb["vectors"])
    plan = lower(wf.build())
    assert [n.id for n in plan.nodes] == ["input", "wrap.map", "emb.embed", "output"]
    with pytest.raises(PlanError, match="primitive takes inputs"):
        Primitive("bad", emb_node, {})


def test_embed_module_and_aggregate_checks() -> None:
    wf = WorkflowBuilder("w")
    q = wf.input("question")
    vec = wf.add(Embed("emb", q))
    wf.output("vectors", vec["vectors"])
    plan = lower(wf.build())
    assert [(n.id, n.op) for n in plan.nodes[1:3]] == [
        ("emb.as_list", Op.MAP),
        ("emb.embed", Op.EMBED),
    ]
    with pytest.raises(PlanError, match="node 'agg': merge takes lists, got Text"):
        wf.add(Aggregate("agg", q, q, mode="merge"))
    with pytest.raises(PlanError, match="mode must be one of"):
        Aggregate("agg", q, q, mode="sum")


def test_lowering_orders_modules_one_after_another() -> None:
    wf = WorkflowBuilder("w")
    q = wf.input("question")
    qs = wf.add(QueryExpansion("exp", Prompt("Queries for {question}:"), {"question": q}, n=2))
    hits = wf.add(Search("srch", query=q, k=2))  # independent of the expansion ...
    wf.output("queries", qs["queries"])
    wf.output("docs", hits["docs"])
    plan = lower(wf.build())
    # ... but the module-by-module plan makes it wait for the expansion's last primitive.
    control = [e for e in plan.edges if plan.node(e.dst).input(e.dst_port).control]
    assert [(e.src, e.dst) for e in control] == [("exp.decode", "srch.as_list")]
    assert plan.node("exp.decode").config.max_items == 2
