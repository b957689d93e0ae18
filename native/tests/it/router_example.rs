//! Runs `examples/router.rs` as a process on a generated token trace, scrapes its `/metrics`
//! over HTTP, and checks every metric family against what the replay engine, a plain
//! `History` and the fleet engine compute for the same requests.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::time::Instant;

use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use kvreuse::core::fleet::{Fleet, FleetConfig, Router, Shape, Timing};
use kvreuse::core::history::History;
use kvreuse::core::replay::{Policy, Replay, ReplayConfig};
use kvreuse::core::trace::Request;

const BLOCK: usize = 16;
const CANCEL_EVERY: usize = 7;
const ABORT_EVERY: usize = 5;
const NO_REPORT_EVERY: usize = 11;
const WORKERS: usize = 3;
const WORKER_CAPACITY: usize = 40;

/// The example's binary, which `cargo test` builds next to this test's directory.
fn example_binary() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap();
    let path = dir.join("examples").join(format!("router{}", std::env::consts::EXE_SUFFIX));
    assert!(path.exists(), "{} missing: run through `cargo test`", path.display());
    path
}

/// A token trace: eight prompt families sharing long prefixes, varied tails and outputs, and
/// every 97th prompt too long for a worker's whole cache (which the worker rejects).
fn write_trace(path: &std::path::Path) {
    let mut state = 0x853c_49e6_748f_ea9bu64;
    let mut next = move |n: u64| {
        state =
            state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        (state >> 33) % n
    };
    let mut out = std::fs::File::create(path).unwrap();
    for i in 0..600 {
        let family = next(8) as u32;
        let shared = 40 + 16 * family as usize;
        let mut tokens: Vec<u32> = (0..shared as u32).map(|t| family * 10_000 + t).collect();
        let tail = if i % 97 == 96 { (WORKER_CAPACITY * BLOCK) as u64 } else { next(70) };
        tokens.extend((0..tail).map(|_| next(50_000) as u32));
        let output: Vec<u32> = (0..next(45)).map(|_| next(50_000) as u32).collect();
        writeln!(out, "{{\"tokens\": {tokens:?}, \"output_tokens\": {output:?}}}").unwrap();
    }
}

struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn scrape(url: &str) -> String {
    let authority = url.trim_start_matches("http://").split('/').next().unwrap().to_string();
    let stream = tokio::net::TcpStream::connect(&authority).await.unwrap();
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.unwrap();
    tokio::spawn(connection);
    let request = hyper::Request::get("/metrics")
        .header("host", authority)
        .body(Empty::<Bytes>::new())
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    assert_eq!(response.status(), 200);
    let body = response.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8(body.to_vec()).unwrap()
}

/// `name{labels}` -> value, from Prometheus text.
fn samples(text: &str) -> HashMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (key, value) = l.rsplit_once(' ').unwrap();
            (key.to_string(), value.parse().unwrap())
        })
        .collect()
}

