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
// every number to equal --files-native-json. Stops the browser and the server at the end,
// whatever happened.
//
//   node wasm/tools/e2e.mjs --site target/wasm-site --native-json FILE [--out target/wasm-e2e]
//     [--capacity 1k,10k,inf] [--policy fifo,lru] [--timeout 180]
//     [--files A.json,B.json,... --files-native-json FILE2]
//
// FILE is the output of `kvreuse replay --json --capacity ... --policy ...` on
// SITE/traces/mooncake_synthetic_trace.jsonl, the file the page loads; FILE2 the same for
// the --files (absolute paths, in the order their names sort).

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
  },
});
if (!args["native-json"]) {
  console.error("usage: node wasm/tools/e2e.mjs --site DIR --native-json FILE [--out DIR]");
  process.exit(2);
}
const sampleNative = JSON.parse(readFileSync(args["native-json"], "utf8"));
const filesNative = args.files ? JSON.parse(readFileSync(args["files-native-json"], "utf8")) : null;
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

const percent = (part, whole) => (whole ? `${((100 * part) / whole).toFixed(2)}%` : "–");

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
      "--disable-dev-shm-usage", `--user-data-dir=${profile}`, "--window-size=1440,1000",
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

  // Waits for the run the page is doing, saves a screenshot, and compares what it rendered.
  async function check(what, native, screenshot) {
    const started = Date.now();
    let page;
    for (;;) {
      page = await command(base, "POST", `${session}/execute/sync`, {
        script: `return (${readPage})();`,
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
