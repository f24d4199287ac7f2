// Responses: the stored responses (and background runs), newest first, with filters — tenant
// (admins), model, status, a time range, text in the request's input — kept in the route's query
// so a filtered page can be linked and the back button works. Paged with "Newer"/"Older".

import { clip, formatDuration, formatNumber, formatTime, h, link, statusBadge, table } from "../dom.js";
import { cursor, pager } from "../pager.js";

const STATUSES = ["completed", "incomplete", "failed", "cancelled", "queued", "in_progress"];
const FILTERS = ["tenant", "model", "status", "since", "until", "q"];

/** A `datetime-local` value ("2026-11-28T14:03") for unix seconds, in local time. */
function toLocalInput(unixSeconds) {
  if (!unixSeconds) return "";
  const d = new Date(Number(unixSeconds) * 1000);
  if (Number.isNaN(d.getTime())) return "";
  const pad = (n) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}`;
}

function fromLocalInput(value) {
  if (!value) return "";
  const ms = new Date(value).getTime();
  return Number.isNaN(ms) ? "" : String(Math.floor(ms / 1000));
}

function field(id, label, control) {
  return h("div", { class: "field" }, h("label", { for: id }, label), control);
}

function filterForm(query, session, navigate) {
  const value = (name) => query.get(name) || "";
  const controls = {
    model: h("input", { id: "filter-model", name: "model", type: "text", value: value("model"), placeholder: "any", size: 14 }),
    status: h(
      "select",
      { id: "filter-status", name: "status" },
      h("option", { value: "" }, "any"),
      STATUSES.map((s) => h("option", { value: s, selected: s === value("status") }, s)),
    ),
    since: h("input", { id: "filter-since", name: "since", type: "datetime-local", value: toLocalInput(value("since")) }),
    until: h("input", { id: "filter-until", name: "until", type: "datetime-local", value: toLocalInput(value("until")) }),
    q: h("input", { id: "filter-q", name: "q", type: "search", value: value("q"), maxlength: 200, placeholder: "text in the input" }),
  };
  if (session.admin) {
    controls.tenant = h(
      "select",
      { id: "filter-tenant", name: "tenant" },
      h("option", { value: "" }, "all tenants"),
      (session.tenants || []).map((t) => h("option", { value: t, selected: t === value("tenant") }, t)),
    );
  }
  const form = h(
    "form",
    {
      class: "toolbar",
      "data-testid": "response-filters",
      role: "search",
      on: {
        submit: (event) => {
          event.preventDefault();
          const next = new URLSearchParams();
          for (const name of FILTERS) {
            const control = controls[name];
            if (!control) continue;
            let v = control.value.trim();
            if (name === "since" || name === "until") v = fromLocalInput(v);
            if (name === "until" && v) v = String(Number(v) + 59); // the whole chosen minute
            if (v) next.set(name, v);
          }
          const text = next.toString();
          navigate(`#/responses${text ? `?${text}` : ""}`);
        },
      },
    },
    controls.tenant ? field("filter-tenant", "Tenant", controls.tenant) : null,
    field("filter-model", "Model", controls.model),
    field("filter-status", "Status", controls.status),
    field("filter-since", "Since", controls.since),
    field("filter-until", "Until", controls.until),
    field("filter-q", "Input contains", controls.q),
    h("button", { type: "submit", "data-testid": "filter-apply" }, "Apply"),
    h(
      "button",
      { type: "button", class: "secondary", "data-testid": "filter-clear", on: { click: () => navigate("#/responses") } },
      "Clear",
    ),
  );
  return form;
}

export async function render(root, params, ctx) {
  const { query } = params;
  const filters = { after: cursor(query) };
  for (const name of FILTERS) if (query.get(name)) filters[name] = query.get(name);
  const section = h(
    "section",
    { "data-testid": "responses" },
    h("div", { class: "view-header" }, h("h1", null, "Responses")),
    filterForm(query, ctx.session, ctx.navigate),
  );
  root.append(section);
  const page = await ctx.api.responses(filters, ctx.signal);
  const columns = [
    { label: "Created", class: "nowrap", cell: (r) => formatTime(r.created_at) },
    { label: "Response", class: "nowrap", cell: (r) => link(`#/responses/${encodeURIComponent(r.id)}`, r.id, { class: "mono", "data-testid": "response-link" }) },
    ctx.session.admin ? { label: "Tenant", cell: (r) => r.tenant } : null,
    { label: "Model", cell: (r) => h("span", { class: "mono" }, r.model) },
    { label: "Status", cell: (r) => [statusBadge(r.status), r.background ? h("span", { class: "muted" }, " background") : null] },
    { label: "Input", class: "preview", cell: (r) => clip(r.input_preview, 120) },
    { label: "Output", class: "preview", cell: (r) => clip(r.output_preview, 120) },
    { label: "Tools", class: "num", cell: (r) => formatNumber(r.tool_calls) },
    { label: "Tokens", class: "num", cell: (r) => (r.usage ? formatNumber(r.usage.total_tokens) : "—") },
    { label: "Time", class: "num", cell: (r) => formatDuration(r.duration_ms) },
  ].filter(Boolean);
  section.append(
    table(columns, page.data, {
      testid: "responses-table",
      empty: filters.after ? "No older responses." : "No responses match.",
      rowAttributes: (r) => ({ "data-testid": "response-row", "data-id": r.id }),
    }),
    pager(page, "responses", query, ctx.navigate),
  );
}
