//! Reading request traces from files, streaming: plain or gzip (told by the first bytes, not
//! the name), one file after another, in bounded memory.
//!
//! Records are parsed by [`kvreuse_core::trace`]; this module adds the files. Each file's format
//! is the one given, or told from its first bytes ([`sniff`]). A [`TraceReader`] reads a chunk
//! of a file at a time, cuts JSONL into whole lines ([`Lines`]), parses the lines on up to
//! `threads` threads, and hands the requests out in batches, in order. Nothing is kept from one
//! batch to the next but the start of a line a chunk boundary cut, so memory is the chunk, a
//! batch and the decompressor's window, whatever the trace's length. Errors say
//! `file:line:column: what is wrong`; with `skip_invalid`, bad lines are counted instead.
//!
//! kv-cache-tester documents are conversations that run at once: they are read, each a chunk
//! and a request at a time, into a compact [`Conversations`] set, and handed out merged by time
//! once every file is read. A directory argument stands for its `.json` files (and
//! `.json.gz`), by name.
//!
//! A warm-up given as a share of the requests needs their number before the replay starts:
//! [`TraceReader::count_records`] reads the files once more, cheaply (lines are counted, not
//! parsed, unless bad ones are to be skipped). Standard input and other pipes cannot be read
//! twice: the first one's first bytes, read to tell its format, are kept for the replay
//! ([`TraceReader::open`]).

