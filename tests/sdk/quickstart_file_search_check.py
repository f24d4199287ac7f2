"""The README's file-search walk-through against scripts/quickstart's set-up, with the official SDK.

Usage: quickstart_file_search_check.py BASE_URL

Run by tests/e2e/quickstart_model.rs against `respgw integrated` serving SmolLM2-135M-Instruct
(RESPGW_MODEL) with all-MiniLM-L6-v2 on a second llama-server as its embedder. Uploads three small
files into a vector store, waits until they are indexed, and searches with questions that share no
word with the file that answers them (so only the embeddings can find it); then answers a question
from the file the search found, and sends the `file_search` tool to the model. Every body is parsed
by the SDK's own models. Prints one JSON line with what it saw.
"""

import json
import sys

from openai import OpenAI
from openai.types import VectorStore, VectorStoreSearchResponse
from openai.types.responses import Response
from openai.types.vector_stores import VectorStoreFile

MODEL = "SmolLM2-135M-Instruct"
FILES = {
    "router.md": b"# Office network\n\nTo restart the wifi router, hold the reset button on its back for ten "
    b"seconds until the light blinks blue.\n",
    "dog.txt": b"Biscuit, the office golden retriever, naps under the reception desk every afternoon.\n",
    "revenue.txt": b"Quarterly revenue rose eleven percent, driven by subscriptions sold in Europe.\n",
}
# Each question shares no word with the file that answers it.
QUESTIONS = {
    "How can I reboot my internet box?": "router.md",
    "Is there a puppy at work?": "dog.txt",
    "Did company earnings grow?": "revenue.txt",
}


def main() -> None:
    client = OpenAI(base_url=sys.argv[1] + "/v1", api_key="unused-without-auth", max_retries=0)
    report = {}

    store = client.vector_stores.create(name="handbook")
    VectorStore.model_validate(store.model_dump())
    file_ids = {}
    for name, text in FILES.items():
        indexed = client.vector_stores.files.upload_and_poll(
            vector_store_id=store.id, file=(name, text), poll_interval_ms=200
        )
        VectorStoreFile.model_validate(indexed.model_dump())
        assert indexed.status == "completed", indexed
        file_ids[name] = indexed.id
    store = client.vector_stores.retrieve(store.id)
    assert store.status == "completed" and store.file_counts.completed == len(FILES), store

    report["top"] = {}
    for question, expected in QUESTIONS.items():
        page = client.vector_stores.search(store.id, query=question)
        results = list(page)
        for result in results:
            VectorStoreSearchResponse.model_validate(result.model_dump())
        assert results, question
        report["top"][question] = [(r.filename, round(r.score, 3)) for r in results]
        assert results[0].filename == expected, (question, report["top"][question])
        assert results[0].file_id == file_ids[expected], (results[0], file_ids)

    # A question answered from the file the search found (the 135M model cannot call tools, so the
    # found text goes into the input, as the README shows).
    found = client.vector_stores.search(store.id, query="How can I reboot my internet box?").data[0]
    context = "\n".join(part.text for part in found.content)
    answer = client.responses.create(
        model=MODEL,
        instructions="Answer from this document:\n" + context,
        input="How long do I hold the reset button?",
        max_output_tokens=24,
        temperature=0,
    )
    Response.model_validate(answer.model_dump())
    assert answer.status in ("completed", "incomplete") and answer.output_text.strip(), answer
    report["answer"] = answer.output_text

    # The file_search tool is accepted with the real model server (whether the model calls it is
    # its own business).
    with_tool = client.responses.create(
        model=MODEL,
        input="How long do I hold the reset button?",
        tools=[{"type": "file_search", "vector_store_ids": [store.id]}],
        max_output_tokens=24,
        temperature=0,
    )
    Response.model_validate(with_tool.model_dump())
    assert with_tool.status in ("completed", "incomplete"), with_tool
    report["tool_answer_items"] = [item.type for item in with_tool.output]

    print(json.dumps(report))


if __name__ == "__main__":
    main()
