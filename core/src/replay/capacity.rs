//! History sizes as people write them: `10k` blocks, `256MiB`, `inf`.

use core::fmt;

use crate::history::{BoxStorage, History, Layout};
use crate::setup::{Quantity, QuantityError, parse_quantity};

/// A history size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Capacity {
    /// A number of blocks (`1000`, `10k`, `1M`, `2G`: decimal multiples).
    Blocks(usize),
    /// A byte budget (`64KiB`, `256MiB`, `1GiB`, `500MB`, `4096B`; units in any case),
    /// converted to blocks with the history's real footprint.
    Bytes(usize),
    /// No limit (`inf`).
    Infinite,
}

/// Why a capacity could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CapacityError {
    /// Not a number with a known suffix.
    Unrecognized,
    /// Zero blocks or bytes.
    Zero,
    /// Too large to represent.
    Overflow,
    /// A byte budget too small for a history of even one block.
    BudgetTooSmall,
}

impl fmt::Display for CapacityError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Unrecognized => {
                "expected blocks (1000, 10k, 1M), bytes (256MiB, 1GiB, 500MB) or inf"
            }
            Self::Zero => "a capacity must be positive",
            Self::Overflow => "too large",
            Self::BudgetTooSmall => "too few bytes for a history of even one block",
        })
    }
}

impl core::error::Error for CapacityError {}

impl Capacity {
    /// Parses one capacity: `inf`, or a [quantity](crate::setup::parse_quantity) whose plain
    /// number counts blocks and whose byte unit makes it a byte budget.
    pub fn parse(text: &str) -> Result<Capacity, CapacityError> {
        let trimmed = text.trim_ascii();
        if trimmed.eq_ignore_ascii_case("inf") || trimmed.eq_ignore_ascii_case("infinite") {
            return Ok(Capacity::Infinite);
        }
        let (value, bytes) = match parse_quantity(trimmed) {
            Ok(Quantity::Number(blocks)) => (blocks, false),
            Ok(Quantity::Bytes(bytes)) => (bytes, true),
            Err(QuantityError::Unrecognized) => return Err(CapacityError::Unrecognized),
            Err(QuantityError::Overflow) => return Err(CapacityError::Overflow),
        };
        let value = usize::try_from(value).map_err(|_| CapacityError::Overflow)?;
        match (value, bytes) {
            (0, _) => Err(CapacityError::Zero),
            (v, true) => Ok(Capacity::Bytes(v)),
            (v, false) => Ok(Capacity::Blocks(v)),
        }
    }

    /// The capacity in blocks (`None` for `inf`).
    pub fn blocks(self) -> Result<Option<usize>, CapacityError> {
        match self {
            Capacity::Blocks(blocks) => Ok(Some(blocks)),
            Capacity::Bytes(bytes) => {
                Layout::largest_within(bytes, History::<BoxStorage>::bytes_for)
                    .map(|layout| Some(layout.capacity()))
                    .map_err(|_| CapacityError::BudgetTooSmall)
            }
            Capacity::Infinite => Ok(None),
        }
    }

    /// Heap bytes of a history of `blocks` blocks, or `usize::MAX` beyond the largest.
    pub fn heap_bytes_of(blocks: usize) -> usize {
        Layout::for_capacity(blocks).map_or(usize::MAX, |l| History::<BoxStorage>::bytes_for(&l))
    }
}

impl fmt::Display for Capacity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Capacity::Blocks(blocks) => write!(f, "{blocks}"),
            Capacity::Bytes(bytes) => write!(f, "{bytes}B"),
            Capacity::Infinite => f.write_str("inf"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capacities_parse() {
        assert_eq!(Capacity::parse("1k"), Ok(Capacity::Blocks(1_000)));
        assert_eq!(Capacity::parse(" 1M "), Ok(Capacity::Blocks(1_000_000)));
        assert_eq!(Capacity::parse("123"), Ok(Capacity::Blocks(123)));
        assert_eq!(Capacity::parse("256MiB"), Ok(Capacity::Bytes(256 << 20)));
        assert_eq!(Capacity::parse("2KB"), Ok(Capacity::Bytes(2_000)));
        assert_eq!(Capacity::parse("INF"), Ok(Capacity::Infinite));
        assert_eq!(Capacity::parse("2 gib"), Ok(Capacity::Bytes(2 << 30)));
        assert_eq!(Capacity::parse("3k"), Ok(Capacity::Blocks(3_000)));
        for (bad, error) in [
            ("", CapacityError::Unrecognized),
            ("k", CapacityError::Unrecognized),
            ("10x", CapacityError::Unrecognized),
            ("-5", CapacityError::Unrecognized),
            ("1.5M", CapacityError::Unrecognized),
            ("0", CapacityError::Zero),
            ("0MiB", CapacityError::Zero),
            ("99999999999999999999", CapacityError::Overflow),
            ("18446744073709551615G", CapacityError::Overflow),
        ] {
            assert_eq!(Capacity::parse(bad), Err(error), "{bad:?}");
        }
    }

    #[test]
    fn byte_budgets_become_the_largest_fitting_capacity() {
        let blocks = Capacity::Bytes(1 << 20).blocks().unwrap().unwrap();
        assert!(Capacity::heap_bytes_of(blocks) <= 1 << 20);
        assert!(Capacity::heap_bytes_of(blocks + 1) > 1 << 20);
        assert_eq!(Capacity::Bytes(10).blocks(), Err(CapacityError::BudgetTooSmall));
        assert_eq!(Capacity::Infinite.blocks(), Ok(None));
    }
}
