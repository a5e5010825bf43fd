/* raylite dashboard: Train, Serve and Metrics pages (charts from the head's own history). */
"use strict";

/* Per-rank points [[step, value], ...] of every rank -> uPlot data aligned on step. */
function rankColumns(ranks, pick) {
  const names = Object.keys(ranks).sort((a, b) => Number(a) - Number(b));
  const steps = new Set();
  const maps = names.map(r => {
    const m = new Map((pick(ranks[r]) || []).map(([s, v]) => [s, v]));
    m.forEach((_, s) => steps.add(s));
    return m;
  });
  const xs = [...steps].sort((a, b) => a - b);
  return { labels: names.map(r => `rank ${r}`), data: [xs, ...maps.map(m => xs.map(s => (m.has(s) ? m.get(s) : null)))] };
}

/* Keeps one chart per key in `holder`, re-created when its series change, else updated in place. */
function liveChart(holder, key, title, labels, data, opts) {
  let box = holder.querySelector(`[data-key="${CSS.escape(key)}"]`);
  if (!box) {
    box = document.createElement("div");
    box.className = "card chart";
    box.dataset.key = key;
    holder.appendChild(box);
  }
  const sig = labels.join("|");
  const points = data.slice(1).reduce((n, col) => n + col.filter(v => v !== null && v !== undefined).length, 0);
  box.dataset.series = labels.join(",");
  box.dataset.points = String(points);
  if (box._chart && box._sig === sig) {
    box._chart.setData(data);
  } else {
    if (box._chart) { box._chart.destroy(); RL.charts = RL.charts.filter(c => c !== box._chart); }
    box._chart = lineChart(box, title, labels, data, opts);
    box._sig = sig;
  }
  return box;
}

function pageTrain(main) {
  main.innerHTML = `<h1>Train</h1><div class="card" id="runs"></div><div id="run"></div>`;
  let selected = null;
  every(2000, async () => {
    const runs = await api("api/dashboard/train");
    if (!selected && runs.length) selected = runs[0].name;
    document.getElementById("runs").innerHTML = `<h2>Runs</h2>` + table([
      ["run", r => esc(r.name)], ["trainer", r => esc(r.trainer)], ["status", r => badge(r.status)],
      ["attempt", r => esc(r.attempt), { num: true }], ["workers", r => esc(r.num_workers), { num: true }],
      ["reports", r => esc(r.reports), { num: true }], ["checkpoints kept", r => esc((r.checkpoints || []).length), { num: true }],
      ["started", r => fmtTime(r.started_at)], ["running for", r => fmtDur((r.status === "RUNNING" ? Date.now() / 1000 : r.updated_at) - r.started_at), { num: true }]],
      runs, { empty: "No Train runs yet: they appear here as soon as TorchTrainer.fit() starts.",
              rowAttrs: r => `class="clickable ${r.name === selected ? "selected" : ""}" data-name="${esc(r.name)}"` });
    document.querySelectorAll("#runs tr[data-name]").forEach(tr => tr.addEventListener("click", () => {
      selected = tr.dataset.name; document.getElementById("run").innerHTML = "";
    }));
    const run = runs.find(r => r.name === selected);
    if (run) drawRun(run);
  });
}

