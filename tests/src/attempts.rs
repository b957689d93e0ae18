//! Request guards counted exactly once, on fuzzer-chosen interleavings of many requests:
//! begin, output on any choice, complete, incomplete, drop.
//!
//! The model: a FIFO `VecDeque` history that learns only from completions (prompt blocks, then
//! output blocks in the order they became complete), output blocks recomputed from scratch by
//! hashing prompt + output, and counters summed by hand. After every step the tracker's
//! history must equal the model's; at the end every metric must equal its sum.

use std::collections::VecDeque;

use arbitrary::{Arbitrary, Unstructured};
use kvreuse::core::chain::DynamoHasher;
use kvreuse::{Config, RequestGuard, Tracker};
use prometheus::Registry;
use prometheus::proto::MetricType;

#[derive(Arbitrary, Debug)]
enum Event {
    /// A prompt from one of a few families (sharing prefixes), of some length.
    Begin {
        family: u8,
        len: u8,
    },
    Output {
        slot: u8,
        choice: u8,
        tokens: Vec<u8>,
    },
    Complete(u8),
    Incomplete(u8),
    Drop(u8),
}

/// A begun request: its guard and what the model knows about it.
struct Open {
    guard: RequestGuard,
    prompt: Vec<u32>,
    /// Per choice index: the output so far and how many of its blocks were recorded.
    choices: Vec<(u32, Vec<u32>, usize)>,
    /// Output block ids in the order they became recordable.
    recorded: Vec<u64>,
    seen_tokens: u64,
}

#[derive(Default, Debug, PartialEq)]
struct Counts {
    input: u64,
    f0: u64,
    f1: u64,
    complete: u64,
    incomplete: u64,
}

/// Runs a fuzzer-chosen script through a real `Tracker` and checks it against the model.
pub fn attempts(data: &[u8]) {
    let mut input = Unstructured::new(data);
    let Ok(block_size) = input.int_in_range(1usize..=6) else { return };
    let Ok(eagle) = bool::arbitrary(&mut input) else { return };
    let Ok(events) = Vec::<Event>::arbitrary(&mut input) else { return };
    let registry = Registry::new();
    let config = Config::new(block_size).with_eagle(eagle).with_history_bytes(24 << 10);
    let tracker = Tracker::new(&config, &registry).expect("a valid config");
    let history = tracker.history().expect("enabled").clone();
    let capacity = history.capacity();
    let hasher = DynamoHasher::new(block_size).expect("valid").with_eagle(eagle);
    let mut model: VecDeque<u64> = VecDeque::new();
    let mut counts = Counts::default();
    let mut open: Vec<Open> = Vec::new();
    let mut begun = 0u64;

    for event in events {
        match event {
            Event::Begin { family, len } => {
                let prompt: Vec<u32> =
                    (0..u32::from(len % 48)).map(|i| u32::from(family % 4) * 1000 + i).collect();
                let ids = hasher.hash(&prompt).sequence;
                let seen = ids.iter().take_while(|id| model.contains(id)).count();
                let seen_tokens = (seen as u64 * block_size as u64).min(prompt.len() as u64);
                let guard = tracker.begin(&prompt);
                assert_eq!(guard.seen_tokens(), seen_tokens, "seen prefix at begin");
                counts.input += prompt.len() as u64;
                begun += 1;
                open.push(Open {
                    guard,
                    prompt,
                    choices: Vec::new(),
                    recorded: Vec::new(),
                    seen_tokens,
                });
            }
            Event::Output { slot, choice, tokens } => {
                let Some(request) = pick(&mut open, slot) else { continue };
                let choice = u32::from(choice % 3);
                let tokens: Vec<u32> = tokens.iter().map(|&t| u32::from(t)).collect();
                request.guard.observe_output(choice, &tokens);
                observe(&hasher, request, choice, &tokens);
            }
            Event::Complete(slot) => {
                let Some(request) = take(&mut open, slot) else { continue };
                let mut ids = hasher.hash(&request.prompt).sequence;
                ids.extend(&request.recorded);
                for id in ids {
                    if !model.contains(&id) {
                        if model.len() == capacity {
                            model.pop_front();
                        }
                        model.push_back(id);
                    }
                }
                counts.f0 += request.prompt.len() as u64;
                counts.f1 += request.seen_tokens;
                counts.complete += 1;
                request.guard.complete();
            }
            Event::Incomplete(slot) => {
                let Some(request) = take(&mut open, slot) else { continue };
                counts.incomplete += 1;
                request.guard.incomplete();
            }
            Event::Drop(slot) => {
                let Some(request) = take(&mut open, slot) else { continue };
                counts.incomplete += 1;
                drop(request.guard);
            }
        }
        assert!(
            history.oldest_first().iter().eq(model.iter()),
            "the history learns only completions"
        );
    }
    // Requests still open when their task goes away count as incomplete.
    counts.incomplete += open.len() as u64;
    drop(open);
    assert_eq!(read(&registry), counts);
    assert_eq!(counts.complete + counts.incomplete, begun, "every request ended exactly once");
}

