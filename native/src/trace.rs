//! Reading request traces from files, streaming: plain or gzip (told by the first bytes, not
//! the name), one file after another, in bounded memory.
//!
//! Records are parsed by [`kvreuse_core::trace`]; this module adds the files. A [`TraceReader`]
//! reads a chunk of a file at a time, cuts it into whole lines ([`Lines`]), parses the lines on
//! up to `threads` threads, and hands the requests out in batches, in order. Nothing is kept
//! from one batch to the next but the start of a line a chunk boundary cut, so memory is the
//! chunk, a batch and the decompressor's window, whatever the trace's length. Errors say
//! `file:line:column: what is wrong`; with `skip_invalid`, bad lines are counted instead.
//!
//! A warm-up given as a share of the requests needs their number before the replay starts:
//! [`count_records`] reads the files once more, cheaply (lines are counted, not parsed, unless
//! bad ones are to be skipped). Standard input and other pipes cannot be read twice.

use std::fs::File;
use std::io::{self, BufReader, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use flate2::read::MultiGzDecoder;
use kvreuse_core::chain::DynamoHasher;
pub use kvreuse_core::trace::MAX_LINE_BYTES;
use kvreuse_core::trace::lines::{Lines, Piece, numbered};
use kvreuse_core::trace::{Request, TimeCheck, TraceError, parse_line};

/// The Mooncake synthetic trace (FAST'25, Apache-2.0; see `traces/NOTICE`), bundled so that
/// `kvreuse replay` has something to replay out of the box. Block size 512.
pub const BUNDLED_TRACE: &[u8] = include_bytes!("../../traces/mooncake_synthetic_trace.jsonl");

/// The bundled trace's name in messages.
pub const BUNDLED_TRACE_NAME: &str = "bundled Mooncake synthetic trace";

/// The first bytes of a gzip member.
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// Why a trace could not be read. Messages are complete on their own (no separate `source`).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
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
    #[error("{name}:{line}:{}{error}", column.map(|c| format!("{c}: ")).unwrap_or_else(|| " ".into()))]
    Line {
        /// The file.
        name: String,
        /// 1-based line number.
        line: u64,
        /// 1-based column where reading stopped, when known.
        column: Option<usize>,
        /// What is wrong with it.
        error: TraceError,
    },
    /// A warm-up share needs the number of requests in advance, which a pipe cannot give.
    #[error(
        "{name}: a warm-up given as a share of the requests needs their number in advance, \
         and a pipe can be read only once; give --warmup-requests N instead"
    )]
    CannotCount {
        /// The pipe.
        name: String,
    },
}

impl TraceFileError {
    fn line(name: &str, line: u64, error: TraceError) -> TraceFileError {
        TraceFileError::Line { name: name.into(), line, column: error.column(), error }
    }
}

/// Where trace bytes come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// A file (or a named pipe, or a device).
    Path(PathBuf),
    /// Standard input (`-` on the command line).
    Stdin,
    /// [`BUNDLED_TRACE`].
    Bundled,
}

impl Source {
    /// The sources of command-line arguments: `-` is standard input; none is the bundled
    /// trace.
    pub fn from_args(paths: &[PathBuf]) -> Vec<Source> {
        if paths.is_empty() {
            return vec![Source::Bundled];
        }
        paths
            .iter()
            .map(|p| if p.as_os_str() == "-" { Source::Stdin } else { Source::Path(p.clone()) })
            .collect()
    }

    /// The name errors and warnings give it.
    pub fn name(&self) -> String {
        match self {
            Source::Path(path) => path.display().to_string(),
            Source::Stdin => "<stdin>".into(),
            Source::Bundled => BUNDLED_TRACE_NAME.into(),
        }
    }

    /// Whether it can be read twice (a regular file, or the bundled trace), as counting the
    /// records before replaying them needs.
    pub fn rereadable(&self) -> bool {
        match self {
            Source::Path(path) => std::fs::metadata(path).is_ok_and(|m| m.is_file()),
            Source::Stdin => false,
            Source::Bundled => true,
        }
    }

    /// Its size in bytes as stored (before decompression), when known: for progress.
    pub fn stored_bytes(&self) -> Option<u64> {
        match self {
            Source::Path(path) => {
                std::fs::metadata(path).ok().filter(|m| m.is_file()).map(|m| m.len())
            }
            Source::Stdin => None,
            Source::Bundled => Some(BUNDLED_TRACE.len() as u64),
        }
    }

