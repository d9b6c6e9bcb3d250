// The dashboard's page (--dashboard, launch/observe/dashboard.hpp), inside the binary: the
// machines that run programs often have no internet, so it loads nothing else. It asks
// /api/state every second (with the page's ?token= when there is one) and draws, with plain
// SVG: the program's graph (a node per program node, replicas grouped; each edge labelled
// with its calls per second and p99 over the last interval), the processes (host, pid,
// state, restarts, memory, CPU, last output), each method's rate and p99 over the last
// two minutes, and the launcher's events on a timeline.
#pragma once

#include <string_view>

namespace tlaunch::launch::observe {

inline constexpr std::string_view dashboard_page = R"tlaunch_page(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>tlaunch dashboard</title>
<style>
  body { font: 14px/1.4 system-ui, sans-serif; margin: 0; background: #f6f7f9; color: #1d2330; }
  header { background: #1d2330; color: #fff; padding: 10px 20px; display: flex; gap: 24px; align-items: baseline; }
  header h1 { font-size: 18px; margin: 0; }
  main { display: grid; grid-template-columns: 1fr 1fr; gap: 16px; padding: 16px; }
  section { background: #fff; border: 1px solid #dde1e7; border-radius: 6px; padding: 10px 14px; }
  section.wide { grid-column: 1 / 3; }
  h2 { font-size: 15px; margin: 4px 0 8px; }
  table { border-collapse: collapse; width: 100%; font-size: 13px; }
  th, td { text-align: left; padding: 3px 8px; border-bottom: 1px solid #eceff3; vertical-align: top; }
  td.num { text-align: right; font-variant-numeric: tabular-nums; }
  td.out { font-family: ui-monospace, monospace; font-size: 12px; white-space: pre-wrap; max-width: 420px; color: #445; }
  .state-running { color: #1a7f37; } .state-restarting, .state-starting { color: #9a6700; }
  .state-exited, .state-failed { color: #cf222e; }
  svg text { font-size: 12px; }
  .chart { display: inline-block; margin: 0 12px 12px 0; }
  #events li { font-family: ui-monospace, monospace; font-size: 12px; }
  #error { color: #cf222e; }
</style>
</head>
<body>
<header><h1>tlaunch</h1><span id="summary">connecting...</span><span id="error"></span></header>
<main>
<section><h2>Graph</h2><svg id="graph" width="600" height="380" role="img" aria-label="program graph"></svg></section>
<section><h2>Edges</h2><table id="edges"><thead><tr><th>caller</th><th>callee</th><th>method</th>
<th>calls/s</th><th>p99</th><th>in flight</th><th>errors</th><th>calls</th></tr></thead><tbody></tbody></table></section>
<section class="wide"><h2>Instances</h2><table id="instances"><thead><tr><th>process</th><th>host</th>
<th>pid</th><th>state</th><th>restarts</th><th>RSS</th><th>CPU</th><th>last output</th></tr></thead><tbody></tbody></table></section>
<section class="wide"><h2>Methods</h2><div id="charts"></div></section>
<section class="wide"><h2>Events</h2><svg id="timeline" width="1200" height="44"></svg><ul id="events"></ul></section>
</main>
<script>
"use strict";
const token = new URLSearchParams(location.search).get("token");
const query = token ? "?token=" + encodeURIComponent(token) : "";
const SVG = "http://www.w3.org/2000/svg";
function el(tag, attrs, text) {
  const e = document.createElementNS(SVG, tag);
  for (const k in attrs) e.setAttribute(k, attrs[k]);
  if (text !== undefined) e.textContent = text;
  return e;
}
function cell(row, text, cls) {
  const td = row.insertCell();
  td.textContent = text;
  if (cls) td.className = cls;
  return td;
}
function bytes(n) {
  if (n >= 1 << 30) return (n / (1 << 30)).toFixed(1) + " GiB";
  if (n >= 1 << 20) return (n / (1 << 20)).toFixed(1) + " MiB";
  if (n >= 1 << 10) return (n / (1 << 10)).toFixed(1) + " KiB";
  return n + " B";
}
// Seconds as the page writes them; negative: no call ended in the interval.
function duration(s) {
  if (s === null || s < 0) return "-";
  if (s >= 1) return s.toFixed(2) + " s";
  if (s >= 1e-3) return (s * 1e3).toFixed(2) + " ms";
  return (s * 1e6).toFixed(0) + " us";
}
function nodeOf(instance) { return instance.split("+")[0].split("/")[0]; }
// The p99 of bucket counts (bucket i: under 2^i microseconds), as the launcher computes it.
function p99(buckets) {
  const total = buckets.reduce((a, b) => a + b, 0);
  if (total <= 0) return -1;
  let seen = 0;
  for (let i = 0; i < buckets.length; ++i) {
    seen += buckets[i];
    if (seen * 100 >= total * 99) return Math.pow(2, i + 1 < buckets.length ? i : i - 1) * 1e-6;
  }
  return -1;
}

function drawGraph(state) {
  const svg = document.getElementById("graph");
  svg.replaceChildren();
  svg.appendChild(el("defs", {})).appendChild(el("marker", {id: "arrow", viewBox: "0 0 10 10", refX: "10", refY: "5",
      markerWidth: "8", markerHeight: "8", orient: "auto-start-reverse"})).appendChild(el("path", {d: "M 0 0 L 10 5 L 0 10 z", fill: "#57606a"}));
  const nodes = state.nodes;
  const W = 600, H = 380, cx = W / 2, cy = H / 2, r = Math.min(W, H) / 2 - 60;
  const pos = {};
  nodes.forEach((n, i) => {
    const a = 2 * Math.PI * i / nodes.length - Math.PI / 2;
    pos[n.name] = {x: cx + (nodes.length > 1 ? r * Math.cos(a) : 0), y: cy + (nodes.length > 1 ? r * Math.sin(a) : 0)};
  });
  // One arrow per (caller node, callee node): calls per second summed, p99 over the calls
  // of all their edges that ended in the last interval.
  const byPair = {};
  for (const e of state.edges) {
    const k = nodeOf(e.caller) + ">" + nodeOf(e.callee);
    const p = byPair[k] || (byPair[k] = {from: nodeOf(e.caller), to: nodeOf(e.callee), rate: 0, latency: []});
    p.rate += e.rate;
    e.latency.forEach((n, i) => { p.latency[i] = (p.latency[i] || 0) + n; });
  }
  for (const k in byPair) {
    const p = byPair[k], a = pos[p.from], b = pos[p.to];
    if (!a || !b) continue;
    const dx = b.x - a.x, dy = b.y - a.y, len = Math.hypot(dx, dy) || 1, pad = 46;
    const x1 = a.x + dx / len * pad, y1 = a.y + dy / len * pad, x2 = b.x - dx / len * pad, y2 = b.y - dy / len * pad;
    svg.appendChild(el("line", {x1, y1, x2, y2, stroke: "#57606a", "stroke-width": "1.5", "marker-end": "url(#arrow)", class: "edge"}));
    svg.appendChild(el("text", {x: (x1 + x2) / 2 + 6, y: (y1 + y2) / 2 - 6, class: "edge-label", fill: "#0a3069"},
        p.rate.toFixed(1) + "/s, p99 " + duration(p99(p.latency))));
  }
  for (const n of nodes) {
    const g = svg.appendChild(el("g", {class: "node"}));
    const label = n.replicas > 1 ? n.name + " \u00d7" + n.replicas : n.name;
    g.appendChild(el("circle", {cx: pos[n.name].x, cy: pos[n.name].y, r: Math.max(30, label.length * 4 + 8),
        fill: "#ddf4ff", stroke: "#0969da"}));
    g.appendChild(el("text", {x: pos[n.name].x, y: pos[n.name].y + 4, "text-anchor": "middle"}, label));
  }
}

// A method's rate (blue) and p99 (orange) over its points [t, rate, p99], each scaled to
// its own maximum.
function drawChart(method, points) {
  const W = 360, H = 110, pad = 28;
  const svg = el("svg", {width: W, height: H, class: "chart", "data-method": method});
  svg.appendChild(el("text", {x: 4, y: 12, "font-weight": "bold"}, method));
  const last = points[points.length - 1];
  svg.appendChild(el("text", {x: 4, y: H - 4, fill: "#0969da", class: "rate"}, last[1].toFixed(1) + " calls/s"));
  svg.appendChild(el("text", {x: W / 2, y: H - 4, fill: "#bc4c00", class: "p99"}, "p99 " + duration(last[2])));
  const t0 = points[0][0], t1 = Math.max(last[0], t0 + 1);
  const plot = (index, color) => {
    const vals = points.map(p => Math.max(0, p[index] || 0));
    const max = Math.max(...vals, 1e-9);
    const d = points.map((p, i) => (i ? "L" : "M") + (pad + (p[0] - t0) / (t1 - t0) * (W - 2 * pad)).toFixed(1) + " " +
        (H - pad - vals[i] / max * (H - 2 * pad - 10)).toFixed(1)).join(" ");
    svg.appendChild(el("path", {d, fill: "none", stroke: color, "stroke-width": "1.5"}));
  };
  plot(1, "#0969da");
  plot(2, "#bc4c00");
  return svg;
}

function render(state) {
  const t = state.elapsed_seconds;
  const callsPerSecond = state.edges.reduce((a, e) => a + e.rate, 0);
  document.getElementById("summary").textContent =
      state.instances + " instances, " + state.processes.length + " processes, " + state.state +
      ", " + callsPerSecond.toFixed(1) + " calls/s, up " + t.toFixed(0) + " s";
  drawGraph(state);

  const eb = document.querySelector("#edges tbody");
  eb.replaceChildren();
  for (const e of state.edges) {
    const row = eb.insertRow();
    cell(row, e.caller); cell(row, e.callee); cell(row, e.method);
    cell(row, e.rate.toFixed(1), "num");
    cell(row, duration(e.p99), "num");
    cell(row, e.in_flight, "num"); cell(row, e.errors, "num"); cell(row, e.calls, "num calls");
  }

  const ib = document.querySelector("#instances tbody");
  ib.replaceChildren();
  for (const p of state.processes) {
    const row = ib.insertRow();
    row.dataset.process = p.process;
    cell(row, p.process); cell(row, p.host || "(local)"); cell(row, p.pid || "-");
    cell(row, p.state, "state-" + p.state);
    cell(row, p.restarts, "num");
    cell(row, p.rss_bytes ? bytes(p.rss_bytes) : "-", "num");
    cell(row, p.cpu_percent >= 0 ? p.cpu_percent.toFixed(0) + " %" : "-", "num");
    cell(row, p.lines.slice(-3).join("\n"), "out");
  }

  const charts = document.getElementById("charts");
  charts.replaceChildren();
  for (const m of state.methods)
    if (m.points.length) charts.appendChild(drawChart(m.name, m.points));

  const tl = document.getElementById("timeline");
  tl.replaceChildren();
  tl.appendChild(el("line", {x1: 10, y1: 22, x2: 1190, y2: 22, stroke: "#8c959f"}));
  const span = Math.max(t, 1);
  for (const ev of state.events) {
    const x = 10 + ev.t / span * 1180;
    const bad = /failed|error|lost|killed/.test(ev.text);
    const mark = tl.appendChild(el("circle", {cx: x, cy: 22, r: 5, class: "event",
        fill: bad ? "#cf222e" : (/restart/.test(ev.text) ? "#9a6700" : "#0969da")}));
    mark.appendChild(el("title", {}, ev.t.toFixed(1) + " s: " + ev.text));
  }
  const ul = document.getElementById("events");
  ul.replaceChildren();
  for (const ev of state.events.slice(-12).reverse()) {
    const li = document.createElement("li");
    li.textContent = ev.t.toFixed(1) + " s  " + ev.text;
    ul.appendChild(li);
  }
}

async function tick() {
  try {
    const r = await fetch("/api/state" + query, {cache: "no-store"});
    if (!r.ok) throw new Error(r.status + " " + (await r.text()));
    render(await r.json());
    document.getElementById("error").textContent = "";
  } catch (e) {
    document.getElementById("error").textContent = "cannot read the launcher: " + e.message;
  }
  setTimeout(tick, 1000);
}
tick();
</script>
</body>
</html>
)tlaunch_page";

}  // namespace tlaunch::launch::observe
