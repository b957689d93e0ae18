//! Trace input as a browser gets it: files in chunks of any size, one after another, in any
//! of the formats `kvreuse replay` reads.
//!
//! A page cannot hold a multi-gigabyte trace in memory, and a folder of kv-cache-tester
//! conversations arrives as many files; so [`Input`] takes each file in chunks
//! ([`begin`](Input::begin), [`push`](Input::push), [`end`](Input::end)) and hands out the
//! requests the chunks complete, as the command line's reader does with a file:
//!
//! - each file's format is the one given, or told from its first bytes
//!   ([`SNIFF_BYTES`] of them, kept until that many arrive or the file ends), and the first
//!   file settles the block size when none is given ([`TraceSettings::settle`]);
//! - JSONL files (Mooncake, Bailian, token records) are cut into numbered lines and parsed
//!   line by line; a bad line stops the input with its file and number, or is counted and
//!   skipped when asked to;
//! - kv-cache-tester documents are read, a chunk and a request at a time, into one
//!   [`Conversations`] set, whose requests come out merged by time when the input
//!   [`finish`](Input::finish)es; documents and JSONL files do not mix, as on the command line.
//!
//! Nothing of a file is kept but the start of a line a chunk cut (or a document's compact
//! requests), so memory does not grow with a JSONL trace's length. Gzip is not read here: a
//! page decompresses with the browser's own `DecompressionStream`, Node.js with `zlib`.

use alloc::boxed::Box;
use alloc::collections::VecDeque;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use kvreuse_core::chain::DynamoHasher;
use kvreuse_core::setup::{SetupError, TraceSettings};
use kvreuse_core::trace::document::{Conversations, DocumentReader};
use kvreuse_core::trace::lines::{Lines, Piece, numbered};
use kvreuse_core::trace::{
    Format, MixedFormats, Request, SNIFF_BYTES, TraceError, parse_bailian_line, parse_line, sniff,
};

/// Why the input stopped.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum InputError {
    /// The settings cannot read this trace (a block size the chains refuse).
    Setup(SetupError),
    /// A line of a JSONL file is not a valid record (or is too long).
    Line {
        /// The file (empty for a trace given as one text).
        file: String,
        /// 1-based line number.
        line: u64,
        /// What is wrong with it.
        error: TraceError,
    },
    /// A document is not a valid kv-cache-tester document.
    Document {
        /// The file.
        file: String,
        /// What is wrong, and at which JSON path.
        error: TraceError,
    },
    /// kv-cache-tester documents and JSONL files in one input.
    MixedFormats {
        /// The file that does not fit.
        file: String,
        /// Its format.
        format: Format,
    },
    /// A chunk after the input finished.
    Finished,
}

impl InputError {
    /// The line the error is about, if it is about one.
    pub fn line(&self) -> Option<u64> {
        match self {
            InputError::Line { line, .. } => Some(*line),
            _ => None,
        }
    }

    /// Whether the error is about a value out of range (a JS `RangeError`) rather than input
    /// of the wrong shape.
    pub fn is_range(&self) -> bool {
        match self {
            InputError::Setup(error) => error.is_range(),
            InputError::Line { error, .. } => matches!(error, TraceError::LineTooLong),
            _ => false,
        }
    }
}

impl fmt::Display for InputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let file = |f: &mut fmt::Formatter<'_>, file: &str| {
            if file.is_empty() { Ok(()) } else { write!(f, "{file}: ") }
        };
        match self {
            InputError::Setup(error) => write!(f, "options.{}: {error}", error.setting.js_name()),
            InputError::Line { file: name, line, error } => {
                file(f, name)?;
                match error.column() {
                    Some(column) => write!(f, "line {line}:{column}: {error}"),
                    None => write!(f, "line {line}: {error}"),
                }
            }
            InputError::Document { file: name, error } => {
                file(f, name)?;
                error.fmt(f)
            }
            InputError::MixedFormats { file: name, format } => {
                file(f, name)?;
                MixedFormats(*format).fmt(f)
            }
            InputError::Finished => f.write_str("the input is finished: no chunk may follow"),
        }
    }
}