    /// Opens it, decompressing gzip (found by its first two bytes, whatever the name).
    /// `read` counts the stored bytes read (for progress).
    pub fn open(&self, read: Arc<AtomicU64>) -> Result<Box<dyn Read + Send>, TraceFileError> {
        let io = |error| TraceFileError::Io { name: self.name(), error };
        let raw: Box<dyn Read + Send> = match self {
            Source::Path(path) => Box::new(File::open(path).map_err(io)?),
            Source::Stdin => Box::new(io::stdin()),
            Source::Bundled => Box::new(BUNDLED_TRACE),
        };
        let mut raw = BufReader::with_capacity(1 << 16, Counted { inner: raw, read });
        let gzip = {
            use std::io::BufRead;
            raw.fill_buf().map_err(io)?.starts_with(&GZIP_MAGIC)
        };
        Ok(if gzip { Box::new(MultiGzDecoder::new(raw)) } else { Box::new(raw) })
    }
}

/// A reader that counts the bytes read through it.
struct Counted {
    inner: Box<dyn Read + Send>,
    read: Arc<AtomicU64>,
}

impl Read for Counted {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(out)?;
        // Ordering: Relaxed; a progress figure, read by another thread now and then.
        self.read.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

/// What reading a trace found besides its requests.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReadStats {
    /// Valid records read.
    pub records: u64,
    /// Lines skipped as invalid (only with `skip_invalid`).
    pub skipped: u64,
    /// Per file that has timestamps stepping back in time: its name and what was seen.
    pub time_steps_back: Vec<(String, TimeCheck)>,
}

/// Bytes read from a file at a time, and about the text handed to the parser threads at once.
const CHUNK_BYTES: usize = 1 << 20;
/// Below this many bytes, a chunk is parsed on the reading thread alone.
const PARALLEL_MIN_BYTES: usize = 128 << 10;

/// Reads traces into batches of requests. See the [module docs](self).
#[derive(Debug)]
pub struct TraceReader {
    sources: Vec<Source>,
    hasher: DynamoHasher,
    skip_invalid: bool,
    threads: usize,
    read: Arc<AtomicU64>,
}

impl TraceReader {
    /// A reader of `sources`, one after another, whose token records are hashed by `hasher`;
    /// lines are parsed on up to `threads` threads.
    pub fn new(
        sources: Vec<Source>,
        hasher: DynamoHasher,
        skip_invalid: bool,
        threads: usize,
    ) -> TraceReader {
        TraceReader { sources, hasher, skip_invalid, threads, read: Arc::default() }
    }

    /// A counter of the stored bytes read so far, for progress.
    pub fn bytes_read(&self) -> Arc<AtomicU64> {
        Arc::clone(&self.read)
    }

    /// Reads every source, handing `each` the requests in order, a batch at a time. Stops at
    /// the first bad line (unless skipping them), the first read error, or the first error
    /// `each` returns.
    pub fn read<E: From<TraceFileError>>(
        &self,
        mut each: impl FnMut(Vec<Request>) -> Result<(), E>,
    ) -> Result<ReadStats, E> {
        let mut stats = ReadStats::default();
        for source in &self.sources {
            let name = source.name();
            let mut reader = source.open(Arc::clone(&self.read))?;
            let mut time = TimeCheck::default();
            let mut lines = Lines::new();
            let mut buf = vec![0u8; CHUNK_BYTES];
            let mut piece = |piece: Piece<'_>| -> Result<(), E> {
                let batch = match piece {
                    Piece::TooLong { .. } if self.skip_invalid => {
                        stats.skipped += 1;
                        return Ok(());
                    }
                    Piece::TooLong { line } => {
                        return Err(
                            TraceFileError::line(&name, line, TraceError::LineTooLong).into()
                        );
                    }
                    Piece::Lines { first, text } => self.parse(&name, first, text)?,
                };
                stats.records += batch.requests.len() as u64;
                stats.skipped += batch.skipped;
                time = time.then(batch.time);
                each(batch.requests)
            };
            loop {
                let n = read_full(&mut reader, &mut buf)
                    .map_err(|error| TraceFileError::Io { name: name.clone(), error })?;
                if n == 0 {
                    break;
                }
                lines.feed(&buf[..n], &mut piece)?;
            }
            lines.finish(&mut piece)?;
            if time.backwards > 0 {
                stats.time_steps_back.push((name, time));
            }
        }
        Ok(stats)
    }

    /// Parses whole lines (the first numbered `first`), split among the threads.
    fn parse(&self, name: &str, first: u64, text: &[u8]) -> Result<Parsed, TraceFileError> {
        let parts = self.threads.clamp(1, text.len() / PARALLEL_MIN_BYTES + 1);
        if parts == 1 {
            return parse_lines(name, first, text, &self.hasher, self.skip_invalid);
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
        let (hasher, skip) = (&self.hasher, self.skip_invalid);
        let results: Vec<Result<Parsed, TraceFileError>> = std::thread::scope(|scope| {
            let handles: Vec<_> = pieces[1..]
                .iter()
                .map(|&(piece, number)| {
                    scope.spawn(move || parse_lines(name, number, piece, hasher, skip))
                })
                .collect();
            let (piece, number) = pieces[0];
            std::iter::once(parse_lines(name, number, piece, hasher, skip))
                .chain(handles.into_iter().map(|h| h.join().expect("a parser thread panicked")))
                .collect()
        });
        let mut whole = Parsed::default();
        for part in results {
            let part = part?;
            whole.requests.extend(part.requests);
            whole.skipped += part.skipped;
            whole.time = whole.time.then(part.time);
        }
        Ok(whole)
    }
}

