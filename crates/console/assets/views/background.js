// Background runs: the list (status, tenant for admins; newest first, paged) and one run. A run
// still queued or in progress gets a live view: its events are polled from
// `/v1/console/background/<id>/events` every second (from the last sequence number seen), the
// output text grows as deltas arrive, and when the run ends its final state is loaded again.
// Admins get a cancel button for a running run. Routes `#/background` and `#/background/<id>`.
//
// Test hooks: [data-testid=background-runs] (list), #background-tenant, #background-status, rows
// [data-testid=background-row][data-id=resp_…]; [data-testid=background-detail][data-id=…]
// [data-status=<status>], [data-testid=live-view] with [data-testid=live-output|live-count|
// live-state|live-events], [data-testid=cancel-run] (admins, running runs only).

import { errorBox, facts, formatNumber, formatTime, h, link, replace, statusBadge, table } from "../dom.js";
import { timeline } from "../items.js";
import { pager } from "../pager.js";
import { listFilters, queryFilters } from "./list-filters.js";

const STATUSES = ["queued", "in_progress", "completed", "failed", "cancelled", "incomplete"];
const RUNNING = new Set(["queued", "in_progress"]);
const POLL_MS = 1000;
/** The live view keeps the types of this many latest events on screen. */
const EVENTS_SHOWN = 30;

const runLink = (id, attributes = {}) => link(`#/background/${encodeURIComponent(id)}`, id, { class: "mono", ...attributes });

async function renderList(root, query, ctx) {
  const filters = queryFilters(query, ["tenant", "status"]);
  const section = h(
    "section",
    { "data-testid": "background-runs" },
    h("div", { class: "view-header" }, h("h1", null, "Background runs")),
    listFilters("background", query, ctx, "background", [{ name: "status", label: "Status", options: STATUSES }]),
  );
  root.append(section);
  const page = await ctx.api.backgroundRuns(filters, ctx.signal);
  const columns = [
    { label: "Created", class: "nowrap", cell: (r) => formatTime(r.created_at) },
    { label: "Run", class: "nowrap", cell: (r) => runLink(r.id, { "data-testid": "background-link" }) },
    ctx.session.admin ? { label: "Tenant", cell: (r) => r.tenant } : null,
    { label: "Model", cell: (r) => h("span", { class: "mono" }, r.model) },
    { label: "Status", cell: (r) => statusBadge(r.status) },
    { label: "Ended", class: "nowrap", cell: (r) => (r.ended_at ? formatTime(r.ended_at) : "—") },
    { label: "Events", class: "num", cell: (r) => formatNumber(r.events) },
  ].filter(Boolean);
  section.append(
    table(columns, page.data, {
      testid: "background-table",
      empty: filters.after ? "No older runs." : "No background runs match.",
      rowAttributes: (r) => ({ "data-testid": "background-row", "data-id": r.id }),
    }),
    pager(page, "background", query, ctx.navigate),
  );
}

/** The facts about a run and, once it has ended, its output as a timeline. */
function runSummary(run) {
  const response = run.response || {};
  return [
    facts(
      [
        ["status", statusBadge(run.status)],
        ["tenant", run.tenant],
        ["model", h("span", { class: "mono" }, run.model)],
        ["created", formatTime(run.created_at)],
        ["ended", run.ended_at ? formatTime(run.ended_at) : null],
        ["events logged", formatNumber(run.events)],
        ["error", response.error && response.error.message ? response.error.message : null],
        ["stored response", RUNNING.has(run.status) ? null : link(`#/responses/${encodeURIComponent(run.id)}`, "open in Responses", { "data-testid": "background-response-link" })],
      ],
      { "data-testid": "background-facts" },
    ),
    !RUNNING.has(run.status) && Array.isArray(response.output) && response.output.length
      ? [h("h2", null, "Output"), timeline(response.output, "background-output")]
      : null,
  ];
}

