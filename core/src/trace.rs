//! Request traces: one JSON object per line, parsed into [`Request`]s for the replay engine.
//!
//! Two formats, told apart per line by their keys:
//!
//! - **Mooncake** (the FAST'25 Mooncake traces): `{"timestamp": ms, "input_length": n,
//!   "output_length": m, "hash_ids": [...]}`. The ids are given, one per block of the trace's
//!   block size, and the last block is usually partial: block `j` carries
//!   `min(block_size, input_length - block_size * j)` tokens. There are exactly
//!   `ceil(input_length / block_size)` ids.
//! - **Tokens**: `{"tokens": [...], "output_tokens": [...]}` with an optional `"timestamp"`.
//!   The prompt is hashed with the Dynamo chain; only complete blocks get ids. Output tokens,
//!   when given, continue the chain as a router's output tracking would, and their blocks are
//!   learned when the request completes.
//!
//! Other keys are ignored. Blank lines are skipped. Everything else that is not one of these
//! shapes is an error naming what is wrong; the caller adds the file and line.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use serde::Deserialize;

use crate::chain::DynamoHasher;
use crate::output::OutputTracker;

/// Lines longer than this are rejected rather than read into memory whole, by every front
/// end.
pub const MAX_LINE_BYTES: usize = 64 << 20;

/// One request of a trace, ready to replay.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// Arrival time in milliseconds, if the trace has one.
    pub timestamp: Option<u64>,
    /// Prompt tokens (F0's unit).
    pub prompt_tokens: u64,
    /// Block ids of the prompt, in order; block `j` covers
    /// `min(block_size, prompt_tokens - block_size * j)` tokens.
    pub prompt_ids: Vec<u64>,
    /// Ids of generated blocks, learned with the prompt's when the request completes.
    pub output_ids: Vec<u64>,
}

impl Request {
    /// Tokens of prompt block `j`.
    pub fn block_tokens(&self, j: usize, block_size: usize) -> u64 {
        let start = (j as u64).saturating_mul(block_size as u64);
        self.prompt_tokens.saturating_sub(start).min(block_size as u64)
    }
}

/// Why a trace line could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TraceError {
    /// Not JSON of the expected shape (serde's message, which names the field).
    Json(String),
    /// A Mooncake line whose id count does not match its input length.
    BlockCount {
        /// Ids given.
        ids: usize,
        /// Ids `ceil(input_length / block_size)` asks for.
        expected: u64,
        /// The block size used.
        block_size: usize,
    },
    /// Neither `hash_ids` nor `tokens`.
    UnknownFormat,
}

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Json(message) => f.write_str(message),
            Self::BlockCount { ids, expected, block_size } => write!(
                f,
                "hash_ids has {ids} ids but input_length makes {expected} blocks of {block_size} \
                 tokens (is the block size right?)"
            ),
            Self::UnknownFormat => f.write_str(
                "neither a Mooncake record (\"hash_ids\") nor a token record (\"tokens\")",
            ),
        }
    }
}

impl core::error::Error for TraceError {}

/// The keys of both formats; which are present decides the format.
#[derive(Deserialize)]
struct Line {
    timestamp: Option<u64>,
    input_length: Option<u64>,
    hash_ids: Option<Vec<u64>>,
    tokens: Option<Vec<u32>>,
    output_tokens: Option<Vec<u32>>,
}

/// Parses one line. `Ok(None)` for a blank line. `hasher` hashes token records (and its block
/// size applies to Mooncake records).
pub fn parse_line(line: &[u8], hasher: &DynamoHasher) -> Result<Option<Request>, TraceError> {
    if line.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    let parsed: Line =
        serde_json::from_slice(line).map_err(|e| TraceError::Json(alloc::format!("{e}")))?;
    let block_size = hasher.block_size();
    match (parsed.hash_ids, parsed.tokens) {
        (Some(ids), None) => {
            let Some(input) = parsed.input_length else {
                return Err(TraceError::Json("missing field `input_length`".into()));
            };
            let expected = input.div_ceil(block_size as u64);
            if ids.len() as u64 != expected {
                return Err(TraceError::BlockCount { ids: ids.len(), expected, block_size });
            }
            Ok(Some(Request {
                timestamp: parsed.timestamp,
                prompt_tokens: input,
                prompt_ids: ids,
                output_ids: Vec::new(),
            }))
        }
        (None, Some(tokens)) => {
            let mut prompt_ids = Vec::new();
            hasher.sequence_hashes_into(&tokens, &mut prompt_ids);
            let output_ids = match parsed.output_tokens {
                Some(output) if !output.is_empty() => {
                    let mut tracker = OutputTracker::resume(
                        *hasher,
                        prompt_ids.last().copied(),
                        &tokens[prompt_ids.len() * block_size..],
                    );
                    tracker.observe(0, &output);
                    tracker.take_recorded()
                }
                _ => Vec::new(),
            };
            Ok(Some(Request {
                timestamp: parsed.timestamp,
                prompt_tokens: tokens.len() as u64,
                prompt_ids,
                output_ids,
            }))
        }
        (Some(_), Some(_)) => {
            Err(TraceError::Json("a record has either \"hash_ids\" or \"tokens\", not both".into()))
        }
        (None, None) => Err(TraceError::UnknownFormat),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hasher(block_size: usize) -> DynamoHasher {
        DynamoHasher::new(block_size).unwrap()
    }

    #[test]
    fn mooncake_lines() {
        let line = br#"{"timestamp": 27, "input_length": 1100, "output_length": 5, "hash_ids": [1, 2, 3]}"#;
        let r = parse_line(line, &hasher(512)).unwrap().unwrap();
        assert_eq!(r.timestamp, Some(27));
        assert_eq!(r.prompt_ids, [1, 2, 3]);
        assert_eq!((0..3).map(|j| r.block_tokens(j, 512)).collect::<Vec<_>>(), [512, 512, 76]);
        assert_eq!(
            parse_line(line, &hasher(1024)),
            Err(TraceError::BlockCount { ids: 3, expected: 2, block_size: 1024 })
        );
    }

    #[test]
    fn token_lines_hash_prompt_and_output() {
        let h = hasher(4);
        let line = br#"{"tokens": [1, 2, 3, 4, 5, 6], "output_tokens": [7, 8, 9]}"#;
        let r = parse_line(line, &h).unwrap().unwrap();
        let whole = h.hash(&[1, 2, 3, 4, 5, 6, 7, 8, 9]).sequence;
        assert_eq!(r.prompt_tokens, 6);
        assert_eq!(r.prompt_ids, whole[..1]);
        assert_eq!(r.output_ids, whole[1..2]);
        assert_eq!(r.timestamp, None);
    }

    #[test]
    fn bad_lines_are_errors_and_blank_lines_are_skipped() {
        let h = hasher(4);
        assert_eq!(parse_line(b"  \t ", &h), Ok(None));
        assert_eq!(parse_line(br#"{"x": 1}"#, &h), Err(TraceError::UnknownFormat));
        for bad in [
            &b"not json"[..],
            br#"{"tokens": [1, -2]}"#,
            br#"{"tokens": [4294967296]}"#,
            br#"{"tokens": "abc"}"#,
            br#"{"hash_ids": [1]}"#,
            br#"{"input_length": 4, "hash_ids": [1], "tokens": [1]}"#,
            &[b'{', 0xff, b'}'],
        ] {
            assert!(parse_line(bad, &h).is_err(), "{}", String::from_utf8_lossy(bad));
        }
    }
}