/// Reads until `buf` is full or the input ends; returns the bytes read.
fn read_full(reader: &mut dyn Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match reader.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// The records of some whole lines.
#[derive(Debug, Default)]
struct Parsed {
    requests: Vec<Request>,
    skipped: u64,
    time: TimeCheck,
}

/// Parses whole lines on this thread (see [`TraceReader::parse`]).
fn parse_lines(
    name: &str,
    first: u64,
    text: &[u8],
    hasher: &DynamoHasher,
    skip_invalid: bool,
) -> Result<Parsed, TraceFileError> {
    let mut parsed = Parsed::default();
    for (number, line) in numbered(first, text) {
        match parse_line(line, hasher) {
            Ok(Some(request)) => {
                parsed.time.observe(number, request.timestamp);
                parsed.requests.push(request);
            }
            Ok(None) => {}
            Err(_) if skip_invalid => parsed.skipped += 1,
            Err(error) => return Err(TraceFileError::line(name, number, error)),
        }
    }
    Ok(parsed)
}

/// The number of records in `sources`, read once before the replay (see the [module
/// docs](self)): their non-blank lines, or, when bad lines are to be skipped, their valid
/// records. Fails on a source that cannot be read twice.
pub fn count_records(
    sources: &[Source],
    hasher: &DynamoHasher,
    skip_invalid: bool,
    threads: usize,
) -> Result<u64, TraceFileError> {
    if let Some(pipe) = sources.iter().find(|s| !s.rereadable()) {
        return Err(TraceFileError::CannotCount { name: pipe.name() });
    }
    if skip_invalid {
        let reader = TraceReader::new(sources.to_vec(), *hasher, true, threads);
        return reader.read(|_| Ok::<(), TraceFileError>(())).map(|stats| stats.records);
    }
    let mut records = 0;
    for source in sources {
        let mut reader = source.open(Arc::default())?;
        let name = source.name();
        let mut lines = Lines::new();
        let mut buf = vec![0u8; CHUNK_BYTES];
        let mut count = |piece: Piece<'_>| -> Result<(), TraceFileError> {
            if let Piece::Lines { first, text } = piece {
                records += numbered(first, text)
                    .filter(|(_, l)| !l.iter().all(u8::is_ascii_whitespace))
                    .count() as u64;
            }
            Ok(())
        };
        loop {
            let n = read_full(&mut reader, &mut buf)
                .map_err(|error| TraceFileError::Io { name: name.clone(), error })?;
            if n == 0 {
                break;
            }
            lines.feed(&buf[..n], &mut count)?;
        }
        lines.finish(&mut count)?;
    }
    Ok(records)
}

/// How many threads parse (and replay) a trace: the machine's parallelism, at most 8.
pub fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().min(8))
}

/// Reads every request of `sources` into memory (for tests and benches of modest traces;
/// replays stream instead).
pub fn load(
    sources: Vec<Source>,
    hasher: &DynamoHasher,
    skip_invalid: bool,
    threads: usize,
) -> Result<(Vec<Request>, ReadStats), TraceFileError> {
    let mut requests = Vec::new();
    let reader = TraceReader::new(sources, *hasher, skip_invalid, threads);
    let stats = reader.read(|batch| {
        requests.extend(batch);
        Ok::<(), TraceFileError>(())
    })?;
    Ok((requests, stats))
}

