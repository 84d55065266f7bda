// gpubus dashboard: renders the page data the server pushes (server-sent events) or, for a moment
// in the past (?at=), the data it rebuilt from the stream. No framework, no network but the server;
// charts by uPlot, bundled with this file by esbuild (npm run build -> ../static/dist).
import {chartSlot, clearCharts, drawCharts} from "./charts.js";

const main = document.getElementById("main");
const statusEl = document.getElementById("status");
const params = new URLSearchParams(location.search);
const at = params.get("at");
const path = location.pathname;

const esc = (s) => String(s ?? "").replace(/[&<>"']/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;",
  '"': "&quot;", "'": "&#39;"}[c]));
const pct = (part, whole) => (whole > 0 ? Math.min(100, (100 * part) / whole) : 0);
const mib = (n) => (n >= 1048576 ? `${(n / 1048576).toFixed(2)} TiB` : n >= 1024 ? `${(n / 1024).toFixed(1)} GiB` : `${n} MiB`);
// Cores summed over cards, in cards' worth (800% = 8 cards) once past a handful of cards.
const cores = (pctSum) => (pctSum > 400 ? `${(pctSum / 100).toFixed(1)} cards` : `${pctSum}%`);
const when = (ts) => (ts ? new Date(ts * 1000).toLocaleString() : "-");
const enc = encodeURIComponent;

// Links keep the moment being looked at.
function href(p, extra) {
  const q = new URLSearchParams(extra || {});
  if (at) q.set("at", at);
  const s = q.toString();
  return s ? `${p}?${s}` : p;
}

function setStatus(text, cls) {
  statusEl.textContent = text;
  statusEl.className = `status ${cls}`;
}

// ---- pieces ---------------------------------------------------------------------------------
function sliceTitle(s) {
  return `${s.pod} (${s.container}): ${s.mem} MiB, ${s.cores}% cores, ${s.used} MiB used, ${s.phase}`;
}

// A slice's label where it fits: the bar is about 240 px (1000 px big) and a letter about 6.5 px;
// a slice too narrow for four letters has none (its title still says everything).
function sliceLabel(name, widthPct, big) {
  const fits = Math.floor((widthPct / 100) * (big ? 1000 : 240) / 6.5) - 1;
  if (fits < 4) return "";
  return `<span>${esc(name.length <= fits ? name : `${name.slice(0, fits - 1)}…`)}</span>`;
}

function bar(card, big) {
  const slices = card.slices.map((s) => {
    const w = pct(s.mem, card.devmem);
    const used = pct(s.used, s.mem);
    return `<a class="slice ${esc(s.phase)}" data-pod="${esc(s.pod)}" style="width:${w}%"
      href="${href(`/pods/${s.pod.split("/").map(enc).join("/")}`)}" title="${esc(sliceTitle(s))}">
      ${sliceLabel(s.pod.split("/")[1], w, big)}<i class="used" style="width:${used}%"></i></a>`;
  }).join("");
  return `<div class="bar${big ? " big" : ""}" title="${card.mem_alloc}/${card.devmem} MiB given">${slices}</div>`;
}

function health(card) {
  return card.healthy ? "" : `<span class="badge bad" title="${esc(card.health_reason)}">unhealthy</span>`;
}

function cardBox(card) {
  return `<div class="card${card.healthy ? "" : " unhealthy"}" data-card="${esc(card.uuid)}">
    <div class="meta"><a href="${href(`/cards/${enc(card.uuid)}`)}">#${card.index} ${esc(card.type)}</a>
    <span>NUMA ${card.numa} ${health(card)}</span></div>
    ${bar(card, false)}
    <div class="meta" title="${mib(card.mem_alloc)} of ${mib(card.devmem)} given, ${mib(card.used)} used;
    ${card.cores_alloc}% of ${card.devcore}% cores; ${card.slices.length} of ${card.count} slices">
    <span>${mib(card.mem_alloc)} given · ${mib(card.used)} used</span>
    <span>${card.cores_alloc}% · ${card.slices.length}/${card.count}</span></div></div>`;
}

