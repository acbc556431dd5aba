"""``benchmarks.agents``' BFCL harness: a multi_turn_base conversation runs to completion with
BFCL's real tool backends and is scored by BFCL's own checker. The model's side is the entry's
ground truth, sent back as OpenAI tool calls, so the checker must accept it (and reject the
same conversation with a turn's calls left out)."""

from __future__ import annotations

import argparse
import ast
import json

import openai.types.chat as oa
import pytest

from benchmarks import agents


def _keyword_only(entry) -> bool:
    calls = [c for turn in entry["ground_truth"] for c in turn]
    return all(not ast.parse(c, mode="eval").body.args for c in calls) and len(calls) <= 8


class GroundTruthClient:
    """An OpenAI client whose model writes the entry's ground-truth calls, one turn's calls in
    its first step, then a text reply."""

    def __init__(self, entry, skip_turn: int = -1) -> None:
        self.turns = iter(enumerate(entry["ground_truth"]))
        self.skip_turn = skip_turn
        self.pending: list[str] | None = None
        self.chat = self
        self.completions = self

    async def create(self, **kw):
        if self.pending is None:
            i, calls = next(self.turns)
            self.pending = [] if i == self.skip_turn else calls
            tool_calls = [_tool_call(j, c) for j, c in enumerate(self.pending)] or None
        else:
            self.pending, tool_calls = None, None
        if tool_calls is None:
            self.pending = None
        message = {"role": "assistant", "content": None if tool_calls else "Done.",
                   "tool_calls": tool_calls}  # fmt: skip
        return oa.ChatCompletion.model_validate({
            "id": "x", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "message": message,
                         "finish_reason": "tool_calls" if tool_calls else "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15,
                      "prompt_tokens_details": {"cached_tokens": 4}},
        })  # fmt: skip


def _tool_call(j: int, call: str) -> dict:
    node = ast.parse(call, mode="eval").body
    args = {k.arg: ast.literal_eval(k.value) for k in node.keywords}
    fn = {"name": node.func.id, "arguments": json.dumps(args)}
    return {"id": f"call_{j}", "type": "function", "function": fn}


@pytest.mark.parametrize("skip_turn", [-1, 0])
async def test_a_bfcl_conversation_runs_with_the_real_backends(skip_turn):
    entry = next(e for e in agents.load_entries() if _keyword_only(e))
    args = argparse.Namespace(max_steps=5, max_tokens=64, tool_choice="auto")
    tally = agents.Tally()
    valid = await agents.replay(GroundTruthClient(entry, skip_turn), entry, args, tally)
    assert valid == (skip_turn < 0)
    n_calls = sum(len(t) for i, t in enumerate(entry["ground_truth"]) if i != skip_turn)
    assert tally.calls == tally.parsed == tally.valid == n_calls
    assert tally.turns == tally.turns_completed == len(entry["question"])
    assert tally.cached_tokens == 4 * tally.llm_calls


def test_bfcl_function_docs_become_json_schema_tools():
    entry = agents.load_entries()[0]
    tools = agents.entry_tools(entry)
    names = [t["function"]["name"] for t in tools]
    assert "cp" not in names and "mv" in names  # excluded_function is honoured
    import jsonschema

    for t in tools:
        jsonschema.Draft202012Validator.check_schema(t["function"]["parameters"])
        assert t["function"]["parameters"]["type"] == "object"
