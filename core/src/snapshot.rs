//! The snapshot file format: a history's ids, oldest first, so a restarted router does not
//! start blind.
//!
//! Layout, all integers little-endian:
//!
//! | offset | size | field |
//! |---:|---:|---|
//! | 0 | 8 | magic `KVRSNAP\0` |
//! | 8 | 4 | version, 1 |
//! | 12 | 4 | flags, 0 (a reader rejects any other value) |
//! | 16 | 8 | domain digest ([`Domain::digest`](crate::message::Domain::digest)), 0 if none |
//! | 24 | 8 | `count`: ids that follow |
//! | 32 | 8 × `count` | the ids, oldest first |
//! | end − 8 | 8 | checksum: XXH3-64 (seed 0) of every byte before it |
//!
//! Writing streams (a [`Checksum`] follows the bytes as they are written), so a large history
//! needs no second copy in memory; [`decode`] checks the whole file before returning anything,
//! so a truncated or corrupt file is rejected without touching the history it was meant for.

use alloc::vec::Vec;
use core::fmt;

/// The first eight bytes of a snapshot.
pub const MAGIC: [u8; 8] = *b"KVRSNAP\0";
/// The version this code writes and reads.
pub const VERSION: u32 = 1;
/// Bytes before the ids.
pub const HEADER_BYTES: usize = 32;
/// Bytes of the checksum after the ids.
pub const CHECKSUM_BYTES: usize = 8;

/// A snapshot's header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// The domain digest of the ids (0 if none was given).
    pub domain: u64,
    /// How many ids follow.
    pub count: u64,
}

impl Header {
    /// The header's bytes.
    pub fn encode(&self) -> [u8; HEADER_BYTES] {
        let mut out = [0u8; HEADER_BYTES];
        out[..8].copy_from_slice(&MAGIC);
        out[8..12].copy_from_slice(&VERSION.to_le_bytes());
        out[16..24].copy_from_slice(&self.domain.to_le_bytes());
        out[24..32].copy_from_slice(&self.count.to_le_bytes());
        out
    }
}

/// The running checksum of a snapshot being written or read.
#[derive(Clone)]
pub struct Checksum(xxhash_rust::xxh3::Xxh3);

impl fmt::Debug for Checksum {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Checksum").field(&self.0.digest()).finish()
    }
}

impl Default for Checksum {
    fn default() -> Self {
        Checksum(xxhash_rust::xxh3::Xxh3::new())
    }
}

impl Checksum {
    /// Follows `bytes`, written or read in order.
    pub fn update(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    /// The checksum's bytes, to write after everything else.
    pub fn finish(&self) -> [u8; CHECKSUM_BYTES] {
        self.0.digest().to_le_bytes()
    }
}

/// A decoded snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    /// The domain digest it was written with (0 if none).
    pub domain: u64,
    /// The ids, oldest first.
    pub ids: Vec<u64>,
}

/// Why bytes are not a snapshot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SnapshotError {
    /// Shorter than a header and a checksum.
    Truncated {
        /// The file's length.
        bytes: u64,
    },
    /// Not starting with [`MAGIC`].
    BadMagic,
    /// A version this code does not read.
    UnsupportedVersion(u32),
    /// Flags this code does not know.
    UnknownFlags(u32),
    /// The length does not match the announced count (truncated or extended).
    LengthMismatch {
        /// The ids the header announces.
        count: u64,
        /// The file's length.
        bytes: u64,
    },
    /// The checksum does not match the contents.
    ChecksumMismatch {
        /// The checksum stored in the file.
        stored: u64,
        /// The checksum of the contents.
        computed: u64,
    },
}

impl fmt::Display for SnapshotError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::Truncated { bytes } => write!(
                f,
                "truncated snapshot: {bytes} bytes, less than a header and a checksum ({} bytes)",
                HEADER_BYTES + CHECKSUM_BYTES
            ),
            Self::BadMagic => f.write_str("not a kvreuse snapshot (bad magic)"),
            Self::UnsupportedVersion(v) => write!(f, "unsupported snapshot version {v}"),
            Self::UnknownFlags(flags) => write!(f, "unknown snapshot flags {flags:#x}"),
            Self::LengthMismatch { count, bytes } => write!(
                f,
                "snapshot announces {count} ids but is {bytes} bytes long (truncated or damaged)"
            ),
            Self::ChecksumMismatch { stored, computed } => write!(
                f,
                "snapshot checksum mismatch (stored {stored:#018x}, contents {computed:#018x}): \
                 the file is corrupt"
            ),
        }
    }
}

impl core::error::Error for SnapshotError {}

/// The length of a snapshot of `count` ids, if it fits a `u64`.
pub fn encoded_len(count: u64) -> Option<u64> {
    count.checked_mul(8)?.checked_add((HEADER_BYTES + CHECKSUM_BYTES) as u64)
}

/// The whole snapshot of `ids` in memory (for small histories and tests; writers of large
/// ones stream the same bytes with a [`Checksum`]).
pub fn encode(domain: u64, ids: &[u64]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_BYTES + 8 * ids.len() + CHECKSUM_BYTES);
    out.extend_from_slice(&Header { domain, count: ids.len() as u64 }.encode());
    for id in ids {
        out.extend_from_slice(&id.to_le_bytes());
    }
    let mut checksum = Checksum::default();
    checksum.update(&out);
    out.extend_from_slice(&checksum.finish());
    out
}

