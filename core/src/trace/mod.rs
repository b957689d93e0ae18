//! Request traces, parsed into [`Request`]s for the replay engines.
//!
//! Four formats are read ([`Format`]; [`sniff`] tells a file's from its first bytes): Qwen
//! Bailian rows ([`parse_bailian_line`]), kv-cache-tester conversation documents
//! ([`document::Conversations`]), and the two JSONL formats parsed here, told apart per line
//! by their keys:
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
//! Keys of neither format are ignored; a key of the other format (`output_tokens` on a
//! Mooncake record, `input_length` beside `tokens`) is an error naming it, as is a key given
//! twice. Blank lines are skipped. Everything else that is not one of these shapes is an error
//! naming what is wrong, with the column where JSON went wrong; the caller adds the file and
//! line. Files arrive in chunks and are cut into lines by [`lines::Lines`]; [`TimeCheck`]
//! watches a file's timestamps for steps back in time.

mod bailian;
pub mod document;
mod format;
pub mod lines;

pub use bailian::parse_bailian_line;
pub use format::{Format, MixedFormats, SNIFF_BYTES, Sniffed, sniff};

use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt;

use crate::chain::DynamoHasher;
use crate::json::{Json, JsonError, Kind, Seen};
use crate::output::OutputTracker;

/// Lines longer than this are rejected rather than read into memory whole, by every front
/// end.
pub const MAX_LINE_BYTES: usize = 64 << 20;

/// One request of a trace, ready to replay.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Request {
    /// Arrival time in milliseconds, if the trace has one.
    pub timestamp: Option<u64>,
    /// Prompt tokens (F0's unit).
    pub prompt_tokens: u64,
    /// Block ids of the prompt, in order; block `j` covers
    /// `min(block_size, prompt_tokens - block_size * j)` tokens.
    pub prompt_ids: Vec<u64>,
    /// Tokens generated (Mooncake's `output_length`, the length of a token record's
    /// `output_tokens`); 0 when the trace does not say.
    pub output_tokens: u64,
    /// Ids of generated blocks, learned with the prompt's when the request completes.
    pub output_ids: Vec<u64>,
    /// The conversation the request belongs to, where the format says.
    pub session: Session,
}

/// Where a request sits among conversations, as far as its format says.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Session {
    /// The format does not say.
    #[default]
    Unknown,
    /// A conversation's key (a kv-cache-tester document's namespace).
    Conversation(u64),
    /// A Bailian chat: its id, and its parent's (`None` for the first turn of a conversation).
    /// The conversation is the root of the chain of parents, which only a reader of the whole
    /// trace can resolve.
    Chat {
        /// `chat_id`.
        id: u64,
        /// `parent_chat_id`, unless -1.
        parent: Option<u64>,
    },
}

impl Request {
    /// Tokens of prompt block `j`.
    pub fn block_tokens(&self, j: usize, block_size: usize) -> u64 {
        let start = (j as u64).saturating_mul(block_size as u64);
        self.prompt_tokens.saturating_sub(start).min(block_size as u64)
    }
}

/// Why a trace record could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TraceError {
    /// Not JSON of the expected shape: what was expected and found, and the 1-based column
    /// where reading stopped.
    Json {
        /// What is wrong.
        message: String,
        /// Where in the line, when known.
        column: Option<usize>,
    },
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
    /// A key of one format in a record of the other.
    MixedKeys {
        /// The key that does not belong.
        key: &'static str,
        /// The record's format, as the message names it.
        format: &'static str,
    },
    /// A line longer than [`MAX_LINE_BYTES`].
    LineTooLong,
    /// Something wrong in a document (kv-cache-tester), at a JSON path such as
    /// `requests[12].hash_ids`.
    Document {
        /// Where in the document.
        path: String,
        /// What is wrong.
        message: String,
    },
}

impl TraceError {
    fn message(message: &str) -> TraceError {
        TraceError::Json { message: message.into(), column: None }
    }

    /// The 1-based column the error is at, when known.
    pub fn column(&self) -> Option<usize> {
        match self {
            TraceError::Json { column, .. } => *column,
            _ => None,
        }
    }
}

impl From<JsonError> for TraceError {
    fn from(error: JsonError) -> Self {
        TraceError::Json { message: error.message, column: Some(error.offset + 1) }
    }
}

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Json { message, .. } => f.write_str(message),
            Self::BlockCount { ids, expected, block_size } => write!(
                f,
                "hash_ids has {ids} ids but input_length makes {expected} blocks of {block_size} \
                 tokens (is the block size right?)"
            ),
            Self::UnknownFormat => f.write_str(
                "neither a Mooncake record (\"hash_ids\") nor a token record (\"tokens\")",
            ),
            Self::MixedKeys { key, format } => {
                write!(f, "a {format} record has no \"{key}\" (it belongs to the other format)")
            }
            Self::LineTooLong => write!(f, "line longer than {MAX_LINE_BYTES} bytes"),
            Self::Document { path, message } => write!(f, "{path}: {message}"),
        }
    }
}

