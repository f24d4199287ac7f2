// "Newer" / "Older" buttons for a list page. The API pages with `after` (the last id of the
// previous page, newest first); the way back is kept in the route's query as `trail`, the `after`
// of every page before this one, so the browser's back/forward and shared links both work.

import { h } from "./dom.js";

const FIRST_PAGE = "-";

/** The `after` cursor of the page a route's query names (undefined for the first page). */
export function cursor(query) {
  return query.get("after") || undefined;
}

/**
 * Buttons for `page` (a list reply) shown for the route `path` with `query` (URLSearchParams, the
 * filters included); `navigate(hash)` changes the route.
 */
export function pager(page, path, query, navigate, { testid = "pager" } = {}) {
  const trail = query.get("trail") ? query.get("trail").split(",") : [];
  const go = (after, nextTrail) => {
    const next = new URLSearchParams(query);
    if (after) next.set("after", after);
    else next.delete("after");
    if (nextTrail.length) next.set("trail", nextTrail.join(","));
    else next.delete("trail");
    const text = next.toString();
    navigate(`#/${path}${text ? `?${text}` : ""}`);
  };
  const hasNewer = Boolean(query.get("after"));
  const newer = h(
    "button",
    {
      type: "button",
      class: "secondary",
      "data-testid": `${testid}-newer`,
      disabled: !hasNewer,
      on: {
        click: () => {
          const previous = trail.slice(0, -1);
          const after = trail.length ? trail[trail.length - 1] : FIRST_PAGE;
          go(after === FIRST_PAGE ? undefined : after, previous);
        },
      },
    },
    "← Newer",
  );
  const older = h(
    "button",
    {
      type: "button",
      class: "secondary",
      "data-testid": `${testid}-older`,
      disabled: !(page.has_more && page.last_id),
      on: { click: () => go(page.last_id, [...trail, query.get("after") || FIRST_PAGE]) },
    },
    "Older →",
  );
  return h("nav", { class: "pager", "aria-label": "Pages", "data-testid": testid }, newer, older);
}
