//! Loom models of the history's lock-free reads.
//!
//! Built only with `--cfg kvreuse_loom` (`./scripts/test-loom`), where `crate::sync` hands the
//! history loom's atomics, `Arc` and fences, so these models run the real code. Loom runs each
//! model once per interleaving of its threads, and at every load also tries each store the
//! C++ memory model allows it to read, which is how a missing `Acquire`/`Release` shows up
//! here although x86 hardware would hide it.
//!
//! Each model starts from a small history built before any thread starts, then lets a writer
//! change it while a reader looks up ids. The writer's changes are single steps (one new id,
//! or a clear), so the history passes through a known sequence of states ([`Timeline`]). Every
//! answer a reader gives must be the answer of one of those states, and the states its answers
//! match must not go back in time from one answer to the next: a reader never sees a mixture
//! of two states, never an id that was not present, and never an id come back. Ids are picked
//! for where the index puts them, so that each model exercises one interaction: a reader
//! racing an insert that evicts what it reads, a slot being reused, a resident moving between
//! buckets, an overflowed id's eviction, a clear, new ids being published, and writers taking
//! turns behind a lock.
//!
//! Capacities stay tiny because loom's work grows exponentially with the atomic operations
//! in the racing sections. Loom explores every interleaving with up to [`PREEMPTIONS`]
//! preemptions (`LOOM_MAX_PREEMPTIONS` overrides it), the bound loom recommends; every store a
//! load may read is explored regardless of that bound.

extern crate std;

use alloc::collections::VecDeque;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use loom::model::Builder;
use loom::sync::Mutex;
use loom::thread;

use super::layout::{Codec, Home, Mixer};
use super::{BUCKET_SLOTS, History, HistoryReader, Layout};
use crate::sync::Arc;

/// Thread preemptions explored per interleaving unless `LOOM_MAX_PREEMPTIONS` is set.
const PREEMPTIONS: usize = 3;

/// The seed every model keys its history with (the ids are chosen for it).
const SEED: u64 = 0x6b76_7265_7573_6521;

/// An id no model ever inserts. It is also the value of a ring entry never written, so a
/// reader that trusted an unwritten entry would report it.
const NEVER: u64 = 0;

std::thread_local! {
    /// Whether [`history`] builds its histories without a summary directory, as large
    /// histories are (the models' tiny ones have one): [`check`] runs every model both ways,
    /// setting it at the start of each execution, on the thread that builds the histories
    /// (a static shared by the tests running at once would change under a model).
    static WITHOUT_DIRECTORY: core::cell::Cell<bool> = const { core::cell::Cell::new(false) };
}

/// Runs `model` under loom with the project's bounds, on histories with a summary directory and
/// then without.
fn check(model: impl Fn() + Sync + Send + 'static) {
    let model = std::sync::Arc::new(model);
    for without in [false, true] {
        let mut builder = Builder::new();
        if builder.preemption_bound.is_none() {
            builder.preemption_bound = Some(PREEMPTIONS);
        }
        // Building the starting histories takes thousands of atomic operations on one thread.
        builder.max_branches = builder.max_branches.max(100_000);
        let model = std::sync::Arc::clone(&model);
        builder.check(move || {
            WITHOUT_DIRECTORY.with(|w| w.set(without));
            model();
        });
    }
}

/// `n` distinct ids (never [`NEVER`]) whose home in a history of `capacity` keyed by [`SEED`]
/// and second bucket satisfy `wanted`, none of them in `taken`.
fn ids_where(
    capacity: usize,
    n: usize,
    taken: &[u64],
    wanted: impl Fn(&Home, usize) -> bool,
) -> Vec<u64> {
    let codec = Codec::new(&Layout::for_capacity(capacity).unwrap());
    let mixer = Mixer::new(SEED);
    (1u64..)
        .filter(|id| {
            let home = codec.home(mixer.mix(*id));
            !taken.contains(id) && wanted(&home, codec.second(&home))
        })
        .take(n)
        .collect()
}