/// A path's absolute form, for telling whether two names are the same file (the file need not
/// exist: its directory is resolved).
pub fn same_file(a: &Path, b: &Path) -> bool {
    let resolve = |p: &Path| {
        p.canonicalize().ok().or_else(|| {
            let dir = p.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
            Some(dir.canonicalize().ok()?.join(p.file_name()?))
        })
    };
    matches!((resolve(a), resolve(b)), (Some(a), Some(b)) if a == b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_text(text: &[u8], skip: bool, threads: usize) -> Result<Loaded, TraceFileError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        std::fs::write(&path, text).unwrap();
        let (requests, stats) =
            load(vec![Source::Path(path)], &DynamoHasher::new(4).unwrap(), skip, threads)?;
        Ok(Loaded { requests, stats })
    }

    #[derive(Debug)]
    struct Loaded {
        requests: Vec<Request>,
        stats: ReadStats,
    }

    #[test]
    fn the_bundled_trace_has_its_documented_size() {
        let hasher = DynamoHasher::new(512).unwrap();
        let (requests, stats) = load(vec![Source::Bundled], &hasher, false, 2).unwrap();
        assert_eq!(requests.len(), 3993);
        assert_eq!(stats.records, 3993);
        let tokens: u64 = requests.iter().map(|r| r.prompt_tokens).sum();
        assert_eq!(tokens, 61_194_628);
        let blocks: usize = requests.iter().map(|r| r.prompt_ids.len()).sum();
        assert_eq!(blocks, 121_877);
        assert_eq!(count_records(&[Source::Bundled], &hasher, false, 2).unwrap(), 3993);
        assert_eq!(count_records(&[Source::Bundled], &hasher, true, 2).unwrap(), 3993);
    }

    #[test]
    fn errors_name_file_line_and_column_and_skipping_counts() {
        let text = b"{\"tokens\": [1,2,3,4]}\n\n{\"tokens\": [1, -1]}\n{\"tokens\": [5]}";
        let err = read_text(text, false, 2).unwrap_err().to_string();
        assert!(err.ends_with("t.jsonl:3:16: expected a token id (an integer in 0..=4294967295), found the number -1"), "{err}");
        let loaded = read_text(text, true, 2).unwrap();
        assert_eq!((loaded.requests.len(), loaded.stats.skipped), (2, 1));
    }

    /// A trace of several chunks, parsed by several threads, gives what parsing its lines one
    /// by one gives: the same requests in order, the same skip count, errors at the same line.
    #[test]
    fn chunked_parallel_reading_equals_line_by_line_parsing() {
        let hasher = DynamoHasher::new(4).unwrap();
        let mut text = b"\xEF\xBB\xBF".to_vec();
        let mut bad = Vec::new();
        for i in 0..120_000u32 {
            match i % 9973 {
                17 => {
                    bad.push(u64::from(i) + 1);
                    text.extend_from_slice(b"{\"tokens\": [1, 2, \"x\"]}\n");
                }
                5 => text.extend_from_slice(b"\n"),
                _ => text.extend_from_slice(
                    format!("{{\"tokens\": [{}, {i}, 3, 4, 5, {i}], \"timestamp\": {i}}}\n", i % 7)
                        .as_bytes(),
                ),
            }
        }
        assert!(text.len() > 2 * CHUNK_BYTES);
        let lines: Vec<_> =
            text[3..].split(|&b| b == b'\n').map(|l| parse_line(l, &hasher)).collect();
        let want: Vec<Request> = lines.iter().filter_map(|r| r.clone().ok().flatten()).collect();
        for threads in [1, 2, 3] {
            let loaded = read_text(&text, true, threads).unwrap();
            assert_eq!(loaded.stats.skipped, bad.len() as u64);
            assert!(loaded.requests == want, "threads {threads}");
            assert_eq!(loaded.stats.time_steps_back, []);
            let err = read_text(&text, false, threads).unwrap_err().to_string();
            assert!(err.contains(&format!("t.jsonl:{}:", bad[0])), "{err}");
        }
    }

    #[test]
    fn gzip_is_found_by_its_bytes_and_steps_back_in_time_are_reported() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let text = b"{\"timestamp\": 5, \"tokens\": [1]}\n{\"timestamp\": 3, \"tokens\": [2]}\n\
                     {\"timestamp\": 9, \"tokens\": [3]}\n{\"timestamp\": 1, \"tokens\": [4]}\n";
        let path = dir.path().join("no-gz-suffix.jsonl");
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(text).unwrap();
        std::fs::write(&path, gz.finish().unwrap()).unwrap();
        let hasher = DynamoHasher::new(4).unwrap();
        let (requests, stats) = load(vec![Source::Path(path.clone())], &hasher, false, 1).unwrap();
        assert_eq!(requests.len(), 4);
        let (name, time) = &stats.time_steps_back[0];
        assert_eq!((name.as_str(), time.backwards), (path.to_str().unwrap(), 2));
        assert_eq!((time.first_backward_line, time.latest), (Some(2), Some(9)));
    }

    #[test]
    fn pipes_cannot_be_counted_and_files_are_compared_by_place() {
        let hasher = DynamoHasher::new(4).unwrap();
        let err = count_records(&[Source::Stdin], &hasher, false, 1).unwrap_err();
        assert!(err.to_string().contains("--warmup-requests"), "{err}");
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.jsonl");
        std::fs::write(&a, b"").unwrap();
        let relative = dir.path().join(".").join("a.jsonl");
        assert!(same_file(&a, &relative));
        assert!(!same_file(&a, &dir.path().join("b.svg")));
        assert!(same_file(&dir.path().join("new.svg"), &dir.path().join("./new.svg")));
    }
}
