//! The history store: kvreuse's `SharedHistory` against a replica of the reference layout
//! (`kvreuse_benches::reference_history`), measured in the same run.
//!
//! Both hold 8,388,608 ids and are full before measuring, so every new id evicts one
//! (steady-state eviction). Both receive exactly the same id streams, so their contents stay
//! identical and every lookup has the same answer on both. Each run measures every row on both
//! contenders back to back, alternating which goes first; the table reports the median of the
//! runs (`KVREUSE_BENCH_RUNS`, default 5) and the ratio kvreuse / reference.
//!
//! Rows vary: completion size (4, 34, 417, 834 blocks) for all-new inserts; duplicate-only
//! completions; lookups of 34 present blocks and lookups whose first block is missing; one
//! reader thread racing one writer; and ids crafted to share their top or low 32 bits.
//!
//! `cargo bench -p kvreuse-benches --bench history`. Set `KVREUSE_BENCH_CAPACITY` for a
//! smaller history (the bars refer to the default).

use std::hint::black_box;
use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use kvreuse::SharedHistory;
use kvreuse_benches::reference_history::ReferenceHistory;
use kvreuse_benches::{Contender, SplitMix64};

fn fresh(seed: u64, n: usize) -> Vec<u64> {
    let mut rng = SplitMix64::new(seed);
    (0..n).map(|_| rng.next_u64()).collect()
}

/// Inserts `ids` as completions of `size`; returns (new ids, seconds).
fn insert(c: &dyn Contender, ids: &[u64], size: usize) -> (usize, f64) {
    let start = Instant::now();
    let new = ids.chunks(size).map(|chunk| c.insert_all(black_box(chunk))).sum();
    (new, start.elapsed().as_secs_f64())
}

/// Looks up each `size`-id chunk of `lookups` (one flat array, as a router's freshly hashed
/// prompts would be in cache); returns (total prefix length, seconds).
fn lookup(c: &dyn Contender, lookups: &[u64], size: usize) -> (usize, f64) {
    let start = Instant::now();
    let seen = lookups.chunks(size).map(|ids| c.seen_prefix_len(black_box(ids))).sum();
    (seen, start.elapsed().as_secs_f64())
}

/// One reader looks `lookups` up in a loop while one writer inserts `writes` in completions
/// of 34; returns (reader lookups per second, writer ids per second).
fn race(c: &dyn Contender, writes: &[u64], lookups: &[u64]) -> (f64, f64) {
    let barrier = Barrier::new(2);
    let done = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let reader = scope.spawn(|| {
            barrier.wait();
            let start = Instant::now();
            let mut n = 0usize;
            for ids in lookups.chunks(34).cycle() {
                if done.load(Ordering::Relaxed) {
                    break;
                }
                black_box(c.seen_prefix_len(ids));
                n += 1;
            }
            n as f64 / start.elapsed().as_secs_f64()
        });
        barrier.wait();
        let (_, secs) = insert(c, writes, 34);
        done.store(true, Ordering::Relaxed);
        (reader.join().unwrap(), writes.len() as f64 / secs)
    })
}

#[derive(Default)]
struct Samples {
    rows: Vec<(&'static str, &'static str, Vec<f64>, Vec<f64>)>,
}

