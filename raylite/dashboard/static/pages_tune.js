/* raylite dashboard: the Tune page. Experiments come from the KV feed that
   raylite/tune/execution/dashboard_feed.py writes; every value from it is user data and
   goes through esc(). */
"use strict";

const TUNE_CHART_TRIALS = 20;  // lines on the chart: the best trials and the running ones
const TUNE_CONFIG_COLUMNS = 8;
const TUNE_METRIC_COLUMNS = 6;

function pageTune(main) {
  main.innerHTML = `<h1>Tune</h1><div class="card" id="experiments"></div><div id="experiment"></div>`;
  let selected = null;
  every(2000, async () => {
    const list = await api("api/dashboard/tune?trials=0");
    if ((!selected || !list.some(e => e.name === selected)) && list.length) selected = list[0].name;
    document.getElementById("experiments").innerHTML = `<h2>Experiments</h2>` + table([
      ["experiment", e => esc(e.name)], ["status", e => badge(e.status)],
      ["metric", e => (e.metric ? `${esc(e.metric)} <span class="muted">${esc(e.mode || "")}</span>` : "–")],
      ["best", e => (e.best ? esc(fmtSig(e.best.value)) : "–"), { num: true }],
      ["trials", e => esc(e.num_trials), { num: true }], ["by status", e => trialCounts(e.trial_counts)],
      ["scheduler", e => esc(e.scheduler)], ["searcher", e => esc(e.searcher)],
      ["started", e => fmtTime(e.started_at)],
      ["running for", e => fmtDur((e.status === "RUNNING" ? Date.now() / 1000 : e.updated_at) - e.started_at), { num: true }]],
      list, { empty: "No Tune experiments yet: they appear here as soon as Tuner.fit() or tune.run() starts.",
              rowAttrs: e => `class="clickable ${e.name === selected ? "selected" : ""}" data-name="${esc(e.name)}"` });
    document.querySelectorAll("#experiments tr[data-name]").forEach(tr => tr.addEventListener("click", () => {
      if (selected === tr.dataset.name) return;
      selected = tr.dataset.name;
      document.getElementById("experiment").innerHTML = "";
      document.querySelectorAll("#experiments tr[data-name]").forEach(r => r.classList.toggle("selected", r === tr));
    }));
    if (!selected) return;
    const [exp] = await api(`api/dashboard/tune?name=${encodeURIComponent(selected)}`);
    if (exp && exp.name === selected) drawExperiment(exp);
  });
}

function trialCounts(counts) {
  return Object.entries(counts || {}).map(([s, n]) => `${badge(s)} ${esc(n)}`).join(" ") || "–";
}

function drawExperiment(exp) {
  const holder = document.getElementById("experiment");
  if (!holder.querySelector("#expinfo")) {
    holder.innerHTML = `<div class="card" id="expinfo"></div><div class="card" id="trials"></div><div id="tunecharts"></div>`;
  }
  const trials = exp.trials || [];
  const best = exp.best ? exp.best.trial_id : null;
  document.getElementById("expinfo").innerHTML = `<h2>${esc(exp.name)} ${badge(exp.status)}</h2>
    <div class="kv"><span>metric</span><span>${exp.metric ? `${esc(exp.metric)} (${esc(exp.mode || "no mode")})` : "none set"}</span></div>
    <div class="kv"><span>best trial</span><span class="mono">${exp.best ? `${esc(exp.best.trial_id)}: ${esc(fmtSig(exp.best.value))}` : "–"}</span></div>
    <div class="kv"><span>scheduler / searcher</span><span>${esc(exp.scheduler)} / ${esc(exp.searcher)}</span></div>
    <div class="kv"><span>storage</span><span class="mono">${esc(exp.storage_path)}</span></div>
    ${exp.error ? `<pre class="trace">${esc(exp.error)}</pre>` : ""}`;
  const configKeys = columnKeys(trials.map(t => t.config || {}), TUNE_CONFIG_COLUMNS);
  const metricKeys = columnKeys(trials.map(t => t.metrics || {}), TUNE_METRIC_COLUMNS, exp.metric);
  const columns = [["trial", t => `<span class="mono">${esc(t.trial_id)}</span>${t.trial_id === best ? ' <span class="badge best">best</span>' : ""}`],
    ["status", t => badge(t.status)]];
  const numeric = (pick, k) => trials.every(t => ["number", "undefined"].includes(typeof (pick(t) || {})[k]));
  configKeys.forEach(k => columns.push([k, t => cell((t.config || {})[k]), { num: numeric(t => t.config, k) }]));
  columns.push(["iter", t => esc(t.iterations), { num: true }], ["total time", t => fmtDur(t.time_total_s), { num: true }]);
  metricKeys.forEach(k => columns.push([k, t => cell((t.metrics || {})[k]), { num: numeric(t => t.metrics, k) }]));
  if (exp.metric && exp.mode) columns.push([`best ${exp.metric}`, t => cell(t.best), { num: true }]);
  columns.push(["error", t => (t.error ? `<span class="mono">${esc(t.error)}</span>` : "")]);
  const left = exp.trials_left_out ? `<div class="sub">${esc(exp.trials_left_out)} more trials are left out: the page keeps
    the best, the unfinished and the newest ${esc(trials.length)}.</div>` : "";
  document.getElementById("trials").innerHTML = `<h2>Trials</h2>${left}` + table(columns, trials, {
    empty: "No trials yet: the first appears when the searcher suggests a config.",
    rowAttrs: t => `data-trial="${esc(t.trial_id)}"${t.trial_id === best ? ' class="best"' : ""}` });
  drawTrialChart(exp, trials);
}

