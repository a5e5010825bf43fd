/* raylite dashboard: Overview, Nodes, Actors, Tasks, Jobs and Logs pages. */
"use strict";

function resourceCards(total, used) {
  const order = ["CPU", "GPU", "memory", "object_store_memory"];
  const rank = k => (order.indexOf(k) === -1 ? order.length : order.indexOf(k));
  const names = Object.keys(total).sort((a, b) => rank(a) - rank(b) || a.localeCompare(b));
  return names.map(k => {
    const t = total[k] || 0; const u = used[k] || 0;
    return `<div class="card"><div class="sub">${esc({ object_store_memory: "object store", memory: "memory (logical, reserved by tasks)" }[k] || k)} used / total</div>
      <div class="big">${esc(fmtResource(k, u))} <span class="muted">/ ${esc(fmtResource(k, t))}</span></div>${bar(t ? u / t : 0)}</div>`;
  }).join("");
}

function countCard(title, counts, link) {
  const rows = Object.entries(counts || {}).filter(([, n]) => n > 0);
  const body = rows.length ? rows.map(([s, n]) => `<div class="kv"><span>${badge(s)}</span><span>${n}</span></div>`).join("")
    : `<div class="muted">none</div>`;
  return `<div class="card"><h2><a href="#/${link}">${esc(title)}</a></h2>${body}</div>`;
}

function pageOverview(main) {
  main.innerHTML = `<h1>Cluster overview</h1><div id="ov"></div>`;
  every(2000, async () => {
    const [o, jobs] = await Promise.all([api("api/dashboard/overview"), apiOr("api/jobs/", [])]);
    const live = (Array.isArray(jobs) ? jobs : []).filter(j => ["RUNNING", "PENDING"].includes(j.status));
    const running = live.filter(j => j.type !== "DRIVER");
    const drivers = Array.isArray(jobs) && jobs.length ? live.filter(j => j.type === "DRIVER") : (o.drivers || []).filter(d => d.alive);
    const m = o.machine || {};
    const machineCards = m.mem_total_bytes ? `
      <div class="card"><div class="sub">machine CPU (all nodes)</div><div class="big">${fmtPct(m.cpu_percent)}
        <span class="muted">of ${esc(m.num_cpus)} cores</span></div>${bar(m.cpu_percent / 100)}</div>
      <div class="card"><div class="sub">machine memory used / total</div><div class="big">${fmtBytes(m.mem_used_bytes)}
        <span class="muted">/ ${fmtBytes(m.mem_total_bytes)}</span></div>${bar(m.mem_used_bytes / m.mem_total_bytes)}</div>` : "";
    const serveApps = o.serve && o.serve.applications ? Object.entries(o.serve.applications) : [];
    document.getElementById("ov").innerHTML = `
      <div class="grid">${resourceCards(o.resources_total, o.resources_used)}${machineCards}</div>
      <div class="grid">
        ${countCard("Nodes", o.nodes, "nodes")}
        ${countCard("Actors", o.actors, "actors")}
        ${countCard("Tasks", o.tasks, "tasks")}
        <div class="card"><h2><a href="#/jobs">Running jobs</a></h2>
          <div class="big">${running.length + drivers.length}</div>
          <div class="sub">${running.length} submitted, ${drivers.length} connected drivers</div></div>
      </div>
      <div class="grid wide">
        <div class="card"><h2><a href="#/train">Train runs</a></h2>${table([
          ["run", r => esc(r.name)], ["status", r => badge(r.status)], ["attempt", r => esc(r.attempt), { num: true }],
          ["workers", r => esc(r.num_workers), { num: true }], ["reports", r => esc(r.reports), { num: true }]],
          o.train || [], { empty: "No Train runs yet." })}</div>
        <div class="card"><h2><a href="#/tune">Tune experiments</a></h2>${table([
          ["experiment", e => esc(e.name)], ["status", e => badge(e.status)], ["trials", e => esc(e.num_trials), { num: true }],
          ["metric", e => esc(e.metric || "–")], ["best", e => (e.best ? esc(fmtNum(e.best.value, 4)) : "–"), { num: true }]],
          o.tune || [], { empty: "No Tune experiments yet." })}</div>
        <div class="card"><h2><a href="#/serve">Serve applications</a></h2>${table([
          ["application", ([n]) => esc(n)], ["status", ([, a]) => badge(a.status || "RUNNING")],
          ["route", ([, a]) => `<span class="mono">${esc(a.route_prefix || "")}</span>`],
          ["deployments", ([, a]) => esc(Object.keys(a.deployments || {}).length), { num: true }]],
          serveApps, { empty: "No Serve applications." })}</div>
      </div>
      <div class="card"><h2>Recent failures</h2>${(o.failures || []).length ? o.failures.slice().reverse().map(failureHtml).join("")
        : `<div class="empty">No failures.</div>`}</div>`;
  });
}

