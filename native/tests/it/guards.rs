//! Request guards count every request exactly once, whatever happens to the task holding
//! them: completion, explicit abort, cancellation, panic, or many at once.

use std::sync::Arc;

use kvreuse::core::attempt::{Attempt, FunnelResult, LOSSES, STAGES, Tally};
use kvreuse::core::chain::DynamoHasher;
use kvreuse::core::output::OutputTracker;
use kvreuse::{Config, Tracker};
use prometheus::Registry;

const BLOCK: usize = 4;

fn tracker() -> (Tracker, Registry) {
    let registry = Registry::new();
    let config = Config::new(BLOCK).with_history_bytes(1 << 20).with_const_label("router_id", "t");
    (Tracker::new(&config, &registry).unwrap(), registry)
}

fn tally(registry: &Registry) -> Tally {
    let get = |name, label: Option<(&str, &str)>| {
        kvreuse_tests::support::metric(registry, name, label.map(|(_, value)| value)) as u64
    };
    Tally {
        input_tokens: get("router_cache_loss_observation_input_tokens_total", None),
        f0_tokens: get("router_cache_loss_funnel_tokens_total", Some(("stage", "f0"))),
        f1_tokens: get("router_kv_history_cached_prefix_tokens_total", None),
        complete: get("router_cache_loss_observations_total", Some(("result", "complete"))),
        incomplete: get("router_cache_loss_observations_total", Some(("result", "incomplete"))),
        funnel: STAGES.map(|stage| get("router_kv_funnel_tokens_total", Some(("stage", stage)))),
        results: FunnelResult::ALL
            .map(|r| get("router_kv_funnel_observations_total", Some(("result", r.name())))),
        clamped: STAGES.map(|stage| get("router_kv_funnel_clamped_total", Some(("stage", stage)))),
        losses: LOSSES.map(|loss| get("router_kv_funnel_loss_tokens_total", Some(("loss", loss)))),
    }
}

