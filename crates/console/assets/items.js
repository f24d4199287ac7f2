// One Responses item as a card on a timeline: messages, reasoning, function and custom tool calls
// and their outputs, code-interpreter code, logs and images, web searches with their sources, MCP
// calls, tool lists and approvals, file-search queries and results, and a JSON fallback for any
// other type. Shared by the response view and the conversation view.

import { facts, formatNumber, h, jsonBlock, statusBadge } from "./dom.js";

const sub = (text) => h("div", { class: "sub" }, text);
const text = (value, attributes = {}) => h("div", { class: "text", ...attributes }, value);

/** An image only when it is inline data (`img-src` allows nothing else); otherwise its address as text. */
function image(url, alt) {
  if (typeof url === "string" && url.startsWith("data:image/")) return h("img", { src: url, alt, loading: "lazy" });
  return h("div", { class: "muted" }, `${alt}: `, h("span", { class: "mono" }, url || "(no url)"));
}

function annotations(list) {
  if (!Array.isArray(list) || !list.length) return null;
  return [
    sub("Annotations"),
    h(
      "ul",
      null,
      list.map((a) => {
        if (a.type === "url_citation") return h("li", null, "source: ", a.title ? `${a.title} — ` : "", h("span", { class: "mono" }, a.url));
        if (a.type === "file_citation") return h("li", null, "file: ", a.filename || a.file_id, a.index !== undefined ? ` (at ${a.index})` : "");
        return h("li", null, jsonBlock(a));
      }),
    ),
  ];
}

/** One content part of a message (input or output). */
function contentPart(part) {
  switch (part.type) {
    case "input_text":
    case "output_text":
    case "text":
    case "summary_text":
    case "reasoning_text":
      return [text(part.text, { "data-testid": "message-text" }), annotations(part.annotations)];
    case "refusal":
      return text(`Refused: ${part.refusal}`, { class: "text error" });
    case "input_image":
      return part.image_url ? image(part.image_url, "input image") : h("div", null, "input image: ", h("span", { class: "mono" }, part.file_id || "?"));
    case "input_file":
      return h("div", null, "input file: ", h("span", { class: "mono" }, part.filename || part.file_id || part.file_url || "(inline data)"));
    case "input_audio":
      return h("div", { class: "muted" }, "input audio");
    default:
      return jsonBlock(part);
  }
}

function messageContent(content) {
  if (typeof content === "string") return text(content, { "data-testid": "message-text" });
  return (content || []).map(contentPart);
}

/** A tool output: a string (JSON pretty-printed when it parses) or a list of content parts. */
function toolOutput(output, testid) {
  if (Array.isArray(output)) return h("div", { "data-testid": testid }, output.map(contentPart));
  return jsonBlock(output ?? "", { "data-testid": testid });
}

function head(kind, item, extra = []) {
  return h(
    "div",
    { class: "item-head" },
    h("span", { class: "item-kind" }, kind),
    extra,
    item.status ? statusBadge(item.status) : null,
    item.id ? h("span", { class: "item-id" }, item.id) : null,
  );
}

function webSearchAction(action) {
  if (!action) return null;
  switch (action.type) {
    case "search":
      return [
        facts([["query", action.query]]),
        action.queries && action.queries.length > 1 ? [sub("Queries"), h("ul", null, action.queries.map((q) => h("li", null, q)))] : null,
        action.sources && action.sources.length
          ? [sub("Sources"), h("ul", { "data-testid": "web-sources" }, action.sources.map((s) => h("li", { class: "mono" }, s.url)))]
          : null,
      ];
    case "open_page":
      return facts([["opened", h("span", { class: "mono" }, action.url || "—")]]);
    case "find_in_page":
    case "find":
      return facts([
        ["page", h("span", { class: "mono" }, action.url || "—")],
        ["pattern", action.pattern],
      ]);
    default:
      return jsonBlock(action);
  }
}

