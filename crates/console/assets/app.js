// The console's shell: sign-in, the session, the hash router, the navigation and error display.
//
// Sign-in: the API key typed in is checked with `GET /v1/console/session`; only a key the gateway
// accepts is kept, in sessionStorage (this tab only), and sent as `Authorization: Bearer` — never in
// a URL. With authentication off the session call succeeds without a key and a banner says so.
//
// Routes (`#/<view>/<id>?<filters>`) are in routes.js. A view module exports
//   `async function render(root, params, ctx)`
// where `root` is an empty element to fill (a view that fails throws: the shell keeps what it drew
// and adds the error below it), `params` holds the route's `:name` segments plus
// `query` (URLSearchParams of the hash's query), and `ctx` is
//   { api, session, signal, navigate(hash), setTitle(text) }
// — `api` from api.js, `session` the `console.session` object, `signal` an AbortSignal aborted when
// the user leaves the view (pass it to api calls, stop timers on it).
//
// Stable hooks for the browser tests (ids and data-testid):
//   sign-in form: #sign-in [data-testid=sign-in], #api-key [data-testid=api-key],
//     #sign-in-submit [data-testid=sign-in-submit], #sign-in-error [data-testid=sign-in-error]
//   shell: #nav (links carry data-testid="nav-<path>"), [data-testid=session-tenant],
//     [data-testid=sign-out], [data-testid=auth-off-banner], #view [data-testid=view]
//     (its `data-route` attribute names the rendered route once it is drawn, `data-state` is
//     "loading" | "ready" | "error"), [data-testid=error] (any error box)
//   overview: [data-testid=overview], #overview-window [data-testid=overview-window],
//     charts [data-testid=chart-requests|chart-errors|chart-streams|chart-latency|
//     chart-tokens-tenant|chart-tokens-model], tables [data-testid=tokens-per-tenant] (rows
//     [data-testid=tenant-row][data-tenant=<name>]) and [data-testid=tokens-per-model]
//   responses: [data-testid=responses], filter form [data-testid=response-filters] with
//     #filter-tenant (admins) #filter-model #filter-status #filter-since #filter-until #filter-q,
//     [data-testid=filter-apply|filter-clear], table [data-testid=responses-table] rows
//     [data-testid=response-row][data-id=resp_…] with a [data-testid=response-link],
//     pager [data-testid=pager-newer|pager-older]
//   one response: [data-testid=response-detail][data-id=resp_…], [data-testid=usage],
//     [data-testid=rounds], [data-testid=chain-previous|chain-next] (links),
//     [data-testid=previous-response|conversation-link|background-link|inherited-items],
//     timelines [data-testid=input-items|output-items] of [data-testid=item][data-item-type=<type>],
//     function calls [data-testid=function-name], [data-testid=function-arguments],
//     [data-testid=function-output], message texts [data-testid=message-text]

import { createApi } from "./api.js";
import { append, errorBox, h, loading, replace } from "./dom.js";
import { ROUTES, match } from "./routes.js";

const KEY_STORAGE = "respgw.console.apiKey";
const DEFAULT_ROUTE = "#/overview";

const $ = (id) => document.getElementById(id);

const state = {
  session: null,
  /** Aborts the view on screen when the route changes. */
  viewController: null,
};

function storedKey() {
  try {
    return sessionStorage.getItem(KEY_STORAGE);
  } catch {
    return null;
  }
}

function storeKey(key) {
  try {
    if (key) sessionStorage.setItem(KEY_STORAGE, key);
    else sessionStorage.removeItem(KEY_STORAGE);
  } catch {
    // Storage refused (private mode with storage off): the key lives only as long as this page.
  }
}

let keyInMemory = storedKey();
const api = createApi({
  key: () => keyInMemory,
  onUnauthorized: (error) => {
    if (state.session) signOut(`Your key was refused: ${error.message}`);
  },
});

function showSignIn(message) {
  state.session = null;
  stopView();
  replace($("view"));
  $("view").removeAttribute("data-route");
  $("view").removeAttribute("data-state");
  $("nav").hidden = true;
  $("who").hidden = true;
  $("auth-off-banner").hidden = true;
  $("sign-in").hidden = false;
  const error = $("sign-in-error");
  error.hidden = !message;
  error.textContent = message || "";
  $("api-key").value = "";
  $("api-key").focus();
  document.title = "Sign in · respgw console";
}