function failureHtml(f) {
  const what = f.name || f.func_or_class_name || f.task_id || f.actor_id || "?";
  const err = f.error_message || f.error || "";
  const tb = f.traceback || f.error_traceback || "";
  return `<div class="failure"><div class="what">${esc(f.type || "TASK")} ${esc(what)}
    <span class="muted mono">${short(f.task_id || f.actor_id, 12)}</span> ${f.error_type ? badge(f.error_type) : ""}</div>
    ${err && !tb.includes(err) ? `<div>${esc(err)}</div>` : ""}${tb ? `<pre class="trace">${esc(tb)}</pre>` : ""}</div>`;
}

function pageNodes(main) {
  main.innerHTML = `<h1>Nodes</h1><div id="nodes"></div>`;
  every(2000, async () => {
    const nodes = await api("api/dashboard/nodes");
    const html = [];
    html.push(`<div class="card">${table([
      ["node", n => `<span class="mono">${short(n.node_id, 12)}</span>${n.is_head ? ' <span class="badge">head</span>' : ""}`],
      ["IP", n => esc(n.ip)], ["state", n => badge(n.state) + (n.death_cause ? `<div class="sub">${esc(n.death_cause)}</div>` : "")],
      ["CPU", n => n.stats.cpu_percent === undefined ? "–" : `${fmtPct(n.stats.cpu_percent)} of ${esc(n.stats.num_cpus)} cores${bar(n.stats.cpu_percent / 100)}`],
      ["memory used / total", n => n.stats.mem_total_bytes ? `${fmtBytes(n.stats.mem_used_bytes)} / ${fmtBytes(n.stats.mem_total_bytes)}${bar(n.stats.mem_used_bytes / n.stats.mem_total_bytes)}` : "–"],
      ["object store used / capacity", n => n.stats.store_capacity_bytes ? `${fmtBytes(n.stats.store_used_bytes)} / ${fmtBytes(n.stats.store_capacity_bytes)}${bar(n.stats.store_used_bytes / n.stats.store_capacity_bytes)}` : "–"],
      ["spilled", n => fmtBytes(n.stats.store_spilled_bytes), { num: true }],
      ["logical CPU used / total", n => `${fmtNum(n.resources_used.CPU || 0)} / ${fmtNum(n.resources_total.CPU || 0)} cores`, { num: true }],
    ], nodes)}</div>`);
    for (const n of nodes) {
      const gpus = n.stats.gpus || [];
      if (gpus.length) {
        html.push(`<div class="card"><h2>GPUs of node ${short(n.node_id, 12)}</h2>${table([
          ["GPU", g => esc(`${g.index}: ${g.name}`)], ["utilisation", g => `${fmtPct(g.utilization_percent)}${bar(g.utilization_percent / 100)}`],
          ["memory used / total", g => `${fmtBytes(g.mem_used_bytes)} / ${fmtBytes(g.mem_total_bytes)}${bar(g.mem_used_bytes / g.mem_total_bytes)}`]], gpus)}</div>`);
      }
      if (n.state === "ALIVE") {
        const workers = (n.stats.workers || []).slice().sort((a, b) => b.rss_bytes - a.rss_bytes);
        const gpuUtil = Object.fromEntries(gpus.map(g => [g.index, g.utilization_percent]));
        const cols = [
          ["pid", w => esc(w.pid), { num: true }], ["worker", w => `<span class="mono">${short(w.worker_id, 12)}</span>`],
          ["state", w => badge(w.state)], ["actor", w => w.actor_id ? `<span class="mono">${short(w.actor_id, 12)}</span>` : "–"],
          ["CPU (of one core)", w => fmtPct(w.cpu_percent), { num: true }], ["memory (RSS)", w => fmtBytes(w.rss_bytes), { num: true }]];
        if (gpus.length) {
          cols.push(["GPUs (utilisation)", w => (w.gpu_ids || []).map(i => `${i} (${fmtPct(gpuUtil[i])})`).join(", ") || "–"],
                    ["GPU memory", w => (w.gpu_mem_bytes ? fmtBytes(w.gpu_mem_bytes) : "–"), { num: true }]);
        }
        html.push(`<div class="card"><h2>Workers on node ${short(n.node_id, 12)} (${esc(n.ip)})</h2>${table(cols,
          workers, { empty: "No worker processes." })}</div>`);
      }
    }
    document.getElementById("nodes").innerHTML = html.join("");
  });
}

