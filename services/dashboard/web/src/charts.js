// Charts of memory and cores, allocated vs used, drawn with uPlot (pinned in package.json, bundled by
// esbuild: no CDN). The server sends each chart as slot end times plus one list per metric; a gap
// (null) is a slot with no sample. Charts are drawn into placeholders after each render and
// destroyed before the next, so a live page never leaks one.
import uPlot from "uplot";
import "uplot/dist/uPlot.min.css";

const live = [];

const COLORS = {total: "#9aa3b5", alloc: "#4f7cff", used: "#e08a00"};

const gib = (mib) => (mib == null ? "-" : mib >= 1024 ? `${(mib / 1024).toFixed(1)} GiB` : `${Math.round(mib)} MiB`);
const pctOfCard = (v) => (v == null ? "-" : `${Math.round(v)}%`);

const KINDS = {
  memory: {
    title: "Memory", unit: "GiB", axis: "GiB", keys: ["mem_total", "mem_alloc", "mem_used"],
    scale: (v) => (v == null ? null : v / 1024), fmt: (v) => gib(v == null ? null : v * 1024),
  },
  cores: {
    title: "Cores", unit: "% of one card, summed", axis: "%", keys: ["cores_total", "cores_alloc", "cores_used"],
    scale: (v) => v, fmt: pctOfCard,
  },
};
const LABELS = ["capacity", "allocated", "used"];

// A placeholder a page template puts where a chart goes.
export function chartSlot(kind, name) {
  return `<figure class="chart" data-chart="${kind}" data-name="${name}"><figcaption>${KINDS[kind].title}
    <span class="muted">(${KINDS[kind].unit})</span></figcaption><div class="plot"></div></figure>`;
}

// Tick labels as fine as the span shown needs.
function timeFmt(series) {
  const span = series.t.length > 1 ? series.t[series.t.length - 1] - series.t[0] : 0;
  return span > 2 * 86400 ? "{M}/{D} {HH}:{mm}" : span > 600 ? "{HH}:{mm}" : "{HH}:{mm}:{ss}";
}

function options(kind, width, series) {
  const k = KINDS[kind];
  return {
    width, height: 200, legend: {live: true},
    scales: {x: {time: true}, y: {range: (u, min, max) => [0, max > 0 ? max * 1.05 : 1]}},
    axes: [
      {values: (u, ticks) => ticks.map((t) => uPlot.fmtDate(timeFmt(series))(new Date(t * 1000))),
        label: "time", size: 50},
      {label: k.axis, size: 60, values: (u, ticks) => ticks.map((t) => (kind === "memory" ? `${t.toFixed(t < 10 ? 1 : 0)}` : `${t}%`))},
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

function dataOf(kind, series) {
  const k = KINDS[kind];
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
    const kind = slot.dataset.chart;
    const plot = slot.querySelector(".plot");
    const width = Math.max(280, plot.clientWidth || slot.clientWidth || 600);
    const u = new uPlot(options(kind, width, chart), dataOf(kind, chart), plot);
    live.push(u);
    slot.dataset.points = String(chart.t.length);
    slot.classList.add("drawn");
  }
}
