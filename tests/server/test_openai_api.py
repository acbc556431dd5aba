"""The OpenAI-compatible endpoints, driven by the real ``openai`` package and raw aiohttp against
a server on the embedded default engines; every answer is checked against the engines' own
output for the same request (greedy decoding, the embedder's vectors, the tokenizer's counts)."""

from __future__ import annotations

import asyncio
import json
import time

import aiohttp
import numpy as np
import openai
import pytest

MODEL = "smollm2-135m-instruct"
EMBEDDER = "all-minilm-l6-v2"
MESSAGES = [{"role": "user", "content": "What is the capital of France?"}]
TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "The weather in a city now",
        "parameters": {"type": "object", "properties": {"city": {"type": "string",
                       "maxLength": 30}}, "required": ["city"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "add", "description": "Add two integers",
        "parameters": {"type": "object", "properties": {"a": {"type": "integer"},
                       "b": {"type": "integer"}}, "required": ["a", "b"],
                       "additionalProperties": False}}},
]  # fmt: skip


@pytest.fixture
async def client(server_url):
    c = openai.AsyncOpenAI(base_url=server_url + "/v1", api_key="x", max_retries=0, timeout=60)
    yield c
    await c.close()


async def _decode_pieces(llm, messages, **sampling):
    """The engine's own decode pieces for a chat conversation (on the server's loop)."""
    from ayo.engines.llm import SamplingParams

    seq = await llm.open(llm.apply_chat_template(messages))
    try:
        return [p async for p in llm.decode(seq, SamplingParams(**sampling))]
    finally:
        await llm.close(seq)


def engine_generate(server, prompt, **sampling):
    """The LLM engine's own result for ``prompt`` (text or ids), on the server's loop."""
    from ayo.engines.llm import SamplingParams

    params = SamplingParams(**sampling)
    return server.call(server.state.llm.generate(prompt, params))[0]


async def post(url, path, body):
    async with (
        aiohttp.ClientSession() as s,
        s.post(
            url + path,
            data=body if isinstance(body, bytes) else json.dumps(body),
            headers={"content-type": "application/json"},
        ) as r,
    ):
        return r.status, await r.json()


async def test_models_list(client, server):
    models = await client.models.list()
    ids = [m.id for m in models.data]
    assert ids[:2] == [MODEL, EMBEDDER]
    assert {"app:naive_rag", "app:advanced_rag", "app:short_rag"} <= set(ids)
    assert all(m.object == "model" and m.owned_by == "ayo" for m in models.data)
    assert set(ids) == set(server.state.model_ids)


async def test_penalties_reach_the_engine(client, server):
    kw = {"max_tokens": 24, "temperature": 0}
    penalties = {"frequency_penalty": 1.5, "presence_penalty": 0.5}
    reply = await client.completions.create(model=MODEL, prompt="One, two, one, two,", **kw,
                                            **penalties)  # fmt: skip
    ids = server.state.llm.encode("One, two, one, two,")
    ref = engine_generate(server, ids, max_tokens=24, **penalties)
    plain = engine_generate(server, ids, max_tokens=24)
    assert reply.choices[0].text == ref.text and ref.token_ids != plain.token_ids
    extra = {"repetition_penalty": 1.3}
    reply = await client.completions.create(model=MODEL, prompt="One, two, one, two,", **kw,
                                            extra_body=extra)  # fmt: skip
    assert reply.choices[0].text == engine_generate(server, ids, max_tokens=24, **extra).text


async def test_chat_equals_engine_greedy_with_usage(client, server):
    reply = await client.chat.completions.create(
        model=MODEL, messages=MESSAGES, max_tokens=12, temperature=0
    )
    ids = server.state.llm.apply_chat_template(MESSAGES)
    ref = engine_generate(server, ids, max_tokens=12)
    choice = reply.choices[0]
    assert reply.object == "chat.completion" and reply.model == MODEL
    assert choice.message.role == "assistant"
    assert choice.message.content == ref.text and ref.text.strip()
    assert choice.finish_reason == ref.finish_reason
    assert reply.usage.prompt_tokens == len(ids)
    assert reply.usage.completion_tokens == len(ref.token_ids)
    assert reply.usage.total_tokens == len(ids) + len(ref.token_ids)