fn prompt(seed: u32, len: u32) -> Vec<u32> {
    (0..len).map(|i| seed * 1000 + i).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_task_counts_incomplete_and_teaches_nothing() {
    let (tracker, registry) = tracker();
    let p = prompt(1, 12);
    let (started, wait) = tokio::sync::oneshot::channel();
    let t = tracker.clone();
    let task = tokio::spawn(async move {
        let mut guard = t.begin(&p);
        guard.observe_output(0, &[1, 2, 3, 4, 5]);
        started.send(()).unwrap();
        // Streaming, until cancelled.
        std::future::pending::<()>().await;
        guard.complete();
    });
    wait.await.unwrap();
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());
    assert_eq!(
        tally(&registry),
        Tally { input_tokens: 12, incomplete: 1, results: [0, 0, 0, 0, 1], ..Tally::default() }
    );
    assert!(tracker.history().unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_task_counts_incomplete() {
    let (tracker, registry) = tracker();
    let t = tracker.clone();
    let task = tokio::spawn(async move {
        let _guard = t.begin(&prompt(2, 9));
        panic!("the engine fell over");
    });
    assert!(task.await.unwrap_err().is_panic());
    assert_eq!(
        tally(&registry),
        Tally { input_tokens: 9, incomplete: 1, results: [0, 0, 0, 0, 1], ..Tally::default() }
    );
    assert!(tracker.history().unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_concurrent_tasks_count_the_serial_sums() {
    let (tracker, registry) = tracker();
    // Each task runs the same three-request script; half complete, some fail, some drop.
    let mut tasks = Vec::new();
    for task in 0..16u32 {
        let t = tracker.clone();
        tasks.push(tokio::spawn(async move {
            for step in 0..50u32 {
                let mut guard = t.begin(&prompt(task % 4, 8 + step % 5));
                guard.observe_output(0, &[step, step + 1]);
                tokio::task::yield_now().await;
                match step % 4 {
                    0 | 1 => guard.complete(),
                    2 => guard.incomplete(),
                    _ => drop(guard),
                }
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let counted = tally(&registry);
    let input: u64 = 16 * (0..50u64).map(|s| 8 + s % 5).sum::<u64>();
    let f0: u64 = 16 * (0..50u64).filter(|s| s % 4 < 2).map(|s| 8 + s % 5).sum::<u64>();
    assert_eq!(counted.input_tokens, input);
    assert_eq!(counted.f0_tokens, f0);
    assert_eq!((counted.complete, counted.incomplete), (16 * 26, 16 * 24));
    // F1 depends on interleaving, but is at most F0, and at least... the four distinct prompt
    // families repeat, so most of their leading blocks were computed before.
    assert!(counted.f1_tokens <= counted.f0_tokens && counted.f1_tokens > f0 / 2);
}

#[test]
fn completing_after_output_on_several_choices_learns_every_choice() {
    let (tracker, registry) = tracker();
    let p = prompt(3, 6);
    let mut guard = tracker.begin(&p);
    // Choices 0 and 2 generate 7 tokens each: with 4-token blocks and a 2-token prompt tail,
    // each completes two output blocks, the second confirmed by its last token.
    guard.observe_output(0, &[10, 11, 12, 13, 14, 15, 16]);
    guard.observe_output(2, &[20, 21, 22, 23, 24, 25]);
    guard.observe_output(2, &[26]);
    guard.complete();
    let history = tracker.history().unwrap();
    let h = DynamoHasher::new(BLOCK).unwrap();
    for choice in [[10u32, 11, 12, 13, 14, 15, 16], [20, 21, 22, 23, 24, 25, 26]] {
        let ids = h.hash(&[p.as_slice(), &choice].concat()).sequence;
        assert_eq!(history.seen_prefix_len(&ids), ids.len(), "{choice:?}");
    }
    assert_eq!(history.len(), 1 + 2 * 2);
    // The same prompt again sees its one complete block.
    let again = tracker.begin(&p);
    assert_eq!(again.seen_tokens(), 4);
    again.complete();
    assert_eq!(tally(&registry).f1_tokens, 4);
}

#[test]
fn a_retry_is_a_new_attempt() {
    let (tracker, registry) = tracker();
    let p = prompt(4, 8);
    let first = tracker.begin(&p);
    drop(first); // the worker failed
    let retry = tracker.begin(&p);
    assert_eq!(retry.seen_tokens(), 0, "the failed attempt taught nothing");
    retry.complete();
    assert_eq!(
        tally(&registry),
        Tally {
            input_tokens: 16,
            f0_tokens: 8,
            f1_tokens: 0,
            complete: 1,
            incomplete: 1,
            results: [0, 1, 0, 0, 1],
            ..Tally::default()
        }
    );
}

#[test]
fn guards_follow_the_core_attempt_rules() {
    // The same script through core's Attempt and a Tally, and through guards and metrics.
    let (tracker, registry) = tracker();
    let h = DynamoHasher::new(BLOCK).unwrap();
    let mut tally_model = Tally::default();
    let mut model =
        kvreuse::core::history::History::with_capacity(tracker.history().unwrap().capacity(), 1)
            .unwrap();
    for i in 0..60u32 {
        let p = prompt(i % 7, 5 + i % 11);
        let output = [i, i + 1, i + 2, i + 3, i + 4];
        let ids = h.hash(&p).sequence;
        let seen = model.seen_prefix_len(&ids);
        let mut attempt = Attempt::begin(
            &mut tally_model,
            p.len() as u64,
            ids,
            seen,
            BLOCK,
            Some(OutputTracker::new(h, &p)),
        );
        attempt.observe_output(0, &output);
        let mut guard = tracker.begin(&p);
        guard.observe_output(0, &output);
        assert_eq!(guard.seen_tokens(), attempt.seen_tokens());
        if i % 3 == 0 {
            attempt.incomplete(&mut tally_model);
            guard.incomplete();
        } else {
            model.insert_all(&attempt.complete(&mut tally_model).ids);
            guard.complete();
        }
    }
    assert_eq!(tally(&registry), tally_model);
    let shared = Arc::clone(tracker.history().unwrap());
    assert_eq!(shared.oldest_first(), model.oldest_first().collect::<Vec<_>>());
}
