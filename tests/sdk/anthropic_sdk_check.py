"""Drive respgw's Anthropic Messages API with the official `anthropic` Python SDK.

Run by tests/e2e/anthropic_sdk.rs against a gateway in front of the replay upstream; argv[1] is the
gateway's base URL, $RESPGW_TEST_KEY its API key, $RESPGW_TEST_IMAGE_URL a PNG on a loopback file
server the gateway may fetch, $RESPGW_TEST_PDF a one-page PDF (base64). Each check uses its own model name (the replay
upstream's scenario), so the Rust test can assert on what the model received for it.

Every reply is also captured on the wire (a recording transport under the SDK) and validated by
the SDK's own models strictly: each JSON body and each stream event must validate (no missing or
mistyped field) and carry no field the SDK does not define; a stream must follow Anthropic's event
order. The facts the Rust test needs (ids, counts) are printed as JSON lines `{"fact": …}`.
"""

import json
import os
import sys

import anthropic
import httpx2
import pydantic
from anthropic.types import (
    Message,
    MessageTokensCount,
    ModelInfo,
    RawMessageStreamEvent,
    TextBlock,
    ThinkingBlock,
    ToolUseBlock,
)
from anthropic.types.shared import ErrorResponse

# A 1×1 PNG, base64.
TINY_PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGP4z8DwHwAFAAH/iZk9HQAAAABJRU5ErkJggg=="

