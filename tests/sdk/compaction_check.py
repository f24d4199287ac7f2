"""Drive respgw's compaction with the official `openai` Python SDK.

Run by tests/e2e/compaction.rs against a gateway in front of the replay upstream (scenario
`cmp`, five scripted replies, in the order of the calls below); argv[1] is the gateway's base
URL. Replies are checked twice: as the SDK's client parses them, and strictly, with the SDK's
pydantic models validating the raw JSON (`model_validate`), so a field the SDK would reject
fails here.

The SDK types `CompactedResponse.output` as `ResponseOutputItem`, whose message is assistant-only;
the compacted window's user messages are validated as `ResponseInputMessageItem` instead (the
type of a user message the reference API returns as an item).
"""

import sys

import openai
from openai import OpenAI
from openai.types.responses import (
    CompactedResponse,
    Response,
    ResponseCompactionCompactingEvent,
    ResponseCompactionItem,
    ResponseCompletedEvent,
    ResponseInputMessageItem,
    ResponseOutputItemAddedEvent,
    ResponseOutputItemDoneEvent,
    ResponseStreamEvent,
    ResponseUsage,
)
from pydantic import TypeAdapter

COMPACTION_KEYS = {"type", "id", "encrypted_content", "created_by"}


def check_compacted(raw_body, parsed, user_texts):
    """The compacted window: these user messages, then one compaction item."""
    assert isinstance(parsed, CompactedResponse), type(parsed)
    assert parsed.object == "response.compaction" and parsed.id.startswith("resp_"), parsed
    envelope = {key: value for key, value in raw_body.items() if key != "output"}
    CompactedResponse.model_validate({**envelope, "output": []})
    ResponseUsage.model_validate(envelope["usage"])
    *users, compaction = raw_body["output"]
    assert [u["content"][0]["text"] for u in users] == user_texts, users
    for user in users:
        item = ResponseInputMessageItem.model_validate(user)
        assert item.role == "user", item
    ResponseCompactionItem.model_validate(compaction)
    assert set(compaction) <= COMPACTION_KEYS, f"keys a client must not see: {set(compaction) - COMPACTION_KEYS}"
    typed = parsed.output[-1]
    assert isinstance(typed, ResponseCompactionItem), type(typed)
    assert typed.encrypted_content.startswith("rgw2c.") and typed.id.startswith("cmp_"), typed
    return typed


def tampered(blob):
    middle = len(blob) - 10
    return blob[:middle] + ("B" if blob[middle] == "A" else "A") + blob[middle + 1 :]


def main(base_url):
    client = OpenAI(base_url=base_url + "/v1", api_key="sk-test", max_retries=0)

    # A stored first turn, then the compaction of it plus new input.
    first = client.responses.create(model="cmp", input="Plan a trip to Rome.")
    assert isinstance(first, Response) and first.output_text == "Day 1: the Colosseum.", first
    raw = client.responses.with_raw_response.compact(
        model="cmp",
        previous_response_id=first.id,
        input=[{"role": "user", "content": "Add Florence."}],
    )
    compacted = raw.parse()
    item = check_compacted(raw.http_response.json(), compacted, ["Plan a trip to Rome.", "Add Florence."])
    assert (compacted.usage.input_tokens, compacted.usage.output_tokens) == (30, 7), compacted.usage
    assert compacted.usage.total_tokens == 37, compacted.usage

    # Continue statelessly from the window, as the Agents SDK and the AI SDK do.
    window = [*compacted.output, {"role": "user", "content": "Which city first?"}]
    follow = client.responses.create(model="cmp", input=window, store=False)
    assert isinstance(follow, Response) and follow.output_text == "Rome first.", follow
    Response.model_validate(follow.to_dict())

    # A tampered blob is refused, naming the item; nothing reaches the model.
    bad = [*compacted.output[:-1], {"type": "compaction", "encrypted_content": tampered(item.encrypted_content)}]
    try:
        client.responses.create(model="cmp", input=bad, store=False)
        raise AssertionError("a tampered compaction blob was accepted")
    except openai.BadRequestError as e:
        assert e.param == f"input[{len(bad) - 1}].encrypted_content", (e.param, e.body)
        assert e.code == "invalid_encrypted_content", e.code
    try:
        client.responses.compact(model="cmp", input=[{"type": "compaction", "encrypted_content": "rgw2c.x.AAAA"}])
        raise AssertionError("a forged compaction blob was accepted")
    except openai.BadRequestError as e:
        assert e.param == "input[0].encrypted_content", (e.param, e.body)
    try:
        client.responses.compact(model="cmp", previous_response_id="resp_missing")
        raise AssertionError("an unknown previous_response_id was accepted")
    except openai.BadRequestError as e:
        assert e.code == "previous_response_not_found", (e.code, e.body)

    # Automatic compaction over SSE: the item is announced, compacting, done; then the answer.
    stream = client.responses.create(
        model="cmp",
        input="Please answer this long question. " * 20,
        context_management=[{"type": "compaction", "compact_threshold": 50}],
        stream=True,
        store=False,
    )
    events = list(stream)
    assert [e.sequence_number for e in events] == list(range(len(events)))
    adapter = TypeAdapter(ResponseStreamEvent)
    for e in events:
        adapter.validate_python(e.to_dict())
    added, compacting, done = events[2:5]
    assert isinstance(added, ResponseOutputItemAddedEvent) and isinstance(added.item, ResponseCompactionItem), added
    assert isinstance(compacting, ResponseCompactionCompactingEvent), compacting
    assert compacting.item_id == added.item.id and compacting.output_index == 0, compacting
    assert isinstance(done, ResponseOutputItemDoneEvent) and isinstance(done.item, ResponseCompactionItem), done
    assert done.item.encrypted_content.startswith("rgw2c."), done.item
    completed = events[-1]
    assert isinstance(completed, ResponseCompletedEvent), completed
    response = completed.response
    assert isinstance(response.output[0], ResponseCompactionItem), response.output
    assert response.output_text == "Short answer.", response.output_text
    assert (response.usage.input_tokens, response.usage.output_tokens) == (215, 9), response.usage

    print("compaction checks passed")


if __name__ == "__main__":
    main(sys.argv[1])
