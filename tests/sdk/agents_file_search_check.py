"""The OpenAI Agents SDK's `FileSearchTool` against respgw.

Usage: agents_file_search_check.py BASE_URL

Uploads the price list into a vector store with the `openai` SDK, then runs an agent holding
`FileSearchTool(vector_store_ids=[…], include_search_results=True)` through `Runner.run` on the
replay upstream's `agents-fs` scenario (a `file_search` call, then an answer citing `[1]`). The
Rust test checks what the upstream was offered and told. Tracing export is off.
"""

import asyncio
import io
import os
import sys

os.environ["OPENAI_AGENTS_DISABLE_TRACING"] = "1"

from agents import Agent, FileSearchTool, OpenAIResponsesModel, Runner, set_tracing_disabled  # noqa: E402
from openai import AsyncOpenAI  # noqa: E402
from openai.types.responses import ResponseFileSearchToolCall  # noqa: E402

set_tracing_disabled(True)

PRICING = b"Pricing. The basic plan costs 5 euros per month and the team plan costs 12 euros per month per seat."


async def main(base_url):
    client = AsyncOpenAI(base_url=f"{base_url}/v1", api_key="respgw-test", max_retries=0)
    store = await client.vector_stores.create(name="prices")
    done = await client.vector_stores.files.upload_and_poll(
        vector_store_id=store.id, file=("pricing.md", io.BytesIO(PRICING)), poll_interval_ms=50
    )
    assert done.status == "completed", done

    agent = Agent(
        name="prices",
        instructions="Answer from the files.",
        tools=[FileSearchTool(vector_store_ids=[store.id], max_num_results=5, include_search_results=True)],
        model=OpenAIResponsesModel(model="agents-fs", openai_client=client),
    )
    result = await Runner.run(agent, "What does a team seat cost?")
    assert result.final_output == "12 euros per seat [1].", result.final_output
    calls = [item.raw_item for item in result.new_items if isinstance(item.raw_item, ResponseFileSearchToolCall)]
    assert len(calls) == 1 and calls[0].status == "completed", result.new_items
    assert calls[0].queries == ["seat price"], calls[0]
    assert calls[0].results and calls[0].results[0].filename == "pricing.md", calls[0].results
    print("agents file_search checks passed")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
