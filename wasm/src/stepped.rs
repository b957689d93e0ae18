//! What `Replay` and `Fleet` share at the JS boundary: a trace given whole or in chunks, and
//! steps.

use alloc::vec::Vec;
use wasm_bindgen::prelude::*;

use crate::js::{self, range_error};
use crate::options::session_error;
use crate::session::{Engine, Session};

/// The whole trace `trace` gives (a string or `Uint8Array`), or `None` when it is `null` or
/// `undefined`: chunks to come.
pub(crate) fn whole_text(trace: &JsValue) -> Result<Option<Vec<u8>>, JsValue> {
    if trace.is_undefined() || trace.is_null() {
        Ok(None)
    } else {
        js::text_bytes(trace, "trace").map(Some)
    }
}

/// Runs up to `max_work` requests (all that is left when `undefined`).
pub(crate) fn step<E: Engine>(
    session: &mut Session<E>,
    max_work: &JsValue,
) -> Result<bool, JsValue> {
    let max = if max_work.is_undefined() {
        usize::MAX
    } else {
        match js::integer(max_work, "maxWork")? {
            0 => return Err(range_error("maxWork must be at least 1")),
            n => n,
        }
    };
    session.step(max).map_err(|e| session_error(&e))
}

/// Takes a chunk (a `Uint8Array`, or a string) of the current file.
pub(crate) fn push<E: Engine>(session: &mut Session<E>, chunk: &JsValue) -> Result<(), JsValue> {
    let bytes = js::text_bytes(chunk, "chunk")?;
    session.push(&bytes).map_err(|e| session_error(&e))
}

/// Starts the next file.
pub(crate) fn begin_file<E: Engine>(session: &mut Session<E>, name: &str) -> Result<(), JsValue> {
    session.begin_file(name).map_err(|e| session_error(&e))
}

/// Ends a chunked trace.
pub(crate) fn finish<E: Engine>(session: &mut Session<E>) -> Result<(), JsValue> {
    session.finish().map_err(|e| session_error(&e))
}

/// The methods `Replay` and `Fleet` share, on a type with a `session: Session<E>` field: the
/// trace in chunks (`beginFile`, `push`, `finish`), `step`, and what a page shows of
/// progress. One `#[wasm_bindgen] impl` block per type, beside the type's own.
macro_rules! stepped_methods {
    ($type:ty) => {
        #[wasm_bindgen]
        impl $type {
            /// Starts the next file of a trace given in chunks, named `name` in errors (a
            /// first file named "trace" is begun by `push` when none is). Its format is told
            /// from its first bytes, unless `format` was given.
            #[wasm_bindgen(js_name = beginFile)]
            pub fn begin_file(&mut self, name: &str) -> Result<(), JsValue> {
                $crate::stepped::begin_file(&mut self.session, name)
            }

            /// Takes the next chunk of the current file (a `Uint8Array`, any size, not
            /// compressed) and runs the requests it completes. kv-cache-tester documents run
            /// as concurrent conversations, so their requests wait for `finish`.
            pub fn push(
                &mut self,
                #[wasm_bindgen(unchecked_param_type = "Uint8Array | string")] chunk: &JsValue,
            ) -> Result<(), JsValue> {
                $crate::stepped::push(&mut self.session, chunk)
            }

            /// Ends a trace given in chunks; `step` then runs what is left (a document set's
            /// requests, merged by time) and returns `true` when done.
            pub fn finish(&mut self) -> Result<(), JsValue> {
                $crate::stepped::finish(&mut self.session)
            }

            /// Runs up to `maxWork` requests (default: all that is left), reading the text
            /// as needed. Returns whether the run is done (for a trace given in chunks, only
            /// after `finish`).
            ///
            /// A malformed line throws a `TypeError` (`line N: what is wrong`, with `line`
            /// set on the error, and the file's name in front for a trace given in chunks),
            /// unless `skipInvalid` was given; every later call throws it again.
            pub fn step(
                &mut self,
                #[wasm_bindgen(js_name = maxWork, unchecked_optional_param_type = "number")]
                max_work: &JsValue,
            ) -> Result<bool, JsValue> {
                $crate::stepped::step(&mut self.session, max_work)
            }

            /// `"replay"` or `"done"`: whether there is work left.
            #[wasm_bindgen(getter, unchecked_return_type = "\"replay\" | \"done\"")]
            pub fn phase(&self) -> alloc::string::String {
                self.session.phase().name().into()
            }

            /// Progress in `[0, 1]`: the share of a whole trace's requests run (for
            /// documents, half for reading them); for a trace given in chunks, of its
            /// requests run once their number is known after `finish` (0 before).
            #[wasm_bindgen(getter)]
            pub fn progress(&self) -> f64 {
                self.session.progress()
            }

            /// Records in the trace, once known: a whole JSONL trace's are counted when the
            /// run is created; documents and chunks once all are read. `null` before.
            #[wasm_bindgen(getter)]
            pub fn requests(&self) -> Option<f64> {
                self.session.records().map(|n| n as f64)
            }

            /// The trace's files, each with its format and whether it was told from its
            /// first bytes.
            #[wasm_bindgen(unchecked_return_type = "TraceFile[]")]
            pub fn files(&self) -> js_sys::Array {
                $crate::options::formats(self.session.input_stats())
            }

            /// Invalid lines skipped so far (with `skipInvalid`).
            #[wasm_bindgen(getter, js_name = skippedLines)]
            pub fn skipped_lines(&self) -> f64 {
                self.session.skipped_lines() as f64
            }

            /// The timestamp (ms) of the last request run that has one.
            #[wasm_bindgen(getter, js_name = traceTimeMs)]
            pub fn trace_time_ms(&self) -> Option<f64> {
                self.session.trace_time_ms().map(|t| t as f64)
            }
        }
    };
}

pub(crate) use stepped_methods;