fn pick(open: &mut [Open], slot: u8) -> Option<&mut Open> {
    let len = open.len();
    (len > 0).then(|| &mut open[usize::from(slot) % len])
}

fn take(open: &mut Vec<Open>, slot: u8) -> Option<Open> {
    let len = open.len();
    (len > 0).then(|| open.swap_remove(usize::from(slot) % len))
}

/// The model of output tracking: a choice's blocks continue the prompt's chain; a block is
/// recorded once a token follows it (Eagle: once its `block_size + 1` window is complete).
fn observe(hasher: &DynamoHasher, request: &mut Open, choice: u32, tokens: &[u32]) {
    let at = match request.choices.iter().position(|c| c.0 == choice) {
        Some(at) => at,
        None => {
            request.choices.push((choice, Vec::new(), 0));
            request.choices.len() - 1
        }
    };
    let (_, output, done) = &mut request.choices[at];
    output.extend_from_slice(tokens);
    let all: Vec<u32> = request.prompt.iter().chain(output.iter()).copied().collect();
    let ids = hasher.hash(&all).sequence;
    let prompt_blocks = hasher.complete_blocks(request.prompt.len());
    let bs = hasher.block_size();
    // Blocks whose KV exists: all but one whose last token is the newest (non-Eagle).
    let recordable =
        if hasher.is_eagle() { ids.len() } else { ids.len().min(all.len().saturating_sub(1) / bs) };
    let start = prompt_blocks.max(*done);
    if recordable > start {
        request.recorded.extend_from_slice(&ids[start..recordable]);
        *done = recordable;
    }
}

fn value(registry: &Registry, name: &str, label: Option<&str>) -> u64 {
    let name = format!("dynamo_component_{name}");
    registry
        .gather()
        .iter()
        .filter(|f| f.name() == name)
        .flat_map(|f| f.get_metric().iter().map(move |m| (f.get_field_type(), m)))
        .filter(|(_, m)| label.is_none_or(|l| m.get_label().iter().any(|p| p.value() == l)))
        .map(|(kind, m)| match kind {
            MetricType::COUNTER => m.get_counter().get_value(),
            _ => m.get_gauge().get_value(),
        })
        .sum::<f64>() as u64
}

fn read(registry: &Registry) -> Counts {
    Counts {
        input: value(registry, "router_cache_loss_observation_input_tokens_total", None),
        f0: value(registry, "router_cache_loss_funnel_tokens_total", Some("f0")),
        f1: value(registry, "router_kv_history_cached_prefix_tokens_total", None),
        complete: value(registry, "router_cache_loss_observations_total", Some("complete")),
        incomplete: value(registry, "router_cache_loss_observations_total", Some("incomplete")),
    }
}