function drawRun(run) {
  const holder = document.getElementById("run");
  if (!holder.querySelector("#runinfo")) {
    holder.innerHTML = `<div class="card" id="runinfo"></div><h2>Reported metrics per rank</h2><div class="grid wide" id="metriccharts"></div>
      <h2>Step durations per rank</h2><div class="grid wide" id="stepcharts"></div><div class="card" id="ckpts"></div>`;
  }
  const ranks = run.ranks || {};
  const stepStats = Object.keys(ranks).sort().map(r => {
    const s = (ranks[r].step_s || []).map(p => p[1]);
    const mean = s.length ? s.reduce((a, b) => a + b, 0) / s.length : null;
    return { rank: r, n: s.length, last: s.length ? s[s.length - 1] : null, mean, max: s.length ? Math.max(...s) : null };
  });
  document.getElementById("runinfo").innerHTML = `<h2>${esc(run.name)} ${badge(run.status)}</h2>
    <div class="kv"><span>attempt</span><span>${esc(run.attempt)}</span></div>
    ${run.error ? `<pre class="trace">${esc(run.error)}</pre>` : ""}
    ${table([["rank", s => esc(s.rank), { num: true }], ["steps timed", s => esc(s.n), { num: true }],
      ["last step", s => fmtDur(s.last), { num: true }], ["mean step", s => fmtDur(s.mean), { num: true }],
      ["slowest step", s => fmtDur(s.max), { num: true }]], stepStats, { empty: "No reports yet." })}`;
  const metrics = new Set();
  Object.values(ranks).forEach(r => Object.keys(r.metrics || {}).forEach(m => metrics.add(m)));
  const mc = document.getElementById("metriccharts");
  if (!metrics.size) mc.innerHTML = `<div class="empty">Charts appear with the first train.report().</div>`;
  else mc.querySelectorAll(".empty").forEach(e => e.remove());
  for (const m of [...metrics].sort()) {
    const { labels, data } = rankColumns(ranks, r => (r.metrics || {})[m]);
    liveChart(mc, `metric:${m}`, m, labels, data, { time: false, xLabel: "report" });
  }
  const steps = rankColumns(ranks, r => r.step_s);
  if (steps.data[0].length) {
    liveChart(document.getElementById("stepcharts"), "step_s", "time between reports", steps.labels, steps.data,
      { time: false, xLabel: "report", unit: v => fmtDur(v) });
  }
  document.getElementById("ckpts").innerHTML = `<h2>Checkpoints kept</h2>` + table([
    ["folder", c => `<span class="mono">${esc(c.dir)}</span>`],
    ["metrics", c => `<span class="mono">${esc(Object.entries(c.metrics || {}).filter(([k]) => !["timestamp", "time_total_s"].includes(k))
      .map(([k, v]) => `${k}=${typeof v === "number" ? fmtNum(v, 4) : v}`).join("  "))}</span>`]],
    run.checkpoints || [], { empty: "No checkpoints." });
}

