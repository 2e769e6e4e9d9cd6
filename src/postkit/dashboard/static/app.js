// The Postkit dashboard: one page, routed by the URL's hash, rendered from the JSON API.
//
// Every value from the API reaches the page as a DOM text node (h() below sets textContent and
// attributes, never innerHTML), so a payload or an error message shows as the text it is,
// whatever markup it contains. Actions are POSTs that carry the CSRF token from /api/meta.
"use strict";

const state = {
  meta: null, namespace: null, timer: null, charts: new Map(), view: null, flash: null,
  renderSeq: 0, failed: false,
};

// ----------------------------------------------------------------------------------------
// DOM and API helpers
// ----------------------------------------------------------------------------------------

// A name as one segment of an API path: percent-encoded, and "." and ".." (which the browser
// would resolve away, percent-encoded too) or a name that starts with "~" get a "~" in front,
// which the server takes off.
function seg(name) {
  return (name === "." || name === ".." || name.startsWith("~") ? "~" : "") + encodeURIComponent(name);
}

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else if (key === "class") el.className = value;
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

// Replace an element's children; null and false mean nothing (the DOM would write "null").
function fill(el, ...children) {
  el.replaceChildren(...children.flat(Infinity).filter((c) => c !== null && c !== undefined && c !== false));
}

function link(text, hash, attrs) {
  return h("a", { href: "#" + hash, ...(attrs || {}) }, text);
}

class ApiError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

