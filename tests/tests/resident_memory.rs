//! The memory bound holds in resident memory, not only in `heap_bytes()`: a history built for
//! a 64 MiB budget and fed 50 million random ids grows the process's RSS by at most the
//! budget plus 5%. The last capacity's worth of ids arrives one per completion, the costliest
//! shape for anything kept per completion.
//!
//! (The workspace builds `kvreuse-core` and `kvreuse` optimized even for tests, so the 50
//! million inserts take seconds.)

use kvreuse::SharedHistory;

const BUDGET: usize = 64 << 20;
const IDS: u64 = 50_000_000;

/// Resident bytes of this process (Linux: `/proc/self/statm`).
fn resident_bytes() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("Linux /proc");
    let pages: usize = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * page_size()
}

fn page_size() -> usize {
    // statm counts pages; the kernel states their size in smaps (no libc call needed).
    let smaps = std::fs::read_to_string("/proc/self/smaps").expect("Linux /proc");
    let line = smaps.lines().find(|l| l.starts_with("KernelPageSize:")).unwrap();
    let kib: usize = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib << 10
}

#[test]
fn fifty_million_ids_stay_within_the_budget() {
    let before = resident_bytes();
    let history = SharedHistory::with_byte_budget(BUDGET).unwrap();
    assert!(history.heap_bytes() <= BUDGET);
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut batch = Vec::with_capacity(1024);
    let mut inserted = 0;
    while inserted < IDS {
        let size = if inserted + (history.capacity() as u64) < IDS { 1024 } else { 1 };
        batch.clear();
        batch.extend((0..size).map(|_| {
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        }));
        history.insert_all(&batch);
        inserted += batch.len() as u64;
    }
    let grown = resident_bytes().saturating_sub(before);
    eprintln!(
        "capacity {} ids, heap {} bytes, RSS grew by {grown} bytes for a budget of {BUDGET}",
        history.capacity(),
        history.heap_bytes()
    );
    assert!(history.is_full());
    assert!(grown <= BUDGET + BUDGET / 20, "RSS grew by {grown} bytes, over {BUDGET} + 5%");
}
