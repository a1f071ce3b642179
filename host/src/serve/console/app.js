// The web console of `weir serve`. Plain ES2020, no build step, no dependencies but uPlot.
// Every piece of data reaches the page through textContent or attributes, never as HTML.
(function () {
  "use strict";

  const TOKEN_KEY = "weir-token";
  const POLL_MS = 1000;
  const RATE_WINDOW_MS = 5 * 60 * 1000;
  const LOG_TAIL = 200;
  const $ = (id) => document.getElementById(id);

  const state = {
    epoch: 0,          // bumped on sign-in, sign-out and route change: stale poll results are dropped
    timer: null,       // the single poll timer
    inFlight: false,   // a poll is running
    pollAgain: false,  // poll again as soon as the running one ends
    authed: false,     // the host accepted the token in this session
    route: { page: "jobs", id: null },
    jobs: [],
    job: null,         // state of the job page, see newJobState
    pendingAction: null,
    actionBusy: false,
  };

  function newJobState(id) {
    return {
      id, info: null,
      rates: { times: [], keys: [], values: new Map() }, lastTime: null,
      chart: null, chartSig: "",
      graphSig: "", opsSig: "", ckFor: null, ckSig: null, logsSig: "",
      // The checkpoint history's pages: the cursors of the older pages shown (none: the
      // newest), and whether the page shown has an older one.
      ckCursors: [], ckOlder: false,
      // The job has a completed checkpoint to restart from.
      hasCheckpoint: false,
    };
  }

  // ---------------------------------------------------------------- api

  class HttpError extends Error {
    constructor(status, message) { super(message); this.status = status; }
  }
  class NetError extends Error {}

  const token = () => sessionStorage.getItem(TOKEN_KEY);
  const isAuthError = (e) => e instanceof HttpError && e.status === 401;

  async function api(path, method = "GET") {
    let res;
    try {
      res = await fetch(path, {
        method,
        headers: { Authorization: "Bearer " + (token() || ""), Accept: "application/json" },
        cache: "no-store",
        credentials: "omit",
      });
    } catch (e) {
      throw new NetError((e && e.message) || String(e));
    }
    let body = null, parsed = true;
    try { body = await res.json(); } catch (_) { parsed = false; }
    if (!res.ok) {
      const msg = body && typeof body.error === "string" ? body.error : `${res.status} ${res.statusText}`;
      throw new HttpError(res.status, msg);
    }
    if (!parsed) throw new HttpError(res.status, `the host answered ${path} with something that is not JSON`);
    return body;
  }

  const jobPath = (id, rest) => `/v1/jobs/${encodeURIComponent(id)}/${rest}`;

  // ---------------------------------------------------------------- formatting

  const DASH = "—";
  const pad = (n, w = 2) => String(n).padStart(w, "0");
  const isNum = (v) => typeof v === "number" && isFinite(v);

  function fmtRate(v) {
    if (!isNum(v)) return DASH;
    const a = Math.abs(v);
    if (a < 100) return `${Number(v.toFixed(1))}/s`;
    if (a < 1000) return `${Math.round(v)}/s`;
    if (a < 1e6) return `${(v / 1e3).toFixed(1)} k/s`;
    if (a < 1e9) return `${(v / 1e6).toFixed(2)} M/s`;
    return `${(v / 1e9).toFixed(2)} G/s`;
  }

  function fmtBytes(b) {
    if (!isNum(b)) return DASH;
    if (Math.abs(b) < 1024) return `${b} B`;
    const units = ["KiB", "MiB", "GiB", "TiB"];
    let v = b / 1024, i = 0;
    while (Math.abs(v) >= 1024 && i < units.length - 1) { v /= 1024; i++; }
    return `${v.toFixed(Math.abs(v) < 10 ? 2 : 1)} ${units[i]}`;
  }

  const fmtMs = (v) => (!isNum(v) ? DASH : `${v < 10 ? v.toFixed(1) : Math.round(v)} ms`);
  // A duration in the unit that reads best: ms, s, min, h, d.
  function fmtLag(ms) {
    if (!isNum(ms)) return DASH;
    if (ms < 1000) return `${Math.round(ms)} ms`;
    const s = ms / 1000;
    if (s < 60) return `${s.toFixed(1)} s`;
    if (s < 3600) return `${(s / 60).toFixed(1)} min`;
    if (s < 86400) return `${(s / 3600).toFixed(1)} h`;
    return `${(s / 86400).toFixed(1)} d`;
  }
  const fmtCount = (n) => (isNum(n) ? String(n) : DASH);
  const fmtHuman = (n) => (isNum(n) ? n.toLocaleString("en-US") : "");

  function fmtUptime(ms) {
    const s = Math.max(0, Math.floor(ms / 1000));
    const m = Math.floor(s / 60), h = Math.floor(m / 60), d = Math.floor(h / 24);
    if (s < 60) return `${s}s`;
    if (m < 60) return `${m}m ${pad(s % 60)}s`;
    if (h < 24) return `${h}h ${pad(m % 60)}m`;
    return `${d}d ${pad(h % 24)}h`;
  }

  function fmtAgo(atMs) {
    if (!isNum(atMs)) return DASH;
    const s = Math.max(0, Math.round((Date.now() - atMs) / 1000));
    if (s < 120) return `${s} s ago`;
    if (s < 7200) return `${Math.round(s / 60)} min ago`;
    if (s < 172800) return `${Math.round(s / 3600)} h ago`;
    return `${Math.round(s / 86400)} d ago`;
  }

  // The page's one time format: the browser's local time with its zone
  // (`2026-12-03 17:42:07 GMT+1`); tooltips give the same instant in ISO 8601 (`fmtIso`).
  const ZONE = new Intl.DateTimeFormat(undefined, { timeZoneName: "short" });
  function fmtTime(ms) {
    if (!isNum(ms)) return DASH;
    const d = new Date(ms);
    // A time outside what a Date holds shows as its number, not as an exception.
    if (isNaN(d.getTime())) return `${ms} ms`;
    const zone = ZONE.formatToParts(d).find((p) => p.type === "timeZoneName");
    const date = `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}`;
    const time = `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
    return `${date} ${time}${zone ? ` ${zone.value}` : ""}`;
  }

  function fmtIso(ms) {
    if (!isNum(ms)) return "";
    const d = new Date(ms);
    return isNaN(d.getTime()) ? "" : d.toISOString();
  }

  function fmtWatermark(ms, lagMs, ended) {
    if (ended) return "end of input";
    if (!isNum(ms)) return DASH;
    return isNum(lagMs) ? `${fmtTime(ms)} · lag ${fmtLag(lagMs)}` : fmtTime(ms);
  }

  // ---------------------------------------------------------------- DOM helpers

  // Creates an element; text goes in with textContent only.
  function h(tag, cls, text) {
    const el = document.createElement(tag);
    if (cls) el.className = cls;
    if (text != null) el.textContent = String(text);
    return el;
  }

  function setText(el, text, title) {
    if (!el) return;
    const t = String(text);
    if (el.textContent !== t) el.textContent = t;
    const ti = title == null ? "" : String(title);
    if (el.title !== ti) el.title = ti;
  }

  const cell = (tr, cls) => tr.querySelector(`:scope > .${cls}`);

  function emptyRow(text, cols) {
    const tr = h("tr", "empty");
    const td = h("td", null, text);
    td.colSpan = cols;
    tr.append(td);
    return tr;
  }

  // Keeps one row per item (keyed), reusing rows so hover titles and selections survive polls.
  function syncRows(tbody, items, keyOf, build, fill) {
    const old = new Map();
    for (const tr of tbody.children) if (tr.dataset.key != null) old.set(tr.dataset.key, tr);
    const rows = items.map((item) => {
      const key = keyOf(item);
      let tr = old.get(key);
      if (!tr) { tr = build(item); tr.dataset.key = key; }
      fill(tr, item);
      return tr;
    });
    const same = rows.length === tbody.children.length && rows.every((r, i) => tbody.children[i] === r);
    if (!same) tbody.replaceChildren(...rows);
  }

  function rowWithCells(cells) {
    const tr = h("tr");
    for (const c of cells) tr.append(h("td", c));
    return tr;
  }

  const LEVELS = ["ok", "low", "high"];

  function setBackpressure(el, bp, base) {
    const level = bp && typeof bp.level === "string" ? bp.level : null;
    el.className = base + (level ? ` level-${level}` : "");
    const title = bp && isNum(bp.ratio) ? `backpressured ${(bp.ratio * 100).toFixed(1)}% of the time` : "";
    setText(el, level ? level.toUpperCase() : DASH, title);
  }

  function worstBackpressure(node) {
    let worst = node.backpressure || null;
    for (const s of node.subtasks || []) {
      const bp = s.backpressure;
      if (bp && (!worst || LEVELS.indexOf(bp.level) > LEVELS.indexOf(worst.level))) worst = bp;
    }
    return worst;
  }

  function setOptions(select, items, keep) {
    // items: [{value, label, disabled?, title?}]
    select.replaceChildren(...items.map((it) => {
      const o = h("option", null, it.label);
      o.value = it.value;
      if (it.disabled) o.disabled = true;
      if (it.title) o.title = it.title;
      return o;
    }));
    const ok = items.some((it) => it.value === keep && !it.disabled);
    select.value = ok ? keep : "";
  }

  // ---------------------------------------------------------------- jobs page

  const JOB_CELLS = ["name", "id", "status", "uptime", "in-rate", "out-rate", "checkpoint-age", "error"];

  function renderJobs(jobs) {
    const body = $("jobs-body");
    if (!jobs.length) {
      body.replaceChildren(emptyRow("No jobs. Submit one with `weir submit JOB.toml`.", JOB_CELLS.length));
      return;
    }
    syncRows(body, jobs, (j) => j.id, buildJobRow, fillJobRow);
  }

  function buildJobRow(job) {
    const tr = rowWithCells(JOB_CELLS);
    tr.dataset.job = job.id;
    cell(tr, "name").append(h("a", "job-link"));
    for (const c of ["in-rate", "out-rate"]) cell(tr, c).classList.add("num");
    return tr;
  }

  function fillJobRow(tr, j) {
    const link = tr.querySelector("a.job-link");
    setText(link, j.name);
    const href = `#/jobs/${encodeURIComponent(j.id)}`;
    if (link.getAttribute("href") !== href) link.setAttribute("href", href);
    setText(cell(tr, "id"), j.id);
    const st = cell(tr, "status");
    st.className = `status status-${j.status}`;
    setText(st, j.status);
    tr.classList.toggle("job-failed", j.status === "failed");
    const running = j.status === "running" && isNum(j.started_at_ms);
    setText(cell(tr, "uptime"), running ? fmtUptime(Date.now() - j.started_at_ms) : DASH,
      isNum(j.started_at_ms) ? `started ${fmtIso(j.started_at_ms)}` : "");
    setText(cell(tr, "in-rate"), fmtRate(j.in_per_second), `${fmtHuman(j.source_records)} records read`);
    setText(cell(tr, "out-rate"), fmtRate(j.out_per_second), `${fmtHuman(j.sink_records)} records written`);
    const ck = j.last_checkpoint != null ? `checkpoint ${j.last_checkpoint} at ${fmtIso(j.last_checkpoint_at_ms)}` : "";
    setText(cell(tr, "checkpoint-age"), fmtAgo(j.last_checkpoint_at_ms), ck);
    setText(cell(tr, "error"), j.error || "", j.error || "");
  }

  // ---------------------------------------------------------------- job page: header and actions

  function renderJobHeader(js, info) {
    js.info = info;
    setText($("job-title"), info ? info.name : js.id);
    setText($("job-id"), js.id);
    const st = $("job-status");
    const status = info ? info.status : "unknown";
    st.className = `status status-${status}`;
    setText(st, status);
    document.title = `Weir · ${info ? info.name : js.id}`;
    const err = $("job-error");
    const errText = info ? info.error || "" : `No job ${js.id} on this host.`;
    setText(err, errText);
    err.hidden = !errText;
    setText($("job-meta"), info ? jobMeta(info) : "");
    renderVersions(info);
    updateButtons();
  }

  // A job's versions and upgrades (`weir upgrade`), newest first; hidden until it has one.
  function renderVersions(info) {
    const upgrades = info && Array.isArray(info.upgrades) ? info.upgrades : [];
    $("versions-panel").hidden = !upgrades.length;
    if (!upgrades.length) return;
    setText($("versions-current"), `Version ${info.version} runs.`);
    syncRows($("versions-body"), upgrades.slice().reverse(), (u) => `${u.to}`,
      () => rowWithCells(["upgrade", "time", "status", "savepoint", "why"]),
      (tr, u) => {
        const [upgrade, time, status, savepoint, why] = tr.children;
        setText(upgrade, `${u.from} → ${u.to}`);
        setText(time, fmtTime(u.at_ms), fmtIso(u.at_ms));
        setText(status, u.status.replace("-", " "));
        status.className = `upgrade-${u.status}`;
        setText(savepoint, u.savepoint);
        setText(why, u.reason || "");
      });
  }

  function jobMeta(j) {
    const parts = [];
    if (j.status === "running" && isNum(j.started_at_ms)) parts.push(`up ${fmtUptime(Date.now() - j.started_at_ms)}`);
    parts.push(`${fmtHuman(j.source_records)} read`, `${fmtHuman(j.sink_records)} written`);
    parts.push(`in ${fmtRate(j.in_per_second)}`, `out ${fmtRate(j.out_per_second)}`);
    if (j.version > 1) parts.push(`version ${j.version}`);
    if (!j.keeps_checkpoints) parts.push("keeps no checkpoints");
    else if (j.last_checkpoint != null) parts.push(`last checkpoint ${j.last_checkpoint}, ${fmtAgo(j.last_checkpoint_at_ms)}`);
    else parts.push("no checkpoint yet");
    if (Array.isArray(j.partitions) && j.partitions.length) {
      // A job that re-keys owns partitions of each stage's topic: one group per topic.
      const byTopic = new Map();
      for (const p of j.partitions) {
        const topic = p.topic || "";
        if (!byTopic.has(topic)) byTopic.set(topic, []);
        byTopic.get(topic).push(`${p.partition} (lag ${fmtCount(p.lag)})`);
      }
      const many = byTopic.size > 1;
      for (const [topic, owned] of byTopic) {
        parts.push((many ? `${topic} partitions ` : "partitions ") + owned.join(", "));
      }
    }
    return parts.join(" · ");
  }

  function updateButtons() {
    const info = state.job && state.job.info;
    const running = !!info && info.status === "running";
    const busy = state.actionBusy;
    for (const id of ["action-checkpoint", "action-cancel", "action-cancel-checkpoint"]) $(id).disabled = !running || busy;
    // A restart resumes from a checkpoint: without one there is nothing to restart from.
    const restartable = !!info && !running && !busy && hasCheckpoint(state.job, info);
    $("action-restart").disabled = !restartable;
    $("restart-checkpoint").disabled = !restartable;
    $("action-restart").title = info && !running && !hasCheckpoint(state.job, info)
      ? "no completed checkpoint to restart from: submit the job again" : "";
  }

  function hasCheckpoint(js, info) {
    if (js && js.hasCheckpoint) return true;
    if (info.last_checkpoint != null) return true;
    return Array.isArray(info.partitions) && info.partitions.some((p) => p.last_checkpoint != null);
  }

  function renderRestartOptions(js, list) {
    const seen = new Set();
    const items = (Array.isArray(list) ? list : [])
      .slice().sort((a, b) => b.id - a.id)
      .filter((c) => !seen.has(c.id) && seen.add(c.id));
    js.hasCheckpoint = items.some((c) => !c.damaged);
    updateButtons();
    const sig = items.map((c) => `${c.id}:${c.damaged ? 1 : 0}`).join(",");
    if (sig === js.ckSig) return;
    js.ckSig = sig;
    const opts = [{ value: "", label: "latest" }];
    for (const c of items) {
      const when = isNum(c.completed_at_ms) ? fmtTime(c.completed_at_ms) : (c.completed_at ? fmtTime(Date.parse(c.completed_at)) : DASH);
      let label = `${c.id} · ${when} · ${fmtBytes(c.bytes)}`;
      if (c.finished) label += " · end of input";
      if (c.damaged) label += " · damaged";
      opts.push({ value: String(c.id), label, disabled: !!c.damaged, title: c.damaged || "" });
    }
    const sel = $("restart-checkpoint");
    setOptions(sel, opts, sel.value);
  }

  function setActionMessage(text, kind) {
    const p = $("action-message");
    p.className = kind ? `msg-${kind}` : "";
    setText(p, text);
  }

  // Each action: the confirmation text, the POST path and the message on success.
  function describeAction(buttonId, js) {
    const label = `${js.info ? js.info.name : js.id} (${js.id})`;
    switch (buttonId) {
      case "action-checkpoint":
        return { ask: `Take a checkpoint of job ${label} now?`, path: "checkpoint", done: "Checkpoint requested", busy: "Taking a checkpoint…" };
      case "action-cancel":
        return { ask: `Cancel job ${label} without a last checkpoint? Its checkpoints stay.`, path: "cancel", done: "Cancel requested", busy: "Cancelling…" };
      case "action-cancel-checkpoint":
        return { ask: `Cancel job ${label} after a last checkpoint? Its checkpoints stay.`, path: "cancel?checkpoint=true", done: "Cancel after a checkpoint requested", busy: "Taking a last checkpoint, then cancelling…" };
      case "action-restart": {
        const ck = $("restart-checkpoint").value;
        return ck
          ? { ask: `Restart job ${label} from checkpoint ${ck}?`, path: `restart?checkpoint=${encodeURIComponent(ck)}`, done: `Restart from checkpoint ${ck} requested`, busy: "Restarting…" }
          : { ask: `Restart job ${label} from its latest checkpoint (from the start if it has none)?`, path: "restart", done: "Restart requested", busy: "Restarting…" };
      }
      default:
        return null;
    }
  }

  function askAction(buttonId) {
    const js = state.job;
    if (!js || state.actionBusy) return;
    const action = describeAction(buttonId, js);
    if (!action) return;
    state.pendingAction = () => runAction(js.id, action);
    setText($("confirm-text"), action.ask);
    $("confirm").showModal();
  }

  async function runAction(jobId, action) {
    const epoch = state.epoch;
    state.actionBusy = true;
    updateButtons();
    setActionMessage(action.busy, "pending");
    try {
      await api(jobPath(jobId, action.path), "POST");
      if (epoch === state.epoch) setActionMessage(action.done, "ok");
    } catch (e) {
      if (isAuthError(e)) logout(e.message);
      else if (epoch === state.epoch) {
        setActionMessage(e instanceof NetError ? `Cannot reach the host: ${e.message}` : e.message, "error");
      }
    } finally {
      state.actionBusy = false;
      updateButtons();
      requestPoll(0);
    }
  }

  // ---------------------------------------------------------------- job page: graph

  const NODE_FIELDS = [
    ["records-in", "records in"], ["records-out", "records out"], ["in-rate", "in"], ["out-rate", "out"],
    ["state-bytes", "state"], ["watermark", "watermark"], ["dropped-late", "dropped late"],
    ["lag", "lag"], ["backpressure", "backpressure"],
  ];
  const SUB_CELLS = ["subtask", "records-in", "records-out", "in-rate", "out-rate", "state-bytes", "lag", "backpressure"];
  const SUB_HEADS = ["#", "in", "out", "in/s", "out/s", "state", "lag", "bp"];

  function renderGraph(js, g) {
    const box = $("graph");
    const nodes = Array.isArray(g.nodes) ? g.nodes : [];
    const sig = nodes.map((n) => `${n.kind}:${n.name}:${(n.subtasks || []).map((s) => s.subtask).join(",")}`).join("|");
    if (sig !== js.graphSig) {
      js.graphSig = sig;
      const kids = [];
      nodes.forEach((n, i) => {
        if (i) { const a = h("div", "arrow", "→"); a.setAttribute("aria-hidden", "true"); kids.push(a); }
        kids.push(buildNode(n));
      });
      if (!nodes.length) kids.push(h("p", "empty", "No graph yet"));
      box.replaceChildren(...kids);
    }
    const els = box.querySelectorAll(":scope > .node");
    nodes.forEach((n, i) => fillNode(els[i], n));
    updateLogOperators(js, nodes);
  }

  function buildNode(n) {
    const node = h("div", `node kind-${n.kind}`);
    node.dataset.node = n.name;
    node.dataset.kind = n.kind;
    node.append(h("div", "node-name", n.name), h("div", "node-detail"));
    const dl = h("dl", "node-stats");
    for (const [cls, label] of NODE_FIELDS) dl.append(h("dt", `${cls}-label`, label), h("dd", cls));
    node.append(dl);
    const table = h("table", "subtasks");
    const head = h("tr");
    SUB_HEADS.forEach((t, i) => head.append(h("th", `col-${SUB_CELLS[i]}`, t)));
    const thead = h("thead");
    thead.append(head);
    const tbody = h("tbody");
    for (const s of n.subtasks || []) {
      const tr = rowWithCells(SUB_CELLS);
      tr.dataset.subtask = String(s.subtask);
      tbody.append(tr);
    }
    table.append(thead, tbody);
    node.append(table);
    return node;
  }

  function fillNode(node, n) {
    if (!node) return;
    const detail = [n.kind, n.detail, isNum(n.parallelism) ? `×${n.parallelism}` : null].filter(Boolean).join(" · ");
    setText(node.querySelector(".node-detail"), detail);
    const field = (cls) => node.querySelector(`.node-stats > .${cls}`);
    setText(field("records-in"), fmtCount(n.records_in), fmtHuman(n.records_in));
    setText(field("records-out"), fmtCount(n.records_out), fmtHuman(n.records_out));
    setText(field("in-rate"), fmtRate(n.in_per_second));
    setText(field("out-rate"), fmtRate(n.out_per_second));
    setText(field("state-bytes"), fmtBytes(n.state_bytes), fmtHuman(n.state_bytes));
    setText(field("watermark"), fmtWatermark(n.watermark_ms, n.watermark_lag_ms, n.event_time_ended),
      [fmtIso(n.watermark_ms), isNum(n.timers_pending) ? `${n.timers_pending} timers pending` : ""]
        .filter(Boolean).join(" · "));
    const dropped = field("dropped-late");
    const hasDropped = isNum(n.dropped_late) && n.dropped_late > 0;
    dropped.hidden = !hasDropped;
    node.querySelector(".node-stats > .dropped-late-label").hidden = !hasDropped;
    setText(dropped, hasDropped ? fmtCount(n.dropped_late) : "", hasDropped ? "records its windows dropped as too late" : "");
    // Lag: messages of the Kafka partitions it reads (a source's, a repartition topic's)
    // not read yet; shown only where there are such partitions.
    const hasLag = isNum(n.lag);
    field("lag").hidden = !hasLag;
    node.querySelector(".node-stats > .lag-label").hidden = !hasLag;
    setText(field("lag"), hasLag ? fmtCount(n.lag) : "", hasLag ? "messages not read yet" : "");
    for (const el of node.querySelectorAll("table.subtasks :is(.col-lag, td.lag)")) el.hidden = !hasLag;
    setBackpressure(field("backpressure"), worstBackpressure(n), "backpressure");
    const rows = node.querySelectorAll("table.subtasks > tbody > tr");
    (n.subtasks || []).forEach((s, i) => {
      const tr = rows[i];
      if (!tr) return;
      const label = s.partition != null ? `${s.subtask} · p${s.partition}` : String(s.subtask);
      setText(cell(tr, "subtask"), label, s.partition != null ? `partition ${s.partition}` : "");
      setText(cell(tr, "records-in"), fmtCount(s.records_in), fmtHuman(s.records_in));
      setText(cell(tr, "records-out"), fmtCount(s.records_out), fmtHuman(s.records_out));
      setText(cell(tr, "in-rate"), fmtRate(s.in_per_second));
      setText(cell(tr, "out-rate"), fmtRate(s.out_per_second));
      setText(cell(tr, "state-bytes"), fmtBytes(s.state_bytes), fmtHuman(s.state_bytes));
      setText(cell(tr, "lag"), isNum(s.lag) ? fmtCount(s.lag) : "");
      setBackpressure(cell(tr, "backpressure"), s.backpressure, "backpressure");
      tr.title = isNum(s.watermark_ms) || s.event_time_ended
        ? `watermark ${fmtWatermark(s.watermark_ms, null, s.event_time_ended)}` : "";
    });
  }

  // ---------------------------------------------------------------- job page: rates chart

  const COLORS = ["#2f6fb0", "#2e8b57", "#c0392b", "#8e44ad", "#d68910", "#16a085", "#7f8c8d", "#b03a6f"];

  // Appends a /rates answer to the kept series (a full answer replaces them); keeps 5 minutes.
  function mergeRates(js, r, full) {
    const R = js.rates;
    if (full) { R.times = []; R.keys = []; R.values = new Map(); }
    const incoming = new Map();
    for (const s of r.series || []) incoming.set(`${s.node} ${s.direction}`, s.values || []);
    const before = R.times.length;
    for (const k of incoming.keys()) {
      if (!R.values.has(k)) { R.keys.push(k); R.values.set(k, new Array(before).fill(null)); }
    }
    const times = Array.isArray(r.times_ms) ? r.times_ms : [];
    for (const t of times) R.times.push(t);
    for (const k of R.keys) {
      const add = incoming.get(k) || [], arr = R.values.get(k);
      for (let i = 0; i < times.length; i++) arr.push(isNum(add[i]) ? add[i] : null);
    }
    if (!R.times.length) return;
    js.lastTime = R.times[R.times.length - 1];
    const cut = js.lastTime - RATE_WINDOW_MS;
    let drop = 0;
    while (drop < R.times.length && R.times[drop] <= cut) drop++;
    if (drop) {
      R.times.splice(0, drop);
      for (const arr of R.values.values()) arr.splice(0, drop);
    }
  }

  function chartWidth() {
    return Math.max(320, $("chart").clientWidth || 0);
  }

  function renderChart(js) {
    const R = js.rates, el = $("chart");
    const empty = R.times.length === 0;
    $("chart-empty").hidden = !empty;
    if (empty) { destroyChart(js); return; }
    const data = [R.times.map((t) => t / 1000), ...R.keys.map((k) => R.values.get(k))];
    const sig = R.keys.join("|");
    if (js.chart && js.chartSig === sig) { js.chart.setData(data); return; }
    destroyChart(js);
    if (typeof window.uPlot !== "function") throw new Error("the chart library did not load");
    js.chartSig = sig;
    js.chart = new window.uPlot({
      width: chartWidth(),
      height: 220,
      // Rates from zero: a flat line at 2 k/s should not look like a swing.
      scales: { x: { time: true }, y: { range: (u, min, max) => [0, max > 0 ? max * 1.15 : 1] } },
      series: [{}, ...R.keys.map((k, i) => ({
        label: k,
        stroke: COLORS[i % COLORS.length],
        width: 1.5,
        value: (u, v) => fmtRate(v),
      }))],
      axes: [{}, { size: 70, values: (u, vals) => vals.map((v) => fmtRate(v)) }],
      legend: { show: true },
    }, data, el);
  }

  function destroyChart(js) {
    if (js && js.chart) { js.chart.destroy(); js.chart = null; js.chartSig = ""; }
    $("chart").replaceChildren();
  }

  // ---------------------------------------------------------------- job page: checkpoints

  const CK_CELLS = ["id", "partition", "status", "triggered", "duration", "sync-pause", "entries", "bytes", "deleted", "chain", "amplification", "error"];
  const CK_NUM = ["id", "partition", "duration", "sync-pause", "entries", "bytes", "deleted", "amplification"];

  const CK_PAGE = 20;
  // A record's place in the history, as `?before=` takes it.
  const ckCursor = (c) => `${c.triggered_at_ms}.${c.id}.${c.partition != null ? c.partition : "-"}`;

  function historyPath(js) {
    const before = js.ckCursors[js.ckCursors.length - 1];
    // One more than a page: whether there is an older page.
    return `checkpoints/history?limit=${CK_PAGE + 1}` + (before ? `&before=${encodeURIComponent(before)}` : "");
  }

  function renderHistoryPage(js, list) {
    const items = Array.isArray(list) ? list : [];
    js.ckOlder = items.length > CK_PAGE;
    js.ckPage = items.slice(0, CK_PAGE);
    renderHistory(js.ckPage);
    const page = js.ckCursors.length;
    setText($("ck-page"), page === 0 ? `newest ${CK_PAGE}` : `page ${page + 1}`);
    $("ck-newer").disabled = page === 0;
    $("ck-older").disabled = !js.ckOlder;
  }

  function pageHistory(older) {
    const js = state.job;
    if (!js) return;
    if (older) {
      const last = js.ckPage && js.ckPage[js.ckPage.length - 1];
      if (!last || !js.ckOlder) return;
      js.ckCursors.push(ckCursor(last));
    } else {
      js.ckCursors.pop();
    }
    requestPoll(0);
  }

  function renderHistory(list) {
    const body = $("checkpoints-body");
    const items = Array.isArray(list) ? list : [];
    if (!items.length) { body.replaceChildren(emptyRow("No checkpoints yet", CK_CELLS.length)); return; }
    syncRows(body, items, (c) => `${c.id}/${c.partition}`, (c) => {
      const tr = rowWithCells(CK_CELLS);
      tr.dataset.checkpoint = String(c.id);
      if (c.partition != null) tr.dataset.partition = String(c.partition);
      for (const k of CK_NUM) cell(tr, k).classList.add("num");
      return tr;
    }, fillCheckpointRow);
  }

  function fillCheckpointRow(tr, c) {
    setText(cell(tr, "id"), c.id);
    setText(cell(tr, "partition"), c.partition != null ? c.partition : DASH);
    const st = cell(tr, "status");
    st.className = `status status-${c.status}`;
    setText(st, c.status);
    setText(cell(tr, "triggered"), fmtTime(c.triggered_at_ms), fmtIso(c.triggered_at_ms));
    const waits = [];
    if (isNum(c.start_delay_ms)) waits.push(`start delay ${fmtMs(c.start_delay_ms)}`);
    if (isNum(c.alignment_ms)) waits.push(`alignment ${fmtMs(c.alignment_ms)}`);
    setText(cell(tr, "duration"), fmtMs(c.duration_ms), waits.join(", "));
    setText(cell(tr, "sync-pause"), fmtMs(c.sync_pause_ms));
    setText(cell(tr, "entries"), fmtCount(c.entries_written),
      isNum(c.artifacts_written) ? `${c.artifacts_written} artifacts written` : "");
    const sizes = [];
    if (isNum(c.state_bytes)) sizes.push(`state ${fmtBytes(c.state_bytes)}`);
    if (isNum(c.retained_bytes)) sizes.push(`retained ${fmtBytes(c.retained_bytes)}`);
    setText(cell(tr, "bytes"), fmtBytes(c.bytes_written), sizes.join(", "));
    setText(cell(tr, "deleted"), fmtCount(c.artifacts_deleted), "artifacts deleted");
    const chain = isNum(c.chain_max) ? `max ${c.chain_max}${isNum(c.chain_mean) ? `, mean ${c.chain_mean.toFixed(1)}` : ""}` : DASH;
    setText(cell(tr, "chain"), chain);
    setText(cell(tr, "amplification"), isNum(c.space_amplification) ? `${c.space_amplification.toFixed(2)}×` : DASH);
    setText(cell(tr, "error"), c.error || "", c.error || "");
    tr.classList.toggle("ck-failed", c.status === "failed");
  }

  // ---------------------------------------------------------------- job page: logs

  function updateLogOperators(js, nodes) {
    const names = [...new Set(nodes.filter((n) => n.kind === "operator").map((n) => n.name))];
    const sig = names.join("\n");
    if (sig === js.opsSig) return;
    js.opsSig = sig;
    const sel = $("log-operator");
    setOptions(sel, [{ value: "", label: "all operators" }, ...names.map((n) => ({ value: n, label: n }))], sel.value);
  }

  function logQuery() {
    const q = new URLSearchParams({ tail: String(LOG_TAIL) });
    const op = $("log-operator").value, level = $("log-level").value;
    if (op) q.set("operator", op);
    if (level) q.set("level", level);
    return q.toString();
  }

  function renderLogs(js, lines) {
    const items = Array.isArray(lines) ? lines : [];
    const sig = JSON.stringify(items);
    if (sig === js.logsSig) return;
    js.logsSig = sig;
    const box = $("log-lines");
    const atBottom = box.hidden || box.scrollHeight - box.scrollTop - box.clientHeight < 24;
    box.replaceChildren(...items.map(buildLogLine));
    box.hidden = !items.length;
    $("log-empty").hidden = items.length > 0;
    if (atBottom) box.scrollTop = box.scrollHeight;
  }

  function buildLogLine(l) {
    const div = h("div", "log-line");
    div.dataset.level = String(l.level);
    div.dataset.operator = String(l.operator);
    if (l.stream) div.dataset.stream = String(l.stream);
    const who = l.subtask != null ? `${l.operator}/${l.subtask}` : String(l.operator);
    const op = h("span", "operator", who);
    const extra = [];
    if (l.stream && l.stream !== "log") extra.push(l.stream);
    if (l.checkpoint != null) extra.push(`after checkpoint ${l.checkpoint}`);
    op.title = extra.join(", ");
    const at = Date.parse(String(l.time));
    const time = h("span", "time", isNum(at) ? fmtTime(at) : String(l.time));
    time.title = String(l.time);
    div.append(time, h("span", "level", l.level), op, h("span", "message", l.message));
    return div;
  }

  // ---------------------------------------------------------------- routing, polling, sign-in

  function parseRoute() {
    const m = /^#\/jobs\/(.+)$/.exec(location.hash);
    if (!m) return { page: "jobs", id: null };
    let id = m[1];
    try { id = decodeURIComponent(id); } catch (_) { /* keep it raw */ }
    return { page: "job", id };
  }

  // Forgets and unrenders the job page; starts afresh for `id` (or none).
  function resetJob(id) {
    destroyChart(state.job);
    state.job = id != null ? newJobState(id) : null;
    $("graph").replaceChildren();
    $("checkpoints-body").replaceChildren();
    $("log-lines").replaceChildren();
    $("log-lines").hidden = true;
    $("log-empty").hidden = true;
    $("chart-empty").hidden = true;
    for (const el of ["job-title", "job-id", "job-status", "job-meta", "job-error"]) setText($(el), "");
    $("job-error").hidden = true;
    setOptions($("restart-checkpoint"), [{ value: "", label: "latest" }], "");
    setOptions($("log-operator"), [{ value: "", label: "all operators" }], "");
    $("log-level").value = "";
    setActionMessage("", null);
    updateButtons();
  }

  function updateSections() {
    const signedIn = !!token();
    const showData = signedIn && state.authed;
    $("login").hidden = signedIn;
    $("logout").hidden = !signedIn;
    $("jobs").hidden = !(showData && state.route.page === "jobs");
    $("job").hidden = !(showData && state.route.page === "job");
    if (state.route.page === "jobs") document.title = "Weir · jobs";
  }

  function onRoute() {
    const route = parseRoute();
    const changed = route.page !== state.route.page || route.id !== state.route.id;
    state.route = route;
    if (changed || (route.page === "job" && !state.job)) resetJob(route.page === "job" ? route.id : null);
    state.epoch++;
    updateSections();
    if (route.page === "jobs") renderJobs(state.jobs);
    if (token()) requestPoll(0);
  }

  function showBanner(text) {
    const b = $("banner");
    setText(b, text);
    b.hidden = !text;
  }

  // The single poll timer: never two polls at once, the next one a second after the last ends.
  function requestPoll(delay) {
    clearTimeout(state.timer);
    state.timer = null;
    if (!token()) return;
    if (state.inFlight) { state.pollAgain = true; return; }
    state.timer = setTimeout(runPoll, delay);
  }

  async function runPoll() {
    state.timer = null;
    state.inFlight = true;
    const epoch = state.epoch;
    let errors;
    try { errors = await pollView(epoch); } catch (e) { errors = [e]; }
    state.inFlight = false;
    if (epoch === state.epoch) handlePollErrors(errors);
    const again = state.pollAgain;
    state.pollAgain = false;
    requestPoll(again ? 0 : POLL_MS);
  }

  function handlePollErrors(errors) {
    const auth = errors.find(isAuthError);
    if (auth) { logout(auth.message); return; }
    const net = errors.find((e) => e instanceof NetError);
    if (net) showBanner(`Cannot reach the host: ${net.message}; retrying`);
    else if (errors.length) showBanner(`The host answered: ${[...new Set(errors.map((e) => e.message))].join("; ")}`);
    else showBanner("");
  }

  // Fetches and renders the current view; returns the errors met (rendering what did arrive).
  async function pollView(epoch) {
    // The job page asks for its job alone: a host may run many.
    const onJob = state.route.page === "job" && state.job;
    const jobs = await api(onJob ? `/v1/jobs/${encodeURIComponent(state.job.id)}` : "/v1/jobs");
    if (epoch !== state.epoch) return [];
    state.authed = true;
    state.jobs = onJob ? [jobs] : (Array.isArray(jobs) ? jobs : []);
    updateSections();
    if (state.route.page !== "job" || !state.job) { renderJobs(state.jobs); return []; }

    const js = state.job;
    const info = state.jobs.find((j) => j.id === js.id) || null;
    renderJobHeader(js, info);
    const live = (fn) => (v) => { if (epoch === state.epoch && state.job === js) fn(v); };
    const full = js.lastTime == null;
    const query = logQuery();
    const tasks = [
      api(jobPath(js.id, "graph")).then(live((g) => renderGraph(js, g))),
      api(jobPath(js.id, full ? "rates" : `rates?since_ms=${js.lastTime}`))
        .then(live((r) => { mergeRates(js, r, full); renderChart(js); })),
      api(jobPath(js.id, historyPath(js))).then(live((list) => renderHistoryPage(js, list))),
      api(`${jobPath(js.id, "logs")}?${query}`)
        .then(live((lines) => { if (logQuery() === query) renderLogs(js, lines); })),
    ];
    // The restart list: when the page opens, and on every poll while the job is not running.
    if (js.ckFor !== js.id || (info && info.status !== "running")) {
      tasks.push(api(jobPath(js.id, "checkpoints"))
        .catch((e) => { if (e instanceof HttpError && e.status === 404) return []; throw e; })
        .then(live((list) => { js.ckFor = js.id; renderRestartOptions(js, list); })));
    }
    const results = await Promise.allSettled(tasks);
    return results.filter((r) => r.status === "rejected").map((r) => r.reason);
  }

  // Forgets the token and every rendered datum; shows the login form (with why, if refused).
  function logout(refusedBecause) {
    sessionStorage.removeItem(TOKEN_KEY);
    state.authed = false;
    state.epoch++;
    clearTimeout(state.timer);
    state.timer = null;
    state.jobs = [];
    state.pendingAction = null;
    if ($("confirm").open) $("confirm").close();
    $("jobs-body").replaceChildren();
    resetJob(state.route.page === "job" ? state.route.id : null);
    showBanner("");
    setText($("login-error"), refusedBecause != null
      ? `The host refused the token: ${refusedBecause}. Enter the token \`weir serve\` was started with.`
      : "");
    updateSections();
    $("token").focus();
  }

  function onLogin(ev) {
    ev.preventDefault();
    const input = $("token");
    const t = input.value.trim();
    if (!t) { setText($("login-error"), "Enter the token `weir serve` was started with."); return; }
    if (!/^[\x21-\x7e]+$/.test(t)) { setText($("login-error"), "A token is printable ASCII without spaces."); return; }
    sessionStorage.setItem(TOKEN_KEY, t);
    input.value = "";
    setText($("login-error"), "");
    state.authed = false;
    state.epoch++;
    updateSections();
    requestPoll(0);
  }

  // ---------------------------------------------------------------- start

  function start() {
    $("login-form").addEventListener("submit", onLogin);
    $("logout").addEventListener("click", () => logout(null));
    for (const id of ["action-checkpoint", "action-cancel", "action-cancel-checkpoint", "action-restart"]) {
      $(id).addEventListener("click", () => askAction(id));
    }
    $("confirm-yes").addEventListener("click", () => {
      const run = state.pendingAction;
      state.pendingAction = null;
      $("confirm").close();
      if (run) run();
    });
    $("ck-newer").addEventListener("click", () => pageHistory(false));
    $("ck-older").addEventListener("click", () => pageHistory(true));
    $("confirm-no").addEventListener("click", () => { state.pendingAction = null; $("confirm").close(); });
    $("confirm").addEventListener("close", () => { state.pendingAction = null; });
    for (const id of ["log-operator", "log-level"]) {
      $(id).addEventListener("change", () => { if (state.job) state.job.logsSig = ""; requestPoll(0); });
    }
    window.addEventListener("hashchange", onRoute);
    window.addEventListener("resize", () => {
      if (state.job && state.job.chart) state.job.chart.setSize({ width: chartWidth(), height: 220 });
    });
    state.route = parseRoute();
    resetJob(state.route.page === "job" ? state.route.id : null);
    updateSections();
    if (token()) requestPoll(0);
    else $("token").focus();
  }

  start();
})();
