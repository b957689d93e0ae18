//! Reading request traces from files (plain or gzip) into [`Request`]s.
//!
//! Lines are parsed by [`kvreuse_core::trace::parse_line`]; this module adds the files: gzip
//! detection, a bound on line length, and errors that say `file:line: what is wrong`.

use std::fs::File;
use std::io::{self, BufReader, Read};
use std::path::Path;

use flate2::read::MultiGzDecoder;
use kvreuse_core::chain::DynamoHasher;
use kvreuse_core::trace::{Request, TraceError, parse_line};

/// The Mooncake synthetic trace (FAST'25, Apache-2.0; see `traces/NOTICE`), bundled so that
/// `kvreuse replay` has something to replay out of the box. Block size 512.
pub const BUNDLED_TRACE: &[u8] = include_bytes!("../../traces/mooncake_synthetic_trace.jsonl");

/// The bundled trace's name in messages.
pub const BUNDLED_TRACE_NAME: &str = "bundled Mooncake synthetic trace";

pub use kvreuse_core::trace::MAX_LINE_BYTES;

/// Why a trace could not be read. Messages are complete on their own (no separate `source`).
#[derive(Debug, thiserror::Error)]
pub enum TraceFileError {
    /// The file could not be opened or read.
    #[error("{name}: {error}")]
    Io {
        /// The file.
        name: String,
        /// What went wrong.
        error: io::Error,
    },
    /// A line is not a valid record.
    #[error("{name}:{line}: {error}")]
    Line {
        /// The file.
        name: String,
        /// 1-based line number.
        line: u64,
        /// What is wrong with it.
        error: TraceError,
    },
    /// A line is longer than [`MAX_LINE_BYTES`].
    #[error("{name}:{line}: line longer than {MAX_LINE_BYTES} bytes")]
    LineTooLong {
        /// The file.
        name: String,
        /// 1-based line number.
        line: u64,
    },
}

/// A loaded trace.
#[derive(Debug, Default)]
pub struct Loaded {
    /// The valid requests, in order.
    pub requests: Vec<Request>,
    /// Lines skipped as invalid (only with `skip_invalid`).
    pub skipped: u64,
}

/// Opens a trace file, decompressing it when its name ends in `.gz`.
pub fn open(path: &Path) -> Result<Box<dyn Read>, TraceFileError> {
    let io = |error| TraceFileError::Io { name: path.display().to_string(), error };
    let file = File::open(path).map_err(io)?;
    Ok(if path.extension().is_some_and(|e| e == "gz") {
        Box::new(MultiGzDecoder::new(BufReader::new(file)))
    } else {
        Box::new(file)
    })
}

/// Text is parsed in chunks of about this many bytes (whole lines), each split among threads.
const CHUNK_BYTES: usize = 4 << 20;
/// Below this many bytes a chunk is parsed on the calling thread.
const PARALLEL_MIN_BYTES: usize = 128 << 10;