function nodeBox(node) {
  const stale = node.stale ? ` <span class="badge warn">stale since ${esc(when(node.seen_at))}</span>` : "";
  return `<section class="node" data-node="${esc(node.name)}">
    <h3><a href="${href(`/nodes/${enc(node.name)}`)}">${esc(node.name)}</a>${stale}</h3>
    <div class="cards">${node.cards.map(cardBox).join("")}</div></section>`;
}

function cardRows(rows, score) {
  if (!rows.length) return `<p class="muted">None.</p>`;
  return `<table><tr><th>card</th><th>node</th><th>type</th><th>${score}</th><th>memory given</th>
    <th>cores</th><th>pods</th></tr>${rows.map((r) => `<tr>
    <td><a href="${href(`/cards/${enc(r.uuid)}`)}">${esc(r.uuid)}</a></td>
    <td><a href="${href(`/nodes/${enc(r.node)}`)}">${esc(r.node)}</a></td><td>${esc(r.type)}</td>
    <td>${Math.round(100 * (score === "busy" ? r.busy : r.stranded))}%</td>
    <td>${mib(r.mem_alloc)}/${mib(r.devmem)}</td><td>${r.cores_alloc}%</td><td>${r.pods}</td></tr>`).join("")}
    </table>`;
}

function pager(d, base) {
  const pages = Math.max(1, Math.ceil(d.total / d.page_size));
  const current = Math.floor(d.offset / d.page_size);
  const q = (n) => Object.fromEntries(Object.entries({q: d.q, phase: d.phase, page: n}).filter(([, v]) => v));
  const prev = current > 0 ? `<a href="${href(base, q(current - 1))}">‹ previous</a>` : "";
  const next = current + 1 < pages ? `<a href="${href(base, q(current + 1))}">next ›</a>` : "";
  return `<div class="pager">${prev}<span>page ${current + 1} of ${pages} (${d.total})</span>${next}</div>`;
}

function filterForm(fields, hidden, extra) {
  const keep = {...(hidden || {}), ...(at ? {at} : {})};
  return `<form class="filters" method="get">${fields.map(([name, label, value]) =>
    `<input name="${name}" placeholder="${label}" aria-label="${label}" value="${esc(value)}">`).join("")}
    ${Object.entries(keep).filter(([, v]) => v).map(([k, v]) => `<input type="hidden" name="${k}" value="${esc(v)}">`).join("")}
    ${extra || ""}<button>Filter</button></form>`;
}

const ago = (s) => (s == null ? "-" : s < 90 ? `${Math.round(s)} s` : s < 5400 ? `${Math.round(s / 60)} min` :
  s < 172800 ? `${(s / 3600).toFixed(1)} h` : `${(s / 86400).toFixed(1)} d`);

function rangePicker(d) {
  return `<nav class="ranges" aria-label="chart range">${["hour", "day", "week"].map((r) =>
    `<a data-range="${r}" class="${d.range === r ? "active" : ""}" href="${href(path, {range: r})}">last ${r}</a>`).join("")}
    <span class="muted">${d.chart ? `${d.chart.t.length} points, ${ago(d.chart.step_s)} each` : ""}</span></nav>`;
}

function charts(d, name, scope) {
  return `<h2>Allocated vs used</h2>${rangePicker(d)}<div class="charts">${chartSlot("memory", name, scope)}
    ${chartSlot("cores", name, scope)}</div>`;
}

function table(head, rows, empty) {
  if (!rows.length) return `<p class="muted">${empty || "None."}</p>`;
  return `<table><tr>${head.map((h) => `<th>${h}</th>`).join("")}</tr>${rows.join("")}</table>`;
}

const nodeLink = (n) => `<a href="${href(`/nodes/${enc(n)}`)}">${esc(n)}</a>`;
const cardLink = (u) => `<a href="${href(`/cards/${enc(u)}`)}">${esc(u)}</a>`;
const podLink = (p) => `<a href="${href(`/pods/${p.split("/").map(enc).join("/")}`)}">${esc(p)}</a>`;

function nodeRows(rows) {
  return table(["node", "cards", "memory allocated", "memory used", "cores allocated", "cores used"], rows.map((n) =>
    `<tr data-node="${esc(n.name)}"><td>${nodeLink(n.name)}</td><td>${n.cards}</td>
    <td>${mib(n.mem_alloc)} / ${mib(n.mem_total)}</td><td>${mib(n.mem_used)}</td>
    <td>${n.cores_alloc}% / ${n.cores_total}%</td><td>${n.cores_used}%</td></tr>`));
}

