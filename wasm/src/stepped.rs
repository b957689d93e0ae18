//! What `Replay` and `Fleet` share at the JS boundary: a trace given whole or in chunks, and
//! steps.

use wasm_bindgen::prelude::*;

use crate::js::{self, range_error};
use crate::options::session_error;
use crate::session::{Engine, Session};

/// A session over `trace` (a string or `Uint8Array` of a whole trace), or over chunks to come
/// when `trace` is `null` or `undefined`.
pub(crate) fn session<E: Engine>(
    trace: &JsValue,
    settings: &E::Settings,
) -> Result<Session<E>, JsValue> {
    let session = if trace.is_undefined() || trace.is_null() {
        Session::chunked(settings)
    } else {
        Session::new(js::text_bytes(trace, "trace")?, settings)
    };
    session.map_err(|e| session_error(&e))
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