/// Reads every record of `reader` (named `name` in errors) into `loaded`. With
/// `skip_invalid`, invalid lines are counted and skipped instead of ending the load.
///
/// The text is read in chunks of whole lines, and each chunk is parsed by up to `threads`
/// threads at once; requests keep their order and errors name the first bad line. Memory
/// stays bounded by the chunk size (or the longest line) whatever the trace's size.
pub fn load_into(
    reader: &mut dyn Read,
    name: &str,
    hasher: &DynamoHasher,
    skip_invalid: bool,
    threads: usize,
    loaded: &mut Loaded,
) -> Result<(), TraceFileError> {
    let io = |error| TraceFileError::Io { name: name.into(), error };
    let mut buf: Vec<u8> = Vec::new();
    // 1-based number of the first line in `buf`.
    let mut line = 1u64;
    let mut eof = false;
    // Whether the start of `buf` is the rest of a too long line being skipped.
    let mut discarding = false;
    while !eof || !buf.is_empty() {
        if !eof && (buf.len() < CHUNK_BYTES || memchr::memchr(b'\n', &buf).is_none()) {
            eof = read_some(reader, &mut buf).map_err(io)?;
            if let (false, None) = (eof, memchr::memchr(b'\n', &buf)) {
                if buf.len() > MAX_LINE_BYTES {
                    if !skip_invalid {
                        return Err(TraceFileError::LineTooLong { name: name.into(), line });
                    }
                    if !discarding {
                        loaded.skipped += 1;
                        discarding = true;
                    }
                    buf.clear();
                }
                continue;
            }
            if !eof && buf.len() < CHUNK_BYTES {
                continue;
            }
        }
        // Whole lines: up to the last newline (there is one), or everything at the end.
        let end = if eof { buf.len() } else { memchr::memrchr(b'\n', &buf).map_or(0, |i| i + 1) };
        let mut text = &buf[..end];
        let mut first = line;
        if discarding {
            // The tail of a skipped line, up to its newline.
            let newline = memchr::memchr(b'\n', text).map_or(text.len(), |i| i + 1);
            text = &text[newline..];
            first += 1;
            discarding = false;
        }
        let lines = memchr::memchr_iter(b'\n', &buf[..end]).count() as u64;
        parse_chunk(text, first, hasher, skip_invalid, threads, loaded)
            .map_err(|(line, error)| error.into_file_error(name, line))?;
        line += lines;
        buf.drain(..end);
    }
    Ok(())
}

/// Like [`load_into`], for text already in memory (nothing is copied).
pub fn load_slice(
    mut text: &[u8],
    name: &str,
    hasher: &DynamoHasher,
    skip_invalid: bool,
    threads: usize,
    loaded: &mut Loaded,
) -> Result<(), TraceFileError> {
    let mut line = 1;
    while !text.is_empty() {
        let end = match memchr::memchr(b'\n', text.get(CHUNK_BYTES..).unwrap_or_default()) {
            Some(i) => CHUNK_BYTES + i + 1,
            None => text.len(),
        };
        let (chunk, rest) = text.split_at(end);
        parse_chunk(chunk, line, hasher, skip_invalid, threads, loaded)
            .map_err(|(line, error)| error.into_file_error(name, line))?;
        line += memchr::memchr_iter(b'\n', chunk).count() as u64;
        text = rest;
    }
    Ok(())
}

/// Appends up to one chunk from `reader` to `buf`; returns whether the input has ended.
fn read_some(reader: &mut dyn Read, buf: &mut Vec<u8>) -> io::Result<bool> {
    buf.reserve(CHUNK_BYTES);
    let read = reader.take(CHUNK_BYTES as u64).read_to_end(buf)?;
    Ok(read == 0)
}

/// What is wrong with a line, before the file's name is known.
enum LineError {
    Invalid(TraceError),
    TooLong,
}

impl LineError {
    fn into_file_error(self, name: &str, line: u64) -> TraceFileError {
        match self {
            LineError::Invalid(error) => TraceFileError::Line { name: name.into(), line, error },
            LineError::TooLong => TraceFileError::LineTooLong { name: name.into(), line },
        }
    }
}

/// Parses whole lines (the first numbered `first`), splitting them among up to `threads`
/// threads. On failure, the number of the first bad line and what is wrong with it.
fn parse_chunk(
    text: &[u8],
    first: u64,
    hasher: &DynamoHasher,
    skip_invalid: bool,
    threads: usize,
    loaded: &mut Loaded,
) -> Result<(), (u64, LineError)> {
    let parts = threads.clamp(1, text.len() / PARALLEL_MIN_BYTES + 1);
    if parts == 1 {
        return parse_lines(text, first, hasher, skip_invalid, loaded);
    }
    // Split at newlines near equal byte offsets, numbering each part's first line.
    let mut pieces = Vec::with_capacity(parts);
    let (mut start, mut number) = (0, first);
    for k in 1..=parts {
        let end = if k == parts {
            text.len()
        } else {
            let target = (text.len() * k / parts).max(start);
            memchr::memchr(b'\n', &text[target..]).map_or(text.len(), |i| target + i + 1)
        };
        pieces.push((&text[start..end], number));
        number += memchr::memchr_iter(b'\n', &text[start..end]).count() as u64;
        start = end;
    }
    let results: Vec<_> = std::thread::scope(|scope| {
        let handles: Vec<_> = pieces
            .iter()
            .skip(1)
            .map(|&(piece, number)| {
                scope.spawn(move || {
                    let mut part = Loaded::default();
                    let result = parse_lines(piece, number, hasher, skip_invalid, &mut part);
                    (part, result)
                })
            })
            .collect();
        let mut part = Loaded::default();
        let (piece, number) = pieces[0];
        let result = parse_lines(piece, number, hasher, skip_invalid, &mut part);
        std::iter::once((part, result))
            .chain(handles.into_iter().map(|h| h.join().expect("a parser thread panicked")))
            .collect()
    });
    for (part, result) in results {
        result?;
        loaded.requests.extend(part.requests);
        loaded.skipped += part.skipped;
    }
    Ok(())
}

