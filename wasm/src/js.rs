//! Reading JS values strictly and building plain JS objects.
//!
//! wasm-bindgen's own conversions are lenient in ways that would corrupt numbers silently: a
//! `&[u32]` parameter turns `-1` into 4294967295 and `1.5` into 1, a `u64` wraps a negative
//! `BigInt`. Everything here checks instead, and says which element or option is wrong.

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt::Display;

use js_sys::{Array, JsString, Object, RangeError, Reflect, TypeError, Uint8Array};
#[cfg(feature = "primitives")]
use js_sys::{BigUint64Array, Uint32Array};
use wasm_bindgen::JsCast;
use wasm_bindgen::prelude::*;

use kvreuse_core::names::Quoted;

/// A JS `TypeError`.
pub(crate) fn type_error(message: impl Display) -> JsValue {
    TypeError::new(&message.to_string()).into()
}

/// A JS `RangeError`.
pub(crate) fn range_error(message: impl Display) -> JsValue {
    RangeError::new(&message.to_string()).into()
}

/// The largest integer a JS number holds exactly.
const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// A count as a JS number, or a `RangeError` if a number cannot hold it exactly.
pub(crate) fn count(value: u64, what: &str) -> Result<JsValue, JsValue> {
    if value > MAX_SAFE_INTEGER {
        return Err(range_error(format_args!(
            "{what} is {value}, beyond the integers a JS number holds exactly"
        )));
    }
    Ok(JsValue::from_f64(value as f64))
}

/// Sets `key` on a plain object. Cannot fail on an object this crate created.
pub(crate) fn set(object: &Object, key: &str, value: impl Into<JsValue>) {
    set_value(object, key, value.into());
}

/// The one copy of [`set`]'s work: inlined, it would be repeated at each of the results'
/// fifty-odd fields.
#[inline(never)]
fn set_value(object: &Object, key: &str, value: JsValue) {
    let _ = Reflect::set(object, &JsValue::from_str(key), &value);
}

/// A number as JS writes it. Rust's float formatting would add kilobytes to the module for
/// error messages alone.
pub(crate) fn number(n: f64) -> String {
    js_sys::Number::from(n).to_string_with_radix(10).map(String::from).unwrap_or_default()
}

/// Describes a value for an error message, without dumping large contents.
fn describe(value: &JsValue) -> String {
    if value.is_undefined() {
        "undefined".into()
    } else if value.is_null() {
        "null".into()
    } else if let Some(s) = value.as_string() {
        format!("the string {}", Quoted(&s))
    } else if value.is_bigint() {
        format!(
            "{}n",
            String::from(
                js_sys::BigInt::unchecked_from_js_ref(value).to_string(10).unwrap_or_default()
            )
        )
    } else if let Some(n) = value.as_f64() {
        number(n)
    } else if Array::is_array(value) {
        "an array".into()
    } else if value.is_function() {
        "a function".into()
    } else {
        let name = value
            .dyn_ref::<Object>()
            .map(|o| String::from(o.constructor().name()))
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| "Object".into());
        format!("a {name}")
    }
}

/// A non-negative integer from a JS number (a `TypeError` for anything else).
pub(crate) fn integer(value: &JsValue, what: &str) -> Result<usize, JsValue> {
    let Some(n) = value.as_f64() else {
        return Err(type_error(format_args!("{what} must be a number, not {}", describe(value))));
    };
    if n % 1.0 != 0.0 || !n.is_finite() || n < 0.0 {
        return Err(range_error(format_args!(
            "{what} must be a non-negative integer, not {}",
            number(n)
        )));
    }
    if n > usize::MAX as f64 {
        return Err(range_error(format_args!("{what} is too large: {}", number(n))));
    }
    Ok(n as usize)
}