// ---- pages ----------------------------------------------------------------------------------
const pages = {
  overview(d) {
    const tile = (label, value, sub, key) => `<div class="tile" data-tile="${key}">${label}<b>${value}</b><span class="muted">${sub || ""}</span></div>`;
    const f = d.fragmentation;
    const idle = d.idle;
    return `<h1>Overview</h1><div class="tiles">
      ${tile("Nodes", d.nodes, d.stale_nodes ? `${d.stale_nodes} stale` : "", "nodes")}
      ${tile("Cards", d.cards, d.unhealthy_cards ? `${d.unhealthy_cards} unhealthy` : "all healthy", "cards")}
      ${tile("Slices", `${d.slices.allocated}/${d.slices.total}`, "given / slots", "slices")}
      ${tile("Memory allocated", `${pct(d.memory.allocated, d.memory.total).toFixed(1)}%`, `${mib(d.memory.allocated)} of ${mib(d.memory.total)}`, "mem-alloc")}
      ${tile("Memory used", `${pct(d.memory.used, d.memory.total).toFixed(1)}%`, mib(d.memory.used), "mem-used")}
      ${tile("Cores allocated", `${pct(d.cores.allocated, d.cores.total).toFixed(1)}%`, `${cores(d.cores.allocated)} of ${cores(d.cores.total)}`, "cores-alloc")}
      ${tile("Cores used", `${pct(d.cores.used, d.cores.total).toFixed(1)}%`, `${cores(d.cores.used)} (SM)`, "cores-used")}
      ${tile("Pods running", `<span data-count="Running">${d.pods.Running}</span>`, `${d.pods.Starting} starting, ${d.pods.Reserved} reserved`, "running")}
      ${tile("Pods pending", `<a data-count="Pending" href="${href("/pods", {phase: "Pending"})}">${d.pods.Pending}</a>`, `${d.pods.Failed} failed`, "pending")}
      ${tile("Pods finished", `<a data-count="Finished" href="${href("/pods", {phase: "Finished"})}">${d.finished}</a>`, "kept for their retention", "finished")}
      ${tile("Held but idle", `${idle.count}`, `${mib(idle.mem)}, ${idle.cores}% cores`, "idle")}
      ${tile("Stranded memory", mib(f.stranded_mem), `${mib(f.free_on_partly_used)} free on ${f.partly_used_cards} partly used cards`, "stranded")}
      </div>${charts(d, "cluster", "cluster")}
      <div class="columns"><div><h2>Top nodes by memory allocated</h2>${nodeRows(d.top_nodes.allocated)}</div>
      <div><h2>Top nodes by memory used</h2>${nodeRows(d.top_nodes.used)}</div></div>
      <div class="columns"><div><h2>Busiest cards (allocated)</h2>${cardRows(d.busiest, "busy")}</div>
      <div><h2>Top cards by memory used</h2>${table(["card", "node", "used", "allocated", "SM used", "pods"], d.top_used.map((r) =>
        `<tr><td>${cardLink(r.uuid)}</td><td>${nodeLink(r.node)}</td><td>${mib(r.used)}</td><td>${mib(r.mem_alloc)}/${mib(r.devmem)}</td>
        <td>${r.cores_used}%</td><td>${r.pods}</td></tr>`))}</div></div>
      <div class="columns"><div><h2>GPU types</h2>${table(["type", "cards", "memory", "allocated", "used"], d.types.map((t) =>
        `<tr data-type="${esc(t.type)}"><td>${esc(t.type)}</td><td>${t.cards}</td><td>${mib(t.mem_total)}</td>
        <td>${pct(t.mem_alloc, t.mem_total).toFixed(1)}%</td><td>${pct(t.mem_used, t.mem_total).toFixed(1)}%</td></tr>`))}</div>
      <div><h2>Held but idle</h2><p class="muted">Slices whose pod used under 5% of its cards' SMs for
      ${ago(idle.after_s)} or more, most memory first.</p>${table(["pod", "card", "memory held", "used", "cores", "idle for"], idle.slices.map((x) =>
        `<tr data-idle="${esc(x.pod)}"><td>${podLink(x.pod)}</td><td>${cardLink(x.uuid)}</td><td>${mib(x.mem)}</td><td>${mib(x.used)}</td>
        <td>${x.cores}%</td><td>${ago(x.idle_s)}</td></tr>`))}</div></div>
      <h2>Most fragmented cards</h2><p class="muted">Capacity no new pod can use: memory left with no cores or
      slots, or cores left with no memory.</p>${cardRows(d.fragmented, "stranded")}`;
  },
  nodes(d) {
    return `<h1>Nodes</h1>${filterForm([["q", "node name contains", d.q]])}${pager(d, "/nodes")}
      ${d.nodes.map(nodeBox).join("") || `<p class="muted">No nodes.</p>`}${pager(d, "/nodes")}`;
  },
  node(d) {
    const t = d.totals;
    return `<h1>Node ${esc(d.node.name)}</h1><p class="muted">generation ${d.node.generation}, last inventory
      ${esc(when(d.node.seen_at))}</p><p class="totals" data-totals>${t.cards} cards · memory ${mib(t.mem_alloc)} allocated,
      ${mib(t.mem_used)} used of ${mib(t.mem_total)} · cores ${t.cores_alloc}% allocated, ${t.cores_used}% used of
      ${t.cores_total}%</p>${nodeBox(d.node)}${charts(d, d.node.name, "node")}`;
  },
  card(d) {
    const c = d.card;
    return `<h1>Card ${esc(c.uuid)}</h1><div data-card="${esc(c.uuid)}">
      <p><a href="${href(`/nodes/${enc(c.node)}`)}">${esc(c.node)}</a> · #${c.index} · ${esc(c.type)} · NUMA ${c.numa}
      · ${esc(c.mode)} · ${c.healthy ? `<span class="badge ok">healthy</span>` : `<span class="badge bad">unhealthy</span> ${esc(c.health_reason)}`}</p>
      ${bar(c, true)}<p>${mib(c.mem_alloc)} of ${mib(c.devmem)} given, ${mib(c.used)} used · ${c.cores_alloc}% of
      ${c.devcore}% cores allocated, ${c.cores_used}% used (SM) · ${c.slices.length}/${c.count} slices</p></div>
      <h2>Slices</h2><table><tr><th>pod</th><th>container</th><th>memory</th><th>used</th><th>cores</th><th>phase</th></tr>
      ${c.slices.map((s) => `<tr data-pod="${esc(s.pod)}"><td><a href="${href(`/pods/${s.pod.split("/").map(enc).join("/")}`)}">${esc(s.pod)}</a></td>
      <td>${esc(s.container)}</td><td>${s.mem} MiB</td><td>${s.used} MiB</td><td>${s.cores}%</td><td>${esc(s.phase)}</td></tr>`).join("")}</table>
      ${charts(d, c.uuid, "card")}
      <h2>History</h2><table class="feed">${d.history.map((h) => `<tr><td>${esc(when(h.ts))}</td><td>${esc(h.kind)}</td>
      <td>${esc(h.text)}</td></tr>`).join("") || `<tr><td class="muted">No events yet.</td></tr>`}</table>`;
  },
  pods(d) {
    const rows = d.pods.map((p) => `<tr data-pod="${esc(`${p.namespace}/${p.name}`)}">
      <td><a href="${href(`/pods/${enc(p.namespace)}/${enc(p.name)}`)}">${esc(p.namespace)}/${esc(p.name)}</a></td>
      <td>${esc(p.phase)}</td><td>${p.node ? `<a href="${href(`/nodes/${enc(p.node)}`)}">${esc(p.node)}</a>` : "-"}</td>
      <td>${p.cards.map((c) => `${esc(c.uuid)} ${c.mem} MiB/${c.cores}% (${c.used} used)`).join("<br>")}</td>
      <td>${p.phase === "Pending" ? esc(summary(p.reasons)) : p.phase === "Finished" ? `ran ${ago(p.ran_s)}, ended
      ${esc(when(p.ended_at))} (${esc(p.why)})` : ""}</td></tr>`).join("");
    const phases = `<nav class="ranges">${["", ...d.phases].map((ph) => `<a class="${d.phase === ph ? "active" : ""}"
      data-phase="${ph}" href="${href("/pods", ph ? {phase: ph} : {})}">${ph || "live"}</a>`).join("")}</nav>`;
    return `<h1>GPU pods</h1>${phases}${filterForm([["q", "namespace/name contains", d.q]], {phase: d.phase})}
      ${pager(d, "/pods")}<table><tr><th>pod</th><th>phase</th><th>node</th><th>cards</th><th>why pending / how it ended</th></tr>${rows}</table>`;
  },
  pod(d) {
    const p = d.pod;
    const limits = p.limits.map((l, i) => (l ? `<li>container ${i}: ${l.gpus} GPU, ${l.mem ? `${l.mem} MiB` :
      l.mem_percent <= 100 ? `${l.mem_percent}% memory` : "whole memory"}, ${l.cores}% cores</li>` : "")).join("");
    const reasons = p.reasons.length ? `<h2>Why it is Pending</h2><p class="muted">From the scheduler's
      pod.unschedulable event of ${esc(when(p.reasons_at))}, per node (as gpubus explain gives them).</p>
      <table class="reasons"><tr><th>node</th><th>reason</th></tr>${p.reasons.map((r) =>
      `<tr><td><a href="${href(`/nodes/${enc(r.node)}`)}">${esc(r.node)}</a></td><td>${esc(r.reason)}</td></tr>`).join("")}</table>`
      : p.phase === "Pending" ? `<p class="muted">Admitted; no scheduling verdict yet.</p>` : "";
    const w = p.waiting;
    const waiting = w ? `<h2>Waiting</h2><p data-waited>Pending for <b>${ago(w.waited_s)}</b>${w.verdict_age_s != null ?
      ` · newest verdict ${ago(w.verdict_age_s)} ago` : ""}.</p><h3>Since that verdict, what may let it fit</h3>
      ${table(["time", "event", "node", "what"], w.unblocking.map((u) => `<tr data-unblock><td>${esc(when(u.ts))}</td><td>${esc(u.kind)}</td>
      <td>${u.node ? nodeLink(u.node) : "-"}</td><td>${esc(u.text)}</td></tr>`), "Nothing yet: no slice freed, no card recovered or added on those nodes.")}` : "";
    const done = p.phase === "Finished" ? `<h2>Finished</h2><p data-finished>Ran <b>${ago(p.ran_s)}</b> on ${nodeLink(p.node)},
      from ${esc(when(p.placed_at))} to ${esc(when(p.ended_at))} · ${esc(p.why)}. Usage columns show the most it used.</p>` : "";
    return `<h1>Pod ${esc(p.namespace)}/${esc(p.name)}</h1><p><span class="badge" data-phase="${esc(p.phase)}">${esc(p.phase)}</span>
      ${p.node ? `on <a href="${href(`/nodes/${enc(p.node)}`)}">${esc(p.node)}</a>` : ""} · uid ${esc(p.uid || "-")}
      ${p.failure ? ` · <span class="badge bad">${esc(p.failure)}</span>` : ""}
      ${p.over_limit_at ? ` · <span class="badge warn">over its limit at ${esc(when(p.over_limit_at))}</span>` : ""}</p>
      ${done}${limits ? `<h2>Limits</h2><ul>${limits}</ul>` : ""}
      ${p.cards.length ? `<h2>Cards</h2><table><tr><th>card</th><th>container</th><th>memory</th><th>${p.phase === "Finished" ? "most used" : "used"}</th><th>cores</th><th>SM used</th></tr>
      ${p.cards.map((c) => `<tr data-card="${esc(c.uuid)}"><td><a href="${href(`/cards/${enc(c.uuid)}`)}">${esc(c.uuid)}</a></td>
      <td>${esc(c.container)}</td><td>${c.mem} MiB</td><td>${c.used} MiB</td><td>${c.cores}%</td><td>${c.sm ?? 0}%</td></tr>`).join("")}</table>` : ""}
      ${waiting}${reasons}<p><a href="${href("/events", {pod: `${p.namespace}/${p.name}`})}">Its events</a></p>`;
  },
  events(d) {
    const f = d.filter;
    const toggle = `<label class="toggle"><input type="checkbox" name="heartbeats" value="1" ${f.heartbeats ? "checked" : ""}>
      heartbeats (inventory.snapshot, usage.sample)</label>`;
    return `<h1>Events</h1>${filterForm([["node", "node", f.node], ["pod", "namespace/name", f.pod],
      ["card", "card UUID", f.card], ["subject", "subject contains", f.subject],
      ["kind", "kind (allocation, pod.unschedulable…)", f.kind]], {}, toggle)}
      ${d.entries.length ? "" : `<p class="muted">${d.live ? "No events match yet." : "The feed is live only."}</p>`}
      <table class="feed">${d.entries.map((e) => `<tr class="${e.undecodable ? "undecodable" : ""}"
      data-kind="${esc(e.kind)}" title="${esc(e.subject)}"><td>${esc(e.seq)}</td><td>${esc(e.line)}</td></tr>`).join("")}</table>`;
  },
};

