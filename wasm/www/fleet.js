// The Fleet view: where reuse goes in each simulated fleet shape, drawn from the report of the
// wasm `Fleet` (the object `kvreuse fleet --json` prints).
//
// Every prompt token that is not reused is charged to the first stage of the cache-loss funnel
// it misses, so reused + retrieval + race + routing + retention + cold = F0 in every row. One
// stacked bar per row shows them as shares of F0, in the order of `kvreuse fleet --plot` (reused,
// then the losses nearest to reuse first; retrieval, which the plot folds into race, as its own
// segment when some row has any: never in this simulation, whose F5 is F4), with the row's
// TTFT p50 and p99 and mean queue time beside it. The workers of a selected row (click a bar, a
// table row, or choose it in the list) are drawn as a strip: each worker's hit ratio (reused /
// prompt tokens) and share of the row's requests. The table has every number of every row.
//
// Every rendered number is formatted here from the report alone and carries `data-key` (and
// `data-row`, `data-worker`), so the e2e test recomputes each one from `kvreuse fleet --json`.

import { $, cell, duration, el, fixed, fmt, frame, share, text, tooltip } from "./charts.js";

// The funnel's segments, in the order of the bars; the names are the glossary's.
const SEGMENTS = [
  { key: "f5_tokens", name: "reused" },
  { key: "retrieval_tokens", name: "retrieval" },
  { key: "race_tokens", name: "race" },
  { key: "routing_tokens", name: "routing" },
  { key: "retention_tokens", name: "retention" },
  { key: "cold_tokens", name: "cold" },
];

// Shares of a whole, as the command line's table prints them (one decimal) and as the replay's
// table does (two).
const share1 = (part, whole) => share(part, whole, 1);
const share2 = (part, whole) => share(part, whole, 2);

// Milliseconds: exact to the microsecond in the table; as the command line prints them beside
// the bars.
function ms3(ms) {
  if (ms === null) return "–";
  const [whole, fraction] = fixed(ms, 3).split(".");
  return `${fmt(Number(whole))}.${fraction}`;
}
function humanMs(ms) {
  if (ms === null) return "–";
  if (ms < 1) return `${fixed(ms * 1e3, 0)} us`;
  if (ms < 1e3) return `${fixed(ms, 1)} ms`;
  if (ms < 6e4) return `${fixed(ms / 1e3, 2)} s`;
  return `${fixed(ms / 6e4, 1)} min`;
}

// The range over workers of `part / whole`, as the command line's hit/worker and share/worker.
function range(pairs) {
  const values = pairs.filter(([, whole]) => whole > 0).map(([part, whole]) => (100 * part) / whole);
  if (!values.length) return "–";
  return `${fixed(Math.min(...values), 0)}-${fixed(Math.max(...values), 0)}%`;
}

const label = (row) => `${row.workers} x ${fmt(row.worker_capacity)} ${row.router}`;
const reuse = (row) => (row.f0_tokens ? row.f5_tokens / row.f0_tokens : -1);

// What is shown: the report, the selected row, the segments drawn.
let shown = null;

export function fleetReport() {
  return shown?.report ?? null;
}

// Shows a finished run; the row with the most reuse is selected first.
export function renderFleet(report, elapsedMs, bytes) {
  const rows = report.rows;
  const best = rows.reduce((b, r, i) => (reuse(r) > reuse(rows[b]) ? i : b), 0);
  shown = {
    report,
    selected: rows.length ? best : -1,
    segments: SEGMENTS.filter((s) => s.name !== "retrieval" || rows.some((r) => r.retrieval_tokens > 0)),
  };
  renderSummary(report, rows[best], elapsedMs, bytes);
  renderLegend();
  renderTable(rows);
  const list = $("#fleet-row");
  list.replaceChildren(...rows.map((row, i) => new Option(label(row), String(i))));
  list.disabled = !rows.length;
  select(shown.selected);
}

// Draws the bars again (the page's width changed).
export function redrawFleetChart() {
  if (shown) drawChart($("#chart-fleet"), shown.report.rows, shown.segments, shown.selected);
}

function select(index) {
  shown.selected = index;
  $("#fleet-row").value = String(index);
  for (const tr of document.querySelectorAll("#fleet-results tbody tr")) {
    tr.classList.toggle("selected", Number(tr.dataset.row) === index);
  }
  redrawFleetChart();
  renderWorkers($("#fleet-workers"), shown.report.rows[index], index);
}

$("#fleet-row").addEventListener("change", (e) => select(Number(e.target.value)));

