//! Decoders of outside input: trace files, replica messages, snapshot files. Whatever the
//! bytes, a decoder returns a value or an error that says what is wrong; a value must
//! re-encode to exactly the bytes it came from (the formats have no slack), so nothing is
//! accepted that the encoder would not produce.

use arbitrary::{Arbitrary, Unstructured};
use kvreuse_core::chain::DynamoHasher;
use kvreuse_core::message;
use kvreuse_core::snapshot;
use kvreuse_core::trace::document::Conversations;
use kvreuse_core::trace::lines::{Lines, Piece, numbered};
use kvreuse_core::trace::{Request, TimeCheck, TraceError, parse_line};

/// Trace files: the first byte picks the block size, the second the size of the chunks the
/// rest arrives in; the rest is a file of lines (a byte order mark may start it).
///
/// - the lines `Lines` hands out, chunk by chunk, are the file's lines split at once (the mark
///   dropped), numbered from 1;
/// - each line parses as `trace_line` checks;
/// - `TimeCheck` over the records counts exactly the steps back in time a plain scan counts,
///   and the checks of two halves combine into the whole file's.
pub fn trace_lines(data: &[u8]) {
    let [first, cut, file @ ..] = data else { return };
    let block_size = usize::from(first % 16) + 1;
    let hasher = DynamoHasher::new(block_size).expect("block size >= 1");
    let chunk = usize::from(cut % 64) + 1;
    let mut got: Vec<(u64, Vec<u8>)> = Vec::new();
    let mut lines = Lines::new();
    let mut each = |piece: Piece<'_>| -> Result<(), ()> {
        match piece {
            Piece::Lines { first, text } => {
                got.extend(numbered(first, text).map(|(n, l)| (n, l.to_vec())));
            }
            Piece::TooLong { .. } => panic!("fuzz inputs are shorter than the line limit"),
        }
        Ok(())
    };
    for piece in file.chunks(chunk) {
        lines.feed(piece, &mut each).expect("never fails");
    }
    lines.finish(&mut each).expect("never fails");
    let body = file.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(file);
    let want: Vec<(u64, Vec<u8>)> = numbered(1, body).map(|(n, l)| (n, l.to_vec())).collect();
    assert_eq!(got, want, "chunks of {chunk} cut the file as one split does");

    let mut stamps = Vec::new();
    for (number, line) in &got {
        if let Some(request) = trace_line(line, &hasher) {
            stamps.extend(request.timestamp.map(|t| (*number, t)));
        }
    }
    let steps_back = stamps.windows(2).filter(|w| w[1].1 < w[0].1).count() as u64;
    let check = |part: &[(u64, u64)]| {
        let mut time = TimeCheck::default();
        part.iter().for_each(|&(line, t)| time.observe(line, Some(t)));
        time
    };
    let whole = check(&stamps);
    assert_eq!(whole.backwards, steps_back);
    assert_eq!(whole.latest, stamps.iter().map(|&(_, t)| t).max());
    let (early, late) = stamps.split_at(stamps.len() / 2);
    assert_eq!(check(early).then(check(late)), whole, "halves combine into the whole");

    // The same bytes as a kv-cache-tester document: cut in chunks or read whole, the same
    // requests (or the same error).
    let document = |chunk: usize| {
        let mut set = Conversations::new(block_size, u64::from(*cut) * 1000);
        let mut reader = set.document("fuzz.json");
        for piece in file.chunks(chunk) {
            reader.feed(piece)?;
        }
        reader.finish()?;
        Ok::<Vec<Request>, TraceError>(set.into_requests().collect())
    };
    let whole = document(file.len().max(1));
    assert_eq!(document(chunk), whole, "a document in chunks of {chunk} reads as whole");
    if let Ok(requests) = whole {
        for request in requests {
            let complete = request.prompt_tokens / block_size as u64;
            assert!(request.prompt_ids.len() as u64 <= complete, "only complete blocks have ids");
        }
    }
}