function summary(reasons) {
  return reasons.slice(0, 3).map((r) => `${r.node}: ${r.reason}`).join("; ") + (reasons.length > 3 ? " …" : "");
}

function render(d) {
  const draw = pages[d.page];
  clearCharts();
  main.innerHTML = draw ? draw(d) : `<p>Unknown page ${esc(d.page)}</p>`;
  drawCharts(main, d.chart);
  main.dataset.page = d.page;
  main.dataset.rendered = String((Number(main.dataset.rendered) || 0) + 1);
}

function showStatus(s, live) {
  main.dataset.seq = s.seq;
  const moment = live ? `live · ${s.events} events` : `as at ${when(Number(at))}`;
  setStatus(s.undecodable ? `${moment} · ${s.undecodable} undecodable` : moment, live ? "live" : "past");
}

// ---- data -----------------------------------------------------------------------------------
const query = new URLSearchParams(params);
query.delete("at");
query.set("path", path);

function follow() {
  const source = new EventSource(`/api/stream?${query}`);
  source.addEventListener("page", (m) => render(JSON.parse(m.data)));
  source.addEventListener("status", (m) => showStatus(JSON.parse(m.data), true));
  source.addEventListener("gone", (m) => {
    clearCharts();
    main.innerHTML = `<h1>Gone</h1><p>${esc(JSON.parse(m.data).error)}</p>`;
    setStatus("gone", "down");
    source.close();
  });
  source.onerror = () => setStatus("reconnecting…", "down");
}