impl core::error::Error for InputError {}

/// How a JSONL file's lines are read.
#[derive(Clone, Copy, Debug)]
enum LineFormat {
    /// Mooncake or token records, told apart per line; token records hashed by the hasher.
    MooncakeOrTokens(DynamoHasher),
    /// Bailian records.
    Bailian,
}

/// The file being read.
#[derive(Debug)]
enum File {
    /// Its first bytes, until there are enough to tell its format.
    Head(Vec<u8>),
    /// A JSONL file, cut into lines.
    Lines(LineFormat, Lines),
    /// A kv-cache-tester document, read into the set it holds.
    Document(Box<DocumentReader<Conversations>>),
}

/// What the input has read so far.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct InputStats {
    /// Requests handed out.
    pub records: u64,
    /// Invalid lines skipped.
    pub skipped: u64,
    /// Each file's name, its format, and whether it was told from the file (not given).
    pub formats: Vec<(String, Option<Format>, bool)>,
}

/// Trace files read from chunks. See the [module docs](self).
pub struct Input {
    settings: TraceSettings,
    /// Whether the first file that is not blank has settled the settings.
    settled: bool,
    name: String,
    file: Option<File>,
    /// The documents read so far (while no document is open).
    conversations: Option<Conversations>,
    lines_read: bool,
    finished: bool,
    stats: InputStats,
    /// Requests of the lines read, not yet taken.
    pending: VecDeque<Request>,
    /// The documents' requests, merged by time, once the input is finished.
    merged: Option<Box<dyn Iterator<Item = Request>>>,
}

impl fmt::Debug for Input {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Input").field("file", &self.name).field("stats", &self.stats).finish()
    }
}

impl Input {
    /// An input read as `settings` say (format, block size, invalid lines, stagger); the
    /// block size is settled by the first file that is not blank, when not given.
    pub fn new(settings: &TraceSettings) -> Input {
        Input {
            settings: settings.clone(),
            settled: false,
            name: String::new(),
            file: None,
            conversations: None,
            lines_read: false,
            finished: false,
            stats: InputStats::default(),
            pending: VecDeque::new(),
            merged: None,
        }
    }

    /// The settings, settled by the first file that is not blank once it has been told.
    pub fn settings(&self) -> &TraceSettings {
        &self.settings
    }

    /// Whether the first file that is not blank has settled the settings (its format told).
    pub fn settled(&self) -> bool {
        self.settled
    }

    /// What has been read so far.
    pub fn stats(&self) -> &InputStats {
        &self.stats
    }

    /// Whether the input holds kv-cache-tester documents, whose requests come out only when
    /// it finishes.
    pub fn has_documents(&self) -> bool {
        self.conversations.is_some() || matches!(self.file, Some(File::Document(_)))
    }

    /// Starts the next file, named `name` in messages (empty for a trace given as one text),
    /// ending the one before.
    pub fn begin(&mut self, name: &str) -> Result<(), InputError> {
        self.end()?;
        if self.finished {
            return Err(InputError::Finished);
        }
        self.name = name.into();
        self.file = Some(File::Head(Vec::new()));
        Ok(())
    }

    /// Takes the next chunk of the current file (a file named "trace" is begun if none is);
    /// the requests it completes wait for [`next_request`](Self::next_request).
    pub fn push(&mut self, chunk: &[u8]) -> Result<(), InputError> {
        if self.finished {
            return Err(InputError::Finished);
        }
        if self.file.is_none() {
            self.begin("trace")?;
        }
        if let Some(File::Head(head)) = &mut self.file {
            let take = (SNIFF_BYTES - head.len()).min(chunk.len());
            head.extend_from_slice(&chunk[..take]);
            if head.len() < SNIFF_BYTES {
                return Ok(());
            }
            let head = core::mem::take(head);
            self.open(&head)?;
            return self.feed(&chunk[take..]);
        }
        self.feed(chunk)
    }

