// Files and vector stores: the uploaded files (purpose filter; tenant for admins), the vector
// stores, and one vector store's files with their ingestion status — each list newest first and
// paged. Routes `#/files` (this module's `render`), `#/vector_stores` (`vectorStoresView`) and
// `#/vector_stores/<id>` (`vectorStoreView`).
//
// Test hooks: [data-testid=files] (list), #files-tenant, #files-purpose, rows
// [data-testid=file-row][data-id=file-…]; [data-testid=vector-stores], rows
// [data-testid=vector-store-row][data-id=vs_…]; [data-testid=vector-store-detail][data-id=…], rows
// [data-testid=vector-store-file-row].

import { formatNumber, formatTime, h, jsonBlock, link, statusBadge, table } from "../dom.js";
import { pager } from "../pager.js";
import { listFilters, queryFilters } from "./list-filters.js";

const PURPOSES = ["assistants", "user_data"];

/** 1536 → "1.5 KiB". */
function formatBytes(bytes) {
  if (bytes === null || bytes === undefined) return "—";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return `${unit ? value.toFixed(1) : value} ${units[unit]}`;
}

const mono = (text) => h("span", { class: "mono" }, text);

export async function render(root, params, ctx) {
  const { query } = params;
  const filters = queryFilters(query, ["tenant", "purpose"]);
  const section = h(
    "section",
    { "data-testid": "files" },
    h("div", { class: "view-header" }, h("h1", null, "Files"), link("#/vector_stores", "Vector stores", { class: "muted" })),
    listFilters("files", query, ctx, "files", [{ name: "purpose", label: "Purpose", options: PURPOSES }]),
  );
  root.append(section);
  const page = await ctx.api.files(filters, ctx.signal);
  const columns = [
    { label: "Created", class: "nowrap", cell: (f) => formatTime(f.created_at) },
    { label: "File", class: "nowrap", cell: (f) => mono(f.id) },
    ctx.session.admin ? { label: "Tenant", cell: (f) => f.tenant } : null,
    { label: "Name", cell: (f) => f.filename },
    { label: "Purpose", cell: (f) => f.purpose },
    { label: "Size", class: "num", cell: (f) => formatBytes(f.bytes) },
    { label: "Status", cell: (f) => (f.status ? statusBadge(f.status) : "—") },
  ].filter(Boolean);
  section.append(
    table(columns, page.data, {
      testid: "files-table",
      empty: filters.after ? "No older files." : "No files.",
      rowAttributes: (f) => ({ "data-testid": "file-row", "data-id": f.id }),
    }),
    pager(page, "files", query, ctx.navigate),
  );
}

async function renderVectorStores(root, params, ctx) {
  const { query } = params;
  const filters = queryFilters(query, ["tenant"]);
  const section = h(
    "section",
    { "data-testid": "vector-stores" },
    h("div", { class: "view-header" }, h("h1", null, "Vector stores"), link("#/files", "Files", { class: "muted" })),
    listFilters("vector_stores", query, ctx, "vector-stores"),
  );
  root.append(section);
  const page = await ctx.api.vectorStores(filters, ctx.signal);
  const counts = (c) => (c ? `${formatNumber(c.completed)} of ${formatNumber(c.total)}${c.failed ? ` (${formatNumber(c.failed)} failed)` : ""}` : "—");
  const columns = [
    { label: "Created", class: "nowrap", cell: (v) => formatTime(v.created_at) },
    {
      label: "Vector store",
      class: "nowrap",
      cell: (v) => link(`#/vector_stores/${encodeURIComponent(v.id)}`, v.id, { class: "mono", "data-testid": "vector-store-link" }),
    },
    ctx.session.admin ? { label: "Tenant", cell: (v) => v.tenant } : null,
    { label: "Name", cell: (v) => v.name || h("span", { class: "muted" }, "—") },
    { label: "Status", cell: (v) => statusBadge(v.status) },
    { label: "Files ready", class: "num", cell: (v) => counts(v.file_counts) },
    { label: "Size", class: "num", cell: (v) => formatBytes(v.usage_bytes) },
  ].filter(Boolean);
  section.append(
    table(columns, page.data, {
      testid: "vector-stores-table",
      empty: filters.after ? "No older vector stores." : "No vector stores.",
      rowAttributes: (v) => ({ "data-testid": "vector-store-row", "data-id": v.id }),
    }),
    pager(page, "vector_stores", query, ctx.navigate),
  );
}

async function renderVectorStore(root, params, ctx) {
  const { id, query } = params;
  ctx.setTitle(id);
  const path = `vector_stores/${encodeURIComponent(id)}`;
  const section = h(
    "section",
    { "data-testid": "vector-store-detail", "data-id": id },
    h("div", { class: "view-header" }, h("h1", { class: "mono" }, id), link("#/vector_stores", "All vector stores", { class: "muted" })),
  );
  root.append(section);
  const page = await ctx.api.vectorStoreFiles(id, queryFilters(query, []), ctx.signal);
  const columns = [
    { label: "Added", class: "nowrap", cell: (f) => formatTime(f.created_at) },
    { label: "File", class: "nowrap", cell: (f) => mono(f.id) },
    { label: "Status", cell: (f) => statusBadge(f.status) },
    { label: "Size", class: "num", cell: (f) => formatBytes(f.usage_bytes) },
    { label: "Error", cell: (f) => (f.last_error ? `${f.last_error.code}: ${f.last_error.message}` : "—") },
    {
      label: "Attributes",
      cell: (f) => (f.attributes && Object.keys(f.attributes).length ? jsonBlock(f.attributes) : h("span", { class: "muted" }, "—")),
    },
  ];
  section.append(
    table(columns, page.data, {
      testid: "vector-store-files-table",
      empty: query.get("after") ? "No more files." : "This vector store has no files.",
      rowAttributes: (f) => ({ "data-testid": "vector-store-file-row", "data-id": f.id }),
    }),
    pager(page, path, query, ctx.navigate),
  );
}

export const vectorStoresView = { render: renderVectorStores };
export const vectorStoreView = { render: renderVectorStore };
