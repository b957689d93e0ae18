// The page: reads the form, runs the replay in a worker, draws what comes back.
//
// Settings live in the URL's query (capacities, policies, blockSize, warmup, skipInvalid),
// so a configuration can be bookmarked or shared; `?run` starts the sample at once.

import { drawCapacityChart, drawTimeChart, duration, legend } from "./charts.js";

const $ = (selector) => document.querySelector(selector);
const SAMPLE_URL = "traces/mooncake_synthetic_trace.jsonl";
const fmt = (n) => n.toLocaleString("en-US");

const form = $("#controls");
const ui = {
  capacities: $("#capacities"),
  blockSize: $("#block-size"),
  warmup: $("#warmup"),
  skipInvalid: $("#skip-invalid"),
  policies: [...document.querySelectorAll('input[name="policy"]')],
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
let current = null; // { histories, timeline, report, startMs }

function setState(state) {
  document.body.dataset.state = state;
  const running = state === "running";
  ui.run.disabled = running;
  ui.cancel.hidden = !running;
}

// A worker is started ahead of time, so the engine is compiled before the first click.
function spawnWorker() {
  workerReady = false;
  worker = new Worker(new URL("./worker.js", import.meta.url), { type: "module" });
  worker.onmessage = ({ data }) => onMessage(data);
  worker.onerror = (event) => {
    event.preventDefault();
    fail({ name: "Error", message: event.message || "the replay worker failed to start" });
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

function showProgress({ progress, requests, replayed }) {
  ui.bar.style.width = `${(100 * progress).toFixed(1)}%`;
  ui.progress.textContent = requests === null
    ? `Replaying ${fmt(replayed)} requests`
    : `Replaying ${fmt(replayed)} / ${fmt(requests)} requests`;
}

let lastLiveDraw = 0;
function liveTimeChart() {
  const now = performance.now();
  if (now - lastLiveDraw < 200 || current.timeline.length < 2) return;
  lastLiveDraw = now;
  const first = current.timeline.find((p) => p.timeMs !== null);
  drawTimeChart($("#chart-time"), current.histories, current.timeline, first ? first.timeMs : null);
}

function readForm() {
  const policies = ui.policies.filter((p) => p.checked).map((p) => p.value);
  return {
    capacities: ui.capacities.value.trim(),
    policies: policies.join(","),
    // Empty: the format's block size (Mooncake 512, Bailian 16, a document's own).
    blockSize: ui.blockSize.value.trim() === "" ? undefined : Number(ui.blockSize.value),
    warmup: Number(ui.warmup.value || 0),
    skipInvalid: ui.skipInvalid.checked,
  };
}

// The engine's options: a warm-up of 1 or more is a number of requests.
function engineOptions(options) {
  const { warmup, ...rest } = options;
  if (rest.blockSize === undefined) delete rest.blockSize;
  return warmup >= 1 ? { ...rest, warmupRequests: warmup } : { ...rest, warmup };
}

function writeUrl(options) {
  const query = new URLSearchParams({
    capacities: options.capacities,
    policies: options.policies,
    warmup: String(options.warmup),
  });
  if (options.blockSize !== undefined) query.set("blockSize", String(options.blockSize));
  if (options.skipInvalid) query.set("skipInvalid", "1");
  history.replaceState(null, "", `${location.pathname}?${query}`);
}

function readUrl() {
  const query = new URLSearchParams(location.search);
  if (query.has("capacities")) ui.capacities.value = query.get("capacities");
  if (query.has("policies")) {
    const chosen = query.get("policies").split(",").map((p) => p.trim());
    for (const box of ui.policies) box.checked = chosen.includes(box.value);
  }
  if (query.has("blockSize")) ui.blockSize.value = query.get("blockSize");
  if (query.has("warmup")) ui.warmup.value = query.get("warmup");
  ui.skipInvalid.checked = query.get("skipInvalid") === "1";
  return query.has("run");
}

function source() {
  return ui.sources.find((s) => s.checked).value;
}

async function start(event) {
  event?.preventDefault();
  clearError();
  const options = readForm();
  if (!options.policies) {
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
      message = { source: { bytes, gzip: /\.gz$/i.test(files[0].name) }, transfer: [bytes] };
    } else {
      message = { source: { files }, transfer: [] };
    }
  } else {
    message = { source: { url: new URL(SAMPLE_URL, location.href).href }, transfer: [] };
  }
  writeUrl(options);
  setState("running");
  ui.bar.style.width = "0%";
  ui.progress.textContent = workerReady ? "Starting…" : "Loading the engine…";
  current = null;
  worker.postMessage(
    { type: "run", source: message.source, options: engineOptions(options) },
    message.transfer,
  );
}

function cancel() {
  worker.terminate();
  spawnWorker();
  setState("idle");
  ui.bar.style.width = "0%";
  ui.progress.textContent = "Cancelled.";
}

function fail({ name, message }) {
  const wasRunning = document.body.dataset.state === "running";
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

function finish({ report, timeline, traceStartMs, elapsedMs, bytes }) {
  current = { ...current, report, timeline, startMs: traceStartMs };
  ui.bar.style.width = "100%";
  ui.progress.textContent =
    `Done: ${fmt(report.requests)} requests, ${(bytes / 1e6).toFixed(1)} MB, in ${duration(elapsedMs)}.`;
  renderSummary(report, elapsedMs, bytes);
  renderCharts();
  renderTable(report);
  $("#copy-json").disabled = false;
  $("#download-json").disabled = false;
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
  $("#ceiling").textContent = best && best.f0_tokens ? `${(100 * best.f1_tokens / best.f0_tokens).toFixed(2)}%` : "–";
  $("#ceiling").previousElementSibling.textContent = inf ? "reuse ceiling (inf F1/F0)" : "best F1/F0";
  $("#elapsed").textContent = duration(elapsedMs);
  $("#throughput").textContent = elapsedMs > 0
    ? `${fmt(Math.round(report.requests / (elapsedMs / 1000)))} requests/s · ${(bytes / 1e6 / (elapsedMs / 1000)).toFixed(0)} MB/s`
    : "";
}

function renderCharts() {
  if (!current?.report) return;
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

function cell(key, value, hint = null, bar = null) {
  const td = document.createElement("td");
  td.dataset.key = key;
  if (key !== "policy") td.className = "num";
  if (bar !== null) {
    const track = document.createElement("span");
    track.className = "cell-bar";
    const fill = document.createElement("i");
    fill.style.width = `${Math.min(100, Math.max(0, bar * 100)).toFixed(2)}%`;
    track.appendChild(fill);
    td.appendChild(track);
  }
  const v = document.createElement("span");
  v.className = "v";
  v.textContent = value;
  td.appendChild(v);
  if (hint) {
    const h = document.createElement("span");
    h.className = "hint";
    h.textContent = hint;
    td.appendChild(h);
  }
  return td;
}

function renderTable(report) {
  const body = $("#results tbody");
  body.replaceChildren();
  const ratio = (part, whole) => (whole ? part / whole : null);
  const percent = (x) => (x === null ? "–" : `${(100 * x).toFixed(2)}%`);
  for (const row of report.rows) {
    const tr = document.createElement("tr");
    tr.className = `policy-${row.policy}`;
    const policy = cell("policy", row.policy);
    policy.insertAdjacentHTML("afterbegin", `<span class="swatch ${row.policy}"></span>`);
    const f1 = ratio(row.f1_tokens, row.f0_tokens);
    const any = ratio(row.any_tokens, row.f0_tokens);
    tr.append(
      policy,
      cell("capacity", row.capacity === "inf" ? "inf" : fmt(row.capacity)),
      cell("heap_bytes", row.heap_bytes === null ? "–" : fmt(row.heap_bytes), row.heap_bytes === null ? null : humanBytes(row.heap_bytes)),
      cell("f0_tokens", fmt(row.f0_tokens)),
      cell("f1_tokens", fmt(row.f1_tokens)),
      cell("f1_ratio", percent(f1), null, f1),
      cell("any_tokens", fmt(row.any_tokens)),
      cell("any_ratio", percent(any)),
      cell("f1_blocks", fmt(row.f1_blocks)),
      cell("evictions", fmt(row.evictions)),
      cell("reach_ms", row.reach_ms === null ? "–" : fmt(row.reach_ms), row.reach_ms === null ? null : duration(row.reach_ms)),
    );
    body.appendChild(tr);
  }
}

function reportJson() {
  return JSON.stringify(current.report);
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

$("#copy-json").addEventListener("click", async () => {
  await navigator.clipboard.writeText(reportJson());
  $("#copy-json").textContent = "Copied";
  setTimeout(() => { $("#copy-json").textContent = "Copy JSON"; }, 1200);
});
$("#download-json").addEventListener("click", () => {
  const link = document.createElement("a");
  link.href = URL.createObjectURL(new Blob([reportJson() + "\n"], { type: "application/json" }));
  link.download = "kvreuse-replay.json";
  link.click();
  URL.revokeObjectURL(link.href);
});

let resizeTimer = 0;
window.addEventListener("resize", () => {
  clearTimeout(resizeTimer);
  resizeTimer = setTimeout(renderCharts, 120);
});

spawnWorker();
syncSource();
if (readUrl()) start();
