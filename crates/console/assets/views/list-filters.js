// Filters shared by the list views of conversations, background runs, files and vector stores:
// each filter is a select whose change rewrites the route's query (dropping the paging cursor), so
// a filtered list can be linked and the back button works.

import { h } from "../dom.js";

/**
 * The filter toolbar of the list at `#/<path>`: a tenant select for admins (`session.tenants`),
 * then one select per entry of `extra` (`{name, label, options: [value, …]}`, "any" first). The
 * controls get ids `<testid>-<name>`; the toolbar `data-testid="<testid>-filters"`. Null when there
 * is nothing to filter by.
 */
export function listFilters(path, query, ctx, testid, extra = []) {
  const filters = [...extra];
  if (ctx.session.admin) filters.unshift({ name: "tenant", label: "Tenant", any: "all tenants", options: ctx.session.tenants || [] });
  if (!filters.length) return null;
  const selects = filters.map((filter) => {
    const select = h(
      "select",
      { id: `${testid}-${filter.name}`, name: filter.name },
      h("option", { value: "" }, filter.any || "any"),
      filter.options.map((value) => h("option", { value, selected: value === query.get(filter.name) }, value)),
    );
    return { filter, select };
  });
  const apply = () => {
    const next = new URLSearchParams();
    for (const { filter, select } of selects) if (select.value) next.set(filter.name, select.value);
    const text = next.toString();
    ctx.navigate(`#/${path}${text ? `?${text}` : ""}`);
  };
  return h(
    "div",
    { class: "toolbar", "data-testid": `${testid}-filters` },
    selects.map(({ filter, select }) => {
      select.addEventListener("change", apply);
      return h("div", { class: "field" }, h("label", { for: select.id }, filter.label), select);
    }),
  );
}

/** The API filters a list route's query names: `names` present in it, and the paging cursor. */
export function queryFilters(query, names) {
  const filters = { after: query.get("after") || undefined };
  for (const name of names) if (query.get(name)) filters[name] = query.get(name);
  return filters;
}
