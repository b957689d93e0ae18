//! The trace formats, by name and by their first bytes.
//!
//! | format | source | licence | block size | time | ids |
//! |---|---|---|---|---|---|
//! | `mooncake` | kvcache-ai/Mooncake FAST'25 traces | Apache-2.0 | 512 | `timestamp`, ms | global; last block partial |
//! | `bailian` | alibaba-edu/qwen-bailian-usagetraces-anon (ATC'25) | Apache-2.0 | 16 | `timestamp`, s (float) | global; last block partial |
//! | `kvcache-tester` | callanjfox/kv-cache-tester (Claude Code sessions) | Apache-2.0 | the document's `block_size` (64) | `t`, s from the conversation's start | per document (`hash_id_scope` `local`), or shared (`global`); complete blocks only |
//! | `tokens` | kvreuse's own | | the hashing block size (512) | `timestamp`, ms | hashed from the tokens (Dynamo chain) |
//!
//! A file's format is told by its first record ([`sniff`]): a top-level object with
//! `requests` is a kv-cache-tester document, a JSONL record with `chat_id` and `turn` a Bailian
//! record, one with `hash_ids` a Mooncake record, one with `tokens` a token record.

use core::fmt;

use crate::json::{Json, Kind};
use crate::names::UnknownName;

/// A trace format. Each one's source, block size, clock and ids are tabled in the README
/// ("Trace formats") and above, in this module's source.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Format {
    /// Mooncake's JSONL records.
    Mooncake,
    /// Qwen Bailian's JSONL records.
    Bailian,
    /// kv-cache-tester's conversation documents.
    KvcacheTester,
    /// JSONL records of token ids.
    Tokens,
}

impl Format {
    /// Every format, in the documented order.
    pub const ALL: [Format; 4] =
        [Format::Mooncake, Format::Bailian, Format::KvcacheTester, Format::Tokens];

    /// The formats' names, in [`ALL`](Self::ALL)'s order.
    pub const NAMES: [&'static str; 4] = [
        Format::ALL[0].name(),
        Format::ALL[1].name(),
        Format::ALL[2].name(),
        Format::ALL[3].name(),
    ];

    /// The format's name as the command line and JSON spell it.
    pub const fn name(self) -> &'static str {
        match self {
            Format::Mooncake => "mooncake",
            Format::Bailian => "bailian",
            Format::KvcacheTester => "kvcache-tester",
            Format::Tokens => "tokens",
        }
    }

    /// The format `text` names (surrounding blanks ignored), or the error every front end
    /// gives.
    pub fn parse(text: &str) -> Result<Format, UnknownName> {
        let name = text.trim_ascii();
        Format::ALL.into_iter().find(|f| f.name() == name).ok_or_else(|| UnknownName {
            kind: "format",
            name: text.into(),
            expected: &Format::NAMES,
        })
    }

    /// The block size a trace of this format has when nothing else says (a kv-cache-tester
    /// document says its own; this is what its files have).
    pub const fn default_block_size(self) -> usize {
        match self {
            Format::Mooncake | Format::Tokens => 512,
            Format::Bailian => 16,
            Format::KvcacheTester => 64,
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How many of a file's first bytes every front end hands [`sniff`]: enough for the keys
/// before a kv-cache-tester document's `requests`, or a JSONL file's first record.
pub const SNIFF_BYTES: usize = 16 << 10;

/// What the first bytes of a file say about it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sniffed {
    /// Its format, when the keys tell.
    pub format: Option<Format>,
    /// A kv-cache-tester document's own `block_size`, when it comes before its requests.
    pub block_size: Option<usize>,
    /// The bytes hold nothing but whitespace (after a byte-order mark): an empty file, which
    /// tells nothing, so the settings are settled by the next file that does.
    pub blank: bool,
}

/// What is wrong with a file of this format read with files of the other kind, as every front
/// end says it (after the file's name): kv-cache-tester documents replay as concurrent
/// conversations, JSONL traces one after another.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MixedFormats(pub Format);

impl fmt::Display for MixedFormats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Format::KvcacheTester => {
                f.write_str("a kv-cache-tester document after JSONL traces")?;
            }
            format => write!(f, "a {format} trace among kv-cache-tester documents")?,
        }
        f.write_str(
            " (documents replay as concurrent conversations, JSONL traces one after another): \
             replay them apart",
        )
    }
}

