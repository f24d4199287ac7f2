"""Conversations through the official `openai` Python SDK and the OpenAI Agents SDK.

Usage: conversations_check.py BASE_URL

Run by tests/e2e/conversations_sdk.rs against a gateway in front of the replay upstream. Every
body the gateway sends is parsed by the SDK's own models, strictly (`model_validate` on the raw
JSON as well as the SDK's lenient parse), so a field the SDK types differently fails here.
Scenarios (the replay upstream's model names): `conv` answers the `conversation=` turns,
`session` the Agents SDK's session runs, `conv-run` the Agents SDK's `conversation_id` runs.
Prints one JSON line with what the Rust test compares against the upstream's request log.
"""

import asyncio
import json
import os
import sys

os.environ["OPENAI_AGENTS_DISABLE_TRACING"] = "1"

import openai  # noqa: E402
from agents import Agent, OpenAIConversationsSession, OpenAIResponsesModel, Runner, set_tracing_disabled  # noqa: E402
from openai import AsyncOpenAI, OpenAI  # noqa: E402
from openai.types.conversations import (  # noqa: E402
    Conversation,
    ConversationDeletedResource,
    ConversationItem,
    ConversationItemList,
)
from openai.types.responses import Response  # noqa: E402
from pydantic import TypeAdapter  # noqa: E402

set_tracing_disabled(True)

ITEM = TypeAdapter(ConversationItem)


def strict(model, raw):
    """Parse a raw JSON body with the SDK's model, failing on any type mismatch."""
    if isinstance(model, TypeAdapter):
        return model.validate_python(raw, strict=False)
    return model.model_validate(raw)


def raw_json(response):
    return json.loads(response.text)


def sdk_checks(client):
    # Create with items and metadata; every body parses strictly.
    raw = client.conversations.with_raw_response.create(
        items=[{"type": "message", "role": "user", "content": "Remember: the code is 42."}],
        metadata={"project": "sdk"},
    )
    conv = strict(Conversation, raw_json(raw))
    assert conv.id.startswith("conv_") and conv.metadata == {"project": "sdk"}, conv
    assert client.conversations.retrieve(conv.id) == conv

    updated = client.conversations.update(conv.id, metadata={"project": "sdk", "stage": "2"})
    assert updated.metadata == {"project": "sdk", "stage": "2"}, updated

    raw = client.conversations.items.with_raw_response.create(
        conv.id, items=[{"type": "message", "role": "user", "content": "And the colour is blue."}]
    )
    added = strict(ConversationItemList, raw_json(raw))
    assert len(added.data) == 1 and added.first_id == added.data[0].id, added

    raw = client.conversations.items.with_raw_response.list(conv.id, order="asc", limit=1)
    page = strict(ConversationItemList, raw_json(raw))
    assert page.has_more and len(page.data) == 1, page
    items = list(client.conversations.items.list(conv.id, order="asc", limit=1))
    assert [i.id for i in items][:1] == [page.data[0].id] and len(items) == 2, items
    for item in items:
        strict(ITEM, item.model_dump())
    one = client.conversations.items.retrieve(items[1].id, conversation_id=conv.id)
    assert one.id == items[1].id and one.type == "message", one

    # conversation= on create, twice, then streamed: each turn sees the ones before.
    first = client.responses.create(model="conv", input="What is the code?", conversation=conv.id)
    strict(Response, first.model_dump())
    assert first.conversation is not None and first.conversation.id == conv.id, first
    second = client.responses.create(model="conv", input="And the colour?", conversation={"id": conv.id})
    assert second.output_text, second
    with client.responses.stream(model="conv", input="Summarise.", conversation=conv.id) as stream:
        for _ in stream:
            pass
        third = stream.get_final_response()
    assert third.conversation.id == conv.id, third

    listed = list(client.conversations.items.list(conv.id, order="asc"))
    texts = [c.text for i in listed if i.type == "message" for c in i.content if hasattr(c, "text")]
    assert texts[:4] == [
        "Remember: the code is 42.", "And the colour is blue.", "What is the code?", first.output_text
    ], texts
    assert len(listed) == 8, [i.type for i in listed]

    # Errors come back as the SDK's typed exceptions, in the error shape.
    try:
        client.responses.create(model="conv", input="x", conversation="conv_missing")
        raise AssertionError("an unknown conversation was accepted")
    except openai.NotFoundError as e:
        assert e.body["code"] == "conversation_not_found", e.body
    try:
        client.responses.create(model="conv", input="x", conversation=conv.id, previous_response_id=first.id)
        raise AssertionError("conversation with previous_response_id was accepted")
    except openai.BadRequestError as e:
        assert e.body["param"] == "conversation", e.body
    try:
        client.conversations.create(metadata={f"k{i}": "v" for i in range(17)})
        raise AssertionError("17 metadata pairs were accepted")
    except openai.BadRequestError as e:
        assert e.body["param"] == "metadata", e.body

    deleted_item = client.conversations.items.delete(items[1].id, conversation_id=conv.id)
    strict(Conversation, deleted_item.model_dump())
    raw = client.conversations.with_raw_response.delete(conv.id)
    deleted = strict(ConversationDeletedResource, raw_json(raw))
    assert deleted.deleted and deleted.id == conv.id, deleted
    try:
        client.conversations.retrieve(conv.id)
        raise AssertionError("a deleted conversation was found")
    except openai.NotFoundError:
        pass
    # Its responses stay.
    assert client.responses.retrieve(third.id).conversation.id == conv.id
    return {"conversation_turns": [first.output_text, second.output_text, third.output_text]}


async def agents_checks(base_url):
    client = AsyncOpenAI(base_url=f"{base_url}/v1", api_key="respgw-test", max_retries=0)

    def agent(model):
        return Agent(
            name="memory",
            instructions="Answer briefly.",
            model=OpenAIResponsesModel(model=model, openai_client=client),
        )

    # A session kept in a gateway conversation: the SDK reads and writes its items itself.
    session = OpenAIConversationsSession(openai_client=client)
    first = await Runner.run(agent("session"), "My name is Ada.", session=session)
    second = await Runner.run(agent("session"), "What is my name?", session=session)
    session_id = await session._get_session_id()
    stored = await session.get_items()
    popped = await session.pop_item()
    after_pop = await session.get_items()
    assert len(after_pop) == len(stored) - 1, (stored, after_pop)
    await session.clear_session()

    # A run bound to a conversation with `conversation_id`: the gateway keeps the history.
    conv = await client.conversations.create()
    third = await Runner.run(agent("conv-run"), "My name is Grace.", conversation_id=conv.id)
    fourth = await Runner.run(agent("conv-run"), "What is my name?", conversation_id=conv.id)
    items = [i async for i in client.conversations.items.list(conv.id, order="asc")]
    return {
        "session_id": session_id,
        "session_outputs": [first.final_output, second.final_output],
        "session_items": len(stored),
        "popped_type": popped.get("type") if isinstance(popped, dict) else None,
        "conversation_run_outputs": [third.final_output, fourth.final_output],
        "conversation_run_items": len(items),
    }


def main(base_url):
    client = OpenAI(base_url=base_url + "/v1", api_key="sk-test", max_retries=0)
    report = sdk_checks(client)
    report.update(asyncio.run(agents_checks(base_url)))
    print(json.dumps(report))
    print("checks passed")


if __name__ == "__main__":
    main(sys.argv[1])