/// One trace line: parsing is deterministic and agrees with a parser built on `serde_json`
/// (the same record, or an error from both), a blank line is skipped, an error says
/// something, a record's blocks add up, a Mooncake record re-encodes to itself, and a key of
/// the other format is refused.
fn trace_line(line: &[u8], hasher: &DynamoHasher) -> Option<Request> {
    let block_size = hasher.block_size();
    let parsed = parse_line(line, hasher);
    assert_eq!(parsed, parse_line(line, hasher), "parsing is deterministic");
    match (&parsed, reference_line(line, hasher)) {
        (Ok(ours), Ok(theirs)) => assert_eq!(ours, &theirs, "the same record as serde_json's"),
        (Err(_), Err(_)) => {}
        (ours, theirs) => panic!(
            "{:?}: kvreuse's parser says {ours:?}, serde_json's {theirs:?}",
            String::from_utf8_lossy(line)
        ),
    }
    let request = match parsed {
        Ok(Some(request)) => request,
        Ok(None) => {
            assert!(line.iter().all(u8::is_ascii_whitespace), "only blank lines are skipped");
            return None;
        }
        Err(e) => {
            assert!(!e.to_string().is_empty());
            return None;
        }
    };
    let (p, bs, n) = (request.prompt_tokens, block_size as u64, request.prompt_ids.len() as u64);
    // Mooncake records cover the partial last block, token records only complete blocks.
    assert!(n == p.div_ceil(bs) || n == p / bs, "{n} ids for {p} tokens of block size {bs}");
    let covered: u64 =
        (0..request.prompt_ids.len()).map(|j| request.block_tokens(j, block_size)).sum();
    assert_eq!(covered, p.min(n * bs), "block token counts add up");
    if request.output_ids.is_empty() && n == p.div_ceil(bs) {
        let mut again = serde_json::json!({
            "timestamp": request.timestamp,
            "input_length": p,
            "output_length": request.output_tokens,
            "hash_ids": request.prompt_ids,
        });
        let reparsed = parse_line(again.to_string().as_bytes(), hasher).expect("re-encoded line");
        assert_eq!(reparsed.as_ref(), Some(&request), "a Mooncake round trip");
        again["output_tokens"] = serde_json::json!([1]);
        let mixed = parse_line(again.to_string().as_bytes(), hasher);
        assert!(
            matches!(mixed, Err(TraceError::MixedKeys { key: "output_tokens", .. })),
            "a token record's key on a Mooncake record is refused: {mixed:?}"
        );
    }
    Some(request)
}

/// The record formats' rules on `serde_json`'s reading of a line: the oracle `trace_line`
/// checks kvreuse's own JSON reader against.
fn reference_line(line: &[u8], hasher: &DynamoHasher) -> Result<Option<Request>, String> {
    #[derive(serde::Deserialize)]
    struct Fields {
        timestamp: Option<u64>,
        input_length: Option<u64>,
        output_length: Option<u64>,
        hash_ids: Option<Vec<u64>>,
        tokens: Option<Vec<u32>>,
        output_tokens: Option<Vec<u32>>,
    }
    if line.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    // serde reads a struct from an array too; a record is an object.
    if line.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err("not an object".into());
    }
    let f: Fields = serde_json::from_slice(line).map_err(|e| e.to_string())?;
    let block_size = hasher.block_size() as u64;
    match (f.hash_ids, f.tokens) {
        (Some(ids), None) if f.output_tokens.is_none() => {
            let input = f.input_length.ok_or("no input_length")?;
            if ids.len() as u64 != input.div_ceil(block_size) {
                return Err("block count".into());
            }
            let output_tokens = f.output_length.unwrap_or(0);
            let prompt_ids = ids;
            let (timestamp, prompt_tokens) = (f.timestamp, input);
            Ok(Some(Request {
                timestamp,
                prompt_tokens,
                prompt_ids,
                output_tokens,
                ..Request::default()
            }))
        }
        (None, Some(tokens)) if f.input_length.is_none() && f.output_length.is_none() => {
            // The hashing itself is pinned by the golden vectors; here the reading is checked.
            let whole: Vec<u32> =
                tokens.iter().chain(f.output_tokens.iter().flatten()).copied().collect();
            let ids = hasher.hash(&whole).sequence;
            let prompt_blocks = tokens.len() / hasher.block_size();
            Ok(Some(Request {
                timestamp: f.timestamp,
                prompt_tokens: tokens.len() as u64,
                prompt_ids: ids[..prompt_blocks].to_vec(),
                output_tokens: f.output_tokens.as_ref().map_or(0, |o| o.len() as u64),
                output_ids: ids[prompt_blocks..].to_vec(),
                ..Request::default()
            }))
        }
        _ => Err("not one format".into()),
    }
}

