"""Drive respgw with the official `openai` Python SDK, streaming and not.

Run by tests/openai_sdk.rs against a gateway in front of the replay upstream; argv[1] is the
gateway's base URL. Every check asserts on the SDK's typed objects, so a field the SDK cannot
parse, or an event it does not recognise, fails here.
"""

import sys

import openai
from openai import OpenAI
from openai.types.responses import (
    Response,
    ResponseCompletedEvent,
    ResponseContentPartAddedEvent,
    ResponseContentPartDoneEvent,
    ResponseCreatedEvent,
    ResponseErrorEvent,
    ResponseFailedEvent,
    ResponseFunctionCallArgumentsDeltaEvent,
    ResponseFunctionCallArgumentsDoneEvent,
    ResponseFunctionToolCall,
    ResponseIncompleteEvent,
    ResponseInProgressEvent,
    ResponseOutputItemAddedEvent,
    ResponseOutputItemDoneEvent,
    ResponseOutputMessage,
    ResponseReasoningItem,
    ResponseTextDeltaEvent,
    ResponseTextDoneEvent,
)

# Event types the Open Responses schema defines but this SDK version names differently
# (`response.reasoning.delta` vs the SDK's `response.reasoning_text.delta`); the SDK still
# delivers them, as loosely typed objects, and the test checks their fields by name.
SCHEMA_ONLY_EVENTS = {"response.reasoning.delta", "response.reasoning.done"}

TYPED = {
    "response.created": ResponseCreatedEvent,
    "response.in_progress": ResponseInProgressEvent,
    "response.output_item.added": ResponseOutputItemAddedEvent,
    "response.output_item.done": ResponseOutputItemDoneEvent,
    "response.content_part.added": ResponseContentPartAddedEvent,
    "response.content_part.done": ResponseContentPartDoneEvent,
    "response.output_text.delta": ResponseTextDeltaEvent,
    "response.output_text.done": ResponseTextDoneEvent,
    "response.function_call_arguments.delta": ResponseFunctionCallArgumentsDeltaEvent,
    "response.function_call_arguments.done": ResponseFunctionCallArgumentsDoneEvent,
    "response.completed": ResponseCompletedEvent,
    "response.incomplete": ResponseIncompleteEvent,
    "response.failed": ResponseFailedEvent,
    "error": ResponseErrorEvent,
}


def check_events(stream):
    events = list(stream)
    for e in events:
        if e.type in SCHEMA_ONLY_EVENTS:
            assert e.item_id and isinstance(e.sequence_number, int), e
            continue
        expected = TYPED.get(e.type)
        assert expected is not None, f"unexpected event type {e.type}"
        assert isinstance(e, expected), f"{e.type} parsed as {type(e).__name__}"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    return events


def main(base_url):
    client = OpenAI(base_url=base_url + "/v1", api_key="sk-test", max_retries=0)

    # Non-stream text, then retrieval and a continuation.
    r = client.responses.create(model="text", input="What is the capital of France?", instructions="Be brief.")
    assert isinstance(r, Response) and r.status == "completed", r
    assert r.output_text == "Paris.", r.output_text
    assert isinstance(r.output[0], ResponseOutputMessage)
    assert r.usage is not None and r.usage.input_tokens_details.cached_tokens == 0
    got = client.responses.retrieve(r.id)
    assert got.id == r.id and got.output_text == "Paris."
    follow = client.responses.create(model="text", input="And Germany?", previous_response_id=r.id)
    assert follow.previous_response_id == r.id and follow.instructions is None
    items = client.responses.input_items.list(follow.id)
    assert [i.type for i in items.data] == ["message"], items

    # Streamed text.
    events = check_events(client.responses.create(model="text", input="capital?", stream=True))
    assert isinstance(events[-1], ResponseCompletedEvent)
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == "Paris."

    # Streamed reasoning + text.
    events = check_events(client.responses.create(model="reasoning", input="2+2?", stream=True))
    final = events[-1].response
    assert isinstance(final.output[0], ResponseReasoningItem), final.output[0]
    assert final.output[0].content[0].text.startswith("The code_interpreter tool")
    assert final.usage.output_tokens == 56

    # A client function call, non-stream and stream.
    tools = [{"type": "function", "name": "code_interpreter", "description": "Run Python",
              "parameters": {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]}}]
    r = client.responses.create(model="tool", input="compute 2+2", tools=tools, tool_choice="required")
    calls = [o for o in r.output if o.type == "function_call"]
    assert len(calls) == 1 and isinstance(calls[0], ResponseFunctionToolCall), r.output
    assert calls[0].call_id == "call_369c3680bcf04639839f7036" and calls[0].name == "code_interpreter"
    events = check_events(client.responses.create(model="tool", input="compute 2+2", tools=tools, stream=True))
    done = [e for e in events if isinstance(e, ResponseFunctionCallArgumentsDoneEvent)]
    assert len(done) == 1 and '"code"' in done[0].arguments

    # The SDK's helper that accumulates a stream into a final response.
    with client.responses.stream(model="text", input="capital?") as stream:
        for _ in stream:
            pass
        final = stream.get_final_response()
    assert final.output_text == "Paris."

    # Incomplete.
    r = client.responses.create(model="cut", input="long", max_output_tokens=16)
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"

    # An upstream failure while streaming. The SDK turns the `error` event into an APIError,
    # exactly as it does for the reference API (whose error event also nests `error`).
    seen = []
    try:
        for e in client.responses.create(model="gone", input="x", stream=True):
            seen.append(e.type)
        raise AssertionError("the failed stream raised nothing")
    except openai.APIError as e:
        assert "does not exist" in e.message, e.message
        assert e.body["code"] == "404", e.body
    assert seen == ["response.created", "response.in_progress"], seen

    # Errors surface as the SDK's typed exceptions with the spec's fields.
    try:
        client.responses.create(model="text", input="x", temperature=3)
        raise AssertionError("temperature=3 was accepted")
    except openai.BadRequestError as e:
        assert e.status_code == 400 and e.body["param"] == "temperature", e.body
    try:
        client.responses.retrieve("resp_missing")
        raise AssertionError("missing response was found")
    except openai.NotFoundError as e:
        assert e.body["code"] == "response_not_found", e.body

    deleted = client.responses.delete(follow.id)
    assert deleted is None or getattr(deleted, "deleted", True)
    try:
        client.responses.retrieve(follow.id)
        raise AssertionError("deleted response still retrievable")
    except openai.NotFoundError:
        pass
    print("openai SDK", openai.__version__, "checks passed")


if __name__ == "__main__":
    main(sys.argv[1])