async def test_chat_stream_matches_and_counts(client, server):
    kw = {"model": MODEL, "messages": MESSAGES, "temperature": 0}
    full = await client.chat.completions.create(**kw, max_tokens=12)
    stream = await client.chat.completions.create(  # the newer name of the same limit
        **kw, max_completion_tokens=12, stream=True, stream_options={"include_usage": True}
    )
    chunks = [c async for c in stream]
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == full.choices[0].message.content
    finals = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finals[-1] == full.choices[0].finish_reason and not any(finals[:-1])
    assert chunks[-1].choices == [] and chunks[-1].usage == full.usage
    assert all(c.usage is None for c in chunks[:-1])


async def test_completions_equal_engine_greedy(client, server):
    prompts = ["The capital of France is", "Water boils at"]
    reply = await client.completions.create(
        model=MODEL, prompt=prompts, max_tokens=8, temperature=0
    )
    assert [c.index for c in reply.choices] == [0, 1]
    refs = [engine_generate(server, p, max_tokens=8) for p in prompts]
    assert [c.text for c in reply.choices] == [r.text for r in refs]
    tok = server.state.llm.hf_tokenizer
    assert reply.usage.prompt_tokens == sum(len(tok(p)["input_ids"]) for p in prompts)
    assert reply.usage.completion_tokens == sum(len(r.token_ids) for r in refs)
    # token ids as the prompt give the same text
    ids = tok(prompts[0])["input_ids"]
    by_ids = await client.completions.create(model=MODEL, prompt=ids, max_tokens=8, temperature=0)
    assert by_ids.choices[0].text == refs[0].text
    # streamed, two prompts interleaved: each index's pieces join to its text
    stream = await client.completions.create(
        model=MODEL, prompt=prompts, max_tokens=8, temperature=0, stream=True
    )
    texts = ["", ""]
    async for chunk in stream:
        for c in chunk.choices:
            texts[c.index] += c.text
    assert texts == [r.text for r in refs]


async def test_stop_strings(client, server):
    prompt = "List the days of the week: Monday, Tuesday,"
    free = engine_generate(server, prompt, max_tokens=12).text
    stop = free.split(",")[1]  # the second item the model writes, e.g. " Thursday"
    assert stop.strip()
    for stream in (False, True):
        reply = await client.completions.create(
            model=MODEL, prompt=prompt, max_tokens=12, temperature=0, stop=[stop, "@@"],
            stream=stream,
        )  # fmt: skip
        if stream:
            chunks = [c async for c in reply]
            text = "".join(c.choices[0].text for c in chunks)
            reason = chunks[-1].choices[0].finish_reason
        else:
            text, reason = reply.choices[0].text, reply.choices[0].finish_reason
        assert text == free[: free.index(stop)]
        assert reason == "stop"


async def test_seed_reproducible_at_temperature(client):
    async def sample(seed):
        r = await client.completions.create(
            model=MODEL, prompt="Once upon a time", max_tokens=12, temperature=1.0, seed=seed
        )
        return r.choices[0].text

    first = await sample(7)
    assert await sample(7) == first
    others = {await sample(s) for s in (8, 9)}
    assert others != {first}  # other seeds give other samples


async def test_embeddings_equal_the_embedder(client, server):
    texts = ["Paris is the capital of France.", "Photosynthesis makes sugar from light."]
    ref = server.call(server.state.embedder.embed_batch(texts))
    as_float = await client.embeddings.create(model=EMBEDDER, input=texts, encoding_format="float")
    as_b64 = await client.embeddings.create(model=EMBEDDER, input=texts)  # the SDK asks base64
    for reply in (as_float, as_b64):
        got = np.array([d.embedding for d in sorted(reply.data, key=lambda d: d.index)])
        np.testing.assert_allclose(got, ref.vectors, rtol=0, atol=1e-6)
        assert reply.usage.prompt_tokens == int(ref.num_tokens.sum())
    one = await client.embeddings.create(model=EMBEDDER, input=texts[0], encoding_format="float")
    np.testing.assert_allclose(one.data[0].embedding, ref.vectors[0], atol=1e-6)