function renderSummary(report, best, elapsedMs, bytes) {
  const put = (key, value) => {
    for (const node of document.querySelectorAll(`:is(#fleet-summary, #fleet-settings) [data-key="${key}"]`)) node.textContent = value;
  };
  put("requests", fmt(report.requests));
  put("measured_requests", fmt(report.measured_requests));
  put("skipped_lines", fmt(report.skipped_lines));
  put("best_reuse", best ? share2(best.f5_tokens, best.f0_tokens) : "–");
  put("best_row", best ? label(best) : "–");
  put("best_ceiling", best ? share2(best.f1_tokens, best.f0_tokens) : "–");
  put("timing", report.timing);
  put("speedup", report.speedup === null ? "–" : String(report.speedup));
  put("seed", fmt(report.seed));
  put("warmup", report.warmup_requests === null ? String(report.warmup) : `${fmt(report.warmup_requests)} requests`);
  put("block_size", fmt(report.block_size));
  put("engine_block_size", fmt(report.engine_block_size));
  put("history", report.history === "inf" ? "inf" : fmt(report.history));
  put("elapsed", duration(elapsedMs));
  $("#fleet-throughput").textContent = elapsedMs > 0
    ? `${fmt(Math.round(report.requests / (elapsedMs / 1000)))} requests/s · ${(bytes / 1e6).toFixed(1)} MB`
    : "";
}

function renderLegend() {
  const legend = $("#fleet-legend");
  legend.replaceChildren();
  for (const s of shown.segments) {
    const item = document.createElement("span");
    item.className = "legend-item";
    const chip = document.createElement("span");
    chip.className = `chip seg-${s.name}`;
    item.append(chip, s.name);
    legend.appendChild(item);
  }
}

// One stacked bar per row, shares of F0 on a linear axis; the row's figures to the right.
function drawChart(container, rows, segments, selected) {
  const rowH = 30;
  const m = { t: 26, b: 30 };
  const { svg, width, height } = frame(container, m.t + rowH * Math.max(1, rows.length) + m.b);
  // The figures beside the bars need room: on a narrow screen they are left to the table.
  const figures = width >= 640 ? [["reused", 62], ["TTFT p50", 76], ["TTFT p99", 76], ["queue", 72]] : [];
  const figuresW = figures.reduce((sum, [, w]) => sum + w, 0);
  const x0 = 176;
  const x1 = width - figuresW - 12;
  const sx = (share) => x0 + share * (x1 - x0);
  const bottom = m.t + rowH * rows.length;

  const grid = el("g", { class: "grid" }, svg);
  for (const v of [0, 0.25, 0.5, 0.75, 1]) {
    el("line", { x1: sx(v), x2: sx(v), y1: m.t, y2: bottom }, grid);
    text(grid, sx(v), bottom + 16, `${v * 100}%`, { class: "tick", "text-anchor": "middle" });
  }
  text(svg, (x0 + x1) / 2, height - 2, "share of prompt tokens (F0)", { class: "axis-label", "text-anchor": "middle" });
  let fx = x1 + 12;
  const columns = figures.map(([name, w]) => {
    fx += w;
    text(svg, fx - 4, m.t - 10, name, { class: "axis-label", "text-anchor": "end" });
    return fx - 4;
  });

  const tip = tooltip(container);
  rows.forEach((row, i) => {
    const y = m.t + i * rowH;
    const g = el("g", { class: `fleet-row${i === selected ? " selected" : ""}` }, svg);
    el("rect", { x: 0, y, width, height: rowH, class: "row-bg" }, g);
    text(g, x0 - 10, y + rowH / 2 + 4, label(row), { class: "row-label", "text-anchor": "end", "data-row": i, "data-key": "label" });
    let at = 0;
    for (const s of segments) {
      const share = row.f0_tokens ? row[s.key] / row.f0_tokens : 0;
      const w = sx(at + share) - sx(at);
      if (w > 0) {
        el("rect", { x: sx(at), y: y + 6, width: w, height: rowH - 12, class: `seg-${s.name}` }, g);
        if (w >= 40) {
          text(g, sx(at) + w / 2, y + rowH / 2 + 4, share1(row[s.key], row.f0_tokens), {
            class: `seg-label seg-${s.name}`, "text-anchor": "middle", "data-row": i, "data-key": s.name,
          });
        }
      }
      at += share;
    }
    const values = [
      ["reused", share1(row.f5_tokens, row.f0_tokens)],
      ["ttft_ms_p50", humanMs(row.ttft_ms_p50)],
      ["ttft_ms_p99", humanMs(row.ttft_ms_p99)],
      ["queue_ms_mean", humanMs(row.queue_ms_mean)],
    ].slice(0, figures.length);
    values.forEach(([key, value], k) => {
      text(g, columns[k], y + rowH / 2 + 4, value, { class: "figure", "text-anchor": "end", "data-row": i, "data-key": key });
    });
    g.addEventListener("click", () => select(i));
    g.addEventListener("mousemove", () => {
      // Built as nodes: the router's name is text the user wrote.
      const head = document.createElement("b");
      head.textContent = label(row);
      tip.replaceChildren(head, ` · F0 ${fmt(row.f0_tokens)} tokens`, ...segments.flatMap((s) => {
        const chip = document.createElement("span");
        chip.className = `chip seg-${s.name}`;
        return [document.createElement("br"), chip, `${s.name}: ${share1(row[s.key], row.f0_tokens)} · ${fmt(row[s.key])}`];
      }));
      tip.hidden = false;
      tip.style.left = `${x0 + 12}px`;
      tip.style.top = `${y + rowH}px`;
    });
    g.addEventListener("mouseleave", () => { tip.hidden = true; });
  });
  if (!rows.length) {
    text(svg, (x0 + x1) / 2, m.t + rowH / 2, "no rows", { class: "axis-label", "text-anchor": "middle" });
  }
}

