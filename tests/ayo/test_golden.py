"""Golden tests: the exact node and edge sets of each built-in app before and after each pass.

A golden file holds the lowered plan in full, then what each pass removed and added. To
regenerate after an intended change: ``AYO_UPDATE_GOLDEN=1 pytest tests/ayo/test_golden.py``,
then review the diff like code.
"""

import itertools
import json
import os
from pathlib import Path

import pytest

from ayo.apps import APPS
from ayo.passes import DEFAULT_PASSES, CompileContext, compile_workflow
from ayo.scheduler import Plan
from ayo.scheduler.ir.configs import micro_batch
from ayo.workflow import InputShape, lower

GOLDEN = Path(__file__).parent / "golden"
# naive_rag and advanced_rag as the paper's document QA (128 documents, ~512 passages: enough
# for stage decomposition to pay under the default profiles), contextual_rag's few documents
SHAPES = {
    "naive_rag": InputShape.from_sizes(question=1, documents=128),
    "advanced_rag": InputShape.from_sizes(question=1, documents=128),
    "search_gen": InputShape.from_sizes(question=1),
    "contextual_rag": InputShape.from_sizes(question=1, documents=16),
    "agent_rag": InputShape.from_sizes(question=1),
}


def node_set(plan: Plan) -> set[str]:
    out = set()
    for n in plan.nodes:
        size = micro_batch(n.config)
        extra = f" micro_batch={size}" if size else ""
        out.add(f"{n.id} {n.op.value}" + (f" @{n.engine}" if n.engine else "") + extra)
    return out


def edge_set(plan: Plan) -> set[str]:
    return {f"{e.src}.{e.src_port} -> {e.dst}.{e.dst_port} ({e.kind.value})" for e in plan.edges}


def stages(app: str) -> list[tuple[str, Plan]]:
    ctx = CompileContext(shape=SHAPES[app])
    plan = lower(APPS[app].workflow(SHAPES[app]))
    out = [("lowered", plan)]
    for p in DEFAULT_PASSES:
        plan = p(plan, ctx)
        out.append((p.name, plan))
    return out


def record(app: str) -> dict:
    seq = stages(app)
    first = seq[0][1]
    data = {
        "shape": dict(SHAPES[app].sizes),
        "lowered": {"nodes": sorted(node_set(first)), "edges": sorted(edge_set(first))},
    }
    for (_, before), (name, after) in itertools.pairwise(seq):
        data[name] = {
            "nodes_removed": sorted(node_set(before) - node_set(after)),
            "nodes_added": sorted(node_set(after) - node_set(before)),
            "edges_removed": sorted(edge_set(before) - edge_set(after)),
            "edges_added": sorted(edge_set(after) - edge_set(before)),
        }
    return data


@pytest.mark.parametrize("app", sorted(APPS))
def test_golden_plans(app: str) -> None:
    path = GOLDEN / f"{app}.json"
    if os.environ.get("AYO_UPDATE_GOLDEN"):
        path.write_text(json.dumps(record(app), indent=1) + "\n")
    golden = json.loads(path.read_text())
    seq = stages(app)
    nodes, edges = set(golden["lowered"]["nodes"]), set(golden["lowered"]["edges"])
    assert node_set(seq[0][1]) == nodes
    assert edge_set(seq[0][1]) == edges
    for name, plan in seq[1:]:
        diff = golden[name]
        nodes = (nodes - set(diff["nodes_removed"])) | set(diff["nodes_added"])
        edges = (edges - set(diff["edges_removed"])) | set(diff["edges_added"])
        assert node_set(plan) == nodes, f"{app}: nodes after {name}"
        assert edge_set(plan) == edges, f"{app}: edges after {name}"
    # One round of the passes already reaches the fixed point the pass manager finds.
    final = compile_workflow(APPS[app].workflow(SHAPES[app]), CompileContext(shape=SHAPES[app]))
    assert (node_set(final), edge_set(final)) == (nodes, edges)
