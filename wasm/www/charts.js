// The replay's two charts, drawn as SVG: F1/F0 against capacity (one line per policy) and
// F1/F0 over trace time (one line per history). No library: scales, ticks and a hover readout
// are below. The SVG helpers, number formats, table cells and the DOM lookup `$` are shared
// with the Fleet view (fleet.js).

const SVG = "http://www.w3.org/2000/svg";
const POLICY_ORDER = ["fifo", "lru", "inf"];

export function el(tag, attrs = {}, parent = null) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (parent) parent.appendChild(node);
  return node;
}

export function text(parent, x, y, content, attrs = {}) {
  const node = el("text", { x, y, ...attrs }, parent);
  node.textContent = content;
  return node;
}

export const $ = (selector) => document.querySelector(selector);

export const fmt = (n) => n.toLocaleString("en-US");

export function compact(n) {
  if (n >= 1e9 && n % 1e9 === 0) return `${n / 1e9}G`;
  if (n >= 1e6 && n % 1e6 === 0) return `${n / 1e6}M`;
  if (n >= 1e3 && n % 1e3 === 0) return `${n / 1e3}k`;
  if (n >= 1e6) return `${(n / 1e6).toPrecision(3)}M`;
  if (n >= 1e3) return `${(n / 1e3).toPrecision(3)}k`;
  return String(n);
}

// `x` with `digits` decimals as the command line writes it: Rust rounds the double's exact
// value to the nearest, ties to even, where JS's toFixed rounds ties up (12.5 with no
// decimals: "12" against "13"). A tie has a short exact expansion, which toFixed(100) shows.
export function fixed(x, digits) {
  const up = x.toFixed(digits);
  const exact = Math.abs(x).toFixed(100);
  const point = exact.indexOf(".");
  const kept = exact.slice(0, digits ? point + 1 + digits : point);
  if (!/^50*$/.test(exact.slice(point + 1 + digits))) return up;
  return Number(kept.at(-1)) % 2 ? up : `${x < 0 ? "-" : ""}${kept}`;
}

// `part` as a percentage of `whole` with `digits` decimals, as the command line prints shares;
// "–" without a whole.
export const share = (part, whole, digits) => (whole ? `${fixed((100 * part) / whole, digits)}%` : "–");

export function duration(ms) {
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60_000) return `${fixed(ms / 1000, 1)} s`;
  if (ms < 3_600_000) return `${fixed(ms / 60_000, 1)} min`;
  return `${fixed(ms / 3_600_000, 1)} h`;
}

const pct = (x) => `${fixed(100 * x, 1)}%`;

// Ticks for a linear axis: about `count` round steps covering [lo, hi].
export function linearTicks(lo, hi, count) {
  const raw = (hi - lo) / Math.max(1, count);
  const mag = 10 ** Math.floor(Math.log10(raw || 1));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => s >= raw) ?? raw;
  const ticks = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) ticks.push(+v.toFixed(10));
  return ticks;
}

// A time axis: round steps of ms, s, min or h.
function timeTicks(lo, hi, count) {
  const steps = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1e3, 2e3, 5e3, 1e4, 15e3, 3e4, 6e4, 12e4,
    3e5, 6e5, 9e5, 18e5, 36e5, 72e5, 108e5, 216e5, 432e5, 864e5];
  const raw = (hi - lo) / Math.max(1, count);
  const step = steps.find((s) => s >= raw) ?? Math.ceil(raw / 864e5) * 864e5;
  const ticks = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi; v += step) ticks.push(v);
  return ticks;
}

// Colors: a hue per policy, darker for larger capacities.
export function historyColor(policy, rank, count) {
  const hue = { fifo: 217, lru: 24, inf: 220 }[policy] ?? 280;
  if (policy === "inf") return "var(--inf)";
  const t = count <= 1 ? 0.5 : rank / (count - 1);
  const light = 68 - 36 * t;
  return `hsl(${hue} 80% ${light}%)`;
}

