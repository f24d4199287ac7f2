// Overview: the gateway's own counters over the last hour (or a shorter window) as charts —
// requests per second, error rates, open streams, latency, tokens per tenant and per model — and a
// table of each tenant's totals. Non-admins see only their tenant; the gateway-wide gauges
// (open streams, latency) are null for them and their charts say so. Refreshes every step.

import { lineChart } from "../chart.js";
import { formatDuration, formatNumber, h, replace, table } from "../dom.js";

const WINDOWS = [
  [300, "Last 5 minutes"],
  [900, "Last 15 minutes"],
  [3600, "Last hour"],
];

const sum = (values) => values.reduce((a, b) => a + b, 0);

function tokensOf(entry) {
  const byModel = (entry && entry.tokens) || {};
  let input = 0;
  let output = 0;
  for (const counts of Object.values(byModel)) {
    input += counts.input || 0;
    output += counts.output || 0;
  }
  return { input, output };
}

/** The tenants the overview names anywhere, sorted. */
function tenantNames(overview) {
  const names = new Set(Object.keys(overview.totals || {}));
  for (const point of overview.points) for (const name of Object.keys(point.tenants || {})) names.add(name);
  return [...names].sort();
}

function modelNames(overview) {
  const names = new Set();
  for (const point of overview.points) {
    for (const entry of Object.values(point.tenants || {})) for (const model of Object.keys(entry.tokens || {})) names.add(model);
  }
  return [...names].sort();
}

function charts(overview, admin) {
  const points = overview.points;
  const step = overview.step || 10;
  const times = points.map((p) => p.t);
  const tenants = tenantNames(overview);
  const models = modelNames(overview);
  const perMinute = 60 / step;
  const rate = (v) => `${formatNumber(v)}/s`;
  const requestsOf = (p) => sum(Object.values(p.tenants || {}).map((e) => e.requests || 0));
  const percent = (part, whole) => (whole > 0 ? (100 * part) / whole : null);
  const gatewayOnly = admin ? "No data yet." : "Gateway-wide figures are shown to admin keys only.";

  return h(
    "div",
    { class: "charts" },
    lineChart({
      title: "Requests per second",
      testid: "chart-requests",
      times,
      series: tenants.map((name) => ({ name, values: points.map((p) => ((p.tenants || {})[name]?.requests || 0) / step) })),
      format: rate,
    }),
    lineChart({
      title: "Error rate (% of requests)",
      testid: "chart-errors",
      times,
      series: [
        {
          name: "5xx",
          values: points.map((p) => percent(sum(Object.values(p.tenants || {}).map((e) => e.errors || 0)), requestsOf(p))),
        },
        {
          name: "4xx",
          values: points.map((p) => percent(sum(Object.values(p.tenants || {}).map((e) => e.client_errors || 0)), requestsOf(p))),
        },
      ],
      format: (v) => `${formatNumber(v)} %`,
      empty: "No requests in this window.",
    }),
    lineChart({
      title: "Open streams and requests in flight",
      testid: "chart-streams",
      times,
      series: [
        { name: "open SSE streams", values: points.map((p) => p.open_streams) },
        { name: "requests in flight", values: points.map((p) => p.in_flight) },
      ],
      format: formatNumber,
      empty: gatewayOnly,
    }),
    lineChart({
      title: "Latency (HTTP requests, all routes)",
      testid: "chart-latency",
      times,
      series: [
        { name: "p50", values: points.map((p) => (p.latency_ms ? p.latency_ms.p50 : null)) },
        { name: "p95", values: points.map((p) => (p.latency_ms ? p.latency_ms.p95 : null)) },
      ],
      format: formatDuration,
      empty: gatewayOnly,
    }),
    lineChart({
      title: "Tokens per minute, per tenant",
      testid: "chart-tokens-tenant",
      times,
      series: tenants.map((name) => ({
        name,
        values: points.map((p) => {
          const t = tokensOf((p.tenants || {})[name]);
          return (t.input + t.output) * perMinute;
        }),
      })),
      format: formatNumber,
      empty: "No tokens counted in this window.",
    }),
    lineChart({
      title: "Tokens per minute, per model",
      testid: "chart-tokens-model",
      times,
      series: models.map((model) => ({
        name: model,
        values: points.map((p) =>
          sum(Object.values(p.tenants || {}).map((e) => {
            const counts = (e.tokens || {})[model];
            return counts ? (counts.input || 0) + (counts.output || 0) : 0;
          })) * perMinute,
        ),
      })),
      format: formatNumber,
      empty: "No tokens counted in this window.",
    }),
  );
}

