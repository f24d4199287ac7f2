"""Files and vector stores through the official `openai` Python SDK.

Usage: files_check.py BASE_URL

Run by tests/e2e/files_api.rs against a gateway started with two tenants (keys in RESPGW_ALPHA_KEY
and RESPGW_BETA_KEY), an upload limit of RESPGW_MAX_FILE_BYTES and an embedding model. Every body
the gateway sends is parsed strictly by the SDK's own models (`model_validate` on the raw JSON).
Prints one JSON line with what the Rust test compares against the store and the upstream's
request log.
"""

import json
import os
import sys

import openai
from openai import OpenAI
from openai.types import FileDeleted, FileObject, VectorStore, VectorStoreDeleted, VectorStoreSearchResponse
from openai.types.vector_stores import (
    FileContentResponse,
    VectorStoreFile,
    VectorStoreFileBatch,
    VectorStoreFileDeleted,
)

NOTES = b"""# Kitchen notes

Saffron rice needs a pinch of saffron soaked in warm water for ten minutes.
Store the saffron in a dark jar, away from heat.
"""
ATLAS = b"""# Atlas

The capital of Atlantis is Poseidonia, a city of bronze gates and harbours.
"""
GARDEN = b"""Tomatoes need six hours of sun a day and deep watering twice a week."""
PAGE = b"""<html><body><h1>Bees</h1><p>Honey bees dance to tell the hive where the flowers are.</p></body></html>"""
POLL_MS = 50


def strict(model, raw):
    """Parse a raw JSON body with the SDK's model, failing on any type mismatch."""
    return model.model_validate(raw)


def raw_json(response):
    return json.loads(response.text)


def expect_error(status, call, param=None, code=None):
    """`call` fails with `status`, in the gateway's error shape, naming `param`."""
    try:
        call()
    except openai.APIStatusError as e:
        assert e.status_code == status, (e.status_code, e.body)
        body = e.response.json()["error"]
        assert set(body) >= {"message", "type", "param", "code"} and body["message"], body
        if param is not None:
            assert body["param"] == param, (param, body)
        if code is not None:
            assert body["code"] == code, (code, body)
        return body
    raise AssertionError(f"expected a {status}")


def files_api(client, report):
    raw = client.files.with_raw_response.create(file=("notes.md", NOTES), purpose="assistants")
    notes = strict(FileObject, raw_json(raw))
    assert notes.id.startswith("file-") and notes.bytes == len(NOTES), notes
    assert notes.filename == "notes.md" and notes.purpose == "assistants" and notes.status == "processed", notes
    assert client.files.retrieve(notes.id) == notes

    data = client.files.create(file=("data.json", b'{"a": 1}'), purpose="user_data")
    listed = raw_json(client.files.with_raw_response.list(purpose="user_data"))
    assert [f["id"] for f in listed["data"]] == [data.id], listed
    for f in listed["data"]:
        strict(FileObject, f)
    everything = [f.id for f in client.files.list(limit=1)]
    assert set(everything) >= {notes.id, data.id}, everything

    content = client.files.content(notes.id)
    assert content.content == NOTES
    disposition = content.response.headers["content-disposition"]
    assert 'filename="notes.md"' in disposition, disposition
    assert content.response.headers["content-type"].startswith("text/markdown"), content.response.headers

    deleted = strict(FileDeleted, raw_json(client.files.with_raw_response.delete(data.id)))
    assert deleted.deleted and deleted.id == data.id, deleted
    expect_error(404, lambda: client.files.retrieve(data.id), code="not_found")
    report["notes"] = notes.id
    return notes


