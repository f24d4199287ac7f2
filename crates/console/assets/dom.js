// Small DOM helpers shared by the shell and the views. Every piece of data goes into the page as a
// text node or an attribute value (never parsed as HTML), so nothing a response contains can run.

const SVG_NS = "http://www.w3.org/2000/svg";

/** Append children (strings become text nodes; null, undefined and false are skipped; arrays are flattened). */
export function append(parent, ...children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    parent.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return parent;
}

function applyAttributes(node, attributes) {
  for (const [name, value] of Object.entries(attributes || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name === "on") {
      for (const [event, handler] of Object.entries(value)) node.addEventListener(event, handler);
    } else if (name === "class" && Array.isArray(value)) {
      node.setAttribute("class", value.filter(Boolean).join(" "));
    } else if (name === "style" || name.startsWith("on")) {
      throw new Error(`refusing the inline attribute ${name}`);
    } else {
      node.setAttribute(name, value === true ? "" : String(value));
    }
  }
}

/** `h("a", {href: "#/x", class: "link"}, "text", child)`: an HTML element. `on: {click: fn}` adds listeners. */
export function h(tag, attributes, ...children) {
  const node = document.createElement(tag);
  applyAttributes(node, attributes);
  return append(node, ...children);
}

/** The same for SVG elements. */
export function svg(tag, attributes, ...children) {
  const node = document.createElementNS(SVG_NS, tag);
  applyAttributes(node, attributes);
  return append(node, ...children);
}

/** Replace everything in `node` with `children`. */
export function replace(node, ...children) {
  node.replaceChildren();
  return append(node, ...children);
}

const numberFormat = new Intl.NumberFormat(undefined, { maximumFractionDigits: 1 });

/** 12345 → "12,345" (the reader's locale); null → "—". */
export function formatNumber(value) {
  return value === null || value === undefined || Number.isNaN(value) ? "—" : numberFormat.format(value);
}

/** Milliseconds as "850 ms" or "2.4 s"; null → "—". */
export function formatDuration(ms) {
  if (ms === null || ms === undefined) return "—";
  return ms < 1000 ? `${Math.round(ms)} ms` : `${(ms / 1000).toFixed(ms < 10000 ? 2 : 1)} s`;
}

/** Unix seconds as a local date and time ("2026-11-28 14:03:07"). */
export function formatTime(unixSeconds) {
  if (unixSeconds === null || unixSeconds === undefined) return "—";
  const d = new Date(unixSeconds * 1000);
  const pad = (n) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

/** Unix seconds as "14:03" (or "14:03:07" with seconds). */
export function formatClock(unixSeconds, seconds = false) {
  const d = new Date(unixSeconds * 1000);
  const pad = (n) => String(n).padStart(2, "0");
  return `${pad(d.getHours())}:${pad(d.getMinutes())}${seconds ? `:${pad(d.getSeconds())}` : ""}`;
}

/** A status as a coloured badge (`completed`, `failed`, …). */
export function statusBadge(status) {
  return h("span", { class: ["badge", `status-${status}`], "data-testid": "status" }, status || "—");
}

/** A link to another view of the console. */
export function link(hash, text, attributes = {}) {
  return h("a", { href: hash, ...attributes }, text);
}

/**
 * A table: `columns` is `[{label, cell: (row) => node or text, class?}]`. `rowAttributes(row)` may
 * add attributes (such as `data-testid`) to each row. An empty list shows `empty`.
 */
export function table(columns, rows, { empty = "Nothing to show.", testid, rowAttributes, caption } = {}) {
  if (!rows.length) return h("p", { class: "empty", "data-testid": testid ? `${testid}-empty` : null }, empty);
  return h(
    "div",
    { class: "table-wrap" },
    h(
      "table",
      { "data-testid": testid },
      caption ? h("caption", null, caption) : null,
      h("thead", null, h("tr", null, columns.map((c) => h("th", { scope: "col", class: c.class }, c.label)))),
      h(
        "tbody",
        null,
        rows.map((row) => h("tr", rowAttributes ? rowAttributes(row) : null, columns.map((c) => h("td", { class: c.class }, c.cell(row))))),
      ),
    ),
  );
}

/** A value pretty-printed as JSON in a `<pre>`; a string that holds JSON is parsed first. */
export function jsonBlock(value, attributes = {}) {
  let shown = value;
  if (typeof value === "string") {
    try {
      shown = JSON.parse(value);
    } catch {
      return h("pre", { class: "code", ...attributes }, value);
    }
  }
  return h("pre", { class: "code", ...attributes }, JSON.stringify(shown, null, 2));
}

/** Definition list of `[label, value]` pairs (values may be nodes); null values are left out. */
export function facts(pairs, attributes = {}) {
  return h(
    "dl",
    { class: "facts", ...attributes },
    pairs.filter(([, value]) => value !== null && value !== undefined).map(([label, value]) => [h("dt", null, label), h("dd", null, value)]),
  );
}

/** An error box for a failed call (an `ApiError` from api.js or any other `Error`). */
export function errorBox(error) {
  const details = [];
  if (error && error.status) details.push(`HTTP ${error.status}`);
  if (error && error.code) details.push(error.code);
  if (error && error.param) details.push(`parameter: ${error.param}`);
  return h(
    "div",
    { class: "banner error", role: "alert", "data-testid": "error" },
    h("strong", null, "Error: "),
    error && error.message ? error.message : String(error),
    details.length ? h("span", { class: "muted" }, ` (${details.join(", ")})`) : null,
  );
}

/** A "loading" placeholder. */
export function loading(what = "Loading…") {
  return h("p", { class: "muted loading", "data-testid": "loading" }, what);
}

/** The first `max` characters of a text, with an ellipsis when cut. */
export function clip(text, max = 120) {
  if (!text) return "";
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}
