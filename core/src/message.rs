//! The message replicas exchange: the block ids one of them learned, in a small, versioned
//! binary format.
//!
//! Replicas of a router share what they learn by publishing each completed request's ids
//! (the ids its own history learns). Routers serving different models, block sizes or hash
//! schemes must never mix ids, so every message carries the digest of its [`Domain`], and the
//! transport derives its subject from the same digest.
//!
//! Layout, all integers little-endian:
//!
//! | offset | size | field |
//! |---:|---:|---|
//! | 0 | 4 | magic `KVRS` |
//! | 4 | 1 | version, 1 |
//! | 5 | 1 | flags, 0 (a reader rejects any other value) |
//! | 6 | 2 | `count`: ids that follow, at most [`MAX_IDS`] |
//! | 8 | 8 | source: the publishing replica's random id |
//! | 16 | 8 | domain digest ([`Domain::digest`]) |
//! | 24 | 8 × `count` | the ids, oldest first |
//!
//! **Signed messages (version 2).** Replicas given a shared secret ([`SyncKey`]) sign what
//! they publish: the same layout with version 2, followed by a 32-byte HMAC-SHA256 of
//! everything before it under the key. A keyed receiver accepts only version 2 with a valid
//! MAC ([`MessageError::BadSignature`], [`MessageError::Unsigned`] otherwise); a receiver
//! without a key accepts only version 1 and refuses signed messages
//! ([`MessageError::Signed`]), so replicas that disagree about the key drop each other's
//! messages visibly instead of mixing trust levels.
//!
//! | version | layout |
//! |---:|---|
//! | 1 | header (24 bytes), ids |
//! | 2 | header (24 bytes), ids, HMAC-SHA256(key, header and ids) (32 bytes) |
//!
//! A message is therefore at most [`MAX_MESSAGE_BYTES`] long. [`decode`] checks everything
//! and tells an oversized message from a malformed one, so a receiver can count both.

use alloc::vec::Vec;
use core::fmt;

use base64::Engine;
use hmac::{KeyInit, Mac};

/// The first four bytes of every message.
pub const MAGIC: [u8; 4] = *b"KVRS";
/// The version of unsigned messages.
pub const VERSION: u8 = 1;
/// The version of signed messages.
pub const SIGNED_VERSION: u8 = 2;
/// Most ids in one message.
pub const MAX_IDS: usize = 4096;
/// Bytes before the ids.
pub const HEADER_BYTES: usize = 24;
/// Bytes of a signed message's MAC.
pub const MAC_BYTES: usize = 32;
/// The longest valid message (a signed one).
pub const MAX_MESSAGE_BYTES: usize = message_bytes(MAX_IDS, true);

/// The length of a message of `count` ids, signed or not.
pub const fn message_bytes(count: usize, signed: bool) -> usize {
    HEADER_BYTES + 8 * count + if signed { MAC_BYTES } else { 0 }
}

type HmacSha256 = hmac::Hmac<sha2::Sha256>;

/// A shared secret replicas sign and check their messages with: at least 32 bytes.
#[derive(Clone, PartialEq, Eq)]
pub struct SyncKey(Vec<u8>);

/// Why a text is not a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyError {
    /// Neither hex nor base64.
    Unreadable,
    /// Fewer than 32 bytes.
    TooShort(usize),
}

impl fmt::Display for KeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyError::Unreadable => {
                f.write_str("a sync key is hex or base64 (standard or URL-safe, padded or not)")
            }
            KeyError::TooShort(n) => write!(f, "a sync key needs at least 32 bytes, not {n}"),
        }
    }
}

impl core::error::Error for KeyError {}

impl SyncKey {
    /// The smallest key.
    pub const MIN_BYTES: usize = 32;

    /// A key of raw bytes (at least [`MIN_BYTES`](Self::MIN_BYTES)).
    pub fn from_bytes(bytes: &[u8]) -> Result<SyncKey, KeyError> {
        if bytes.len() < Self::MIN_BYTES {
            return Err(KeyError::TooShort(bytes.len()));
        }
        Ok(SyncKey(bytes.to_vec()))
    }

