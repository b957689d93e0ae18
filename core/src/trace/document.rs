//! kv-cache-tester conversations (`callanjfox/kv-cache-tester`, Apache-2.0): one JSON document
//! per conversation, replayed together as concurrent conversations.
//!
//! A document is `{"id", "block_size", "hash_id_scope", ..., "requests": [...]}`. A request is
//! `{"t", "type", "in", "out", "hash_ids", ...}`: `t` in seconds from the conversation's start,
//! `in` prompt tokens, `hash_ids` the ids of its *complete* blocks (the tail past the last
//! complete block is never hashed, so it can never be a hit). An entry of type `subagent` runs a
//! sub-agent: its own `requests`, whose `t` count from the sub-agent's start. The entry's `t` is
//! when the sub-agent finished (in the published traces it sits in the parent's list by
//! completion time, and its last request ends just before it), so the sub-agent started at
//! `t - duration_ms`; an entry without `duration_ms` (launched asynchronously) started at its
//! `t`.
//!
//! Ids are the conversation's own when `hash_id_scope` is `local` (or absent): they are
//! namespaced by the document's `id` (two documents never share ids; the same document given
//! twice does). With `global`, ids are shared across documents. Sub-agents use their parent's
//! namespace.
//!
//! A document may be a gigabyte on a single line: [`Conversations::document`] reads it from
//! chunks of any size, cutting out one element of its `requests` array at a time. Each request
//! is kept compactly (only the ids it adds to the previous request of its list: a conversation
//! mostly grows its prompt), and [`Conversations::into_requests`] hands them out merged by
//! time: document `k` (in the order given) starts at `k` times the stagger, requests go by start
//! plus `t`, ties by document, then by order within the document.

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::borrow::BorrowMut;
use core::fmt;
use core::ops::Range;

use xxhash_rust::xxh3::{xxh3_64, xxh3_64_with_seed};

use super::{MAX_LINE_BYTES, Request, Session, TraceError};
use crate::chain::check_block_size;
use crate::json::{Json, JsonError, Seen};

/// A conversation set being read. See the [module docs](self).
#[derive(Debug)]
pub struct Conversations {
    block_size: usize,
    stagger_ms: u64,
    documents: Vec<Document>,
    entries: Vec<Entry>,
    /// The ids requests add to the previous request of their list, raw (namespaced when
    /// handed out).
    pool: Vec<u64>,
    /// Lists of requests so far (a conversation's own, and each sub-agent's).
    lists: u32,
}

#[derive(Debug)]
struct Document {
    /// What local ids are keyed by; `None` for `global` ids.
    namespace: Option<u64>,
    /// The conversation's key (for routing by session).
    key: u64,
}

#[derive(Clone, Debug)]
struct Entry {
    time_ms: u64,
    document: u32,
    list: u32,
    /// Leading ids shared with the previous request of the list.
    shared: u32,
    /// The ids after those, in `pool`.
    added: Range<usize>,
    prompt_tokens: u64,
    output_tokens: u64,
}

impl Conversations {
    /// An empty set for blocks of `block_size` tokens; document `k` starts at `k * stagger_ms`.
    pub fn new(block_size: usize, stagger_ms: u64) -> Conversations {
        Conversations {
            block_size,
            stagger_ms,
            documents: Vec::new(),
            entries: Vec::new(),
            pool: Vec::new(),
            lists: 0,
        }
    }

    /// Requests read so far.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no request has been read.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Documents read so far.
    pub fn documents(&self) -> usize {
        self.documents.len()
    }

    /// Starts reading the next document; `name` (its file's) stands in for a missing `id`.
    pub fn document(&mut self, name: &str) -> DocumentReader<&mut Conversations> {
        DocumentReader::new(self, name)
    }

    /// Like [`document`](Self::document), for a reader that must outlive a borrow (one fed
    /// across calls from JavaScript): the reader holds the set, and
    /// [`finish`](DocumentReader::finish) gives it back.
    pub fn into_document(self, name: &str) -> DocumentReader<Conversations> {
        DocumentReader::new(self, name)
    }

    /// The requests, merged by time (see the [module docs](self)).
    pub fn into_requests(self) -> impl Iterator<Item = Request> {
        // Entries were kept document by document, each in its own order, so (time, index) is
        // the documented order: by time, then document, then order within the document. The
        // key is unique, so any sort gives that one order.
        let order: Vec<(u64, usize)> =
            self.entries.iter().enumerate().map(|(i, e)| (e.time_ms, i)).collect();
        let order = crate::sort::sort_unique(order);
        // Each list's previous request's ids, freed after its last request.
        let mut remaining = alloc::vec![0u32; self.lists as usize];
        for entry in &self.entries {
            remaining[entry.list as usize] += 1;
        }
        let mut buffers: Vec<Vec<u64>> = alloc::vec![Vec::new(); self.lists as usize];
        let Conversations { entries, pool, documents, .. } = self;
        order.into_iter().map(move |(_, i)| {
            let entry = &entries[i];
            let list = entry.list as usize;
            let ids = &mut buffers[list];
            ids.truncate(entry.shared as usize);
            ids.extend_from_slice(&pool[entry.added.clone()]);
            let document = &documents[entry.document as usize];
            let prompt_ids = match document.namespace {
                Some(ns) => {
                    ids.iter().map(|&id| xxh3_64_with_seed(&id.to_le_bytes(), ns)).collect()
                }
                None => ids.clone(),
            };
            remaining[list] -= 1;
            if remaining[list] == 0 {
                buffers[list] = Vec::new();
            }
            Request {
                timestamp: Some(entry.time_ms),
                prompt_tokens: entry.prompt_tokens,
                prompt_ids,
                output_tokens: entry.output_tokens,
                output_ids: Vec::new(),
                session: Session::Conversation(document.key),
            }
        })
    }
}

