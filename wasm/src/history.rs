//! The router's history for JS: a bounded FIFO set of block ids.

use alloc::format;
use alloc::vec::Vec;
use js_sys::Object;
use kvreuse_core::history::History as CoreHistory;
use kvreuse_core::replay::Capacity;
use wasm_bindgen::prelude::*;

use crate::js::{self, range_error, type_error};
use kvreuse_core::names::Quoted;

#[wasm_bindgen(typescript_custom_section)]
const TYPES: &str = r#"
/** What one `History.insertAll` did. */
export interface Inserted {
  /** Ids that were not present and now are. */
  new: number;
  /** Ids evicted, oldest first, to make room. */
  evicted: number;
}
"#;

#[wasm_bindgen]
extern "C" {
    /// `crypto.getRandomValues`, present in browsers, workers and Node.js 19+.
    #[wasm_bindgen(js_namespace = crypto, js_name = getRandomValues, catch)]
    fn get_random_values(bytes: &mut [u8]) -> Result<JsValue, JsValue>;
}

/// A seed for the history's index that input cannot predict.
fn random_seed() -> u64 {
    let mut bytes = [0u8; 8];
    if get_random_values(&mut bytes).is_err() {
        // No Web Crypto: Math.random still varies per run, which is what flooding needs.
        let half = |r: f64| (r * 4_294_967_296.0) as u64;
        return half(js_sys::Math::random()) << 32 | half(js_sys::Math::random());
    }
    u64::from_le_bytes(bytes)
}

/// A bounded history of block ids with first-in, first-out eviction, as a router keeps it:
/// an id already present is skipped (it takes no room and keeps its age), a new id evicts the
/// oldest when the history is full.
#[wasm_bindgen]
#[derive(Debug)]
pub struct History {
    inner: CoreHistory,
}

#[wasm_bindgen]
impl History {
    /// A history of `capacity` ids: a number of blocks, or a string as `kvreuse replay`
    /// takes it (`"10k"`, `"1M"`, or a byte budget such as `"256KiB"`, converted to the most
    /// ids whose heap fits it here). `seed` (a `BigInt`) keys the index; by default a random
    /// one, which keeps crafted ids from crowding it.
    ///
    /// Throws a `RangeError` for a capacity of zero, above 2^27 ids, or `"inf"`, and a
    /// `TypeError` for an unreadable one.
    #[wasm_bindgen(constructor)]
    pub fn new(
        #[wasm_bindgen(unchecked_param_type = "number | string")] capacity: &JsValue,
        seed: Option<js_sys::BigInt>,
    ) -> Result<History, JsValue> {
        let seed = match seed {
            Some(seed) => js::id(&seed.into(), "seed")?,
            None => random_seed(),
        };
        let built = if let Some(text) = capacity.as_string() {
            match Capacity::parse(&text) {
                Ok(Capacity::Blocks(blocks)) => CoreHistory::with_capacity(blocks, seed),
                Ok(Capacity::Bytes(bytes)) => CoreHistory::with_byte_budget(bytes, seed),
                Ok(Capacity::Infinite) => {
                    return Err(range_error("a history needs a finite capacity, not inf"));
                }
                Err(e) => {
                    let error = format!("capacity {}: {e}", Quoted(&text));
                    return Err(match e {
                        kvreuse_core::replay::CapacityError::Unrecognized => type_error(error),
                        _ => range_error(error),
                    });
                }
            }
        } else if capacity.as_f64().is_some() {
            CoreHistory::with_capacity(js::integer(capacity, "capacity")?, seed)
        } else {
            return Err(type_error("capacity must be a number of blocks or a string like \"10k\""));
        };
        built.map(|inner| History { inner }).map_err(range_error)
    }

    /// Inserts `ids` (a `BigUint64Array` or an array of `BigInt`s) in order.
    #[wasm_bindgen(js_name = insertAll, unchecked_return_type = "Inserted")]
    pub fn insert_all(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "BigUint64Array | bigint[]")] ids: &JsValue,
    ) -> Result<JsValue, JsValue> {
        let ids = js::ids(ids, "ids")?;
        let done = self.inner.insert_all(&ids);
        let out = Object::new();
        js::set(&out, "new", done.new as f64);
        js::set(&out, "evicted", done.evicted as f64);
        Ok(out.into())
    }

    /// How many leading `ids` are all present: the prefix a request would find computed.
    #[wasm_bindgen(js_name = seenPrefixLen)]
    pub fn seen_prefix_len(
        &self,
        #[wasm_bindgen(unchecked_param_type = "BigUint64Array | bigint[]")] ids: &JsValue,
    ) -> Result<usize, JsValue> {
        Ok(self.inner.seen_prefix_len(&js::ids(ids, "ids")?))
    }

    /// Whether `id` (a `BigInt`) is present.
    pub fn contains(
        &self,
        #[wasm_bindgen(unchecked_param_type = "bigint")] id: &JsValue,
    ) -> Result<bool, JsValue> {
        Ok(self.inner.contains(js::id(id, "id")?))
    }

    /// Ids present.
    #[wasm_bindgen(getter)]
    pub fn len(&self) -> usize {
        self.inner.len()
    }

    /// Whether no id is present.
    #[wasm_bindgen(getter, js_name = isEmpty)]
    pub fn is_empty(&self) -> bool {
        self.inner.is_empty()
    }

    /// Ids the history holds before it evicts.
    #[wasm_bindgen(getter)]
    pub fn capacity(&self) -> usize {
        self.inner.capacity()
    }

    /// Whether the next new id evicts the oldest.
    #[wasm_bindgen(getter, js_name = isFull)]
    pub fn is_full(&self) -> bool {
        self.inner.is_full()
    }

    /// The heap this history takes here, exactly. On wasm32 its fixed part is smaller than a
    /// 64-bit router's; `Replay` results report the router's figure.
    #[wasm_bindgen(getter, js_name = heapBytes)]
    pub fn heap_bytes(&self) -> usize {
        self.inner.heap_bytes()
    }

    /// The ids present, oldest (next to be evicted) first.
    #[wasm_bindgen(js_name = oldestFirst)]
    pub fn oldest_first(&self) -> js_sys::BigUint64Array {
        js::id_array(&self.inner.oldest_first().collect::<Vec<_>>())
    }

    /// Forgets every id; keeps the capacity.
    pub fn clear(&mut self) {
        self.inner.clear();
    }
}
