//! History sizes as people write them: `10k` blocks, `256MiB`, `inf`.

use core::fmt;

use crate::history::{BoxStorage, History, Layout, MAX_CAPACITY};
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
    /// More blocks than the largest history holds ([`MAX_CAPACITY`]).
    MoreThanLargest,
    /// A byte budget the largest history does not fill: it takes `largest` bytes.
    BudgetTooLarge {
        /// The heap bytes of a history of [`MAX_CAPACITY`] blocks.
        largest: usize,
    },
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
            // The numbers are MAX_CAPACITY and its bytes on a 64-bit router (tests check them),
            // written out: formatting them would cost the browser build bytes it does not have.
            Self::MoreThanLargest => "more than the largest history holds (134217727 blocks)",
            Self::BudgetTooLarge { .. } => {
                "more than the largest history takes (134217727 blocks in 2113130632 bytes)"
            }
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
            (v, false) if v > MAX_CAPACITY => Err(CapacityError::MoreThanLargest),
            (v, false) => Ok(Capacity::Blocks(v)),
        }
    }

    /// The capacity in blocks (`None` for `inf`).
    pub fn blocks(self) -> Result<Option<usize>, CapacityError> {
        match self {
            Capacity::Bytes(bytes) => {
                Self::blocks_within(bytes, History::<BoxStorage>::bytes_for).map(Some)
            }
            Capacity::Blocks(blocks) if blocks > MAX_CAPACITY => {
                Err(CapacityError::MoreThanLargest)
            }
            Capacity::Blocks(blocks) => Ok(Some(blocks)),
            Capacity::Infinite => Ok(None),
        }
    }

    /// The most blocks a history of at most `budget` heap bytes holds, its bytes as
    /// `bytes_for` counts them. A budget that even the largest history leaves room in is an
    /// error: it would be the largest history without a word, and two such budgets the same.
    pub fn blocks_within(
        budget: usize,
        bytes_for: impl Fn(&Layout) -> usize,
    ) -> Result<usize, CapacityError> {
        let layout = Layout::largest_within(budget, &bytes_for)
            .map_err(|_| CapacityError::BudgetTooSmall)?;
        let largest = bytes_for(&layout);
        if layout.capacity() == MAX_CAPACITY && budget > largest {
            return Err(CapacityError::BudgetTooLarge { largest });
        }
        Ok(layout.capacity())
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
            ("134217728", CapacityError::MoreThanLargest),
            ("1G", CapacityError::MoreThanLargest),
        ] {
            assert_eq!(Capacity::parse(bad), Err(error), "{bad:?}");
        }
        assert_eq!(Capacity::parse("134217727"), Ok(Capacity::Blocks(MAX_CAPACITY)));
        // Printed as it parses back.
        for text in ["1k", "4GiB", "3MiB", "500MB", "2KB", "1000B", "4097B", "inf"] {
            let capacity = Capacity::parse(text).unwrap();
            assert_eq!(Capacity::parse(&alloc::format!("{capacity}")), Ok(capacity), "{text}");
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

    #[test]
    fn a_budget_the_largest_history_does_not_fill_is_refused() {
        let largest = Capacity::heap_bytes_of(MAX_CAPACITY);
        assert_eq!(Capacity::Bytes(largest).blocks(), Ok(Some(MAX_CAPACITY)));
        for budget in [largest + 1, 4 << 30, usize::MAX] {
            assert_eq!(
                Capacity::Bytes(budget).blocks(),
                Err(CapacityError::BudgetTooLarge { largest }),
                "{budget}"
            );
        }
        assert_eq!(
            Capacity::Blocks(MAX_CAPACITY + 1).blocks(),
            Err(CapacityError::MoreThanLargest)
        );
    }
}