async def test_app_model_runs_the_app(client, server):
    question = "What is the capital of France?"
    expected = server.call(server.state.app.run("short_rag", {"question": question}))
    answer = expected.outputs["answer"]
    msgs = [
        {"role": "system", "content": "ignored by the app"},
        {"role": "user", "content": question},
    ]
    reply = await client.chat.completions.create(model="app:short_rag", messages=msgs)
    assert reply.choices[0].message.content == answer
    tok = server.state.llm.hf_tokenizer
    assert reply.usage.prompt_tokens == len(tok(question)["input_ids"])
    assert reply.usage.completion_tokens == len(tok(answer)["input_ids"])
    stream = await client.chat.completions.create(model="app:short_rag", messages=msgs, stream=True)
    text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    assert text == answer


@pytest.mark.parametrize(
    ("path", "body", "status", "needle"),
    [
        ("/v1/chat/completions", {"model": "gpt-9", "messages": MESSAGES}, 404, "gpt-9"),
        ("/v1/completions", {"model": MODEL, "prompt": "x", "n": 2}, 400, "'n'"),
        ("/v1/completions", {"model": MODEL, "prompt": "x", "temperature": "hot"}, 400,
         "'temperature'"),
        ("/v1/completions", {"model": MODEL, "prompt": "x", "max_tokens": 0}, 400, "max_tokens"),
        ("/v1/completions", {"model": MODEL, "prompt": "x", "max_tokens": 10**6}, 400,
         "max_tokens"),
        ("/v1/completions", {"model": MODEL, "prompt": 5}, 400, "'prompt'"),
        ("/v1/completions", {"model": MODEL, "prompt": "x", "stop": [""]}, 400, "'stop'"),
        ("/v1/completions", {"model": "app:short_rag", "prompt": "x"}, 400, "chat/completions"),
        ("/v1/chat/completions", {"model": MODEL, "messages": "hi"}, 400, "'messages'"),
        ("/v1/chat/completions", {"model": MODEL, "messages": [{"role": "bot"}]}, 400, "role"),
        ("/v1/chat/completions", {"model": "app:contextual_rag", "messages": MESSAGES}, 400,
         "documents"),
        ("/v1/embeddings", {"model": MODEL, "input": "x"}, 400, EMBEDDER),
        ("/v1/embeddings", {"model": "nope", "input": "x"}, 404, "nope"),
        ("/v1/embeddings", {"model": EMBEDDER, "input": ["a", 3]}, 400, "'input'"),
        ("/v1/embeddings", {"model": EMBEDDER, "input": "a", "encoding_format": "hex"}, 400,
         "encoding_format"),
        ("/v1/chat/completions", b"{not json", 400, "JSON"),
        # non-finite numbers (Python's parser takes them), out-of-range sampling fields, depth
        ("/v1/chat/completions", b'{"model": "smollm2-135m-instruct", "messages": '
         b'[{"role": "user", "content": "hi"}], "temperature": NaN}', 400, "NaN"),
        ("/v1/completions", b'{"model": "x", "prompt": "x", "top_p": Infinity}', 400, "Infinity"),
        ("/v1/completions", {"model": MODEL, "prompt": "x", "seed": 2**70}, 400, "'seed'"),
        ("/v1/completions", {"model": MODEL, "prompt": "x", "seed": -1}, 400, "'seed'"),
        ("/v1/completions", {"model": MODEL, "prompt": "x", "frequency_penalty": 3}, 400,
         "frequency_penalty"),
        ("/v1/completions", {"model": MODEL, "prompt": "x", "repetition_penalty": 0}, 400,
         "repetition_penalty"),
        ("/v1/chat/completions", b"[" * 100_000 + b"]" * 100_000, 400, "nested too deeply"),
        # structured output: malformed, contradictory, uncompilable, or asked of an app
        ("/v1/chat/completions", {"model": MODEL, "messages": MESSAGES,
         "response_format": {"type": "yaml"}}, 400, "response_format.type"),
        ("/v1/chat/completions", {"model": MODEL, "messages": MESSAGES,
         "response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}, 400,
         "'schema'"),
        ("/v1/chat/completions", {"model": MODEL, "messages": MESSAGES,
         "response_format": {"type": "json_object"}, "guided_regex": "a+"}, 400, "at most one"),
        ("/v1/chat/completions", {"model": MODEL, "messages": MESSAGES,
         "guided_choice": []}, 400, "guided_choice"),
        ("/v1/chat/completions", {"model": MODEL, "messages": MESSAGES, "response_format":
         {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "tensor"}}}},
         400, "tensor"),
        ("/v1/chat/completions", {"model": "app:short_rag", "messages": MESSAGES,
         "response_format": {"type": "json_object"}}, 400, "structured output"),
        # logprobs: OpenAI's ranges and pairing, and not for an app's answer
        ("/v1/chat/completions", {"model": MODEL, "messages": MESSAGES, "top_logprobs": 2}, 400,
         "needs 'logprobs'"),
        ("/v1/chat/completions", {"model": MODEL, "messages": MESSAGES, "logprobs": True,
         "top_logprobs": 21}, 400, "top_logprobs"),
        ("/v1/completions", {"model": MODEL, "prompt": "x", "logprobs": 6}, 400, "'logprobs'"),
        ("/v1/chat/completions", {"model": "app:short_rag", "messages": MESSAGES,
         "logprobs": True}, 400, "logprobs"),
        # tools: malformed, contradictory, a result nobody asked for, or asked of an app
        ("/v1/chat/completions", {"model": MODEL, "messages": MESSAGES,
         "tools": [{"type": "function", "function": {"name": "a b"}}]}, 400, "tools[0]"),
        ("/v1/chat/completions", {"model": MODEL, "messages": MESSAGES, "tools": TOOLS,
         "tool_choice": {"type": "function", "function": {"name": "nope"}}}, 400, "'nope'"),
        ("/v1/chat/completions", {"model": MODEL, "messages": MESSAGES, "tools": TOOLS,
         "tool_choice": "sometimes"}, 400, "tool_choice"),
        ("/v1/chat/completions", {"model": MODEL, "messages": MESSAGES, "tools": TOOLS,
         "response_format": {"type": "json_object"}}, 400, "give one"),
        ("/v1/chat/completions", {"model": MODEL, "tools": TOOLS, "messages": [
            *MESSAGES, {"role": "tool", "tool_call_id": "call_forged", "content": "42"}]}, 400,
         "'call_forged'"),
        ("/v1/chat/completions", {"model": MODEL, "messages": [{"role": "assistant",
         "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f",
                                                                       "arguments": "{x"}}]}]},
         400, "arguments"),
        ("/v1/chat/completions", {"model": "app:short_rag", "messages": MESSAGES,
         "tools": TOOLS}, 400, "tools"),
        ("/v1/chat/completions", {"model": MODEL, "messages": MESSAGES, "tool_choice": "required",
         "tools": [{"type": "function", "function": {"name": "f", "parameters":
                    {"type": "object", "properties": {"x": {"type": "tensor"}}}}}]}, 400,
         "tensor"),
    ],
)  # fmt: skip
async def test_errors(server_url, path, body, status, needle):
    got, data = await post(server_url, path, body)
    assert got == status, data
    assert set(data) == {"error"} and needle in data["error"]["message"]
    expected_type = {400: "invalid_request_error", 404: "not_found_error"}[status]
    assert data["error"]["type"] == expected_type