impl Samples {
    fn add(&mut self, row: &'static str, unit: &'static str, reference: f64, ours: f64) {
        match self.rows.iter_mut().find(|r| r.0 == row) {
            Some(r) => {
                r.2.push(reference);
                r.3.push(ours);
            }
            None => self.rows.push((row, unit, vec![reference], vec![ours])),
        }
    }
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 }
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn main() {
    // `cargo test --benches` runs bench binaries without `--bench`: a small smoke run then.
    let smoke = !std::env::args().any(|a| a == "--bench");
    let capacity = env_usize("KVREUSE_BENCH_CAPACITY", if smoke { 1 << 16 } else { 8_388_608 });
    let runs = env_usize("KVREUSE_BENCH_RUNS", if smoke { 1 } else { 5 });
    let scale = if smoke { 1 } else { 20 };

    let reference = ReferenceHistory::with_capacity(capacity);
    let ours = SharedHistory::with_capacity(capacity).expect("history");
    let contenders: [(&str, &dyn Contender); 2] = [("reference", &reference), ("kvreuse", &ours)];

    eprintln!("filling both histories with {} ids...", capacity + capacity / 20);
    let fill = fresh(1, capacity + capacity / 20);
    for (_, c) in &contenders {
        insert(*c, &fill, 417);
    }
    drop(fill);
    let bytes = [reference.heap_bytes(), ours.heap_bytes()].map(|b| b as f64 / capacity as f64);

    let mut samples = Samples::default();
    for run in 0..runs {
        eprintln!("run {} of {runs}", run + 1);
        let order: [usize; 2] = if run % 2 == 0 { [0, 1] } else { [1, 0] };
        let seed = |row: u64| 1000 + 100 * run as u64 + row;
        let mut per = |row, unit, f: &mut dyn FnMut(&dyn Contender) -> f64| {
            let mut out = [0.0; 2];
            for &i in &order {
                out[i] = f(contenders[i].1);
            }
            samples.add(row, unit, out[0], out[1]);
        };

        for (row, size, n) in [
            ("all-new completions, 34 blocks", 34, 34 * 1000 * scale),
            ("all-new completions, 417 blocks", 417, 417 * 100 * scale),
            ("all-new completions, 834 blocks", 834, 834 * 50 * scale),
            ("all-new completions, 4 blocks", 4, 4 * 5000 * scale),
        ] {
            let ids = fresh(seed(size as u64), n);
            per(row, "M blocks/s", &mut |c| {
                let (new, secs) = insert(c, &ids, size);
                assert_eq!(new, ids.len());
                new as f64 / secs / 1e6
            });
        }

        // Completions of 34 that are present in both (just inserted).
        let recent = fresh(seed(99), 34 * 1000 * scale);
        for (_, c) in &contenders {
            insert(*c, &recent, 34);
        }
        let completions = recent.len() / 34;
        per("duplicate-only completions, 34 blocks", "M completions/s", &mut |c| {
            let (new, secs) = insert(c, &recent, 34);
            assert_eq!(new, 0);
            completions as f64 / secs / 1e6
        });
        per("prefix lookup, 34 present blocks", "M lookups/s", &mut |c| {
            let (seen, secs) = lookup(c, &recent, 34);
            assert_eq!(seen, recent.len());
            completions as f64 / secs / 1e6
        });
        let mut rng = SplitMix64::new(seed(98));
        let mut missing_first = recent.clone();
        for ids in missing_first.chunks_mut(34) {
            ids[0] = rng.next_u64();
        }
        per("lookup whose first block is missing", "M lookups/s", &mut |c| {
            let (seen, secs) = lookup(c, &missing_first, 34);
            assert_eq!(seen, 0);
            completions as f64 / secs / 1e6
        });

        let writes = fresh(seed(97), 34 * 2000 * scale);
        let (mut readers, mut writers) = ([0.0; 2], [0.0; 2]);
        for &i in &order {
            let (reader, writer) = race(contenders[i].1, &writes, &recent);
            (readers[i], writers[i]) = (reader / 1e6, writer / 1e6);
        }
        samples.add(
            "race: reader lookups while a writer inserts",
            "M lookups/s",
            readers[0],
            readers[1],
        );
        samples.add("race: writer alongside the reader", "M blocks/s", writers[0], writers[1]);

        // Flooding: crafted ids, then random ones, each as completions of 34.
        let salt = seed(96) << 16;
        let top: Vec<u64> =
            (0..20_000u64).map(|i| (0xdead_beef << 32) | (salt + i) & 0xffff_ffff).collect();
        let low: Vec<u64> = (0..20_000u64).map(|i| ((salt + i) << 32) | 0xdead_beef).collect();
        let random = fresh(seed(95), 40_000);
        let mut flood = [0.0; 2];
        for &i in &order {
            let c = contenders[i].1;
            let (_, t1) = insert(c, &top, 34);
            let (_, t2) = insert(c, &low, 34);
            let (_, t3) = insert(c, &random, 34);
            flood[i] = t3 / (t1 + t2);
        }
        samples.add(
            "flood: crafted ids vs random ids (insert rate)",
            "x of random",
            flood[0],
            flood[1],
        );
    }

    let bars: &[(&str, &str, &str)] = &[
        ("all-new completions, 34 blocks", ">= 4x", ">= 8x"),
        ("all-new completions, 417 blocks", ">= 4x", ">= 8x"),
        ("all-new completions, 834 blocks", ">= 4x", ">= 8x"),
        ("all-new completions, 4 blocks", ">= 2.5x", ">= 4x"),
        ("duplicate-only completions, 34 blocks", ">= 2x", ">= 4x"),
        ("prefix lookup, 34 present blocks", ">= 3x", ">= 5x"),
        ("lookup whose first block is missing", ">= 0.9x", ">= 1x"),
        ("race: reader lookups while a writer inserts", ">= 4x", ">= 6x"),
        ("flood: crafted ids vs random ids (insert rate)", ">= 0.5x (kvreuse)", ">= 0.9x"),
    ];
    println!(
        "\nhistory of {capacity} ids, full (steady-state eviction); median of {runs} interleaved runs\n"
    );
    println!("| measure | unit | reference | kvreuse | ratio | bar | goal |");
    println!("|---|---|---:|---:|---:|---|---|");
    println!(
        "| heap bytes per entry | bytes | {:.1} | {:.1} | {:.2}x less | <= 16 | <= 13 |",
        bytes[0],
        bytes[1],
        bytes[0] / bytes[1]
    );
    for (row, unit, reference, ours) in &samples.rows {
        let (r, o) = (median(reference), median(ours));
        let (bar, goal) = bars.iter().find(|b| b.0 == *row).map(|b| (b.1, b.2)).unwrap_or(("", ""));
        let ratio = if row.starts_with("flood") { o } else { o / r };
        println!("| {row} | {unit} | {r:.3} | {o:.3} | {ratio:.2}x | {bar} | {goal} |");
    }
}