def vector_stores_api(client, notes, report):
    raw = client.vector_stores.with_raw_response.create(
        name="kitchen",
        file_ids=[notes.id],
        metadata={"team": "food"},
        expires_after={"anchor": "last_active_at", "days": 7},
        chunking_strategy={"type": "static", "static": {"max_chunk_size_tokens": 100, "chunk_overlap_tokens": 20}},
    )
    vs = strict(VectorStore, raw_json(raw))
    assert vs.id.startswith("vs_") and vs.name == "kitchen" and vs.metadata == {"team": "food"}, vs
    assert vs.expires_after.days == 7 and vs.expires_at is not None, vs
    assert vs.file_counts.total == 1, vs

    notes_file = client.vector_stores.files.poll(notes.id, vector_store_id=vs.id, poll_interval_ms=POLL_MS)
    assert notes_file.status == "completed", notes_file
    assert notes_file.chunking_strategy.static.max_chunk_size_tokens == 100, notes_file

    atlas = client.vector_stores.files.upload_and_poll(
        vector_store_id=vs.id,
        file=("atlas.md", ATLAS),
        attributes={"topic": "geography", "year": 2024},
        poll_interval_ms=POLL_MS,
    )
    strict(VectorStoreFile, atlas.model_dump())
    assert atlas.status == "completed" and atlas.attributes == {"topic": "geography", "year": 2024}, atlas
    assert atlas.usage_bytes > 0, atlas

    batch = client.vector_stores.file_batches.upload_and_poll(
        vs.id, files=[("garden.txt", GARDEN), ("bees.html", PAGE)], poll_interval_ms=POLL_MS
    )
    strict(VectorStoreFileBatch, batch.model_dump())
    assert batch.status == "completed" and batch.file_counts.completed == 2, batch
    batch_files = list(client.vector_stores.file_batches.list_files(batch.id, vector_store_id=vs.id))
    assert len(batch_files) == 2, batch_files

    # A batch of already uploaded files, each with its own attributes.
    extra = client.files.create(file=("extra.txt", b"Bronze gates open at dawn."), purpose="assistants")
    second = client.vector_stores.file_batches.create_and_poll(
        vs.id, files=[{"file_id": extra.id, "attributes": {"topic": "geography", "year": 1999}}], poll_interval_ms=POLL_MS
    )
    assert second.status == "completed" and second.file_counts.total == 1, second

    done = list(client.vector_stores.files.list(vs.id, filter="completed", limit=2))
    assert len(done) == 5, [f.id for f in done]
    page = raw_json(client.vector_stores.files.with_raw_response.list(vs.id, filter="failed"))
    assert page["data"] == [] and page["has_more"] is False, page

    updated = client.vector_stores.files.update(notes.id, vector_store_id=vs.id, attributes={"topic": "cooking"})
    assert updated.attributes == {"topic": "cooking"}, updated

    store = strict(VectorStore, raw_json(client.vector_stores.with_raw_response.retrieve(vs.id)))
    assert store.status == "completed" and store.file_counts.completed == 5 and store.usage_bytes > 0, store
    renamed = client.vector_stores.update(vs.id, name="pantry", expires_after=None)
    assert renamed.name == "pantry" and renamed.expires_after is None and renamed.expires_at is None, renamed
    assert vs.id in [v.id for v in client.vector_stores.list()]

    chunks = list(client.vector_stores.files.content(atlas.id, vector_store_id=vs.id))
    for c in chunks:
        strict(FileContentResponse, c.model_dump())
    assert "Poseidonia" in " ".join(c.text for c in chunks), chunks

    report["vector_store"] = vs.id
    report["atlas"] = atlas.id
    return vs, atlas


def search(client, vs, atlas, report):
    raw = raw_json(
        client.vector_stores.with_raw_response.search(
            vs.id, query=["capital of Atlantis", "bronze gates"], max_num_results=3, rewrite_query=True
        )
    )
    assert raw["object"] == "vector_store.search_results.page", raw
    assert raw["search_query"] == ["capital of Atlantis", "bronze gates"], raw
    results = [strict(VectorStoreSearchResponse, r) for r in raw["data"]]
    assert 1 <= len(results) <= 3, results
    assert results[0].file_id == atlas.id and results[0].filename == "atlas.md", results
    assert "Poseidonia" in results[0].content[0].text and 0 < results[0].score <= 1, results[0]
    assert results[0].attributes == {"topic": "geography", "year": 2024}, results[0]

    one = client.vector_stores.search(vs.id, query="saffron", max_num_results=1)
    assert [r.filename for r in one] == ["notes.md"], one

    geography = client.vector_stores.search(vs.id, query="bronze gates", filters={"type": "eq", "key": "topic", "value": "geography"})
    assert {r.filename for r in geography} <= {"atlas.md", "extra.txt"} and geography.data, geography
    recent = client.vector_stores.search(
        vs.id,
        query="bronze gates",
        filters={
            "type": "and",
            "filters": [
                {"type": "eq", "key": "topic", "value": "geography"},
                {"type": "gte", "key": "year", "value": 2000},
            ],
        },
    )
    assert [r.filename for r in recent] == ["atlas.md"], recent
    nothing = client.vector_stores.search(
        vs.id, query="saffron", filters={"type": "in", "key": "topic", "value": ["gardening"]}
    )
    assert nothing.data == [], nothing

    scores = [r.score for r in client.vector_stores.search(vs.id, query="bees flowers hive", max_num_results=10)]
    assert scores, scores
    strict_scores = client.vector_stores.search(
        vs.id, query="bees flowers hive", max_num_results=10, ranking_options={"score_threshold": max(scores)}
    )
    assert len(strict_scores.data) < len(scores) or len(scores) == 1, (scores, strict_scores)
    assert all(r.score >= max(scores) for r in strict_scores), strict_scores
    report["searches"] = 7


