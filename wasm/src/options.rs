//! The options of `new Replay` and `new Fleet`, mapped onto the shared setup.
//!
//! Each option is a command-line flag under its JS name ([`Setting::js_name`]), with the
//! same defaults; its value is handed to the shared setup in `kvreuse-core`, which checks it
//! as the command line does, so a bad value gets the command line's message behind the
//! option's name. Lists are given as the text of a flag's value or as arrays; numbers go
//! through the typed setters, so that no float parser or formatter is linked for them.

use alloc::string::{String, ToString};
use alloc::vec::Vec;
use alloc::{format, vec};
use js_sys::Array;
#[cfg(feature = "fleet")]
use kvreuse_core::setup::FleetSettings;
use kvreuse_core::setup::{ReplaySettings, Setting, SetupError, TraceSettings};
use wasm_bindgen::prelude::*;

use crate::js::{self, Options, range_error, type_error};
use crate::session::SessionError;

/// The options every run over a trace takes.
const TRACE: [Setting; 6] = [
    Setting::BlockSize,
    Setting::Warmup,
    Setting::WarmupRequests,
    Setting::SkipInvalid,
    Setting::Format,
    Setting::Stagger,
];

/// The options of `new Replay`.
const REPLAY: [Setting; 2] = [Setting::Capacity, Setting::Policy];

/// The options of `new Fleet`.
#[cfg(feature = "fleet")]
const FLEET: [Setting; 9] = [
    Setting::Workers,
    Setting::WorkerCapacity,
    Setting::Router,
    Setting::EngineBlockSize,
    Setting::KvBytesPerToken,
    Setting::History,
    Setting::Timing,
    Setting::Speedup,
    Setting::Seed,
];

/// A JS error for a setting the shared setup refused.
pub(crate) fn setup_error(error: SetupError) -> JsValue {
    session_error(&SessionError::Setup(error))
}

/// A JS error for a run that failed: a `RangeError` for a value out of range, else a
/// `TypeError`, with `line` set when the error is about a trace line.
pub(crate) fn session_error(error: &SessionError) -> JsValue {
    let value = if error.is_range() { range_error(error) } else { type_error(error) };
    if let Some(line) = error.line() {
        let _ = js_sys::Reflect::set(
            &value,
            &JsValue::from_str("line"),
            &JsValue::from_f64(line as f64),
        );
    }
    value
}

fn names(settings: &[Setting]) -> Vec<&'static str> {
    settings.iter().map(|s| s.js_name()).collect()
}

/// A list option as the text of the flag's value: strings as they are, numbers (where
/// `numbers` allows them) as whole numbers.
fn list_text(
    options: &Options,
    setting: Setting,
    numbers: bool,
) -> Result<Option<String>, JsValue> {
    let name = setting.js_name();
    let items = match options.get(name) {
        None => return Ok(None),
        // One number stands for a list of one.
        Some(value) if numbers && value.as_f64().is_some() => vec![value],
        Some(_) => options.list(name)?.unwrap_or_default(),
    };
    let texts = items
        .iter()
        .enumerate()
        .map(|(i, item)| match item.as_string() {
            Some(text) => Ok(text),
            None if numbers && item.as_f64().is_some() => {
                js::integer(item, &format!("options.{name}[{i}]")).map(|n| n.to_string())
            }
            None if numbers => {
                Err(type_error(format_args!("options.{name}[{i}] must be a string or a number")))
            }
            None => Err(type_error(format_args!("options.{name}[{i}] must be a string"))),
        })
        .collect::<Result<Vec<String>, _>>()?;
    Ok(Some(texts.join(",")))
}

/// A single option given as a string or a whole number, as the text of the flag's value.
#[cfg(feature = "fleet")]
fn text_or_integer(options: &Options, setting: Setting) -> Result<Option<String>, JsValue> {
    let name = setting.js_name();
    match options.get(name) {
        None => Ok(None),
        Some(value) if value.as_f64().is_some() => {
            js::integer(&value, &format!("options.{name}")).map(|n| Some(n.to_string()))
        }
        Some(_) => options.string(name),
    }
}