function pageServe(main) {
  main.innerHTML = `<h1>Serve</h1><div id="serve"></div><h2 id="traffic" hidden>Traffic</h2><div class="grid wide" id="servecharts"></div>`;
  every(2000, async () => {
    const [{ snapshot }, ts] = await Promise.all([api("api/dashboard/serve"),
      api(`api/dashboard/timeseries?prefix=raylite_serve_&since=${Date.now() / 1000 - 900}`)]);
    const el = document.getElementById("serve");
    const apps = snapshot && snapshot.applications ? snapshot.applications : null;
    if (!apps || !Object.keys(apps).length) {
      el.innerHTML = `<div class="card empty">No Serve applications are running (start one with serve.run()).</div>`;
      return;
    }
    const rows = []; const replicas = [];
    for (const [app, a] of Object.entries(apps)) {
      for (const [dep, d] of Object.entries(a.deployments || {})) {
        const key = `{application="${app}",deployment="${dep}"}`;
        const reqRate = lastRate(ts, `raylite_serve_requests_total${key}`);
        const errRate = lastRate(ts, `raylite_serve_errors_total${key}`);
        rows.push({ app, dep, d, reqRate, errRate, route: a.route_prefix });
        (d.replicas || []).forEach(r => replicas.push({ app, dep, r }));
      }
    }
    el.innerHTML = `<div class="card"><h2>Deployments</h2>${table([
      ["application", x => esc(x.app)], ["route", x => `<span class="mono">${esc(x.route || "")}</span>`], ["deployment", x => esc(x.dep)],
      ["status", x => badge(x.d.status || "RUNNING")], ["replicas", x => esc((x.d.replicas || []).length), { num: true }],
      ["requests / s", x => perSecond(x.d.requests_per_s ?? x.reqRate), { num: true }],
      ["error rate", x => x.d.error_rate !== undefined ? fmtPct(100 * x.d.error_rate) : perSecond(x.errRate), { num: true }],
      ["p50", x => latency(x.d, "p50"), { num: true }], ["p90", x => latency(x.d, "p90"), { num: true }],
      ["p99", x => latency(x.d, "p99"), { num: true }],
      ["requests total", x => esc(x.d.requests_total ?? x.d.requests ?? "–"), { num: true }]], rows,
      { rowAttrs: x => `data-deployment="${esc(x.dep)}" data-requests="${esc(x.d.requests_total ?? 0)}"` })}</div>
      <div class="card"><h2>Replicas</h2>${table([
        ["application", x => esc(x.app)], ["deployment", x => esc(x.dep)],
        ["replica", x => `<span class="mono">${esc(x.r.replica_id || x.r.actor_name || x.r.actor_id || "")}</span>`],
        ["state", x => badge(x.r.state)], ["node", x => `<span class="mono">${short(x.r.node_id, 12)}</span>`],
        ["pid", x => esc(x.r.pid || "–"), { num: true }]], replicas, { empty: "No replicas." })}</div>`;
    const holder = document.getElementById("servecharts");
    const reqKeys = Object.keys(ts).filter(k => k.startsWith("raylite_serve_requests_total"));
    if (reqKeys.length) {
      liveChart(holder, "rps", "requests per second", reqKeys.map(k => parseKey(k).labels.deployment),
        [ts.time, ...reqKeys.map(k => rate(ts.time, ts[k]))], { unit: v => `${fmtNum(v)}/s` });
      const errKeys = reqKeys.map(k => k.replace("requests_total", "errors_total"));
      liveChart(holder, "eps", "errors per second", errKeys.map(k => parseKey(k).labels.deployment),
        [ts.time, ...errKeys.map(k => (ts[k] ? rate(ts.time, ts[k]) : ts.time.map(() => null)))], { unit: v => `${fmtNum(v)}/s` });
    }
    const latKeys = Object.keys(ts).filter(k => k.startsWith("raylite_serve_latency_ms"));
    document.getElementById("traffic").hidden = !(reqKeys.length || latKeys.length);
    if (latKeys.length) {
      liveChart(holder, "lat", "latency percentiles", latKeys.map(k => { const l = parseKey(k).labels; return `${l.deployment} q${l.quantile}`; }),
        columns(ts, latKeys), { unit: v => `${fmtNum(v, 1)} ms` });
    }
  });
}

function perSecond(v) { return v === null || v === undefined ? "–" : `${fmtNum(v)} /s`; }
function latency(d, q) {
  const v = d.latency_ms ? d.latency_ms[q] : d[`${q}_ms`];
  return v === undefined || v === null ? "–" : `${fmtNum(v, 1)} ms`;
}
function lastRate(ts, key) {
  const col = ts[key];
  if (!col) return null;
  const r = rate(ts.time, col).filter(v => v !== null);
  return r.length ? r[r.length - 1] : null;
}

const CLUSTER_CHARTS = [
  ["CPU use", ["raylite_cluster_cpu_percent"], ["CPU %"], v => `${fmtNum(v, 1)} %`, 100],
  ["Machine memory", ["raylite_cluster_mem_used_bytes", "raylite_cluster_mem_total_bytes"], ["used", "total"], fmtBytes, 2 ** 30],
  ["Object store", ["raylite_cluster_object_store_used_bytes", "raylite_cluster_object_store_spilled_bytes"], ["in memory", "spilled"], fmtBytes, 2 ** 20],
];

