//! The rest of the funnel's evidence for one request: what the router saw when it chose a
//! worker ([`Route`]: F2 and F3) and what the worker says its lookup found and it reused
//! ([`WorkerReport`]: F4 and F5), and the parsers of the reports routers actually receive.
//!
//! | source | shape | read as |
//! |---|---|---|
//! | NVIDIA Dynamo, `engine_data` of the final chunk | `{"kv_cache_hit": {"complete", "prompt_tokens", "gpu_hit_tokens", "cpu_hit_tokens", "cpu_lookup_tokens"}}` | as it is; `complete: false` or no `kv_cache_hit` is no report |
//! | OpenAI-compatible `usage` (vLLM, SGLang) | `{"prompt_tokens", "prompt_tokens_details": {"cached_tokens"}}` | GPU hits = `cached_tokens`; no details is no report |
//! | SGLang `meta_info` | `{"prompt_tokens", "cached_tokens"}` | GPU hits = `cached_tokens`; no `cached_tokens` is no report |
//!
//! F4 (found by the lookup) = GPU hits + tokens looked up in an external tier; F5 (reused) =
//! GPU hits + external hits, as Dynamo's `kv_cache_hit` defines them. Other keys are skipped;
//! a key given twice, a wrong type or a missing count is a [`ReportError`], so nothing is
//! counted from a report that cannot be read.

use alloc::string::String;
use core::fmt;

use crate::json::{Json, JsonError, Seen};

/// What the router saw when it chose a worker, in prompt tokens. A field added later has a
/// meaningful default, so `Route { best_cached_tokens: 1, selected_cached_tokens: 1,
/// ..Default::default() }` keeps compiling.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Route {
    /// Cached on the best eligible worker, by the router's index (F2).
    pub best_cached_tokens: u64,
    /// Cached on the worker it selected, by the router's index (F3).
    pub selected_cached_tokens: u64,
}

/// What the worker reports at the end of the request, in prompt tokens.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WorkerReport {
    /// The prompt as the worker counted it (must equal the router's).
    pub prompt_tokens: u64,
    /// Found and reused in the worker's GPU prefix cache.
    pub gpu_hit_tokens: u64,
    /// Reused from an external tier (CPU, disk, a connector).
    pub cpu_hit_tokens: u64,
    /// Looked up in an external tier (found there, whether or not reused).
    pub cpu_lookup_tokens: u64,
}

impl WorkerReport {
    /// F4: tokens the worker's lookup found (GPU hits and external lookups).
    pub fn found_tokens(&self) -> u64 {
        self.gpu_hit_tokens.saturating_add(self.cpu_lookup_tokens)
    }

    /// F5: tokens reused (GPU and external hits).
    pub fn reused_tokens(&self) -> u64 {
        self.gpu_hit_tokens.saturating_add(self.cpu_hit_tokens)
    }

    /// Reads Dynamo's `engine_data` object. `Ok(None)` when it carries no complete report.
    pub fn from_dynamo_engine_data(json: &[u8]) -> Result<Option<WorkerReport>, ReportError> {
        let mut reader = Json::new(json);
        let mut report = None;
        let mut seen = Seen::default();
        reader
            .object(|reader, key| match key {
                b"kv_cache_hit" => {
                    seen.first(0, key, reader)?;
                    report = kv_cache_hit(reader)?;
                    Ok(())
                }
                _ => reader.skip(),
            })
            .and_then(|()| reader.end())
            .map_err(ReportError::from)?;
        Ok(report)
    }

    /// Reads an OpenAI-compatible `usage` object. `Ok(None)` when it has no
    /// `prompt_tokens_details.cached_tokens` (the server does not report cache hits).
    pub fn from_openai_usage(json: &[u8]) -> Result<Option<WorkerReport>, ReportError> {
        let mut reader = Json::new(json);
        let (mut prompt, mut cached) = (None, None);
        let mut seen = Seen::default();
        reader
            .object(|reader, key| match key {
                b"prompt_tokens" => {
                    seen.first(0, key, reader)?;
                    prompt = Some(reader.u64()?);
                    Ok(())
                }
                b"prompt_tokens_details" => {
                    seen.first(1, key, reader)?;
                    if reader.null() {
                        return Ok(());
                    }
                    let mut inner = Seen::default();
                    reader.object(|reader, key| match key {
                        b"cached_tokens" => {
                            inner.first(0, key, reader)?;
                            cached = if reader.null() { None } else { Some(reader.u64()?) };
                            Ok(())
                        }
                        _ => reader.skip(),
                    })
                }
                _ => reader.skip(),
            })
            .and_then(|()| reader.end())
            .map_err(ReportError::from)?;
        Self::gpu_hits(prompt, cached)
    }