    /// A key written as hex (an even number of hex digits) or base64; blanks around it are
    /// ignored.
    pub fn parse(text: &str) -> Result<SyncKey, KeyError> {
        let text = text.trim();
        let hex = text.len().is_multiple_of(2)
            && !text.is_empty()
            && text.bytes().all(|b| b.is_ascii_hexdigit());
        let bytes = if hex {
            (0..text.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&text[i..i + 2], 16).map_err(|_| KeyError::Unreadable))
                .collect::<Result<Vec<u8>, _>>()?
        } else {
            let engines = [
                base64::engine::general_purpose::STANDARD,
                base64::engine::general_purpose::STANDARD_NO_PAD,
                base64::engine::general_purpose::URL_SAFE,
                base64::engine::general_purpose::URL_SAFE_NO_PAD,
            ];
            engines.iter().find_map(|e| e.decode(text).ok()).ok_or(KeyError::Unreadable)?
        };
        SyncKey::from_bytes(&bytes)
    }

    fn mac(&self) -> HmacSha256 {
        <HmacSha256 as KeyInit>::new_from_slice(&self.0).expect("HMAC takes keys of any length")
    }
}

impl fmt::Debug for SyncKey {
    /// Never the secret itself.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SyncKey({} bytes)", self.0.len())
    }
}

/// What the ids of a group of routers mean: ids are only comparable within one domain.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Domain {
    /// The served model's name.
    pub model: alloc::string::String,
    /// Tokens per block.
    pub block_size: usize,
    /// Whether blocks are hashed in Eagle mode (`block_size + 1` token windows).
    pub eagle: bool,
    /// The hash scheme's name (for example `dynamo`, `vllm-sha256-cbor`).
    pub scheme: alloc::string::String,
}

impl Domain {
    /// A 64-bit digest of the domain: XXH3-64 (seed 0) of `kvreuse-domain-v1`, then the
    /// model's UTF-8 length (u64) and bytes, the block size (u64), eagle (one byte, 0 or 1),
    /// and the scheme's length and bytes; integers little-endian. Lengths keep the fields
    /// apart whatever they contain.
    pub fn digest(&self) -> u64 {
        let mut bytes = Vec::with_capacity(64 + self.model.len() + self.scheme.len());
        bytes.extend_from_slice(b"kvreuse-domain-v1");
        bytes.extend_from_slice(&(self.model.len() as u64).to_le_bytes());
        bytes.extend_from_slice(self.model.as_bytes());
        bytes.extend_from_slice(&(self.block_size as u64).to_le_bytes());
        bytes.push(u8::from(self.eagle));
        bytes.extend_from_slice(&(self.scheme.len() as u64).to_le_bytes());
        bytes.extend_from_slice(self.scheme.as_bytes());
        xxhash_rust::xxh3::xxh3_64(&bytes)
    }
}

/// A decoded message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    /// The publishing replica.
    pub source: u64,
    /// Its domain's digest.
    pub domain: u64,
    /// The ids, oldest first.
    pub ids: Vec<u64>,
}

/// Why bytes are not a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum MessageError {
    /// Longer than [`MAX_MESSAGE_BYTES`] or announcing more than [`MAX_IDS`] ids.
    Oversized {
        /// The message's length in bytes.
        bytes: usize,
        /// The ids its header announces (0 when the header is not readable).
        count: usize,
    },
    /// Shorter than the header.
    Truncated {
        /// The message's length in bytes.
        bytes: usize,
    },
    /// Not starting with [`MAGIC`].
    BadMagic,
    /// A version this code does not read.
    UnsupportedVersion(u8),
    /// Flags this code does not know.
    UnknownFlags(u8),
    /// The length does not match the announced count.
    LengthMismatch {
        /// The ids the header announces.
        count: usize,
        /// The length those ids make, with the signature if the version has one.
        expected: usize,
        /// The message's length in bytes.
        bytes: usize,
    },
    /// More ids given to [`encode_into`] than [`MAX_IDS`].
    TooManyIds(usize),
    /// An unsigned message for a receiver with a key.
    Unsigned,
    /// A signed message whose MAC does not match the receiver's key.
    BadSignature,
    /// A signed message for a receiver without a key.
    Signed,
}

impl MessageError {
    /// Whether the message was rejected for its size rather than its shape.
    pub fn is_oversized(&self) -> bool {
        matches!(self, MessageError::Oversized { .. } | MessageError::TooManyIds(_))
    }
}