/// Reads one document from chunks into the set `S` holds. See [`Conversations::document`].
#[derive(Debug)]
pub struct DocumentReader<S> {
    set: S,
    index: u32,
    start_ms: u64,
    own_list: u32,
    name: String,
    id: Option<String>,
    block_size: Option<u64>,
    global: bool,
    seen: Seen,
    splitter: Splitter,
    /// The ids of the conversation's previous request.
    previous: Vec<u64>,
}

impl<S: BorrowMut<Conversations>> DocumentReader<S> {
    fn new(mut holder: S, name: &str) -> DocumentReader<S> {
        let set = holder.borrow_mut();
        let index = set.documents.len() as u32;
        let own_list = set.lists;
        set.lists += 1;
        DocumentReader {
            start_ms: set.stagger_ms.saturating_mul(u64::from(index)),
            index,
            own_list,
            set: holder,
            name: name.into(),
            id: None,
            block_size: None,
            global: false,
            seen: Seen::default(),
            splitter: Splitter::default(),
            previous: Vec::new(),
        }
    }

    /// Takes the next chunk of the document.
    pub fn feed(&mut self, chunk: &[u8]) -> Result<(), TraceError> {
        let mut splitter = core::mem::take(&mut self.splitter);
        let result = splitter.feed(chunk, &mut |piece| match piece {
            Piece::Member { key, value } => self.member(key, value),
            Piece::Element { index, value } => self.element(index, value),
        });
        self.splitter = splitter;
        result
    }

    /// Ends the document: checks that it was whole and had its requests, and adds it to the
    /// set, which it gives back.
    pub fn finish(mut self) -> Result<S, TraceError> {
        self.splitter.finish()?;
        if !self.splitter.saw_requests {
            return Err(error(
                &"requests",
                "missing (a kv-cache-tester document has a `requests` array)",
            ));
        }
        let key = xxh3_64(self.id.as_deref().unwrap_or(&self.name).as_bytes());
        let document = Document { namespace: (!self.global).then_some(key), key };
        self.set.borrow_mut().documents.push(document);
        Ok(self.set)
    }

    /// A top-level member other than `requests`.
    fn member(&mut self, key: &[u8], value: &[u8]) -> Result<(), TraceError> {
        const KEYS: [&str; 3] = ["id", "block_size", "hash_id_scope"];
        let mut json = Json::new(value);
        let Some(index) = KEYS.iter().position(|&k| k.as_bytes() == key) else {
            // Not used, but checked all the same.
            let path = String::from_utf8_lossy(key);
            return at(json.skip().and_then(|()| json.end()), &path);
        };
        let path = KEYS[index];
        at(self.seen.first(index, key, &json), &path)?;
        match index {
            0 => self.id = Some(at(json.string(), &path)?.into_owned()),
            1 => {
                let own = at(json.u64(), &path)?;
                let replay = self.set.borrow().block_size as u64;
                if let Err(e) = check_block_size(usize::try_from(own).unwrap_or(usize::MAX)) {
                    return Err(error(&path, format!("is {own}: {e}")));
                }
                if own != replay {
                    return Err(error(
                        &path,
                        format!(
                            "is {own}, but the replay's block size is {replay} (give a block size of {own}, or none)"
                        ),
                    ));
                }
                self.block_size = Some(own);
            }
            _ => {
                self.global = match at(json.string(), &path)?.as_ref() {
                    "local" => false,
                    "global" => true,
                    other => {
                        return Err(error(
                            &path,
                            format!(
                                "is {}, not \"local\" or \"global\"",
                                crate::names::Quoted(other)
                            ),
                        ));
                    }
                };
            }
        }
        at(json.end(), &path)
    }