impl core::error::Error for TraceError {}

/// The fields of both formats; which are present decides the format.
#[derive(Default)]
struct Fields {
    timestamp: Option<u64>,
    input_length: Option<u64>,
    output_length: Option<u64>,
    hash_ids: Option<Vec<u64>>,
    tokens: Option<Vec<u32>>,
    output_tokens: Option<Vec<u32>>,
}

/// The keys both formats know, in the order [`Seen`] numbers them.
const KEYS: [&str; 6] =
    ["timestamp", "input_length", "output_length", "hash_ids", "tokens", "output_tokens"];

impl Fields {
    /// Reads one record's fields (other keys are skipped; a key given twice is an error).
    fn read(line: &[u8]) -> Result<Fields, TraceError> {
        let mut json = Json::new(line);
        if json.peek() != Kind::Object {
            return Err(TraceError::Json {
                message: "a record is a JSON object (`{...}`)".into(),
                column: Some(json.offset() + 1),
            });
        }
        let mut fields = Fields::default();
        let mut seen = Seen::default();
        json.object(|json, key| {
            let Some(index) = KEYS.iter().position(|&k| k.as_bytes() == key) else {
                return json.skip();
            };
            seen.first(index, key, json)?;
            if json.null() {
                return Ok(());
            }
            match index {
                0 => fields.timestamp = Some(json.u64()?),
                1 => fields.input_length = Some(json.u64()?),
                2 => fields.output_length = Some(json.u64()?),
                3 => json.u64_array(fields.hash_ids.insert(Vec::new()))?,
                4 => json.u32_array(fields.tokens.insert(Vec::new()))?,
                _ => json.u32_array(fields.output_tokens.insert(Vec::new()))?,
            }
            Ok(())
        })?;
        json.end()?;
        Ok(fields)
    }
}

/// Parses one line. `Ok(None)` for a blank line. `hasher` hashes token records (and its block
/// size applies to Mooncake records).
pub fn parse_line(line: &[u8], hasher: &DynamoHasher) -> Result<Option<Request>, TraceError> {
    if line.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    if line.len() > MAX_LINE_BYTES {
        return Err(TraceError::LineTooLong);
    }
    let parsed = Fields::read(line)?;
    let block_size = hasher.block_size();
    match (parsed.hash_ids, parsed.tokens) {
        (Some(ids), None) => {
            if parsed.output_tokens.is_some() {
                return Err(TraceError::MixedKeys { key: "output_tokens", format: "Mooncake" });
            }
            let Some(input) = parsed.input_length else {
                return Err(TraceError::message("missing field `input_length`"));
            };
            let expected = input.div_ceil(block_size as u64);
            if ids.len() as u64 != expected {
                return Err(TraceError::BlockCount { ids: ids.len(), expected, block_size });
            }
            Ok(Some(Request {
                timestamp: parsed.timestamp,
                prompt_tokens: input,
                prompt_ids: ids,
                output_tokens: parsed.output_length.unwrap_or(0),
                output_ids: Vec::new(),
                session: Session::Unknown,
            }))
        }
        (None, Some(tokens)) => {
            for (present, key) in [
                (parsed.input_length.is_some(), "input_length"),
                (parsed.output_length.is_some(), "output_length"),
            ] {
                if present {
                    return Err(TraceError::MixedKeys { key, format: "token" });
                }
            }
            let mut prompt_ids = Vec::new();
            hasher.sequence_hashes_into(&tokens, &mut prompt_ids);
            let output = parsed.output_tokens.unwrap_or_default();
            let output_ids = if output.is_empty() {
                Vec::new()
            } else {
                let mut tracker = OutputTracker::resume(
                    *hasher,
                    prompt_ids.last().copied(),
                    &tokens[prompt_ids.len() * block_size..],
                );
                tracker.observe(0, &output);
                tracker.take_recorded()
            };
            Ok(Some(Request {
                timestamp: parsed.timestamp,
                prompt_tokens: tokens.len() as u64,
                prompt_ids,
                output_tokens: output.len() as u64,
                output_ids,
                session: Session::Unknown,
            }))
        }
        (Some(_), Some(_)) => {
            Err(TraceError::message("a record has either \"hash_ids\" or \"tokens\", not both"))
        }
        (None, None) => Err(TraceError::UnknownFormat),
    }
}

/// A file's timestamps as its records go by: the latest, and the steps back in time (a record
/// stamped earlier than the one before it). Parts of a file checked apart (on several
/// threads) combine with [`then`](Self::then) into what one pass over the file would give.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TimeCheck {
    /// The first timestamp seen, and its line.
    first: Option<(u64, u64)>,
    /// The last timestamp seen.
    last: Option<u64>,
    /// The largest timestamp seen.
    pub latest: Option<u64>,
    /// Steps back in time.
    pub backwards: u64,
    /// The line of the first step back.
    pub first_backward_line: Option<u64>,
}

