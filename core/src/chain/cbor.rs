//! The few canonical CBOR (RFC 8949 §4.2.1) items vLLM's block hashes are made of.
//!
//! vLLM hashes `cbor2.dumps((parent, token_ids, extra_keys), canonical=True)`. Only unsigned
//! integers, byte strings, text strings, arrays and `null` occur, and canonical form means
//! every length and integer uses its shortest encoding. Writing those five items straight into
//! a reused buffer is a few lines and keeps the hot path free of allocation, so no CBOR library
//! is pulled in for it.

use alloc::vec::Vec;

const UNSIGNED: u8 = 0;
const BYTES: u8 = 2;
const TEXT: u8 = 3;
const ARRAY: u8 = 4;
const NULL: u8 = 0xf6;

/// Writes a major type with its argument in the shortest form.
fn head(out: &mut Vec<u8>, major: u8, value: u64) {
    let m = major << 5;
    match value {
        0..=23 => out.push(m | value as u8),
        24..=0xff => out.extend_from_slice(&[m | 24, value as u8]),
        0x100..=0xffff => {
            out.push(m | 25);
            out.extend_from_slice(&(value as u16).to_be_bytes());
        }
        0x1_0000..=0xffff_ffff => {
            out.push(m | 26);
            out.extend_from_slice(&(value as u32).to_be_bytes());
        }
        _ => {
            out.push(m | 27);
            out.extend_from_slice(&value.to_be_bytes());
        }
    }
}

pub(crate) fn unsigned(out: &mut Vec<u8>, value: u64) {
    head(out, UNSIGNED, value);
}

pub(crate) fn bytes(out: &mut Vec<u8>, value: &[u8]) {
    head(out, BYTES, value.len() as u64);
    out.extend_from_slice(value);
}

pub(crate) fn text(out: &mut Vec<u8>, value: &str) {
    head(out, TEXT, value.len() as u64);
    out.extend_from_slice(value.as_bytes());
}

pub(crate) fn array(out: &mut Vec<u8>, len: usize) {
    head(out, ARRAY, len as u64);
}

pub(crate) fn null(out: &mut Vec<u8>) {
    out.push(NULL);
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    #[test]
    fn integers_use_their_shortest_form() {
        // RFC 8949 Appendix A examples.
        let cases: [(u64, &[u8]); 9] = [
            (0, &[0x00]),
            (23, &[0x17]),
            (24, &[0x18, 0x18]),
            (255, &[0x18, 0xff]),
            (256, &[0x19, 0x01, 0x00]),
            (65535, &[0x19, 0xff, 0xff]),
            (65536, &[0x1a, 0x00, 0x01, 0x00, 0x00]),
            (4_294_967_295, &[0x1a, 0xff, 0xff, 0xff, 0xff]),
            (4_294_967_296, &[0x1b, 0, 0, 0, 1, 0, 0, 0, 0]),
        ];
        for (value, expected) in cases {
            let mut out = vec![];
            unsigned(&mut out, value);
            assert_eq!(out, expected, "{value}");
        }
    }

    #[test]
    fn strings_arrays_and_null() {
        let mut out = vec![];
        array(&mut out, 3);
        text(&mut out, "IETF");
        bytes(&mut out, &[1, 2, 3, 4]);
        null(&mut out);
        assert_eq!(out, [0x83, 0x64, b'I', b'E', b'T', b'F', 0x44, 1, 2, 3, 4, 0xf6]);
        let mut long = vec![];
        array(&mut long, 25);
        assert_eq!(long, [0x98, 25]);
    }
}
