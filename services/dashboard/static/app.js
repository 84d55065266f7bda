// gpubus dashboard: renders the page data the server pushes (server-sent events) or, for a moment
// in the past (?at=), the data it rebuilt from the stream. No framework, no network but the server.
"use strict";

const main = document.getElementById("main");
const statusEl = document.getElementById("status");
const params = new URLSearchParams(location.search);
const at = params.get("at");
const path = location.pathname;

const esc = (s) => String(s ?? "").replace(/[&<>"']/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;",
  '"': "&quot;", "'": "&#39;"}[c]));
const pct = (part, whole) => (whole > 0 ? Math.min(100, (100 * part) / whole) : 0);
const mib = (n) => (n >= 1024 ? `${(n / 1024).toFixed(1)} GiB` : `${n} MiB`);
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

function bar(card, big) {
  const slices = card.slices.map((s) => {
    const w = pct(s.mem, card.devmem);
    const used = pct(s.used, s.mem);
    return `<a class="slice ${esc(s.phase)}" data-pod="${esc(s.pod)}" style="width:${w}%"
      href="${href(`/pods/${s.pod.split("/").map(enc).join("/")}`)}" title="${esc(sliceTitle(s))}">
      <span>${esc(s.pod.split("/")[1])}</span><i class="used" style="width:${used}%"></i></a>`;
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

function filterForm(fields) {
  return `<form class="filters" method="get">${fields.map(([name, label, value]) =>
    `<input name="${name}" placeholder="${label}" value="${esc(value)}">`).join("")}
    ${at ? `<input type="hidden" name="at" value="${esc(at)}">` : ""}<button>Filter</button></form>`;
}

function spark(series) {
  if (series.length < 2) return `<p class="muted">No usage samples yet.</p>`;
  const t0 = series[0].ts, t1 = series[series.length - 1].ts || t0 + 1;
  const top = Math.max(1, ...series.map((p) => p.used));
  const pts = series.map((p) => `${(100 * (p.ts - t0)) / Math.max(1, t1 - t0)},${58 - (56 * p.used) / top}`);
  return `<svg class="spark" viewBox="0 0 100 60" preserveAspectRatio="none"><polyline fill="none"
    stroke="#1b3fa8" stroke-width="1" vector-effect="non-scaling-stroke" points="${pts.join(" ")}"/></svg>
    <p class="muted">memory used, ${when(t0)} – ${when(t1)}, peak ${mib(top)}</p>`;
}

// ---- pages ----------------------------------------------------------------------------------
const pages = {
  overview(d) {
    const tile = (label, value, sub) => `<div class="tile">${label}<b>${value}</b><span class="muted">${sub || ""}</span></div>`;
    return `<h1>Overview</h1><div class="tiles">
      ${tile("Nodes", d.nodes, d.stale_nodes ? `${d.stale_nodes} stale` : "")}
      ${tile("Cards", d.cards, d.unhealthy_cards ? `${d.unhealthy_cards} unhealthy` : "all healthy")}
      ${tile("Slices", `${d.slices.allocated}/${d.slices.total}`, "given / slots")}
      ${tile("Memory given", `${pct(d.memory.allocated, d.memory.total).toFixed(1)}%`, `${mib(d.memory.allocated)} of ${mib(d.memory.total)}`)}
      ${tile("Memory used", `${pct(d.memory.used, d.memory.total).toFixed(1)}%`, mib(d.memory.used))}
      ${tile("Cores given", `${pct(d.cores.allocated, d.cores.total).toFixed(1)}%`, `${d.cores.allocated}% of ${d.cores.total}%`)}
      ${tile("Pods running", d.pods.Running, `${d.pods.Starting} starting, ${d.pods.Reserved} reserved`)}
      ${tile("Pods pending", `<a href="${href("/pods", {phase: "Pending"})}">${d.pods.Pending}</a>`, `${d.pods.Failed} failed`)}
      </div><h2>Busiest cards</h2>${cardRows(d.busiest, "busy")}
      <h2>Most fragmented cards</h2><p class="muted">Capacity no new pod can use: memory left with no cores or
      slots, or cores left with no memory.</p>${cardRows(d.fragmented, "stranded")}`;
  },
  nodes(d) {
    return `<h1>Nodes</h1>${filterForm([["q", "node name contains", d.q]])}${pager(d, "/nodes")}
      ${d.nodes.map(nodeBox).join("") || `<p class="muted">No nodes.</p>`}${pager(d, "/nodes")}`;
  },
  node(d) {
    return `<h1>Node ${esc(d.node.name)}</h1><p class="muted">generation ${d.node.generation}, last inventory
      ${esc(when(d.node.seen_at))}</p>${nodeBox(d.node)}`;
  },
  card(d) {
    const c = d.card;
    return `<h1>Card ${esc(c.uuid)}</h1><div data-card="${esc(c.uuid)}">
      <p><a href="${href(`/nodes/${enc(c.node)}`)}">${esc(c.node)}</a> · #${c.index} · ${esc(c.type)} · NUMA ${c.numa}
      · ${esc(c.mode)} · ${c.healthy ? `<span class="badge ok">healthy</span>` : `<span class="badge bad">unhealthy</span> ${esc(c.health_reason)}`}</p>
      ${bar(c, true)}<p>${mib(c.mem_alloc)} of ${mib(c.devmem)} given, ${mib(c.used)} used · ${c.cores_alloc}% of
      ${c.devcore}% cores · ${c.slices.length}/${c.count} slices</p></div>
      <h2>Slices</h2><table><tr><th>pod</th><th>container</th><th>memory</th><th>used</th><th>cores</th><th>phase</th></tr>
      ${c.slices.map((s) => `<tr data-pod="${esc(s.pod)}"><td><a href="${href(`/pods/${s.pod.split("/").map(enc).join("/")}`)}">${esc(s.pod)}</a></td>
      <td>${esc(s.container)}</td><td>${s.mem} MiB</td><td>${s.used} MiB</td><td>${s.cores}%</td><td>${esc(s.phase)}</td></tr>`).join("")}</table>
      <h2>Memory used</h2>${spark(d.series)}
      <h2>History</h2><table class="feed">${d.history.map((h) => `<tr><td>${esc(when(h.ts))}</td><td>${esc(h.kind)}</td>
      <td>${esc(h.text)}</td></tr>`).join("") || `<tr><td class="muted">No events yet.</td></tr>`}</table>`;
  },
  pods(d) {
    const rows = d.pods.map((p) => `<tr data-pod="${esc(`${p.namespace}/${p.name}`)}">
      <td><a href="${href(`/pods/${enc(p.namespace)}/${enc(p.name)}`)}">${esc(p.namespace)}/${esc(p.name)}</a></td>
      <td>${esc(p.phase)}</td><td>${p.node ? `<a href="${href(`/nodes/${enc(p.node)}`)}">${esc(p.node)}</a>` : "-"}</td>
      <td>${p.cards.map((c) => `${esc(c.uuid)} ${c.mem} MiB/${c.cores}% (${c.used} used)`).join("<br>")}</td>
      <td>${p.phase === "Pending" ? esc(summary(p.reasons)) : ""}</td></tr>`).join("");
    return `<h1>GPU pods</h1>${filterForm([["q", "namespace/name contains", d.q], ["phase", "phase (Running, Pending…)", d.phase]])}
      ${pager(d, "/pods")}<table><tr><th>pod</th><th>phase</th><th>node</th><th>cards</th><th>why pending</th></tr>${rows}</table>`;
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
    return `<h1>Pod ${esc(p.namespace)}/${esc(p.name)}</h1><p><span class="badge">${esc(p.phase)}</span>
      ${p.node ? `on <a href="${href(`/nodes/${enc(p.node)}`)}">${esc(p.node)}</a>` : ""} · uid ${esc(p.uid || "-")}
      ${p.failure ? ` · <span class="badge bad">${esc(p.failure)}</span>` : ""}
      ${p.over_limit_at ? ` · <span class="badge warn">over its limit at ${esc(when(p.over_limit_at))}</span>` : ""}</p>
      ${limits ? `<h2>Limits</h2><ul>${limits}</ul>` : ""}
      ${p.cards.length ? `<h2>Cards</h2><table><tr><th>card</th><th>container</th><th>memory</th><th>used</th><th>cores</th></tr>
      ${p.cards.map((c) => `<tr data-card="${esc(c.uuid)}"><td><a href="${href(`/cards/${enc(c.uuid)}`)}">${esc(c.uuid)}</a></td>
      <td>${esc(c.container)}</td><td>${c.mem} MiB</td><td>${c.used} MiB</td><td>${c.cores}%</td></tr>`).join("")}</table>` : ""}
      ${reasons}<p><a href="${href("/events", {pod: `${p.namespace}/${p.name}`})}">Its events</a></p>`;
  },
  events(d) {
    const f = d.filter;
    return `<h1>Events</h1>${filterForm([["node", "node", f.node], ["pod", "namespace/name", f.pod],
      ["kind", "kind (allocation, pod.unschedulable…)", f.kind]])}
      ${d.entries.length ? "" : `<p class="muted">${d.live ? "No events match yet." : "The feed is live only."}</p>`}
      <table class="feed">${d.entries.map((e) => `<tr class="${e.undecodable ? "undecodable" : ""}"
      data-kind="${esc(e.kind)}"><td>${esc(e.seq)}</td><td>${esc(e.line)}</td></tr>`).join("")}</table>`;
  },
};

function summary(reasons) {
  return reasons.slice(0, 3).map((r) => `${r.node}: ${r.reason}`).join("; ") + (reasons.length > 3 ? " …" : "");
}

function render(d) {
  const draw = pages[d.page];
  main.innerHTML = draw ? draw(d) : `<p>Unknown page ${esc(d.page)}</p>`;
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
