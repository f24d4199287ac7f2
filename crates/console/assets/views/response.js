// One response: what it was (model, tenant, status, times), its chain along
// `previous_response_id` (links both ways), its usage, one row per upstream round (latency, tokens,
// time in tools), and a timeline of the request's own input items followed by its output items.

import { facts, formatDuration, formatNumber, formatTime, h, jsonBlock, link, statusBadge, table } from "../dom.js";
import { timeline } from "../items.js";

const responseLink = (id, attributes = {}) => link(`#/responses/${encodeURIComponent(id)}`, id, { class: "mono", ...attributes });

function chainNav(chain, id) {
  const previous = chain.previous || [];
  const next = chain.next || [];
  return h(
    "div",
    { class: "panel" },
    h("h2", null, "Chain"),
    h(
      "div",
      { class: "chain", "data-testid": "chain-previous" },
      h("span", { class: "muted" }, "Earlier: "),
      previous.length ? previous.flatMap((p, i) => [i ? " → " : null, responseLink(p)]) : h("span", { class: "muted" }, "none (this response starts the chain)"),
    ),
    h("div", { class: "chain" }, h("span", { class: "muted" }, "This: "), h("strong", { class: "mono" }, id)),
    h(
      "div",
      { class: "chain", "data-testid": "chain-next" },
      h("span", { class: "muted" }, "Continued by: "),
      next.length ? next.flatMap((n, i) => [i ? ", " : null, responseLink(n)]) : h("span", { class: "muted" }, "none"),
    ),
  );
}

function usagePanel(usage) {
  if (!usage) return h("div", { class: "panel", "data-testid": "usage" }, h("h2", null, "Usage"), h("p", { class: "empty" }, "No usage recorded."));
  return h(
    "div",
    { class: "panel", "data-testid": "usage" },
    h("h2", null, "Usage"),
    facts([
      ["input tokens", formatNumber(usage.input_tokens)],
      ["cached", usage.input_tokens_details ? formatNumber(usage.input_tokens_details.cached_tokens) : null],
      ["output tokens", formatNumber(usage.output_tokens)],
      ["reasoning", usage.output_tokens_details ? formatNumber(usage.output_tokens_details.reasoning_tokens) : null],
      ["total tokens", formatNumber(usage.total_tokens)],
    ]),
  );
}

function roundsTable(rounds) {
  return table(
    [
      { label: "Round", class: "num", cell: (r) => String(r.index) },
      { label: "Started at", class: "num", cell: (r) => formatDuration(r.started_ms) },
      { label: "First chunk", class: "num", cell: (r) => formatDuration(r.first_chunk_ms) },
      { label: "Duration", class: "num", cell: (r) => formatDuration(r.duration_ms) },
      { label: "Input tokens", class: "num", cell: (r) => formatNumber(r.input_tokens) },
      { label: "Output tokens", class: "num", cell: (r) => formatNumber(r.output_tokens) },
      { label: "Tools", class: "num", cell: (r) => formatDuration(r.tools_ms) },
      { label: "Items", cell: (r) => h("span", { class: "mono" }, (r.item_ids || []).join(", ")) },
    ],
    rounds.map((r, i) => ({ ...r, index: i + 1 })),
    { testid: "rounds", caption: "Upstream rounds", empty: "No rounds recorded for this response." },
  );
}

function header(detail) {
  const r = detail.response;
  const conversationId = r.conversation && (typeof r.conversation === "string" ? r.conversation : r.conversation.id);
  return h(
    "div",
    { class: "panel" },
    h("div", { class: "view-header" }, h("h1", { class: "mono" }, r.id), statusBadge(r.status)),
    facts([
      ["tenant", detail.tenant],
      ["model", h("span", { class: "mono" }, r.model)],
      ["created", formatTime(r.created_at)],
      ["completed", r.completed_at ? formatTime(r.completed_at) : null],
      ["background", r.background ? link(`#/background/${encodeURIComponent(r.id)}`, "yes: see the run", { "data-testid": "background-link" }) : null],
      ["previous response", r.previous_response_id ? responseLink(r.previous_response_id, { "data-testid": "previous-response" }) : null],
      ["conversation", conversationId ? link(`#/conversations/${encodeURIComponent(conversationId)}`, conversationId, { class: "mono", "data-testid": "conversation-link" }) : null],
      ["instructions", typeof r.instructions === "string" && r.instructions ? h("div", { class: "text" }, r.instructions) : null],
      ["tools", Array.isArray(r.tools) && r.tools.length ? r.tools.map((t) => t.name || t.server_label || t.type).join(", ") : null],
      ["error", r.error ? `${r.error.code || "error"}: ${r.error.message}` : null],
      ["incomplete", r.incomplete_details ? r.incomplete_details.reason : null],
    ]),
  );
}

export async function render(root, params, ctx) {
  const detail = await ctx.api.response(params.id, ctx.signal);
  const r = detail.response;
  ctx.setTitle(r.id);
  const inputItems = detail.input_items || [];
  const output = r.output || [];
  root.append(
    h(
      "section",
      { "data-testid": "response-detail", "data-id": r.id },
      header(detail),
      h("div", { class: "cards" }, chainNav(detail.chain || {}, r.id), usagePanel(r.usage)),
      roundsTable(detail.rounds || []),
      h("h2", null, "Input"),
      detail.inherited_items
        ? h(
            "p",
            { class: "muted", "data-testid": "inherited-items" },
            `${formatNumber(detail.inherited_items)} earlier item(s) came from the history`,
            r.previous_response_id ? [" (see ", responseLink(r.previous_response_id), ")"] : "",
            ".",
          )
        : null,
      inputItems.length ? timeline(inputItems, "input-items") : h("p", { class: "empty" }, "No input items."),
      h("h2", null, "Output"),
      output.length ? timeline(output, "output-items") : h("p", { class: "empty" }, "No output items."),
      h("details", null, h("summary", null, "The stored response as JSON"), jsonBlock(r)),
    ),
  );
}