/** A cancel button (admins, running runs): cancels, then shows the run as it stands. */
function cancelButton(run, ctx, onCancelled) {
  const button = h("button", { type: "button", class: "danger", "data-testid": "cancel-run" }, "Cancel run");
  const message = h("span", { class: "muted", role: "status" });
  button.addEventListener("click", async () => {
    button.disabled = true;
    replace(message, "Cancelling…");
    try {
      await ctx.api.cancelBackgroundRun(run.id, ctx.signal);
      replace(message);
      await onCancelled();
    } catch (error) {
      if (error.name === "AbortError") return;
      button.disabled = false;
      replace(message, errorBox(error));
    }
  });
  return h("div", { class: "toolbar" }, button, message);
}

/**
 * The live view of a running run: output text from `response.output_text.delta` events, the latest
 * event types, a counter. Polls until the events say the run ended (or the view is left), then
 * calls `onEnded`.
 */
function liveView(run, ctx, onEnded) {
  const output = h("pre", { class: "code", "data-testid": "live-output", "aria-live": "polite" });
  const events = h("ol", { class: "mono", "data-testid": "live-events" });
  const counter = h("span", { "data-testid": "live-count" }, "0");
  const state = h("span", { class: "muted", "data-testid": "live-state" }, "watching…");
  const panel = h(
    "div",
    { class: "panel", "data-testid": "live-view" },
    h("h2", null, "Live"),
    h("p", null, counter, " events so far · ", state),
    h("h3", null, "Output text"),
    output,
    h("h3", null, "Latest events"),
    events,
  );
  let after;
  let seen = 0;
  const poll = async () => {
    if (ctx.signal.aborted) return;
    let page;
    try {
      page = await ctx.api.backgroundEvents(run.id, { after, limit: 100 }, ctx.signal);
    } catch (error) {
      if (error.name === "AbortError" || ctx.signal.aborted) return;
      replace(state, errorBox(error));
      setTimeout(poll, POLL_MS * 3);
      return;
    }
    for (const entry of page.data) {
      after = entry.sequence_number;
      seen += 1;
      const event = entry.event || {};
      if (entry.type === "response.output_text.delta" && typeof event.delta === "string") output.append(event.delta);
      events.append(h("li", null, `${entry.sequence_number} ${entry.type}`));
      while (events.childElementCount > EVENTS_SHOWN) events.firstElementChild.remove();
    }
    replace(counter, formatNumber(seen));
    if (page.ended && !page.has_more) {
      replace(state, "the run has ended");
      await onEnded();
    } else {
      setTimeout(poll, page.has_more ? 0 : POLL_MS);
    }
  };
  poll();
  return panel;
}

async function renderRun(root, id, ctx) {
  ctx.setTitle(id);
  const body = h("div");
  const section = h(
    "section",
    { "data-testid": "background-detail", "data-id": id },
    h("div", { class: "view-header" }, h("h1", { class: "mono" }, id), link("#/background", "All background runs", { class: "muted" })),
    body,
  );
  root.append(section);
  let live = null;
  const show = async () => {
    const run = await ctx.api.backgroundRun(id, ctx.signal);
    if (ctx.signal.aborted) return;
    section.dataset.status = run.status;
    const running = RUNNING.has(run.status);
    replace(
      body,
      h("div", { class: "panel" }, runSummary(run)),
      running && ctx.session.admin ? cancelButton(run, ctx, refresh) : null,
    );
    if (running) {
      live = live || liveView(run, ctx, refresh);
      body.append(live);
    } else if (live) {
      body.append(live);
    }
  };
  const refresh = async () => {
    try {
      await show();
    } catch (error) {
      if (error.name !== "AbortError" && !ctx.signal.aborted) body.append(errorBox(error));
    }
  };
  await show();
}

export async function render(root, params, ctx) {
  if (params.id) await renderRun(root, params.id, ctx);
  else await renderList(root, params.query, ctx);
}
