//! `Replay` for JS: the `kvreuse replay` engine, advanced in steps.

use js_sys::{Array, Object};
use kvreuse_core::replay::Row;
use wasm_bindgen::prelude::*;

use crate::js;
use crate::options;
use crate::session::ReplaySession;
use crate::stepped;

#[wasm_bindgen(typescript_custom_section)]
const TYPES: &str = r#"
/** Options of `new Replay`: the flags of `kvreuse replay`, with its defaults. */
export interface ReplayOptions extends TraceOptions {
  /** History sizes: blocks (1000, "10k", "1M"), bytes ("256MiB") or "inf"; an array or a
   *  comma-separated string. Default "1k,10k,100k,1M,inf". */
  capacities?: string | (string | number)[];
  /** "fifo", "lru", "inf"; an array or a comma-separated string. Default "fifo,lru". */
  policies?: string | string[];
}

/** Options every run over a trace takes: the flags of `kvreuse replay` and `kvreuse fleet`
 *  about the trace, with their defaults. */
export interface TraceOptions {
  /** Tokens per block: the trace's for Mooncake (512) and Bailian (16) records, a
   *  kv-cache-tester document's own, the hashing block size (512) for token records.
   *  Default the format's. */
  blockSize?: number;
  /** "mooncake", "bailian", "kvcache-tester" or "tokens". Default: told from each file's
   *  first bytes. */
  format?: "mooncake" | "bailian" | "kvcache-tester" | "tokens";
  /** Fraction of the requests in [0, 1) that only warm up. Default 0. A trace given in
   *  chunks (JSONL) cannot be counted in advance: give `warmupRequests` instead. */
  warmup?: number;
  /** Number of requests that only warm up (instead of `warmup`). */
  warmupRequests?: number;
  /** Count and skip invalid lines instead of stopping at the first. Default false. */
  skipInvalid?: boolean;
  /** Seconds between the starts of kv-cache-tester conversations. Default 0. */
  stagger?: number;
}

/** A file of the trace, its format and whether it was told from its first bytes. */
export interface TraceFile {
  file: string;
  format: "mooncake" | "bailian" | "kvcache-tester" | "tokens" | null;
  told: boolean;
}

/** One history's results: the fields of a `kvreuse replay --json` row. */
export interface ReplayRow {
  policy: "fifo" | "lru" | "inf";
  /** Capacity in blocks, or "inf". */
  capacity: number | "inf";
  /** Heap bytes of a kvreuse history of this capacity in a 64-bit router; null for inf. */
  heap_bytes: number | null;
  /** Prompt tokens of the counted requests. */
  f0_tokens: number;
  /** Prompt tokens in leading blocks that were present. */
  f1_tokens: number;
  /** Prompt tokens in any present block. */
  any_tokens: number;
  /** Leading blocks that were present. */
  f1_blocks: number;
  /** Ids evicted while counting. */
  evictions: number;
  /** How far back in trace time the history reached at the end; null without timestamps. */
  reach_ms: number | null;
}

/** The whole `kvreuse replay --json` object. */
export interface ReplayReport {
  requests: number;
  measured_requests: number;
  block_size: number;
  warmup: number;
  warmup_requests: number | null;
  skipped_lines: number;
  rows: ReplayRow[];
}
"#;

/// A request trace replayed through several history sizes and policies, as
/// `kvreuse replay` does, in steps: call `step` until it returns `true` (in a worker, or
/// between frames), then read `results()` or `report()`.
#[wasm_bindgen]
#[derive(Debug)]
pub struct Replay {
    session: ReplaySession,
}

stepped::stepped_methods!(Replay);

