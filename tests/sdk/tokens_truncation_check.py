"""Input token counts and truncation through the official `openai` Python SDK.

Run by tests/e2e/tokens_truncation.rs against a gateway in front of the replay upstream, which
counts with its toy tokenizer and enforces a context window the long conversation below does not
fit (its first turn dropped, it does). argv[1] is the gateway's base URL; the environment gives
EXPECTED_INPUT_TOKENS (the upstream's count of the short request) and WHOLE_CONVERSATION_TOKENS
(its count of the long one).
"""

import os
import sys

import openai
from openai import OpenAI
from openai.types.responses import (
    InputTokenCountResponse,
    Response,
    ResponseCompletedEvent,
)

LONG = "word " * 200
CONVERSATION = [
    {"role": "user", "content": "First: " + LONG},
    {"role": "assistant", "content": "ok"},
    {"role": "user", "content": "Second?"},
    {"role": "assistant", "content": "ok"},
    {"role": "user", "content": "Third?"},
]
DROPPED = {"dropped_turns": 1, "dropped_items": 2}


def main(base_url):
    client = OpenAI(base_url=base_url + "/v1", api_key="sk-test", max_retries=0)

    # The count parses into the SDK's type and is the upstream's own count.
    counted = client.responses.input_tokens.count(model="long", input="Hello, world!", instructions="Be brief.")
    assert isinstance(counted, InputTokenCountResponse), type(counted)
    assert counted.object == "response.input_tokens", counted
    assert counted.input_tokens == int(os.environ["EXPECTED_INPUT_TOKENS"]), counted
    whole = client.responses.input_tokens.count(model="long", input=CONVERSATION, truncation="auto")
    assert whole.input_tokens == int(os.environ["WHOLE_CONVERSATION_TOKENS"]), whole

    # Truncation disabled (the default): a 400 context_length_exceeded, never a 5xx.
    try:
        client.responses.create(model="long", input=CONVERSATION)
        raise AssertionError("an input over the context window was accepted")
    except openai.BadRequestError as e:
        assert e.status_code == 400 and e.code == "context_length_exceeded", e.body
        assert e.body["param"] == "input" and e.body["type"] == "invalid_request_error", e.body
    # Streamed: `response.failed` after the error event, which the SDK raises.
    seen = []
    try:
        for event in client.responses.create(model="long", input=CONVERSATION, stream=True):
            seen.append(event.type)
        raise AssertionError("the failed stream raised nothing")
    except openai.APIError as e:
        assert e.body["code"] == "context_length_exceeded", e.body
    assert seen == ["response.created", "response.in_progress"], seen

    # Truncation auto: the oldest turn goes, the response says so, retrieval too.
    r = client.responses.create(model="long", input=CONVERSATION, truncation="auto")
    assert isinstance(r, Response) and r.status == "completed", r
    assert r.output_text == "Fits now.", r.output_text
    assert r.truncation == "auto"
    assert r.truncation_details == DROPPED, r.model_extra
    got = client.responses.retrieve(r.id)
    assert got.truncation_details == DROPPED, got.model_extra

    events = list(client.responses.create(model="long", input=CONVERSATION, truncation="auto", stream=True))
    assert isinstance(events[-1], ResponseCompletedEvent), events[-1]
    assert events[-1].response.truncation_details == DROPPED, events[-1].response.model_extra
    print("openai SDK", openai.__version__, "token and truncation checks passed")


if __name__ == "__main__":
    main(sys.argv[1])
