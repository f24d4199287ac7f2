"""The OpenAI Agents SDK (openai-agents, pinned in requirements.txt) against respgw.

Usage: agents_sdk_check.py BASE_URL

Runs one agent with a function tool in four modes, each on its own model name (the replay
upstream's scenario): `Runner.run` with the default `store`, `Runner.run_streamed` with
`store=False`, a second run chained with `previous_response_id`, and a second run fed with
`to_input_list()` of the first (store=False, so the gateway has nothing stored to lean on).
Prints one JSON line per mode with what the SDK produced; the Rust test compares those with
what the gateway and the upstream saw. Tracing export is off: nothing leaves loopback.
"""

import asyncio
import json
import os
import sys

os.environ["OPENAI_AGENTS_DISABLE_TRACING"] = "1"

from agents import Agent, ModelSettings, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled  # noqa: E402
from openai import AsyncOpenAI  # noqa: E402

set_tracing_disabled(True)

calls = []


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    calls.append(city)
    return f"sunny in {city}"


def agent(client, model, store=None):
    settings = ModelSettings(store=store) if store is not None else ModelSettings()
    return Agent(
        name="weather",
        instructions="Answer briefly.",
        tools=[get_weather],
        model=OpenAIResponsesModel(model=model, openai_client=client),
        model_settings=settings,
    )


def report(mode, result, **extra):
    print(json.dumps({"mode": mode, "final_output": result.final_output,
                      "last_response_id": result.last_response_id, **extra}))


async def main(base_url):
    client = AsyncOpenAI(base_url=f"{base_url}/v1", api_key="respgw-test", max_retries=0)

    result = await Runner.run(agent(client, "agents-run"), "Weather in Paris?")
    report("run", result, tool_calls=list(calls))

    calls.clear()
    streamed = Runner.run_streamed(agent(client, "agents-stream", store=False), "Weather in Paris?")
    kinds = []
    async for event in streamed.stream_events():
        if event.type == "raw_response_event":
            kinds.append(event.data.type)
    report("stream", streamed, tool_calls=list(calls), event_types=sorted(set(kinds)))

    calls.clear()
    chained = agent(client, "agents-chain")
    first = await Runner.run(chained, "Weather in Paris?")
    second = await Runner.run(chained, "And tomorrow?", previous_response_id=first.last_response_id)
    report("chain", second, first_output=first.final_output, tool_calls=list(calls))

    calls.clear()
    replayed = agent(client, "agents-replay", store=False)
    first = await Runner.run(replayed, "Weather in Paris?")
    history = first.to_input_list()
    second = await Runner.run(replayed, history + [{"role": "user", "content": "And tomorrow?"}])
    report("replay", second, first_output=first.final_output, tool_calls=list(calls),
           replayed_types=[item.get("type", "<none>") for item in history])
    print("agents checks passed")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
