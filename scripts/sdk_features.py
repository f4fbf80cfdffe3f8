"""The newer API features through the official SDKs: structured output, tool calls (OpenAI and
Anthropic), the Responses API, n choices and Ollama's client. Imported by scripts/sdk_tests.py,
which starts the server and runs these with its own tests (same `ctx`: `oa`, `an`, `ol`), and
which takes the shared prompt, greedy setting and test registry from here.
"""

import json

import openai
import ollama

FRANCE = [{"role": "user", "content": "What is the capital of France?"}]
# this anthropic SDK has no temperature argument any more; the API still takes the field
GREEDY = {"temperature": 0}
# Every test of both files, in the order they are defined (these first, being imported first).
TESTS = []


def test(fn):
    TESTS.append(fn)
    return fn


@test
def structured_output_parses(ctx):
    import pydantic  # the openai SDK's own dependency

    class Capital(pydantic.BaseModel):
        country: str
        capital: str

    # The SDK turns the model into a strict json_schema response_format and parses the answer.
    r = ctx.oa.chat.completions.parse(model="m", messages=FRANCE, response_format=Capital,
                                      temperature=0, max_tokens=40)
    c = r.choices[0]
    assert c.finish_reason == "stop", c
    assert c.message.parsed is not None and "Paris" in c.message.parsed.capital, c.message
    r = ctx.oa.chat.completions.create(model="m", messages=FRANCE, temperature=0, max_tokens=60,
                                       response_format={"type": "json_object"})
    assert isinstance(json.loads(r.choices[0].message.content), dict), r
    try:
        ctx.oa.chat.completions.create(model="m", messages=FRANCE, max_tokens=2,
                                       response_format={"type": "json_schema", "json_schema": {
                                           "name": "x", "schema": {"type": "nope"}}})
        raise AssertionError("a bad schema was accepted")
    except openai.BadRequestError as e:
        assert e.status_code == 400 and e.body["param"] == "response_format", e.body


