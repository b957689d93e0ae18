//! How far back in time a history reaches: when its oldest id present was inserted.
//!
//! Insertions are grouped into spans of at least `capacity / SPANS` insertions, each stamped
//! with the clock when it began. The clock is read once per span, not once per completion, and
//! the spans that still hold ids present number at most `SPANS + 2`, so the memory is fixed when
//! the history is built, whatever the completion sizes: a stream of one-block completions
//! costs no more than one of long ones. The price is resolution: the age reported is that of
//! the span holding the oldest id, which began at most one span's worth of insertions before it.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Spans per capacity's worth of insertions.
const SPANS: u64 = 64;

/// The most spans kept: those covering the ids present, plus the one being filled.
const KEPT: usize = SPANS as usize + 2;

/// The spans of a history's insertions that still hold ids present, oldest first.
#[derive(Debug)]
pub(super) struct Reach {
    /// (insertion number the span begins at, when), oldest first.
    spans: VecDeque<(u64, Instant)>,
    /// Insertions per span.
    step: u64,
}

impl Reach {
    /// The tracking for a history of `capacity` ids; allocates all it will ever hold.
    pub(super) fn new(capacity: usize) -> Self {
        Reach {
            spans: VecDeque::with_capacity(KEPT),
            step: (capacity as u64).div_ceil(SPANS).max(1),
        }
    }

    /// Heap bytes of the tracking, fixed at construction.
    pub(super) fn bytes() -> usize {
        KEPT * size_of::<(u64, Instant)>()
    }

    /// Records an insert that made insertions `before..total` (at least one), leaving the
    /// last `len` insertions present.
    pub(super) fn note(&mut self, before: u64, total: u64, len: usize) {
        if self.spans.back().is_none_or(|&(start, _)| before - start >= self.step) {
            self.spans.push_back((before, Instant::now()));
        }
        // Spans wholly evicted go: the next one begins at or before the oldest id present.
        let oldest = total - len as u64;
        while self.spans.get(1).is_some_and(|&(start, _)| start <= oldest) {
            self.spans.pop_front();
        }
    }

    /// Forgets every span.
    pub(super) fn clear(&mut self) {
        self.spans.clear();
    }

    /// How long ago the span holding the oldest id present began.
    pub(super) fn oldest_age(&self) -> Option<Duration> {
        self.spans.front().map(|&(_, at)| at.elapsed())
    }

    #[cfg(test)]
    pub(super) fn spans(&self) -> usize {
        self.spans.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A model of what the spans must cover: each id's insertion number maps to the span that
    /// began at or before it; the oldest present id's span is the front.
    #[test]
    fn spans_stay_bounded_and_cover_the_oldest_id_present() {
        for capacity in [1usize, 2, 63, 64, 1000, 6400] {
            let mut reach = Reach::new(capacity);
            let allocated = reach.spans.capacity();
            let mut total = 0u64;
            // Completions of 1 to 7 ids, many times the capacity.
            for k in 0..(20 * capacity as u64).max(200) {
                let before = total;
                total += 1 + k % 7;
                let len = total.min(capacity as u64) as usize;
                reach.note(before, total, len);
                assert!(reach.spans() <= KEPT, "{capacity}: {} spans", reach.spans());
                let oldest = total - len as u64;
                let front = reach.spans.front().unwrap().0;
                assert!(front <= oldest, "{capacity}: span {front} after the oldest {oldest}");
                // The front span is the last one beginning at or before the oldest id.
                assert!(reach.spans.get(1).is_none_or(|&(start, _)| start > oldest));
            }
            assert_eq!(reach.spans.capacity(), allocated, "{capacity}: the spans grew");
        }
    }
}
