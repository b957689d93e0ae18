// The page: reads the form, runs the replay or the fleets in a worker, draws what comes back.
//
// Two views share the trace input and the request settings: Replay (histories, charts.js)
// and Fleet (simulated fleets, fleet.js). Settings live in the URL's query (view; capacities,
// policies; workers, workerCapacities, routers, engineBlockSize, history, timing, speedup,
// seed; blockSize, warmup, skipInvalid), so a configuration can be bookmarked or shared; `?run`
// starts the sample at once.

import { $, cell, drawCapacityChart, drawTimeChart, duration, fmt, legend, share } from "./charts.js";
import { fleetReport, redrawFleetChart, renderFleet } from "./fleet.js";

const SAMPLE_URL = "traces/mooncake_synthetic_trace.jsonl";

const form = $("#controls");
const ui = {
  capacities: $("#capacities"),
  blockSize: $("#block-size"),
  warmup: $("#warmup"),
  skipInvalid: $("#skip-invalid"),
  policies: [...document.querySelectorAll('input[name="policy"]')],
  workers: $("#workers"),
  workerCapacities: $("#worker-capacities"),
  routers: $("#routers"),
  engineBlockSize: $("#engine-block-size"),
  history: $("#history"),
  timings: [...document.querySelectorAll('input[name="timing"]')],
  speedup: $("#speedup"),
  seed: $("#seed"),
  views: [...document.querySelectorAll('input[name="view"]')],
  sources: [...document.querySelectorAll('input[name="source"]')],
  file: $("#file"),
  drop: $("#drop"),
  fileName: $("#file-name"),
  run: $("#run"),
  cancel: $("#cancel"),
  bar: $("#progress-bar"),
  progress: $("#progress-text"),
  error: $("#error"),
  engine: $("#engine"),
};

// The chosen files, in the order they replay (by name).
let files = [];
// Above this size a single file is read in chunks rather than whole.
const WHOLE_FILE_MAX_BYTES = 256 << 20;
let worker = null;
let workerReady = false;
let current = null; // the replay's { histories, timeline, report, startMs }
let running = null; // the view whose run is under way

const VIEWS = {
  replay: {
    run: "Replay", verb: "Replaying", title: "kvreuse · prefix-reuse replay",
    tagline: "How much of this prompt traffic was computed before?",
  },
  fleet: {
    run: "Simulate fleets", verb: "Simulating", title: "kvreuse · where reuse goes in a fleet",
    tagline: "Where does reuse go in a fleet of workers?",
  },
};

function view() {
  return ui.views.find((v) => v.checked).value;
}

function syncView() {
  const name = view();
  document.body.dataset.view = name;
  ui.run.textContent = VIEWS[name].run;
  $("#tagline").textContent = VIEWS[name].tagline;
  document.title = VIEWS[name].title;
  if (name === "fleet") redrawFleetChart();
  else renderCharts();
}

function setState(state) {
  document.body.dataset.state = state;
  const busy = state === "running";
  ui.run.disabled = busy;
  ui.cancel.hidden = !busy;
}

// A worker is started ahead of time, so the engine is compiled before the first click.
function spawnWorker() {
  workerReady = false;
  worker = new Worker(new URL("./worker.js", import.meta.url), { type: "module" });
  worker.onmessage = ({ data }) => onMessage(data);
  worker.onerror = (event) => {
    event.preventDefault();
    fail({ name: "Error", message: event.message || "the engine's worker failed to start" });
  };
}

async function engineInfo() {
  try {
    const size = await (await fetch("pkg/size.json")).json();
    return ` · ${(size.optimized_bytes / 1024).toFixed(0)} KiB of wasm`;
  } catch {
    return "";
  }
}

function onMessage(data) {
  switch (data.type) {
    case "ready":
      workerReady = true;
      engineInfo().then((info) => { ui.engine.textContent = `engine ready${info}`; });
      break;
    case "start":
      current = { histories: data.histories, timeline: [], report: null, startMs: null };
      break;
    case "progress":
      showProgress(data);
      break;
    case "snapshot":
      if (current) {
        current.timeline.push(data.point);
        liveTimeChart();
      }
      break;
    case "done":
      finish(data);
      break;
    case "error":
      fail(data);
      break;
  }
}

function showProgress({ progress, requests, ran }) {
  ui.bar.style.width = `${(100 * progress).toFixed(1)}%`;
  const verb = VIEWS[running ?? "replay"].verb;
  ui.progress.textContent = requests === null
    ? `${verb} ${fmt(ran)} requests`
    : `${verb} ${fmt(ran)} / ${fmt(requests)} requests`;
}