/// The home of `id` in a history of `capacity` keyed by [`SEED`].
fn home_of(capacity: usize, id: u64) -> Home {
    Codec::new(&Layout::for_capacity(capacity).unwrap()).home(Mixer::new(SEED).mix(id))
}

fn history(capacity: usize, ids: &[u64]) -> History {
    let mut history = if WITHOUT_DIRECTORY.with(|w| w.get()) {
        History::without_directory(capacity, SEED)
    } else {
        History::with_capacity(capacity, SEED).unwrap()
    };
    history.insert_all(ids);
    history
}

/// One change a writer makes.
#[derive(Clone, Copy, Debug)]
enum Step<'a> {
    Insert(&'a [u64]),
    Clear,
}

/// The states a history passes through, one per single-id step: what a reader may see.
#[derive(Clone, Debug)]
struct Timeline {
    capacity: usize,
    /// Ids present, oldest first; `states[0]` is the starting state.
    states: Vec<VecDeque<u64>>,
}

impl Timeline {
    fn new(capacity: usize, start: &[u64]) -> Self {
        let mut timeline = Timeline { capacity, states: alloc::vec![VecDeque::new()] };
        timeline.apply(Step::Insert(start));
        // Only the state the starting inserts end in is observable.
        timeline.states.drain(..timeline.states.len() - 1);
        timeline
    }

    /// The naive model of the history's rules: a duplicate changes nothing, a new id evicts
    /// the oldest when full.
    fn apply(&mut self, step: Step<'_>) {
        match step {
            Step::Insert(ids) => {
                for &id in ids {
                    let mut next = self.states.last().unwrap().clone();
                    if next.contains(&id) {
                        continue;
                    }
                    if next.len() == self.capacity {
                        next.pop_front();
                    }
                    next.push_back(id);
                    self.states.push(next);
                }
            }
            Step::Clear => self.states.push(VecDeque::new()),
        }
    }

    fn then(mut self, steps: &[Step<'_>]) -> Self {
        for &step in steps {
            self.apply(step);
        }
        self
    }

    fn last(&self) -> Vec<u64> {
        self.states.last().unwrap().iter().copied().collect()
    }

    /// Whether `seen` answers `observation` in state `i`.
    fn admits(&self, i: usize, observation: &Observation) -> bool {
        let state = &self.states[i];
        match observation {
            Observation::Prefix(query, seen) => {
                query.iter().take_while(|id| state.contains(id)).count() == *seen
            }
            Observation::Len(len) => state.len() == *len,
            Observation::Ids(ids) => state.iter().eq(ids.iter()),
            Observation::SomeIds(ids) => {
                ids.len() == state.len()
                    && ids.iter().all(|id| self.states.iter().any(|s| s.contains(id)))
            }
        }
    }

    /// Checks a reader's observations, in the order it made them: each must be admitted by a
    /// state no older than the previous one's. Returns what is wrong, if anything.
    fn explain(&self, observations: &[Observation]) -> Result<(), String> {
        let mut at = 0;
        for (k, observation) in observations.iter().enumerate() {
            match (at..self.states.len()).find(|&i| self.admits(i, observation)) {
                Some(i) => at = i,
                None => {
                    return Err(format!(
                        "observation {k}, {observation:?}, fits no state from state {at} on; \
                         states: {:?}; all observations: {observations:?}",
                        self.states
                    ));
                }
            }
        }
        Ok(())
    }

    #[track_caller]
    fn check(&self, observations: &[Observation]) {
        if let Err(why) = self.explain(observations) {
            panic!("{why}");
        }
    }
}

/// What a reader saw, in the order it saw it.
#[derive(Clone, Debug)]
enum Observation {
    /// `seen_prefix_len(query)`.
    Prefix(Vec<u64>, usize),
    /// `len()`.
    Len(usize),
    /// `oldest_first()`, which must be exactly one state's ids (no eviction can race it).
    Ids(Vec<u64>),
    /// `oldest_first()` while evictions race it: as many ids as some state holds, each of
    /// them present in some state.
    SomeIds(Vec<u64>),
}

/// A reader that records what it sees.
struct Looker {
    reader: HistoryReader,
    seen: Vec<Observation>,
}

impl Looker {
    fn new(reader: HistoryReader) -> Self {
        Looker { reader, seen: Vec::new() }
    }