async function api(path, body) {
  const init = { headers: { Accept: "application/json" }, credentials: "same-origin" };
  if (body !== undefined) {
    init.method = "POST";
    init.headers["Content-Type"] = "application/json";
    init.headers["X-Postkit-CSRF"] = state.meta ? state.meta.csrf_token : "";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  let data = null;
  try { data = await response.json(); } catch (e) { data = null; }
  if (!response.ok) {
    throw new ApiError(response.status, (data && data.error) || response.statusText);
  }
  return data;
}

// Names go into paths percent-encoded, each one segment ("emails/high" is emails%2Fhigh).
function nsPath(suffix) {
  return "/api/ns/" + seg(state.namespace) + suffix;
}

// A route of the page, in the namespace shown.
function nsHash(suffix) {
  return "/ns/" + encodeURIComponent(state.namespace) + (suffix || "");
}

function setStatus(text, isError) {
  const el = document.getElementById("status");
  el.textContent = text;
  el.className = isError ? "error" : "";
}

function confirmDialog(text) {
  const modal = document.getElementById("modal");
  document.getElementById("modal-text").textContent = text;
  modal.hidden = false;
  return new Promise((resolve) => {
    const done = (answer) => {
      modal.hidden = true;
      okButton.removeEventListener("click", yes);
      cancelButton.removeEventListener("click", no);
      resolve(answer);
    };
    const okButton = document.getElementById("modal-confirm");
    const cancelButton = document.getElementById("modal-cancel");
    const yes = () => done(true);
    const no = () => done(false);
    okButton.addEventListener("click", yes);
    cancelButton.addEventListener("click", no);
  });
}

function notice(text, isError) {
  return h("div", { class: isError ? "notice error" : "notice", role: "status" }, text);
}

function actionButton(label, run, attrs) {
  const disabled = state.meta && state.meta.read_only;
  return h("button", {
    type: "button",
    disabled,
    title: disabled ? "read-only dashboard" : null,
    ...(attrs || {}),
    onclick: async (event) => {
      const button = event.currentTarget;
      button.disabled = true;
      try {
        await run();
      } catch (error) {
        showActionError(error);
      } finally {
        button.disabled = false;
      }
    },
  }, label);
}

function showActionError(error) {
  const holder = document.getElementById("action-result");
  const message = error instanceof ApiError ? error.message : String(error);
  state.flash = { text: message, error: true };
  if (holder) fill(holder, notice(message, true));
  setStatus(message, true);
}

function showActionResult(text) {
  state.flash = { text, error: false };
  const holder = document.getElementById("action-result");
  if (holder) fill(holder, notice(text, false));
}

// Where an action's result shows; it stays through the live updates until the page changes.
function actionResult() {
  return h("div", { id: "action-result" }, state.flash ? notice(state.flash.text, state.flash.error) : null);
}

// ----------------------------------------------------------------------------------------
// Formatting
// ----------------------------------------------------------------------------------------

function fmtNumber(n, capped) {
  if (n === null || n === undefined) return "";
  return Number(n).toLocaleString("en-US") + (capped ? "+" : "");
}

function fmtAge(seconds) {
  if (seconds === null || seconds === undefined) return "";
  const s = Math.max(0, Number(seconds));
  if (s < 1) return (s * 1000).toFixed(0) + " ms";
  if (s < 60) return s.toFixed(s < 10 ? 1 : 0) + " s";
  if (s < 3600) return Math.floor(s / 60) + " m " + Math.floor(s % 60) + " s";
  if (s < 86400) return Math.floor(s / 3600) + " h " + Math.floor((s % 3600) / 60) + " m";
  return Math.floor(s / 86400) + " d " + Math.floor((s % 86400) / 3600) + " h";
}

function fmtTime(iso) {
  if (!iso) return "";
  return iso.replace("T", " ").replace(/\.\d+/, "").replace("+00:00", " UTC");
}

function ago(iso, nowIso) {
  if (!iso) return "";
  return fmtAge((Date.parse(nowIso) - Date.parse(iso)) / 1000) + " ago";
}

function badge(text, kind) {
  return h("span", { class: "badge " + kind }, text);
}

function table(headers, rows, attrs) {
  return h("table", attrs || {},
    h("thead", {}, h("tr", {}, headers.map((x) =>
      h("th", { class: x.endsWith("#") ? "num" : null }, x.replace(/#$/, ""))))),
    h("tbody", {}, rows));
}

function num(value, capped) {
  return h("td", { class: "num" }, fmtNumber(value, capped));
}

// A live count of a queue's stats: one that reached the cap reads "10,000+".
function count(q, field) {
  return num(q[field], q.counts_capped && q[field] >= CAP);
}

// The running count, against the queue's concurrency limit when it has one ("3 / 20").
function runningCount(q) {
  if (q.concurrency === null || q.concurrency === undefined) return count(q, "running");
  return h("td", { class: "num", title: "running / concurrency limit" },
    `${fmtNumber(q.running, false)} / ${fmtNumber(q.concurrency, false)}`);
}

// A queue's state badges: paused, rate-limited while its rate limit holds claims back, and
// full while its pending and scheduled jobs reach its max_pending (its pushes are refused).
function queueBadges(q) {
  return [q.paused ? badge("paused", "paused") : null,
    q.rate_limited_until ? [" ", badge("rate-limited", "paused")] : null,
    q.full ? [" ", badge("full", "paused")] : null];
}

// ----------------------------------------------------------------------------------------
// Views
// ----------------------------------------------------------------------------------------

const CAP = 10000; // the server's stats cap: a count that reached it reads "10,000+"
const COLORS = { completed: "#1f8a4c", dead_lettered: "#c53030", retried: "#b7791f", rescued: "#6b46c1" };

async function viewOverview(main, params) {
  const after = params.get("after");
  const data = await api(nsPath("/overview" + (after ? "?after=" + encodeURIComponent(after) : "")));
  const rows = data.queues.map((q) => h("tr", { "data-queue": q.queue },
    h("td", {}, link(q.queue, nsHash("/queue/" + encodeURIComponent(q.queue))),
      " ", queueBadges(q)),
    count(q, "pending"), count(q, "scheduled"), count(q, "waiting"), runningCount(q),
    count(q, "dead"), count(q, "cancelled"),
    h("td", { class: "num" }, fmtAge(q.oldest_ready_age)),
    num(q.completed_last_minute), num(q.dead_lettered_last_minute),
    num(q.retried_last_hour), num(q.rescued_last_hour)));
  const workers = h("p", { id: "workers-summary" },
    link(`${data.workers.alive} workers alive`, nsHash("/workers")),
    data.workers.lost ? [", ", badge(`${data.workers.lost} lost`, "lost")] : null);
  const charts = h("div", { class: "grid", id: "charts" });
  fill(main, 
    h("h1", {}, "Overview"),
    workers,
    data.queues.length
      ? table(["queue", "pending#", "scheduled#", "waiting#", "running#", "dead#", "cancelled#",
        "oldest ready#",
        "completed/min#", "dead-lettered/min#", "retried/h#", "rescued/h#"], rows, { id: "queues" })
      : notice("No queues in this namespace yet. Push a job, or run `postkit demo` for data."),
    h("p", {},
      data.after ? link("← First queues", nsHash(""), { id: "first-queues" }) : null,
      data.after && data.next_after ? " · " : null,
      data.next_after
        ? link("More queues →", nsHash("/overview?after=" + encodeURIComponent(data.next_after)), { id: "more-queues" })
        : null),
    h("h2", {}, "Outcomes per minute, last hour, of the busiest queues"),
    h("div", { class: "legend" }, Object.entries(COLORS).map(([name, color]) =>
      h("span", {}, swatch(color), name))),
    charts);
  main.charts = drawCharts(charts, data);
}

function swatch(color) {
  const el = h("i", {});
  el.style.background = color; // through the CSSOM: the page's CSP allows no inline style
  return el;
}

async function viewAll(main) {
  const data = await api("/api/overview");
  const rows = [];
  for (const ns of data.namespaces) {
    // A node per row: a node appended to a second row leaves the first.
    const nsLink = () => link(ns.namespace, "/ns/" + encodeURIComponent(ns.namespace));
    if (!ns.queues.length) {
      rows.push(h("tr", { "data-namespace": ns.namespace }, h("td", {}, nsLink()), h("td", { class: "muted" }, "no queues"),
        h("td", {}), h("td", {}), h("td", {}), h("td", {}), h("td", {}), h("td", {}, workersCell(ns))));
    }
    for (const q of ns.queues) {
      rows.push(h("tr", { "data-namespace": ns.namespace, "data-queue": q.queue },
        h("td", {}, nsLink()),
        h("td", {}, link(q.queue, "/ns/" + encodeURIComponent(ns.namespace) + "/queue/" + encodeURIComponent(q.queue)),
          " ", queueBadges(q)),
        count(q, "pending"), count(q, "scheduled"), count(q, "running"), count(q, "dead"),
        h("td", { class: "num" }, fmtAge(q.oldest_ready_age)), h("td", {}, workersCell(ns))));
    }
    if (ns.more_queues) {
      rows.push(h("tr", { "data-namespace": ns.namespace }, h("td", {}, nsLink()),
        h("td", { class: "muted", colspan: "7" }, link("more queues in this namespace's overview →", "/ns/" + encodeURIComponent(ns.namespace)))));
    }
  }
  fill(main, 
    h("h1", {}, "All namespaces"),
    rows.length
      ? table(["namespace", "queue", "pending#", "scheduled#", "running#", "dead#", "oldest ready#", "workers"], rows, { id: "all-queues" })
      : notice("No namespaces hold anything yet. Run `postkit demo` for data."),
    data.more ? notice(`${data.more} more namespaces are not shown; pick one above.`) : null);
}

function workersCell(ns) {
  return [`${ns.workers.alive} alive`, ns.workers.lost ? [" ", badge(`${ns.workers.lost} lost`, "lost")] : null];
}

// The charts of one overview, drawn into ``container``; render() keeps them if the overview it
// drew is still the one to show, and destroys those of the page it replaces.
function drawCharts(container, data) {
  const drawn = new Map();
  if (typeof uPlot === "undefined") return;
  const end = Math.floor(Date.parse(data.now) / 60000) * 60;
  const minutes = [];
  for (let t = end - 59 * 60; t <= end; t += 60) minutes.push(t);
  for (const name of data.charted || []) {
    const points = new Map((data.series[name] || []).map((p) => [p[0], p]));
    const columns = [minutes];
    for (let i = 1; i <= 4; i++) columns.push(minutes.map((t) => (points.get(t) || [0, 0, 0, 0, 0])[i]));
    const box = h("div", { class: "card chart", "data-queue": name },
      h("div", { class: "chart-title" }, name));
    container.append(box);
    const chart = new uPlot({
      width: 300, height: 110, legend: { show: false }, cursor: { show: false },
      axes: [{ show: false }, { size: 36, font: "10px system-ui" }],
      scales: { x: { time: true } },
      series: [{}, ...Object.entries(COLORS).map(([label, stroke]) => ({ label, stroke, width: 1.5 }))],
    }, columns, box);
    drawn.set(name, chart);
  }
  return drawn;
}

async function viewQueue(main, queue, params) {
  const stateName = params.get("state") || "pending";
  const cursor = params.get("cursor") || "";
  const [info, page] = await Promise.all([
    api(nsPath("/queues/" + seg(queue))),
    api(nsPath("/queues/" + seg(queue) + "/jobs?state=" + encodeURIComponent(stateName) +
      (cursor ? "&cursor=" + encodeURIComponent(cursor) : ""))),
  ]);
  const stats = info.stats || {};
  const policy = info.policy || {};
  const base = nsHash("/queue/" + encodeURIComponent(queue));
  // waiting and cancelled have no count in the queue's statistics: their tabs show none.
  const tabs = h("div", { class: "tabs" }, ["pending", "scheduled", "running", "waiting", "dead", "cancelled"].map((s) =>
    link(stats[s] === undefined ? s : `${s} (${fmtNumber(stats[s] || 0, stats.counts_capped && stats[s] >= CAP)})`, base + "?state=" + s,
      { class: s === stateName ? "active" : null, "data-state": s })));
  const jobRows = page.jobs.map((job) => h("tr", { "data-job": job.id },
    h("td", { class: "mono" }, link(String(job.id), nsHash("/job/" + job.id))),
    h("td", { class: "num" }, fmtAge(job.age_seconds)),
    num(job.attempts), num(job.priority),
    h("td", {}, fmtTime(job.run_at)), h("td", { class: "mono" }, job.worker_id || ""),
    h("td", { class: "error-text" }, job.last_error || ""),
    h("td", { class: "mono preview" }, job.payload_preview)));
  const groups = info.groups || [];
  const groupRows = groups.map((g) => h("tr", { "data-group": g.group_key },
    h("td", { class: "mono" }, g.group_key),
    count(g, "pending"), count(g, "scheduled"), count(g, "running"), num(g.weight)));
  const paused = policy.paused;
  fill(main, 
    h("h1", {}, "Queue ", h("span", { id: "queue-name" }, queue), " ",
      paused ? badge("paused", "paused") : badge("running", "ok")),
    h("div", { class: "toolbar" },
      paused
        ? actionButton("Resume", async () => { await api(nsPath("/queues/" + seg(queue) + "/resume"), {}); await render(); }, { id: "resume" })
        : actionButton("Pause", async () => { await api(nsPath("/queues/" + seg(queue) + "/pause"), {}); await render(); }, { id: "pause" }),
      actionButton("Purge pending and scheduled…", async () => {
        const dry = await api(nsPath("/queues/" + seg(queue) + "/purge"), { dry_run: true });
        if (!(await confirmDialog(`Delete ${fmtNumber(dry.count, dry.capped)} pending and scheduled jobs of ${queue} created before ${fmtTime(dry.created_before)}? Running jobs are left to their workers.`))) return;
        const done = await api(nsPath("/queues/" + seg(queue) + "/purge"), { created_before: dry.created_before });
        showActionResult(`Deleted ${fmtNumber(done.count)} jobs.`);
        await render();
      }, { class: "danger", id: "purge" })),
    actionResult(),
    h("h2", {}, "Policy in force"),
    h("p", {}, link("Edit flow limits…", nsHash("/limits/" + encodeURIComponent(queue)), { id: "edit-limits" })),
    h("dl", { class: "fields card", id: "policy" }, Object.entries(policy).flatMap(([k, v]) =>
      [h("dt", {}, k), h("dd", {}, v === null ? "—" : String(v))])),
    groups.length ? h("h2", {}, "Group keys") : null,
    groups.length ? table(["group key", "pending#", "scheduled#", "running#", "weight#"], groupRows, { id: "groups" }) : null,
    info.more_groups ? h("p", {}, `The first ${groups.length} keys: postkit queue groups ${queue} lists them all.`) : null,
    tabs,
    page.jobs.length
      ? table(["id", "age#", "attempts#", "priority#", "run at", "worker", "last error", "payload"], jobRows, { id: "jobs" })
      : notice(`No ${stateName} jobs.`),
    page.next_cursor
      ? h("p", {}, link("Next page →", base + "?state=" + encodeURIComponent(stateName) + "&cursor=" + encodeURIComponent(page.next_cursor), { id: "next-page" }))
      : null);
}

async function viewJob(main, jobId) {
  const data = await api(nsPath("/jobs/" + jobId));
  const job = data.job;
  const fields = [];
  if (job) {
    for (const key of ["state", "queue", "attempts", "max_attempts", "priority", "run_at",
      "created_at", "worker_id", "claimed_at", "visible_until", "failed_at", "unique_key",
      "waiting_on"]) {
      const value = job[key];
      if (value === null || value === undefined) continue;
      const shown = /_at$|run_at|visible_until/.test(key) ? fmtTime(value) : String(value);
      const expired = key === "state" && data.claim_expired
        ? " (claim expired: no worker holds it; the next tick_timeouts, by any worker or postkit tick, returns it to pending)"
        : "";
      fields.push(h("dt", {}, key === "visible_until" ? "claim deadline" : key),
        h("dd", { "data-field": key }, shown + expired));
    }
    if (job.progress !== null && job.progress !== undefined) {
      fields.push(h("dt", {}, "progress"), h("dd", { "data-field": "progress" },
        h("progress", { max: "1", value: String(job.progress) }),
        ` ${Math.round(job.progress * 100)}%` + (job.progress_note ? ` — ${job.progress_note}` : "") +
          (job.progress_at ? ` (at ${fmtTime(job.progress_at)})` : "")));
    }
    if (job.depends_on && job.depends_on.length) {
      fields.push(h("dt", {}, "parents"), h("dd", { "data-field": "depends_on" },
        job.depends_on.flatMap((parent, i) => [i ? ", " : "", link("#" + parent, nsHash("/job/" + parent))])));
    }
    const children = data.waiting_children || [];
    if (children.length) {
      fields.push(h("dt", {}, "waiting for it"), h("dd", { "data-field": "waiting_children" },
        children.flatMap((child, i) => [i ? ", " : "", link("#" + child, nsHash("/job/" + child))]),
        children.length >= 100 ? ", …" : ""));
    }
    if (job.state === "cancelled" && data.result && data.result.reason) {
      fields.push(h("dt", {}, "reason"), h("dd", { "data-field": "reason" }, data.result.reason));
    }
  }
  // An entry that is not an object (written by hand) shows as its text.
  const errors = (job ? job.errors || [] : []).map((e) => (e && typeof e === "object" ? e : { error: String(e) }));
  const lineage = (data.lineage || []).map((step) => h("li", { "data-job": step.job_id },
    step.job_id === jobId ? h("strong", {}, "#" + step.job_id + " (this job)")
      : link("#" + step.job_id, nsHash("/job/" + step.job_id)),
    " ", step.state || "finished",
    step.redriven_job_id ? ` → redriven as #${step.redriven_job_id} at ${fmtTime(step.redriven_at)}` : ""));
  // The tree: the job and what descends from it, one line per job, indented by generation.
  const tree = data.tree || [];
  const liveStates = ["pending", "scheduled", "waiting", "running"];
  const liveInTree = tree.filter((node) => liveStates.includes(node.state));
  const treeItems = tree.map((node) => {
    const item = h("li", { "data-job": node.job_id, "data-depth": node.depth },
      node.job_id === jobId ? h("strong", {}, "#" + node.job_id + " (this job)")
        : link("#" + node.job_id, nsHash("/job/" + node.job_id)),
      " ", badge(node.state, "state"), node.queue ? ` ${node.queue}` : "");
    // Through the CSSOM: the policy (style-src 'self') refuses a style attribute.
    item.style.marginLeft = `${node.depth * 1.5}em`;
    return item;
  });
  const buttons = [];
  if (liveInTree.length > 1 || (liveInTree.length === 1 && liveInTree[0].job_id !== jobId)) {
    buttons.push(actionButton("Cancel tree…", async () => {
      const running = liveInTree.filter((node) => node.state === "running").length;
      if (!(await confirmDialog(`Cancel the ${liveInTree.length}${data.tree_truncated ? "+" : ""} live jobs of job ${jobId}'s tree (${running} running)?`))) return;
      const result = await api(nsPath("/jobs/" + jobId + "/cancel-tree"), {});
      showActionResult(`Cancelled ${fmtNumber(result.cancelled)} jobs.`);
    }, { class: "danger", id: "cancel-tree" }));
  }
  if (job && ["pending", "scheduled", "waiting", "running"].includes(job.state)) {
    buttons.push(actionButton("Cancel job", async () => {
      const running = job.state === "running" ? " Its worker's claim ends now, and whatever its handler does is not settled." : "";
      if (!(await confirmDialog(`Cancel job ${jobId}? It never runs again, and the jobs waiting for it are cancelled too.${running}`))) return;
      const result = await api(nsPath("/jobs/" + jobId + "/cancel"), {});
      showActionResult(result.cancelled ? "Cancelled." : "Nothing to cancel: the job is gone.");
    }, { class: "danger", id: "cancel" }));
  }
  if (job && job.state === "dead") {
    buttons.push(actionButton("Redrive", async () => {
      const result = await api(nsPath("/jobs/" + jobId + "/redrive"), {});
      const made = result.redriven[0];
      showActionResult(made && made.new_job_id ? `Redriven as job ${made.new_job_id}.` : "Already redriven.");
      await render();
    }, { id: "redrive" }));
  }
  fill(main, 
    h("h1", {}, "Job ", h("span", { class: "mono" }, String(jobId)), " ",
      job ? badge(job.state, "state") : badge(data.result && data.result.state !== "unknown" ? data.result.state : "finished", "ok")),
    h("div", { class: "toolbar" }, buttons),
    actionResult(),
    job ? h("dl", { class: "fields card" }, fields) : notice("This job finished and left the queue; what is kept of it is below."),
    job ? h("h2", {}, "Payload") : null,
    job ? h("pre", { id: "payload" }, job.payload_json !== null ? job.payload_json : `(${job.payload_error || "payload not shown"})`) : null,
    data.result && data.result.state === "completed" ? [
      h("h2", {}, "Result"),
      data.result.value_json !== null
        ? h("pre", { id: "result" }, data.result.value_json)
        : h("p", { class: "muted" }, "Completed; no result kept (its queue keeps results with retain_results)."),
    ] : null,
    h("h2", {}, `Errors (${errors.length})`),
    errors.length
      ? table(["attempt#", "kind", "error", "worker", "at"], errors.map((e) => h("tr", {},
        num(e.attempt), h("td", {}, e.kind || ""), h("td", { class: "error-text" }, e.error || ""),
        h("td", { class: "mono" }, e.worker_id || ""), h("td", {}, fmtTime(e.at)))), { id: "errors" })
      : h("p", { class: "muted" }, "No failed attempts."),
    h("h2", {}, "Lineage"),
    lineage.length ? h("ul", { id: "lineage" }, lineage) : h("p", { class: "muted" }, "Not redriven."),
    (data.steps || []).length ? [
      h("h2", {}, `Workflow steps (${data.steps.length})`),
      table(["step#", "name", "attempt#", "recorded", "result"], data.steps.map((step) => h("tr", { "data-step": step.position },
        num(step.position), h("td", { class: "mono" }, step.name), num(step.attempt), h("td", {}, fmtTime(step.recorded_at)),
        h("td", { class: "mono preview" }, (step.jobs || []).length
          ? ["jobs ", step.jobs.flatMap((job, i) => [i ? ", " : "", link("#" + job, nsHash("/job/" + job))])]
          : step.result_json !== null ? step.result_json : `(${step.result_error || "no result"})`))), { id: "steps" }),
    ] : null,
    tree.length ? [
      h("h2", {}, "Tree"),
      h("p", { class: "muted" }, "The jobs that descend from it through depends_on, generation by generation: live ones, and completed ones the tree goes on through."),
      h("ul", { id: "tree", class: "tree" }, treeItems),
      data.tree_truncated ? h("p", { class: "muted" }, `The first ${tree.length} jobs.`) : null,
    ] : null);
}

function deadFilters(params) {
  return {
    queue: params.get("queue") || "",
    error: params.get("error") || "",
    since: params.get("since") || "",
    until: params.get("until") || "",
  };
}

async function viewDead(main, params) {
  const filters = deadFilters(params);
  const query = new URLSearchParams(Object.entries(filters).filter(([, v]) => v));
  if (params.get("cursor")) query.set("cursor", params.get("cursor"));
  const page = await api(nsPath("/dead-letters?" + query.toString()));
  const selected = new Set();
  const form = h("form", { class: "toolbar", id: "dead-filters", onsubmit: (event) => {
    event.preventDefault();
    const data = new FormData(event.target);
    const next = new URLSearchParams();
    for (const key of ["queue", "error", "since", "until"]) {
      const value = String(data.get(key) || "").trim();
      if (value) next.set(key, value);
    }
    location.hash = nsHash("/dead?" + next.toString());
  } },
  h("input", { name: "queue", placeholder: "queue", value: filters.queue, list: "dead-queues" }),
  h("input", { name: "error", placeholder: "error contains", value: filters.error, list: "dead-errors" }),
  // What the rows hold, offered as the operator types: their queues and their errors' classes.
  h("datalist", { id: "dead-queues" },
    [...new Set(page.dead_letters.map((d) => d.queue))].sort().map((q) => h("option", { value: q }))),
  h("datalist", { id: "dead-errors" },
    [...new Set(page.dead_letters.map((d) => errorClass(d.error)).filter(Boolean))].sort()
      .map((c) => h("option", { value: c }))),
  h("input", { name: "since", placeholder: "failed since (ISO, e.g. 2026-01-31T09:00Z)", value: filters.since, size: 30 }),
  h("input", { name: "until", placeholder: "failed before (ISO)", value: filters.until, size: 22 }),
  h("button", { type: "submit" }, "Filter"));
  const body = () => ({
    job_ids: selected.size ? Array.from(selected) : null,
    queue: filters.queue || null, error: filters.error || null,
    since: filters.since || null, until: filters.until || null,
  });
  const what = () => (selected.size ? `the ${selected.size} selected dead letters` : "every dead letter matching the filters");
  const rows = page.dead_letters.map((d) => h("tr", { "data-job": d.job_id },
    h("td", {}, h("input", { type: "checkbox", class: "select", "data-job": d.job_id,
      onchange: (event) => { if (event.target.checked) selected.add(d.job_id); else selected.delete(d.job_id); } })),
    h("td", { class: "mono" }, link(String(d.job_id), nsHash("/job/" + d.job_id))),
    h("td", {}, d.queue), h("td", {}, d.reason), num(d.attempts),
    h("td", { class: "error-text" }, errorCell(d.error)), h("td", {}, fmtTime(d.failed_at)),
    h("td", { class: "mono preview" }, d.payload_preview),
    h("td", {}, d.redriven_job_id ? link("→ " + d.redriven_job_id, nsHash("/job/" + d.redriven_job_id)) : "")));
  fill(main, 
    h("h1", {}, "Dead letters"),
    form,
    h("div", { class: "toolbar" },
      actionButton("Redrive…", async () => {
        const dry = await api(nsPath("/dead-letters/redrive"), { ...body(), dry_run: true });
        if (!dry.count) { showActionResult("Nothing to redrive."); return; }
        if (!(await confirmDialog(`Redrive ${fmtNumber(dry.count, dry.capped)} dead letters (${what()}) as new jobs?` +
          (dry.capped ? " One redrive retries at most 10,000: repeat it for the rest." : "")))) return;
        const done = await api(nsPath("/dead-letters/redrive"), { ...body(), dry_run: false });
        showActionResult(`Redrove ${fmtNumber(done.count)} dead letters.`);
        await render();
      }, { id: "redrive" }),
      actionButton("Purge…", async () => {
        const dry = await api(nsPath("/dead-letters/purge"), { ...body(), dry_run: true });
        if (!dry.count) { showActionResult("Nothing to purge."); return; }
        if (!(await confirmDialog(`Delete ${fmtNumber(dry.count, dry.capped)} dead letters (${what()}) that failed before ${fmtTime(dry.failed_before)}, for good?`))) return;
        const done = await api(nsPath("/dead-letters/purge"), { ...body(), until: dry.failed_before, dry_run: false });
        showActionResult(`Deleted ${fmtNumber(done.count)} dead letters.`);
        await render();
      }, { class: "danger", id: "purge-dead" })),
    actionResult(),
    page.total !== null
      ? h("p", { class: "muted", id: "dead-total" }, `${fmtNumber(page.total, page.total_capped)} dead letters match.`)
      : null,
    !page.searched_all
      ? notice("The text search read its bound of dead letters for this page; use Next page to search older ones. Actions with a text filter take the selected rows.")
      : null,
    page.dead_letters.length
      ? table(["", "job", "queue", "reason", "attempts#", "last error", "failed at", "payload", "redriven"], rows, { id: "dead-letters" })
      : notice("No dead letters match."),
    page.next_cursor
      ? h("p", {}, link("Next page →", nsHash("/dead?" +
        new URLSearchParams({ ...Object.fromEntries(query), cursor: page.next_cursor }).toString()), { id: "next-page" }))
      : null);
}

// The last non-blank line of an error: where a traceback names the exception.
function lastLine(error) {
  const lines = (error || "").split("\n").map((line) => line.trim()).filter(Boolean);
  return { line: lines[lines.length - 1] || "", count: lines.length };
}

// An error as a row shows it: its last line, the whole of it a click away.
function errorCell(error) {
  const { line, count } = lastLine(error);
  if (count <= 1) return error || "";
  return h("details", { class: "error" }, h("summary", {}, line), h("pre", {}, error));
}

// The exception class of an error's last line ("ValueError: bad address" -> "ValueError").
function errorClass(error) {
  const match = /^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Timeout|Warning)?)\s*:/.exec(lastLine(error).line);
  return match ? match[1] : null;
}

async function viewSchedules(main, params) {
  const cursor = params.get("cursor");
  const data = await api(nsPath("/schedules" + (cursor ? "?cursor=" + encodeURIComponent(cursor) : "")));
  const rows = data.schedules.map((s) => h("tr", { "data-schedule": s.name },
    h("td", {}, s.name, " ", s.broken_at ? badge("broken", "broken") : null, s.paused ? badge("paused", "paused") : null),
    h("td", {}, s.queue), h("td", { class: "mono" }, s.cron || `every ${fmtAge(s.every)}`),
    h("td", {}, s.timezone), h("td", {}, fmtTime(s.next_run_at)),
    h("td", {}, fmtTime(s.last_run_at)),
    h("td", {}, s.last_job_id ? [link("#" + s.last_job_id, nsHash("/job/" + s.last_job_id)), " ", s.last_job_state || ""] : ""),
    h("td", { class: "error-text" }, s.broken_reason || ""),
    h("td", {}, s.paused
      ? actionButton("Resume", async () => { await api(nsPath("/schedules/" + seg(s.name) + "/resume"), {}); await render(); })
      : actionButton("Pause", async () => { await api(nsPath("/schedules/" + seg(s.name) + "/pause"), {}); await render(); }))));
  fill(main, 
    h("h1", {}, "Schedules"),
    actionResult(),
    data.schedules.length
      ? table(["name", "queue", "when", "time zone", "next run", "last run", "last job", "broken because", ""], rows, { id: "schedules" })
      : notice("No schedules. Create one with `postkit schedule create`."),
    nextPage(data.next_cursor, "/schedules"));
}

async function viewWorkers(main, params) {
  const cursor = params.get("cursor");
  const data = await api(nsPath("/workers" + (cursor ? "?cursor=" + encodeURIComponent(cursor) : "")));
  const rows = data.workers.map((w) => h("tr", { "data-worker": w.worker_id },
    h("td", { class: "mono" }, w.worker_id), h("td", {}, w.kind), h("td", {}, w.host), num(w.pid),
    h("td", {}, (w.queues || []).join(", ")), num(w.concurrency), h("td", {}, w.version),
    h("td", {}, fmtTime(w.started_at)), h("td", {}, ago(w.heartbeat_at, data.now)),
    h("td", {}, w.lost ? badge("lost", "lost") : badge("alive", "alive")),
    h("td", {}, (w.running || []).length
      ? (w.running || []).slice(0, 10).map((job) => [link("#" + job.id, nsHash("/job/" + job.id)), " "])
      : h("span", { class: "muted" }, "idle"),
    (w.running || []).length > 10 ? ` +${w.running.length - 10}` : null)));
  fill(main, 
    h("h1", {}, "Workers"),
    data.workers.length
      ? table(["worker", "kind", "host", "pid#", "queues", "concurrency#", "version", "started", "last heartbeat", "status", "running now"], rows, { id: "workers" })
      : notice("No workers registered. Start one with `postkit worker`."),
    nextPage(data.next_cursor, "/workers"));
}

// The link to the page after this one, when there is one.
function nextPage(cursor, route) {
  return cursor
    ? h("p", {}, link("Next page →", nsHash(route + "?cursor=" + encodeURIComponent(cursor)), { id: "next-page" }))
    : null;
}

// The flow limits of one queue, as a form: not a live view, so what the operator types stays.
// An empty field is no limit.
async function viewLimits(main, queue) {
  const info = await api(nsPath("/queues/" + seg(queue)));
  const policy = info.policy || {};
  const field = (name, label, value, attrs) => h("label", {}, label + " ",
    h("input", { name, type: "number", min: "1", value: value === null || value === undefined ? "" : String(value), ...(attrs || {}) }));
  const form = h("form", { id: "limits", class: "card" },
    h("p", {}, field("concurrency", "At most", policy.concurrency), " running at once, across every worker"),
    h("p", {}, field("rate_limit", "At most", policy.rate_limit), " claims in any ",
      field("rate_period", "", policy.rate_period, { step: "any", min: "0.001" }), " seconds"),
    h("p", {}, field("group_concurrency", "At most", policy.group_concurrency), " running per group key"),
    h("p", {}, h("label", {}, h("input", { name: "group_ordered", type: "checkbox", checked: policy.group_ordered }),
      " one job per group key at a time, in push order")),
    h("p", {}, h("label", {}, h("input", { name: "fair", type: "checkbox", checked: policy.fair }),
      " group keys take turns: each gets its weight of jobs per turn (postkit queue weight)")));
  const number = (name) => {
    const text = form.elements[name].value.trim();
    return text === "" ? null : Number(text);
  };
  fill(main,
    h("h1", {}, "Flow limits of ", h("span", { id: "queue-name" }, queue)),
    h("p", { class: "muted" }, "Enforced by the database when jobs are claimed. An empty field is no limit."),
    actionResult(),
    form,
    h("div", { class: "toolbar" },
      actionButton("Save limits", async () => {
        const rateLimit = number("rate_limit");
        const ratePeriod = number("rate_period");
        const done = await api(nsPath("/queues/" + seg(queue) + "/limits"), {
          concurrency: number("concurrency"),
          rate: rateLimit === null && ratePeriod === null ? null : [rateLimit, ratePeriod],
          group_concurrency: number("group_concurrency"),
          group_ordered: form.elements.group_ordered.checked,
          fair: form.elements.fair.checked,
        });
        showActionResult(`Saved the flow limits of ${done.queue}.`);
      }, { id: "save-limits" }),
      " ", link("Back to the queue", nsHash("/queue/" + encodeURIComponent(queue)))));
}

// ----------------------------------------------------------------------------------------
// Router
// ----------------------------------------------------------------------------------------

function parseHash() {
  const raw = location.hash.replace(/^#/, "") || "/";
  const [path, query] = raw.split("?");
  // A malformed escape (a mangled link) stays as typed: decodeURIComponent would throw, and
  // the page would stop rendering and updating.
  const parts = path.split("/").filter(Boolean).map((part) => {
    try { return decodeURIComponent(part); } catch (e) { return part; }
  });
  return { parts, params: new URLSearchParams(query || "") };
}

const LIVE_VIEWS = new Set(["overview", "all", "queue", "job", "schedules", "workers"]);
const ALL = "*";

async function render() {
  const { parts, params } = parseHash();
  if (parts[0] === "ns" && parts[1]) state.namespace = parts[1];
  if (!state.namespace) state.namespace = state.meta.namespaces[0] || "default";
  const view = parts[0] === "ns" ? parts[2] || "overview" : parts[0] === "all" ? "all" : "overview";
  state.view = view;
  document.getElementById("namespace").value = view === "all" ? ALL : state.namespace;
  for (const a of document.querySelectorAll("#nav a")) {
    a.href = "#" + nsHash(a.dataset.view === "overview" ? "" : "/" + a.dataset.view);
    a.classList.toggle("active", a.dataset.view === view);
  }
  const main = document.getElementById("view");
  // Each render draws into a draft and shows it only if no later render began meanwhile: a
  // live update still loading when the operator moves to another page must not bring the old
  // page back over the new one.
  const seq = ++state.renderSeq;
  const draft = document.createElement("div");
  const current = () => seq === state.renderSeq;
  try {
    if (view === "queue") await viewQueue(draft, parts[3], params);
    else if (view === "limits") await viewLimits(draft, parts[3]);
    else if (view === "job") await viewJob(draft, Number(parts[3]));
    else if (view === "dead") await viewDead(draft, params);
    else if (view === "schedules") await viewSchedules(draft, params);
    else if (view === "workers") await viewWorkers(draft, params);
    else if (view === "all") await viewAll(draft);
    else await viewOverview(draft, params);
    if (!current()) {
      (draft.charts || new Map()).forEach((chart) => chart.destroy());
      return;
    }
    state.charts.forEach((chart) => chart.destroy());
    state.charts = draft.charts || new Map();
    fill(main, Array.from(draft.childNodes));
    state.failed = false;
    setStatus("updated " + new Date().toLocaleTimeString(), false);
  } catch (error) {
    if (!current()) return;
    state.failed = true; // the next tick tries again, whatever the page
    const message = error instanceof ApiError ? error.message : String(error);
    setStatus(message, true);
    if (!main.childElementCount || error.status === 404 || error.status === 403) {
      fill(main, notice(message, true));
    }
  }
}

// The namespace picker: those the dashboard shows (new ones appear as they are used).
function showNamespaces() {
  const names = state.meta.namespaces.length ? state.meta.namespaces : ["default"];
  const select = document.getElementById("namespace");
  const options = [...names, ...(names.length > 1 ? [ALL] : [])];
  if (options.join("\n") === Array.from(select.options, (o) => o.value).join("\n")) return;
  fill(select, names.map((n) => h("option", { value: n }, n)),
    names.length > 1 ? h("option", { value: ALL }, "all namespaces") : null);
  select.value = state.view === "all" ? ALL : state.namespace;
}

async function refreshNamespaces() {
  try {
    state.meta = await api("/api/meta");
    showNamespaces();
  } catch (error) {
    // the view's own request reports the error
  }
}

function schedule() {
  clearTimeout(state.timer);
  state.timer = setTimeout(async () => {
    const modalOpen = !document.getElementById("modal").hidden;
    if ((LIVE_VIEWS.has(state.view) || state.failed) && !modalOpen && !document.hidden) {
      await refreshNamespaces();
      await render();
    }
    schedule();
  }, (state.meta.refresh_seconds || 2) * 1000);
}

async function start() {
  try {
    state.meta = await api("/api/meta");
  } catch (error) {
    setStatus(error.message, true);
    document.getElementById("view").replaceChildren(notice(error.message, true));
    return;
  }
  const select = document.getElementById("namespace");
  showNamespaces();
  select.addEventListener("change", () => {
    location.hash = select.value === ALL ? "/all" : "/ns/" + encodeURIComponent(select.value);
  });
  if (state.meta.read_only) document.getElementById("mode").textContent = "read-only";
  window.addEventListener("hashchange", () => { state.flash = null; render(); });
  await render();
  schedule();
}

start();