impl fmt::Display for MessageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::Oversized { bytes, count } => write!(
                f,
                "message of {bytes} bytes announcing {count} ids exceeds the limit of {MAX_IDS} \
                 ids ({MAX_MESSAGE_BYTES} bytes)"
            ),
            Self::Truncated { bytes } => {
                write!(f, "message of {bytes} bytes is shorter than its {HEADER_BYTES}-byte header")
            }
            Self::BadMagic => f.write_str("not a kvreuse message (bad magic)"),
            Self::UnsupportedVersion(v) => write!(f, "unsupported message version {v}"),
            Self::UnknownFlags(flags) => write!(f, "unknown message flags {flags:#04x}"),
            Self::LengthMismatch { count, expected, bytes } => {
                write!(f, "message announces {count} ids ({expected} bytes) but has {bytes} bytes")
            }
            Self::TooManyIds(n) => write!(f, "{n} ids do not fit one message (at most {MAX_IDS})"),
            Self::Unsigned => f.write_str("an unsigned message, but this replica has a sync key"),
            Self::BadSignature => f.write_str("a signed message whose signature does not match"),
            Self::Signed => f.write_str("a signed message, but this replica has no sync key"),
        }
    }
}

impl core::error::Error for MessageError {}

/// Appends the message for `ids` to `out`: signed with `key` (version 2) when given, else
/// version 1. At most [`MAX_IDS`] ids; split longer lists.
pub fn encode_into(
    source: u64,
    domain: u64,
    ids: &[u64],
    key: Option<&SyncKey>,
    out: &mut Vec<u8>,
) -> Result<(), MessageError> {
    if ids.len() > MAX_IDS {
        return Err(MessageError::TooManyIds(ids.len()));
    }
    let start = out.len();
    out.reserve(message_bytes(ids.len(), key.is_some()));
    out.extend_from_slice(&MAGIC);
    out.push(if key.is_some() { SIGNED_VERSION } else { VERSION });
    out.push(0);
    out.extend_from_slice(&(ids.len() as u16).to_le_bytes());
    out.extend_from_slice(&source.to_le_bytes());
    out.extend_from_slice(&domain.to_le_bytes());
    for id in ids {
        out.extend_from_slice(&id.to_le_bytes());
    }
    if let Some(key) = key {
        let mut mac = key.mac();
        mac.update(&out[start..]);
        out.extend_from_slice(&mac.finalize().into_bytes());
    }
    Ok(())
}