/* The keys of the rows' dicts, those that differ between rows first (what the search
   varies), the metric first of all, at most `limit`. */
function columnKeys(dicts, limit, first) {
  const keys = [];
  dicts.forEach(d => Object.keys(d).forEach(k => { if (!keys.includes(k)) keys.push(k); }));
  const varies = k => new Set(dicts.map(d => JSON.stringify(d[k]))).size > 1;
  const ordered = [...keys.filter(varies), ...keys.filter(k => !varies(k))];
  const out = first && keys.includes(first) ? [first, ...ordered.filter(k => k !== first)] : ordered;
  return out.slice(0, limit);
}

/* Five significant digits: a learning rate of 1e-5 stays readable. */
function fmtSig(v) {
  if (v === undefined || v === null || isNaN(v)) return "–";
  return Number.isInteger(v) ? String(v) : String(Number(Number(v).toPrecision(5)));
}

function cell(v) {
  if (v === undefined || v === null) return "–";
  if (typeof v === "number") return esc(fmtSig(v));
  return esc(typeof v === "object" ? JSON.stringify(v) : v);
}

function drawTrialChart(exp, trials) {
  const holder = document.getElementById("tunecharts");
  const metric = exp.chart_metric;
  const withPoints = trials.filter(t => (t.history || []).length);
  if (!withPoints.length) {
    holder.innerHTML = `<div class="card empty">${esc(metric
      ? `The chart appears with the first result that reports ${metric}.`
      : "The chart appears with the first numeric result (tune.report({...}))."
    )}</div>`;
    return;
  }
  holder.querySelectorAll(".empty").forEach(e => e.remove());
  const shown = chartTrials(exp, withPoints);
  const xs = [...new Set(shown.flatMap(t => t.history.map(p => p[0])))].sort((a, b) => a - b);
  const data = [xs, ...shown.map(t => {
    const m = new Map(t.history.map(([x, y]) => [x, y]));
    return xs.map(x => (m.has(x) ? m.get(x) : null));
  })];
  const title = `${metric} per trial` + (shown.length < withPoints.length
    ? ` (${shown.length} of ${withPoints.length}: the best and the running)` : "");
  liveChart(holder, `tune:${metric}`, title, shown.map(t => t.trial_id), data,
    { time: false, xLabel: "training_iteration" });
}

/* All trials when few; else the best by their best value (the mode says which way) and the running ones. */
function chartTrials(exp, trials) {
  if (trials.length <= TUNE_CHART_TRIALS) return trials;
  const sign = exp.mode === "min" ? 1 : -1;
  const scored = trials.filter(t => t.best !== null && t.best !== undefined).sort((a, b) => sign * (a.best - b.best));
  const pick = new Set(trials.filter(t => t.status === "RUNNING").slice(-TUNE_CHART_TRIALS / 2));
  for (const t of scored.length ? scored : trials.slice().reverse()) {
    if (pick.size >= TUNE_CHART_TRIALS) break;
    pick.add(t);
  }
  return trials.filter(t => pick.has(t));
}