    /// The report of a server that counts only GPU prefix hits (`cached`, `None` when it did
    /// not say, which is no report); a report's prompt length is required.
    fn gpu_hits(
        prompt: Option<u64>,
        cached: Option<u64>,
    ) -> Result<Option<WorkerReport>, ReportError> {
        let Some(cached) = cached else { return Ok(None) };
        let prompt = prompt.ok_or(ReportError::Missing("prompt_tokens"))?;
        Ok(Some(WorkerReport {
            prompt_tokens: prompt,
            gpu_hit_tokens: cached,
            ..WorkerReport::default()
        }))
    }

    /// Reads SGLang's `meta_info` object. `Ok(None)` when it has no `cached_tokens`.
    pub fn from_sglang_meta_info(json: &[u8]) -> Result<Option<WorkerReport>, ReportError> {
        let mut reader = Json::new(json);
        let (mut prompt, mut cached) = (None, None);
        let mut seen = Seen::default();
        reader
            .object(|reader, key| match key {
                b"prompt_tokens" => {
                    seen.first(0, key, reader)?;
                    prompt = Some(reader.u64()?);
                    Ok(())
                }
                b"cached_tokens" => {
                    seen.first(1, key, reader)?;
                    cached = Some(reader.u64()?);
                    Ok(())
                }
                _ => reader.skip(),
            })
            .and_then(|()| reader.end())
            .map_err(ReportError::from)?;
        Self::gpu_hits(prompt, cached)
    }
}

/// Reads a `kv_cache_hit` object: `None` unless `complete` is true.
fn kv_cache_hit(reader: &mut Json<'_>) -> Result<Option<WorkerReport>, JsonError> {
    if reader.null() {
        return Ok(None);
    }
    const KEYS: [&str; 5] =
        ["complete", "prompt_tokens", "gpu_hit_tokens", "cpu_hit_tokens", "cpu_lookup_tokens"];
    let mut values: [Option<u64>; 5] = [None; 5];
    let mut complete = None;
    let mut seen = Seen::default();
    let at = reader.offset();
    reader.object(|reader, key| {
        let Some(index) = KEYS.iter().position(|k| k.as_bytes() == key) else {
            return reader.skip();
        };
        seen.first(index, key, reader)?;
        if index == 0 {
            complete = Some(reader.bool()?);
        } else {
            values[index] = Some(reader.u64()?);
        }
        Ok(())
    })?;
    match complete {
        Some(true) => {}
        Some(false) => return Ok(None),
        None => {
            return Err(JsonError {
                message: "kv_cache_hit without `complete`".into(),
                offset: at,
            });
        }
    }
    let mut counts = [0u64; 4];
    for (k, count) in counts.iter_mut().enumerate() {
        *count = values[k + 1].ok_or_else(|| JsonError {
            message: alloc::format!("kv_cache_hit without `{}`", KEYS[k + 1]),
            offset: at,
        })?;
    }
    let [prompt_tokens, gpu_hit_tokens, cpu_hit_tokens, cpu_lookup_tokens] = counts;
    Ok(Some(WorkerReport { prompt_tokens, gpu_hit_tokens, cpu_hit_tokens, cpu_lookup_tokens }))
}

/// Why route or worker evidence was not counted.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReportError {
    /// The worker counted a different prompt than the router.
    PromptMismatch {
        /// The router's prompt tokens.
        prompt_tokens: u64,
        /// The report's.
        reported: u64,
    },
    /// A second route or report for one request.
    Duplicate(&'static str),
    /// A report that is not JSON of the expected shape: what is wrong, and the byte offset.
    Malformed {
        /// What is wrong.
        message: String,
        /// Where reading stopped.
        offset: usize,
    },
    /// A report without a count it must have.
    Missing(&'static str),
}

impl From<JsonError> for ReportError {
    fn from(error: JsonError) -> ReportError {
        ReportError::Malformed { message: error.message, offset: error.offset }
    }
}

impl fmt::Display for ReportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReportError::PromptMismatch { prompt_tokens, reported } => write!(
                f,
                "the worker reports a prompt of {reported} tokens, the router routed {prompt_tokens}"
            ),
            ReportError::Duplicate(what) => write!(f, "a second {what} for one request"),
            ReportError::Malformed { message, offset } => {
                write!(f, "unreadable report at byte {offset}: {message}")
            }
            ReportError::Missing(key) => write!(f, "the report has no `{key}`"),
        }
    }
}