    /// One element of `requests`: a request, or a sub-agent with its requests.
    fn element(&mut self, index: usize, value: &[u8]) -> Result<(), TraceError> {
        let place = Place { index, inner: None };
        let element = read_element(value, place, self.set.borrow().block_size)?;
        match element.requests {
            None => {
                let (start, list) = (self.start_ms, self.own_list);
                let mut previous = core::mem::take(&mut self.previous);
                self.push(list, start, element.own, &mut previous);
                self.previous = previous;
            }
            Some(requests) => {
                let started = match element.duration_ms {
                    Some(duration) => element.own.t_ms.saturating_sub(duration),
                    None => element.own.t_ms,
                };
                let set = self.set.borrow_mut();
                let list = set.lists;
                set.lists += 1;
                let mut previous = Vec::new();
                for request in requests {
                    self.push(list, self.start_ms.saturating_add(started), request, &mut previous);
                }
            }
        }
        Ok(())
    }

    /// Keeps a request of list `list`, which starts at `base_ms`: only the ids it adds to
    /// `previous`, the list's previous request's (which it then replaces).
    fn push(&mut self, list: u32, base_ms: u64, request: Read, previous: &mut Vec<u64>) {
        let shared = previous.iter().zip(&request.ids).take_while(|(a, b)| a == b).count();
        let set = self.set.borrow_mut();
        let start = set.pool.len();
        set.pool.extend_from_slice(&request.ids[shared..]);
        set.entries.push(Entry {
            time_ms: base_ms.saturating_add(request.t_ms),
            document: self.index,
            list,
            shared: shared as u32,
            added: start..set.pool.len(),
            prompt_tokens: request.prompt_tokens,
            output_tokens: request.output_tokens,
        });
        *previous = request.ids;
    }
}

/// An error at `path` in the document (the path is written out only then).
fn error(path: &dyn fmt::Display, message: impl Into<String>) -> TraceError {
    TraceError::Document { path: path.to_string(), message: message.into() }
}

/// A JSON error at `path` in the document.
fn at<T>(result: Result<T, JsonError>, path: &dyn fmt::Display) -> Result<T, TraceError> {
    result.map_err(|e| error(path, e.message))
}

/// Where an element of `requests` is: `requests[index]`, or the request `inner` of the
/// sub-agent there. Kept as numbers, so a path is formatted only for an error.
#[derive(Clone, Copy, Debug)]
struct Place {
    index: usize,
    inner: Option<usize>,
}

impl fmt::Display for Place {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "requests[{}]", self.index)?;
        match self.inner {
            Some(inner) => write!(f, ".requests[{inner}]"),
            None => Ok(()),
        }
    }
}

/// A request as read: its time from its list's start, tokens, and ids.
#[derive(Debug, Default)]
struct Read {
    t_ms: u64,
    prompt_tokens: u64,
    output_tokens: u64,
    ids: Vec<u64>,
}

/// An element of `requests` as read: a request, or (with `requests`) a sub-agent.
#[derive(Debug, Default)]
struct Element {
    own: Read,
    duration_ms: Option<u64>,
    requests: Option<Vec<Read>>,
}

/// Reads the element of `requests` at `place`: a request, or a sub-agent entry and its
/// requests. A request's `hash_ids` may not outnumber the complete blocks of its `in`.
fn read_element(value: &[u8], place: Place, block_size: usize) -> Result<Element, TraceError> {
    let mut json = Json::new(value);
    let element = read_object(&mut json, place, block_size)?;
    at(json.end(), &place)?;
    Ok(element)
}

fn read_object(
    json: &mut Json<'_>,
    place: Place,
    block_size: usize,
) -> Result<Element, TraceError> {
    const KEYS: [&str; 7] = ["t", "type", "in", "out", "hash_ids", "duration_ms", "requests"];
    let mut element = Element::default();
    let (mut seen, mut subagent, mut t, mut input) = (Seen::default(), false, None, None);
    let mut ids = None;
    let mut failed: Option<TraceError> = None;
    let result = json.object(|json, key| {
        let Some(index) = KEYS.iter().position(|&k| k.as_bytes() == key) else {
            return json.skip();
        };
        let read: Result<(), JsonError> = (|| {
            seen.first(index, key, json)?;
            match index {
                0 => t = Some(json.decimal(3)?),
                1 => subagent = json.string()? == "subagent",
                2 => input = Some(json.u64()?),
                3 => element.own.output_tokens = json.u64()?,
                4 => json.u64_array(ids.insert(Vec::new()))?,
                5 => element.duration_ms = if json.null() { None } else { Some(json.decimal(0)?) },
                _ if place.inner.is_none() => {
                    let mut requests = Vec::new();
                    let mut j = 0;
                    json.array(|json| {
                        let inner = Place { inner: Some(j), ..place };
                        j += 1;
                        match read_object(json, inner, block_size) {
                            Ok(element) => {
                                requests.push(element.own);
                                Ok(())
                            }
                            Err(e) => {
                                failed = Some(e);
                                Err(json.error("stop"))
                            }
                        }
                    })?;
                    element.requests = Some(requests);
                }
                _ => json.skip()?,
            }
            Ok(())
        })();
        read.inspect_err(|e| {
            if failed.is_none() {
                let field = format_args!("{place}.{}", KEYS[index]);
                failed = Some(error(&field, e.message.clone()));
            }
        })
    });
    if let Err(e) = result {
        return Err(failed.unwrap_or_else(|| error(&place, e.message)));
    }
    if subagent && element.requests.is_none() {
        return Err(error(&place, "a sub-agent entry needs its `requests`"));
    }
    if !subagent {
        element.requests = None;
        let input = input.ok_or_else(|| error(&place, "missing `in` (prompt tokens)"))?;
        let ids = ids.ok_or_else(|| error(&place, "missing `hash_ids`"))?;
        let complete = input / block_size as u64;
        if ids.len() as u64 > complete {
            return Err(error(
                &format_args!("{place}.hash_ids"),
                format!(
                    "has {} ids, but `in` ({input} tokens) holds only {complete} complete blocks of {block_size}",
                    ids.len()
                ),
            ));
        }
        element.own.prompt_tokens = input;
        element.own.ids = ids;
    }
    element.own.t_ms = t.ok_or_else(|| error(&place, "missing `t`"))?;
    Ok(element)
}