WEATHER_TOOL = {
    "name": "get_weather",
    "description": "Weather of a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}

# Fields the API always sends in a message, even where the SDK gives them a default.
MESSAGE_FIELDS = {"id", "type", "role", "content", "model", "stop_reason", "stop_sequence", "usage"}

# Words of a parser's own error messages, which must never reach a client.
PARSER_WORDS = ("serde", "unknown variant", "line 1 column", "missing field `", "invalid type:")


class Wire(httpx2.BaseTransport):
    """The real transport, keeping each exchange's path, status, headers and reply bytes."""

    def __init__(self):
        self.inner = httpx2.HTTPTransport()
        self.exchanges = []

    def handle_request(self, request):
        response = self.inner.handle_request(request)
        exchange = {"path": request.url.path, "status": response.status_code, "headers": response.headers,
                    "raw": bytearray()}
        self.exchanges.append(exchange)
        source = response.stream

        class Tee(httpx2.SyncByteStream):
            def __iter__(self):
                for chunk in source:
                    exchange["raw"] += chunk
                    yield chunk

            def close(self):
                source.close()

        return httpx2.Response(response.status_code, headers=response.headers, stream=Tee(),
                               extensions=response.extensions)

    def close(self):
        self.inner.close()

    def last_text(self):
        """The decoded body of the latest exchange (content-encoding undone)."""
        exchange = self.exchanges[-1]
        decoded = httpx2.Response(exchange["status"], headers=exchange["headers"], content=bytes(exchange["raw"]))
        return decoded.read().decode()

    def last_json(self):
        return json.loads(self.last_text())


def no_unknown_fields(value, where):
    """Fail on any field, at any depth, that the SDK's model does not define."""
    if isinstance(value, pydantic.BaseModel):
        extra = value.__pydantic_extra__ or {}
        assert not extra, f"{where}: fields the SDK does not define: {sorted(extra)}"
        for name in type(value).model_fields:
            no_unknown_fields(getattr(value, name), f"{where}.{name}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            no_unknown_fields(item, f"{where}[{i}]")


def strict(model, raw, where):
    """`raw` (JSON) validated by the SDK model `model`: complete, well typed, nothing unknown."""
    try:
        value = pydantic.TypeAdapter(model).validate_json(json.dumps(raw), strict=True)
    except pydantic.ValidationError as e:
        raise AssertionError(f"{where}: the SDK's {model} rejects {json.dumps(raw)}:\n{e}") from None
    no_unknown_fields(value, where)
    return value


def strict_message(raw, where):
    missing = MESSAGE_FIELDS - set(raw)
    assert not missing, f"{where}: message without {sorted(missing)}: {raw}"
    message = strict(Message, raw, where)
    assert message.id.startswith("msg_"), message.id
    assert message.usage.input_tokens >= 0 and message.usage.output_tokens >= 0
    return message


def sse_events(text):
    """(event name, JSON data) of each event in an SSE body."""
    events = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        name, data = None, []
        for line in block.split("\n"):
            if line.startswith("event:"):
                name = line[len("event:"):].strip()
            elif line.startswith("data:"):
                data.append(line[len("data:"):].lstrip())
        if data:
            events.append((name, json.loads("\n".join(data))))
    return events


def strict_stream(text, where, ends_with_error=False):
    """Validate a Messages event stream; returns its events (without pings) as dicts. A stream
    ends with `message_delta` and `message_stop`, or, when `ends_with_error`, with an `error` event."""
    events = []
    open_block = None
    next_index = 0
    for n, (name, data) in enumerate(sse_events(text)):
        at = f"{where} event {n} ({name})"
        assert name == data.get("type"), f"{at}: event name and data type differ: {data}"
        if name == "ping":
            assert data == {"type": "ping"}, at
            continue
        if name == "error":
            strict(ErrorResponse, data, at)
            events.append(data)
            continue
        strict(RawMessageStreamEvent, data, at)
        events.append(data)
        if name == "content_block_start":
            assert open_block is None and data["index"] == next_index, f"{at}: blocks open one by one: {data}"
            open_block = data["index"]
        elif name == "content_block_delta":
            assert data["index"] == open_block, f"{at}: a delta for a block that is not open: {data}"
        elif name == "content_block_stop":
            assert data["index"] == open_block, f"{at}: stops a block that is not open: {data}"
            open_block, next_index = None, next_index + 1
    kinds = [e["type"] for e in events]
    assert kinds[0] == "message_start", f"{where}: {kinds}"
    start = events[0]["message"]
    assert start["content"] == [] and start["stop_reason"] is None, f"{where}: {start}"
    assert MESSAGE_FIELDS <= set(start), f"{where}: message_start without {sorted(MESSAGE_FIELDS - set(start))}"
    if ends_with_error:
        assert kinds[-1] == "error" and kinds.count("error") == 1 and "message_stop" not in kinds, f"{where}: {kinds}"
    else:
        assert kinds[-2:] == ["message_delta", "message_stop"] and "error" not in kinds, f"{where}: {kinds}"
        assert open_block is None, f"{where}: block {open_block} never stopped"
    return events


def kinds(content, *expected):
    """Whether each block is an instance of the expected SDK class (the stream helper subclasses them)."""
    return len(content) == len(expected) and all(isinstance(b, t) for b, t in zip(content, expected))


def fact(**values):
    print(json.dumps({"fact": values}), flush=True)


def user(text):
    return {"role": "user", "content": text}


def check_plain(client, wire):
    raw = client.messages.with_raw_response.create(model="plain", max_tokens=64, messages=[user("Capital of France?")])
    assert raw.headers.get("request-id"), f"no request-id header: {dict(raw.headers)}"
    body = wire.last_json()
    strict_message(body, "plain")
    message = raw.parse()
    assert isinstance(message, Message)
    assert kinds(message.content, TextBlock) and message.content[0].text == "Paris.", message
    assert (message.role, message.model, message.stop_reason, message.stop_sequence) == (
        "assistant", "plain", "end_turn", None), message
    assert (message.usage.input_tokens, message.usage.output_tokens) == (12, 3), message.usage


def check_system_and_sampling(client, wire):
    message = client.messages.create(
        model="system",
        max_tokens=100,
        system=[{"type": "text", "text": "Be brief."},
                {"type": "text", "text": "Answer in English.", "cache_control": {"type": "ephemeral"}}],
        messages=[user("Capital of France?"), {"role": "assistant", "content": "Let me think."},
                  user([{"type": "text", "text": "Just the name."}])],
        stop_sequences=["END"],
        metadata={"user_id": "user-42"},
        # This SDK version no longer declares the sampling parameters; the API still takes them.
        extra_body={"temperature": 0.2, "top_p": 0.9, "top_k": 40},
    )
    strict_message(wire.last_json(), "system")
    assert message.content[0].text == "Paris.", message


def check_image(client, wire):
    message = client.messages.create(
        model="image",
        max_tokens=64,
        messages=[user([
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": TINY_PNG}},
            {"type": "image", "source": {"type": "url", "url": os.environ["RESPGW_TEST_IMAGE_URL"]}},
            {"type": "text", "text": "What is in these images?"},
        ])],
    )
    strict_message(wire.last_json(), "image")
    assert message.content[0].text == "Paris.", message


def check_documents(client, wire):
    message = client.messages.create(model="documents", max_tokens=64, messages=[user([
        {"type": "document", "title": "gulls.pdf",
         "source": {"type": "base64", "media_type": "application/pdf", "data": os.environ["RESPGW_TEST_PDF"]}},
        {"type": "document", "title": "notes.txt",
         "source": {"type": "text", "media_type": "text/plain", "data": "The secret number is 42."}},
        {"type": "text", "text": "Summarize both."},
    ])])
    strict_message(wire.last_json(), "documents")
    assert message.content[0].text == "Paris.", message


def check_stop_reasons(client, wire):
    cut = client.messages.create(model="limits", max_tokens=5, messages=[user("Tell me a long story.")])
    strict_message(wire.last_json(), "max_tokens")
    assert (cut.stop_reason, cut.stop_sequence) == ("max_tokens", None), cut

    with client.messages.stream(model="limits", max_tokens=64, stop_sequences=["END", "STOP"],
                                messages=[user("Count to three, then say END.")]) as stream:
        stopped = stream.get_final_message()
    events = strict_stream(wire.last_text(), "stop_sequence")
    delta = events[-2]["delta"]
    assert (delta["stop_reason"], delta["stop_sequence"]) == ("stop_sequence", "END"), delta
    assert (stopped.stop_reason, stopped.stop_sequence) == ("stop_sequence", "END"), stopped
    assert stopped.content[0].text == "One, two, three. ", stopped


def check_thinking(client, wire):
    question = user("What is 2+2?")
    message = client.messages.create(model="thinking", max_tokens=4096, messages=[question],
                                     thinking={"type": "enabled", "budget_tokens": 2048})
    strict_message(wire.last_json(), "thinking")
    assert kinds(message.content, ThinkingBlock, TextBlock), message
    thought = message.content[0]
    assert "code_interpreter" in thought.thinking and thought.signature, thought
    assert message.content[1].text.strip() == "The result of 2+2 is **4**.", message.content[1]
    fact(thinking_signature=thought.signature)

    # The signed block goes back with the history; the model sees its reasoning again.
    follow = client.messages.create(
        model="thinking", max_tokens=4096, thinking={"type": "enabled", "budget_tokens": 2048},
        messages=[question, {"role": "assistant", "content": message.content}, user("And the capital of France?")])
    strict_message(wire.last_json(), "thinking follow-up")
    assert follow.content[-1].text == "Paris.", follow

    # A block whose text was changed, or a signature the gateway never made, is refused.
    forged_text = {"type": "thinking", "thinking": thought.thinking + " And 5.", "signature": thought.signature}
    foreign = {"type": "thinking", "thinking": thought.thinking, "signature": "EqQBCkYIARgCIkB" + "A" * 40}
    for forged in (forged_text, foreign):
        try:
            client.messages.create(
                model="thinking", max_tokens=4096, thinking={"type": "enabled", "budget_tokens": 2048},
                messages=[question, {"role": "assistant", "content": [forged, {"type": "text", "text": "4"}]},
                          user("And 3+3?")])
        except anthropic.BadRequestError as e:
            check_error_body(wire, e, "invalid_request_error", "forged thinking")
        else:
            raise AssertionError(f"a forged thinking block was accepted: {forged}")


def check_stream_text(client, wire):
    with client.messages.stream(model="stream", max_tokens=64, messages=[user("Capital of France?")]) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    events = strict_stream(wire.last_text(), "stream")
    assert text == "Paris.", text
    assert kinds(final.content, TextBlock) and final.content[0].text == "Paris.", final
    assert final.stop_reason == "end_turn" and final.id.startswith("msg_"), final
    deltas = [e["delta"]["type"] for e in events if e["type"] == "content_block_delta"]
    assert deltas and set(deltas) == {"text_delta"}, deltas
    last = events[-2]
    assert last["delta"]["stop_reason"] == "end_turn" and last["usage"]["output_tokens"] >= 0, last


def check_stream_error(client, wire):
    """The upstream fails mid-answer: the stream ends with an `error` event, which the SDK raises."""
    text = []
    try:
        with client.messages.stream(model="broken", max_tokens=64, messages=[user("Capital of France?")]) as stream:
            for chunk in stream.text_stream:
                text.append(chunk)
    except anthropic.APIStatusError as e:
        events = strict_stream(wire.last_text(), "broken", ends_with_error=True)
        assert e.body == events[-1], (e.body, events[-1])
        assert events[-1]["error"]["type"] in ("api_error", "overloaded_error"), events[-1]
        message = events[-1]["error"]["message"]
        assert message and not any(w in message for w in PARSER_WORDS), message
    else:
        raise AssertionError(f"a broken upstream stream ended normally: {text}")
    assert "".join(text) == "Par", text


def check_stream_thinking(client, wire):
    seen = []
    with client.messages.stream(model="stream-thinking", max_tokens=4096, messages=[user("What is 2+2?")],
                                thinking={"type": "enabled", "budget_tokens": 2048}) as stream:
        for event in stream:
            seen.append(event)
        final = stream.get_final_message()
    events = strict_stream(wire.last_text(), "stream-thinking")
    blocks = [e["content_block"]["type"] for e in events if e["type"] == "content_block_start"]
    assert blocks == ["thinking", "text"], blocks
    thinking = "".join(e.thinking for e in seen if e.type == "thinking")
    signatures = [e.signature for e in seen if e.type == "signature"]
    assert "code_interpreter" in thinking, thinking
    assert len(signatures) == 1 and signatures[0], signatures
    assert kinds(final.content, ThinkingBlock, TextBlock), final
    assert final.content[0].thinking == thinking and final.content[0].signature == signatures[0], final.content[0]
    assert final.content[1].text.strip() == "The result of 2+2 is **4**.", final.content[1]


def check_tool_loop(client, wire):
    question = user("What is the weather in Paris?")
    with client.messages.stream(model="tool", max_tokens=256, tools=[WEATHER_TOOL], tool_choice={"type": "any"},
                                messages=[question]) as stream:
        partial = "".join(e.partial_json for e in stream if e.type == "input_json")
        first = stream.get_final_message()
    events = strict_stream(wire.last_text(), "tool")
    assert events[-2]["delta"]["stop_reason"] == "tool_use", events[-2]
    assert first.stop_reason == "tool_use", first
    call = first.content[-1]
    assert isinstance(call, ToolUseBlock) and call.name == "get_weather" and call.input == {"city": "Paris"}, call
    assert call.id and json.loads(partial) == {"city": "Paris"}, (call, partial)
    fact(tool_use_id=call.id)

    answer = client.messages.create(
        model="tool", max_tokens=256, tools=[WEATHER_TOOL],
        messages=[question, {"role": "assistant", "content": first.content},
                  user([{"type": "tool_result", "tool_use_id": call.id,
                         "content": [{"type": "text", "text": "18°C and sunny"}]}])])
    strict_message(wire.last_json(), "tool answer")
    assert answer.stop_reason == "end_turn" and answer.content[-1].text == "Paris.", answer


def check_count_tokens(client, wire):
    count = client.messages.count_tokens(model="count", system="Be brief.", tools=[WEATHER_TOOL],
                                         messages=[user("What is the weather in Paris?")])
    strict(MessageTokensCount, wire.last_json(), "count_tokens")
    assert isinstance(count, MessageTokensCount) and count.input_tokens > 0, count
    fact(count_tokens=count.input_tokens)


def check_error_body(wire, error, kind, where):
    body = wire.last_json()
    strict(ErrorResponse, body, where)
    assert body["error"]["type"] == kind, body
    message = body["error"]["message"]
    assert message and not any(w in message for w in PARSER_WORDS), f"{where}: parser words in {message!r}"
    assert error.body == body, (error.body, body)
    return message


def check_errors(client, wire, base_url):
    try:
        client.messages.create(model="bad", max_tokens=64, messages=[user([{"type": "bogus", "text": "hi"}])])
    except anthropic.BadRequestError as e:
        assert e.status_code == 400, e
        message = check_error_body(wire, e, "invalid_request_error", "bad block")
        assert "bogus" in message, message
    else:
        raise AssertionError("an unknown content block type was accepted")

    # `max_tokens` is required: sent without it through the SDK's raw `post`.
    try:
        client.post("/v1/messages", cast_to=Message, body={"model": "bad", "messages": [user("hi")]})
    except anthropic.BadRequestError as e:
        message = check_error_body(wire, e, "invalid_request_error", "no max_tokens")
        assert "max_tokens" in message, message
    else:
        raise AssertionError("a request without max_tokens was accepted")

    # The model server does not know the model: its 404 in Anthropic's shape.
    try:
        client.messages.create(model="gone", max_tokens=64, messages=[user("hi")])
    except anthropic.NotFoundError as e:
        check_error_body(wire, e, "not_found_error", "unknown model")
    else:
        raise AssertionError("an upstream 404 was not a NotFoundError")

    wrong = anthropic.Anthropic(base_url=base_url, api_key="sk-wrong", max_retries=0,
                                http_client=httpx2.Client(transport=wire))
    try:
        wrong.messages.create(model="bad", max_tokens=64, messages=[user("hi")])
    except anthropic.AuthenticationError as e:
        assert e.status_code == 401, e
        check_error_body(wire, e, "authentication_error", "wrong key")
    else:
        raise AssertionError("a wrong API key was accepted")


def check_bearer_key_and_models(base_url, wire, key):
    bearer = anthropic.Anthropic(base_url=base_url, auth_token=key, max_retries=0,
                                 http_client=httpx2.Client(transport=wire))
    message = bearer.messages.create(model="plain", max_tokens=64, messages=[user("Capital of France?")])
    assert message.content[0].text == "Paris.", message

    page = bearer.models.list()
    body = wire.last_json()
    assert set(body) == {"data", "has_more", "first_id", "last_id"}, body
    models = [strict(ModelInfo, m, "models.list") for m in body["data"]]
    ids = {m.id for m in models}
    assert {"plain", "tool"} <= ids, ids
    assert {m.id for m in page.data} == ids


def main(base_url):
    key = os.environ["RESPGW_TEST_KEY"]
    wire = Wire()
    client = anthropic.Anthropic(base_url=base_url, api_key=key, max_retries=0, _strict_response_validation=True,
                                 http_client=httpx2.Client(transport=wire))
    check_plain(client, wire)
    check_system_and_sampling(client, wire)
    check_image(client, wire)
    check_documents(client, wire)
    check_stop_reasons(client, wire)
    check_thinking(client, wire)
    check_stream_text(client, wire)
    check_stream_error(client, wire)
    check_stream_thinking(client, wire)
    check_tool_loop(client, wire)
    check_count_tokens(client, wire)
    check_errors(client, wire, base_url)
    check_bearer_key_and_models(base_url, wire, key)
    print("anthropic sdk checks passed")


if __name__ == "__main__":
    main(sys.argv[1])