// The selected row's workers: hit ratio and share of the row's requests, each with a meter.
function renderWorkers(container, row, index) {
  container.replaceChildren();
  container.dataset.row = String(index);
  $("#fleet-workers-caption").textContent = row
    ? `hit ratio (reused / prompt tokens) and share of the ${fmt(row.requests)} requests`
    : "";
  if (!row) return;
  row.per_worker.forEach((w, k) => {
    const tile = document.createElement("div");
    tile.className = "worker";
    tile.title = `${fmt(w.requests)} requests, ${fmt(w.prompt_tokens)} prompt tokens, ${fmt(w.reused_tokens)} reused`;
    const hit = w.prompt_tokens ? w.reused_tokens / w.prompt_tokens : 0;
    const part = row.requests ? w.requests / row.requests : 0;
    tile.innerHTML = `<span class="k" data-worker="${k}" data-key="name">worker ${k}</span>
      <span class="line">hit <b data-worker="${k}" data-key="hit"></b></span>
      <span class="meter hit"><i style="width:${(100 * hit).toFixed(2)}%"></i></span>
      <span class="line">requests <b data-worker="${k}" data-key="share"></b></span>
      <span class="meter share"><i style="width:${(100 * part).toFixed(2)}%"></i></span>`;
    tile.querySelector('[data-key="hit"]').textContent = share1(w.reused_tokens, w.prompt_tokens);
    tile.querySelector('[data-key="share"]').textContent = share1(w.requests, row.requests);
    container.appendChild(tile);
  });
}

function renderTable(rows) {
  const body = $("#fleet-results tbody");
  body.replaceChildren();
  const tokens = (row, key) => cell(key, fmt(row[key]), share2(row[key], row.f0_tokens));
  const time = (row, key) => cell(key, ms3(row[key]), row[key] === null ? null : humanMs(row[key]));
  rows.forEach((row, i) => {
    const tr = document.createElement("tr");
    tr.dataset.row = String(i);
    const reused = row.f0_tokens ? row.f5_tokens / row.f0_tokens : null;
    tr.append(
      cell("workers", fmt(row.workers)),
      cell("worker_capacity", fmt(row.worker_capacity)),
      cell("router", row.router, null, null, false),
      cell("requests", fmt(row.requests)),
      cell("rejected_requests", fmt(row.rejected_requests)),
      cell("truncated_outputs", fmt(row.truncated_outputs)),
      cell("f0_tokens", fmt(row.f0_tokens)),
      tokens(row, "f1_tokens"),
      tokens(row, "f2_tokens"),
      tokens(row, "f3_tokens"),
      tokens(row, "f4_tokens"),
      cell("f5_tokens", fmt(row.f5_tokens), share2(row.f5_tokens, row.f0_tokens), reused),
      tokens(row, "cold_tokens"),
      tokens(row, "retention_tokens"),
      tokens(row, "routing_tokens"),
      tokens(row, "race_tokens"),
      tokens(row, "retrieval_tokens"),
      cell("evictions", fmt(row.evictions)),
      time(row, "ttft_ms_p50"),
      time(row, "ttft_ms_p99"),
      time(row, "queue_ms_mean"),
      cell("hit_per_worker", range(row.per_worker.map((w) => [w.reused_tokens, w.prompt_tokens]))),
      cell("share_per_worker", range(row.per_worker.map((w) => [w.requests, row.requests]))),
    );
    tr.addEventListener("click", () => select(i));
    body.appendChild(tr);
  });
}
