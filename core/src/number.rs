//! Decimal numbers in settings (`0.1`, `1000`, `2.5e-3`), read without `f64::from_str`.
//!
//! The standard library's float parser is exact for every input, and to be so it carries a
//! table of powers of five and a big-decimal fallback: about 10 kB of the browser build, for
//! the handful of fractional settings a run takes (a warm-up share, a speedup, a router's
//! temperature). This reader covers what settings are written as: an optional sign, digits
//! with an optional decimal point, an optional exponent. It gives the correctly rounded `f64`
//! whenever the significant digits fit 2^53 (up to 15 digits) and the decimal exponent is
//! within ±22, which takes one exact integer conversion and one correctly rounded
//! multiplication or division by an exact power of ten (Clinger's fast path). Beyond that
//! (more digits, or far exponents), the result may differ from the exact one in the last
//! few units of the last place; no setting needs that precision. `inf`, `nan` and hexadecimal
//! are not numbers here: a setting must be finite anyway.

/// Powers of ten exactly representable in an `f64`.
const EXACT_POWERS: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
    1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
];

/// Ten to the powers of two up to 2^8 (beyond 10^±511 every result is infinite or zero):
/// exact up to `1e16`, correctly rounded beyond.
const BINARY_POWERS: [f64; 9] = [1e1, 1e2, 1e4, 1e8, 1e16, 1e32, 1e64, 1e128, 1e256];

/// Significant digits kept; later ones only move the exponent (19 fit a `u64`).
const MAX_DIGITS: u32 = 19;

/// A whole number as `u64::from_str` reads it (digits, an optional leading `+`), or `None`.
/// Every setting's whole numbers go through this one copy of the parser (the browser build
/// would otherwise inline one per caller).
#[inline(never)]
pub(crate) fn parse_u64(text: &str) -> Option<u64> {
    text.parse().ok()
}

/// The value of `text` (no blanks around it), or `None` when it is not a decimal number.
pub fn parse_f64(text: &str) -> Option<f64> {
    let mut bytes = text.as_bytes();
    let negative = match bytes.first() {
        Some(b'-') => true,
        Some(b'+') => false,
        _ => return unsigned(bytes),
    };
    bytes = &bytes[1..];
    let value = unsigned(bytes)?;
    Some(if negative { -value } else { value })
}

/// A number without a sign.
fn unsigned(bytes: &[u8]) -> Option<f64> {
    let mut mantissa = 0u64;
    let mut kept = 0u32;
    // The decimal exponent the kept digits are scaled by.
    let mut exponent = 0i64;
    let mut any_digit = false;
    let mut fraction = false;
    let mut rest = bytes;
    while let Some((&b, tail)) = rest.split_first() {
        match b {
            b'0'..=b'9' => {
                any_digit = true;
                if mantissa == 0 && b == b'0' {
                    // A leading zero: only its place counts.
                    exponent -= i64::from(fraction);
                } else if kept < MAX_DIGITS {
                    mantissa = mantissa * 10 + u64::from(b - b'0');
                    kept += 1;
                    exponent -= i64::from(fraction);
                } else {
                    // A digit past the kept ones: dropped, its place kept.
                    exponent += i64::from(!fraction);
                }
            }
            b'.' if !fraction => fraction = true,
            b'e' | b'E' => {
                exponent = exponent.checked_add(exponent_part(tail)?)?;
                rest = &[];
                break;
            }
            _ => return None,
        }
        rest = tail;
    }
    debug_assert!(rest.is_empty());
    if !any_digit {
        return None;
    }
    Some(scale(mantissa, exponent))
}

/// The digits after `e`, with an optional sign; at most 9 of them (far beyond any `f64`).
fn exponent_part(bytes: &[u8]) -> Option<i64> {
    let (negative, digits) = match bytes.split_first() {
        Some((b'-', rest)) => (true, rest),
        Some((b'+', rest)) => (false, rest),
        _ => (false, bytes),
    };
    if digits.is_empty() || digits.len() > 9 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let value = digits.iter().fold(0i64, |n, &d| n * 10 + i64::from(d - b'0'));
    Some(if negative { -value } else { value })
}