async function once() {
  setStatus("rebuilding from the stream…", "past");
  const r = await fetch(`/api/page?${query}&at=${enc(at)}`);
  const d = await r.json();
  if (!r.ok) {
    main.innerHTML = `<h1>${r.status}</h1><p>${esc(d.error)}</p>`;
    setStatus("error", "down");
    return;
  }
  render(d);
  showStatus(d.status, false);
}

// ---- time travel ----------------------------------------------------------------------------
const slider = document.getElementById("slider");
const whenInput = document.getElementById("when");
let range = null;

function localValue(ts) {
  const d = new Date(ts * 1000);
  return new Date(d.getTime() - d.getTimezoneOffset() * 60000).toISOString().slice(0, 19);
}

function travel(ts) {
  const q = new URLSearchParams(location.search);
  if (ts === null) q.delete("at"); else q.set("at", ts.toFixed(1));
  const s = q.toString();
  location.assign(s ? `${path}?${s}` : path);
}

async function setupTravel() {
  const r = await fetch("/api/timeline");
  if (!r.ok) return;
  range = await r.json();
  const first = range.first || range.now - 3600;
  const shown = at ? Number(at) : range.now;
  slider.value = String(Math.round((1000 * (shown - first)) / Math.max(1, range.now - first)));
  whenInput.value = localValue(shown);
  slider.oninput = () => { whenInput.value = localValue(first + (Number(slider.value) / 1000) * (range.now - first)); };
  slider.onchange = () => travel(first + (Number(slider.value) / 1000) * (range.now - first));
}

document.getElementById("travel").addEventListener("submit", (e) => {
  e.preventDefault();
  const ts = new Date(whenInput.value).getTime() / 1000;
  if (Number.isFinite(ts)) travel(ts);
});
document.getElementById("live").addEventListener("click", () => travel(null));

for (const a of document.querySelectorAll("[data-nav]")) {
  const p = a.getAttribute("href");
  if (p === path || (p !== "/" && path.startsWith(p))) a.classList.add("active");
  a.setAttribute("href", href(p));
}

setupTravel();
if (at) once(); else follow();