impl TimeCheck {
    /// Records the timestamp of the record on `line` (records without one are passed over).
    pub fn observe(&mut self, line: u64, timestamp: Option<u64>) {
        let Some(t) = timestamp else { return };
        if self.first.is_none() {
            self.first = Some((t, line));
        }
        if self.last.is_some_and(|last| t < last) {
            self.backwards += 1;
            self.first_backward_line.get_or_insert(line);
        }
        self.last = Some(t);
        self.latest = self.latest.max(Some(t));
    }

    /// This part of a file followed by `later`, the part right after it.
    pub fn then(self, later: TimeCheck) -> TimeCheck {
        let step_back = match (self.last, later.first) {
            (Some(last), Some((t, line))) if t < last => Some(line),
            _ => None,
        };
        TimeCheck {
            first: self.first.or(later.first),
            last: later.last.or(self.last),
            latest: self.latest.max(later.latest),
            backwards: self.backwards + later.backwards + u64::from(step_back.is_some()),
            first_backward_line: self
                .first_backward_line
                .or(step_back)
                .or(later.first_backward_line),
        }
    }

    /// The warning for the steps back, if there were any: their count and the first line.
    pub fn warning(&self) -> Option<String> {
        let line = self.first_backward_line?;
        let count = match self.backwards {
            1 => "1 record is".to_string(),
            n => alloc::format!("{n} records are"),
        };
        Some(alloc::format!(
            "{count} stamped earlier than the record before (first at line {line}); the reach \
             counts from the latest timestamp"
        ))
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
        assert_eq!(r.output_tokens, 5);
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
        assert_eq!((r.timestamp, r.output_tokens), (None, 3));
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

    /// A line of exactly 64 MiB (blanks after the record) is read; one byte more is too long.
    #[test]
    fn lines_up_to_64_mib_are_read() {
        let record = br#"{"input_length": 4, "hash_ids": [9]}"#;
        let mut line = record.to_vec();
        line.resize(64 << 20, b' ');
        let r = parse_line(&line, &hasher(4)).unwrap().unwrap();
        assert_eq!(r.prompt_ids, [9]);
        line.push(b' ');
        assert_eq!(parse_line(&line, &hasher(4)), Err(TraceError::LineTooLong));
    }

    #[test]
    fn errors_name_the_column_and_the_key_that_does_not_belong() {
        let h = hasher(4);
        let error = parse_line(br#"{"tokens": [1, 2, "x"]}"#, &h).unwrap_err();
        assert_eq!(error.column(), Some(19));
        assert_eq!(
            error.to_string(),
            "expected a token id (an integer in 0..=4294967295), found the string \"x\""
        );
        for (line, key, format) in [
            (&br#"{"tokens": [1], "input_length": 1}"#[..], "input_length", "token"),
            (br#"{"tokens": [1], "output_length": 1}"#, "output_length", "token"),
            (
                br#"{"input_length": 4, "hash_ids": [1], "output_tokens": [2]}"#,
                "output_tokens",
                "Mooncake",
            ),
        ] {
            let error = parse_line(line, &h).unwrap_err();
            assert_eq!(error, TraceError::MixedKeys { key, format });
            assert!(error.to_string().contains(&alloc::format!("\"{key}\"")), "{error}");
        }
        let error = parse_line(br#"{"tokens": [1], "tokens": [2]}"#, &h).unwrap_err();
        assert_eq!(error.to_string(), "duplicate key \"tokens\"");
        let error = parse_line(b"  [1, 2]", &h).unwrap_err();
        assert_eq!(
            (error.to_string().as_str(), error.column()),
            ("a record is a JSON object (`{...}`)", Some(3))
        );
    }

    #[test]
    fn time_checks_of_parts_combine_into_the_whole_files() {
        let stamps = [5, 7, 3, 9, 9, 2, 10, 4, 11];
        let check = |range: core::ops::Range<usize>| {
            let mut c = TimeCheck::default();
            for i in range {
                c.observe(i as u64 + 1, Some(stamps[i]));
            }
            c
        };
        let whole = check(0..stamps.len());
        assert_eq!(
            (whole.backwards, whole.first_backward_line, whole.latest),
            (3, Some(3), Some(11))
        );
        for cut in 0..=stamps.len() {
            assert_eq!(check(0..cut).then(check(cut..stamps.len())), whole, "cut at {cut}");
        }
        assert_eq!(
            whole.warning().unwrap(),
            "3 records are stamped earlier than the record before (first at line 3); the reach \
             counts from the latest timestamp"
        );
        assert_eq!(TimeCheck::default().warning(), None);
    }
}