/// `mantissa` times ten to the `exponent`.
fn scale(mantissa: u64, exponent: i64) -> f64 {
    if mantissa == 0 {
        return 0.0;
    }
    let m = mantissa as f64;
    let exact = mantissa <= 1 << 53;
    match usize::try_from(exponent.unsigned_abs()) {
        Ok(e) if exact && e < EXACT_POWERS.len() => {
            if exponent.is_negative() {
                m / EXACT_POWERS[e]
            } else {
                m * EXACT_POWERS[e]
            }
        }
        // Outside the fast path: ten to the exponent as a product of powers of ten to powers
        // of two, smallest first, so that nothing overflows or underflows before the result
        // does; each step within half a unit in the last place.
        _ => {
            let e = exponent.unsigned_abs().min(511);
            let mut value = m;
            for (bit, power) in BINARY_POWERS.iter().enumerate() {
                if e >> bit & 1 == 1 {
                    value = if exponent.is_negative() { value / power } else { value * power };
                }
            }
            value
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::format;
    use proptest::prelude::*;

    #[test]
    fn reads_what_settings_are_written_as() {
        for text in [
            "0",
            "0.0",
            "1",
            "1000",
            "0.1",
            "0.5",
            "2.5e-3",
            "1E3",
            ".5",
            "5.",
            "+3",
            "-0.25",
            "007",
            "0.000001",
            "1e22",
            "2.5E+2",
            "1e000000003",
            "1e-00000002",
            "123456789012345",
            "0.3333333333",
        ] {
            assert_eq!(parse_f64(text), text.parse::<f64>().ok(), "{text}");
        }
    }

    #[test]
    fn refuses_what_is_not_a_decimal_number() {
        for text in [
            "",
            ".",
            "-",
            "+",
            "e5",
            "1e",
            "1e+",
            "1.2.3",
            "1,5",
            " 1",
            "1 ",
            "inf",
            "NaN",
            "0x10",
            "1e1234567890",
            "--1",
        ] {
            assert_eq!(parse_f64(text), None, "{text:?}");
        }
    }

    #[test]
    fn far_numbers_are_close_and_huge_ones_infinite() {
        for text in [
            "1e300",
            "1.5e308",
            "2.2250738585072014e-308",
            "12345678901234567890123",
            "1e-30",
            "1e23",
            "1e-23",
            "99999999999999999999999",
            "0.99999999999999999999999",
        ] {
            let (got, exact) = (parse_f64(text).unwrap(), text.parse::<f64>().unwrap());
            assert!((got - exact).abs() <= exact * 1e-15, "{text}: {got} vs {exact}");
        }
        assert_eq!(parse_f64("1e400"), Some(f64::INFINITY));
        assert_eq!(parse_f64("1e-400"), Some(0.0));
    }

    proptest! {
        /// Up to 15 significant digits and exponents within ±22: exactly the standard parser.
        #[test]
        fn fast_path_is_correctly_rounded(digits in 0u64..1_000_000_000_000_000, point in 0usize..=15, exp_seed: u32) {
            let mut text = format!("{digits}");
            let point = point.min(text.len());
            let fraction_digits = (text.len() - point) as i32;
            // A written exponent within ±22 whose value, less the fraction's digits, is too:
            // drawn inside that window rather than filtered (a filter rejected most draws,
            // which aborted runs of more than a few thousand cases).
            let (low, high) = ((fraction_digits - 22).max(-22), (fraction_digits + 22).min(22));
            let exp = low + (exp_seed % (high - low + 1) as u32) as i32;
            text.insert(point, '.');
            let text = format!("{text}e{exp}");
            prop_assert_eq!(parse_f64(&text), text.parse::<f64>().ok(), "{}", text);
        }

        /// Anything else is within a few units in the last place.
        #[test]
        fn any_number_is_close(mantissa: u64, exp in -300i32..=280) {
            let text = format!("{mantissa}e{exp}");
            let (got, exact) = (parse_f64(&text).unwrap(), text.parse::<f64>().unwrap());
            prop_assert!((got - exact).abs() <= exact.abs() * 1e-14, "{}: {} vs {}", text, got, exact);
        }
    }
}
