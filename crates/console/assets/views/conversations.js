// Conversations: the list (newest first; tenant filter for admins; paged) and one conversation's
// items as a timeline, oldest first by default (`order=desc` in the route's query turns it round),
// paged like every list. Routes `#/conversations` and `#/conversations/<id>`.
//
// Test hooks: [data-testid=conversations] (list), #conversations-tenant (admins), rows
// [data-testid=conversation-row][data-id=conv_…]; [data-testid=conversation-detail][data-id=…] with
// the timeline [data-testid=conversation-items] and [data-testid=items-order].

import { formatNumber, formatTime, h, link, table } from "../dom.js";
import { timeline } from "../items.js";
import { cursor, pager } from "../pager.js";
import { listFilters, queryFilters } from "./list-filters.js";

const conversationLink = (id, attributes = {}) =>
  link(`#/conversations/${encodeURIComponent(id)}`, id, { class: "mono", ...attributes });

function metadataCell(metadata) {
  const entries = Object.entries(metadata || {});
  if (!entries.length) return h("span", { class: "muted" }, "—");
  return h("span", { class: "mono" }, entries.map(([k, v]) => `${k}=${v}`).join(", "));
}

async function renderList(root, query, ctx) {
  const filters = queryFilters(query, ["tenant"]);
  const section = h(
    "section",
    { "data-testid": "conversations" },
    h("div", { class: "view-header" }, h("h1", null, "Conversations")),
    listFilters("conversations", query, ctx, "conversations"),
  );
  root.append(section);
  const page = await ctx.api.conversations(filters, ctx.signal);
  const columns = [
    { label: "Created", class: "nowrap", cell: (c) => formatTime(c.created_at) },
    { label: "Conversation", class: "nowrap", cell: (c) => conversationLink(c.id, { "data-testid": "conversation-link" }) },
    ctx.session.admin ? { label: "Tenant", cell: (c) => c.tenant } : null,
    { label: "Items", class: "num", cell: (c) => formatNumber(c.items) },
    { label: "Responses", class: "num", cell: (c) => formatNumber(c.responses) },
    { label: "Metadata", cell: (c) => metadataCell(c.metadata) },
  ].filter(Boolean);
  section.append(
    table(columns, page.data, {
      testid: "conversations-table",
      empty: filters.after ? "No older conversations." : "No conversations.",
      rowAttributes: (c) => ({ "data-testid": "conversation-row", "data-id": c.id }),
    }),
    pager(page, "conversations", query, ctx.navigate),
  );
}

async function renderConversation(root, id, query, ctx) {
  ctx.setTitle(id);
  const order = query.get("order") === "desc" ? "desc" : "asc";
  const path = `conversations/${encodeURIComponent(id)}`;
  const otherOrder = new URLSearchParams({ order: order === "asc" ? "desc" : "asc" });
  const section = h(
    "section",
    { "data-testid": "conversation-detail", "data-id": id },
    h(
      "div",
      { class: "view-header" },
      h("h1", { class: "mono" }, id),
      link("#/conversations", "All conversations", { class: "muted" }),
    ),
  );
  root.append(section);
  const page = await ctx.api.conversationItems(id, { after: cursor(query), order }, ctx.signal);
  section.append(
    h(
      "div",
      { class: "toolbar" },
      h("span", { class: "muted" }, order === "asc" ? "Oldest first. " : "Newest first. "),
      link(`#/${path}?${otherOrder}`, order === "asc" ? "Show newest first" : "Show oldest first", { "data-testid": "items-order" }),
    ),
    page.data.length
      ? timeline(page.data, "conversation-items")
      : h("p", { class: "empty", "data-testid": "conversation-items-empty" }, cursor(query) ? "No more items." : "This conversation has no items."),
    pager(page, path, query, ctx.navigate),
  );
}

export async function render(root, params, ctx) {
  if (params.id) await renderConversation(root, params.id, params.query, ctx);
  else await renderList(root, params.query, ctx);
}