async def test_structured_output_through_the_openai_client(client, server):
    """``response_format`` json_schema (strict) and json_object, and vLLM's guided_choice, as
    the ``openai`` package sends them; the schema's answer equals the engine's own constrained
    greedy decode, and it streams the same text."""
    from ayo.engines.llm.sampling import Grammar

    schema = {
        "type": "object",
        "properties": {
            "city": {"type": "string", "maxLength": 20},
            "country": {"type": "string", "maxLength": 20},
        },
        "required": ["city", "country"],
        "additionalProperties": False,
    }
    fmt = {
        "type": "json_schema",
        "json_schema": {"name": "place", "schema": schema, "strict": True},
    }
    kw = {"model": MODEL, "messages": MESSAGES, "max_tokens": 40, "temperature": 0}
    reply = await client.chat.completions.create(**kw, response_format=fmt)
    data = json.loads(reply.choices[0].message.content)
    assert set(data) == {"city", "country"} and reply.choices[0].finish_reason == "stop"
    ids = server.state.llm.apply_chat_template(MESSAGES)
    ref = engine_generate(server, ids, max_tokens=40, grammar=Grammar.json_schema(schema))
    assert reply.choices[0].message.content == ref.text
    stream = await client.chat.completions.create(**kw, response_format=fmt, stream=True)
    text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    assert text == ref.text
    reply = await client.chat.completions.create(**kw, response_format={"type": "json_object"})
    if reply.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(reply.choices[0].message.content), dict)
    reply = await client.chat.completions.create(
        **kw, extra_body={"guided_choice": ["Paris", "Lyon"]}
    )
    assert reply.choices[0].message.content in ("Paris", "Lyon")