let lastLiveDraw = 0;
function liveTimeChart() {
  const now = performance.now();
  if (now - lastLiveDraw < 200 || current.timeline.length < 2) return;
  lastLiveDraw = now;
  const first = current.timeline.find((p) => p.timeMs !== null);
  drawTimeChart($("#chart-time"), current.histories, current.timeline, first ? first.timeMs : null);
}

// An optional field: its text, or undefined when empty (the engine's default).
const optional = (input) => (input.value.trim() === "" ? undefined : input.value.trim());

// The settings of the view `name`, as the URL and the engine name them (undefined: default).
function readForm(name) {
  const shared = {
    // Empty: the format's block size (Mooncake 512, Bailian 16, a document's own).
    blockSize: optional(ui.blockSize) && Number(ui.blockSize.value),
    warmup: Number(ui.warmup.value || 0),
    skipInvalid: ui.skipInvalid.checked,
  };
  if (name === "fleet") {
    return {
      workers: ui.workers.value.trim(),
      workerCapacities: ui.workerCapacities.value.trim(),
      routers: ui.routers.value.trim(),
      engineBlockSize: optional(ui.engineBlockSize) && Number(ui.engineBlockSize.value),
      history: optional(ui.history),
      timing: ui.timings.find((t) => t.checked).value,
      // The speedup divides the mocker's pass times: instant timing has none to read.
      speedup: !ui.speedup.disabled && optional(ui.speedup) ? Number(ui.speedup.value) : undefined,
      seed: optional(ui.seed) && Number(ui.seed.value),
      ...shared,
    };
  }
  const policies = ui.policies.filter((p) => p.checked).map((p) => p.value);
  // Capacities size the fifo and lru histories: the inf policy alone has none to read.
  const sized = policies.some((p) => p !== "inf");
  const capacities = sized ? ui.capacities.value.trim() : undefined;
  return { capacities, policies: policies.join(","), ...shared };
}

// The engine's options: defaults left out; a warm-up of 1 or more is a number of requests.
function engineOptions(options) {
  const { warmup, ...rest } = options;
  for (const key of Object.keys(rest)) if (rest[key] === undefined) delete rest[key];
  return warmup >= 1 ? { ...rest, warmupRequests: warmup } : { ...rest, warmup };
}

function writeUrl(name, options) {
  const query = new URLSearchParams(name === "fleet" ? { view: name } : {});
  for (const [key, value] of Object.entries(options)) {
    if (key === "skipInvalid") {
      if (value) query.set(key, "1");
    } else if (value !== undefined) {
      query.set(key, String(value));
    }
  }
  history.replaceState(null, "", `${location.pathname}?${query}`);
}

function readUrl() {
  const query = new URLSearchParams(location.search);
  const fields = {
    capacities: ui.capacities, workers: ui.workers, workerCapacities: ui.workerCapacities,
    routers: ui.routers, engineBlockSize: ui.engineBlockSize, history: ui.history,
    speedup: ui.speedup, seed: ui.seed, blockSize: ui.blockSize, warmup: ui.warmup,
  };
  for (const [key, input] of Object.entries(fields)) {
    if (query.has(key)) input.value = query.get(key);
  }
  if (query.has("policies")) {
    const chosen = query.get("policies").split(",").map((p) => p.trim());
    for (const box of ui.policies) box.checked = chosen.includes(box.value);
  }
  for (const [key, radios] of [["timing", ui.timings], ["view", ui.views]]) {
    const radio = radios.find((r) => r.value === query.get(key));
    if (radio) radio.checked = true;
  }
  ui.skipInvalid.checked = query.get("skipInvalid") === "1";
  return query.has("run");
}

function source() {
  return ui.sources.find((s) => s.checked).value;
}

async function start(event) {
  event?.preventDefault();
  clearError();
  const name = view();
  const options = readForm(name);
  if (name === "replay" && !options.policies) {
    fail({ name: "TypeError", message: "choose at least one policy" });
    return;
  }
  let message;
  if (source() === "file") {
    if (!files.length) {
      fail({ name: "TypeError", message: "choose or drop a trace file first" });
      return;
    }
    if (files.length === 1 && files[0].size <= WHOLE_FILE_MAX_BYTES) {
      const bytes = await files[0].arrayBuffer();
      message = { source: { bytes }, transfer: [bytes] };
    } else {
      message = { source: { files }, transfer: [] };
    }
  } else {
    message = { source: { url: new URL(SAMPLE_URL, location.href).href }, transfer: [] };
  }
  writeUrl(name, options);
  setState("running");
  running = name;
  ui.bar.style.width = "0%";
  ui.progress.textContent = workerReady ? "Starting…" : "Loading the engine…";
  if (name === "replay") current = null;
  worker.postMessage(
    { type: "run", engine: name, source: message.source, options: engineOptions(options) },
    message.transfer,
  );
}