export function historyLabel(row) {
  return row.policy === "inf" ? "inf" : `${row.policy} ${compact(row.capacity)}`;
}

export function frame(container, height) {
  container.replaceChildren();
  const width = Math.max(320, container.clientWidth || 640);
  const svg = el("svg", { viewBox: `0 0 ${width} ${height}`, width, height, role: "img" });
  container.appendChild(svg);
  return { svg, width, height };
}

export function tooltip(container) {
  const tip = document.createElement("div");
  tip.className = "tip";
  tip.hidden = true;
  container.appendChild(tip);
  return tip;
}

// F1/F0 against capacity. `rows` are report rows.
export function drawCapacityChart(container, rows) {
  const finite = rows.filter((r) => r.capacity !== "inf" && r.f0_tokens > 0);
  const inf = rows.find((r) => r.capacity === "inf" && r.f0_tokens > 0);
  const { svg, width, height } = frame(container, 300);
  const m = { l: 52, r: 110, t: 16, b: 40 };
  const w = width - m.l - m.r;
  const h = height - m.t - m.b;
  const ratio = (r) => r.f1_tokens / r.f0_tokens;

  const caps = finite.map((r) => r.capacity);
  let lo = caps.length ? Math.min(...caps) : 1;
  let hi = caps.length ? Math.max(...caps) : 1000;
  if (lo === hi) { lo /= 10; hi *= 10; }
  const x0 = Math.log10(lo) - 0.15 * (Math.log10(hi) - Math.log10(lo));
  const x1 = Math.log10(hi) + 0.15 * (Math.log10(hi) - Math.log10(lo));
  const ymax = Math.min(1, Math.max(0.1, ...rows.filter((r) => r.f0_tokens > 0).map(ratio)) * 1.12);
  const sx = (c) => m.l + ((Math.log10(c) - x0) / (x1 - x0)) * w;
  const sy = (v) => m.t + h - (v / ymax) * h;

  const grid = el("g", { class: "grid" }, svg);
  for (const v of linearTicks(0, ymax, 5)) {
    el("line", { x1: m.l, x2: m.l + w, y1: sy(v), y2: sy(v) }, grid);
    text(grid, m.l - 8, sy(v) + 4, `${Math.round(v * 100)}%`, { class: "tick", "text-anchor": "end" });
  }
  for (let e = Math.ceil(x0); e <= Math.floor(x1); e++) {
    const c = 10 ** e;
    el("line", { x1: sx(c), x2: sx(c), y1: m.t, y2: m.t + h }, grid);
    text(grid, sx(c), m.t + h + 18, compact(c), { class: "tick", "text-anchor": "middle" });
  }
  text(svg, m.l + w / 2, height - 4, "history capacity (blocks)", { class: "axis-label", "text-anchor": "middle" });
  el("line", { x1: m.l, x2: m.l + w, y1: m.t + h, y2: m.t + h, class: "axis" }, svg);

  // End labels, drawn last and pushed apart vertically so that converging lines stay legible.
  const labels = [];
  if (inf) {
    const y = sy(ratio(inf));
    el("line", { x1: m.l, x2: m.l + w, y1: y, y2: y, class: "ceiling" }, svg);
    labels.push({ x: m.l + w + 6, y, content: `inf ${pct(ratio(inf))}`, policy: "inf" });
  }
  const tip = tooltip(container);
  for (const policy of POLICY_ORDER) {
    const series = finite.filter((r) => r.policy === policy).sort((a, b) => a.capacity - b.capacity);
    if (!series.length) continue;
    const d = series.map((r, i) => `${i ? "L" : "M"}${sx(r.capacity).toFixed(1)},${sy(ratio(r)).toFixed(1)}`).join("");
    el("path", { d, class: `line ${policy}` }, svg);
    for (const r of series) {
      const dot = el("circle", { cx: sx(r.capacity), cy: sy(ratio(r)), r: 4, class: `dot ${policy}` }, svg);
      dot.addEventListener("mouseenter", () => {
        tip.hidden = false;
        tip.innerHTML = `<b>${policy}</b> · ${r.capacity.toLocaleString("en-US")} blocks<br>F1/F0 ${pct(ratio(r))} · evictions ${r.evictions.toLocaleString("en-US")}`;
        tip.style.left = `${sx(r.capacity) + 10}px`;
        tip.style.top = `${sy(ratio(r)) - 10}px`;
      });
      dot.addEventListener("mouseleave", () => { tip.hidden = true; });
    }
    const last = series[series.length - 1];
    labels.push({ x: sx(last.capacity) + 8, y: sy(ratio(last)), content: policy, policy });
  }
  labels.sort((a, b) => a.y - b.y);
  for (let i = 1; i < labels.length; i++) labels[i].y = Math.max(labels[i].y, labels[i - 1].y + 13);
  for (const l of labels) text(svg, l.x, l.y + 4, l.content, { class: `series-label ${l.policy}` });
  if (!finite.length && !inf) {
    text(svg, m.l + w / 2, m.t + h / 2, "no measured requests", { class: "axis-label", "text-anchor": "middle" });
  }
}