    fn prefix(&mut self, query: &[u64]) -> &mut Self {
        let seen = self.reader.seen_prefix_len(query);
        self.seen.push(Observation::Prefix(query.to_vec(), seen));
        self
    }

    fn len(&mut self) -> &mut Self {
        let len = self.reader.len();
        self.seen.push(Observation::Len(len));
        self
    }

    fn ids(&mut self) -> &mut Self {
        let ids = self.reader.oldest_first().collect();
        self.seen.push(Observation::Ids(ids));
        self
    }

    fn some_ids(&mut self) -> &mut Self {
        let ids = self.reader.oldest_first().collect();
        self.seen.push(Observation::SomeIds(ids));
        self
    }

    fn done(&mut self) -> Vec<Observation> {
        core::mem::take(&mut self.seen)
    }
}

/// Runs `steps` on `writer` on this thread while `look` reads from another, then checks the
/// reader's observations and the writer's final state against the timeline.
fn race(
    mut writer: History,
    timeline: Timeline,
    steps: &[Step<'_>],
    look: impl FnOnce(&mut Looker) + Send + 'static,
) {
    let mut looker = Looker::new(writer.reader());
    let reader = thread::spawn(move || {
        look(&mut looker);
        looker.done()
    });
    for &step in steps {
        match step {
            Step::Insert(ids) => {
                writer.insert_all(ids);
            }
            Step::Clear => writer.clear(),
        }
    }
    let observations = reader.join().unwrap();
    let timeline = timeline.then(steps);
    timeline.check(&observations);
    assert_eq!(writer.oldest_first().collect::<Vec<_>>(), timeline.last());
    assert_eq!(writer.forced_evictions(), 0, "the model's ids must fit their buckets");
    writer.shared.tables().check_overflow_counts(&writer.view, &writer.overflowed);
}

/// New ids appear whole: a reader racing inserts into a history with room sees each new id
/// only with everything inserted before it, never an entry that is not written yet (the
/// history's ring starts zeroed, and `NEVER` is zero), and lists exactly one state's ids.
#[test]
fn new_ids_are_published_whole() {
    check(|| {
        let [a, b, c] = [11, 12, 13];
        let writer = history(3, &[a]);
        let timeline = Timeline::new(3, &[a]);
        race(writer, timeline, &[Step::Insert(&[b, c])], move |look| {
            look.prefix(&[b, NEVER]).prefix(&[a, b, c]).ids();
        });
    });
}

/// The reader's length and listing never run ahead of the entries they describe.
#[test]
fn the_length_and_listing_follow_the_entries() {
    check(|| {
        let [a, b] = [21, 22];
        let writer = history(2, &[]);
        let timeline = Timeline::new(2, &[]);
        race(writer, timeline, &[Step::Insert(&[a, b])], move |look| {
            look.len().ids().len();
        });
    });
}

/// A reader racing an insert that evicts the entry it is reading, in a history of one entry:
/// the ring walk of a prefix re-reads the very entry being overwritten, so it could pair the
/// old id with the new one.
#[test]
fn an_evicted_entry_is_never_paired_with_its_replacement() {
    check(|| {
        let [a, b] = [31, 32];
        let writer = history(1, &[a]);
        let timeline = Timeline::new(1, &[a]);
        race(writer, timeline, &[Step::Insert(&[b])], move |look| {
            look.prefix(&[a, b]).prefix(&[b, a]);
        });
    });
}

/// The same race in a history of two: the evicted id's neighbour stays, the evicted id goes,
/// and a listing holds only ids that were present.
#[test]
fn an_evicting_insert_is_seen_before_or_after_never_half() {
    check(|| {
        let [a, b, c] = [41, 42, 43];
        let writer = history(2, &[a, b]);
        let timeline = Timeline::new(2, &[a, b]);
        race(writer, timeline, &[Step::Insert(&[c])], move |look| {
            look.prefix(&[a, b]).prefix(&[b, c]).some_ids();
        });
    });
}

/// A reader racing the reuse of a bucket slot. A history of two has one bucket whose slots
/// are filled round-robin, so after sixteen inserts the next one overwrites a dead slot word
/// sharing its 64-bit word with the newest live id's, and rebuilds the bucket's summary. The
/// live neighbour must stay found throughout, the evicted id and the new one appear as one
/// step.
#[test]
fn a_reused_slot_leaves_its_neighbour_found() {
    check(|| {
        let ids: Vec<u64> = (51..=67).collect();
        let (new, start) = (68, &ids[..]);
        let [.., older, newest] = *start else { unreachable!() };
        let writer = history(2, start);
        let timeline = Timeline::new(2, start);
        race(writer, timeline, &[Step::Insert(&[new])], move |look| {
            look.prefix(&[newest]).prefix(&[older, newest, new]);
        });
    });
}

/// A reader racing a resident moving from its first bucket to its second (the writer makes
/// room for a new id whose two buckets are full). The resident is present before, during
/// and after the move, so every lookup must find it.
#[test]
fn a_moving_resident_is_never_missed() {
    check(|| {
        const CAP: usize = 2 * BUCKET_SLOTS + 1;
        // Bucket 1 full, so the new id cannot overflow into it; bucket 0 full of ids whose
        // second bucket, 2, is empty, so the writer moves bucket 0's oldest resident there.
        let second_full = ids_where(CAP, BUCKET_SLOTS, &[], |h, _| h.first == 1);
        let first_full =
            ids_where(CAP, BUCKET_SLOTS, &second_full, |h, second| h.first == 0 && second == 2);
        let taken: Vec<u64> = second_full.iter().chain(&first_full).copied().collect();
        let new = ids_where(CAP, 1, &taken, |h, second| h.first == 0 && second == 1)[0];
        let moving = first_full[0];
        let writer = history(CAP, &taken);
        let timeline = Timeline::new(CAP, &taken);
        race(writer, timeline, &[Step::Insert(&[new])], move |look| {
            look.prefix(&[moving]).prefix(&[new]);
        });
    });
}

/// A reader racing the eviction of an id that had overflowed to its second bucket: its
/// first bucket's overflow count goes down, and another overflowed id of the same class
/// must still be looked for (and found) in the second bucket.
#[test]
fn an_overflowed_eviction_keeps_its_class_found() {
    check(|| {
        const CAP: usize = BUCKET_SLOTS + 2;
        // Fourteen ids fill bucket 0; two more of one overflow class overflow from it to
        // bucket 1; fourteen homed in bucket 2 then evict the first fourteen, which leaves
        // the first overflowed id the oldest, evicted by the racing insert.
        let fill = ids_where(CAP, BUCKET_SLOTS, &[], |h, second| h.first == 0 && second == 1);
        let class = home_of(CAP, fill[0]).class;
        let over =
            ids_where(CAP, 2, &fill, |h, second| h.first == 0 && second == 1 && h.class == class);
        let taken: Vec<u64> = fill.iter().chain(&over).copied().collect();
        let later = ids_where(CAP, BUCKET_SLOTS, &taken, |h, second| h.first == 2 && second != 0);
        let taken: Vec<u64> = taken.iter().chain(&later).copied().collect();
        let new = ids_where(CAP, 1, &taken, |h, second| h.first == 0 && second == 2)[0];
        let mut writer = history(CAP, &fill);
        writer.insert_all(&over);
        writer.insert_all(&later);
        let timeline = Timeline::new(CAP, &taken);
        assert_eq!(timeline.last()[0], over[0]);
        assert_eq!(writer.shared.tables().overflow_count(0), 2);
        let (evicted, kept) = (over[0], over[1]);
        race(writer, timeline, &[Step::Insert(&[new])], move |look| {
            look.prefix(&[kept]).prefix(&[evicted]);
        });
    });
}

/// A reader racing `clear`: it sees every id or none of them, never some of the cleared ids
/// without the others. `d` and `b` sit in different 64-bit index words, and `b` is reached
/// only through the index, while `d` is found by the lookup's first probe.
#[test]
fn a_clear_is_seen_whole() {
    check(|| {
        let [a, b, c, d] = [71, 72, 73, 74];
        let writer = history(4, &[a, b, c, d]);
        let timeline = Timeline::new(4, &[a, b, c, d]);
        race(writer, timeline, &[Step::Clear], move |look| {
            look.prefix(&[d, b]);
        });
    });
}

/// A reader racing `clear` and the insert after it: it sees every id, or none of them, or
/// the new one; never a cleared id with the new one, which overwrites the ring entry after
/// the cleared `d`'s, where a prefix walk from `d` looks next.
#[test]
fn a_cleared_id_is_never_paired_with_a_later_one() {
    check(|| {
        let [a, b, c, d, e] = [71, 72, 73, 74, 75];
        let writer = history(4, &[a, b, c, d]);
        let timeline = Timeline::new(4, &[a, b, c, d]);
        race(writer, timeline, &[Step::Clear, Step::Insert(&[e])], move |look| {
            look.prefix(&[d, b]).prefix(&[d, e]).prefix(&[e]);
        });
    });
}

/// `SharedHistory` shares one `History` between writers behind a mutex. Two writers take
/// turns (the writer's own state and its relaxed loads of its own stores pass through the
/// lock) while a reader looks up without it: the reader sees the states of the order in
/// which the writers took the lock.
#[test]
fn writers_behind_a_lock_take_turns() {
    check(|| {
        let [a, b, c] = [81, 82, 83];
        let start = Timeline::new(2, &[a]);
        let shared = Arc::new(Mutex::new((history(2, &[a]), Vec::new())));
        let mut looker = Looker::new(shared.lock().unwrap().0.reader());
        let reader = thread::spawn(move || {
            looker.prefix(&[a, b]).prefix(&[b, c]);
            looker.done()
        });
        let other = {
            let shared = Arc::clone(&shared);
            thread::spawn(move || {
                let mut guard = shared.lock().unwrap();
                guard.0.insert_all(&[c]);
                guard.1.push(c);
            })
        };
        {
            let mut guard = shared.lock().unwrap();
            guard.0.insert_all(&[b]);
            guard.1.push(b);
        }
        other.join().unwrap();
        let observations = reader.join().unwrap();
        let guard = shared.lock().unwrap();
        let (writer, order) = &*guard;
        let steps: Vec<[u64; 1]> = order.iter().map(|&id| [id]).collect();
        let steps: Vec<Step<'_>> = steps.iter().map(|id| Step::Insert(id)).collect();
        let timeline = start.then(&steps);
        timeline.check(&observations);
        assert_eq!(writer.oldest_first().collect::<Vec<_>>(), timeline.last());
    });
}

/// The timeline checks themselves: an answer from no state, or an answer from an older
/// state after a newer one, is rejected.
#[test]
fn timelines_reject_mixtures_and_going_back() {
    let timeline = Timeline::new(1, &[1]).then(&[Step::Insert(&[2])]);
    let prefix = |query: &[u64], seen| Observation::Prefix(query.to_vec(), seen);
    assert!(timeline.explain(&[prefix(&[1, 2], 1), prefix(&[1, 2], 0)]).is_ok());
    assert!(timeline.explain(&[prefix(&[1, 2], 2)]).is_err());
    assert!(timeline.explain(&[prefix(&[2], 1), prefix(&[1], 1)]).is_err());
    assert!(timeline.explain(&[prefix(&[NEVER], 1)]).is_err());
    assert!(timeline.explain(&[Observation::Ids(alloc::vec![1, 2])]).is_err());
    assert!(timeline.explain(&[Observation::SomeIds(alloc::vec![2])]).is_ok());
    assert!(timeline.explain(&[Observation::SomeIds(alloc::vec![NEVER])]).is_err());
}
