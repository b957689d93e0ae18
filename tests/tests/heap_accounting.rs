//! `Fleet::heap_bytes()` (what `kvreuse fleet --json` reports as `fleet_heap_bytes`) and
//! `Replay::heap_bytes()` against the bytes the allocator actually hands them: a global
//! allocator counts this thread's live bytes, and the engines' own figures must equal them
//! exactly as the caches fill. The same allocator can refuse large requests, to check what a
//! replay says when memory runs out.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use kvreuse_core::fleet::{Fleet, FleetConfig, Router, Timing};
use kvreuse_core::replay::{Policy, Replay, ReplayConfig, ReplayError};
use kvreuse_core::trace::Request;

/// The system allocator, counting the live bytes of each thread (tests run in parallel), and
/// refusing a thread's requests above its limit.
struct Counting;

thread_local! {
    static LIVE: Cell<isize> = const { Cell::new(0) };
    /// Requests above this many bytes fail (return null).
    static LIMIT: Cell<usize> = const { Cell::new(usize::MAX) };
    /// The largest request refused so far.
    static REFUSED: Cell<usize> = const { Cell::new(0) };
}

/// Whether a request for `size` bytes is refused (and recorded as such).
fn refuse(size: usize) -> bool {
    let over = LIMIT.try_with(|limit| size > limit.get()).unwrap_or(false);
    if over {
        let _ = REFUSED.try_with(|refused| refused.set(refused.get().max(size)));
    }
    over
}

fn add(bytes: isize) {
    // `try_with`: the thread-local may already be gone while a thread exits.
    let _ = LIVE.try_with(|live| live.set(live.get() + bytes));
}

// SAFETY: every call forwards to `System` with the caller's own arguments, so each upholds
// the `GlobalAlloc` contract exactly as `System` does, or returns null, which the contract
// allows for a refused request; the counting touches only thread-local `Cell`s and never
// allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if refuse(layout.size()) {
            return std::ptr::null_mut();
        }
        add(layout.size() as isize);
        // SAFETY: the caller's layout, as `GlobalAlloc::alloc` requires.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        add(-(layout.size() as isize));
        // SAFETY: `ptr` came from `alloc`/`realloc` above with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if refuse(new_size) {
            return std::ptr::null_mut();
        }
        add(new_size as isize - layout.size() as isize);
        // SAFETY: forwarded unchanged from the caller, who upholds `realloc`'s contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn live() -> isize {
    LIVE.with(Cell::get)
}

/// Requests over 16 shared prefixes of up to 24 blocks, each with a unique tail; a third of
/// them with ids of their output's blocks too.
fn requests(n: usize, block_size: u64) -> Vec<Request> {
    (0..n)
        .map(|i| {
            let shared = (i * 7 % 24) as u64;
            let family = (i % 16) as u64;
            let tail = 1 + (i % 9) as u64;
            let mut prompt_ids: Vec<u64> = (0..shared).map(|j| family << 32 | j).collect();
            prompt_ids.extend((0..tail).map(|j| 1 << 48 | (i as u64) << 8 | j));
            Request {
                timestamp: Some(i as u64 * 20),
                prompt_tokens: prompt_ids.len() as u64 * block_size,
                prompt_ids,
                output_tokens: 1 + (i % 50) as u64,
                output_ids: match i % 3 {
                    0 => (0..2).map(|j| 1 << 56 | (i as u64) << 8 | j).collect(),
                    _ => Vec::new(),
                },
                ..Request::default()
            }
        })
        .collect()
}

#[test]
fn fleet_heap_bytes_match_the_allocator() {
    // Every router that keeps state of its own (`kv` its requests' blocks in flight,
    // `prefix-hash` its ring, `session` its conversations' workers), and one that keeps none.
    let routers =
        ["kv", "round-robin", "prefix-hash", "session"].map(|r| Router::parse(r).unwrap());
    let config = FleetConfig {
        block_size: 16,
        engine_block_size: None,
        shapes: FleetConfig::grid(&[2, 4], &[300, 3000], &routers),
        timing: Timing::Mocker { speedup: 1.0 },
        history: Some(20_000),
        measure_from: 0,
        seed: 1,
    };
    let requests = requests(6000, 16);
    let before = live();
    let mut fleet = Fleet::new(&config).unwrap();
    // The outcomes kept for the caller count too.
    fleet.record_outcomes();
    let mut checked = 0;
    for (i, request) in requests.iter().enumerate() {
        fleet.push(request).unwrap();
        if i % 1500 == 1499 {
            assert_counts_its_heap(
                format_args!("fleet, {} requests", i + 1),
                fleet.heap_bytes(),
                before,
            );
            checked += 1;
        }
    }
    assert_eq!(checked, 4);
}