/// Decodes and checks a whole snapshot.
pub fn decode(bytes: &[u8]) -> Result<Snapshot, SnapshotError> {
    let header = decode_header(bytes, bytes.len() as u64)?;
    let (body, stored) = bytes.split_at(bytes.len() - CHECKSUM_BYTES);
    let stored = u64::from_le_bytes(stored.try_into().expect("8 bytes"));
    let mut checksum = Checksum::default();
    checksum.update(body);
    let computed = checksum.0.digest();
    if stored != computed {
        return Err(SnapshotError::ChecksumMismatch { stored, computed });
    }
    let ids = body[HEADER_BYTES..]
        .chunks_exact(8)
        .map(|b| u64::from_le_bytes(b.try_into().expect("8")))
        .collect();
    Ok(Snapshot { domain: header.domain, ids })
}

/// Checks the header at the start of a snapshot file of `file_bytes` bytes (of which
/// `start` holds at least the first [`HEADER_BYTES`], when the file is that long), before
/// reading the rest.
pub fn decode_header(start: &[u8], file_bytes: u64) -> Result<Header, SnapshotError> {
    if file_bytes < (HEADER_BYTES + CHECKSUM_BYTES) as u64 {
        return Err(SnapshotError::Truncated { bytes: file_bytes });
    }
    let Some(head) = start.first_chunk::<HEADER_BYTES>() else {
        return Err(SnapshotError::Truncated { bytes: start.len() as u64 });
    };
    let word32 = |at: usize| u32::from_le_bytes(head[at..at + 4].try_into().expect("4 bytes"));
    let word64 = |at: usize| u64::from_le_bytes(head[at..at + 8].try_into().expect("8 bytes"));
    if head[..8] != MAGIC {
        return Err(SnapshotError::BadMagic);
    }
    if word32(8) != VERSION {
        return Err(SnapshotError::UnsupportedVersion(word32(8)));
    }
    if word32(12) != 0 {
        return Err(SnapshotError::UnknownFlags(word32(12)));
    }
    let count = word64(24);
    if encoded_len(count) != Some(file_bytes) {
        return Err(SnapshotError::LengthMismatch { count, bytes: file_bytes });
    }
    Ok(Header { domain: word64(16), count })
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::format;

    #[test]
    fn round_trips_with_the_documented_layout() {
        for ids in [alloc::vec![], alloc::vec![1u64], (0..1000).collect::<Vec<u64>>()] {
            let bytes = encode(42, &ids);
            assert_eq!(bytes.len() as u64, encoded_len(ids.len() as u64).unwrap());
            assert_eq!(decode(&bytes), Ok(Snapshot { domain: 42, ids: ids.clone() }));
        }
        let bytes = encode(3, &[0x0102_0304_0506_0708]);
        assert_eq!(&bytes[..16], b"KVRSNAP\0\x01\0\0\0\0\0\0\0");
        assert_eq!(bytes[16..24], 3u64.to_le_bytes());
        assert_eq!(bytes[24..32], 1u64.to_le_bytes());
        assert_eq!(bytes[32..40], [8, 7, 6, 5, 4, 3, 2, 1]);
        assert_eq!(bytes[40..], xxhash_rust::xxh3::xxh3_64(&bytes[..40]).to_le_bytes());
    }

    #[test]
    fn every_truncation_and_every_flipped_bit_is_rejected() {
        let bytes = encode(5, &[10, 20, 30, 40]);
        for len in 0..bytes.len() {
            assert!(decode(&bytes[..len]).is_err(), "truncated to {len}");
        }
        for at in 0..bytes.len() {
            for bit in 0..8 {
                let mut damaged = bytes.clone();
                damaged[at] ^= 1 << bit;
                assert!(decode(&damaged).is_err(), "byte {at} bit {bit}");
            }
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(matches!(decode(&longer), Err(SnapshotError::LengthMismatch { .. })));
    }

    #[test]
    fn errors_name_the_defect() {
        let bytes = encode(5, &[10, 20]);
        let with = |at: usize, byte: u8| {
            let mut b = bytes.clone();
            b[at] = byte;
            b
        };
        assert_eq!(decode(&bytes[..10]), Err(SnapshotError::Truncated { bytes: 10 }));
        assert_eq!(decode(&with(0, b'X')), Err(SnapshotError::BadMagic));
        assert_eq!(decode(&with(8, 9)), Err(SnapshotError::UnsupportedVersion(9)));
        assert_eq!(decode(&with(12, 1)), Err(SnapshotError::UnknownFlags(1)));
        assert_eq!(
            decode(&bytes[..bytes.len() - 8]),
            Err(SnapshotError::LengthMismatch { count: 2, bytes: bytes.len() as u64 - 8 })
        );
        assert!(matches!(decode(&with(33, 0xff)), Err(SnapshotError::ChecksumMismatch { .. })));
        // A count so large its length overflows.
        let mut huge = with(31, 0xff);
        huge[24..32].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(matches!(decode(&huge), Err(SnapshotError::LengthMismatch { .. })));
        // A file holding a whole, valid header but not its checksum is truncated, whatever
        // the header says.
        let empty = encode(5, &[]);
        for len in HEADER_BYTES..empty.len() {
            let bytes = len as u64;
            assert_eq!(decode_header(&empty, bytes), Err(SnapshotError::Truncated { bytes }));
        }
        assert!(decode_header(&empty, empty.len() as u64).is_ok());
    }

    #[test]
    fn a_checksum_shows_its_digest() {
        let mut checksum = Checksum::default();
        checksum.update(b"kvreuse");
        let digest = xxhash_rust::xxh3::xxh3_64(b"kvreuse");
        assert_eq!(format!("{checksum:?}"), format!("Checksum({digest})"));
    }
}