    /// Ends the current file, if one is open.
    pub fn end(&mut self) -> Result<(), InputError> {
        if let Some(File::Head(head)) = &mut self.file {
            let head = core::mem::take(head);
            self.open(&head)?;
        }
        match self.file.take() {
            None | Some(File::Head(_)) => Ok(()),
            Some(File::Lines(format, mut lines)) => {
                let mut piece = |piece: Piece<'_>| self.piece(format, piece);
                lines.finish(&mut piece)
            }
            Some(File::Document(reader)) => {
                let set = reader.finish().map_err(|error| self.document_error(error))?;
                self.conversations = Some(set);
                Ok(())
            }
        }
    }

    /// Ends the input: ends the current file; the documents' requests, merged by time, then
    /// come from [`next_request`](Self::next_request), one at a time.
    pub fn finish(&mut self) -> Result<(), InputError> {
        self.end()?;
        self.finished = true;
        if let Some(set) = self.conversations.take() {
            self.stats.records += set.len() as u64;
            self.merged = Some(Box::new(set.into_requests()));
        }
        Ok(())
    }

    /// The next request read and not yet taken: the lines' as their chunks arrive, the
    /// documents' once the input is finished.
    pub fn next_request(&mut self) -> Option<Request> {
        self.pending.pop_front().or_else(|| self.merged.as_mut()?.next())
    }

    /// Whether [`finish`](Self::finish) was called.
    pub fn is_finished(&self) -> bool {
        self.finished
    }

    /// Tells the current file's format from its first bytes and opens it for reading.
    fn open(&mut self, head: &[u8]) -> Result<(), InputError> {
        let sniffed = sniff(head);
        // A blank file tells nothing: the next one settles the settings.
        if !self.settled && !sniffed.blank {
            self.settings.settle(sniffed);
            self.settled = true;
        }
        let format = self.settings.format.or(sniffed.format);
        self.stats.formats.push((self.name.clone(), format, self.settings.format.is_none()));
        let mixed = |name: &str, format| InputError::MixedFormats { file: name.into(), format };
        if format == Some(Format::KvcacheTester) {
            if self.lines_read {
                return Err(mixed(&self.name, Format::KvcacheTester));
            }
            let set = self.conversations.take().unwrap_or_else(|| {
                Conversations::new(self.settings.block_size, self.settings.stagger_ms)
            });
            self.file = Some(File::Document(Box::new(set.into_document(&self.name))));
        } else {
            if self.conversations.is_some() {
                return Err(mixed(&self.name, format.unwrap_or(Format::Mooncake)));
            }
            self.lines_read = true;
            let format = match format {
                Some(Format::Bailian) => LineFormat::Bailian,
                _ => {
                    LineFormat::MooncakeOrTokens(self.settings.hasher().map_err(InputError::Setup)?)
                }
            };
            self.file = Some(File::Lines(format, Lines::new()));
        }
        self.feed(head)
    }

    /// Reads a chunk of the open file.
    fn feed(&mut self, chunk: &[u8]) -> Result<(), InputError> {
        match self.file.take() {
            Some(File::Lines(format, mut lines)) => {
                let mut piece = |piece: Piece<'_>| self.piece(format, piece);
                let result = lines.feed(chunk, &mut piece);
                self.file = Some(File::Lines(format, lines));
                result
            }
            Some(File::Document(mut reader)) => {
                let result = reader.feed(chunk).map_err(|error| self.document_error(error));
                self.file = Some(File::Document(reader));
                result
            }
            other => {
                self.file = other;
                Ok(())
            }
        }
    }

    /// Parses the lines of a piece.
    fn piece(&mut self, format: LineFormat, piece: Piece<'_>) -> Result<(), InputError> {
        let skip = self.settings.skip_invalid;
        let (first, text) = match piece {
            Piece::TooLong { .. } if skip => {
                self.stats.skipped += 1;
                return Ok(());
            }
            Piece::TooLong { line } => return Err(self.line_error(line, TraceError::LineTooLong)),
            Piece::Lines { first, text } => (first, text),
        };
        for (number, line) in numbered(first, text) {
            let parsed = match format {
                LineFormat::MooncakeOrTokens(hasher) => parse_line(line, &hasher),
                LineFormat::Bailian => parse_bailian_line(line, self.settings.block_size),
            };
            match parsed {
                Ok(Some(request)) => {
                    self.stats.records += 1;
                    self.pending.push_back(request);
                }
                Ok(None) => {}
                Err(_) if skip => self.stats.skipped += 1,
                Err(error) => return Err(self.line_error(number, error)),
            }
        }
        Ok(())
    }