/// An engine's own heap figure against the bytes this thread holds since `before` (the engine
/// alone: `what` is formatted without allocating), byte for byte.
fn assert_counts_its_heap(what: std::fmt::Arguments<'_>, counted: usize, before: isize) {
    let measured = live() - before;
    assert_eq!(counted as isize, measured, "{what}: heap_bytes against the bytes allocated");
}

/// Runs `f` with this thread's requests above `limit` bytes refused; returns what it returned
/// and the largest request refused.
fn refusing_above<R>(limit: usize, f: impl FnOnce() -> R) -> (R, usize) {
    LIMIT.with(|l| l.set(limit));
    REFUSED.with(|refused| refused.set(0));
    let result = f();
    LIMIT.with(|l| l.set(usize::MAX));
    (result, REFUSED.with(Cell::get))
}

/// `requests(n, 16)` with small ids (below 2^16, the replay's array of dense ids) when
/// `small`, else as they are (64-bit values, its map).
fn replay_requests(n: usize, small: bool) -> Vec<Request> {
    let mut requests = requests(n, 16);
    if small {
        let mut numbers = std::collections::HashMap::new();
        for id in requests.iter_mut().flat_map(|r| r.prompt_ids.iter_mut()) {
            let next = numbers.len() as u64;
            *id = *numbers.entry(*id).or_insert(next);
        }
    }
    requests
}

fn replay_config() -> ReplayConfig {
    let capacities = [Some(1000), Some(20_000), None];
    ReplayConfig::grid(16, &[Policy::Fifo, Policy::Lru], &capacities)
}

#[test]
fn replay_heap_bytes_match_the_allocator() {
    for small in [true, false] {
        let requests = replay_requests(6000, small);
        let before = live();
        let mut replay = Replay::new(&replay_config()).unwrap();
        let mut checked = 0;
        for (i, request) in requests.iter().enumerate() {
            replay.push(request).unwrap();
            if i % 1500 == 1499 {
                let what = format_args!("replay, small ids {small}, {} requests", i + 1);
                assert_counts_its_heap(what, replay.heap_bytes(), before);
                checked += 1;
            }
        }
        assert_eq!(checked, 4);
    }
}

/// When the allocator refuses the room a new id needs, the replay says so, with at least the
/// bytes it was refused, and nothing is lost: with the room back, the same request goes in.
#[test]
fn a_refused_allocation_is_reported_with_its_bytes() {
    for small in [true, false] {
        let requests = replay_requests(6000, small);
        let mut replay = Replay::new(&replay_config()).unwrap();
        let (failed, refused) = refusing_above(64 << 10, || {
            requests.iter().enumerate().find_map(|(at, r)| replay.push(r).err().map(|e| (at, e)))
        });
        let Some((at, error)) = failed else {
            panic!("small ids {small}: no allocation was refused");
        };
        let ReplayError::OutOfMemory { bytes, histories, .. } = error else {
            panic!("small ids {small}: {error}");
        };
        assert_eq!(histories, (2, 2, 1), "FIFO, LRU and inf histories");
        assert!(refused > 64 << 10 && bytes >= refused, "{bytes} reported, {refused} refused");
        assert!(bytes <= 4 * refused, "{bytes} reported, {refused} refused");
        replay.push(&requests[at]).unwrap();
    }
}

/// The same for the array of small ids: one id just below 2^16 asks for 2^16 slots of 4 bytes
/// at once, before any history needs much.
#[test]
fn a_refused_array_of_small_ids_is_reported_with_its_bytes() {
    let request = Request { prompt_ids: vec![60_000], prompt_tokens: 16, ..Request::default() };
    let mut replay = Replay::new(&replay_config()).unwrap();
    let (result, refused) = refusing_above(64 << 10, || replay.push(&request));
    match result {
        Err(ReplayError::OutOfMemory { bytes, ids: 0, .. }) => {
            assert_eq!((bytes, refused), (4 << 16, 4 << 16));
        }
        other => panic!("{other:?}"),
    }
    replay.push(&request).unwrap();
}
