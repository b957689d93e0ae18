//! `Fleet` for JS: the `kvreuse fleet` engine, advanced in steps.

use js_sys::{Array, Object};
use kvreuse_core::fleet::{FleetRow, Timing};
use wasm_bindgen::prelude::*;

use crate::js;
use crate::options;
use crate::session::FleetSession;
use crate::stepped;

#[wasm_bindgen(typescript_custom_section)]
const TYPES: &str = r#"
/** Options of `new Fleet`: the flags of `kvreuse fleet`, with its defaults. */
export interface FleetOptions extends TraceOptions {
  /** Workers per fleet; an array or a comma-separated string. Default "4,8". */
  workers?: string | (string | number)[];
  /** Each worker's KV cache: blocks (2000, "10k") or bytes ("40GiB", with
   *  `kvBytesPerToken`); an array or a comma-separated string. Default "2k,10k". */
  workerCapacities?: string | (string | number)[];
  /** Routers, each with optional parameters: "round-robin", "random", "least-loaded",
   *  "kv[:overlap_score_credit=1,prefill_load_scale=1,temperature=0]",
   *  "cache-aware[:cache_threshold=0.3,...]", "prefix-hash[:prefix_tokens=256,...]",
   *  "session"; an array or a comma-separated string. Default "round-robin,kv". */
  routers?: string | string[];
  /** Tokens per block of the workers' caches. Default the trace's. */
  engineBlockSize?: number;
  /** Bytes of KV cache per token, for worker capacities in bytes. */
  kvBytesPerToken?: number | string;
  /** The history of F1 (the ceiling): blocks, bytes of a kvreuse history, or "inf".
   *  Default "256MiB". */
  history?: string | number;
  /** "mocker" (Dynamo's mocker: vLLM's scheduler and timing) or "instant". Default
   *  "mocker". */
  timing?: "mocker" | "instant";
  /** Divides the simulated engines' pass times (mocker timing). Default 1. */
  speedup?: number;
  /** Seeds every random choice, below 2^53. Default 0. */
  seed?: number;
}

/** One worker's share of a row's counted requests. */
export interface FleetWorker {
  requests: number;
  prompt_tokens: number;
  reused_tokens: number;
}

/** One fleet shape's results: the fields of a `kvreuse fleet --json` row. Tokens: F0 the
 *  prompts', F1 computed before (the ceiling), F2 cached on the best worker at routing, F3
 *  on the selected worker, F4 found by its lookup, F5 reused; the losses between them. */
export interface FleetRow {
  workers: number;
  worker_capacity: number;
  router: string;
  requests: number;
  rejected_requests: number;
  truncated_outputs: number;
  f0_tokens: number;
  f1_tokens: number;
  f2_tokens: number;
  f3_tokens: number;
  f4_tokens: number;
  f5_tokens: number;
  cold_tokens: number;
  retention_tokens: number;
  routing_tokens: number;
  race_tokens: number;
  retrieval_tokens: number;
  evictions: number;
  ttft_ms_p50: number | null;
  ttft_ms_p99: number | null;
  queue_ms_mean: number | null;
  per_worker: FleetWorker[];
}

/** The object `kvreuse fleet --json` prints, but for `fleet_heap_bytes` (the command
 *  line's own memory). */
export interface FleetReport {
  requests: number;
  measured_requests: number;
  skipped_lines: number;
  block_size: number;
  engine_block_size: number;
  timing: "mocker" | "instant";
  speedup: number | null;
  warmup: number;
  warmup_requests: number | null;
  history: number | "inf";
  kv_bytes_per_token: number | null;
  seed: number;
  rows: FleetRow[];
}
"#;

/// A request trace run through simulated fleets, as `kvreuse fleet` does, in steps: call
/// `step` until it returns `true` (in a worker, or between frames), then read `results()` or
/// `report()`.
#[wasm_bindgen]
#[derive(Debug)]
pub struct Fleet {
    session: FleetSession,
}

stepped::stepped_methods!(Fleet);