use std::fmt;
use std::fs::File;
use std::io::{self, BufReader, Read};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use flate2::read::MultiGzDecoder;
use kvreuse_core::chain::DynamoHasher;
use kvreuse_core::setup::{SetupError, TraceSettings};
pub use kvreuse_core::trace::MAX_LINE_BYTES;
use kvreuse_core::trace::document::Conversations;
use kvreuse_core::trace::lines::{Lines, Piece, numbered};
use kvreuse_core::trace::{
    Format, Request, SNIFF_BYTES, Sniffed, TimeCheck, TraceError, parse_bailian_line, parse_line,
    sniff,
};

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
    /// Something wrong in a document, at a JSON path.
    #[error("{name}: {error}")]
    Document {
        /// The file.
        name: String,
        /// What is wrong, and where.
        error: TraceError,
    },
    /// A directory holds no trace document.
    #[error("{name}: a directory with no .json files")]
    EmptyDirectory {
        /// The directory.
        name: String,
    },
    /// kv-cache-tester documents and JSONL traces in one run.
    #[error("{name}: {}", kvreuse_core::trace::MixedFormats(*format))]
    MixedFormats {
        /// The file that does not fit.
        name: String,
        /// Its format.
        format: Format,
    },
    /// The settings cannot be used (a block size the hash chains refuse).
    #[error(transparent)]
    Setup(#[from] SetupError),
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
    /// The sources of command-line arguments: `-` is standard input, a directory its `.json`
    /// and `.json.gz` files sorted by name; none is the bundled trace.
    pub fn from_args(paths: &[PathBuf]) -> Result<Vec<Source>, TraceFileError> {
        if paths.is_empty() {
            return Ok(vec![Source::Bundled]);
        }
        let mut sources = Vec::new();
        for path in paths {
            if path.as_os_str() == "-" {
                sources.push(Source::Stdin);
                continue;
            }
            if !path.is_dir() {
                sources.push(Source::Path(path.clone()));
                continue;
            }
            let name = path.display().to_string();
            let io = |error| TraceFileError::Io { name: name.clone(), error };
            let mut files: Vec<PathBuf> = std::fs::read_dir(path)
                .map_err(io)?
                .map(|entry| entry.map(|e| e.path()))
                .collect::<Result<Vec<_>, _>>()
                .map_err(io)?;
            files.retain(|f| {
                let file = f.file_name().unwrap_or_default().to_string_lossy();
                f.is_file() && (file.ends_with(".json") || file.ends_with(".json.gz"))
            });
            if files.is_empty() {
                return Err(TraceFileError::EmptyDirectory { name });
            }
            files.sort();
            sources.extend(files.into_iter().map(Source::Path));
        }
        Ok(sources)
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

    /// Whether it can be read only once: standard input, or a path that names a pipe or a
    /// device. (Not a path that cannot be read at all: opening it says why.)
    pub fn read_once(&self) -> bool {
        match self {
            Source::Path(path) => std::fs::metadata(path).is_ok_and(|m| !m.is_file()),
            Source::Stdin => true,
            Source::Bundled => false,
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

    /// Opens it, and tells its format from its first bytes (which the reader still yields).
    pub fn open_sniffed(
        &self,
        read: Arc<AtomicU64>,
    ) -> Result<(Box<dyn Read + Send>, Sniffed), TraceFileError> {
        let mut reader = self.open(read)?;
        let mut head = vec![0u8; SNIFF_BYTES];
        let n = read_full(&mut reader, &mut head)
            .map_err(|error| TraceFileError::Io { name: self.name(), error })?;
        head.truncate(n);
        let sniffed = sniff(&head);
        Ok((Box::new(io::Cursor::new(head).chain(reader)), sniffed))
    }

    /// Its format (and a kv-cache-tester document's block size), told from its first bytes.
    /// Nothing is told of a source that can be read only once (standard input, a pipe): this
    /// would consume the bytes it read. [`TraceReader::open`] tells a first such source's
    /// format and keeps it open.
    pub fn sniff(&self) -> Result<Sniffed, TraceFileError> {
        if !self.rereadable() {
            return Ok(Sniffed::default());
        }
        Ok(self.open_sniffed(Arc::default())?.1)
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
    /// Each file's format, and whether it was told from the file (rather than given); `None`
    /// when nothing told it (an empty file).
    pub formats: Vec<(String, Option<Format>, bool)>,
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

/// Block ids handed out at once from a merged conversation set (a batch holds whole requests,
/// at least one): batches of conversations with long prompts stay a few megabytes.
const BATCH_IDS: usize = 1 << 19;

/// How the lines of a JSONL file are read.
#[derive(Clone, Copy, Debug)]
enum LineFormat<'a> {
    /// Mooncake or token records, told apart per line; token records hashed by the hasher.
    MooncakeOrTokens(&'a DynamoHasher),
    /// Bailian records of this block size.
    Bailian(usize),
}

impl LineFormat<'_> {
    fn parse(self, line: &[u8]) -> Result<Option<Request>, TraceError> {
        match self {
            LineFormat::MooncakeOrTokens(hasher) => parse_line(line, hasher),
            LineFormat::Bailian(block_size) => parse_bailian_line(line, block_size),
        }
    }
}

/// Reads traces into batches of requests. See the [module docs](self).
pub struct TraceReader {
    sources: Vec<Source>,
    hasher: DynamoHasher,
    settings: TraceSettings,
    threads: usize,
    read: Arc<AtomicU64>,
    /// The first source, when [`open`](Self::open) read its first bytes and it cannot be read
    /// twice (standard input, a pipe): those bytes and the rest, for the first
    /// [`read`](Self::read) to go on from.
    held: Mutex<Option<(Box<dyn Read + Send>, Sniffed)>>,
}

impl fmt::Debug for TraceReader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TraceReader")
            .field("sources", &self.sources)
            .field("settings", &self.settings)
            .field("threads", &self.threads)
            .finish_non_exhaustive()
    }
}

impl TraceReader {
    /// A reader of `sources`, one after another, as `settings` say (format, block size,
    /// invalid lines, stagger); lines are parsed on up to `threads` threads. The settings are
    /// taken as they are: [`open`](Self::open) first settles them by the first source.
    pub fn new(
        sources: Vec<Source>,
        settings: &TraceSettings,
        threads: usize,
    ) -> Result<TraceReader, SetupError> {
        let hasher = settings.hasher()?;
        let settings = settings.clone();
        let (read, held) = (Arc::default(), Mutex::new(None));
        Ok(TraceReader { sources, hasher, settings, threads, read, held })
    }

    /// [`new`](Self::new), once the first source's first bytes have told its format (and a
    /// kv-cache-tester document's block size), which settle what `settings` leave open (see
    /// [`TraceSettings::settle`]); blank sources (empty, or whitespace only) before it are
    /// passed over. A first source that can be read only once (standard input, a pipe) stays
    /// open from there: the first [`read`](Self::read) goes on from the bytes read to tell, and
    /// loses none. A warm-up given as a share of the requests, which
    /// [`count_records`](Self::count_records) counts in a reading of its own, fails on such a
    /// source here, before anything is read from it.
    pub fn open(
        sources: Vec<Source>,
        settings: &mut TraceSettings,
        threads: usize,
    ) -> Result<TraceReader, TraceFileError> {
        if settings.warmup.needs_count()
            && let Some(pipe) = sources.iter().find(|s| s.read_once())
        {
            return Err(TraceFileError::CannotCount { name: pipe.name() });
        }
        let read = Arc::default();
        let mut held = None;
        // The first source that is not blank settles the settings: an empty file (or one of
        // blank lines) before it tells nothing. A source that can be read only once is sniffed
        // only first (kept open from there); one later ends the search.
        let mut told = Sniffed::default();
        for (at, source) in sources.iter().enumerate() {
            let sniffed = if source.rereadable() {
                source.sniff()?
            } else if at == 0 {
                let (reader, sniffed) = source.open_sniffed(Arc::clone(&read))?;
                held = Some((reader, sniffed));
                sniffed
            } else {
                break;
            };
            if !sniffed.blank {
                told = sniffed;
                break;
            }
        }
        settings.settle(told);
        let reader = TraceReader::new(sources, settings, threads)?;
        Ok(TraceReader { read, held: Mutex::new(held), ..reader })
    }

    /// A counter of the stored bytes read so far, for progress.
    pub fn bytes_read(&self) -> Arc<AtomicU64> {
        Arc::clone(&self.read)
    }

    /// Reads every source, handing `each` the requests in order, a batch at a time. Stops at
    /// the first bad line (unless skipping them), the first read error, or the first error
    /// `each` returns. JSONL files are handed out as they are read; kv-cache-tester documents
    /// once all are read, merged by time.
    pub fn read<E: From<TraceFileError>>(
        &self,
        mut each: impl FnMut(Vec<Request>) -> Result<(), E>,
    ) -> Result<ReadStats, E> {
        let mut stats = ReadStats::default();
        let mut conversations: Option<Conversations> = None;
        let mut lines_read = false;
        // The first source as `open` left it, if it cannot be opened again.
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner).take();
        for source in &self.sources {
            let name = source.name();
            let (mut reader, sniffed) = match held.take() {
                Some(opened) => opened,
                None => source.open_sniffed(Arc::clone(&self.read))?,
            };
            let format = self.settings.format.or(sniffed.format);
            stats.formats.push((name.clone(), format, self.settings.format.is_none()));
            let mixed = |format| TraceFileError::MixedFormats { name: name.clone(), format };
            if format == Some(Format::KvcacheTester) {
                if lines_read {
                    return Err(mixed(Format::KvcacheTester).into());
                }
                let set = conversations.get_or_insert_with(|| {
                    Conversations::new(self.settings.block_size, self.settings.stagger_ms)
                });
                read_document(set, &name, &mut reader)?;
                continue;
            }
            if conversations.is_some() {
                return Err(mixed(format.unwrap_or(Format::Mooncake)).into());
            }
            lines_read = true;
            let format = match format {
                Some(Format::Bailian) => LineFormat::Bailian(self.settings.block_size),
                _ => LineFormat::MooncakeOrTokens(&self.hasher),
            };
            self.read_lines(&name, &mut reader, format, &mut stats, &mut each)?;
        }
        if let Some(set) = conversations {
            stats.records = set.len() as u64;
            let mut batch = Vec::new();
            let mut ids = 0;
            for request in set.into_requests() {
                ids += request.prompt_ids.len();
                batch.push(request);
                if ids >= BATCH_IDS {
                    each(core::mem::take(&mut batch))?;
                    ids = 0;
                }
            }
            if !batch.is_empty() {
                each(batch)?;
            }
        }
        Ok(stats)
    }

    /// Reads one JSONL file, handing `each` its requests a chunk of lines at a time.
    fn read_lines<E: From<TraceFileError>>(
        &self,
        name: &str,
        reader: &mut dyn Read,
        format: LineFormat<'_>,
        stats: &mut ReadStats,
        each: &mut impl FnMut(Vec<Request>) -> Result<(), E>,
    ) -> Result<(), E> {
        let mut time = TimeCheck::default();
        let mut lines = Lines::new();
        let mut buf = vec![0u8; CHUNK_BYTES];
        let mut piece = |piece: Piece<'_>| -> Result<(), E> {
            let batch = match piece {
                Piece::TooLong { .. } if self.settings.skip_invalid => {
                    stats.skipped += 1;
                    return Ok(());
                }
                Piece::TooLong { line } => {
                    return Err(TraceFileError::line(name, line, TraceError::LineTooLong).into());
                }
                Piece::Lines { first, text } => self.parse(name, format, first, text)?,
            };
            stats.records += batch.requests.len() as u64;
            stats.skipped += batch.skipped;
            time = time.then(batch.time);
            each(batch.requests)
        };
        loop {
            let n = read_full(reader, &mut buf)
                .map_err(|error| TraceFileError::Io { name: name.into(), error })?;
            if n == 0 {
                break;
            }
            lines.feed(&buf[..n], &mut piece)?;
        }
        lines.finish(&mut piece)?;
        if time.backwards > 0 {
            stats.time_steps_back.push((name.into(), time));
        }
        Ok(())
    }

    /// Parses whole lines (the first numbered `first`), split among the threads.
    fn parse(
        &self,
        name: &str,
        format: LineFormat<'_>,
        first: u64,
        text: &[u8],
    ) -> Result<Parsed, TraceFileError> {
        let skip = self.settings.skip_invalid;
        let parts = self.threads.clamp(1, text.len() / PARALLEL_MIN_BYTES + 1);
        if parts == 1 {
            return parse_lines(name, first, text, format, skip);
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
        let results: Vec<Result<Parsed, TraceFileError>> = std::thread::scope(|scope| {
            let handles: Vec<_> = pieces[1..]
                .iter()
                .map(|&(piece, number)| {
                    scope.spawn(move || parse_lines(name, number, piece, format, skip))
                })
                .collect();
            let (piece, number) = pieces[0];
            std::iter::once(parse_lines(name, number, piece, format, skip))
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

/// Reads one kv-cache-tester document into `set`, a chunk at a time.
fn read_document(
    set: &mut Conversations,
    name: &str,
    reader: &mut dyn Read,
) -> Result<(), TraceFileError> {
    let document_error = |error| TraceFileError::Document { name: name.into(), error };
    let mut document = set.document(name);
    let mut buf = vec![0u8; CHUNK_BYTES];
    loop {
        let n = read_full(reader, &mut buf)
            .map_err(|error| TraceFileError::Io { name: name.into(), error })?;
        if n == 0 {
            break;
        }
        document.feed(&buf[..n]).map_err(document_error)?;
    }
    document.finish().map(|_| ()).map_err(document_error)
}

/// Parses whole lines on this thread (see [`TraceReader::parse`]).
fn parse_lines(
    name: &str,
    first: u64,
    text: &[u8],
    format: LineFormat<'_>,
    skip_invalid: bool,
) -> Result<Parsed, TraceFileError> {
    let mut parsed = Parsed::default();
    for (number, line) in numbered(first, text) {
        match format.parse(line) {
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

impl TraceReader {
    /// The number of records in the sources, read once before the replay (see the [module
    /// docs](self)): their non-blank lines, or, when bad lines are to be skipped (or the
    /// sources are documents), their valid records. Fails on a source that cannot be read
    /// twice.
    pub fn count_records(&self) -> Result<u64, TraceFileError> {
        if let Some(pipe) = self.sources.iter().find(|s| s.read_once()) {
            return Err(TraceFileError::CannotCount { name: pipe.name() });
        }
        let documents = |s: &Source| {
            let format =
                self.settings.format.map_or_else(|| s.sniff().map(|s| s.format), |f| Ok(Some(f)));
            format.map(|f| f == Some(Format::KvcacheTester))
        };
        let any_document = self.sources.iter().map(documents).collect::<Result<Vec<_>, _>>()?;
        if self.settings.skip_invalid || any_document.contains(&true) {
            let counter = self.clone_settings();
            return counter.read(|_| Ok::<(), TraceFileError>(())).map(|stats| stats.records);
        }
        let mut records = 0;
        for source in &self.sources {
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

    fn clone_settings(&self) -> TraceReader {
        TraceReader {
            sources: self.sources.clone(),
            hasher: self.hasher,
            settings: self.settings.clone(),
            threads: self.threads,
            read: Arc::default(),
            held: Mutex::new(None),
        }
    }
}

/// How many threads parse (and replay) a trace: the machine's parallelism, at most 8.
pub fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().min(8))
}

/// Reads every request of `sources` into memory (for tests and benches of modest traces;
/// replays stream instead).
pub fn load(
    sources: Vec<Source>,
    settings: &TraceSettings,
    threads: usize,
) -> Result<(Vec<Request>, ReadStats), TraceFileError> {
    let mut requests = Vec::new();
    let reader = TraceReader::new(sources, settings, threads)?;
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

    fn settings(block_size: usize, skip_invalid: bool) -> TraceSettings {
        let mut settings = TraceSettings { skip_invalid, ..TraceSettings::default() };
        settings.set_block_size(block_size).unwrap();
        settings
    }

    fn read_text(text: &[u8], skip: bool, threads: usize) -> Result<Loaded, TraceFileError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        std::fs::write(&path, text).unwrap();
        let (requests, stats) = load(vec![Source::Path(path)], &settings(4, skip), threads)?;
        Ok(Loaded { requests, stats })
    }

    #[derive(Debug)]
    struct Loaded {
        requests: Vec<Request>,
        stats: ReadStats,
    }

    #[test]
    fn the_bundled_trace_has_its_documented_size() {
        let (requests, stats) = load(vec![Source::Bundled], &settings(512, false), 2).unwrap();
        assert_eq!(requests.len(), 3993);
        assert_eq!(stats.records, 3993);
        let tokens: u64 = requests.iter().map(|r| r.prompt_tokens).sum();
        assert_eq!(tokens, 61_194_628);
        let blocks: usize = requests.iter().map(|r| r.prompt_ids.len()).sum();
        assert_eq!(blocks, 121_877);
        for skip in [false, true] {
            let reader = TraceReader::new(vec![Source::Bundled], &settings(512, skip), 2).unwrap();
            assert_eq!(reader.count_records().unwrap(), 3993);
        }
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
        let (requests, stats) =
            load(vec![Source::Path(path.clone())], &settings(4, false), 1).unwrap();
        assert_eq!(requests.len(), 4);
        assert_eq!(stats.formats, [(path.display().to_string(), Some(Format::Tokens), true)]);
        let (name, time) = &stats.time_steps_back[0];
        assert_eq!((name.as_str(), time.backwards), (path.to_str().unwrap(), 2));
        assert_eq!((time.first_backward_line, time.latest), (Some(2), Some(9)));
    }

    #[test]
    fn pipes_cannot_be_counted_and_files_are_compared_by_place() {
        let reader = TraceReader::new(vec![Source::Stdin], &settings(4, false), 1).unwrap();
        let err = reader.count_records().unwrap_err();
        assert!(err.to_string().contains("--warmup-requests"), "{err}");
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.jsonl");
        std::fs::write(&a, b"").unwrap();
        let relative = dir.path().join(".").join("a.jsonl");
        assert!(same_file(&a, &relative));
        assert!(!same_file(&a, &dir.path().join("b.svg")));
        assert!(same_file(&dir.path().join("new.svg"), &dir.path().join("./new.svg")));
    }

    /// Bailian lines and kv-cache-tester documents (a directory of them) are told by their
    /// first bytes; documents and JSONL do not mix.
    #[test]
    fn formats_are_told_per_file_and_documents_replay_together() {
        let dir = tempfile::tempdir().unwrap();
        let bailian = dir.path().join("b.jsonl");
        std::fs::write(
            &bailian,
            "{\"chat_id\": 0, \"parent_chat_id\": -1, \"timestamp\": 0.5, \"input_length\": 20, \"output_length\": 3, \"turn\": 1, \"hash_ids\": [1, 2]}\n",
        )
        .unwrap();
        let (requests, stats) =
            load(vec![Source::Path(bailian.clone())], &settings(16, false), 1).unwrap();
        assert_eq!(stats.formats[0].1, Some(Format::Bailian));
        assert_eq!((requests[0].timestamp, requests[0].prompt_tokens), (Some(500), 20));

        let docs = dir.path().join("conversations");
        std::fs::create_dir(&docs).unwrap();
        for (name, t) in [("b.json", 5), ("a.json", 0)] {
            let doc = format!(
                r#"{{"id": "{name}", "block_size": 4, "requests": [{{"t": {t}, "in": 8, "hash_ids": [1, 2]}}]}}"#
            );
            std::fs::write(docs.join(name), doc).unwrap();
        }
        std::fs::write(docs.join("notes.txt"), "not a trace").unwrap();
        let sources = Source::from_args(std::slice::from_ref(&docs)).unwrap();
        assert_eq!(sources.len(), 2, "only .json files, sorted: {sources:?}");
        let mut with_stagger = settings(4, false);
        with_stagger.stagger_ms = 10_000;
        let (requests, stats) = load(sources.clone(), &with_stagger, 1).unwrap();
        // a.json starts first (at 0), b.json 10 s later: at 0 and 15 s.
        let times: Vec<_> = requests.iter().map(|r| r.timestamp).collect();
        assert_eq!(times, [Some(0), Some(15_000)]);
        assert_eq!(stats.records, 2);
        let reader = TraceReader::new(sources.clone(), &with_stagger, 1).unwrap();
        assert_eq!(reader.count_records().unwrap(), 2);
        let mut mixed = sources;
        mixed.push(Source::Path(bailian));
        let err = load(mixed, &settings(4, false), 1).unwrap_err().to_string();
        assert!(err.contains("among kv-cache-tester documents"), "{err}");
        let empty = dir.path().join("empty");
        std::fs::create_dir(&empty).unwrap();
        assert!(Source::from_args(&[empty]).unwrap_err().to_string().contains("no .json files"));
    }
}
