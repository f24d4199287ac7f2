"""Drive respgw's background responses with the official `openai` Python SDK.

Run by tests/e2e/background.rs against a gateway with two workers in front of the replay
upstream (scenarios `quick`, `slow`, `endless`); argv[1] is the gateway's base URL. Every check
asserts on the SDK's typed objects: create with `background=True`, poll with `retrieve`, resume
with `retrieve(stream=True, starting_after=N)`, cancel with `cancel`.

Two SDK clients are used, each keeping its connection alive (so each stays on one worker): one
creates, the other — checked to be on the other worker, by the `x-respgw-worker-pid` reply
header — polls, resumes and cancels.
"""

import sys
import time

import openai
from openai import OpenAI
from openai.types.responses import (
    Response,
    ResponseCompletedEvent,
    ResponseContentPartAddedEvent,
    ResponseContentPartDoneEvent,
    ResponseCreatedEvent,
    ResponseFailedEvent,
    ResponseInProgressEvent,
    ResponseOutputItemAddedEvent,
    ResponseOutputItemDoneEvent,
    ResponseQueuedEvent,
    ResponseTextDeltaEvent,
    ResponseTextDoneEvent,
)

TYPED = {
    "response.created": ResponseCreatedEvent,
    "response.queued": ResponseQueuedEvent,
    "response.in_progress": ResponseInProgressEvent,
    "response.output_item.added": ResponseOutputItemAddedEvent,
    "response.output_item.done": ResponseOutputItemDoneEvent,
    "response.content_part.added": ResponseContentPartAddedEvent,
    "response.content_part.done": ResponseContentPartDoneEvent,
    "response.output_text.delta": ResponseTextDeltaEvent,
    "response.output_text.done": ResponseTextDoneEvent,
    "response.completed": ResponseCompletedEvent,
    "response.failed": ResponseFailedEvent,
}

PATIENCE_S = 30


def typed(event):
    expected = TYPED.get(event.type)
    assert expected is not None, f"unexpected event type {event.type}"
    assert isinstance(event, expected), f"{event.type} parsed as {type(event).__name__}"
    return event


WORKER = "x-respgw-worker-pid"


def new_client(base_url):
    return OpenAI(base_url=base_url + "/v1", api_key="sk-test", max_retries=0)


def other_worker_client(base_url, response_id, not_pid):
    """An SDK client whose kept-alive connection is on a worker other than `not_pid`."""
    for _ in range(100):
        client = new_client(base_url)
        raw = client.responses.with_raw_response.retrieve(response_id)
        if raw.headers[WORKER] != not_pid:
            return client
        client.close()
    raise AssertionError(f"no connection reached a worker other than {not_pid}")


def poll(client, response_id, status, not_pid):
    deadline = time.monotonic() + PATIENCE_S
    while True:
        raw = client.responses.with_raw_response.retrieve(response_id)
        assert raw.headers[WORKER] != not_pid, "the poll reached the worker running the response"
        r = raw.parse()
        assert isinstance(r, Response) and r.background is True, r
        if r.status == status:
            return r
        assert time.monotonic() < deadline, f"{response_id} never became {status}: {r.status}"
        time.sleep(0.05)


def main(base_url):
    creator = new_client(base_url)

    # Create on one worker, then poll to completed from the other.
    raw = creator.responses.with_raw_response.create(model="quick", input="Capital of France?", background=True)
    owner = raw.headers[WORKER]
    r = raw.parse()
    assert isinstance(r, Response) and r.background is True and r.status in ("queued", "in_progress"), r
    other = other_worker_client(base_url, r.id, owner)
    done = poll(other, r.id, "completed", owner)
    assert done.output_text == "Paris is the capital.", done.output_text

    # Stream, leave after a few events, resume after the last one seen (on the other worker).
    stream = creator.responses.create(model="slow", input="x", background=True, stream=True)
    owner = stream.response.headers[WORKER]
    seen = []
    for event in stream:
        seen.append(typed(event))
        if event.type == "response.output_text.delta" and len(seen) >= 8:
            break
    stream.close()
    assert seen[0].type == "response.created" and seen[0].response.status == "queued"
    assert seen[1].type == "response.queued"
    response_id = seen[0].response.id
    other = other_worker_client(base_url, response_id, owner)
    resumed = other.responses.retrieve(response_id, stream=True, starting_after=seen[-1].sequence_number)
    assert resumed.response.headers[WORKER] != owner
    joined = seen + [typed(e) for e in resumed]
    assert [e.sequence_number for e in joined] == list(range(len(joined))), [e.sequence_number for e in joined]
    assert joined[-1].type == "response.completed", joined[-1].type
    whole = [typed(e) for e in other.responses.retrieve(response_id, stream=True)]
    assert [e.model_dump() for e in whole] == [e.model_dump() for e in joined]
    text = "".join(e.delta for e in joined if e.type == "response.output_text.delta")
    assert joined[-1].response.output_text == text

    # Cancel mid-run from the other worker; again (the same answer); then its stream ends with
    # the cancelled response.
    raw = creator.responses.with_raw_response.create(model="endless", input="x", background=True)
    owner = raw.headers[WORKER]
    r = raw.parse()
    other = other_worker_client(base_url, r.id, owner)
    poll(other, r.id, "in_progress", owner)
    raw = other.responses.with_raw_response.cancel(r.id)
    assert raw.headers[WORKER] != owner
    cancelled = raw.parse()
    assert isinstance(cancelled, Response) and cancelled.status == "cancelled", cancelled
    assert other.responses.cancel(r.id).status == "cancelled"
    events = [typed(e) for e in other.responses.retrieve(r.id, stream=True)]
    assert events[-1].type == "response.failed" and events[-1].response.status == "cancelled"

    # A finished response cannot be cancelled.
    try:
        other.responses.cancel(done.id)
        raise AssertionError("cancelling a completed response succeeded")
    except openai.BadRequestError as e:
        assert e.status_code == 400
    print("background checks passed")


if __name__ == "__main__":
    main(sys.argv[1])
