// End-to-end test of the browser page in headless Chromium, driven through chromedriver's
// WebDriver HTTP API (plain fetch, no client library).
//
// Serves the built site on 127.0.0.1 (a free port), opens the page with the settings in its
// query and `run`, waits for the worker's replay of the bundled sample to finish, reads the
// results table and the summary the page rendered, and requires every number to equal what
// the native command line prints for the same file (`kvreuse replay --json`). Saves a
// screenshot and the rendered values under --out. With --files, then chooses those local files
// in the page's file input (several files are read in chunks, one after another, as a folder
// dropped on the page is), leaves the block size to the format, replays them and requires
// every number to equal --files-native-json. With --fleet-native-json, then opens the Fleet
// view on the bundled sample (--workers x --worker-capacity x --router), and requires every
// number it renders (the rows table, the bars' shares, the TTFT and queue figures, the
// selected row's workers, the summary) to equal that report, and prints the longest call the
// page's worker made into the engine (the page must stay responsive: about 50 ms at most).
// Stops the browser and the server at the end, whatever happened.
//
//   node wasm/tools/e2e.mjs --site target/wasm-site --native-json FILE [--out target/wasm-e2e]
//     [--capacity 1k,10k,inf] [--policy fifo,lru] [--timeout 180]
//     [--files A.json,B.json,... --files-native-json FILE2]
//     [--fleet-native-json FILE3 [--workers 4,8] [--worker-capacity 2k,10k] [--router round-robin,kv]]
//
// FILE is the output of `kvreuse replay --json --capacity ... --policy ...` on
// SITE/traces/mooncake_synthetic_trace.jsonl, the file the page loads; FILE2 the same for
// the --files (absolute paths, in the order their names sort); FILE3 the output of `kvreuse
// fleet --json --workers ... --worker-capacity ... --router ...` on the same sample.

import { spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";

import { serve } from "./serve.mjs";

const { values: args } = parseArgs({
  options: {
    site: { type: "string", default: "target/wasm-site" },
    "native-json": { type: "string" },
    out: { type: "string", default: "target/wasm-e2e" },
    capacity: { type: "string", default: "1k,10k,inf" },
    policy: { type: "string", default: "fifo,lru" },
    timeout: { type: "string", default: "180" },
    chromedriver: { type: "string", default: process.env.CHROMEDRIVER ?? "chromedriver" },
    chromium: { type: "string", default: process.env.CHROMIUM ?? "" },
    files: { type: "string" },
    "files-native-json": { type: "string" },
    "fleet-native-json": { type: "string" },
    workers: { type: "string", default: "4,8" },
    "worker-capacity": { type: "string", default: "2k,10k" },
    router: { type: "string", default: "round-robin,kv" },
  },
});
if (!args["native-json"]) {
  console.error("usage: node wasm/tools/e2e.mjs --site DIR --native-json FILE [--out DIR]");
  process.exit(2);
}
const sampleNative = JSON.parse(readFileSync(args["native-json"], "utf8"));
const filesNative = args.files ? JSON.parse(readFileSync(args["files-native-json"], "utf8")) : null;
const fleetNative = args["fleet-native-json"]
  ? JSON.parse(readFileSync(args["fleet-native-json"], "utf8"))
  : null;
const timeoutMs = Number(args.timeout) * 1000;
mkdirSync(args.out, { recursive: true });

const sleep = (ms) => new Promise((done) => setTimeout(done, ms));

function freePort() {
  return new Promise((ok, fail) => {
    const probe = createServer();
    probe.once("error", fail);
    probe.listen(0, "127.0.0.1", () => {
      const { port } = probe.address();
      probe.close(() => ok(port));
    });
  });
}

// One WebDriver command: the response's `value`, or an Error carrying WebDriver's message.
async function command(base, method, path, body) {
  const response = await fetch(base + path, {
    method,
    headers: { "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const reply = await response.json();
  if (!response.ok || reply.value?.error) {
    throw new Error(`WebDriver ${method} ${path}: ${reply.value?.error}: ${reply.value?.message}`);
  }
  return reply.value;
}

// Reads the page: its state, error text, the summary cards and every table cell, by data-key.
function readPage() {
  const text = (node) => node?.textContent?.trim() ?? null;
  const summary = {};
  for (const node of document.querySelectorAll("#summary [data-key]")) {
    summary[node.dataset.key] = text(node);
  }
  const rows = [...document.querySelectorAll("#results tbody tr:not(.placeholder)")].map((tr) => {
    const row = {};
    for (const td of tr.querySelectorAll("td[data-key]")) row[td.dataset.key] = text(td.querySelector(".v"));
    return row;
  });
  return {
    state: document.body.dataset.state,
    error: text(document.querySelector("#error")),
    progress: text(document.querySelector("#progress-text")),
    summary,
    rows,
    height: document.documentElement.scrollHeight,
  };
}

// The page's number formats back to values: "12,345" -> 12345, "–" -> null, "inf" stays.
function value(shown, what) {
  if (shown === "–") return null;
  if (shown === "inf") return "inf";
  if (!/^\d{1,3}(,\d{3})*$/.test(shown ?? "")) throw new Error(`${what}: ${JSON.stringify(shown)} is not a count`);
  return Number(shown.replaceAll(",", ""));
}

// Decimals as the command line writes them: the double's exact value rounded to the nearest,
// ties to even (toFixed rounds ties up). Written apart from the page's own `fixed`.
function fixed(x, digits) {
  const scaled = Math.abs(x) * 10 ** digits;
  const exact = Math.abs(x).toFixed(100).split(".")[1].slice(digits);
  const tie = /^50*$/.test(exact) && Math.abs(x).toFixed(digits + 1).endsWith("5");
  if (!tie) return x.toFixed(digits);
  const down = Math.floor(scaled) % 2 === 0;
  return down ? `${x < 0 ? "-" : ""}${(Math.floor(scaled) / 10 ** digits).toFixed(digits)}` : x.toFixed(digits);
}

const percent = (part, whole) => (whole ? `${fixed((100 * part) / whole, 2)}%` : "–");

// Every rendered number against the native report; returns the list of mismatches.
function compare(page, native) {
  const wrong = [];
  const check = (what, got, want) => {
    if (got !== want) wrong.push(`${what}: page shows ${JSON.stringify(got)}, native ${JSON.stringify(want)}`);
  };
  check("rows", page.rows.length, native.rows.length);
  for (const key of ["requests", "measured_requests", "block_size", "skipped_lines"]) {
    check(key, value(page.summary[key], key), native[key]);
  }
  check("warmup", Number(page.summary.warmup), native.warmup);
  const keys = ["capacity", "heap_bytes", "f0_tokens", "f1_tokens", "any_tokens", "f1_blocks", "evictions", "reach_ms"];
  native.rows.forEach((want, i) => {
    const got = page.rows[i] ?? {};
    const name = `row ${i} (${want.policy} ${want.capacity})`;
    check(`${name} policy`, got.policy, want.policy);
    for (const key of keys) {
      let shown;
      try {
        shown = value(got[key], `${name} ${key}`);
      } catch (error) {
        wrong.push(error.message);
        continue;
      }
      check(`${name} ${key}`, shown, want[key]);
    }
    check(`${name} F1/F0`, got.f1_ratio, percent(want.f1_tokens, want.f0_tokens));
    check(`${name} any/F0`, got.any_ratio, percent(want.any_tokens, want.f0_tokens));
  });
  return wrong;
}

// Reads the Fleet view: the state, the summary and settings, every table cell (value and
// hint), every number in the bars' chart and in the selected row's worker strip, by data-key.
function readFleetPage() {
  const text = (node) => node?.textContent?.trim() ?? null;
  const summary = {};
  for (const node of document.querySelectorAll("#fleet-summary [data-key], #fleet-settings [data-key]")) {
    summary[node.dataset.key] = text(node);
  }
  const rows = [...document.querySelectorAll("#fleet-results tbody tr:not(.placeholder)")].map((tr) => {
    const row = {};
    for (const td of tr.querySelectorAll("td[data-key]")) {
      row[td.dataset.key] = { v: text(td.querySelector(".v")), hint: text(td.querySelector(".hint")) };
    }
    return row;
  });
  const chart = [...document.querySelectorAll("#chart-fleet [data-key]")].map((node) => ({
    row: Number(node.dataset.row), key: node.dataset.key, text: text(node),
  }));
  const strip = document.querySelector("#fleet-workers");
  const workers = [...strip.querySelectorAll("[data-key]")].map((node) => ({
    worker: Number(node.dataset.worker), key: node.dataset.key, text: text(node),
  }));
  const progress = document.querySelector("#progress-text");
  return {
    state: document.body.dataset.state,
    error: text(document.querySelector("#error")),
    progress: text(progress),
    longestStepMs: Number(progress.dataset.longestStepMs),
    summary,
    rows,
    chart,
    selected: Number(strip.dataset.row),
    workers,
    height: document.documentElement.scrollHeight,
  };
}

// The Fleet view's formats, from the report's values: shares with one decimal (the command
// line's) or two (the replay table's), milliseconds exact to the microsecond or as the command
// line prints them, and the range over workers.
const share1 = (part, whole) => (whole ? `${fixed((100 * part) / whole, 1)}%` : "–");
const share2 = percent;
function ms3(ms) {
  if (ms === null) return "–";
  const [whole, fraction] = fixed(ms, 3).split(".");
  return `${Number(whole).toLocaleString("en-US")}.${fraction}`;
}
function humanMs(ms) {
  if (ms === null) return "–";
  if (ms < 1) return `${fixed(ms * 1e3, 0)} us`;
  if (ms < 1e3) return `${fixed(ms, 1)} ms`;
  if (ms < 6e4) return `${fixed(ms / 1e3, 2)} s`;
  return `${fixed(ms / 6e4, 1)} min`;
}
function range(pairs) {
  const values = pairs.filter(([, whole]) => whole > 0).map(([part, whole]) => (100 * part) / whole);
  if (!values.length) return "–";
  return `${fixed(Math.min(...values), 0)}-${fixed(Math.max(...values), 0)}%`;
}
const fleetLabel = (r) => `${r.workers} x ${r.worker_capacity.toLocaleString("en-US")} ${r.router}`;

const FLEET_COUNTS = [
  "workers", "worker_capacity", "requests", "rejected_requests", "truncated_outputs", "f0_tokens",
  "f1_tokens", "f2_tokens", "f3_tokens", "f4_tokens", "f5_tokens", "cold_tokens", "retention_tokens",
  "routing_tokens", "race_tokens", "retrieval_tokens", "evictions",
];
// The bars' segments (their labels are the glossary's words) and the fields they show.
const SEGMENT_FIELDS = {
  reused: "f5_tokens", retrieval: "retrieval_tokens", race: "race_tokens", routing: "routing_tokens",
  retention: "retention_tokens", cold: "cold_tokens",
};

// Every number the Fleet view rendered against the native report: the mismatches, and how many
// values were compared.
function compareFleet(page, native) {
  const wrong = [];
  let compared = 0;
  const check = (what, got, want) => {
    compared++;
    if (got !== want) wrong.push(`${what}: page shows ${JSON.stringify(got)}, native ${JSON.stringify(want)}`);
  };
  const count = (what, shown, want) => {
    try {
      check(what, value(shown, what), want);
    } catch (error) {
      compared++;
      wrong.push(error.message);
    }
  };
  const { rows } = native;
  check("rows", page.rows.length, rows.length);
  for (const key of ["requests", "measured_requests", "skipped_lines", "block_size", "engine_block_size", "history", "seed"]) {
    count(key, page.summary[key], native[key]);
  }
  check("timing", page.summary.timing, native.timing);
  check("speedup", page.summary.speedup === "–" ? null : Number(page.summary.speedup), native.speedup);
  check("warmup", native.warmup_requests === null ? Number(page.summary.warmup) : page.summary.warmup,
    native.warmup_requests === null ? native.warmup : `${native.warmup_requests.toLocaleString("en-US")} requests`);
  const reuse = (r) => (r.f0_tokens ? r.f5_tokens / r.f0_tokens : -1);
  const best = rows.reduce((b, r, i) => (reuse(r) > reuse(rows[b]) ? i : b), 0);
  if (rows.length) {
    check("most reuse", page.summary.best_reuse, share2(rows[best].f5_tokens, rows[best].f0_tokens));
    check("most reuse row", page.summary.best_row, fleetLabel(rows[best]));
    check("most reuse ceiling", page.summary.best_ceiling, share2(rows[best].f1_tokens, rows[best].f0_tokens));
  }

  rows.forEach((want, i) => {
    const got = page.rows[i] ?? {};
    const name = `row ${i} (${fleetLabel(want)})`;
    const cellOf = (key) => got[key] ?? { v: undefined, hint: undefined };
    check(`${name} router`, cellOf("router").v, want.router);
    for (const key of FLEET_COUNTS) {
      count(`${name} ${key}`, cellOf(key).v, want[key]);
      if (/^(f[1-5]|cold|retention|routing|race|retrieval)_tokens$/.test(key)) {
        check(`${name} ${key} share`, cellOf(key).hint, share2(want[key], want.f0_tokens));
      }
    }
    for (const key of ["ttft_ms_p50", "ttft_ms_p99", "queue_ms_mean"]) {
      check(`${name} ${key}`, cellOf(key).v, ms3(want[key]));
      check(`${name} ${key} hint`, cellOf(key).hint, want[key] === null ? null : humanMs(want[key]));
    }
    check(`${name} hit/worker`, cellOf("hit_per_worker").v, range(want.per_worker.map((w) => [w.reused_tokens, w.prompt_tokens])));
    check(`${name} share/worker`, cellOf("share_per_worker").v, range(want.per_worker.map((w) => [w.requests, want.requests])));
    check(`${name} cells`, Object.keys(got).length, FLEET_COUNTS.length + 6);

    // The bars: the label, the TTFT and queue figures, and every segment's share it prints.
    const figures = page.chart.filter((f) => f.row === i);
    const figure = (key) => figures.find((f) => f.key === key)?.text;
    check(`${name} bar label`, figure("label"), fleetLabel(want));
    check(`${name} bar reused`, figure("reused"), share1(want.f5_tokens, want.f0_tokens));
    for (const key of ["ttft_ms_p50", "ttft_ms_p99", "queue_ms_mean"]) {
      check(`${name} bar ${key}`, figure(key), humanMs(want[key]));
    }
    for (const f of figures.filter((f) => SEGMENT_FIELDS[f.key])) {
      // "reused" is printed twice: in its segment and beside the bar; both are this share.
      check(`${name} segment ${f.key}`, f.text, share1(want[SEGMENT_FIELDS[f.key]], want.f0_tokens));
    }
  });
  for (const f of page.chart) {
    if (!(f.row >= 0 && f.row < rows.length) || !(f.key in SEGMENT_FIELDS || ["label", "ttft_ms_p50", "ttft_ms_p99", "queue_ms_mean"].includes(f.key))) {
      wrong.push(`chart: an unexpected figure ${JSON.stringify(f)}`);
    }
  }

  // The selected row's workers.
  check("selected row", page.selected, best);
  const row = rows[best];
  if (row) {
    check("workers drawn", page.workers.length, 3 * row.per_worker.length);
    row.per_worker.forEach((w, k) => {
      const tile = (key) => page.workers.find((f) => f.worker === k && f.key === key)?.text;
      check(`worker ${k} name`, tile("name"), `worker ${k}`);
      check(`worker ${k} hit`, tile("hit"), share1(w.reused_tokens, w.prompt_tokens));
      check(`worker ${k} share`, tile("share"), share1(w.requests, row.requests));
    });
  }
  return { wrong, compared };
}

let server;
let driver;
let base;
let session;
let profile;
let failed = false;
try {
  server = await serve(args.site, 0);
  const site = `http://127.0.0.1:${server.address().port}/`;

  const driverPort = await freePort();
  base = `http://127.0.0.1:${driverPort}`;
  let driverLog = "";
  driver = spawn(args.chromedriver, [`--port=${driverPort}`, "--allowed-ips=127.0.0.1"], {
    stdio: ["ignore", "pipe", "pipe"],
  });
  driver.stdout.on("data", (chunk) => { driverLog += chunk; });
  driver.stderr.on("data", (chunk) => { driverLog += chunk; });
  for (let ready = false, start = Date.now(); !ready;) {
    if (driver.exitCode !== null) throw new Error(`chromedriver exited (${driver.exitCode}): ${driverLog}`);
    if (Date.now() - start > 30_000) throw new Error(`chromedriver did not start: ${driverLog}`);
    ready = await command(base, "GET", "/status").then((v) => v.ready, () => false);
    if (!ready) await sleep(100);
  }

  profile = mkdtempSync(join(tmpdir(), "kvreuse-e2e-"));
  const chromeOptions = {
    args: [
      "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync",
      "--disable-dev-shm-usage", `--user-data-dir=${profile}`, "--window-size=1440,1300",
      "--force-device-scale-factor=1", "--hide-scrollbars",
    ],
  };
  if (args.chromium) chromeOptions.binary = args.chromium;
  const created = await command(base, "POST", "/session", {
    capabilities: { alwaysMatch: { browserName: "chrome", "goog:chromeOptions": chromeOptions } },
  });
  session = `/session/${created.sessionId}`;
  console.log(`chromium ${created.capabilities.browserVersion}, page served at ${site}`);

  const query = new URLSearchParams({
    capacities: args.capacity,
    policies: args.policy,
    blockSize: String(sampleNative.block_size),
    warmup: String(sampleNative.warmup),
    run: "",
  });
  await command(base, "POST", `${session}/url`, { url: `${site}?${query}` });
  await check("the bundled sample", sampleNative, "page.png");

  if (args.files) {
    // Choose the files in the file input, as a person would, with the block size left to
    // the format, and replay them.
    const find = async (selector) => {
      const found = await command(base, "POST", `${session}/element`, { using: "css selector", value: selector });
      return `${session}/element/${Object.values(found)[0]}`;
    };
    const paths = args.files.split(",");
    await command(base, "POST", `${await find("#file")}/value`, { text: paths.join("\n") });
    await command(base, "POST", `${await find("#block-size")}/clear`, {});
    await command(base, "POST", `${await find("#run")}/click`, {});
    await check(`${paths.length} local files`, filesNative, "page-files.png");
  }

  if (fleetNative) {
    const fleetQuery = new URLSearchParams({
      view: "fleet",
      workers: args.workers,
      workerCapacities: args["worker-capacity"],
      routers: args.router,
      blockSize: String(fleetNative.block_size),
      warmup: String(fleetNative.warmup),
      run: "",
    });
    await command(base, "POST", `${session}/url`, { url: `${site}?${fleetQuery}` });
    await check("fleets on the bundled sample", fleetNative, "page-fleet.png", readFleetPage);
  }

  // Waits for the run the page is doing, saves a screenshot, and compares what it rendered
  // (`reader` reads the page: the replay's view, or the Fleet view's).
  async function check(what, native, screenshot, reader = readPage) {
    const started = Date.now();
    let page;
    for (;;) {
      page = await command(base, "POST", `${session}/execute/sync`, {
        script: `return (${reader})();`,
        args: [],
      });
      if (page.state === "done" || page.state === "error") break;
      if (Date.now() - started > timeoutMs) {
        throw new Error(`${what}: the replay did not finish in ${args.timeout} s (state ${page.state}: ${page.progress})`);
      }
      await sleep(200);
    }
    console.log(`page (${what}): ${page.progress}`);
    writeFileSync(join(args.out, screenshot.replace(/png$/, "json")), JSON.stringify(page, null, 2) + "\n");

    // The whole page in one shot: chromedriver passes the DevTools command through, which can
    // capture beyond the window; plain WebDriver screenshots stop at the window's edge.
    const { data: png } = await command(base, "POST", `${session}/goog/cdp/execute`, {
      cmd: "Page.captureScreenshot",
      params: {
        format: "png",
        captureBeyondViewport: true,
        clip: { x: 0, y: 0, width: 1440, height: page.height, scale: 1 },
      },
    });
    const shot = join(args.out, screenshot);
    writeFileSync(shot, Buffer.from(png, "base64"));
    console.log(`screenshot: ${shot}`);

    if (page.state === "error") throw new Error(`${what}: the page reported an error: ${page.error}`);
    if (reader === readFleetPage) {
      const { wrong, compared } = compareFleet(page, native);
      if (wrong.length) {
        failed = true;
        console.error(`e2e (${what}): ${wrong.length} values differ from kvreuse fleet --json:\n  ${wrong.join("\n  ")}`);
      } else {
        console.log(`e2e (${what}): all ${page.rows.length} rows (${compared} rendered values) equal kvreuse fleet --json`);
      }
      const over = page.longestStepMs > 50 ? " (above the 50 ms the page aims at)" : "";
      console.log(`fleet: longest step ${page.longestStepMs.toFixed(1)} ms${over}`);
      return;
    }
    const wrong = compare(page, native);
    const cells = page.rows.length * 11 + 5;
    if (wrong.length) {
      failed = true;
      console.error(`e2e (${what}): ${wrong.length} values differ from kvreuse replay --json:\n  ${wrong.join("\n  ")}`);
    } else {
      console.log(
        `e2e (${what}): all ${page.rows.length} rows (${cells} rendered values) equal kvreuse replay --json`,
      );
    }
  }
} catch (error) {
  failed = true;
  console.error(`e2e: ${error.stack ?? error}`);
} finally {
  if (session) await command(base, "DELETE", session).catch(() => {});
  if (driver && driver.exitCode === null) {
    driver.kill("SIGTERM");
    await Promise.race([new Promise((done) => driver.once("exit", done)), sleep(5000)]);
    if (driver.exitCode === null) driver.kill("SIGKILL");
  }
  if (server) {
    server.closeAllConnections();
    await new Promise((done) => server.close(done));
  }
  if (profile) rmSync(profile, { recursive: true, force: true });
}
process.exit(failed ? 1 : 0);
