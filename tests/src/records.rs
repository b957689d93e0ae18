//! Decoders of outside input: trace lines, replica messages, snapshot files. Whatever the
//! bytes, a decoder returns a value or an error that says what is wrong; a value must
//! re-encode to exactly the bytes it came from (the formats have no slack), so nothing is
//! accepted that the encoder would not produce.

use arbitrary::{Arbitrary, Unstructured};
use kvreuse_core::chain::DynamoHasher;
use kvreuse_core::message;
use kvreuse_core::snapshot;
use kvreuse_core::trace::parse_line;

/// Trace lines: the first byte picks the block size, the rest is the line.
pub fn trace_lines(data: &[u8]) {
    let Some((&first, line)) = data.split_first() else { return };
    let block_size = usize::from(first % 16) + 1;
    let hasher = DynamoHasher::new(block_size).expect("block size >= 1");
    let parsed = parse_line(line, &hasher);
    assert_eq!(parsed, parse_line(line, &hasher), "parsing is deterministic");
    let request = match parsed {
        Ok(Some(request)) => request,
        Ok(None) => {
            assert!(line.iter().all(u8::is_ascii_whitespace), "only blank lines are skipped");
            return;
        }
        Err(e) => {
            assert!(!e.to_string().is_empty());
            return;
        }
    };
    let (p, bs, n) = (request.prompt_tokens, block_size as u64, request.prompt_ids.len() as u64);
    // Mooncake records cover the partial last block, token records only complete blocks.
    assert!(n == p.div_ceil(bs) || n == p / bs, "{n} ids for {p} tokens of block size {bs}");
    let covered: u64 =
        (0..request.prompt_ids.len()).map(|j| request.block_tokens(j, block_size)).sum();
    assert_eq!(covered, p.min(n * bs), "block token counts add up");
    if request.output_ids.is_empty() && n == p.div_ceil(bs) {
        let again = serde_json::json!({
            "timestamp": request.timestamp,
            "input_length": p,
            "hash_ids": request.prompt_ids,
        });
        let again = parse_line(again.to_string().as_bytes(), &hasher).expect("re-encoded line");
        assert_eq!(again, Some(request), "a Mooncake round trip");
    }
}

/// Replica messages: decoding, and encoding fuzzer-chosen messages.
pub fn sync_messages(data: &[u8]) {
    match message::decode(data) {
        Ok(m) => {
            let mut again = Vec::new();
            message::encode_into(m.source, m.domain, &m.ids, &mut again).expect("decoded ids fit");
            assert_eq!(again, data, "a decoded message re-encodes to its bytes");
        }
        Err(e) => {
            assert!(!e.to_string().is_empty());
            if data.len() > message::MAX_MESSAGE_BYTES {
                assert!(e.is_oversized(), "{} bytes must be oversized, got {e}", data.len());
            }
        }
    }
    let mut input = Unstructured::new(data);
    if let (Ok(source), Ok(domain), Ok(ids)) =
        (u64::arbitrary(&mut input), u64::arbitrary(&mut input), Vec::<u64>::arbitrary(&mut input))
    {
        let mut bytes = Vec::new();
        message::encode_into(source, domain, &ids, &mut bytes).expect("few ids");
        let m = message::decode(&bytes).expect("an encoded message decodes");
        assert_eq!((m.source, m.domain, m.ids), (source, domain, ids));
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