// F1/F0 per window over trace time. `rows` name the histories; `timeline` holds cumulative
// per-history F0 and F1 at window ends.
export function drawTimeChart(container, rows, timeline, startMs) {
  const { svg, width, height } = frame(container, 300);
  const m = { l: 52, r: 16, t: 16, b: 40 };
  const w = width - m.l - m.r;
  const h = height - m.t - m.b;
  const timed = timeline.every((p) => p.timeMs !== null) && startMs !== null;
  const xOf = (p) => (timed ? p.timeMs - startMs : p.replayed);

  // Windows: differences of consecutive cumulative points.
  const windows = [];
  for (let i = 1; i < timeline.length; i++) {
    const a = timeline[i - 1];
    const b = timeline[i];
    windows.push({
      x0: xOf(a), x1: xOf(b),
      values: rows.map((_, k) => {
        const f0 = b.f0[k] - a.f0[k];
        return f0 > 0 ? (b.f1[k] - a.f1[k]) / f0 : null;
      }),
    });
  }
  if (!windows.length) {
    text(svg, m.l + w / 2, m.t + h / 2, "no requests", { class: "axis-label", "text-anchor": "middle" });
    return;
  }
  const lo = windows[0].x0;
  const hi = Math.max(windows[windows.length - 1].x1, lo + 1);
  const sx = (v) => m.l + ((v - lo) / (hi - lo)) * w;
  const sy = (v) => m.t + h - v * h;
  const mid = (win) => (win.x0 + win.x1) / 2;

  const grid = el("g", { class: "grid" }, svg);
  for (const v of [0, 0.2, 0.4, 0.6, 0.8, 1]) {
    el("line", { x1: m.l, x2: m.l + w, y1: sy(v), y2: sy(v) }, grid);
    text(grid, m.l - 8, sy(v) + 4, `${v * 100}%`, { class: "tick", "text-anchor": "end" });
  }
  const ticks = timed ? timeTicks(lo, hi, 7) : linearTicks(lo, hi, 7);
  for (const v of ticks) {
    el("line", { x1: sx(v), x2: sx(v), y1: m.t, y2: m.t + h }, grid);
    text(grid, sx(v), m.t + h + 18, timed ? duration(v) : compact(v), { class: "tick", "text-anchor": "middle" });
  }
  text(svg, m.l + w / 2, height - 4, timed ? "trace time" : "requests", { class: "axis-label", "text-anchor": "middle" });
  el("line", { x1: m.l, x2: m.l + w, y1: m.t + h, y2: m.t + h, class: "axis" }, svg);

  // The warm-up: windows in which no history counted anything.
  const firstCounted = windows.findIndex((win) => win.values.some((v) => v !== null));
  if (firstCounted > 0) {
    const x = sx(windows[firstCounted].x0);
    el("rect", { x: m.l, y: m.t, width: x - m.l, height: h, class: "warmup" }, svg);
    text(svg, m.l + 6, m.t + 14, "warm-up", { class: "tick" });
  }

  const ranks = rankWithinPolicy(rows);
  rows.forEach((row, k) => {
    let d = "";
    let pen = false;
    for (const win of windows) {
      const v = win.values[k];
      if (v === null) { pen = false; continue; }
      d += `${pen ? "L" : "M"}${sx(mid(win)).toFixed(1)},${sy(v).toFixed(1)}`;
      pen = true;
    }
    const path = el("path", { d, class: "line thin" }, svg);
    path.style.stroke = historyColor(row.policy, ranks[k].rank, ranks[k].count);
    if (row.policy === "inf") path.classList.add("dashed");
  });

  // Hover: a rule and every history's value in the window under the pointer.
  const tip = tooltip(container);
  const rule = el("line", { y1: m.t, y2: m.t + h, class: "rule", visibility: "hidden" }, svg);
  const hit = el("rect", { x: m.l, y: m.t, width: w, height: h, fill: "transparent" }, svg);
  hit.addEventListener("mousemove", (event) => {
    const box = svg.getBoundingClientRect();
    const px = ((event.clientX - box.left) / box.width) * width;
    const at = lo + ((px - m.l) / w) * (hi - lo);
    const win = windows.find((wi) => at <= wi.x1) ?? windows[windows.length - 1];
    rule.setAttribute("x1", sx(mid(win)));
    rule.setAttribute("x2", sx(mid(win)));
    rule.setAttribute("visibility", "visible");
    const span = timed ? `${duration(win.x0)} – ${duration(win.x1)}` : `requests ${win.x0}–${win.x1}`;
    tip.innerHTML = `<b>${span}</b>` + rows.map((row, k) => {
      const v = win.values[k];
      const color = historyColor(row.policy, ranks[k].rank, ranks[k].count);
      return `<br><span class="chip" style="background:${color}"></span>${historyLabel(row)}: ${v === null ? "–" : pct(v)}`;
    }).join("");
    tip.hidden = false;
    const left = sx(mid(win));
    tip.style.left = `${left > width / 2 ? left - tip.offsetWidth - 12 : left + 12}px`;
    tip.style.top = `${m.t + 8}px`;
  });
  hit.addEventListener("mouseleave", () => {
    tip.hidden = true;
    rule.setAttribute("visibility", "hidden");
  });
}

// Each row's rank by capacity among the rows of its policy.
export function rankWithinPolicy(rows) {
  return rows.map((row) => {
    const same = rows.filter((r) => r.policy === row.policy);
    const sorted = same.map((r) => (r.capacity === "inf" ? Infinity : r.capacity)).sort((a, b) => a - b);
    const cap = row.capacity === "inf" ? Infinity : row.capacity;
    return { rank: sorted.indexOf(cap), count: same.length };
  });
}

export function legend(container, rows) {
  container.replaceChildren();
  const ranks = rankWithinPolicy(rows);
  rows.forEach((row, k) => {
    const item = document.createElement("span");
    item.className = "legend-item";
    const chip = document.createElement("span");
    chip.className = "chip";
    chip.style.background = historyColor(row.policy, ranks[k].rank, ranks[k].count);
    item.append(chip, historyLabel(row));
    container.appendChild(item);
  });
}

// A table cell: the value (class "v"), an optional hint under it, an optional bar (0..1) before
// it; `data-key` names the field, so a test can read every cell.
export function cell(key, value, hint = null, bar = null, numeric = true) {
  const td = document.createElement("td");
  td.dataset.key = key;
  if (numeric) td.className = "num";
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
