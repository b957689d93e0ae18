//! Helpers shared by the wasm-bindgen tests: JS values in, JS values out.

use js_sys::{BigUint64Array, Error, JSON, RangeError, Reflect, TypeError};
use wasm_bindgen::{JsCast, JsValue};

/// A JS value from JSON text (options objects, arrays of numbers).
pub(crate) fn json(text: &str) -> JsValue {
    JSON::parse(text).unwrap_or_else(|e| panic!("bad JSON in a test: {text}: {e:?}"))
}

/// `object[key]`.
pub(crate) fn get(object: &JsValue, key: &str) -> JsValue {
    Reflect::get(object, &JsValue::from_str(key)).expect("an object")
}

/// A number property that must hold an integer.
pub(crate) fn get_u64(object: &JsValue, key: &str) -> u64 {
    let n = get(object, key).as_f64().unwrap_or_else(|| panic!("{key} is not a number"));
    assert!(n.fract() == 0.0 && n >= 0.0, "{key} = {n}");
    n as u64
}

/// The ids in a `BigUint64Array`.
pub(crate) fn ids(value: JsValue) -> Vec<u64> {
    value.dyn_into::<BigUint64Array>().expect("a BigUint64Array").to_vec()
}

/// What kind of JS error a call threw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Type,
    Range,
}

/// The message of the error `result` must be, of the given kind.
#[track_caller]
pub(crate) fn thrown<T: std::fmt::Debug>(result: Result<T, JsValue>, kind: Kind) -> Error {
    let error = result.expect_err("an error was expected");
    let got = if error.is_instance_of::<TypeError>() {
        Kind::Type
    } else if error.is_instance_of::<RangeError>() {
        Kind::Range
    } else {
        panic!("neither a TypeError nor a RangeError: {error:?}");
    };
    let error: Error = error.unchecked_into();
    let message = String::from(error.message());
    assert_eq!(got, kind, "wrong kind of error for: {message}");
    assert!(!message.is_empty(), "an error without a message");
    error
}

/// The message of the error, which must be of `kind` and contain `part`.
#[track_caller]
pub(crate) fn throws<T: std::fmt::Debug>(result: Result<T, JsValue>, kind: Kind, part: &str) {
    let message = String::from(thrown(result, kind).message());
    assert!(message.contains(part), "{message:?} does not mention {part:?}");
}