function pageMetrics(main) {
  main.innerHTML = `<h1>Metrics</h1><div class="filters"><label>window <select id="win">
    <option value="300">5 min</option><option value="900" selected>15 min</option><option value="3600">1 h</option></select></label>
    <span class="muted">kept by the head itself (one hour at 5 s); Prometheus can scrape the same at <a href="metrics">/metrics</a></span></div>
    <h2>Cluster</h2><div class="grid wide" id="mc"></div><h2>Tasks and actors</h2><div class="grid wide" id="mt"></div>
    <h2>Serve and Train</h2><div class="grid wide" id="ml"></div><h2>User metrics</h2><div class="grid wide" id="mu"></div>`;
  document.getElementById("win").addEventListener("change", () => route());
  every(5000, async () => {
    const since = Date.now() / 1000 - Number(document.getElementById("win").value);
    const ts = await api(`api/dashboard/timeseries?prefix=raylite_&since=${since}`);
    const mc = document.getElementById("mc");
    for (const [title, keys, labels, unit, minMax] of CLUSTER_CHARTS) {
      liveChart(mc, title, title, labels, columns(ts, keys), { unit, minMax, points: false });
    }
    const mt = document.getElementById("mt");
    for (const [fam, title] of [["raylite_tasks{", "Tasks by state"], ["raylite_actors{", "Actors by state"]]) {
      const keys = Object.keys(ts).filter(k => k.startsWith(fam)).sort();
      liveChart(mt, fam, title, keys.map(k => parseKey(k).labels.state), columns(ts, keys), { points: false });
    }
    const ml = document.getElementById("ml");
    const req = Object.keys(ts).filter(k => k.startsWith("raylite_serve_requests_total"));
    if (req.length) liveChart(ml, "serve", "Serve requests per second", req.map(k => parseKey(k).labels.deployment),
      [ts.time, ...req.map(k => rate(ts.time, ts[k]))], { unit: v => `${fmtNum(v)}/s`, points: false });
    const train = Object.keys(ts).filter(k => k.startsWith("raylite_train_metric"));
    const byMetric = {};
    train.forEach(k => { const l = parseKey(k).labels; (byMetric[`${l.run}: ${l.metric}`] ||= []).push(k); });
    for (const [title, keys] of Object.entries(byMetric)) {
      liveChart(ml, `train:${title}`, `Train ${title}`, keys.map(k => `rank ${parseKey(k).labels.rank}`), columns(ts, keys), { points: false });
    }
    if (!ml.querySelector(".chart")) ml.innerHTML = `<div class="empty">No Serve or Train metrics yet.</div>`;
    else ml.querySelectorAll(".empty").forEach(e => e.remove());
    await drawUserMetrics(since);
  });
}

/* Every series that is not raylite's own: gauges as they are, counters as rates, histograms as means. */
async function drawUserMetrics(since) {
  const names = Object.keys(await api(`api/dashboard/timeseries?prefix=&since=1e18`)).filter(k => k !== "time" && !k.startsWith("raylite_"));
  const mu = document.getElementById("mu");
  if (!names.length) {
    mu.innerHTML = `<div class="empty">No user metrics yet: record some with raylite.util.metrics (Counter, Gauge, Histogram).</div>`;
    return;
  }
  const wanted = names.filter(k => !parseKey(k).name.endsWith("_bucket"));
  const qs = wanted.map(n => `name=${encodeURIComponent(n)}`).join("&");
  const ts = await api(`api/dashboard/timeseries?since=${since}&${qs}`);
  const families = {};
  for (const k of wanted) {
    const { name, labels } = parseKey(k);
    let fam = name; let kind = "gauge";
    if (name.endsWith("_total")) kind = "counter";
    else if (name.endsWith("_count")) { fam = name.slice(0, -6); kind = "histogram"; }
    else if (name.endsWith("_sum")) continue;
    (families[fam] ||= { kind, series: [] }).series.push({ key: k, labels });
  }
  if (mu.querySelector(".empty")) mu.innerHTML = "";
  for (const [fam, f] of Object.entries(families).sort()) {
    let cols; let title = fam; let unit;
    if (f.kind === "counter") {
      cols = f.series.map(s => rate(ts.time, ts[s.key])); title = `${fam} (per second)`; unit = v => `${fmtNum(v)}/s`;
    } else if (f.kind === "histogram") {
      cols = f.series.map(s => {
        const sums = ts[s.key.replace(`${fam}_count`, `${fam}_sum`)] || []; const counts = ts[s.key];
        return counts.map((c, i) => (i && c !== null && counts[i - 1] !== null && c > counts[i - 1]
          ? (sums[i] - sums[i - 1]) / (c - counts[i - 1]) : null));
      });
      title = `${fam} (mean of new observations)`;
    } else {
      cols = f.series.map(s => ts[s.key]);
    }
    liveChart(mu, `user:${fam}`, title, f.series.map(s => labelText(s.labels)), [ts.time, ...cols], { unit, points: false });
  }
}
