"""Drive respgw's file_search with the official `openai` Python SDK.

Run by tests/e2e/file_search.rs against a gateway in front of the replay upstream (which scripts
the model: a `file_search` call, then an answer citing `[1]`); argv[1] is the gateway's base URL.
Uploads two files with `vector_stores.files.upload_and_poll`, then asks with `responses.create`:
with `include: ["file_search_call.results"]` (results present), without (results `None`),
streamed (every event typed by the SDK, in order, with the citation's annotation event), and a
continuation through `previous_response_id`. Every check asserts on the SDK's typed objects.
"""

import io
import sys

from openai import OpenAI
from openai.types.responses import (
    Response,
    ResponseCompletedEvent,
    ResponseContentPartAddedEvent,
    ResponseContentPartDoneEvent,
    ResponseCreatedEvent,
    ResponseFileSearchCallCompletedEvent,
    ResponseFileSearchCallInProgressEvent,
    ResponseFileSearchCallSearchingEvent,
    ResponseFileSearchToolCall,
    ResponseInProgressEvent,
    ResponseOutputItemAddedEvent,
    ResponseOutputItemDoneEvent,
    ResponseOutputMessage,
    ResponseOutputTextAnnotationAddedEvent,
    ResponseTextDeltaEvent,
    ResponseTextDoneEvent,
)
from openai.types.responses.response_output_text import AnnotationFileCitation

HANDBOOK = b"Vacation policy. Every employee gets 25 vacation days per year. Unused vacation days carry over."
PRICING = b"Pricing. The basic plan costs 5 euros per month and the team plan 12 euros per seat."

TYPED = {
    "response.created": ResponseCreatedEvent,
    "response.in_progress": ResponseInProgressEvent,
    "response.output_item.added": ResponseOutputItemAddedEvent,
    "response.output_item.done": ResponseOutputItemDoneEvent,
    "response.file_search_call.in_progress": ResponseFileSearchCallInProgressEvent,
    "response.file_search_call.searching": ResponseFileSearchCallSearchingEvent,
    "response.file_search_call.completed": ResponseFileSearchCallCompletedEvent,
    "response.content_part.added": ResponseContentPartAddedEvent,
    "response.content_part.done": ResponseContentPartDoneEvent,
    "response.output_text.delta": ResponseTextDeltaEvent,
    "response.output_text.annotation.added": ResponseOutputTextAnnotationAddedEvent,
    "response.output_text.done": ResponseTextDoneEvent,
    "response.completed": ResponseCompletedEvent,
}


def answer_of(response):
    message = response.output[1]
    assert isinstance(message, ResponseOutputMessage), response.output
    return message.content[0]


def main(base_url):
    client = OpenAI(base_url=base_url + "/v1", api_key="sk-test", max_retries=0)

    store = client.vector_stores.create(name="docs")
    files = {}
    for name, data in [("handbook.md", HANDBOOK), ("pricing.md", PRICING)]:
        done = client.vector_stores.files.upload_and_poll(
            vector_store_id=store.id, file=(name, io.BytesIO(data)), poll_interval_ms=50
        )
        assert done.status == "completed", done
        files[name] = done.id
    tool = {"type": "file_search", "vector_store_ids": [store.id]}

    # With include: the results, typed by the SDK, and a citation of the handbook.
    r = client.responses.create(
        model="sdk-include", input="How many vacation days?", tools=[tool], include=["file_search_call.results"]
    )
    assert isinstance(r, Response) and r.status == "completed", r
    call = r.output[0]
    assert isinstance(call, ResponseFileSearchToolCall), call
    assert call.status == "completed" and call.queries == ["vacation days"], call
    assert call.results and call.results[0].file_id == files["handbook.md"], call.results
    assert call.results[0].filename == "handbook.md" and "25 vacation days" in call.results[0].text
    assert 0 <= call.results[0].score <= 1
    text = answer_of(r)
    citation = text.annotations[0]
    assert isinstance(citation, AnnotationFileCitation), text.annotations
    assert citation.file_id == files["handbook.md"] and citation.filename == "handbook.md", citation
    assert text.text[citation.index] == "[", (text.text, citation.index)

    # A continuation: the SDK reads the new answer, cited again.
    follow = client.responses.create(
        model="sdk-include", input="Do they carry over?", previous_response_id=r.id, tools=[tool]
    )
    assert follow.output_text == "Up to 5 carry over [1].", follow.output_text
    assert follow.output[0].content[0].annotations[0].file_id == files["handbook.md"]

    # Without include: no results.
    plain = client.responses.create(model="sdk-plain", input="How many vacation days?", tools=[tool])
    assert isinstance(plain.output[0], ResponseFileSearchToolCall) and plain.output[0].results is None, plain.output
    got = client.responses.retrieve(plain.id)
    assert got.output[0].results is None and got.output[0].queries == ["vacation days"], got.output

    # Streamed: every event typed, numbered in order, the search's events then the annotation.
    events = list(client.responses.create(model="sdk-stream", input="Vacation?", tools=[tool], stream=True))
    assert [e.sequence_number for e in events] == list(range(len(events)))
    for e in events:
        expected = TYPED.get(e.type)
        assert expected is not None and isinstance(e, expected), f"{e.type} parsed as {type(e).__name__}"
    kinds = [e.type for e in events]
    searching = [k for k in kinds if k.startswith("response.file_search_call.")]
    assert searching == [
        "response.file_search_call.in_progress",
        "response.file_search_call.searching",
        "response.file_search_call.completed",
    ], kinds
    added = [e for e in events if e.type == "response.output_text.annotation.added"]
    assert len(added) == 1 and added[0].annotation.type == "file_citation", added
    assert kinds.index("response.output_text.annotation.added") < kinds.index("response.output_text.done")
    final = events[-1].response
    assert final.output[1].content[0].annotations[0].filename == "handbook.md"

    print("file_search checks passed")


if __name__ == "__main__":
    main(sys.argv[1])
