// The console's views: which hash route loads which module, and which appear in the navigation.
// A route's `path` is matched segment by segment; `:name` takes one segment (URL-decoded) into
// `params.name`. Each module exports `render(root, params, ctx)` (see app.js).

export const ROUTES = [
  { path: "overview", title: "Overview", nav: true, load: () => import("./views/overview.js") },
  { path: "responses", title: "Responses", nav: true, load: () => import("./views/responses.js") },
  { path: "responses/:id", title: "Response", load: () => import("./views/response.js") },
  { path: "conversations", title: "Conversations", nav: true, load: () => import("./views/conversations.js") },
  { path: "conversations/:id", title: "Conversation", load: () => import("./views/conversations.js") },
  { path: "background", title: "Background", nav: true, load: () => import("./views/background.js") },
  { path: "background/:id", title: "Background run", load: () => import("./views/background.js") },
  { path: "files", title: "Files", nav: true, load: () => import("./views/files.js") },
  { path: "vector_stores", title: "Vector stores", nav: true, load: () => import("./views/files.js").then((m) => m.vectorStoresView) },
  { path: "vector_stores/:id", title: "Vector store", load: () => import("./views/files.js").then((m) => m.vectorStoreView) },
];

/** The route a hash path (`responses/resp_1`) names, with its params; null when none does. */
export function match(path) {
  const segments = path.split("/").filter(Boolean);
  for (const route of ROUTES) {
    const pattern = route.path.split("/");
    if (pattern.length !== segments.length) continue;
    const params = {};
    let ok = true;
    for (const [i, part] of pattern.entries()) {
      if (part.startsWith(":")) {
        try {
          params[part.slice(1)] = decodeURIComponent(segments[i]);
        } catch {
          ok = false;
        }
      } else if (part !== segments[i]) {
        ok = false;
      }
      if (!ok) break;
    }
    if (ok) return { route, params };
  }
  return null;
}
