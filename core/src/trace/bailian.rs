//! Qwen Bailian records (`alibaba-edu/qwen-bailian-usagetraces-anon`, USENIX ATC'25): one JSON
//! object per line, `{"chat_id", "parent_chat_id", "timestamp", "input_length",
//! "output_length", "type", "turn", "hash_ids"}`.
//!
//! The timestamp is in seconds, a decimal number, read exactly into milliseconds. `hash_ids`
//! follow the Mooncake rule: one id per block of the trace's block size (16 tokens in the
//! published files), the last block usually partial. `parent_chat_id` is -1 for a conversation's
//! first turn; the chain of parents gives the conversation. Other keys are accepted and
//! skipped.

use alloc::vec::Vec;

use super::{Request, Session, TraceError};
use crate::json::{Json, Kind, Seen};

/// The keys read, in the order [`Seen`] numbers them.
const KEYS: [&str; 7] =
    ["chat_id", "parent_chat_id", "timestamp", "input_length", "output_length", "turn", "hash_ids"];

/// Parses one Bailian line (blocks of `block_size` tokens). `Ok(None)` for a blank line.
pub fn parse_bailian_line(line: &[u8], block_size: usize) -> Result<Option<Request>, TraceError> {
    if line.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    if line.len() > super::MAX_LINE_BYTES {
        return Err(TraceError::LineTooLong);
    }
    let mut json = Json::new(line);
    if json.peek() != Kind::Object {
        return Err(TraceError::Json {
            message: "a record is a JSON object (`{...}`)".into(),
            column: Some(json.offset() + 1),
        });
    }
    let (mut chat, mut parent, mut timestamp, mut input, mut output) = (None, None, None, None, 0);
    let mut ids: Option<Vec<u64>> = None;
    let mut seen = Seen::default();
    json.object(|json, key| {
        let Some(index) = KEYS.iter().position(|&k| k.as_bytes() == key) else {
            return json.skip();
        };
        seen.first(index, key, json)?;
        match index {
            0 => chat = Some(json.u64()?),
            // -1 (no parent) or a chat id.
            1 => parent = if json.minus_one() { None } else { Some(json.u64()?) },
            2 => timestamp = Some(json.decimal(3)?),
            3 => input = Some(json.u64()?),
            4 => output = json.u64()?,
            5 => {
                json.u64()?;
            }
            _ => json.u64_array(ids.insert(Vec::new()))?,
        }
        Ok(())
    })?;
    json.end()?;
    let missing = |key: &str| TraceError::Json {
        message: alloc::format!("missing field `{key}`"),
        column: None,
    };
    let ids = ids.ok_or_else(|| missing("hash_ids"))?;
    let input = input.ok_or_else(|| missing("input_length"))?;
    let expected = input.div_ceil(block_size as u64);
    if ids.len() as u64 != expected {
        return Err(TraceError::BlockCount { ids: ids.len(), expected, block_size });
    }
    Ok(Some(Request {
        timestamp,
        prompt_tokens: input,
        prompt_ids: ids,
        output_tokens: output,
        output_ids: Vec::new(),
        session: chat.map_or(Session::Unknown, |id| Session::Chat { id, parent }),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bailian_records_read_seconds_as_milliseconds_and_keep_their_chat() {
        let line = br#"{"chat_id": 159, "parent_chat_id": 55, "timestamp": 61.114, "input_length": 40, "output_length": 132, "type": "text", "turn": 2, "hash_ids": [1089, 1090, 1091]}"#;
        let r = parse_bailian_line(line, 16).unwrap().unwrap();
        assert_eq!(r.timestamp, Some(61_114));
        assert_eq!((r.prompt_tokens, r.output_tokens), (40, 132));
        assert_eq!(r.prompt_ids, [1089, 1090, 1091]);
        assert_eq!((0..3).map(|j| r.block_tokens(j, 16)).collect::<Vec<_>>(), [16, 16, 8]);
        assert_eq!(r.session, Session::Chat { id: 159, parent: Some(55) });
        let root = br#"{"chat_id": 0, "parent_chat_id": -1, "timestamp": 0.0, "input_length": 16, "hash_ids": [0], "extra": {"k": [1]}}"#;
        let r = parse_bailian_line(root, 16).unwrap().unwrap();
        assert_eq!((r.session, r.timestamp), (Session::Chat { id: 0, parent: None }, Some(0)));
    }

    /// A line of exactly 64 MiB (blanks after the record) is read; one byte more is too long.
    #[test]
    fn lines_up_to_64_mib_are_read() {
        let mut line = br#"{"input_length": 4, "hash_ids": [9]}"#.to_vec();
        line.resize(64 << 20, b' ');
        assert_eq!(parse_bailian_line(&line, 16).unwrap().unwrap().prompt_ids, [9]);
        line.push(b' ');
        assert_eq!(parse_bailian_line(&line, 16), Err(TraceError::LineTooLong));
    }

    /// A line that is not an object is refused at its first character (1-based column).
    #[test]
    fn a_record_that_is_not_an_object_is_refused_where_it_starts() {
        let error = TraceError::Json {
            message: "a record is a JSON object (`{...}`)".into(),
            column: Some(3),
        };
        assert_eq!(parse_bailian_line(b"  [1]", 16), Err(error));
    }

    #[test]
    fn bad_bailian_records_name_what_is_wrong() {
        for (line, mention) in [
            (&br#"{"chat_id": 1, "input_length": 20, "hash_ids": [1]}"#[..], "makes 2 blocks"),
            (br#"{"chat_id": 1, "parent_chat_id": -2, "input_length": 1, "hash_ids": [1]}"#, "-2"),
            (br#"{"timestamp": -1.5, "input_length": 1, "hash_ids": [1]}"#, "non-negative"),
            (br#"{"timestamp": "0", "input_length": 1, "hash_ids": [1]}"#, "the string \"0\""),
            (
                br#"{"input_length": 1, "hash_ids": [1], "turn": 1, "turn": 2}"#,
                "duplicate key \"turn\"",
            ),
            (br#"{"chat_id": 1, "input_length": 1}"#, "hash_ids"),
        ] {
            let error = parse_bailian_line(line, 16).unwrap_err();
            assert!(alloc::string::ToString::to_string(&error).contains(mention), "{error}");
        }
        assert_eq!(parse_bailian_line(b"   ", 16), Ok(None));
    }
}