/// What [`Splitter`] cuts out of a document.
enum Piece<'a> {
    /// A top-level member other than `requests`: its key (raw, unescaped bytes) and value.
    Member { key: &'a [u8], value: &'a [u8] },
    /// Element `index` of `requests`.
    Element { index: usize, value: &'a [u8] },
}

/// Where the splitter is in a document.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Phase {
    /// Before the top-level `{` (a byte order mark and blanks are passed over).
    #[default]
    Start,
    /// Expecting a key, or `}` (`first`: right after `{`).
    Key { first: bool },
    /// In a key's string.
    InKey,
    /// Expecting the `:` after a key.
    Colon,
    /// Expecting a value.
    Value,
    /// In a member's value (not `requests`).
    InValue,
    /// After a value: `,` or `}`.
    AfterValue,
    /// Right after `requests`'s `[`, or after one of its elements' `,`: expecting an element
    /// (or `]`, unless after a `,`).
    Element { first: bool },
    /// In an element.
    InElement,
    /// After an element: `,` or `]`.
    AfterElement,
    /// After the top-level `}`: only blanks.
    End,
}

/// Cuts a document given in chunks into its top-level members and the elements of its
/// `requests` array, keeping only the one being cut. Values are only scanned here (strings and
/// nesting); they are checked when read.
#[derive(Debug, Default)]
struct Splitter {
    phase: Phase,
    /// The current key, then value or element.
    key: Vec<u8>,
    value: Vec<u8>,
    scan: Scan,
    /// Elements of `requests` so far.
    elements: usize,
    /// Bytes of the document so far (for errors).
    offset: u64,
    /// A byte order mark's bytes seen at the start.
    bom: u8,
    /// Whether the key being read has an escape pending.
    key_escape: bool,
    /// Whether `requests` was met.
    saw_requests: bool,
}

/// The scan of one JSON value, byte by byte: where strings and nested values are, so that its
/// end can be found.
#[derive(Clone, Copy, Debug, Default)]
struct Scan {
    depth: u32,
    string: bool,
    escape: bool,
    /// A scalar (number, literal) rather than a string, array or object.
    scalar: bool,
    started: bool,
}

impl Scan {
    /// Takes the next byte of the value; returns whether the value ended *before* it (a scalar
    /// ends at the first byte that cannot continue it) or with it (a string or a container
    /// ends with its closing byte).
    fn step(&mut self, byte: u8) -> Step {
        if !self.started {
            self.started = true;
            match byte {
                b'"' => self.string = true,
                b'{' | b'[' => self.depth = 1,
                _ => self.scalar = true,
            }
            return Step::Continue;
        }
        if self.scalar {
            return match byte {
                b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E' | b'a'..=b'z' => Step::Continue,
                _ => Step::EndedBefore,
            };
        }
        if self.string {
            match (self.escape, byte) {
                (true, _) => self.escape = false,
                (false, b'\\') => self.escape = true,
                (false, b'"') => {
                    self.string = false;
                    if self.depth == 0 {
                        return Step::EndedWith;
                    }
                }
                _ => {}
            }
            return Step::Continue;
        }
        match byte {
            b'"' => self.string = true,
            b'{' | b'[' => self.depth += 1,
            b'}' | b']' => {
                self.depth -= 1;
                if self.depth == 0 {
                    return Step::EndedWith;
                }
            }
            _ => {}
        }
        Step::Continue
    }
}

enum Step {
    Continue,
    EndedWith,
    EndedBefore,
}

impl Splitter {
    /// A key or value that reached [`MAX_LINE_BYTES`] without ending. The splitter keeps one
    /// key and one value whole at a time: bounded as a JSONL line is, they cannot grow with
    /// the input when a document is cut short, or is not JSON.
    fn too_long(&self, what: &str) -> TraceError {
        error(
            &"document",
            format!("{what} is longer than {MAX_LINE_BYTES} bytes, at byte {}", self.offset),
        )
    }