/// Tells a file's format from its first bytes (after any decompression; a prefix of the file
/// is enough, and a cut in the middle of a value is fine): the keys of its first top-level
/// object. `None` for a file that starts with no object (empty, blank, or not JSON).
pub fn sniff(head: &[u8]) -> Sniffed {
    let head = head.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(head);
    let mut json = Json::new(head);
    let mut sniffed = Sniffed::default();
    match json.peek() {
        Kind::Object => {}
        Kind::End => return Sniffed { blank: true, ..sniffed },
        _ => return sniffed,
    }
    let (mut chat_id, mut turn, mut hash_ids, mut tokens) = (false, false, false, false);
    // Reading stops at the first error, which for a prefix is where it was cut: the keys
    // before it are all there is to go on.
    let _ = json.object(|json, key| {
        match key {
            b"requests" => {
                sniffed.format = Some(Format::KvcacheTester);
                // Its value may be megabytes; nothing after it is needed.
                return Err(json.error("stop"));
            }
            b"block_size" => {
                // A value that is no block size (`64.0`) is passed over, so that the keys after
                // it still tell the format: a document's reader then says what is wrong with it.
                // (Only a document's is kept, below.)
                sniffed.block_size = json.clone().u64().ok().map(|n| n as usize);
                return json.skip();
            }
            b"chat_id" => chat_id = true,
            b"turn" => turn = true,
            b"hash_ids" => hash_ids = true,
            b"tokens" => tokens = true,
            _ => {}
        }
        json.skip()
    });
    if sniffed.format.is_none() {
        sniffed.format = if chat_id && turn {
            Some(Format::Bailian)
        } else if hash_ids {
            Some(Format::Mooncake)
        } else if tokens {
            Some(Format::Tokens)
        } else if sniffed.block_size.is_some() {
            // A document's own key, with no other told (its `requests` past the prefix).
            Some(Format::KvcacheTester)
        } else {
            None
        };
    }
    if sniffed.format != Some(Format::KvcacheTester) {
        sniffed.block_size = None;
    }
    sniffed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_print_and_parse_by_name() {
        for (format, name) in Format::ALL.into_iter().zip(Format::NAMES) {
            assert_eq!(alloc::format!("{format}"), name);
            assert_eq!(Format::parse(&alloc::format!(" {name} ")), Ok(format));
        }
        assert_eq!(Format::NAMES, ["mooncake", "bailian", "kvcache-tester", "tokens"]);
    }

    #[test]
    fn formats_are_told_by_their_first_keys_even_when_cut() {
        let doc = br#"{"id":"trace_0504","models":["m"],"block_size":64,"hash_id_scope":"local","requests":[{"t":0.0,"#;
        assert_eq!(
            sniff(doc),
            Sniffed { format: Some(Format::KvcacheTester), block_size: Some(64), blank: false }
        );
        for (head, format) in [
            (&br#"{"chat_id": 3, "parent_chat_id": -1, "timestamp": 0.5, "turn": 1, "hash_ids": [1"#[..], Format::Bailian),
            (br#"{"timestamp": 0, "input_length": 10, "hash_ids": [1, 2, 3]}"#, Format::Mooncake),
            (b"\xEF\xBB\xBF\n {\"tokens\": [1, 2", Format::Tokens),
            (br#"{"chat_id": 3, "hash_ids": [1]}"#, Format::Mooncake),
        ] {
            assert_eq!(sniff(head), Sniffed { format: Some(format), block_size: None, blank: false }, "{head:?}");
        }
        for head in [&b""[..], b"\n\n", b"[1, 2]", b"{\"x\": 1}", b"not json"] {
            assert_eq!(sniff(head).format, None, "{head:?}");
        }
        for (head, blank) in [(&b""[..], true), (b"\xEF\xBB\xBF \r\n\t", true), (b" x", false)] {
            assert_eq!(sniff(head).blank, blank, "{head:?}");
        }
        // A value of `block_size` that is no block size is passed over: the keys after it tell
        // a document (whose reader then reports it), or a record that has such a key.
        for head in [
            &br#"{"id":"x","block_size":64.0,"requests":[]}"#[..],
            br#"{"block_size":"64","requests":[]}"#,
        ] {
            let want =
                Sniffed { format: Some(Format::KvcacheTester), block_size: None, blank: false };
            assert_eq!(sniff(head), want, "{head:?}");
        }
        for head in [
            &br#"{"timestamp": 0, "input_length": 1024, "block_size": 512, "hash_ids": [1, 2]}"#[..],
            br#"{"timestamp": 0, "input_length": 1024, "block_size": 51.2, "hash_ids": [1, 2]}"#,
        ] {
            assert_eq!(
                sniff(head),
                Sniffed { format: Some(Format::Mooncake), block_size: None, blank: false }
            );
        }
        // A block size and no key of another format: a document whose `requests` come later.
        let head = br#"{"id": "a", "models": ["m"], "block_size": 16, "notes": "..."#;
        assert_eq!(
            sniff(head),
            Sniffed { format: Some(Format::KvcacheTester), block_size: Some(16), blank: false }
        );
    }

    /// The prefix every front end sniffs holds what tells a real document and a long first
    /// record apart.
    #[test]
    fn the_sniffed_prefix_tells_real_documents_and_long_records() {
        for document in [
            &include_bytes!("../../../traces/kv-cache-tester/trace_0026.json")[..],
            include_bytes!("../../../traces/kv-cache-tester/trace_0291.json"),
            include_bytes!("../../../traces/kv-cache-tester/trace_0504.json"),
        ] {
            let head = &document[..SNIFF_BYTES.min(document.len())];
            assert_eq!(sniff(head).format, Some(Format::KvcacheTester));
            assert_eq!(sniff(head).block_size, Some(64));
        }
        // A Mooncake record whose `hash_ids` come after 10 KB of other keys.
        let padding = "x".repeat(10 << 10);
        let line = alloc::format!(
            r#"{{"note": "{padding}", "timestamp": 0, "input_length": 3, "hash_ids": [1]}}"#
        );
        let head = &line.as_bytes()[..SNIFF_BYTES.min(line.len())];
        assert_eq!(sniff(head).format, Some(Format::Mooncake));
    }

    #[test]
    fn names_parse_and_list_the_formats() {
        for format in Format::ALL {
            assert_eq!(Format::parse(format.name()), Ok(format));
        }
        assert_eq!(
            alloc::string::ToString::to_string(&Format::parse("csv").unwrap_err()),
            "unknown format \"csv\" (expected one of mooncake, bailian, kvcache-tester, tokens)"
        );
    }
}