/** The card for one item. */
export function itemCard(item) {
  const type = item.type || (item.role ? "message" : "unknown");
  const card = (classes, ...children) =>
    h("article", { class: ["item", ...classes], "data-testid": "item", "data-item-type": type, "data-item-id": item.id }, ...children);

  switch (type) {
    case "message":
      return card([`role-${item.role}`], head(item.role || "message", item), messageContent(item.content));
    case "reasoning":
      return card(
        ["kind-reasoning"],
        head("reasoning", item),
        (item.summary || []).length ? [sub("Summary"), (item.summary || []).map(contentPart)] : null,
        (item.content || []).length ? [sub("Reasoning"), (item.content || []).map(contentPart)] : null,
        item.encrypted_content ? h("div", { class: "muted" }, "encrypted reasoning kept for the next turn") : null,
      );
    case "function_call":
      return card(
        ["kind-call"],
        head("function call", item, h("code", { "data-testid": "function-name" }, item.name)),
        facts([["call id", h("span", { class: "mono" }, item.call_id)]]),
        sub("Arguments"),
        jsonBlock(item.arguments ?? "", { "data-testid": "function-arguments" }),
      );
    case "function_call_output":
      return card(
        ["kind-output"],
        head("function output", item),
        facts([["call id", h("span", { class: "mono" }, item.call_id)]]),
        toolOutput(item.output, "function-output"),
      );
    case "custom_tool_call":
      return card(
        ["kind-call"],
        head("custom tool call", item, h("code", { "data-testid": "function-name" }, item.name)),
        facts([["call id", h("span", { class: "mono" }, item.call_id)]]),
        sub("Input"),
        h("pre", { class: "code", "data-testid": "function-arguments" }, item.input ?? ""),
      );
    case "custom_tool_call_output":
      return card(
        ["kind-output"],
        head("custom tool output", item),
        facts([["call id", h("span", { class: "mono" }, item.call_id)]]),
        toolOutput(item.output, "function-output"),
      );
    case "code_interpreter_call":
      return card(
        ["kind-call"],
        head("code interpreter", item),
        item.container_id ? facts([["container", h("span", { class: "mono" }, item.container_id)]]) : null,
        sub("Code"),
        h("pre", { class: "code", "data-testid": "code" }, item.code ?? ""),
        (item.outputs || []).map((output) =>
          output.type === "logs"
            ? [sub("Logs"), h("pre", { class: "code", "data-testid": "code-logs" }, output.logs)]
            : output.type === "image"
              ? [sub("Image"), image(output.url, "code interpreter image")]
              : jsonBlock(output),
        ),
      );
    case "web_search_call":
      return card(["kind-call"], head("web search", item), webSearchAction(item.action));
    case "file_search_call":
      return card(
        ["kind-call"],
        head("file search", item),
        sub("Queries"),
        h("ul", null, (item.queries || []).map((q) => h("li", null, q))),
        item.results
          ? [
              sub("Results"),
              h(
                "ol",
                { "data-testid": "file-search-results" },
                item.results.map((r) =>
                  h(
                    "li",
                    null,
                    h("strong", null, r.filename || r.file_id),
                    h("span", { class: "muted" }, ` score ${formatNumber(r.score)}`),
                    r.text ? text(r.text) : null,
                  ),
                ),
              ),
            ]
          : h("div", { class: "muted" }, "results not kept (ask with include: file_search_call.results)"),
      );
    case "mcp_call":
      return card(
        ["kind-call"],
        head("MCP call", item, [h("code", { "data-testid": "function-name" }, item.name), h("span", { class: "muted" }, `on ${item.server_label}`)]),
        item.approval_request_id ? facts([["approved request", h("span", { class: "mono" }, item.approval_request_id)]]) : null,
        sub("Arguments"),
        jsonBlock(item.arguments ?? "", { "data-testid": "function-arguments" }),
        item.output !== null && item.output !== undefined ? [sub("Output"), toolOutput(item.output, "function-output")] : null,
        item.error ? [sub("Error"), h("pre", { class: "code error" }, typeof item.error === "string" ? item.error : JSON.stringify(item.error, null, 2))] : null,
      );
    case "mcp_list_tools":
      return card(
        ["kind-output"],
        head("MCP tools listed", item, h("span", { class: "muted" }, `from ${item.server_label}`)),
        h(
          "ul",
          null,
          (item.tools || []).map((tool) => h("li", null, h("code", null, tool.name), tool.description ? ` — ${tool.description}` : "")),
        ),
        item.error ? h("pre", { class: "code error" }, String(item.error)) : null,
      );
    case "mcp_approval_request":
      return card(
        ["kind-call"],
        head("MCP approval request", item, [h("code", null, item.name), h("span", { class: "muted" }, `on ${item.server_label}`)]),
        sub("Arguments"),
        jsonBlock(item.arguments ?? ""),
      );
    case "mcp_approval_response":
      return card(
        ["kind-output"],
        head("MCP approval", item, h("strong", null, item.approve ? "approved" : "denied")),
        facts([
          ["request", h("span", { class: "mono" }, item.approval_request_id)],
          ["reason", item.reason ?? null],
        ]),
      );
    case "local_shell_call":
      return card(
        ["kind-call"],
        head("local shell call", item),
        h("pre", { class: "code", "data-testid": "function-arguments" }, ((item.action && item.action.command) || []).join(" ")),
      );
    case "local_shell_call_output":
      return card(["kind-output"], head("local shell output", item), h("pre", { class: "code" }, item.output ?? ""));
    case "compaction":
      return card(
        ["kind-reasoning"],
        head("compaction", item),
        item.model_summary ? text(item.model_summary) : h("div", { class: "muted" }, "earlier turns compacted (encrypted)"),
      );
    case "item_reference":
      return card([], head("item reference", item), h("span", { class: "mono" }, item.id));
    default:
      return card([], head(type, item), jsonBlock(item));
  }
}

/** Items as an ordered timeline. */
export function timeline(items, testid) {
  return h("ol", { class: "timeline", "data-testid": testid }, items.map((item) => h("li", null, itemCard(item))));
}