function filterBar(id, fields) {
  return `<div class="filters" id="${id}">` + fields.map(([key, label, options]) => options
    ? `<label>${esc(label)} <select data-k="${key}"><option value="">all</option>${options.map(o => `<option>${esc(o)}</option>`).join("")}</select></label>`
    : `<label>${esc(label)} <input data-k="${key}" placeholder="filter"></label>`).join("") + `</div>`;
}
function readFilters(id) {
  const out = {};
  document.querySelectorAll(`#${id} [data-k]`).forEach(el => { out[el.dataset.k] = el.value.trim().toLowerCase(); });
  return out;
}
function matches(value, needle) { return !needle || String(value || "").toLowerCase().includes(needle); }

function pageActors(main) {
  main.innerHTML = `<h1>Actors</h1>${filterBar("af", [["state", "state", ["ALIVE", "PENDING", "RESTARTING", "DEAD"]],
    ["name", "name"], ["cls", "class"], ["node", "node"]])}<div class="card" id="actors"></div>`;
  let rows = [];
  const draw = () => {
    const f = readFilters("af");
    const shown = rows.filter(a => (!f.state || a.state.toLowerCase() === f.state) && matches(a.name, f.name)
      && matches(a.class_name, f.cls) && matches(a.node_id, f.node));
    document.getElementById("actors").innerHTML = table([
      ["actor", a => `<span class="mono">${short(a.actor_id, 12)}</span>`], ["class", a => esc(a.class_name)],
      ["name", a => esc(a.name) || "–"], ["state", a => badge(a.state)], ["node", a => `<span class="mono">${short(a.node_id, 12)}</span>`],
      ["pid", a => esc(a.pid || "–"), { num: true }], ["restarts", a => esc(a.num_restarts), { num: true }],
      ["death cause", a => !a.death_cause ? "" : a.death_cause.includes("\n") ? `<pre class="trace">${esc(a.death_cause)}</pre>`
        : `<span class="${a.state === "DEAD" ? "muted" : ""}">${esc(a.death_cause)}</span>`]],
      shown, { empty: rows.length ? "No actor matches the filters." : "No actors yet." });
  };
  document.getElementById("af").addEventListener("input", draw);
  every(2000, async () => { rows = await api("api/dashboard/actors"); draw(); });
}

function taskDuration(t) {
  const start = t.start_time_s; const end = t.end_time_s || (t.state === "RUNNING" ? Date.now() / 1000 : null);
  return start && end ? end - start : null;
}

function pageTasks(main) {
  main.innerHTML = `<h1>Tasks</h1>${filterBar("tf", [["state", "state", ["PENDING_ARGS_AVAIL", "PENDING_NODE_ASSIGNMENT", "RUNNING", "FINISHED", "FAILED"]],
    ["name", "name"], ["node", "node"]])}
    <div class="card"><h2>Timeline (per worker) <span class="sub muted"><span style="color:#2f6fdb">■</span> finished
      <span style="color:#e8590c">■</span> running <span style="color:#c62828">■</span> failed</span></h2>
      <div class="timeline" id="timeline"></div></div>
    <div class="card"><h2>Failures</h2><div id="failures"></div></div>
    <div class="card"><h2>Task attempts</h2><div id="tasks"></div></div>`;
  let rows = [];
  const draw = () => {
    const f = readFilters("tf");
    const shown = rows.filter(t => (!f.state || String(t.state).toLowerCase() === f.state) && matches(t.name || t.func_or_class_name, f.name)
      && matches(t.node_id, f.node));
    const failed = shown.filter(t => t.state === "FAILED");
    document.getElementById("failures").innerHTML = failed.length ? failed.slice(-20).reverse().map(failureHtml).join("")
      : `<div class="empty">No failed tasks.</div>`;
    document.getElementById("tasks").innerHTML = table([
      ["task", t => `<span class="mono">${short(t.task_id, 12)}</span>`], ["name", t => esc(t.name || t.func_or_class_name || "")],
      ["type", t => esc(t.type || "")], ["state", t => badge(t.state)], ["attempt", t => esc(t.attempt_number), { num: true }],
      ["node", t => `<span class="mono">${short(t.node_id, 8)}</span>`], ["pid", t => esc(t.pid || t.worker_pid || "–"), { num: true }],
      ["started", t => fmtTime(t.start_time_s)], ["duration", t => fmtDur(taskDuration(t)), { num: true }],
      ["error", t => esc(t.error_type || (t.error_message || "").slice(0, 80))]],
      shown.slice(-500).reverse(), { empty: rows.length ? "No task matches the filters." : "No tasks yet." });
    document.getElementById("timeline").innerHTML = timelineSvg(shown);
  };
  document.getElementById("tf").addEventListener("input", draw);
  every(2000, async () => { rows = await api("api/dashboard/tasks?limit=2000"); draw(); });
}