#[tokio::test]
async fn scraped_metrics_equal_the_replay_engine() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("trace.jsonl");
    write_trace(&trace);

    let started = Instant::now();
    let mut child = Running(
        kvreuse_tests::support::target_command(example_binary())
            .args(["--block-size", &BLOCK.to_string()])
            .args(["--cancel-every", &CANCEL_EVERY.to_string()])
            .args(["--abort-every", &ABORT_EVERY.to_string()])
            .args(["--no-report-every", &NO_REPORT_EVERY.to_string()])
            .args(["--workers", &WORKERS.to_string()])
            .args(["--worker-capacity", &WORKER_CAPACITY.to_string()])
            .arg(&trace)
            .env("DYN_ROUTER_CACHE_REUSE_HISTORY", "1")
            .env("DYN_ROUTER_CACHE_REUSE_HISTORY_BYTES", "24KiB")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    );
    let mut lines = BufReader::new(child.0.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    let url = first.strip_prefix("metrics: ").expect(&first).to_string();
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    let driven = lines.next().unwrap().unwrap();
    let text = scrape(&url).await;
    let elapsed = started.elapsed();
    drop(child);
    let metrics = samples(&text);
    // Labels in the encoder's order (sorted by name).
    let get = |name: &str, label: &str| -> f64 {
        let mut labels = vec!["router_id=\"example\"", label];
        labels.retain(|l| !l.is_empty());
        labels.sort();
        let key = format!("dynamo_component_{name}{{{}}}", labels.join(","));
        *metrics.get(&key).unwrap_or_else(|| panic!("{key} missing from:\n{text}"))
    };

    // The same requests through the core: every request observed, completed ones counted
    // and taught, in order.
    let source = kvreuse::trace::Source::Path(trace.clone());
    let mut settings = kvreuse::core::setup::TraceSettings::default();
    settings.set_block_size(BLOCK).unwrap();
    let (requests, _) = kvreuse::trace::load(vec![source], &settings, 1).unwrap();
    // The same fleet through the core engine gives each request's route and report, and tells
    // which requests its workers reject (those end incomplete).
    let mut fleet = Fleet::new(&FleetConfig {
        block_size: BLOCK,
        engine_block_size: None,
        shapes: vec![Shape {
            workers: WORKERS,
            worker_capacity: WORKER_CAPACITY,
            router: Router::parse("kv").unwrap(),
        }],
        timing: Timing::Instant,
        history: None,
        measure_from: 0,
        seed: 0,
    })
    .unwrap();
    fleet.record_outcomes();
    let outcomes: Vec<_> = requests
        .iter()
        .map(|request| {
            fleet.push(request).unwrap();
            let [outcome] = fleet.take_outcomes(0)[..] else { panic!("instant timing") };
            outcome
        })
        .collect();
    let rejected = |i: usize| outcomes[i].rejected;
    assert!((0..requests.len()).any(rejected), "the trace must exercise a rejection");
    let cancelled = |i: usize| (i + 1).is_multiple_of(CANCEL_EVERY);
    let aborted = |i: usize| !cancelled(i) && (i + 1).is_multiple_of(ABORT_EVERY);
    let completes = |i: usize| !rejected(i) && !cancelled(i) && !aborted(i);
    let completed: Vec<&Request> =
        requests.iter().enumerate().filter(|&(i, _)| completes(i)).map(|(_, r)| r).collect();
    let (complete, incomplete) = (completed.len(), requests.len() - completed.len());
    let count = |fate: &dyn Fn(usize) -> bool| {
        (0..requests.len()).filter(|&i| !rejected(i) && fate(i)).count()
    };
    assert_eq!(
        driven,
        format!(
            "driven: {} requests ({complete} complete, {} cancelled, {} aborted, {} rejected)",
            requests.len(),
            count(&cancelled),
            count(&aborted),
            (0..requests.len()).filter(|&i| rejected(i)).count()
        )
    );
    let capacity = get("router_cache_loss_history_capacity_blocks", "") as usize;
    let config = ReplayConfig {
        block_size: BLOCK,
        histories: vec![(Policy::Fifo, Some(capacity))],
        measure_from: 0,
    };
    let mut replay = Replay::new(&config).unwrap();
    let mut history = History::with_capacity(capacity, 5).unwrap();
    let mut evicted = 0;
    for request in &completed {
        replay.push(request).unwrap();
        evicted += history.insert_all(&request.prompt_ids).evicted;
        evicted += history.insert_all(&request.output_ids).evicted;
    }
    let row = &replay.results()[0];
    assert!(row.f1_tokens > 0 && evicted > 0, "the trace must exercise reuse and eviction");
    let input: u64 = requests.iter().map(|r| r.prompt_tokens).sum();

    assert_eq!(get("router_cache_loss_observation_input_tokens_total", ""), input as f64);
    assert_eq!(get("router_cache_loss_funnel_tokens_total", "stage=\"f0\""), row.f0_tokens as f64);
    assert_eq!(get("router_kv_history_cached_prefix_tokens_total", ""), row.f1_tokens as f64);
    assert_eq!(get("router_cache_loss_observations_total", "result=\"complete\""), complete as f64);
    assert_eq!(
        get("router_cache_loss_observations_total", "result=\"incomplete\""),
        incomplete as f64
    );
    assert_eq!(get("router_kv_history_evictions_total", ""), evicted as f64);
    assert_eq!(row.evictions, evicted as u64);
    assert_eq!(get("router_cache_loss_history_unique_hashes", ""), history.len() as f64);
    assert_eq!(
        get("router_cache_loss_history_represented_tokens", ""),
        (history.len() * BLOCK) as f64
    );
    let capacity_bytes = get("router_cache_loss_history_capacity_bytes", "");
    assert!(capacity_bytes > 0.0 && capacity_bytes <= 24.0 * 1024.0, "{capacity_bytes}");
    let estimated = get("router_cache_loss_history_estimated_bytes", "");
    let fill = history.len() as f64 / capacity as f64;
    assert!((estimated - capacity_bytes * fill).abs() < 1.0, "{estimated} vs {capacity_bytes}");
    let age = get("router_kv_history_oldest_age_seconds", "");
    assert!(age > 0.0 && age < elapsed.as_secs_f64(), "{age}");

    let mut history = History::with_capacity(capacity, 5).unwrap();
    let (mut stages, mut results, mut losses) = ([0u64; 6], [0u64; 5], [0u64; 5]);
    // The funnel: only completed requests with a route and a report count their stages.
    for (i, (request, outcome)) in requests.iter().zip(&outcomes).enumerate() {
        if !completes(i) {
            results[4] += 1;
            continue;
        }
        let seen = history.seen_prefix_len(&request.prompt_ids) as u64 * BLOCK as u64;
        history.insert_all(&request.prompt_ids);
        history.insert_all(&request.output_ids);
        if (i + 1).is_multiple_of(NO_REPORT_EVERY) {
            results[2] += 1;
            continue;
        }
        results[0] += 1;
        let found = [outcome.prompt_tokens, seen.min(outcome.prompt_tokens)];
        let rest = [
            outcome.best_cached_tokens,
            outcome.selected_cached_tokens,
            outcome.found_tokens,
            outcome.reused_tokens,
        ];
        let mut request = [0u64; 6];
        for (k, value) in found.into_iter().chain(rest).enumerate() {
            request[k] = value;
            stages[k] += value;
        }
        let charged = kvreuse_tests::support::losses_token_by_token(request);
        for (sum, loss) in losses.iter_mut().zip(charged) {
            *sum += loss;
        }
    }
    assert!(
        stages[5] > 0 && stages[1] > stages[2],
        "reuse, and some lost to retention: {stages:?}"
    );
    for (k, stage) in ["f0", "f1", "f2", "f3", "f4", "f5"].iter().enumerate() {
        let label = format!("stage=\"{stage}\"");
        assert_eq!(get("router_kv_funnel_tokens_total", &label), stages[k] as f64, "{stage}");
        assert_eq!(get("router_kv_funnel_clamped_total", &label), 0.0);
    }
    for (k, loss) in ["cold", "retention", "routing", "race", "retrieval"].iter().enumerate() {
        let label = format!("loss=\"{loss}\"");
        assert_eq!(get("router_kv_funnel_loss_tokens_total", &label), losses[k] as f64, "{loss}");
    }
    let names = ["observed", "no_route", "no_report", "prompt_mismatch", "incomplete"];
    for (k, result) in names.iter().enumerate() {
        let label = format!("result=\"{result}\"");
        assert_eq!(
            get("router_kv_funnel_observations_total", &label),
            results[k] as f64,
            "{result}"
        );
    }
}

#[test]
fn the_example_without_the_switch_serves_no_accounting() {
    let mut child = Running(
        kvreuse_tests::support::target_command(example_binary())
            .args(["--block-size", "16", "--cancel-every", "2"])
            .arg(std::env::current_exe().unwrap().with_file_name("missing.jsonl"))
            .env_remove("DYN_ROUTER_CACHE_REUSE_HISTORY")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    // A missing trace is an error naming it, after the metrics endpoint came up.
    let status = child.0.wait().unwrap();
    assert!(!status.success());
    let mut stderr = String::new();
    std::io::Read::read_to_string(child.0.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert!(stderr.contains("set DYN_ROUTER_CACHE_REUSE_HISTORY=1"), "{stderr}");
    assert!(stderr.contains("cannot read") && stderr.contains("missing.jsonl"), "{stderr}");
}