#[wasm_bindgen]
impl Fleet {
    /// Prepares to simulate fleets over `trace`: a whole trace as text (a string, or its
    /// UTF-8 bytes as a `Uint8Array`), in any format `kvreuse fleet` reads; or `null`, to
    /// hand the trace over in chunks with `push` (files one after another, each begun with
    /// `beginFile`), then `finish`.
    ///
    /// The options are checked here: a `TypeError` for an unknown option or a value of the
    /// wrong type, a `RangeError` for one out of range.
    #[wasm_bindgen(constructor)]
    pub fn new(
        #[wasm_bindgen(unchecked_param_type = "string | Uint8Array | null")] trace: &JsValue,
        #[wasm_bindgen(unchecked_optional_param_type = "FleetOptions")] options: &JsValue,
    ) -> Result<Fleet, JsValue> {
        let settings = options::fleet(options)?;
        let session = match stepped::whole_text(trace)? {
            Some(text) => FleetSession::new(text, &settings),
            None => FleetSession::chunked(&settings),
        };
        Ok(Fleet { session: session.map_err(|e| options::session_error(&e))? })
    }

    /// Requests routed so far.
    #[wasm_bindgen(getter)]
    pub fn simulated(&self) -> f64 {
        self.session.replayed() as f64
    }

    /// The rows, one per fleet shape in `kvreuse fleet`'s order (workers, then capacity,
    /// then router), with exactly its `--json` fields. Final once `step` has returned
    /// `true`; before, requests still in flight are not counted.
    #[wasm_bindgen(unchecked_return_type = "FleetRow[]")]
    pub fn results(&self) -> Result<Array, JsValue> {
        self.session.results().iter().map(row).collect()
    }

    /// The object `kvreuse fleet --json` prints (but for the command line's own memory).
    #[wasm_bindgen(unchecked_return_type = "FleetReport")]
    pub fn report(&self) -> Result<Object, JsValue> {
        let summary = self.session.summary();
        let settings = self.session.settings();
        let out = Object::new();
        js::set(&out, "requests", js::count(summary.requests, "requests")?);
        js::set(
            &out,
            "measured_requests",
            js::count(summary.measured_requests, "measured_requests")?,
        );
        js::set(&out, "skipped_lines", js::count(summary.skipped_lines, "skipped_lines")?);
        js::set(&out, "block_size", summary.block_size as f64);
        js::set(&out, "engine_block_size", self.session.engine_block_size() as f64);
        js::set(&out, "timing", settings.timing.name());
        let speedup = match settings.timing {
            Timing::Mocker { speedup } => JsValue::from_f64(speedup),
            Timing::Instant => JsValue::NULL,
        };
        js::set(&out, "speedup", speedup);
        js::set(&out, "warmup", summary.warmup);
        let warmup_requests = summary.warmup_requests.map(|n| js::count(n, "warmup_requests"));
        js::set(&out, "warmup_requests", warmup_requests.transpose()?.unwrap_or(JsValue::NULL));
        let history = match self.session.history_blocks() {
            Some(blocks) => JsValue::from_f64(blocks as f64),
            None => JsValue::from_str("inf"),
        };
        js::set(&out, "history", history);
        let kv = settings.kv_bytes_per_token.map(|n| js::count(n, "kv_bytes_per_token"));
        js::set(&out, "kv_bytes_per_token", kv.transpose()?.unwrap_or(JsValue::NULL));
        js::set(&out, "seed", settings.seed as f64);
        js::set(&out, "rows", self.results()?);
        Ok(out)
    }
}

fn optional(value: Option<f64>) -> JsValue {
    value.map_or(JsValue::NULL, JsValue::from_f64)
}

fn row(row: &FleetRow) -> Result<JsValue, JsValue> {
    let out = Object::new();
    js::set(&out, "workers", row.workers as f64);
    js::set(&out, "worker_capacity", row.worker_capacity as f64);
    js::set(&out, "router", row.router.as_str());
    for (key, value) in row.counts() {
        js::set(&out, key, js::count(value, key)?);
    }
    js::set(&out, "ttft_ms_p50", optional(row.ttft_ms_p50));
    js::set(&out, "ttft_ms_p99", optional(row.ttft_ms_p99));
    js::set(&out, "queue_ms_mean", optional(row.queue_ms_mean));
    let workers = row
        .per_worker
        .iter()
        .map(|w| {
            let worker = Object::new();
            js::set(&worker, "requests", js::count(w.requests, "requests")?);
            js::set(&worker, "prompt_tokens", js::count(w.prompt_tokens, "prompt_tokens")?);
            js::set(&worker, "reused_tokens", js::count(w.reused_tokens, "reused_tokens")?);
            Ok(JsValue::from(worker))
        })
        .collect::<Result<Array, JsValue>>()?;
    js::set(&out, "per_worker", workers);
    Ok(out.into())
}
