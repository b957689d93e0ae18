//! `Replay` for JS: the `kvreuse replay` engine, advanced in steps.

use js_sys::{Array, Object, Reflect};
use kvreuse_core::replay::Row;
use kvreuse_core::setup::{ReplaySettings, Setting, SetupError};
use wasm_bindgen::prelude::*;

use crate::js::{self, Options, range_error, type_error};
use crate::session::{Session, SessionError};

#[wasm_bindgen(typescript_custom_section)]
const TYPES: &str = r#"
/** Options of `new Replay`: the flags of `kvreuse replay`, with its defaults. */
export interface ReplayOptions {
  /** History sizes: blocks (1000, "10k", "1M"), bytes ("256MiB") or "inf"; an array or a
   *  comma-separated string. Default "1k,10k,100k,1M,inf". */
  capacities?: string | (string | number)[];
  /** "fifo", "lru", "inf"; an array or a comma-separated string. Default "fifo,lru". */
  policies?: string | string[];
  /** Tokens per block: the trace's for Mooncake records, the hashing block size for token
   *  records. Default 512. */
  blockSize?: number;
  /** Fraction of the requests in [0, 1) that only warm the histories up. Default 0. */
  warmup?: number;
  /** Count and skip invalid lines instead of stopping at the first. Default false. */
  skipInvalid?: boolean;
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
  skipped_lines: number;
  rows: ReplayRow[];
}
"#;

/// The options, named by the shared setup's rule (the flag in camelCase, plural for a list).
const KEYS: [&str; 5] = [
    Setting::Capacity.js_name(),
    Setting::Policy.js_name(),
    Setting::BlockSize.js_name(),
    Setting::Warmup.js_name(),
    Setting::SkipInvalid.js_name(),
];

fn js_error(error: &SessionError) -> JsValue {
    let value = if error.is_range() { range_error(error) } else { type_error(error) };
    if let Some(line) = error.line() {
        let _ = Reflect::set(&value, &JsValue::from_str("line"), &JsValue::from_f64(line as f64));
    }
    value
}

fn setup_error(error: SetupError) -> JsValue {
    js_error(&SessionError::Setup(error))
}

/// The options mapped onto the shared setup, which checks them as the command line does:
/// lists as the text of a flag's value, numbers through the typed setters (so that no float
/// parser or formatter is linked for them).
fn settings(options: &JsValue) -> Result<ReplaySettings, JsValue> {
    let options = Options::new(options, "options", &KEYS)?;
    let mut settings = ReplaySettings::default();
    for setting in [Setting::Capacity, Setting::Policy] {
        let name = setting.js_name();
        let Some(items) = options.list(name)? else { continue };
        let texts = items
            .iter()
            .enumerate()
            .map(|(i, item)| match item.as_string() {
                Some(text) => Ok(text),
                // A number counts blocks, as a plain number written as text does.
                None if setting == Setting::Capacity && item.as_f64().is_some() => {
                    js::integer(item, &format!("options.{name}[{i}]")).map(|n| n.to_string())
                }
                None if setting == Setting::Capacity => Err(type_error(format_args!(
                    "options.{name}[{i}] must be a string or a number"
                ))),
                None => Err(type_error(format_args!("options.{name}[{i}] must be a string"))),
            })
            .collect::<Result<Vec<String>, _>>()?;
        settings.set_list(setting, &texts.join(",")).map_err(setup_error)?;
    }
    if let Some(block_size) = options.integer(Setting::BlockSize.js_name())? {
        settings.trace.set_block_size(block_size).map_err(setup_error)?;
    }
    if let Some(warmup) = options.number(Setting::Warmup.js_name())? {
        settings.trace.set_warmup(warmup, &js::number(warmup)).map_err(setup_error)?;
    }
    if let Some(skip) = options.boolean(Setting::SkipInvalid.js_name())? {
        settings.trace.skip_invalid = skip;
    }
    Ok(settings)
}

/// A request trace replayed through several history sizes and policies, as
/// `kvreuse replay` does, in steps: call `step` until it returns `true` (in a worker, or
/// between frames), then read `results()` or `report()`.
#[wasm_bindgen]
#[derive(Debug)]
pub struct Replay {
    session: Session,
}

#[wasm_bindgen]
impl Replay {
    /// Prepares to replay `trace`: JSONL text (a string, or its UTF-8 bytes as a
    /// `Uint8Array`) of Mooncake records (`hash_ids`) or token records (`tokens`).
    ///
    /// The options are checked here: a `TypeError` for an unknown option or a value of the
    /// wrong type, a `RangeError` for one out of range. The lines are read by `step`.
    #[wasm_bindgen(constructor)]
    pub fn new(
        #[wasm_bindgen(unchecked_param_type = "string | Uint8Array")] trace: &JsValue,
        #[wasm_bindgen(unchecked_optional_param_type = "ReplayOptions")] options: &JsValue,
    ) -> Result<Replay, JsValue> {
        let settings = settings(options)?;
        let text = js::text_bytes(trace, "trace")?;
        let session = Session::new(text, &settings).map_err(|e| js_error(&e))?;
        Ok(Replay { session })
    }

    /// Does up to `maxWork` units of work (default: all that is left): trace lines while
    /// parsing, then requests. Returns whether the replay is done.
    ///
    /// A malformed line throws a `TypeError` (`line N: what is wrong`, with `line` set on the
    /// error), unless `skipInvalid` was given; the replay then stays at that line.
    pub fn step(
        &mut self,
        #[wasm_bindgen(js_name = maxWork, unchecked_optional_param_type = "number")]
        max_work: &JsValue,
    ) -> Result<bool, JsValue> {
        if max_work.is_undefined() {
            return self.session.run().map(|()| true).map_err(|e| js_error(&e));
        }
        let max = match js::integer(max_work, "maxWork")? {
            0 => return Err(range_error("maxWork must be at least 1")),
            n => n,
        };
        self.session.step(max).map_err(|e| js_error(&e))
    }

    /// `"replay"` or `"done"`: whether `step` has work left (each step reads lines and
    /// replays their requests at once).
    #[wasm_bindgen(getter, unchecked_return_type = "\"replay\" | \"done\"")]
    pub fn phase(&self) -> String {
        self.session.phase().name().into()
    }

    /// Progress in `[0, 1]`: the share of the trace's bytes read and replayed.
    #[wasm_bindgen(getter)]
    pub fn progress(&self) -> f64 {
        self.session.progress()
    }

    /// Records (non-blank lines) in the trace, counted when the replay was created, so known
    /// from the start.
    #[wasm_bindgen(getter)]
    pub fn requests(&self) -> f64 {
        self.session.records() as f64
    }

    /// Requests replayed so far.
    #[wasm_bindgen(getter)]
    pub fn replayed(&self) -> f64 {
        self.session.replayed() as f64
    }

    /// Invalid lines skipped so far (with `skipInvalid`).
    #[wasm_bindgen(getter, js_name = skippedLines)]
    pub fn skipped_lines(&self) -> f64 {
        self.session.skipped_lines() as f64
    }

    /// The timestamp (ms) of the last replayed request that has one.
    #[wasm_bindgen(getter, js_name = traceTimeMs)]
    pub fn trace_time_ms(&self) -> Option<f64> {
        self.session.trace_time_ms().map(|t| t as f64)
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
    /// `block_size`, `warmup`, `skipped_lines` and `rows`.
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