function cancel() {
  running = null;
  worker.terminate();
  spawnWorker();
  setState("idle");
  ui.bar.style.width = "0%";
  ui.progress.textContent = "Cancelled.";
}

function fail({ name, message }) {
  const wasRunning = document.body.dataset.state === "running";
  running = null;
  ui.error.textContent = `${name}: ${message}`;
  ui.error.hidden = false;
  ui.progress.textContent = "Stopped.";
  setState("error");
  if (wasRunning) {
    // The worker stopped half way through a run; the next run gets a fresh one.
    worker.terminate();
    spawnWorker();
  }
}

function clearError() {
  ui.error.hidden = true;
  ui.error.textContent = "";
}

function finish({ engine, report, timeline, traceStartMs, elapsedMs, bytes, longestStepMs }) {
  running = null;
  ui.bar.style.width = "100%";
  ui.progress.textContent =
    `Done: ${fmt(report.requests)} requests, ${(bytes / 1e6).toFixed(1)} MB, in ${duration(elapsedMs)}.`;
  // For tests: the longest call into the engine, which blocked its worker that long.
  ui.progress.dataset.longestStepMs = longestStepMs.toFixed(1);
  if (engine === "fleet") {
    renderFleet(report, elapsedMs, bytes);
    $("#fleet-copy-json").disabled = false;
    $("#fleet-download-json").disabled = false;
  } else {
    current = { ...current, report, timeline, startMs: traceStartMs };
    renderSummary(report, elapsedMs, bytes);
    renderCharts();
    renderTable(report);
    $("#copy-json").disabled = false;
    $("#download-json").disabled = false;
  }
  setState("done");
  // This worker's run is over; the next run gets a fresh one.
  worker.terminate();
  spawnWorker();
}

function renderSummary(report, elapsedMs, bytes) {
  const put = (key, value) => {
    for (const node of document.querySelectorAll(`#summary [data-key="${key}"]`)) node.textContent = value;
  };
  put("requests", fmt(report.requests));
  put("measured_requests", fmt(report.measured_requests));
  put("block_size", fmt(report.block_size));
  put("warmup", report.warmup_requests === null ? String(report.warmup) : `${fmt(report.warmup_requests)} requests`);
  put("skipped_lines", fmt(report.skipped_lines));
  const f0 = report.rows[0]?.f0_tokens ?? 0;
  $("#f0-total").textContent = fmt(f0);
  const inf = report.rows.find((r) => r.capacity === "inf");
  const best = inf ?? report.rows.reduce((a, r) => (r.f1_tokens > (a?.f1_tokens ?? -1) ? r : a), null);
  $("#ceiling").textContent = best ? share(best.f1_tokens, best.f0_tokens, 2) : "–";
  $("#ceiling").previousElementSibling.textContent = inf ? "reuse ceiling (inf F1/F0)" : "best F1/F0";
  $("#elapsed").textContent = duration(elapsedMs);
  $("#throughput").textContent = elapsedMs > 0
    ? `${fmt(Math.round(report.requests / (elapsedMs / 1000)))} requests/s · ${(bytes / 1e6 / (elapsedMs / 1000)).toFixed(0)} MB/s`
    : "";
}

function renderCharts() {
  if (!current?.report || view() !== "replay") return;
  drawCapacityChart($("#chart-capacity"), current.report.rows);
  drawTimeChart($("#chart-time"), current.report.rows, current.timeline, current.startMs);
  legend($("#time-legend"), current.report.rows);
  const windowSize = current.timeline.length > 1 ? current.timeline[1].replayed - current.timeline[0].replayed : 0;
  $("#time-caption").textContent = windowSize
    ? `per window of ${fmt(windowSize)} requests; hover for values`
    : "per window of requests";
}

function humanBytes(bytes) {
  const units = ["B", "KiB", "MiB", "GiB"];
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit + 1 < units.length) { value /= 1024; unit++; }
  return unit ? `${value.toFixed(1)} ${units[unit]}` : `${bytes} B`;
}

