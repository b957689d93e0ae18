//! How far back in time a history reaches: when its oldest id present was inserted.
//!
//! Insertions are grouped into spans of at least `capacity / SPANS` insertions, each stamped
//! with the clock when it began. The clock is read once per span, not once per completion, and
//! the spans that still hold ids present number at most `SPANS + 2`, so they fit in a fixed
//! array inside the history's writer, whatever the completion sizes: a stream of one-block
//! completions costs no more than one of long ones, and no heap at all. The price is
//! resolution: the age reported is that of the span holding the oldest id, which began at most
//! about one span's worth of insertions before it.

use std::time::{Duration, Instant};

/// Spans per capacity's worth of insertions.
const SPANS: u64 = 64;

/// The most spans kept: those covering the ids present, plus the one just begun.
const KEPT: usize = SPANS as usize + 2;

/// The spans of a history's insertions that still hold ids present, oldest first, in a ring.
#[derive(Debug)]
pub(super) struct Reach {
    /// (insertion number the span begins at, when); `len` of them from `head`, wrapping.
    spans: [(u64, Instant); KEPT],
    head: usize,
    len: usize,
    /// Insertions per span.
    step: u64,
    /// The insertion number from which an insert begins a new span: the last span's start
    /// plus `step`, or 0 when there is none.
    next_span: u64,
    /// The oldest insertion present from which the front span goes: the next span's start,
    /// or `u64::MAX` while there is only one.
    next_pop: u64,
}

impl Reach {
    /// The tracking for a history of `capacity` ids.
    pub(super) fn new(capacity: usize) -> Self {
        Reach {
            spans: [(0, Instant::now()); KEPT],
            head: 0,
            len: 0,
            step: (capacity as u64).div_ceil(SPANS).max(1),
            next_span: 0,
            next_pop: u64::MAX,
        }
    }

    /// The `i`-th span, oldest first.
    fn get(&self, i: usize) -> Option<(u64, Instant)> {
        (i < self.len).then(|| self.spans[Self::wrap(self.head + i)])
    }

    /// `i % KEPT` for `i` below `2 * KEPT`, without a division: every call site adds two
    /// indices below `KEPT`.
    fn wrap(i: usize) -> usize {
        if i >= KEPT { i - KEPT } else { i }
    }

    /// Records an insert that made insertions `before..total` (at least one), leaving the
    /// last `len` insertions present. Most inserts neither begin a span nor see one go: two
    /// compares.
    #[inline]
    pub(super) fn note(&mut self, before: u64, total: u64, len: usize) {
        let oldest = total - len as u64;
        if before >= self.next_span || oldest >= self.next_pop {
            self.renew(before, oldest);
        }
    }

    /// [`note`](Self::note) when a span begins or goes.
    fn renew(&mut self, before: u64, oldest: u64) {
        if before >= self.next_span {
            if self.len == KEPT {
                // Unreachable while the bound above holds; losing the oldest span then
                // understates the age rather than failing.
                self.pop_front();
            }
            self.spans[Self::wrap(self.head + self.len)] = (before, Instant::now());
            self.len += 1;
            self.next_span = before + self.step;
        }
        // Spans wholly evicted go: the next one begins at or before the oldest id present.
        while self.get(1).is_some_and(|(start, _)| start <= oldest) {
            self.pop_front();
        }
        self.next_pop = self.get(1).map_or(u64::MAX, |(start, _)| start);
    }

    fn pop_front(&mut self) {
        self.head = Self::wrap(self.head + 1);
        self.len -= 1;
    }

    /// Forgets every span.
    pub(super) fn clear(&mut self) {
        self.len = 0;
        self.next_span = 0;
        self.next_pop = u64::MAX;
    }

    /// How long ago the span holding the oldest id present began.
    pub(super) fn oldest_age(&self) -> Option<Duration> {
        self.get(0).map(|(_, at)| at.elapsed())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Against the rule the spans must keep: the front span begins at or before the oldest id
    /// present and the next one after it, with never more than `KEPT` spans, whatever the
    /// completion sizes; and so again after a clear, as the insertion count goes on. The
    /// spans are exactly those of a list that applies the rule at every insert.
    #[test]
    fn spans_stay_bounded_and_cover_the_oldest_id_present() {
        for capacity in [1usize, 2, 63, 64, 1000, 6400] {
            let mut reach = Reach::new(capacity);
            let mut total = 0u64;
            // Completions of 1 to 7 ids, of 1, then of 1 to 13, each many times the capacity.
            for (round, size) in [|k| 1 + k % 7, |_| 1, |k| 1 + k * 5 % 13].into_iter().enumerate()
            {
                let (start, mut most) = (total, 0);
                let mut model: Vec<u64> = Vec::new();
                for k in 0..(20 * capacity as u64).max(200) {
                    let before = total;
                    total += size(k);
                    let len = (total - start).min(capacity as u64) as usize;
                    reach.note(before, total, len);
                    most = most.max(reach.len);
                    let oldest = total - len as u64;
                    let front = reach.get(0).unwrap().0;
                    assert!(front <= oldest, "{capacity}: span {front} after the oldest {oldest}");
                    assert!(reach.get(1).is_none_or(|(start, _)| start > oldest), "{capacity}");
                    if model.last().is_none_or(|&last| before - last >= reach.step) {
                        model.push(before);
                    }
                    while model.get(1).is_some_and(|&next| next <= oldest) {
                        model.remove(0);
                    }
                    let spans: Vec<u64> = (0..reach.len).map(|i| reach.get(i).unwrap().0).collect();
                    assert_eq!(spans, model, "{capacity}, round {round}, after {total} insertions");
                }
                assert!(most < KEPT, "{capacity}: {most} spans");
                reach.clear();
                assert_eq!(reach.oldest_age(), None);
            }
        }
    }
}