/* Per-worker spans of task and actor-call executions, as an SVG. */
function timelineSvg(tasks) {
  const spans = tasks.filter(t => t.start_time_s).map(t => ({
    lane: `node ${String(t.node_id || "").slice(0, 6)} pid ${t.pid || t.worker_pid || "?"}`, name: t.name || t.func_or_class_name || "task",
    start: t.start_time_s, end: t.end_time_s || Date.now() / 1000, state: t.state }));
  if (!spans.length) return `<div class="empty">No task has run yet.</div>`;
  const lanes = [...new Set(spans.map(s => s.lane))].sort();
  const t0 = Math.min(...spans.map(s => s.start)); const t1 = Math.max(...spans.map(s => s.end));
  const W = Math.max(700, document.getElementById("main").clientWidth - 80); const left = 150; const laneH = 22;
  const x = t => left + (W - left - 10) * ((t - t0) / Math.max(1e-6, t1 - t0));
  const color = s => s.state === "FAILED" ? "#c62828" : s.state === "RUNNING" ? "#e8590c" : "#2f6fdb";
  const parts = [];
  lanes.forEach((l, i) => parts.push(`<text x="4" y="${i * laneH + 15}">${esc(l)}</text>
    <line x1="${left}" x2="${W}" y1="${i * laneH + laneH - 1}" y2="${i * laneH + laneH - 1}" stroke="#f0f1f4"/>`));
  for (const s of spans.slice(-3000)) {
    const i = lanes.indexOf(s.lane);
    parts.push(`<rect x="${x(s.start).toFixed(1)}" y="${i * laneH + 3}" width="${Math.max(1.5, x(s.end) - x(s.start)).toFixed(1)}" height="${laneH - 7}"
      fill="${color(s)}" rx="2"><title>${esc(s.name)} ${esc(s.state)} ${esc(fmtDur(s.end - s.start))}</title></rect>`);
  }
  const H = lanes.length * laneH + 20;
  parts.push(`<text x="${left}" y="${H - 4}">${esc(fmtTime(t0))}</text>
    <text x="${W - 10}" y="${H - 4}" text-anchor="end">+${esc(fmtDur(t1 - t0))}</text>`);
  return `<svg width="${W}" height="${H}">${parts.join("")}</svg>`;
}

function jobId(j) { return j.submission_id || j.job_id; }