/// Reads the trace options into `trace`.
fn trace_options(options: &Options, trace: &mut TraceSettings) -> Result<(), JsValue> {
    if let Some(block_size) = options.integer(Setting::BlockSize.js_name())? {
        trace.set_block_size(block_size).map_err(setup_error)?;
    }
    if let Some(warmup) = options.number(Setting::Warmup.js_name())? {
        trace.set_warmup(warmup, &js::number(warmup)).map_err(setup_error)?;
    }
    if let Some(requests) = options.get(Setting::WarmupRequests.js_name()) {
        let requests = js::whole_number(&requests, "options.warmupRequests")?;
        if options.get(Setting::Warmup.js_name()).is_some() {
            return Err(type_error("options.warmup and options.warmupRequests exclude each other"));
        }
        trace.set_warmup_requests(requests);
    }
    if let Some(skip) = options.boolean(Setting::SkipInvalid.js_name())? {
        trace.skip_invalid = skip;
    }
    if let Some(format) = options.string(Setting::Format.js_name())? {
        trace.set_format(&format).map_err(setup_error)?;
    }
    if let Some(seconds) = options.number(Setting::Stagger.js_name())? {
        trace.set_stagger(&js::number(seconds)).map_err(setup_error)?;
    }
    Ok(())
}

/// The options of `new Replay`, checked.
pub(crate) fn replay(value: &JsValue) -> Result<ReplaySettings, JsValue> {
    let keys = names(&[&TRACE[..], &REPLAY[..]].concat());
    let options = Options::new(value, "options", &keys)?;
    let mut settings = ReplaySettings::default();
    for (setting, numbers) in [(Setting::Capacity, true), (Setting::Policy, false)] {
        if let Some(text) = list_text(&options, setting, numbers)? {
            settings.set_list(setting, &text).map_err(setup_error)?;
        }
    }
    trace_options(&options, &mut settings.trace)?;
    Ok(settings)
}

/// The options of `new Fleet`, checked.
#[cfg(feature = "fleet")]
pub(crate) fn fleet(value: &JsValue) -> Result<FleetSettings, JsValue> {
    let keys = names(&[&TRACE[..], &FLEET[..]].concat());
    let options = Options::new(value, "options", &keys)?;
    let mut settings = FleetSettings::default();
    for (setting, numbers) in
        [(Setting::Workers, true), (Setting::WorkerCapacity, true), (Setting::Router, false)]
    {
        if let Some(text) = list_text(&options, setting, numbers)? {
            settings.set_list(setting, &text).map_err(setup_error)?;
        }
    }
    for setting in [Setting::EngineBlockSize, Setting::KvBytesPerToken, Setting::History] {
        if let Some(text) = text_or_integer(&options, setting)? {
            settings.set(setting, &text).map_err(setup_error)?;
        }
    }
    if let Some(timing) = options.string(Setting::Timing.js_name())? {
        settings.set_timing(&timing).map_err(setup_error)?;
    }
    if let Some(speedup) = options.number(Setting::Speedup.js_name())? {
        settings.set_speedup(speedup, &js::number(speedup)).map_err(setup_error)?;
    }
    if let Some(seed) = options.get(Setting::Seed.js_name()) {
        let seed = js::whole_number(&seed, "options.seed")?;
        settings.set(Setting::Seed, &seed.to_string()).map_err(setup_error)?;
    }
    trace_options(&options, &mut settings.trace)?;
    Ok(settings)
}

/// The formats the input told or was given, as `[{ file, format, told }]`.
pub(crate) fn formats(stats: &crate::input::InputStats) -> Array {
    stats
        .formats
        .iter()
        .map(|(file, format, told)| {
            let out = js_sys::Object::new();
            js::set(&out, "file", file.as_str());
            js::set(&out, "format", format.map_or(JsValue::NULL, |f| f.name().into()));
            js::set(&out, "told", *told);
            JsValue::from(out)
        })
        .collect()
}