/// A non-negative integer from a JS number, as a `u64` (`integer` is bounded by wasm32's
/// `usize`); beyond 2^53 a number is not exact, which the setting's own check refuses.
pub(crate) fn whole_number(value: &JsValue, what: &str) -> Result<u64, JsValue> {
    let Some(n) = value.as_f64() else {
        return Err(type_error(format_args!("{what} must be a number, not {}", describe(value))));
    };
    if n % 1.0 != 0.0 || !(0.0..18_446_744_073_709_551_616.0).contains(&n) {
        return Err(range_error(format_args!(
            "{what} must be a non-negative integer below 2^64, not {}",
            number(n)
        )));
    }
    Ok(n as u64)
}

/// One id: a `BigInt` in `0..2^64`.
#[cfg(feature = "primitives")]
pub(crate) fn id(value: &JsValue, what: &str) -> Result<u64, JsValue> {
    if !value.is_bigint() {
        return Err(type_error(format_args!(
            "{what} must be a BigInt (ids are 64-bit), not {}",
            describe(value)
        )));
    }
    u64::try_from(value.clone())
        .map_err(|_| range_error(format_args!("{what} is {}, outside 0..2^64", describe(value))))
}

/// Ids from a `BigUint64Array` or an array of `BigInt`s.
#[cfg(feature = "primitives")]
pub(crate) fn ids(value: &JsValue, what: &str) -> Result<Vec<u64>, JsValue> {
    if let Some(array) = value.dyn_ref::<BigUint64Array>() {
        return Ok(array.to_vec());
    }
    if let Some(array) = value.dyn_ref::<Array>() {
        return array.iter().enumerate().map(|(i, v)| id(&v, &format!("{what}[{i}]"))).collect();
    }
    Err(type_error(format_args!(
        "{what} must be a BigUint64Array or an array of BigInts, not {}",
        describe(value)
    )))
}

/// Ids as a `BigUint64Array`.
#[cfg(feature = "primitives")]
pub(crate) fn id_array(ids: &[u64]) -> BigUint64Array {
    let array = BigUint64Array::new_with_length(ids.len() as u32);
    array.copy_from(ids);
    array
}

/// Token ids from a `Uint32Array` or an array of integers in `0..=u32::MAX`.
#[cfg(feature = "primitives")]
pub(crate) fn tokens(value: &JsValue, what: &str) -> Result<Vec<u32>, JsValue> {
    if let Some(array) = value.dyn_ref::<Uint32Array>() {
        return Ok(array.to_vec());
    }
    if let Some(array) = value.dyn_ref::<Array>() {
        return array
            .iter()
            .enumerate()
            .map(|(i, v)| match v.as_f64() {
                Some(n) if n % 1.0 == 0.0 && (0.0..=f64::from(u32::MAX)).contains(&n) => {
                    Ok(n as u32)
                }
                Some(n) => Err(range_error(format_args!(
                    "{what}[{i}] is {}, not a token id (an integer in 0..=4294967295)",
                    number(n)
                ))),
                None => Err(type_error(format_args!(
                    "{what}[{i}] is {}, not a token id (an integer in 0..=4294967295)",
                    describe(&v)
                ))),
            })
            .collect();
    }
    Err(type_error(format_args!(
        "{what} must be a Uint32Array or an array of integers, not {}",
        describe(value)
    )))
}

#[wasm_bindgen]
extern "C" {
    /// The Encoding API's `TextEncoder` (browsers, workers, Node.js).
    type TextEncoder;
    #[wasm_bindgen(constructor)]
    fn new() -> TextEncoder;
    #[wasm_bindgen(method)]
    fn encode(this: &TextEncoder, text: &JsString) -> Uint8Array;
}

/// Bytes of text from a string (UTF-8) or a `Uint8Array`.
pub(crate) fn text_bytes(value: &JsValue, what: &str) -> Result<Vec<u8>, JsValue> {
    if let Some(text) = value.dyn_ref::<JsString>() {
        // One native encode and one copy: wasm-bindgen's own string passing walks a large
        // string character by character in JS first.
        return Ok(TextEncoder::new().encode(text).to_vec());
    }
    if let Some(bytes) = value.dyn_ref::<Uint8Array>() {
        return Ok(bytes.to_vec());
    }
    Err(type_error(format_args!(
        "{what} must be a string or a Uint8Array, not {}",
        describe(value)
    )))
}