#[wasm_bindgen]
impl Replay {
    /// Prepares to replay `trace`: a whole trace as text (a string, or its UTF-8 bytes as a
    /// `Uint8Array`), in any format `kvreuse replay` reads; or `null`, to hand the trace over
    /// in chunks with `push` (files one after another, each begun with `beginFile`), then
    /// `finish`.
    ///
    /// The options are checked here: a `TypeError` for an unknown option or a value of the
    /// wrong type, a `RangeError` for one out of range. The trace is read by `step`.
    #[wasm_bindgen(constructor)]
    pub fn new(
        #[wasm_bindgen(unchecked_param_type = "string | Uint8Array | null")] trace: &JsValue,
        #[wasm_bindgen(unchecked_optional_param_type = "ReplayOptions")] options: &JsValue,
    ) -> Result<Replay, JsValue> {
        let settings = options::replay(options)?;
        let session = match stepped::whole_text(trace)? {
            Some(text) => ReplaySession::new(text, &settings),
            None => ReplaySession::chunked(&settings),
        };
        Ok(Replay { session: session.map_err(|e| options::session_error(&e))? })
    }

    /// Requests replayed so far.
    #[wasm_bindgen(getter)]
    pub fn replayed(&self) -> f64 {
        self.session.replayed() as f64
    }

    /// The first timestamp (ms) among the requests replayed.
    #[wasm_bindgen(getter, js_name = traceStartMs)]
    pub fn trace_start_ms(&self) -> Option<f64> {
        self.session.trace_span_ms().map(|(first, _)| first as f64)
    }

    /// The latest timestamp (ms) among the requests replayed.
    #[wasm_bindgen(getter, js_name = traceEndMs)]
    pub fn trace_end_ms(&self) -> Option<f64> {
        self.session.trace_span_ms().map(|(_, last)| last as f64)
    }

    /// The rows so far, one per history in `kvreuse replay`'s order, with exactly its
    /// `--json` fields. Final once `step` has returned `true`.
    #[wasm_bindgen(unchecked_return_type = "ReplayRow[]")]
    pub fn results(&self) -> Result<Array, JsValue> {
        self.session.results().iter().map(row).collect()
    }

    /// The whole object `kvreuse replay --json` prints: `requests`, `measured_requests`,
    /// `block_size`, `warmup`, `warmup_requests`, `skipped_lines` and `rows`.
    #[wasm_bindgen(unchecked_return_type = "ReplayReport")]
    pub fn report(&self) -> Result<Object, JsValue> {
        let summary = self.session.summary();
        let out = Object::new();
        js::set(&out, "requests", js::count(summary.requests, "requests")?);
        js::set(
            &out,
            "measured_requests",
            js::count(summary.measured_requests, "measured_requests")?,
        );
        js::set(&out, "block_size", summary.block_size as f64);
        js::set(&out, "warmup", summary.warmup);
        let warmup_requests = summary.warmup_requests.map(|n| js::count(n, "warmup_requests"));
        js::set(&out, "warmup_requests", warmup_requests.transpose()?.unwrap_or(JsValue::NULL));
        js::set(&out, "skipped_lines", js::count(summary.skipped_lines, "skipped_lines")?);
        js::set(&out, "rows", self.results()?);
        Ok(out)
    }
}

fn row(row: &Row) -> Result<JsValue, JsValue> {
    let out = Object::new();
    js::set(&out, "policy", row.policy.name());
    js::set(
        &out,
        "capacity",
        row.capacity.map_or_else(|| JsValue::from_str("inf"), |c| JsValue::from_f64(c as f64)),
    );
    let heap = row.heap_bytes.map(|b| js::count(b as u64, "heap_bytes")).transpose()?;
    js::set(&out, "heap_bytes", heap.unwrap_or(JsValue::NULL));
    js::set(&out, "f0_tokens", js::count(row.f0_tokens, "f0_tokens")?);
    js::set(&out, "f1_tokens", js::count(row.f1_tokens, "f1_tokens")?);
    js::set(&out, "any_tokens", js::count(row.any_tokens, "any_tokens")?);
    js::set(&out, "f1_blocks", js::count(row.f1_blocks, "f1_blocks")?);
    js::set(&out, "evictions", js::count(row.evictions, "evictions")?);
    let reach = row.reach_ms.map(|ms| js::count(ms, "reach_ms")).transpose()?;
    js::set(&out, "reach_ms", reach.unwrap_or(JsValue::NULL));
    Ok(out.into())
}
