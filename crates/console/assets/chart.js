// A small SVG line chart for the overview: time on x, one line per series, gaps where a value is
// null, a few labelled grid lines, a legend, and a readout of the values under the pointer.
// Colours come from CSS classes (`series-0` … `series-7`), so the light and dark themes apply.

import { formatClock, h, svg } from "./dom.js";

const WIDTH = 480;
const HEIGHT = 210;
const PAD = { top: 12, right: 12, bottom: 24, left: 52 };
const COLOURS = 8;

/** A "nice" grid step for values up to `max`: 1, 2, 2.5 or 5 times a power of ten, about four steps. */
function niceStep(max) {
  if (!(max > 0)) return 0.25;
  const raw = max / 4;
  const power = 10 ** Math.floor(Math.log10(raw));
  for (const step of [1, 2, 2.5, 5, 10]) if (step * power >= raw) return step * power;
  return 10 * power;
}

/**
 * A chart in a `<figure>`. `times` are unix seconds (x values shared by all series); each series is
 * `{name, values}` with one value (or null) per time. `format(v)` renders a y value.
 */
export function lineChart({ title, times, series, format = String, testid, empty = "No data yet." }) {
  const figure = h("figure", { class: "chart", "data-testid": testid });
  const caption = h("figcaption", null, h("span", { class: "chart-title" }, title));
  const readout = h("span", { class: "chart-readout muted", "aria-live": "off" });
  caption.append(readout);
  figure.append(caption);

  const finite = series.flatMap((s) => s.values).filter((v) => typeof v === "number" && Number.isFinite(v));
  if (!times.length || !finite.length) {
    figure.append(h("p", { class: "empty chart-empty" }, empty));
    return figure;
  }
  const step = niceStep(Math.max(...finite));
  const steps = Math.max(1, Math.ceil(Math.max(...finite) / step));
  const top = step * steps;
  const t0 = times[0];
  const t1 = times.length > 1 ? times[times.length - 1] : t0 + 1;
  const plotWidth = WIDTH - PAD.left - PAD.right;
  const plotHeight = HEIGHT - PAD.top - PAD.bottom;
  const x = (t) => PAD.left + ((t - t0) / (t1 - t0)) * plotWidth;
  const y = (v) => PAD.top + plotHeight - (v / top) * plotHeight;

  const chart = svg("svg", {
    viewBox: `0 0 ${WIDTH} ${HEIGHT}`,
    role: "img",
    "aria-label": `${title}: ${series.map((s) => s.name).join(", ")}`,
    class: "chart-svg",
  });
  for (let i = 0; i <= steps; i += 1) {
    const value = step * i;
    chart.append(
      svg("line", { class: "grid", x1: PAD.left, x2: WIDTH - PAD.right, y1: y(value), y2: y(value) }),
      svg("text", { class: "axis-label", x: PAD.left - 6, y: y(value) + 4, "text-anchor": "end" }, format(value)),
    );
  }
  const ticks = times.length > 1 ? [t0, t0 + (t1 - t0) / 2, t1] : [t0];
  for (const [index, t] of ticks.entries()) {
    const anchor = index === 0 ? "start" : index === ticks.length - 1 ? "end" : "middle";
    chart.append(svg("text", { class: "axis-label", x: x(t), y: HEIGHT - 6, "text-anchor": anchor }, formatClock(t)));
  }
  series.forEach((s, index) => {
    let path = "";
    let pen = false;
    s.values.forEach((v, i) => {
      if (typeof v !== "number" || !Number.isFinite(v)) {
        pen = false;
        return;
      }
      path += `${pen ? "L" : "M"}${x(times[i]).toFixed(1)},${y(v).toFixed(1)}`;
      pen = true;
    });
    if (path) chart.append(svg("path", { class: ["line", `series-${index % COLOURS}`], d: path, "data-series": s.name }));
    // Lone points (a value between two gaps) would draw nothing as a path: mark them.
    s.values.forEach((v, i) => {
      const lone = typeof v === "number" && !Number.isFinite(s.values[i - 1] ?? NaN) && !Number.isFinite(s.values[i + 1] ?? NaN);
      if (lone) chart.append(svg("circle", { class: ["dot", `series-${index % COLOURS}`], cx: x(times[i]), cy: y(v), r: 2.5 }));
    });
  });
  const cursorLine = svg("line", { class: "cursor", x1: 0, x2: 0, y1: PAD.top, y2: PAD.top + plotHeight, visibility: "hidden" });
  chart.append(cursorLine);
  chart.addEventListener("pointermove", (event) => {
    const box = chart.getBoundingClientRect();
    const px = ((event.clientX - box.left) / box.width) * WIDTH;
    const t = t0 + ((px - PAD.left) / plotWidth) * (t1 - t0);
    let nearest = 0;
    for (let i = 1; i < times.length; i += 1) if (Math.abs(times[i] - t) < Math.abs(times[nearest] - t)) nearest = i;
    cursorLine.setAttribute("x1", x(times[nearest]));
    cursorLine.setAttribute("x2", x(times[nearest]));
    cursorLine.setAttribute("visibility", "visible");
    const values = series.map((s) => `${s.name} ${s.values[nearest] === null || s.values[nearest] === undefined ? "—" : format(s.values[nearest])}`);
    readout.textContent = `${formatClock(times[nearest], true)} · ${values.join(" · ")}`;
  });
  chart.addEventListener("pointerleave", () => {
    cursorLine.setAttribute("visibility", "hidden");
    readout.textContent = "";
  });
  figure.append(chart);
  figure.append(
    h(
      "ul",
      { class: "legend" },
      series.map((s, index) => h("li", null, h("span", { class: ["swatch", `series-${index % COLOURS}`], "aria-hidden": "true" }), s.name)),
    ),
  );
  return figure;
}
