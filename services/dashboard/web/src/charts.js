// Charts of memory and cores, allocated vs used, drawn with uPlot (pinned in package.json, bundled by
// esbuild: no CDN). The server sends each chart as slot end times plus one list per metric; a gap
// (null) is a slot with no sample. Charts are drawn into placeholders after each render and
// destroyed before the next, so a live page never leaks one.
import uPlot from "uplot";
import "uplot/dist/uPlot.min.css";

const live = [];

const COLORS = {total: "#9aa3b5", alloc: "#4f7cff", used: "#e08a00"};

const gib = (mib) => (mib == null ? "-" : mib >= 1048576 ? `${(mib / 1048576).toFixed(2)} TiB` :
  mib >= 1024 ? `${(mib / 1024).toFixed(1)} GiB` : `${Math.round(mib)} MiB`);
// Tick labels short enough for the axis: 600000 -> 600k.
const short = (v) => (Math.abs(v) >= 1e6 ? `${+(v / 1e6).toFixed(1)}M` : Math.abs(v) >= 1e3 ? `${+(v / 1e3).toFixed(1)}k` :
  `${+v.toFixed(v < 10 ? 1 : 0)}`);

// A card's cores in percent of it; a node's or the cluster's in cards' worth of SMs (800% = 8 cards).
const KINDS = {
  memory: () => ({
    title: "Memory", unit: "GiB", axis: "GiB", keys: ["mem_total", "mem_alloc", "mem_used"],
    scale: (v) => (v == null ? null : v / 1024), fmt: (v) => gib(v == null ? null : v * 1024), tick: short,
  }),
  cores: (scope) => (scope === "card" ? {
    title: "Cores", unit: "% of the card's SMs", axis: "%", keys: ["cores_total", "cores_alloc", "cores_used"],
    scale: (v) => v, fmt: (v) => (v == null ? "-" : `${Math.round(v)}%`), tick: (v) => `${short(v)}%`,
  } : {
    title: "Cores", unit: "cards' worth of SMs: 100% of one card = 1", axis: "cards", keys: ["cores_total", "cores_alloc", "cores_used"],
    scale: (v) => (v == null ? null : v / 100), fmt: (v) => (v == null ? "-" : `${v.toFixed(2)} cards`), tick: short,
  }),
};
const LABELS = ["capacity", "allocated", "used"];

// A placeholder a page template puts where a chart goes.
export function chartSlot(kind, name, scope) {
  const k = KINDS[kind](scope);
  return `<figure class="chart" data-chart="${kind}" data-scope="${scope}" data-name="${name}"><figcaption>${k.title}
    <span class="muted">(${k.unit})</span></figcaption><div class="plot"></div></figure>`;
}

// Tick labels as fine as the span shown needs.
function timeFmt(series) {
  const span = series.t.length > 1 ? series.t[series.t.length - 1] - series.t[0] : 0;
  return span > 2 * 86400 ? "{M}/{D} {HH}:{mm}" : span > 600 ? "{HH}:{mm}" : "{HH}:{mm}:{ss}";
}

function options(k, width, series) {
  return {
    width, height: 200, legend: {live: true},
    scales: {x: {time: true}, y: {range: (u, min, max) => [0, max > 0 ? max * 1.05 : 1]}},
    axes: [
      {values: (u, ticks) => ticks.map((t) => uPlot.fmtDate(timeFmt(series))(new Date(t * 1000))),
        label: "time", size: 50},
      {label: k.axis, size: 60, values: (u, ticks) => ticks.map(k.tick)},
    ],
    series: [
      {label: "time", value: (u, t) => (t == null ? "-" : new Date(t * 1000).toLocaleString())},
      ...LABELS.map((label, i) => ({
        label, stroke: Object.values(COLORS)[i], width: i === 0 ? 1 : 2, dash: i === 0 ? [4, 4] : undefined,
        fill: i === 1 ? "rgba(79,124,255,0.08)" : undefined, spanGaps: false,
        value: (u, v) => k.fmt(v),
      })),
    ],
  };
}

function dataOf(k, series) {
  return [series.t, ...k.keys.map((key) => series[key].map(k.scale))];
}

// Destroy the charts of the previous render.
export function clearCharts() {
  while (live.length) live.pop().destroy();
}

// Draw every placeholder under `root` from `chart` (the page's series); marks the root drawn.
export function drawCharts(root, chart) {
  const slots = root.querySelectorAll("figure.chart");
  if (!chart || !slots.length) return;
  for (const slot of slots) {
    const k = KINDS[slot.dataset.chart](slot.dataset.scope);
    const plot = slot.querySelector(".plot");
    const width = Math.max(280, plot.clientWidth || slot.clientWidth || 600);
    const u = new uPlot(options(k, width, chart), dataOf(k, chart), plot);
    live.push(u);
    slot.dataset.points = String(chart.t.length);
    slot.classList.add("drawn");
  }
}
