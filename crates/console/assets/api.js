// The client of the gateway's console API (`/v1/console/…`, docs/console.md): every call carries
// the signed-in key as `Authorization: Bearer`, never in a URL, and fails with an `ApiError` that
// holds the gateway's error shape (`{"error":{"message","type","param","code"}}`).

/** A failed call: the HTTP status and the fields of the gateway's error body. */
export class ApiError extends Error {
  constructor(status, error) {
    super(error && error.message ? error.message : `The gateway answered HTTP ${status}.`);
    this.name = "ApiError";
    this.status = status;
    this.type = error ? error.type : null;
    this.code = error ? error.code : null;
    this.param = error ? error.param : null;
  }
}

/** The page size every list asks for unless a view says otherwise (the API allows 1..=100). */
export const PAGE_SIZE = 20;

/**
 * A client. `key()` returns the current API key (or null when there is none: authentication off);
 * `onUnauthorized(error)` is told when a call is refused with 401 (the key was revoked or is wrong).
 */
export function createApi({ key, onUnauthorized = () => {} }) {
  async function call(method, path, { query, signal, body } = {}) {
    const url = new URL(path, window.location.origin);
    for (const [name, value] of Object.entries(query || {})) {
      if (value !== null && value !== undefined && value !== "") url.searchParams.set(name, String(value));
    }
    const headers = { Accept: "application/json" };
    const token = key();
    if (token) headers.Authorization = `Bearer ${token}`;
    if (body !== undefined) headers["Content-Type"] = "application/json";
    let reply;
    try {
      reply = await fetch(url, {
        method,
        headers,
        body: body === undefined ? undefined : JSON.stringify(body),
        signal,
        cache: "no-store",
        credentials: "omit",
        referrerPolicy: "no-referrer",
      });
    } catch (error) {
      if (error.name === "AbortError") throw error;
      throw new ApiError(0, { message: `The gateway could not be reached (${error.message}).` });
    }
    let parsed = null;
    const text = await reply.text();
    if (text) {
      try {
        parsed = JSON.parse(text);
      } catch {
        throw new ApiError(reply.status, { message: `The gateway sent a reply that is not JSON (HTTP ${reply.status}).` });
      }
    }
    if (!reply.ok) {
      const error = new ApiError(reply.status, parsed && parsed.error);
      if (reply.status === 401) onUnauthorized(error);
      throw error;
    }
    return parsed;
  }

  const enc = encodeURIComponent;
  return {
    /** `GET path?query`, the parsed JSON body. */
    get: (path, query, signal) => call("GET", path, { query, signal }),
    /** `POST path` with a JSON body. */
    post: (path, body, signal) => call("POST", path, { body, signal }),

    session: (signal) => call("GET", "/v1/console/session", { signal }),
    overview: (window, signal) => call("GET", "/v1/console/overview", { query: { window }, signal }),
    responses: (filters, signal) => call("GET", "/v1/console/responses", { query: { limit: PAGE_SIZE, ...filters }, signal }),
    response: (id, signal) => call("GET", `/v1/console/responses/${enc(id)}`, { signal }),
    conversations: (filters, signal) => call("GET", "/v1/console/conversations", { query: { limit: PAGE_SIZE, ...filters }, signal }),
    conversationItems: (id, filters, signal) =>
      call("GET", `/v1/console/conversations/${enc(id)}/items`, { query: { limit: PAGE_SIZE, ...filters }, signal }),
    backgroundRuns: (filters, signal) => call("GET", "/v1/console/background", { query: { limit: PAGE_SIZE, ...filters }, signal }),
    backgroundRun: (id, signal) => call("GET", `/v1/console/background/${enc(id)}`, { signal }),
    backgroundEvents: (id, filters, signal) => call("GET", `/v1/console/background/${enc(id)}/events`, { query: filters, signal }),
    cancelBackgroundRun: (id, signal) => call("POST", `/v1/console/background/${enc(id)}/cancel`, { signal }),
    files: (filters, signal) => call("GET", "/v1/console/files", { query: { limit: PAGE_SIZE, ...filters }, signal }),
    vectorStores: (filters, signal) => call("GET", "/v1/console/vector_stores", { query: { limit: PAGE_SIZE, ...filters }, signal }),
    vectorStoreFiles: (id, filters, signal) =>
      call("GET", `/v1/console/vector_stores/${enc(id)}/files`, { query: { limit: PAGE_SIZE, ...filters }, signal }),
  };
}