/// Parses whole lines on this thread (see [`parse_chunk`]).
fn parse_lines(
    text: &[u8],
    first: u64,
    hasher: &DynamoHasher,
    skip_invalid: bool,
    loaded: &mut Loaded,
) -> Result<(), (u64, LineError)> {
    let text = text.strip_suffix(b"\n").unwrap_or(text);
    if text.is_empty() {
        return Ok(());
    }
    for (number, line) in (first..).zip(text.split(|&b| b == b'\n')) {
        let parsed = if line.len() > MAX_LINE_BYTES {
            Err(LineError::TooLong)
        } else {
            parse_line(line, hasher).map_err(LineError::Invalid)
        };
        match parsed {
            Ok(Some(request)) => loaded.requests.push(request),
            Ok(None) => {}
            Err(_) if skip_invalid => loaded.skipped += 1,
            Err(error) => return Err((number, error)),
        }
    }
    Ok(())
}

/// How many threads parse (and replay) a trace: the machine's parallelism, at most 8.
pub fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().min(8))
}

/// Loads the given trace files in order, or the bundled trace when there are none.
pub fn load(
    paths: &[impl AsRef<Path>],
    hasher: &DynamoHasher,
    skip_invalid: bool,
    threads: usize,
) -> Result<Loaded, TraceFileError> {
    let mut loaded = Loaded::default();
    if paths.is_empty() {
        load_slice(BUNDLED_TRACE, BUNDLED_TRACE_NAME, hasher, skip_invalid, threads, &mut loaded)?;
    }
    for path in paths {
        let path = path.as_ref();
        let mut reader = open(path)?;
        let name = path.display().to_string();
        load_into(&mut *reader, &name, hasher, skip_invalid, threads, &mut loaded)?;
    }
    Ok(loaded)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load_text(text: &[u8], skip: bool) -> Result<Loaded, TraceFileError> {
        let mut loaded = Loaded::default();
        load_into(&mut &text[..], "t.jsonl", &DynamoHasher::new(4).unwrap(), skip, 2, &mut loaded)?;
        Ok(loaded)
    }

    #[test]
    fn the_bundled_trace_has_its_documented_size() {
        let loaded = load(&[] as &[&Path], &DynamoHasher::new(512).unwrap(), false, 2).unwrap();
        assert_eq!(loaded.requests.len(), 3993);
        let tokens: u64 = loaded.requests.iter().map(|r| r.prompt_tokens).sum();
        assert_eq!(tokens, 61_194_628);
        let blocks: usize = loaded.requests.iter().map(|r| r.prompt_ids.len()).sum();
        assert_eq!(blocks, 121_877);
    }

    #[test]
    fn errors_name_file_and_line_and_skipping_counts() {
        let text = b"{\"tokens\": [1,2,3,4]}\n\n{\"tokens\": [1, -1]}\n{\"tokens\": [5]}";
        let err = load_text(text, false).unwrap_err().to_string();
        assert!(err.starts_with("t.jsonl:3: "), "{err}");
        let loaded = load_text(text, true).unwrap();
        assert_eq!((loaded.requests.len(), loaded.skipped), (2, 1));
    }

    /// A trace of several chunks, read through a reader that returns few bytes at a time and
    /// parsed by several threads, gives what parsing its lines one by one gives: the same
    /// requests in order, the same skip count, and errors at the same line.
    #[test]
    fn chunked_parallel_loading_equals_line_by_line_parsing() {
        struct Dribble<'a>(&'a [u8], usize);
        impl Read for Dribble<'_> {
            fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
                self.1 = self.1 % 7919 + 1;
                let n = self.1.min(out.len()).min(self.0.len());
                out[..n].copy_from_slice(&self.0[..n]);
                self.0 = &self.0[n..];
                Ok(n)
            }
        }
        let hasher = DynamoHasher::new(4).unwrap();
        let mut text = Vec::new();
        let mut bad = Vec::new();
        for i in 0..250_000u32 {
            match i % 9973 {
                17 => {
                    bad.push(u64::from(i) + 1);
                    text.extend_from_slice(b"{\"tokens\": [1, 2, \"x\"]}\n");
                }
                5 => text.extend_from_slice(b"\n"),
                _ => text.extend_from_slice(
                    format!(
                        "{{\"tokens\": [{}, {}, 3, 4, 5, {i}], \"timestamp\": {i}}}\n",
                        i % 7,
                        i
                    )
                    .as_bytes(),
                ),
            }
        }
        assert!(text.len() > 2 * CHUNK_BYTES);
        let lines: Vec<_> = text.split(|&b| b == b'\n').map(|l| parse_line(l, &hasher)).collect();
        let want: Vec<Request> = lines.iter().filter_map(|r| r.clone().ok().flatten()).collect();
        for threads in [1, 2, 3] {
            let mut loaded = Loaded::default();
            load_into(&mut Dribble(&text, 0), "t", &hasher, true, threads, &mut loaded).unwrap();
            assert_eq!(loaded.skipped, bad.len() as u64);
            assert!(loaded.requests == want, "threads {threads}");
            let mut loaded = Loaded::default();
            load_slice(&text, "t", &hasher, true, threads, &mut loaded).unwrap();
            assert_eq!(loaded.skipped, bad.len() as u64);
            assert!(loaded.requests == want, "threads {threads}");
            let mut loaded = Loaded::default();
            let err = load_slice(&text, "t", &hasher, false, threads, &mut loaded);
            assert!(err.unwrap_err().to_string().starts_with(&format!("t:{}: ", bad[0])));
            let mut loaded = Loaded::default();
            let err = load_into(&mut &text[..], "t", &hasher, false, threads, &mut loaded);
            assert!(err.unwrap_err().to_string().starts_with(&format!("t:{}: ", bad[0])));
        }
        // The last line needs no newline.
        let mut loaded = Loaded::default();
        let end = text.len() - 1;
        load_into(&mut &text[..end], "t", &hasher, true, 2, &mut loaded).unwrap();
        assert_eq!(loaded.requests.len(), want.len());
    }

    /// A line longer than the limit is an error naming it, or one skipped line, and the lines
    /// around it still load.
    #[test]
    fn a_too_long_line_is_reported_or_skipped() {
        let mut text = b"{\"tokens\": [1,2,3,4]}\n".to_vec();
        text.extend_from_slice(b"{\"tokens\": [");
        while text.len() < MAX_LINE_BYTES + 100 {
            text.extend_from_slice(b"1,1,1,1,1,1,1,1,");
        }
        text.extend_from_slice(b"1]}\n{\"tokens\": [5,6,7,8]}\n");
        let err = load_text(&text, false).unwrap_err().to_string();
        assert_eq!(err, format!("t.jsonl:2: line longer than {MAX_LINE_BYTES} bytes"));
        let mut loaded = Loaded::default();
        let err =
            load_slice(&text, "t.jsonl", &DynamoHasher::new(4).unwrap(), false, 2, &mut loaded);
        assert_eq!(
            err.unwrap_err().to_string(),
            format!("t.jsonl:2: line longer than {MAX_LINE_BYTES} bytes")
        );
        let loaded = load_text(&text, true).unwrap();
        assert_eq!((loaded.requests.len(), loaded.skipped), (2, 1));
        // Without a final newline too.
        let end = text.len() - 1;
        let loaded = load_text(&text[..end], true).unwrap();
        assert_eq!((loaded.requests.len(), loaded.skipped), (2, 1));
    }
}
