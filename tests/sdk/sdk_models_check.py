"""Parse what respgw sent with the official `openai` SDK's models (pinned in requirements.txt).

Usage: sdk_models_check.py < values.json

Reads a JSON array of `{"event": …}` (one stream event) and `{"response": …}` (a response object)
and validates with the SDK's pydantic models what the Open Responses schema does not define (MCP
items and events): each event (`ResponseStreamEvent`) except those carrying a whole response, and
each output item of a response (`ResponseOutputItem`) — the response objects themselves are the
schema's to check. Prints one JSON line per value with the model class of the event and of the
items in it, then "sdk models checked"; a value the SDK rejects is reported and the script exits
with status 1.
"""

import json
import sys

from openai.types.responses import ResponseOutputItem, ResponseStreamEvent
from pydantic import TypeAdapter, ValidationError

EVENT = TypeAdapter(ResponseStreamEvent)
OUTPUT_ITEM = TypeAdapter(ResponseOutputItem)


def item_classes(response):
    return [type(OUTPUT_ITEM.validate_python(item)).__name__ for item in response.get("output") or []]


def main():
    failed = False
    for value in json.load(sys.stdin):
        try:
            if "event" in value and "response" in value["event"]:
                event = value["event"]
                print(json.dumps({"event": event.get("type"), "items": item_classes(event["response"])}))
            elif "event" in value:
                event = EVENT.validate_python(value["event"])
                item = getattr(event, "item", None)
                print(json.dumps({"event": value["event"].get("type"), "model": type(event).__name__,
                                  "item": type(item).__name__ if item is not None else None}))
            else:
                print(json.dumps({"response": value["response"].get("id"),
                                  "items": item_classes(value["response"])}))
        except ValidationError as e:
            failed = True
            print(json.dumps({"rejected": value, "error": str(e)[:2000]}))
    if failed:
        sys.exit(1)
    print("sdk models checked")


if __name__ == "__main__":
    main()
