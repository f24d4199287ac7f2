"""The OpenAI Agents SDK's hosted MCP tool with an approval callback, against respgw.

Usage: agents_mcp_approvals_check.py BASE_URL

One agent with a `HostedMCPTool` for the gateway's Built-in MCP server `local` (every call needs
approval) and an `on_approval_request` callback that approves `echo` and rejects `add` with a
reason. The model (the replay upstream, scenario `agents-approvals`) calls both at once, then
answers. Runs it twice: `Runner.run` (the SDK replays the items as input, store=False), and
`Runner.run_streamed`. Prints one JSON line per run with the callback's calls and the SDK's
items; the Rust test checks those against what the gateway, the MCP server and the upstream saw.
Tracing export is off: nothing leaves loopback.
"""

import asyncio
import json
import os
import sys

os.environ["OPENAI_AGENTS_DISABLE_TRACING"] = "1"

from agents import Agent, HostedMCPTool, ModelSettings, OpenAIResponsesModel, Runner, set_tracing_disabled  # noqa: E402
from openai import AsyncOpenAI  # noqa: E402

set_tracing_disabled(True)

asked = []


def on_approval_request(request):
    data = request.data
    asked.append({"id": data.id, "server_label": data.server_label, "name": data.name,
                  "arguments": json.loads(data.arguments)})
    if data.name == "echo":
        return {"approve": True}
    return {"approve": False, "reason": "adding is not allowed"}


def agent(client, model):
    tool = HostedMCPTool(
        tool_config={"type": "mcp", "server_label": "local", "require_approval": "always"},
        on_approval_request=on_approval_request,
    )
    return Agent(
        name="files",
        instructions="Answer briefly.",
        tools=[tool],
        model=OpenAIResponsesModel(model=model, openai_client=client),
        model_settings=ModelSettings(store=False),
    )


def report(mode, result):
    items = [{"type": item.type, "raw": getattr(item.raw_item, "type", None)
              if not isinstance(item.raw_item, dict) else item.raw_item.get("type")}
             for item in result.new_items]
    print(json.dumps({"mode": mode, "final_output": result.final_output, "asked": list(asked), "items": items}))


async def main(base_url):
    client = AsyncOpenAI(base_url=f"{base_url}/v1", api_key="respgw-test", max_retries=0)

    result = await Runner.run(agent(client, "agents-approvals"), "Echo hi and add 2 and 3.")
    report("run", result)

    asked.clear()
    streamed = Runner.run_streamed(agent(client, "agents-approvals-stream"), "Echo hi and add 2 and 3.")
    async for _ in streamed.stream_events():
        pass
    report("stream", streamed)
    print("agents approvals checked")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