impl core::error::Error for ReportError {}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;

    #[test]
    fn dynamo_reports_as_backends_send_them() {
        // The vLLM handler's report, with other engine data beside it.
        let vllm = br#"{"disaggregated_params": null, "kv_cache_hit": {"complete": true, "prompt_tokens": 1000, "gpu_hit_tokens": 256, "cpu_hit_tokens": 64, "cpu_lookup_tokens": 96}}"#;
        let report = WorkerReport::from_dynamo_engine_data(vllm).unwrap().unwrap();
        assert_eq!(
            report,
            WorkerReport {
                prompt_tokens: 1000,
                gpu_hit_tokens: 256,
                cpu_hit_tokens: 64,
                cpu_lookup_tokens: 96
            }
        );
        assert_eq!((report.found_tokens(), report.reused_tokens()), (352, 320));
        // Upstream vLLM without the counters says it has no report.
        assert_eq!(
            WorkerReport::from_dynamo_engine_data(br#"{"kv_cache_hit": {"complete": false}}"#),
            Ok(None)
        );
        assert_eq!(WorkerReport::from_dynamo_engine_data(b"{}"), Ok(None));
        assert_eq!(WorkerReport::from_dynamo_engine_data(br#"{"kv_cache_hit": null}"#), Ok(None));
    }

    #[test]
    fn openai_usage_and_sglang_meta_info() {
        let usage = br#"{"prompt_tokens": 812, "total_tokens": 830, "completion_tokens": 18, "prompt_tokens_details": {"cached_tokens": 512}}"#;
        let want =
            WorkerReport { prompt_tokens: 812, gpu_hit_tokens: 512, ..WorkerReport::default() };
        assert_eq!(WorkerReport::from_openai_usage(usage), Ok(Some(want)));
        let without = br#"{"prompt_tokens": 812, "total_tokens": 830, "completion_tokens": 18, "prompt_tokens_details": null}"#;
        assert_eq!(WorkerReport::from_openai_usage(without), Ok(None));
        // A server that reports no cache hits need not give the prompt's length either.
        for nothing in [&br#"{"prompt_tokens_details": null}"#[..], br#"{"completion_tokens": 3}"#]
        {
            assert_eq!(WorkerReport::from_openai_usage(nothing), Ok(None));
            assert_eq!(WorkerReport::from_sglang_meta_info(nothing), Ok(None));
        }
        let meta = br#"{"id": "7f1e", "finish_reason": {"type": "stop"}, "prompt_tokens": 812, "completion_tokens": 18, "cached_tokens": 512, "e2e_latency": 0.21}"#;
        assert_eq!(WorkerReport::from_sglang_meta_info(meta), Ok(Some(want)));
    }

    #[test]
    fn malformed_reports_are_errors() {
        for (text, parse, message) in [
            (
                &br#"{"kv_cache_hit": {"complete": true, "prompt_tokens": 10}}"#[..],
                0,
                "without `gpu_hit_tokens`",
            ),
            (br#"{"kv_cache_hit": {"prompt_tokens": 10}}"#, 0, "without `complete`"),
            (br#"{"kv_cache_hit": {"complete": "yes"}}"#, 0, "expected true or false"),
            (br#"{"kv_cache_hit": {"complete": true, "prompt_tokens": -1}}"#, 0, "-1"),
            (br#"{"kv_cache_hit": null, "kv_cache_hit": null}"#, 0, "duplicate key"),
            (br#"["kv_cache_hit"]"#, 0, "expected an object"),
            (br#"{"prompt_tokens_details": {"cached_tokens": 5}}"#, 1, "no `prompt_tokens`"),
            (
                br#"{"prompt_tokens": 5, "prompt_tokens_details": {"cached_tokens": "5"}}"#,
                1,
                "expected",
            ),
            (br#"{"prompt_tokens": 1.5, "cached_tokens": 1}"#, 2, "1.5"),
            (br#"{"prompt_tokens": 5, "cached_tokens": 1} x"#, 2, "trailing"),
        ] {
            let result = match parse {
                0 => WorkerReport::from_dynamo_engine_data(text),
                1 => WorkerReport::from_openai_usage(text),
                _ => WorkerReport::from_sglang_meta_info(text),
            };
            let error = result.unwrap_err().to_string();
            assert!(error.contains(message), "{error:?} should mention {message:?}");
        }
    }
}