function renderTable(report) {
  const body = $("#results tbody");
  body.replaceChildren();
  const ratio = (part, whole) => (whole ? part / whole : null);
  for (const row of report.rows) {
    const tr = document.createElement("tr");
    tr.className = `policy-${row.policy}`;
    const policy = cell("policy", row.policy, null, null, false);
    policy.insertAdjacentHTML("afterbegin", `<span class="swatch ${row.policy}"></span>`);
    const f1 = ratio(row.f1_tokens, row.f0_tokens);
    tr.append(
      policy,
      cell("capacity", row.capacity === "inf" ? "inf" : fmt(row.capacity)),
      cell("heap_bytes", row.heap_bytes === null ? "–" : fmt(row.heap_bytes), row.heap_bytes === null ? null : humanBytes(row.heap_bytes)),
      cell("f0_tokens", fmt(row.f0_tokens)),
      cell("f1_tokens", fmt(row.f1_tokens)),
      cell("f1_ratio", share(row.f1_tokens, row.f0_tokens, 2), null, f1),
      cell("any_tokens", fmt(row.any_tokens)),
      cell("any_ratio", share(row.any_tokens, row.f0_tokens, 2)),
      cell("f1_blocks", fmt(row.f1_blocks)),
      cell("evictions", fmt(row.evictions)),
      cell("reach_ms", row.reach_ms === null ? "–" : fmt(row.reach_ms), row.reach_ms === null ? null : duration(row.reach_ms)),
    );
    body.appendChild(tr);
  }
}

function pickFiles(chosen) {
  if (!chosen.length) return;
  files = [...chosen].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  const mb = (files.reduce((sum, f) => sum + f.size, 0) / 1e6).toFixed(1);
  ui.fileName.textContent = files.length === 1
    ? `${files[0].name} · ${mb} MB`
    : `${fmt(files.length)} files · ${mb} MB`;
  ui.sources.find((s) => s.value === "file").checked = true;
  syncSource();
}

function syncSource() {
  const isFile = source() === "file";
  ui.drop.classList.toggle("active", isFile);
  $("#sample-info").classList.toggle("dim", isFile);
}

// Wiring.
form.addEventListener("submit", start);
ui.cancel.addEventListener("click", cancel);
ui.sources.forEach((s) => s.addEventListener("change", syncSource));
ui.file.addEventListener("change", () => pickFiles(ui.file.files));
for (const type of ["dragenter", "dragover"]) {
  ui.drop.addEventListener(type, (e) => { e.preventDefault(); ui.drop.classList.add("over"); });
}
for (const type of ["dragleave", "drop"]) {
  ui.drop.addEventListener(type, (e) => { e.preventDefault(); ui.drop.classList.remove("over"); });
}
ui.drop.addEventListener("drop", async (e) => pickFiles(await droppedFiles(e.dataTransfer)));

// The files dropped: files as they are, a folder as its .json and .json.gz files (a folder of
// kv-cache-tester conversations), as the command line takes a directory.
async function droppedFiles(transfer) {
  const entries = [...transfer.items].map((item) => item.webkitGetAsEntry?.()).filter(Boolean);
  if (!entries.some((entry) => entry.isDirectory)) return [...transfer.files];
  const out = [];
  for (const entry of entries) {
    if (entry.isFile) {
      out.push(await new Promise((ok, err) => entry.file(ok, err)));
      continue;
    }
    const reader = entry.createReader();
    for (;;) {
      const batch = await new Promise((ok, err) => reader.readEntries(ok, err));
      if (!batch.length) break;
      for (const child of batch) {
        if (child.isFile && /\.json(\.gz)?$/i.test(child.name)) {
          out.push(await new Promise((ok, err) => child.file(ok, err)));
        }
      }
    }
  }
  return out;
}
// Dropping anywhere else must not navigate away from the page.
window.addEventListener("dragover", (e) => e.preventDefault());
window.addEventListener("drop", (e) => e.preventDefault());

// Copy and download of a view's report, as `kvreuse replay --json` / `kvreuse fleet --json`.
for (const [prefix, name, report] of [["", "replay", () => current?.report], ["fleet-", "fleet", fleetReport]]) {
  const copy = $(`#${prefix}copy-json`);
  copy.addEventListener("click", async () => {
    if (!report()) return;
    await navigator.clipboard.writeText(JSON.stringify(report()));
    copy.textContent = "Copied";
    setTimeout(() => { copy.textContent = "Copy JSON"; }, 1200);
  });
  $(`#${prefix}download-json`).addEventListener("click", () => {
    if (!report()) return;
    const link = document.createElement("a");
    link.href = URL.createObjectURL(new Blob([JSON.stringify(report()) + "\n"], { type: "application/json" }));
    link.download = `kvreuse-${name}.json`;
    link.click();
    URL.revokeObjectURL(link.href);
  });
}

let resizeTimer = 0;
window.addEventListener("resize", () => {
  clearTimeout(resizeTimer);
  resizeTimer = setTimeout(() => (view() === "fleet" ? redrawFleetChart() : renderCharts()), 120);
});

ui.views.forEach((v) => v.addEventListener("change", syncView));
const syncTiming = () => { ui.speedup.disabled = ui.timings.find((t) => t.checked).value === "instant"; };
ui.timings.forEach((t) => t.addEventListener("change", syncTiming));

spawnWorker();
syncSource();
const runNow = readUrl();
syncView();
syncTiming();
if (runNow) start();