    fn unexpected(&self, byte: u8, expected: &str) -> TraceError {
        let found = if byte.is_ascii_graphic() {
            format!("`{}`", byte as char)
        } else {
            format!("byte {byte:#04x}")
        };
        error(&"document", format!("expected {expected} at byte {}, found {found}", self.offset))
    }

    fn feed(
        &mut self,
        chunk: &[u8],
        each: &mut impl FnMut(Piece<'_>) -> Result<(), TraceError>,
    ) -> Result<(), TraceError> {
        let mut i = 0;
        while i < chunk.len() {
            let byte = chunk[i];
            let blank = matches!(byte, b' ' | b'\t' | b'\n' | b'\r');
            match self.phase {
                Phase::Start => {
                    const BOM: [u8; 3] = [0xEF, 0xBB, 0xBF];
                    if self.offset < 3
                        && byte == BOM[self.bom as usize]
                        && u64::from(self.bom) == self.offset
                    {
                        self.bom += 1;
                    } else if byte == b'{' {
                        self.phase = Phase::Key { first: true };
                    } else if !blank {
                        return Err(self.unexpected(byte, "a document (`{`)"));
                    }
                }
                Phase::Key { first } => {
                    if byte == b'"' {
                        self.key.clear();
                        self.phase = Phase::InKey;
                    } else if byte == b'}' && first {
                        self.phase = Phase::End;
                    } else if !blank {
                        return Err(self.unexpected(byte, "a key"));
                    }
                }
                Phase::InKey => {
                    // Keys are plain words here; an escaped key is kept raw (it names
                    // nothing this reader uses).
                    let ends = byte == b'"' && !self.key_escape;
                    if !ends && self.key.len() == MAX_LINE_BYTES {
                        return Err(self.too_long("a key"));
                    }
                    if self.key_escape {
                        self.key_escape = false;
                        self.key.push(byte);
                    } else if byte == b'\\' {
                        self.key_escape = true;
                        self.key.push(byte);
                    } else if byte == b'"' {
                        self.phase = Phase::Colon;
                    } else {
                        self.key.push(byte);
                    }
                }
                Phase::Colon => {
                    if byte == b':' {
                        self.phase = Phase::Value;
                    } else if !blank {
                        return Err(self.unexpected(byte, "`:`"));
                    }
                }
                Phase::Value if blank => {}
                Phase::Value if self.key == b"requests" => {
                    if byte != b'[' {
                        return Err(error(&"requests", "is not an array"));
                    }
                    if self.saw_requests {
                        return Err(error(&"requests", "given twice"));
                    }
                    self.saw_requests = true;
                    self.phase = Phase::Element { first: true };
                }
                Phase::Value => {
                    self.value.clear();
                    self.scan = Scan::default();
                    self.phase = Phase::InValue;
                    continue;
                }
                Phase::InValue | Phase::InElement => match self.scan.step(byte) {
                    Step::Continue | Step::EndedWith if self.value.len() == MAX_LINE_BYTES => {
                        let what = match self.phase {
                            Phase::InElement => format!("element {} of `requests`", self.elements),
                            _ => format!("the value of `{}`", String::from_utf8_lossy(&self.key)),
                        };
                        return Err(self.too_long(&what));
                    }
                    Step::Continue => self.value.push(byte),
                    Step::EndedWith => {
                        self.value.push(byte);
                        self.offset += 1;
                        i += 1;
                        self.emit(each)?;
                        continue;
                    }
                    Step::EndedBefore => {
                        self.emit(each)?;
                        continue;
                    }
                },
                Phase::AfterValue => match byte {
                    b',' => self.phase = Phase::Key { first: false },
                    b'}' => self.phase = Phase::End,
                    _ if blank => {}
                    _ => return Err(self.unexpected(byte, "`,` or `}`")),
                },
                Phase::Element { first } => {
                    if byte == b']' && first {
                        self.phase = Phase::AfterValue;
                    } else if !blank {
                        self.value.clear();
                        self.scan = Scan::default();
                        self.phase = Phase::InElement;
                        continue;
                    }
                }
                Phase::AfterElement => match byte {
                    b',' => self.phase = Phase::Element { first: false },
                    b']' => self.phase = Phase::AfterValue,
                    _ if blank => {}
                    _ => return Err(self.unexpected(byte, "`,` or `]` in `requests`")),
                },
                Phase::End => {
                    if !blank {
                        return Err(self.unexpected(byte, "nothing after the document"));
                    }
                }
            }
            self.offset += 1;
            i += 1;
        }
        Ok(())
    }

    /// Hands out the value or element just cut, and moves on.
    fn emit(
        &mut self,
        each: &mut impl FnMut(Piece<'_>) -> Result<(), TraceError>,
    ) -> Result<(), TraceError> {
        let value = core::mem::take(&mut self.value);
        let result = if self.phase == Phase::InElement {
            self.phase = Phase::AfterElement;
            self.elements += 1;
            each(Piece::Element { index: self.elements - 1, value: &value })
        } else {
            self.phase = Phase::AfterValue;
            each(Piece::Member { key: &self.key, value: &value })
        };
        // Keep the allocation for the next value.
        self.value = value;
        self.value.clear();
        result
    }

    /// Checks that the document ended whole.
    fn finish(&self) -> Result<(), TraceError> {
        match self.phase {
            Phase::End => Ok(()),
            Phase::Start => {
                Err(error(&"document", "empty (a kv-cache-tester document is one JSON object)"))
            }
            _ => Err(error(&"document", format!("ends too early, at byte {}", self.offset))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    const PARENT: &str = r#"{"id": "conv-a", "models": ["m"], "block_size": 4, "hash_id_scope": "local",
        "tool_tokens": 1, "system_tokens": 2, "requests": [
        {"t": 0.0, "type": "n", "model": "m", "in": 9, "out": 3, "hash_ids": [1, 2], "stop": "x"},
        {"t": 10.0, "type": "s", "in": 13, "out": 1, "hash_ids": [1, 2, 3]},
        {"t": 30.5, "type": "subagent", "agent_id": "agent_001", "duration_ms": 20500,
         "status": "completed", "requests": [
            {"t": 0.0, "type": "n", "in": 8, "out": 2, "hash_ids": [7, 8]},
            {"t": 5.0, "type": "n", "in": 12, "out": 2, "hash_ids": [7, 8, 9]}]},
        {"t": 40.0, "type": "n", "in": 16, "out": 5, "hash_ids": [1, 2, 3, 4]}],
        "totals": {"parent_tokens": {"input": 1, "output": 2}}}"#;

    fn read(
        set: &mut Conversations,
        name: &str,
        text: &[u8],
        chunk: usize,
    ) -> Result<(), TraceError> {
        let mut document = set.document(name);
        for piece in text.chunks(chunk) {
            document.feed(piece)?;
        }
        document.finish().map(|_| ())
    }

    fn times_and_ids(set: Conversations) -> Vec<(u64, u64, Vec<u64>)> {
        set.into_requests().map(|r| (r.timestamp.unwrap(), r.prompt_tokens, r.prompt_ids)).collect()
    }

    /// A sub-agent's start past the last representable millisecond, in a staggered document,
    /// stops there (it sorts last) rather than wrapping round to the start of the replay.
    #[test]
    fn a_sub_agent_started_past_the_last_millisecond_stays_last() {
        let mut set = Conversations::new(4, 1000);
        let first = r#"{"requests": [{"t": 0, "in": 4, "hash_ids": [1]}]}"#;
        // 18446744073709551 s is 615 ms short of the largest u64 of milliseconds, less than the
        // second document's stagger of 1000 ms.
        let late = r#"{"requests": [{"t": 0, "in": 4, "hash_ids": [2]},
            {"t": 18446744073709551, "type": "subagent", "requests": [{"t": 0, "in": 4, "hash_ids": [3]}]}]}"#;
        read(&mut set, "first.json", first.as_bytes(), 64).unwrap();
        read(&mut set, "late.json", late.as_bytes(), 64).unwrap();
        let times: Vec<u64> = times_and_ids(set).into_iter().map(|(t, ..)| t).collect();
        assert_eq!(times, [0, 1000, u64::MAX]);
    }

    /// A key, a member's value or an element of `requests` is kept whole while it is read:
    /// one longer than `MAX_LINE_BYTES` (a key's text, a value with its quotes or brackets) is
    /// an error there, not a buffer that grows with the input.
    #[test]
    fn a_value_without_end_is_cut_off_at_the_line_bound() {
        let filler = "a".repeat(MAX_LINE_BYTES + 1);
        // A whole string value one byte over the bound, with its quotes.
        let over = "b".repeat(MAX_LINE_BYTES - 1);
        let cases = [
            (format!(r#"{{"{filler}"#), "a key is longer than 67108864 bytes"),
            (format!(r#"{{"id": "{over}"}}"#), "the value of `id` is longer than 67108864 bytes"),
            (
                format!(r#"{{"requests": [{{"t": 0, "in": 4, "hash_ids": [1]}}, {{"t": "{filler}"#),
                "element 1 of `requests` is longer than 67108864 bytes",
            ),
        ];
        for (text, want) in cases {
            let mut set = Conversations::new(4, 0);
            let error = read(&mut set, "long.json", text.as_bytes(), 1 << 20).unwrap_err();
            assert_eq!(
                error.to_string().split(", at byte").next(),
                Some(format!("document: {want}").as_str())
            );
        }
        // A key and a value of exactly the bound are read.
        let (key, id) = (&filler[..MAX_LINE_BYTES], &over[1..]);
        let mut set = Conversations::new(4, 0);
        let text = format!(r#"{{"{key}": 1, "id": "{id}", "requests": []}}"#);
        read(&mut set, "long.json", text.as_bytes(), 1 << 20).unwrap();
    }

    #[test]
    fn any_chunking_reads_the_same_requests_with_sub_agents_at_their_start() {
        let mut want = None;
        for chunk in [1, 2, 7, 64, 100_000] {
            let mut set = Conversations::new(4, 0);
            read(&mut set, "a.json", PARENT.as_bytes(), chunk).unwrap();
            assert_eq!(set.len(), 5);
            let got = times_and_ids(set);
            let ns = xxh3_64(b"conv-a");
            let key = |ids: &[u64]| {
                ids.iter().map(|&id| xxh3_64_with_seed(&id.to_le_bytes(), ns)).collect::<Vec<_>>()
            };
            // The sub-agent ran from 30.5 - 20.5 = 10 s: its requests at 10 and 15 s, the
            // first after the parent's request at 10 s (document order breaks the tie).
            assert_eq!(
                got,
                [
                    (0, 9, key(&[1, 2])),
                    (10_000, 13, key(&[1, 2, 3])),
                    (10_000, 8, key(&[7, 8])),
                    (15_000, 12, key(&[7, 8, 9])),
                    (40_000, 16, key(&[1, 2, 3, 4])),
                ],
                "chunks of {chunk}"
            );
            if let Some(want) = &want {
                assert_eq!(&got, want);
            }
            want = Some(got);
        }
    }

    #[test]
    fn documents_interleave_by_stagger_and_keep_their_ids_apart_unless_global() {
        let doc = |id: &str, scope: &str| {
            format!(
                r#"{{"id": "{id}", "block_size": 4, "hash_id_scope": "{scope}", "requests": [{{"t": 0, "in": 4, "hash_ids": [1]}}, {{"t": 60, "in": 8, "hash_ids": [1, 2]}}]}}"#
            )
        };
        let mut set = Conversations::new(4, 30_000);
        for (name, id) in [("x", "a"), ("y", "b"), ("z", "a")] {
            read(&mut set, name, doc(id, "local").as_bytes(), 16).unwrap();
        }
        assert_eq!((set.len(), set.documents(), set.is_empty()), (6, 3, false));
        let requests: Vec<Request> = set.into_requests().collect();
        let times: Vec<u64> = requests.iter().map(|r| r.timestamp.unwrap()).collect();
        assert_eq!(times, [0, 30_000, 60_000, 60_000, 90_000, 120_000]);
        // In time order: x0, y0, x1, z0 (a tie broken by document), y1, z1. Document "a"
        // given twice (x, z) shares its ids; "b" (y) has its own.
        assert_eq!(requests[0].prompt_ids, requests[3].prompt_ids);
        assert_ne!(requests[0].prompt_ids, requests[1].prompt_ids);
        assert_eq!(requests[0].session, requests[3].session);
        assert_eq!(requests[2].prompt_ids.len(), 2);
        let mut set = Conversations::new(4, 0);
        for id in ["a", "b"] {
            read(&mut set, id, doc(id, "global").as_bytes(), 5).unwrap();
        }
        let requests: Vec<Request> = set.into_requests().collect();
        assert_eq!(requests[0].prompt_ids, vec![1]);
        assert_eq!(requests[1].prompt_ids, vec![1]);
    }

    #[test]
    fn bad_documents_name_the_json_path() {
        let cases: [(&str, &str); 10] = [
            (r#"{"id": "a", "block_size": 4}"#, "requests: missing"),
            (
                r#"{"requests": [{"t": 0, "in": 7, "hash_ids": [1, 2]}]}"#,
                "requests[0].hash_ids: has 2 ids, but `in` (7 tokens) holds only 1 complete blocks of 4",
            ),
            (
                r#"{"requests": [{"t": 0, "in": 4, "hash_ids": [1]}, {"t": -1, "in": 4, "hash_ids": [1]}]}"#,
                "requests[1].t: expected a non-negative number",
            ),
            (
                r#"{"requests": [{"t": 0, "type": "subagent", "requests": [{"t": 0, "in": 4, "hash_ids": [1, 2]}]}]}"#,
                "requests[0].requests[0].hash_ids: has 2 ids",
            ),
            (
                r#"{"block_size": 64, "requests": []}"#,
                // Worded for every front end: a flag, a JS option or a keyword gives it.
                "block_size: is 64, but the replay's block size is 4 (give a block size of 64, or none)",
            ),
            (r#"{"hash_id_scope": "shared", "requests": []}"#, "hash_id_scope: is \"shared\""),
            (
                r#"{"block_size": 0, "requests": []}"#,
                "block_size: is 0: block size must be at least 1",
            ),
            (r#"{"requests": [{"t": 0, "in": 4, "hash_ids": [1]}"#, "document: ends too early"),
            (
                r#"{"requests": [{"t": 0, "in": 4, "hash_ids": [1]}]} x"#,
                "document: expected nothing after the document",
            ),
            (
                r#"{"requests": [{"in": 4, "hash_ids": [1], "in": 5}]}"#,
                "requests[0].in: duplicate key \"in\"",
            ),
        ];
        for (text, want) in cases {
            let mut set = Conversations::new(4, 0);
            let error = read(&mut set, "bad.json", text.as_bytes(), 3).unwrap_err().to_string();
            assert!(error.starts_with(want), "{text}: {error}");
        }
        let mut set = Conversations::new(4, 0);
        let empty = r#"{"id": "e", "requests": []}"#;
        read(&mut set, "e.json", format!("\u{feff}{empty}").as_bytes(), 2).unwrap();
        assert!(set.is_empty());
        assert_eq!((set.len(), set.documents()), (0, 1));
    }

    #[test]
    fn bad_documents_say_where_they_go_wrong() {
        let cases: [(&str, &str); 10] = [
            ("", "document: empty (a kv-cache-tester document is one JSON object)"),
            (" \n", "document: empty (a kv-cache-tester document is one JSON object)"),
            ("{}", "requests: missing"),
            (r#"{"id": "a" x}"#, "document: expected `,` or `}` at byte 11, found `x`"),
            (r#"{"id": "a", }"#, "document: expected a key at byte 12, found `}`"),
            (r#"{"n": 12 x}"#, "document: expected `,` or `}` at byte 9, found `x`"),
            (
                r#"{"requests": [{"t": 0, "in": 4, "hash_ids": [1]} x]}"#,
                "document: expected `,` or `]` in `requests` at byte 49, found `x`",
            ),
            (
                r#"{"requests": [{"t": 0, "in": 4, "hash_ids": [1]}, ]}"#,
                "requests[1]: expected an object",
            ),
            (
                r#"{"requests": [{"t": 0, "type": "subagent", "requests": [{"t": 0, "in": 4, "hash_ids": [1]}, {"t": 1, "hash_ids": []}]}]}"#,
                "requests[0].requests[1]: missing `in` (prompt tokens)",
            ),
            (r#"{"requests": []}}"#, "document: expected nothing after the document at byte 16"),
        ];
        for (text, want) in cases {
            for chunk in [1, 4, 100] {
                let mut set = Conversations::new(4, 0);
                let error = read(&mut set, "bad.json", text.as_bytes(), chunk);
                let error = error.unwrap_err().to_string();
                assert!(error.starts_with(want), "{text} in chunks of {chunk}: {error}");
            }
        }
    }

    #[test]
    fn blanks_go_wherever_json_allows_them_and_other_bytes_are_errors() {
        // Strings with brackets, braces, quotes and escapes inside values that are cut out
        // whole; scalars that end at a blank, a comma or a brace; requests whose ids do not
        // extend the previous one's.
        let tokens = [
            "{",
            r#""id""#,
            ":",
            r#""c\"]}""#,
            ",",
            r#""block_size""#,
            ":",
            "4",
            ",",
            r#""extra""#,
            ":",
            r#"[1, {"a": "]}\"\\", "b": [[]], "c\"": "["}, "x"]"#,
            ",",
            r#""requests""#,
            ":",
            "[",
            r#"{"t": 0.5, "in": 8, "out": 1, "hash_ids": [1, 2], "s": "}]\""}"#,
            ",",
            r#"{"t": 1, "in": 12, "hash_ids": [1, 2, 3]}"#,
            ",",
            r#"{"t": 2, "type": "subagent", "requests": [{"t": 0, "in": 9, "hash_ids": [5, 6], "requests": [7]}]}"#,
            ",",
            r#"{"t": 3, "in": 8, "hash_ids": [4, 3]}"#,
            "]",
            ",",
            r#""n""#,
            ":",
            "-1.5e3",
            "}",
        ];
        let requests = |text: &str, chunk| {
            let mut set = Conversations::new(4, 0);
            read(&mut set, "b.json", text.as_bytes(), chunk)?;
            assert_eq!((set.len(), set.documents()), (4, 1));
            Ok::<_, TraceError>(times_and_ids(set))
        };
        let ns = xxh3_64(b"c\"]}");
        let key = |ids: &[u64]| {
            ids.iter().map(|&id| xxh3_64_with_seed(&id.to_le_bytes(), ns)).collect::<Vec<_>>()
        };
        let want = vec![
            (500, 8, key(&[1, 2])),
            (1000, 12, key(&[1, 2, 3])),
            (2000, 9, key(&[5, 6])),
            (3000, 8, key(&[4, 3])),
        ];
        assert_eq!(requests(&tokens.concat(), 1000), Ok(want.clone()));
        for gap in 0..=tokens.len() {
            let (before, after) = tokens.split_at(gap);
            for (blanks, chunk) in [(" ", 1), ("\t", 2), ("\n", 5), ("\r\n \t", 1000)] {
                let text = before.concat() + blanks + &after.concat();
                assert_eq!(requests(&text, chunk), Ok(want.clone()), "{text:?}");
            }
            let text = before.concat() + "/" + &after.concat();
            assert!(requests(&text, 3).is_err(), "{text:?}");
        }
    }
}