def _is_json(text):
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


async def test_tool_loop_through_the_openai_client(client, server):
    """The ``openai`` client's tool loop: a named tool forced, ``required`` with parallel calls
    (each parses and validates against its tool's schema), the calls' results sent back as
    ``tool`` messages for the next turn, ``auto``, and a stream whose deltas, reassembled, are
    the non-streamed message."""
    import jsonschema

    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
    ask = [{"role": "user", "content": "What is the weather in Paris and in Rome?"}]
    kw = {"model": MODEL, "tools": TOOLS, "max_tokens": 50, "temperature": 0}
    named = {"type": "function", "function": {"name": "add"}}
    reply = await client.chat.completions.create(**kw, messages=ask, tool_choice=named)
    [call] = reply.choices[0].message.tool_calls
    assert reply.choices[0].finish_reason == "tool_calls" and call.function.name == "add"
    jsonschema.validate(json.loads(call.function.arguments), schemas["add"])

    reply = await client.chat.completions.create(
        **{**kw, "max_tokens": 80}, messages=ask, tool_choice="required"
    )
    message = reply.choices[0].message
    written = [(c.function.name, c.function.arguments) for c in message.tool_calls]
    # SmolLM2 asks for both cities, and then for more until max_tokens cuts it short (a call
    # cut short is returned as written, as OpenAI does, with finish_reason "length")
    whole = [c for c in message.tool_calls if _is_json(c.function.arguments)]
    assert len(whole) >= 2 and [c.function.name for c in whole[:2]] == ["get_weather"] * 2
    assert len(whole) == len(written) or reply.choices[0].finish_reason == "length"
    for c in whole:
        jsonschema.validate(json.loads(c.function.arguments), schemas[c.function.name])
    message.tool_calls = whole
    results = [{"role": "tool", "tool_call_id": c.id, "content": json.dumps({"temp_c": 20 + i})}
               for i, c in enumerate(message.tool_calls)]  # fmt: skip
    turn = [*ask, message.model_dump(exclude_none=True), *results]
    after = await client.chat.completions.create(**kw, messages=turn)
    assert after.choices[0].finish_reason in ("stop", "tool_calls", "length")
    assert after.usage.prompt_tokens > reply.usage.prompt_tokens

    # auto: SmolLM2 answers in text here (any call it made would parse, as above)
    auto = await client.chat.completions.create(
        **{**kw, "max_tokens": 12}, messages=ask, tool_choice="auto"
    )
    assert auto.choices[0].message.content and auto.choices[0].finish_reason == "length"

    stream = await client.chat.completions.create(
        **{**kw, "max_tokens": 80}, messages=ask, tool_choice="required", stream=True
    )
    calls: dict[int, dict] = {}
    content, reasons = "", []
    async for chunk in stream:
        delta = chunk.choices[0].delta
        content += delta.content or ""
        reasons.append(chunk.choices[0].finish_reason)
        for d in delta.tool_calls or ():
            entry = calls.setdefault(d.index, {"id": "", "name": "", "arguments": ""})
            entry["id"] += d.id or ""
            entry["name"] += (d.function.name or "") if d.function else ""
            entry["arguments"] += (d.function.arguments or "") if d.function else ""
    assert [(c["name"], c["arguments"]) for c in calls.values()] == written
    assert all(c["id"].startswith("call_") for c in calls.values())
    assert (
        content.strip() == (message.content or "") and reasons[-1] == reply.choices[0].finish_reason
    )


