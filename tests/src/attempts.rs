//! Request guards counted exactly once, on fuzzer-chosen interleavings of many requests:
//! begin, output on any choice, route and worker evidence, complete, incomplete, drop.
//!
//! The model: a FIFO `VecDeque` history that learns only from completions (prompt blocks, then
//! output blocks in the order they became complete), output blocks recomputed from scratch by
//! hashing prompt + output, and counters summed by hand, the funnel's included (stages only
//! from completed requests with a route and an accepted report; every ended request in exactly
//! one result; each prompt token not reused charged to the first stage it misses, one token at a
//! time). After every step the tracker's history must equal the model's; at the end
//! every metric must equal its sum.

use std::collections::VecDeque;

use arbitrary::{Arbitrary, Unstructured};
use kvreuse::core::chain::DynamoHasher;
use kvreuse::{Config, ReportError, RequestGuard, Route, Tracker, WorkerReport};
use prometheus::Registry;
use prometheus::proto::MetricType;

#[derive(Arbitrary, Debug)]
enum Event {
    /// A prompt from one of a few families (sharing prefixes), of some length.
    Begin {
        family: u8,
        len: u8,
        /// Route and report right away, as a router that observes both before streaming:
        /// (best, selected, skew, gpu, cpu hit, cpu lookup).
        evidence: Option<(u8, u8, u8, u8, u8, u8)>,
    },
    Output {
        slot: u8,
        choice: u8,
        tokens: Vec<u8>,
    },
    /// The router's view (tokens cached on the best and the selected worker).
    Route {
        slot: u8,
        best: u8,
        selected: u8,
    },
    /// A worker report; `skew` nonzero reports another prompt length.
    Report {
        slot: u8,
        skew: u8,
        gpu: u8,
        cpu_hit: u8,
        cpu_lookup: u8,
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
    /// The model of the funnel evidence: the first route, the accepted report (found,
    /// reused), whether a report was refused for another prompt.
    route: Option<(u64, u64)>,
    report: Option<(u64, u64)>,
    mismatch: bool,
}

#[derive(Default, Debug, PartialEq)]
struct Counts {
    input: u64,
    f0: u64,
    f1: u64,
    complete: u64,
    incomplete: u64,
    funnel: [u64; 6],
    /// observed, no_route, no_report, prompt_mismatch, incomplete.
    results: [u64; 5],
    clamped: [u64; 6],
    /// cold, retention, routing, race, retrieval.
    losses: [u64; 5],
}

/// Runs a fuzzer-chosen script through a real `Tracker` and checks it against the model.
pub fn attempts(data: &[u8]) {
    let mut input = Unstructured::new(data);
    let Ok(block_size) = input.int_in_range(1usize..=6) else { return };
    let Ok(eagle) = bool::arbitrary(&mut input) else { return };
    // Events until the input runs out (arbitrary's own collections stop at random, which
    // keeps scripts short).
    let mut events = Vec::new();
    while !input.is_empty() {
        let Ok(event) = Event::arbitrary(&mut input) else { break };
        events.push(event);
    }
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
            Event::Begin { family, len, evidence } => {
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
                    route: None,
                    report: None,
                    mismatch: false,
                });
                if let Some((best, selected, skew, gpu, cpu_hit, cpu_lookup)) = evidence {
                    let request = open.last_mut().expect("just pushed");
                    route(request, best, selected);
                    report(request, skew, gpu, cpu_hit, cpu_lookup);
                }
            }
            Event::Output { slot, choice, tokens } => {
                let Some(request) = pick(&mut open, slot) else { continue };
                let choice = u32::from(choice % 3);
                let tokens: Vec<u32> = tokens.iter().map(|&t| u32::from(t)).collect();
                request.guard.observe_output(choice, &tokens);
                observe(&hasher, request, choice, &tokens);
            }
            Event::Route { slot, best, selected } => {
                let Some(request) = pick(&mut open, slot) else { continue };
                route(request, best, selected);
            }
            Event::Report { slot, skew, gpu, cpu_hit, cpu_lookup } => {
                let Some(request) = pick(&mut open, slot) else { continue };
                report(request, skew, gpu, cpu_hit, cpu_lookup);
            }
            Event::Complete(slot) => {
                let Some(request) = take(&mut open, slot) else { continue };
                let f0 = request.prompt.len() as u64;
                let result = match (request.mismatch, request.route, request.report) {
                    (true, ..) => 3,
                    (false, None, _) => 1,
                    (false, Some(_), None) => 2,
                    (false, Some((best, selected)), Some((found, reused))) => {
                        let stages = [f0, request.seen_tokens, best, selected, found, reused];
                        for (k, stage) in stages.into_iter().enumerate() {
                            counts.funnel[k] += stage.min(f0);
                            counts.clamped[k] += u64::from(stage > f0);
                        }
                        let losses = crate::support::losses_token_by_token(stages);
                        for (sum, loss) in counts.losses.iter_mut().zip(losses) {
                            *sum += loss;
                        }
                        0
                    }
                };
                counts.results[result] += 1;
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
                counts.results[4] += 1;
                request.guard.incomplete();
            }
            Event::Drop(slot) => {
                let Some(request) = take(&mut open, slot) else { continue };
                counts.incomplete += 1;
                counts.results[4] += 1;
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
    counts.results[4] += open.len() as u64;
    drop(open);
    assert_eq!(read(&registry), counts);
    assert_eq!(counts.complete + counts.incomplete, begun, "every request ended exactly once");
    assert_eq!(counts.results.iter().sum::<u64>(), begun, "every request in one funnel result");
}