def other_tenant(beta, notes, vs):
    expect_error(404, lambda: beta.files.retrieve(notes.id), param="file_id")
    expect_error(404, lambda: beta.files.content(notes.id))
    expect_error(404, lambda: beta.files.delete(notes.id))
    expect_error(404, lambda: beta.vector_stores.retrieve(vs.id))
    expect_error(404, lambda: beta.vector_stores.search(vs.id, query="Poseidonia"))
    expect_error(404, lambda: beta.vector_stores.files.list(vs.id))
    expect_error(404, lambda: beta.vector_stores.create(name="x", file_ids=[notes.id]), param="file_ids[0]")
    assert [f.id for f in beta.files.list()] == [], "beta sees no file"
    assert [v.id for v in beta.vector_stores.list()] == [], "beta sees no vector store"


def bad_input(client, vs, notes, report):
    before_files = sorted(f.id for f in client.files.list())
    before_stores = sorted(v.id for v in client.vector_stores.list())
    expect_error(400, lambda: client.files.create(file=("a.md", b"x"), purpose="fine-tune"), param="purpose")
    expect_error(
        400,
        lambda: client.files.create(file=("a.zip", b"PK\x03\x04\x00\x00binary"), purpose="assistants"),
        param="file",
        code="unsupported_file",
    )
    expect_error(400, lambda: client.files.create(file=("empty.txt", b""), purpose="assistants"), param="file")
    limit = int(os.environ["RESPGW_MAX_FILE_BYTES"])
    expect_error(413, lambda: client.files.create(file=("big.txt", b"a" * (limit + 1)), purpose="assistants"), param="file")
    # The connection that carried the 413 was answered cleanly; the client goes on.
    assert client.files.retrieve(notes.id).id == notes.id

    expect_error(404, lambda: client.vector_stores.create(file_ids=[notes.id, "file-nope"]), param="file_ids[1]")
    expect_error(404, lambda: client.vector_stores.files.create(vs.id, file_id="file-nope"), param="file_id")
    expect_error(
        404,
        lambda: client.vector_stores.file_batches.create(vs.id, file_ids=[notes.id, "file-nope"]),
        param="file_ids[1]",
    )
    expect_error(404, lambda: client.vector_stores.retrieve("vs_nope"), code="not_found")
    expect_error(400, lambda: client.vector_stores.search(vs.id, query=""), param="query")
    expect_error(400, lambda: client.vector_stores.search(vs.id, query=["a", " "]), param="query[1]")
    expect_error(
        400,
        lambda: client.vector_stores.search(
            vs.id, query="a", filters={"type": "and", "filters": [{"type": "eq", "key": "k", "value": 1}, {"type": "xor"}]}
        ),
        param="filters.filters[1].type",
    )
    expect_error(400, lambda: client.vector_stores.search(vs.id, query="a", max_num_results=51), param="max_num_results")
    expect_error(
        400,
        lambda: client.vector_stores.create(
            file_ids=[notes.id],
            chunking_strategy={"type": "static", "static": {"max_chunk_size_tokens": 100, "chunk_overlap_tokens": 60}},
        ),
        param="chunking_strategy.static.chunk_overlap_tokens",
    )
    expect_error(
        400,
        lambda: client.vector_stores.files.update(notes.id, vector_store_id=vs.id, attributes={"k": {"nested": 1}}),
        param="attributes.k",
    )
    assert sorted(f.id for f in client.files.list()) == before_files, "no file half-stored"
    assert sorted(v.id for v in client.vector_stores.list()) == before_stores, "no vector store half-stored"
    report["bad_input"] = "ok"


def deletion(client, vs, notes):
    removed = strict(
        VectorStoreFileDeleted, raw_json(client.vector_stores.files.with_raw_response.delete(notes.id, vector_store_id=vs.id))
    )
    assert removed.deleted and removed.id == notes.id, removed
    assert client.files.retrieve(notes.id).id == notes.id, "the uploaded file stays"
    assert all(r.filename != "notes.md" for r in client.vector_stores.search(vs.id, query="saffron"))
    gone = strict(VectorStoreDeleted, raw_json(client.vector_stores.with_raw_response.delete(vs.id)))
    assert gone.deleted and gone.id == vs.id, gone
    expect_error(404, lambda: client.vector_stores.retrieve(vs.id))


def main():
    base = sys.argv[1].rstrip("/") + "/v1"
    alpha = OpenAI(base_url=base, api_key=os.environ["RESPGW_ALPHA_KEY"], max_retries=0)
    beta = OpenAI(base_url=base, api_key=os.environ["RESPGW_BETA_KEY"], max_retries=0)
    report = {}
    notes = files_api(alpha, report)
    vs, atlas = vector_stores_api(alpha, notes, report)
    search(alpha, vs, atlas, report)
    other_tenant(beta, notes, vs)
    bad_input(alpha, vs, notes, report)
    deletion(alpha, vs, notes)
    print(json.dumps(report))
    print("files checks passed")


if __name__ == "__main__":
    main()