function totalsTables(overview) {
  const totals = overview.totals || {};
  const rows = Object.keys(totals).sort().map((tenant) => ({ tenant, ...totals[tenant], ...tokensOf(totals[tenant]) }));
  const num = (pick) => (row) => formatNumber(pick(row));
  const perTenant = table(
    [
      { label: "Tenant", cell: (r) => r.tenant },
      { label: "Requests", class: "num", cell: num((r) => r.requests || 0) },
      { label: "4xx", class: "num", cell: num((r) => r.client_errors || 0) },
      { label: "5xx", class: "num", cell: num((r) => r.errors || 0) },
      { label: "Input tokens", class: "num", cell: num((r) => r.input) },
      { label: "Output tokens", class: "num", cell: num((r) => r.output) },
      { label: "Total tokens", class: "num", cell: num((r) => r.input + r.output) },
    ],
    rows,
    {
      testid: "tokens-per-tenant",
      caption: "Per tenant, over the window",
      empty: "No requests in this window.",
      rowAttributes: (r) => ({ "data-testid": "tenant-row", "data-tenant": r.tenant }),
    },
  );
  const modelRows = rows.flatMap((r) =>
    Object.entries(r.tokens || {})
      .sort(([a], [b]) => a.localeCompare(b))
      .map(([model, counts]) => ({ tenant: r.tenant, model, input: counts.input || 0, output: counts.output || 0 })),
  );
  const perModel = table(
    [
      { label: "Tenant", cell: (r) => r.tenant },
      { label: "Model", cell: (r) => h("span", { class: "mono" }, r.model) },
      { label: "Input tokens", class: "num", cell: num((r) => r.input) },
      { label: "Output tokens", class: "num", cell: num((r) => r.output) },
    ],
    modelRows,
    { testid: "tokens-per-model", caption: "Tokens per tenant and model", empty: "No tokens counted in this window." },
  );
  return [perTenant, h("div", { class: "spacer" }), perModel];
}

export async function render(root, params, ctx) {
  const chosen = Number(params.query.get("window"));
  const windowSeconds = WINDOWS.some(([seconds]) => seconds === chosen) ? chosen : 3600;
  const select = h(
    "select",
    {
      id: "overview-window",
      "data-testid": "overview-window",
      on: {
        change: (event) => ctx.navigate(`#/overview?window=${event.target.value}`),
      },
    },
    WINDOWS.map(([seconds, label]) => h("option", { value: seconds, selected: seconds === windowSeconds }, label)),
  );
  const updated = h("span", { class: "muted", "data-testid": "overview-updated" });
  const body = h("div");
  root.append(
    h(
      "section",
      { "data-testid": "overview" },
      h(
        "div",
        { class: "view-header" },
        h("h1", null, "Overview"),
        h("div", { class: "toolbar" }, h("label", { for: "overview-window" }, "Window"), select, updated),
      ),
      body,
    ),
  );

  const draw = async () => {
    const overview = await ctx.api.overview(windowSeconds, ctx.signal);
    if (ctx.signal.aborted) return overview;
    replace(body, charts(overview, ctx.session.admin), totalsTables(overview));
    updated.textContent = `updated ${new Date(overview.now * 1000).toLocaleTimeString()}, one point per ${overview.step} s`;
    return overview;
  };
  const first = await draw();
  // Keep the charts current while the view is on screen; an error on a refresh keeps the last
  // drawing and says so next to the time.
  const every = Math.max(5, first.step || 10) * 1000;
  const timer = setInterval(() => {
    draw().catch((error) => {
      if (error.name !== "AbortError") updated.textContent = `refresh failed: ${error.message}`;
    });
  }, every);
  ctx.signal.addEventListener("abort", () => clearInterval(timer));
}
