/* raylite dashboard: hash routing between pages (#/nodes, #/train, ...). */
"use strict";

const PAGES = {
  overview: pageOverview, nodes: pageNodes, actors: pageActors, tasks: pageTasks, jobs: pageJobs,
  train: pageTrain, tune: pageTune, serve: pageServe, metrics: pageMetrics, logs: pageLogs,
};

function route() {
  RL.timers.forEach(clearInterval);
  RL.timers = [];
  RL.charts.forEach(c => c.destroy());
  RL.charts = [];
  const name = (location.hash.replace(/^#\/?/, "").split("?")[0]) || "overview";
  const page = PAGES[name] ? name : "overview";
  RL.page = page;
  document.querySelectorAll("#nav a").forEach(a => a.classList.toggle("active", a.getAttribute("href") === `#/${page}`));
  const main = document.getElementById("main");
  main.innerHTML = "";
  main.dataset.page = page;
  PAGES[page](main);
}

window.addEventListener("hashchange", route);
window.addEventListener("DOMContentLoaded", route);