@test
def tool_calls(ctx):
    tools = [{"type": "function", "function": {
        "name": "get_weather", "description": "Get the current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]}}}]
    ask = [{"role": "user", "content": "What is the weather in Paris?"}]
    r = ctx.oa.chat.completions.create(model="m", messages=ask, tools=tools, tool_choice="required",
                                       temperature=0, max_tokens=40)
    c = r.choices[0]
    assert c.finish_reason == "tool_calls", c
    call = c.message.tool_calls[0]
    assert call.type == "function" and call.function.name == "get_weather", call
    assert isinstance(json.loads(call.function.arguments)["city"], str), call
    # Streamed: the SDK's stream helper puts the deltas back together.
    with ctx.oa.chat.completions.stream(model="m", messages=ask, tools=tools, temperature=0,
                                        max_tokens=40, tool_choice={
                                            "type": "function",
                                            "function": {"name": "get_weather"}}) as st:
        final = st.get_final_completion()
    fc = final.choices[0]
    assert fc.finish_reason == "tool_calls", fc
    assert fc.message.tool_calls[0].function.name == "get_weather", fc
    assert fc.message.tool_calls[0].function.arguments == call.function.arguments, fc
    # The call and its result go back in; told not to call again, it answers in text.
    follow = ask + [c.message.model_dump(exclude_none=True),
                    {"role": "tool", "tool_call_id": call.id, "content": "22 C, sunny"}]
    r = ctx.oa.chat.completions.create(model="m", messages=follow, tools=tools, tool_choice="none",
                                       temperature=0, max_tokens=30)
    assert r.choices[0].message.content and not r.choices[0].message.tool_calls, r


@test
def responses_api(ctx):
    r = ctx.oa.responses.create(model="m", input="What is the capital of France?", temperature=0,
                                max_output_tokens=32)
    assert r.status in ("completed", "incomplete") and "Paris" in r.output_text, r
    assert r.id.startswith("resp_") and r.usage.output_tokens > 0, r
    # Streamed, the SDK's helper rebuilds the same text from the typed events.
    with ctx.oa.responses.stream(model="m", input="What is the capital of France?",
                                 temperature=0, max_output_tokens=32) as st:
        kinds = [e.type for e in st]
        final = st.get_final_response()
    assert final.output_text == r.output_text, (final.output_text, r.output_text)
    assert kinds[:2] == ["response.created", "response.in_progress"], kinds
    assert kinds[-1] in ("response.completed", "response.incomplete"), kinds
    # Instructions and message items; structured output with a pydantic model.
    import pydantic

    class Capital(pydantic.BaseModel):
        country: str
        capital: str

    p = ctx.oa.responses.parse(model="m", instructions="Answer in JSON.",
                               input=[{"role": "user", "content": "What is the capital of France?"}],
                               text_format=Capital, temperature=0, max_output_tokens=40)
    assert p.output_parsed is not None and "Paris" in p.output_parsed.capital, p
    # Function calls, forced, then their output sent back.
    tools = [{"type": "function", "name": "get_weather", "description": "Weather in a city",
              "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                             "required": ["city"]}}]
    ask = [{"role": "user", "content": "What is the weather in Paris?"}]
    r = ctx.oa.responses.create(model="m", input=ask, tools=tools, tool_choice="required",
                                temperature=0, max_output_tokens=40)
    call = [o for o in r.output if o.type == "function_call"][0]
    assert call.name == "get_weather" and "city" in json.loads(call.arguments), call
    with ctx.oa.responses.stream(model="m", input=ask, tools=tools, tool_choice="required",
                                 temperature=0, max_output_tokens=40) as st:
        sfinal = st.get_final_response()
    scall = [o for o in sfinal.output if o.type == "function_call"][0]
    assert scall.arguments == call.arguments, (scall, call)
    follow = ask + [{"type": "function_call", "call_id": call.call_id, "name": call.name,
                     "arguments": call.arguments},
                    {"type": "function_call_output", "call_id": call.call_id, "output": "22 C"}]
    r = ctx.oa.responses.create(model="m", input=follow, tools=tools, tool_choice="none",
                                temperature=0, max_output_tokens=20)
    assert r.output_text, r
    try:
        ctx.oa.responses.create(model="m", input="hi", previous_response_id="resp_x")
        raise AssertionError("previous_response_id was accepted")
    except openai.BadRequestError as e:
        assert e.status_code == 400 and e.body["param"] == "previous_response_id", e.body


@test
def n_choices(ctx):
    r = ctx.oa.chat.completions.create(model="m", messages=FRANCE, n=3, seed=4, max_tokens=12)
    assert [c.index for c in r.choices] == [0, 1, 2], r
    one = ctx.oa.chat.completions.create(model="m", messages=FRANCE, n=1, seed=6, max_tokens=12)
    assert one.choices[0].message.content == r.choices[2].message.content, (one, r)
    assert r.usage.prompt_tokens == one.usage.prompt_tokens, r.usage
    try:
        ctx.oa.chat.completions.create(model="m", messages=FRANCE, n=17, max_tokens=2)
        raise AssertionError("n=17 was accepted")
    except openai.BadRequestError as e:
        assert e.status_code == 400 and e.body["param"] == "n", e.body


@test
def ollama_client(ctx):
    names = [m.model for m in ctx.ol.list().models]
    assert len(names) == 1 and names[0].endswith(":latest"), names
    opts = {"temperature": 0, "num_predict": 32}
    r = ctx.ol.chat(model="m", messages=FRANCE, options=opts)
    assert "Paris" in r.message.content and r.done and r.eval_count > 0, r
    parts = list(ctx.ol.chat(model="m", messages=FRANCE, options=opts, stream=True))
    assert "".join(p.message.content for p in parts) == r.message.content, parts
    assert parts[-1].done and parts[-1].done_reason == r.done_reason, parts[-1]
    g = ctx.ol.generate(model="m", prompt="The capital of France is", raw=True, options=opts)
    assert g.response and g.done, g
    j = ctx.ol.chat(model="m", messages=FRANCE, format={"type": "object", "properties": {
        "capital": {"type": "string"}}, "required": ["capital"]}, options=opts)
    assert "Paris" in json.loads(j.message.content)["capital"], j
    e = ctx.ol.embed(model="m", input=["The cat sat.", "A dog ran."])
    assert len(e.embeddings) == 2 and len(e.embeddings[0]) == 576, len(e.embeddings)
    assert "completion" in ctx.ol.show("m").capabilities
    try:
        ctx.ol.chat(model="m", messages=[{"role": "user", "content": "x", "images": ["aGk="]}])
        raise AssertionError("images were accepted")
    except ollama.ResponseError as err:
        assert err.status_code == 400 and "images" in err.error, err


@test
def anthropic_tool_use(ctx):
    tools = [{"name": "get_weather", "description": "Get the current weather in a city",
              "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                               "required": ["city"]}}]
    ask = [{"role": "user", "content": "What is the weather in Paris?"}]
    pick = {"type": "tool", "name": "get_weather"}
    m = ctx.an.messages.create(model="m", max_tokens=40, messages=ask, tools=tools,
                               tool_choice=pick, extra_body=GREEDY)
    assert m.stop_reason == "tool_use", m
    use = [b for b in m.content if b.type == "tool_use"][0]
    assert use.name == "get_weather" and isinstance(use.input["city"], str), use
    assert use.id.startswith("toolu_"), use
    # Streamed: the SDK rebuilds the input from its input_json_delta.
    with ctx.an.messages.stream(model="m", max_tokens=40, messages=ask, tools=tools,
                                tool_choice=pick, extra_body=GREEDY) as st:
        final = st.get_final_message()
    assert final.stop_reason == "tool_use", final
    suse = [b for b in final.content if b.type == "tool_use"][0]
    assert suse.name == use.name and suse.input == use.input, (suse, use)
    # The call and its result go back in; with tool_choice none it answers in text.
    follow = ask + [{"role": "assistant", "content": [b.model_dump() for b in m.content]},
                    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id,
                                                  "content": "22 C, sunny"}]}]
    r = ctx.an.messages.create(model="m", max_tokens=30, messages=follow, tools=tools,
                               tool_choice={"type": "none"}, extra_body=GREEDY)
    assert r.content[0].type == "text" and r.content[0].text, r
    n = ctx.an.messages.count_tokens(model="m", messages=follow, tools=tools)
    assert n.input_tokens > 10, n