/// A list given as a comma-separated string or an array of strings and numbers.
pub(crate) fn list(value: &JsValue, what: &str) -> Result<Vec<JsValue>, JsValue> {
    if let Some(text) = value.as_string() {
        return Ok(text.split(',').map(JsValue::from_str).collect());
    }
    if let Some(array) = value.dyn_ref::<Array>() {
        return Ok(array.iter().collect());
    }
    Err(type_error(format_args!(
        "{what} must be a comma-separated string or an array, not {}",
        describe(value)
    )))
}

/// An options object whose keys are checked: an unknown key (a typo) is an error rather than
/// an option silently not taken.
pub(crate) struct Options {
    object: Option<Object>,
    what: &'static str,
}

impl Options {
    /// Reads `value` (an object, or `undefined`/`null` for no options) whose keys must be
    /// among `known`.
    pub(crate) fn new(
        value: &JsValue,
        what: &'static str,
        known: &[&str],
    ) -> Result<Options, JsValue> {
        if value.is_undefined() || value.is_null() {
            return Ok(Options { object: None, what });
        }
        let object = match value.dyn_ref::<Object>() {
            Some(o) if !Array::is_array(value) && !value.is_function() => o.clone(),
            _ => {
                return Err(type_error(format_args!(
                    "{what} must be an object, not {}",
                    describe(value)
                )));
            }
        };
        for key in Object::keys(&object).iter() {
            let key = key.as_string().unwrap_or_default();
            if !known.contains(&key.as_str()) {
                return Err(type_error(format_args!(
                    "unknown option {} in {what} (expected {})",
                    Quoted(&key),
                    known.join(", ")
                )));
            }
        }
        Ok(Options { object: Some(object), what })
    }

    /// The value of `key`, or `None` when it is missing or `undefined`.
    pub(crate) fn get(&self, key: &str) -> Option<JsValue> {
        let object = self.object.as_ref()?;
        Reflect::get(object, &JsValue::from_str(key)).ok().filter(|v| !v.is_undefined())
    }

    fn name(&self, key: &str) -> String {
        format!("{}.{key}", self.what)
    }

    pub(crate) fn integer(&self, key: &str) -> Result<Option<usize>, JsValue> {
        self.get(key).map(|v| integer(&v, &self.name(key))).transpose()
    }

    pub(crate) fn number(&self, key: &str) -> Result<Option<f64>, JsValue> {
        self.get(key)
            .map(|v| {
                v.as_f64().ok_or_else(|| {
                    type_error(format_args!(
                        "{} must be a number, not {}",
                        self.name(key),
                        describe(&v)
                    ))
                })
            })
            .transpose()
    }

    pub(crate) fn string(&self, key: &str) -> Result<Option<String>, JsValue> {
        self.get(key)
            .filter(|v| !v.is_null())
            .map(|v| {
                v.as_string().ok_or_else(|| {
                    type_error(format_args!(
                        "{} must be a string, not {}",
                        self.name(key),
                        describe(&v)
                    ))
                })
            })
            .transpose()
    }

    pub(crate) fn boolean(&self, key: &str) -> Result<Option<bool>, JsValue> {
        self.get(key)
            .map(|v| {
                v.as_bool().ok_or_else(|| {
                    type_error(format_args!(
                        "{} must be true or false, not {}",
                        self.name(key),
                        describe(&v)
                    ))
                })
            })
            .transpose()
    }

    pub(crate) fn list(&self, key: &str) -> Result<Option<Vec<JsValue>>, JsValue> {
        self.get(key).map(|v| list(&v, &self.name(key))).transpose()
    }
}