/// Gives `request` a route, and the model its first one.
fn route(request: &mut Open, best: u8, selected: u8) {
    let (best, selected) = (u64::from(best), u64::from(selected));
    request
        .guard
        .observe_route(Route { best_cached_tokens: best, selected_cached_tokens: selected });
    request.route.get_or_insert((best, selected));
}

/// Gives `request` a worker report (of another prompt when `skew % 3` is not 0) and checks
/// that it is accepted or refused as the model says.
fn report(request: &mut Open, skew: u8, gpu: u8, cpu_hit: u8, cpu_lookup: u8) {
    let prompt = request.prompt.len() as u64;
    let report = WorkerReport {
        prompt_tokens: prompt + u64::from(skew % 3),
        gpu_hit_tokens: u64::from(gpu),
        cpu_hit_tokens: u64::from(cpu_hit),
        cpu_lookup_tokens: u64::from(cpu_lookup),
    };
    let result = request.guard.observe_worker(report);
    if request.report.is_some() || request.mismatch {
        assert!(matches!(result, Err(ReportError::Duplicate(_))), "{result:?}");
    } else if !skew.is_multiple_of(3) {
        assert!(matches!(result, Err(ReportError::PromptMismatch { .. })), "{result:?}");
        request.mismatch = true;
    } else {
        assert_eq!(result, Ok(()));
        request.report = Some((report.found_tokens(), report.reused_tokens()));
    }
}

const STAGES: [&str; 6] = ["f0", "f1", "f2", "f3", "f4", "f5"];
const RESULTS: [&str; 5] = ["observed", "no_route", "no_report", "prompt_mismatch", "incomplete"];
const LOSSES: [&str; 5] = ["cold", "retention", "routing", "race", "retrieval"];

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
        funnel: STAGES.map(|stage| value(registry, "router_kv_funnel_tokens_total", Some(stage))),
        results: RESULTS.map(|r| value(registry, "router_kv_funnel_observations_total", Some(r))),
        clamped: STAGES.map(|stage| value(registry, "router_kv_funnel_clamped_total", Some(stage))),
        losses: LOSSES
            .map(|loss| value(registry, "router_kv_funnel_loss_tokens_total", Some(loss))),
    }
}