async def test_logprobs_through_the_openai_client(client, server):
    """Chat ``logprobs`` / ``top_logprobs`` and completions' ``logprobs`` N: one entry per
    generated token, the greedy token the likeliest of its alternatives, the log-probabilities
    the engine's own; streamed chunks carry the same entries."""
    kw = {"model": MODEL, "messages": MESSAGES, "max_tokens": 8, "temperature": 0}
    reply = await client.chat.completions.create(**kw, logprobs=True, top_logprobs=2)
    content = reply.choices[0].logprobs.content
    assert len(content) == reply.usage.completion_tokens
    assert "".join(e.token for e in content).startswith(reply.choices[0].message.content)
    for e in content:
        assert len(e.top_logprobs) == 2 and e.logprob <= 0
        assert e.top_logprobs[0].logprob >= e.top_logprobs[1].logprob
        assert e.logprob == pytest.approx(e.top_logprobs[0].logprob)  # greedy: the likeliest
        assert bytes(e.bytes).decode() == e.token
    ref = server.call(_decode_pieces(server.state.llm, MESSAGES, max_tokens=8, logprobs=2))
    assert [e.logprob for e in content] == pytest.approx([p.logprobs.logprob for p in ref])
    stream = await client.chat.completions.create(**kw, logprobs=True, top_logprobs=2, stream=True)
    streamed = [e async for c in stream if c.choices and c.choices[0].logprobs
                for e in c.choices[0].logprobs.content]  # fmt: skip
    assert [(e.token, e.logprob) for e in streamed] == [(e.token, e.logprob) for e in content]
    plain = await client.chat.completions.create(**kw)
    assert plain.choices[0].logprobs is None
    done = await client.completions.create(
        model=MODEL, prompt="The capital of France is", max_tokens=5, temperature=0, logprobs=3
    )
    lp, n = done.choices[0].logprobs, done.usage.completion_tokens
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == n
    assert "".join(lp.tokens).startswith(done.choices[0].text)
    assert lp.text_offset == [sum(len(t) for t in lp.tokens[:i]) for i in range(n)]
    assert all(len(top) <= 3 and max(top.values()) == pytest.approx(v)
               for top, v in zip(lp.top_logprobs, lp.token_logprobs))  # fmt: skip


async def test_prompt_over_context_window_is_422(server_url, server):
    window = server.state.llm.max_model_len
    for body in (
        {"model": MODEL, "prompt": [1] * window, "max_tokens": 1},
        {"model": MODEL, "messages": [{"role": "user", "content": "hello " * window}]},
    ):
        path = "/v1/completions" if "prompt" in body else "/v1/chat/completions"
        status, data = await post(server_url, path, body)
        assert status == 422, data
        assert data["error"]["type"] == "context_length_exceeded"
        assert str(window) in data["error"]["message"]


async def _settled(llm, before):
    """Wait (<= 10 s) until no sequence is left and the used KV blocks are back to ``before``."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        now = llm.stats()
        if now.running + now.waiting + now.idle == 0 and now.used_blocks == before.used_blocks:
            break
        await asyncio.sleep(0.05)
    return now


async def test_disconnect_mid_stream_frees_kv_blocks(server_url, server):
    llm = server.state.llm
    before = llm.stats()
    body = {"model": MODEL, "messages": MESSAGES, "max_tokens": 1500, "ignore_eos": True,
            "temperature": 0, "stream": True}  # fmt: skip
    async with aiohttp.ClientSession() as s:
        resp = await s.post(server_url + "/v1/chat/completions", json=body)
        assert resp.status == 200
        for _ in range(3):  # the role chunk and two pieces of text
            assert (await resp.content.readline()).startswith(b"data: ")
            await resp.content.readline()
        mid = llm.stats()
        assert mid.running + mid.waiting + mid.idle >= 1 and mid.used_blocks > before.used_blocks
        resp.close()  # drop the connection mid-stream
    now = await _settled(llm, before)
    assert now.running + now.waiting + now.idle == 0
    assert now.used_blocks == before.used_blocks
    assert now.generated_tokens - before.generated_tokens < 200  # far from the 1500 asked


async def test_client_leaving_a_plain_completion_frees_kv_blocks(server_url, server):
    """Without streaming too: the server cancels the handler when its client goes away."""
    llm = server.state.llm
    before = llm.stats()
    body = {"model": MODEL, "prompt": "Count:", "max_tokens": 1500, "ignore_eos": True}
    timeout = aiohttp.ClientTimeout(total=1.5)
    async with aiohttp.ClientSession(timeout=timeout) as s:
        with pytest.raises(TimeoutError):
            await s.post(server_url + "/v1/completions", json=body)
    now = await _settled(llm, before)
    assert now.running + now.waiting + now.idle == 0 and now.used_blocks == before.used_blocks
    assert 0 < now.generated_tokens - before.generated_tokens < 200
