/* raylite dashboard: shared helpers (fetching, formatting with units, tables, charts).
   Plain browser JavaScript, no build step; every page lives in pages_*.js. */
"use strict";

const RL = {
  timers: [],       // intervals of the page on screen, cleared on navigation
  charts: [],       // uPlot instances of the page on screen
  page: null,
};

async function api(path) {
  const r = await fetch(path, { credentials: "same-origin" });
  if (!r.ok) {
    const err = new Error(`${path}: HTTP ${r.status}`);
    err.status = r.status;
    throw err;
  }
  const type = r.headers.get("content-type") || "";
  return type.includes("json") ? r.json() : r.text();
}

/* The server's route paths, fetched once, so a page calls only the APIs this server has
   (a route module of another part may be missing) and the console stays free of 404s. */
let ROUTES = null;
async function apiOr(path, fallback) {
  if (ROUTES === null) ROUTES = await api("api/dashboard/routes");
  const route = "/" + path.split("?")[0];
  const served = ROUTES.some(r => r === route || (r.includes("{") && route.startsWith(r.split("{")[0])));
  return served ? api(path) : fallback;
}

function esc(v) {
  return String(v === undefined || v === null ? "" : v)
    .replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");
}

function fmtBytes(n) {
  if (n === undefined || n === null || isNaN(n)) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0; let v = Number(n);
  while (Math.abs(v) >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return `${v >= 100 || i === 0 ? v.toFixed(0) : v.toFixed(1)} ${units[i]}`;
}
function fmtPct(p) { return (p === undefined || p === null || isNaN(p)) ? "–" : `${Number(p).toFixed(1)} %`; }
function fmtNum(n, digits = 2) {
  if (n === undefined || n === null || isNaN(n)) return "–";
  const v = Number(n);
  return Number.isInteger(v) ? String(v) : v.toFixed(digits);
}
function fmtDur(s) {
  if (s === undefined || s === null || isNaN(s) || s < 0) return "–";
  if (s === 0) return "0 ms";
  if (s < 1) return `${(s * 1000).toFixed(s < 0.01 ? 2 : 0)} ms`;
  if (s < 120) return `${s.toFixed(1)} s`;
  if (s < 7200) return `${(s / 60).toFixed(1)} min`;
  return `${(s / 3600).toFixed(1)} h`;
}
function fmtTime(t) {
  if (!t) return "–";
  const ms = t > 1e12 ? t : t * 1000;
  return new Date(ms).toLocaleTimeString();
}
/* 24-hour wall clock of epoch seconds: "14:05" or "14:05:30". */
function clock(t, seconds) {
  const d = new Date(t * 1000);
  const p = n => String(n).padStart(2, "0");
  return `${p(d.getHours())}:${p(d.getMinutes())}${seconds ? ":" + p(d.getSeconds()) : ""}`;
}
function fmtResource(name, v) {
  if (name === "memory" || name === "object_store_memory") return fmtBytes(v);
  if (name === "CPU") return `${fmtNum(v)} cores`;
  if (name === "GPU") return `${fmtNum(v)} GPUs`;
  return fmtNum(v);
}
function short(id, n = 8) { return id ? esc(String(id).slice(0, n)) : "–"; }
function badge(state) { return `<span class="badge ${esc(state)}">${esc(state || "?")}</span>`; }
function bar(frac) {
  const f = Math.max(0, Math.min(1, frac || 0));
  const cls = f > 0.95 ? "full" : f > 0.8 ? "hot" : "";
  return `<div class="bar ${cls}"><div style="width:${(f * 100).toFixed(1)}%"></div></div>`;
}

/* A table: columns are [header, row => html, {num: true}] */
function table(columns, rows, opts = {}) {
  if (!rows.length) return `<div class="empty">${esc(opts.empty || "Nothing to show.")}</div>`;
  const head = columns.map(c => `<th class="${c[2] && c[2].num ? "num" : ""}">${esc(c[0])}</th>`).join("");
  const body = rows.map((r, i) => {
    const attrs = opts.rowAttrs ? opts.rowAttrs(r, i) : "";
    return `<tr ${attrs}>` + columns.map(c => `<td class="${c[2] && c[2].num ? "num" : ""}">${c[1](r)}</td>`).join("") + "</tr>";
  }).join("");
  return `<table><thead><tr>${head}</tr></thead><tbody>${body}</tbody></table>`;
}

function every(ms, fn) {
  let busy = false;
  const tick = async () => {
    if (busy) return;
    busy = true;
    try { await fn(); setStatus(""); } catch (e) { setStatus(String(e.message || e), true); } finally { busy = false; }
  };
  tick();
  RL.timers.push(setInterval(tick, ms));
}

function setStatus(text, isError) {
  const el = document.getElementById("status");
  el.textContent = isError ? `⚠ ${text}` : `updated ${new Date().toLocaleTimeString()}`;
  el.className = isError ? "status err" : "status";
}

/* States keep their colour on every chart (red is always a failure). */
const STATE_COLORS = {
  FINISHED: "#2b8a3e", ALIVE: "#2b8a3e", RUNNING: "#2f6fdb", FAILED: "#c62828", DEAD: "#c62828",
  PENDING: "#e67700", PENDING_ARGS_AVAIL: "#e67700", PENDING_NODE_ASSIGNMENT: "#f59f00",
  SUBMITTED_TO_WORKER: "#ae3ec9", RESTARTING: "#ae3ec9",
};
const PALETTE = ["#2f6fdb", "#e8590c", "#2b8a3e", "#ae3ec9", "#c92a2a", "#0b7285", "#5f3dc4", "#e67700", "#364fc7", "#087f5b"];

/* A line chart in `el`. data = [xs, ys1, ys2...]; labels = series names.
   opts.time: x is epoch seconds; opts.unit: formatter for y values; opts.xLabel. */
function lineChart(el, title, labels, data, opts = {}) {
  el.innerHTML = `<div class="title">${esc(title)}</div><div class="plot"></div>`;
  const plotEl = el.querySelector(".plot");
  const fmt = opts.unit || (v => fmtNum(v));
  const width = Math.max(320, (el.clientWidth || 600) - 4);
  const series = [{ label: opts.xLabel || (opts.time === false ? "step" : "time"),
                    value: (u, v) => v === null || v === undefined ? "–" : (opts.time === false ? fmtNum(v) : fmtTime(v)) }];
  labels.forEach((l, i) => series.push({
    label: l, stroke: STATE_COLORS[l] || PALETTE[i % PALETTE.length], width: 2, spanGaps: true,
    points: { show: opts.points !== undefined ? opts.points : true, size: 4 },
    value: (u, v) => (v === null || v === undefined ? "–" : fmt(v)),
    paths: opts.bars ? uPlot.paths.bars({ size: [0.6, 40] }) : undefined,
    fill: opts.bars ? (STATE_COLORS[l] || PALETTE[i % PALETTE.length]) + "99" : undefined,
  }));
  const chart = new uPlot({
    width, height: opts.height || 200,
    scales: { x: { time: opts.time !== false },
              y: { range: (u, min, max) => [Math.min(0, min), Math.max(max > 0 ? max * 1.1 : 1, opts.minMax || 0)] } },
    axes: [{ stroke: "#667085", grid: { stroke: "#f0f1f4" }, space: 90,
             values: opts.time === false ? undefined : (u, vals) => {
               const span = vals.length > 1 ? vals[vals.length - 1] - vals[0] : 0;
               return vals.map(v => clock(v, span <= 300));
             } },
           { stroke: "#667085", grid: { stroke: "#f0f1f4" }, size: 70, values: (u, vals) => vals.map(v => fmt(v)) }],
    series, legend: { live: true },
  }, data, plotEl);
  RL.charts.push(chart);
  return chart;
}

/* Series from /api/dashboard/timeseries as uPlot data: [time, ...one column per name]. */
function columns(ts, names) {
  return [ts.time || [], ...names.map(n => ts[n] || (ts.time || []).map(() => null))];
}

/* Per-second rate of a counter column (null where unknown or reset). */
function rate(times, values) {
  return values.map((v, i) => {
    if (i === 0 || v === null || values[i - 1] === null) return null;
    const dt = times[i] - times[i - 1];
    const dv = v - values[i - 1];
    return dt > 0 && dv >= 0 ? dv / dt : null;
  });
}

/* "name{a=\"x\",b=\"y\"}" -> {name, labels: {a: "x", b: "y"}} */
function parseKey(key) {
  const i = key.indexOf("{");
  if (i < 0) return { name: key, labels: {} };
  const labels = {};
  const re = /(\w+)="((?:[^"\\]|\\.)*)"/g;
  let m;
  while ((m = re.exec(key.slice(i))) !== null) labels[m[1]] = m[2].replace(/\\"/g, '"').replace(/\\\\/g, "\\");
  return { name: key.slice(0, i), labels };
}
function labelText(labels, skip = []) {
  return Object.entries(labels).filter(([k]) => !skip.includes(k)).map(([k, v]) => `${k}=${v}`).join(", ") || "value";
}