/// Replica messages, unsigned and signed: decoding with and without a key, and encoding
/// fuzzer-chosen messages.
pub fn sync_messages(data: &[u8]) {
    let key = message::SyncKey::from_bytes(&[0x5a; 32]).expect("32 bytes");
    for key in [None, Some(&key)] {
        match message::decode(data, key) {
            Ok(m) => {
                let mut again = Vec::new();
                message::encode_into(m.source, m.domain, &m.ids, key, &mut again)
                    .expect("decoded ids fit");
                assert_eq!(again, data, "a decoded message re-encodes to its bytes");
            }
            Err(e) => {
                assert!(!e.to_string().is_empty());
                if data.len() > message::MAX_MESSAGE_BYTES {
                    assert!(e.is_oversized(), "{} bytes must be oversized, got {e}", data.len());
                }
            }
        }
    }
    let mut input = Unstructured::new(data);
    if let (Ok(source), Ok(domain), Ok(ids), Ok(flip)) = (
        u64::arbitrary(&mut input),
        u64::arbitrary(&mut input),
        Vec::<u64>::arbitrary(&mut input),
        usize::arbitrary(&mut input),
    ) {
        for signed in [None, Some(&key)] {
            let mut bytes = Vec::new();
            message::encode_into(source, domain, &ids, signed, &mut bytes).expect("few ids");
            let m = message::decode(&bytes, signed).expect("an encoded message decodes");
            assert_eq!((m.source, m.domain, &m.ids), (source, domain, &ids));
            // The other kind of receiver refuses it, and a signed message with any bit
            // flipped fails its check.
            let other = if signed.is_some() { None } else { Some(&key) };
            assert!(message::decode(&bytes, other).is_err());
            if signed.is_some() {
                let at = flip % bytes.len();
                bytes[at] ^= 1 << (flip % 8);
                assert!(message::decode(&bytes, signed).is_err(), "a flipped bit at {at}");
            }
        }
    }
}

/// Snapshot files: decoding, and the header check a loader does before reading the rest.
pub fn snapshots(data: &[u8]) {
    let header = snapshot::decode_header(data, data.len() as u64);
    match snapshot::decode(data) {
        Ok(s) => {
            assert_eq!(snapshot::encode(s.domain, &s.ids), data, "re-encodes to its bytes");
            let header = header.expect("a valid file has a valid header");
            assert_eq!((header.domain, header.count), (s.domain, s.ids.len() as u64));
        }
        Err(e) => assert!(!e.to_string().is_empty()),
    }
    // A valid snapshot of fuzzer-chosen ids survives any single flipped bit only by luck of
    // XXH3: check that flipping the first differing byte is caught.
    let ids: Vec<u64> =
        data.chunks(8).map(|c| c.iter().fold(0u64, |a, &b| a << 8 | u64::from(b))).collect();
    let mut bytes = snapshot::encode(7, &ids);
    assert_eq!(snapshot::decode(&bytes).map(|s| s.ids), Ok(ids));
    let at = data.first().map_or(0, |&b| usize::from(b)) % bytes.len();
    bytes[at] ^= 1;
    assert!(snapshot::decode(&bytes).is_err(), "a flipped bit at {at} is caught");
}