/// Decodes and checks a message, its signature against `key` (see the [module docs](self):
/// with a key only signed messages are accepted, without one only unsigned ones).
pub fn decode(bytes: &[u8], key: Option<&SyncKey>) -> Result<Message, MessageError> {
    let count = match bytes.get(6..8) {
        Some(&[lo, hi]) if bytes.starts_with(&MAGIC) => usize::from(u16::from_le_bytes([lo, hi])),
        _ => 0,
    };
    if bytes.len() > MAX_MESSAGE_BYTES || count > MAX_IDS {
        return Err(MessageError::Oversized { bytes: bytes.len(), count });
    }
    let Some(header) = bytes.first_chunk::<HEADER_BYTES>() else {
        return Err(MessageError::Truncated { bytes: bytes.len() });
    };
    if header[..4] != MAGIC {
        return Err(MessageError::BadMagic);
    }
    let signed = match header[4] {
        VERSION => false,
        SIGNED_VERSION => true,
        other => return Err(MessageError::UnsupportedVersion(other)),
    };
    if header[5] != 0 {
        return Err(MessageError::UnknownFlags(header[5]));
    }
    let body = HEADER_BYTES + 8 * count;
    let expected = message_bytes(count, signed);
    if bytes.len() != expected {
        return Err(MessageError::LengthMismatch { count, expected, bytes: bytes.len() });
    }
    match (signed, key) {
        (false, Some(_)) => return Err(MessageError::Unsigned),
        (true, None) => return Err(MessageError::Signed),
        (true, Some(key)) => {
            let mut mac = key.mac();
            mac.update(&bytes[..body]);
            // Constant time: the comparison does not tell where a forgery went wrong.
            mac.verify_slice(&bytes[body..]).map_err(|_| MessageError::BadSignature)?;
        }
        (false, None) => {}
    }
    let word = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
    let ids = bytes[HEADER_BYTES..body]
        .chunks_exact(8)
        .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
        .collect();
    Ok(Message { source: word(8), domain: word(16), ids })
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;
    use alloc::vec;

    fn encoded(ids: &[u64]) -> Vec<u8> {
        let mut out = Vec::new();
        encode_into(7, 9, ids, None, &mut out).unwrap();
        out
    }

    #[test]
    fn round_trips_and_has_the_documented_layout() {
        for n in [0usize, 1, 5, MAX_IDS] {
            let ids: Vec<u64> =
                (0..n as u64).map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15)).collect();
            let bytes = encoded(&ids);
            assert_eq!(bytes.len(), HEADER_BYTES + 8 * n);
            assert_eq!(decode(&bytes, None).unwrap(), Message { source: 7, domain: 9, ids });
        }
        let bytes = encoded(&[0x0102_0304_0506_0708]);
        assert_eq!(&bytes[..8], b"KVRS\x01\x00\x01\x00");
        assert_eq!(bytes[8..16], 7u64.to_le_bytes());
        assert_eq!(bytes[16..24], 9u64.to_le_bytes());
        assert_eq!(bytes[24..], [8, 7, 6, 5, 4, 3, 2, 1]);
    }

    #[test]
    fn every_defect_is_named() {
        let good = encoded(&[1, 2, 3]);
        let with = |at: usize, byte: u8| {
            let mut b = good.clone();
            b[at] = byte;
            b
        };
        assert_eq!(decode(&good[..10], None), Err(MessageError::Truncated { bytes: 10 }));
        assert_eq!(decode(&[], None), Err(MessageError::Truncated { bytes: 0 }));
        assert_eq!(decode(&with(0, b'X'), None), Err(MessageError::BadMagic));
        assert_eq!(decode(&with(4, 3), None), Err(MessageError::UnsupportedVersion(3)));
        assert_eq!(decode(&with(5, 1), None), Err(MessageError::UnknownFlags(1)));
        assert_eq!(
            decode(&good[..good.len() - 1], None),
            Err(MessageError::LengthMismatch {
                count: 3,
                expected: good.len(),
                bytes: good.len() - 1
            })
        );
        let mut long = good.clone();
        long.push(0);
        assert!(matches!(decode(&long, None), Err(MessageError::LengthMismatch { .. })));
        // Announcing more than the limit, or being longer than any valid message.
        let big = with(7, 0x20);
        assert_eq!(
            decode(&big, None),
            Err(MessageError::Oversized { bytes: good.len(), count: 0x2003 })
        );
        let huge = vec![0u8; MAX_MESSAGE_BYTES + 1];
        assert!(decode(&huge, None).unwrap_err().is_oversized());
        let too_many = vec![0u64; MAX_IDS + 1];
        assert_eq!(
            encode_into(1, 1, &too_many, None, &mut Vec::new()),
            Err(MessageError::TooManyIds(MAX_IDS + 1))
        );
    }

    #[test]
    fn signed_messages_need_the_key_and_only_keyed_replicas_take_them() {
        let key = SyncKey::parse(&"ab".repeat(32)).unwrap();
        let other = SyncKey::from_bytes(&[7u8; 40]).unwrap();
        let mut signed = Vec::new();
        encode_into(7, 9, &[1, 2, 3], Some(&key), &mut signed).unwrap();
        assert_eq!((signed[4], signed.len()), (SIGNED_VERSION, HEADER_BYTES + 24 + MAC_BYTES));
        let want = Message { source: 7, domain: 9, ids: vec![1, 2, 3] };
        assert_eq!(decode(&signed, Some(&key)), Ok(want));
        assert_eq!(decode(&signed, Some(&other)), Err(MessageError::BadSignature));
        assert_eq!(decode(&signed, None), Err(MessageError::Signed));
        assert_eq!(decode(&encoded(&[1]), Some(&key)), Err(MessageError::Unsigned));
        // Any changed byte, header, id or MAC, fails the check.
        for at in 0..signed.len() {
            let mut forged = signed.clone();
            forged[at] ^= 0x40;
            assert!(decode(&forged, Some(&key)).is_err(), "byte {at}");
        }
        assert_eq!(
            decode(&signed[..signed.len() - 1], Some(&key)),
            Err(MessageError::LengthMismatch {
                count: 3,
                expected: signed.len(),
                bytes: signed.len() - 1
            })
        );
    }

    #[test]
    fn keys_are_hex_or_base64_of_32_bytes_or_more() {
        let bytes: Vec<u8> = (0..32).collect();
        let hex: alloc::string::String = bytes.iter().map(|b| alloc::format!("{b:02x}")).collect();
        let b64 = base64::engine::general_purpose::STANDARD.encode(&bytes);
        let url = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&bytes);
        for text in [hex.as_str(), &hex.to_uppercase(), &b64, &url, &alloc::format!("  {b64}\n")] {
            assert_eq!(SyncKey::parse(text), SyncKey::from_bytes(&bytes), "{text}");
        }
        assert_eq!(SyncKey::parse("abcd"), Err(KeyError::TooShort(2)));
        assert_eq!(SyncKey::parse("not a key!"), Err(KeyError::Unreadable));
        assert_eq!(
            alloc::format!("{:?}", SyncKey::from_bytes(&bytes).unwrap()),
            "SyncKey(32 bytes)"
        );
    }

    #[test]
    fn the_largest_message_is_accepted_and_one_byte_more_is_not() {
        let key = SyncKey::from_bytes(&[7; 32]).unwrap();
        let ids: Vec<u64> = (0..MAX_IDS as u64).collect();
        let mut bytes = Vec::new();
        encode_into(1, 2, &ids, Some(&key), &mut bytes).unwrap();
        assert_eq!(bytes.len(), MAX_MESSAGE_BYTES);
        assert_eq!(MAX_MESSAGE_BYTES, 24 + 8 * 4096 + 32);
        assert_eq!(decode(&bytes, Some(&key)).unwrap().ids, ids);
        let mut unsigned = Vec::new();
        encode_into(1, 2, &ids, None, &mut unsigned).unwrap();
        assert_eq!(unsigned.len(), message_bytes(MAX_IDS, false));
        assert_eq!(decode(&unsigned, None).unwrap().ids, ids);
        bytes.push(0);
        let oversized = MessageError::Oversized { bytes: MAX_MESSAGE_BYTES + 1, count: MAX_IDS };
        assert_eq!(decode(&bytes, Some(&key)), Err(oversized));
        let too_many = encode_into(1, 2, &[0; MAX_IDS + 1], None, &mut Vec::new());
        assert_eq!(too_many, Err(MessageError::TooManyIds(MAX_IDS + 1)));
    }

    #[test]
    fn only_size_errors_are_oversized() {
        assert!(MessageError::Oversized { bytes: 1, count: 5000 }.is_oversized());
        assert!(MessageError::TooManyIds(5000).is_oversized());
        for error in [
            MessageError::Truncated { bytes: 3 },
            MessageError::BadMagic,
            MessageError::UnsupportedVersion(9),
            MessageError::UnknownFlags(1),
            MessageError::LengthMismatch { count: 1, expected: 28, bytes: 3 },
            MessageError::Unsigned,
            MessageError::BadSignature,
            MessageError::Signed,
        ] {
            assert!(!error.is_oversized(), "{error}");
        }
    }

    #[test]
    fn a_count_is_read_only_behind_the_magic() {
        let mut bytes = encoded(&[1]);
        bytes[0] = b'X';
        bytes[6..8].copy_from_slice(&u16::MAX.to_le_bytes());
        assert_eq!(decode(&bytes, None), Err(MessageError::BadMagic));
    }

    #[test]
    fn key_errors_say_what_a_key_is() {
        assert_eq!(
            KeyError::Unreadable.to_string(),
            "a sync key is hex or base64 (standard or URL-safe, padded or not)"
        );
        assert_eq!(KeyError::TooShort(5).to_string(), "a sync key needs at least 32 bytes, not 5");
        assert_eq!(SyncKey::parse("abcd"), Err(KeyError::TooShort(2)));
        assert_eq!(SyncKey::parse("not a key!"), Err(KeyError::Unreadable));
    }

    #[test]
    fn domains_differ_by_every_field() {
        let base =
            Domain { model: "m".into(), block_size: 16, eagle: false, scheme: "dynamo".into() };
        let digests = [
            base.digest(),
            Domain { model: "m2".into(), ..base.clone() }.digest(),
            Domain { block_size: 32, ..base.clone() }.digest(),
            Domain { eagle: true, ..base.clone() }.digest(),
            Domain { scheme: "vllm-sha256-cbor".into(), ..base.clone() }.digest(),
            // Field boundaries count: moving a byte from the model to the scheme changes it.
            Domain { model: "".into(), scheme: "mdynamo".into(), ..base.clone() }.digest(),
        ];
        for (i, a) in digests.iter().enumerate() {
            for b in &digests[i + 1..] {
                assert_ne!(a, b);
            }
        }
        assert_eq!(base.digest(), base.clone().digest());
    }
}