function signOut(message) {
  keyInMemory = null;
  storeKey(null);
  showSignIn(message);
}

function buildNav() {
  replace(
    $("nav"),
    ROUTES.filter((route) => route.nav).map((route) =>
      h("a", { href: `#/${route.path}`, "data-testid": `nav-${route.path}`, "data-path": route.path }, route.title),
    ),
  );
}

function startSession(session) {
  state.session = session;
  $("sign-in").hidden = true;
  $("sign-in-error").hidden = true;
  $("nav").hidden = false;
  $("who").hidden = false;
  $("auth-off-banner").hidden = session.authentication !== false;
  $("sign-out").hidden = session.authentication === false;
  replace(
    $("session-tenant"),
    session.admin ? `${session.tenant} (admin: all tenants)` : `tenant ${session.tenant}`,
  );
  buildNav();
  if (!window.location.hash || window.location.hash === "#" || window.location.hash === "#/") {
    window.location.replace(DEFAULT_ROUTE);
  } else {
    renderRoute();
  }
}

/** Ask the gateway who the key (or no key) is. Resolves to the session, or shows the sign-in form. */
async function openSession(key, { fromForm }) {
  const previous = keyInMemory;
  keyInMemory = key;
  try {
    const session = await api.session();
    if (!session || session.object !== "console.session") {
      throw new Error("The gateway's session reply is not a console session.");
    }
    storeKey(key);
    startSession(session);
  } catch (error) {
    keyInMemory = previous;
    if (error.status === 401) {
      storeKey(null);
      keyInMemory = null;
      const shown = fromForm ? `The gateway refused this API key: ${error.message}` : key ? `Your saved key was refused: ${error.message}` : null;
      showSignIn(shown);
    } else {
      showSignIn(`Could not open the console: ${error.message}${error.status ? ` (HTTP ${error.status})` : ""}`);
    }
  }
}

function stopView() {
  if (state.viewController) state.viewController.abort();
  state.viewController = null;
}

function parseHash() {
  const raw = window.location.hash.replace(/^#\/?/, "");
  const [path, queryText = ""] = raw.split("?", 2);
  return { path, query: new URLSearchParams(queryText) };
}

function markActiveNav(path) {
  const first = path.split("/")[0];
  for (const a of $("nav").querySelectorAll("a")) {
    if (a.dataset.path === first) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
}

async function renderRoute() {
  if (!state.session) return;
  stopView();
  const controller = new AbortController();
  state.viewController = controller;
  const { path, query } = parseHash();
  const view = $("view");
  const root = h("div", { class: "view-root" });
  replace(view, root);
  view.dataset.state = "loading";
  view.dataset.route = path;
  markActiveNav(path);
  const found = match(path);
  if (!found) {
    append(root, errorBox(new Error(`The console has no view at #/${path}.`)));
    view.dataset.state = "error";
    return;
  }
  document.title = `${found.route.title} · respgw console`;
  append(root, loading());
  const ctx = {
    api,
    session: state.session,
    signal: controller.signal,
    navigate: (hash) => {
      window.location.hash = hash;
    },
    setTitle: (text) => {
      if (!controller.signal.aborted) document.title = `${text} · respgw console`;
    },
  };
  try {
    const module = await found.route.load();
    if (controller.signal.aborted) return;
    replace(root);
    await module.render(root, { ...found.params, query }, ctx);
    if (!controller.signal.aborted) view.dataset.state = "ready";
  } catch (error) {
    if (controller.signal.aborted || error.name === "AbortError") return;
    if (error.status === 401) return; // signed out by the API client
    // What the view drew before it failed (a filter form, a header) stays, so the user can fix it.
    replace(root, [...root.childNodes].filter((node) => node.dataset?.testid !== "loading"), errorBox(error));
    view.dataset.state = "error";
  }
}

function init() {
  $("sign-in-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const key = $("api-key").value.trim();
    if (!key) {
      showSignIn("Enter an API key.");
      return;
    }
    openSession(key, { fromForm: true });
  });
  $("sign-out").addEventListener("click", () => signOut());
  window.addEventListener("hashchange", () => renderRoute());
  openSession(keyInMemory, { fromForm: false });
}

init();