    fn line_error(&self, line: u64, error: TraceError) -> InputError {
        InputError::Line { file: self.name.clone(), line, error }
    }

    fn document_error(&self, error: TraceError) -> InputError {
        InputError::Document { file: self.name.clone(), error }
    }
}

/// Records in a whole JSONL text of `format`, as the command line counts them before a
/// replay whose warm-up is a share of them: non-blank lines, or, when bad lines are skipped
/// (and so not counted), the valid records, which takes a parse. `None` for a document,
/// whose requests are counted as it is read.
pub fn count_records(text: &[u8], settings: &TraceSettings) -> Result<Option<u64>, InputError> {
    let sniffed = sniff(&text[..text.len().min(SNIFF_BYTES)]);
    let mut settled = settings.clone();
    settled.settle(sniffed);
    let format = settled.format.or(sniffed.format);
    if format == Some(Format::KvcacheTester) {
        return Ok(None);
    }
    let text = text.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(text);
    let lines = numbered(1, text).map(|(_, line)| line);
    if !settled.skip_invalid {
        return Ok(Some(lines.filter(|l| !l.iter().all(u8::is_ascii_whitespace)).count() as u64));
    }
    let hasher = settled.hasher().map_err(InputError::Setup)?;
    let valid = |line: &&[u8]| match format {
        Some(Format::Bailian) => {
            matches!(parse_bailian_line(line, settled.block_size), Ok(Some(_)))
        }
        _ => matches!(parse_line(line, &hasher), Ok(Some(_))),
    };
    Ok(Some(lines.filter(valid).count() as u64))
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::format;
    use alloc::string::ToString;

    const TRACE: &[u8] = include_bytes!("../../traces/mooncake_synthetic_trace.jsonl");

    fn read_in_chunks(
        files: &[(&str, &[u8])],
        chunk: usize,
        settings: &TraceSettings,
    ) -> Vec<Request> {
        let mut input = Input::new(settings);
        let mut out = Vec::new();
        for (name, text) in files {
            input.begin(name).unwrap();
            for piece in text.chunks(chunk) {
                input.push(piece).unwrap();
                out.extend(core::iter::from_fn(|| input.next_request()));
            }
        }
        input.finish().unwrap();
        out.extend(core::iter::from_fn(|| input.next_request()));
        out
    }

    #[test]
    fn chunks_of_any_size_give_the_lines_requests() {
        let hasher = DynamoHasher::new(512).unwrap();
        let want: Vec<Request> =
            TRACE.split(|&b| b == b'\n').filter_map(|l| parse_line(l, &hasher).unwrap()).collect();
        for chunk in [1, 7, 4096, 1 << 20] {
            let got = read_in_chunks(&[("a", TRACE)], chunk, &TraceSettings::default());
            assert_eq!(got, want, "chunks of {chunk}");
        }
        let twice = read_in_chunks(&[("a", TRACE), ("b", TRACE)], 5000, &TraceSettings::default());
        assert_eq!(twice.len(), 2 * want.len());
    }

    #[test]
    fn the_first_file_settles_the_block_size() {
        let bailian = br#"{"chat_id": 1, "parent_chat_id": -1, "timestamp": 0.5, "input_length": 20, "output_length": 3, "type": "text", "turn": 1, "hash_ids": [7, 8]}"#;
        let mut input = Input::new(&TraceSettings::default());
        input.push(bailian).unwrap();
        input.finish().unwrap();
        let got: Vec<Request> = core::iter::from_fn(|| input.next_request()).collect();
        assert_eq!(input.settings().block_size, 16);
        assert_eq!(got.len(), 1);
        assert_eq!((got[0].timestamp, got[0].prompt_tokens), (Some(500), 20));
        assert_eq!(input.stats().formats, [("trace".into(), Some(Format::Bailian), true)]);
    }

    #[test]
    fn a_blank_first_file_leaves_the_block_size_to_the_next() {
        let bailian = br#"{"chat_id": 1, "parent_chat_id": -1, "timestamp": 0.5, "input_length": 20, "output_length": 3, "type": "text", "turn": 1, "hash_ids": [7, 8]}"#;
        let mut input = Input::new(&TraceSettings::default());
        input.begin("empty.jsonl").unwrap();
        input.push(b"\n \n").unwrap();
        input.begin("b.jsonl").unwrap();
        assert!(!input.settled(), "a blank file settles nothing");
        input.push(bailian).unwrap();
        input.finish().unwrap();
        let got: Vec<Request> = core::iter::from_fn(|| input.next_request()).collect();
        assert_eq!((input.settings().block_size, got.len()), (16, 1));
    }

    #[test]
    fn documents_come_out_merged_at_the_end_and_do_not_mix_with_lines() {
        let doc = |id: &str, t: &str| {
            format!(
                r#"{{"id":"{id}","block_size":64,"requests":[{{"t":{t},"type":"n","in":130,"out":5,"hash_ids":[1,2]}}]}}"#
            )
        };
        let (a, b) = (doc("a", "2.0"), doc("b", "1.0"));
        let got = read_in_chunks(
            &[("a.json", a.as_bytes()), ("b.json", b.as_bytes())],
            3,
            &TraceSettings::default(),
        );
        assert_eq!(got.iter().map(|r| r.timestamp).collect::<Vec<_>>(), [Some(1000), Some(2000)]);
        assert_ne!(got[0].prompt_ids, got[1].prompt_ids, "local ids are namespaced");

        let mut input = Input::new(&TraceSettings::default());
        input.begin("a.json").unwrap();
        input.push(a.as_bytes()).unwrap();
        input.begin("m.jsonl").unwrap();
        let error = input.push(&TRACE[..100]).and_then(|()| input.end());
        assert_eq!(
            error.unwrap_err(),
            InputError::MixedFormats { file: "m.jsonl".into(), format: Format::Mooncake }
        );
    }

    #[test]
    fn errors_name_the_file_and_line_or_are_skipped() {
        let text = b"{\"tokens\": [1,2,3,4]}\n\n{\"tokens\": [1, -1]}\n{\"tokens\": [5]}";
        let mut settings = TraceSettings::default();
        settings.set_block_size(4).unwrap();
        let mut input = Input::new(&settings);
        input.begin("t.jsonl").unwrap();
        let error = input.push(text).and_then(|()| input.end());
        let error = error.unwrap_err();
        assert_eq!(error.line(), Some(3));
        assert!(error.to_string().starts_with("t.jsonl: line 3:16: "), "{error}");
        settings.skip_invalid = true;
        let got = read_in_chunks(&[("", text)], 2, &settings);
        assert_eq!(got.len(), 2);
        let missing = read_in_chunks_err(b"{\"id\": \"x\", \"block_size\": 64}");
        assert_eq!(
            missing.to_string(),
            "d.json: requests: missing (a kv-cache-tester document has a `requests` array)"
        );
    }

    fn read_in_chunks_err(document: &[u8]) -> InputError {
        let mut settings = TraceSettings::default();
        settings.set_format("kvcache-tester").unwrap();
        let mut input = Input::new(&settings);
        input.begin("d.json").unwrap();
        input.push(document).and_then(|()| input.finish()).unwrap_err()
    }

    #[test]
    fn records_are_counted_as_the_command_line_counts_them() {
        assert_eq!(count_records(TRACE, &TraceSettings::default()), Ok(Some(3993)));
        let doc = br#"{"id":"a","requests":[]}"#;
        assert_eq!(count_records(doc, &TraceSettings::default()), Ok(None));
    }
}