function pageJobs(main) {
  main.innerHTML = `<h1>Jobs</h1><div class="card" id="jobs"></div>
    <div class="card"><div class="row"><h2 id="logtitle">Logs</h2><label class="muted"><input type="checkbox" id="follow" checked> follow</label></div>
    <pre class="log" id="joblog">Select a job to see its logs.</pre></div>`;
  let selected = (location.hash.split("?id=")[1] || "");
  let rows = [];
  const draw = () => {
    document.getElementById("jobs").innerHTML = table([
      ["job", j => `<span class="mono">${esc(jobId(j))}</span>`], ["type", j => esc((j.type || "").toLowerCase())], ["status", j => badge(j.status)],
      ["entrypoint", j => `<span class="mono">${esc(j.entrypoint || "")}</span>`], ["started", j => fmtTime(j.start_time)],
      ["duration", j => fmtDur(j.start_time ? ((j.end_time || Date.now()) - j.start_time) / 1000 : null), { num: true }],
      ["message", j => esc(j.message || "")]],
      rows, { empty: "No jobs yet (submit one with `raylite job submit`).",
              rowAttrs: j => `class="clickable ${jobId(j) === selected ? "selected" : ""}" data-id="${esc(jobId(j))}"` });
    document.querySelectorAll("#jobs tr[data-id]").forEach(tr => tr.addEventListener("click", () => {
      selected = tr.dataset.id; draw(); pollLogs();
    }));
  };
  const pollLogs = async () => {
    if (!selected) return;
    const job = rows.find(j => jobId(j) === selected);
    if (!job || !job.submission_id) {
      document.getElementById("logtitle").textContent = `Logs of ${selected}`;
      document.getElementById("joblog").textContent = "This job's driver was started outside the jobs API: its output is in the driver's terminal and under Logs.";
      return;
    }
    const res = await api(`api/jobs/${encodeURIComponent(selected)}/logs`);
    const pre = document.getElementById("joblog");
    const atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 20;
    document.getElementById("logtitle").textContent = `Logs of ${selected}`;
    const logs = res.logs || "";
    pre.textContent = !logs ? "(no output yet)" : logs.length > 500000 ? `… (earlier output cut; the whole log is under Logs)\n${logs.slice(-500000)}` : logs;
    if (document.getElementById("follow").checked && atBottom) pre.scrollTop = pre.scrollHeight;
  };
  every(1000, async () => {
    const [jobs, o] = await Promise.all([apiOr("api/jobs/", []), api("api/dashboard/overview")]);
    const submitted = Array.isArray(jobs) ? jobs : [];
    const known = new Set(submitted.map(j => j.job_id));
    const drivers = (o.drivers || []).filter(d => !known.has(d.job_id)).map(d => ({
      job_id: d.job_id, status: d.alive ? "RUNNING" : "FINISHED", entrypoint: d.entrypoint,
      start_time: d.start_time, end_time: d.end_time, message: "driver" }));
    rows = [...submitted, ...drivers].sort((a, b) => (b.start_time || 0) - (a.start_time || 0));
    if (!selected && rows.length) selected = jobId(rows[0]);
    draw();
    await pollLogs();
  });
}

function pageLogs(main) {
  main.innerHTML = `<h1>Logs</h1>${filterBar("lf", [["file", "file"], ["cat", "kind"]])}
    <div class="split"><div class="card"><h2>Files</h2><div id="files"></div></div>
    <div class="card"><div class="row"><h2 id="logname">Select a file</h2><label class="muted"><input type="checkbox" id="tail" checked> follow</label></div>
    <pre class="log" id="logtext"></pre></div></div>`;
  let current = null; let files = [];
  const draw = () => {
    const f = readFilters("lf");
    const shown = files.filter(x => matches(x.filename, f.file) && matches(x.category, f.cat));
    document.getElementById("files").innerHTML = table([
      ["file", x => `<span class="mono">${esc(x.filename)}</span>`], ["kind", x => esc(x.category || "")],
      ["size", x => fmtBytes(x.size), { num: true }], ["modified", x => fmtTime(x.mtime)], ["node", x => x.node_ip || short(x.node_id)]],
      shown, { empty: files.length ? "No file matches the filters." : "No log files listed.",
               rowAttrs: x => `class="clickable ${current && current.filename === x.filename && current.node_id === x.node_id ? "selected" : ""}"
                 data-i="${files.indexOf(x)}"` });
    document.querySelectorAll("#files tr[data-i]").forEach(tr => tr.addEventListener("click", () => {
      current = files[Number(tr.dataset.i)]; draw(); tailLog();
    }));
  };
  document.getElementById("lf").addEventListener("input", draw);
  const tailLog = async () => {
    if (!current) return;
    const text = await api(`api/v0/logs/file?node_id=${current.node_id}&filename=${encodeURIComponent(current.filename)}&lines=2000`);
    const pre = document.getElementById("logtext");
    const atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 20;
    document.getElementById("logname").textContent = `${current.filename} (last 2000 lines)`;
    pre.textContent = typeof text === "string" ? (text || "(the file is empty)") : JSON.stringify(text, null, 1);
    if (document.getElementById("tail").checked && atBottom) pre.scrollTop = pre.scrollHeight;
  };
  every(3000, async () => {
    const res = await apiOr("api/v0/logs", null);
    files = res && res.data && Array.isArray(res.data.result) ? res.data.result : [];
    files.sort((a, b) => (b.mtime || 0) - (a.mtime || 0));
    draw();
    if (document.getElementById("tail").checked) await tailLog();
  });
}
