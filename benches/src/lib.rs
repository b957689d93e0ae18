//! Shared pieces of the kvreuse benchmarks: deterministic inputs, and faithful replicas of the
//! baselines that are measured in the same run as kvreuse.

/// A deterministic stream of pseudo-random values (SplitMix64), so every run and every
/// contender sees the same inputs.
#[derive(Clone, Debug)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A stream starting from `seed`.
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    /// The next value.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// `n` token ids below a 152k vocabulary, as a real tokenizer would produce.
    pub fn tokens(&mut self, n: usize) -> Vec<u32> {
        (0..n).map(|_| (self.next_u64() % 152_064) as u32).collect()
    }
}

pub mod reference_history;

/// How many times over the history benches fill a history before they measure it: enough for
/// every contender to reach the state it keeps in the long run, as a router's history would
/// have after serving for a while.
///
/// kvreuse gets there within four fills: at 90d04fd, `scripts/bench-instructions` (key 7)
/// counted its new ids at 193.5-194.0 instructions at 131,072 ids and 228.8-229.1 at 8,388,608
/// over any number of completions after them. The references take longer. Each shard's table
/// marks the slot of a removed id as deleted rather than empty where a probe may have passed
/// it; such markers lengthen later probes and use up the table's room until, after 9 to 10
/// fills (9.3 for a shard of 131,072 ids, 10.1 for one of 2,048), the table rebuilds itself at
/// twice its size, a quarter full from then on, where markers pile up slowly and in-place
/// rebuilds clear them. Their instructions per new id (std, proposal), averaged over the first
/// completions after four fills, rise from 260.6 and 240.4 to 271.2 and 251.1 (32,000
/// completions) at 131,072 ids, and from 258.9 and 238.7 to 263.1 and 242.9 (512,000) at
/// 8,388,608 ids, then drop to 252.9 and 232.7 at both sizes for good; their tables double,
/// their heap goes from 26.0 to 44.0 bytes per entry. Twelve fills put every shard past that
/// rebuild at the benches' sizes (shards of 2,048 and 131,072 ids).
pub const LONG_RUN_FILLS: usize = 12;

/// Fills each of `histories` `fills` times over their `capacity` with the same fresh ids, in
/// completions of 417: every contender ends up holding the same ids.
pub fn fill(histories: &[&dyn Contender], capacity: usize, fills: usize, seed: u64) {
    let mut ids = SplitMix64::new(seed);
    let mut chunk = vec![0u64; 417 * 64];
    let mut left = fills * capacity;
    while left > 0 {
        let n = left.min(chunk.len());
        chunk[..n].fill_with(|| ids.next_u64());
        for history in histories {
            for completion in chunk[..n].chunks(417) {
                history.insert_all(completion);
            }
        }
        left -= n;
    }
}

/// A history the history benches compare: kvreuse's `SharedHistory` or the reference layout,
/// behind one interface so both receive exactly the same calls.
pub trait Contender: Sync {
    /// Inserts `ids` as one completion; returns how many were new.
    fn insert_all(&self, ids: &[u64]) -> usize;
    /// The number of leading `ids` present.
    fn seen_prefix_len(&self, ids: &[u64]) -> usize;
}

impl Contender for kvreuse::SharedHistory {
    fn insert_all(&self, ids: &[u64]) -> usize {
        kvreuse::SharedHistory::insert_all(self, ids).new
    }
    fn seen_prefix_len(&self, ids: &[u64]) -> usize {
        kvreuse::SharedHistory::seen_prefix_len(self, ids)
    }
}

impl Contender for reference_history::ReferenceHistory {
    fn insert_all(&self, ids: &[u64]) -> usize {
        reference_history::ReferenceHistory::insert_all(self, ids)
    }
    fn seen_prefix_len(&self, ids: &[u64]) -> usize {
        reference_history::ReferenceHistory::seen_prefix_len(self, ids)
    }
}

impl Contender for reference_history::ProposalHistory {
    fn insert_all(&self, ids: &[u64]) -> usize {
        reference_history::ProposalHistory::insert_all(self, ids)
    }
    fn seen_prefix_len(&self, ids: &[u64]) -> usize {
        reference_history::ProposalHistory::seen_prefix_len(self, ids)
    }
}

/// The machine a bench ran on, for its table: the CPU model and cache sizes (from
/// `/proc/cpuinfo` and `lscpu`), since ratios measured on one machine need not hold on another.
pub fn machine() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name").and_then(|r| r.split(':').nth(1)))
        .map_or("unknown CPU".to_string(), |m| m.trim().to_string());
    let cpus = cpuinfo.lines().filter(|l| l.starts_with("processor")).count();
    let lscpu = std::process::Command::new("lscpu").output().ok();
    let lscpu = lscpu.map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_default();
    let caches: Vec<String> = lscpu
        .lines()
        .filter_map(|l| {
            let (name, value) = l.split_once(':')?;
            let name = name.trim();
            name.ends_with("cache")
                .then(|| format!("{} {}", name.trim_end_matches(" cache"), value.trim()))
        })
        .collect();
    format!("machine: {model}, {cpus} CPUs; caches: {}", caches.join(", "))
}

/// The time of one dependent random read from arrays of a few sizes (a pointer chase over the
/// array's cache lines in a random cycle, 4 KiB pages), measured now, for the table: what a
/// VM's caches really hold can differ from what `lscpu` reports, and from one session to the
/// next on the same reported CPU, and the history benches' ratios follow it. Arrays of 1 MiB
/// up to `largest` bytes, each four times the last.
pub fn memory_latency(largest: usize) -> String {
    const LINE: usize = 8; // u64 words per 64-byte cache line
    let probes: Vec<String> = core::iter::successors(Some(1usize << 20), |b| Some(b * 4))
        .take_while(|&bytes| bytes <= largest)
        .map(|bytes| {
            let lines = bytes / 64;
            // The lines in a random order (Fisher-Yates), each pointing to the next: one
            // cycle through all of them.
            let mut order: Vec<usize> = (0..lines).collect();
            let mut rng = SplitMix64::new(bytes as u64);
            for i in (1..lines).rev() {
                order.swap(i, (rng.next_u64() % (i as u64 + 1)) as usize);
            }
            let mut next = vec![0u64; lines * LINE];
            for (i, &line) in order.iter().enumerate() {
                next[line * LINE] = order[(i + 1) % lines] as u64;
            }
            let chase = |steps: usize, mut at: usize| {
                for _ in 0..steps {
                    at = next[at * LINE] as usize;
                }
                at
            };
            // Once round the cycle first (the pages become resident), then timed.
            let at = chase(lines, 0);
            let steps = 2_000_000;
            let start = std::time::Instant::now();
            std::hint::black_box(chase(steps, at));
            let ns = start.elapsed().as_secs_f64() / steps as f64 * 1e9;
            format!("{} MiB {ns:.0} ns", bytes >> 20)
        })
        .collect();
    format!("one dependent random read (measured now): {}", probes.join(", "))
}
