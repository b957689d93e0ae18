//! `kvreuse fleet` end to end: its JSON carries the engine's numbers, every row's funnel adds
//! up, instant timing's ceiling is `kvreuse replay`'s FIFO row, every trace format simulates.

use std::process::Output;

use kvreuse::core::fleet::{FleetConfig, Router, Timing};
use kvreuse::core::setup::TraceSettings;
use kvreuse::trace::{Source, load};
use serde_json::Value;

fn kvreuse(args: &[&str]) -> Output {
    kvreuse_tests::support::target_command(env!("CARGO_BIN_EXE_kvreuse"))
        .args(args)
        .output()
        .unwrap()
}

fn json(command: &str, args: &[&str]) -> Value {
    let out = kvreuse(&[&[command, "--json"], args].concat());
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

const STAGES: [&str; 6] =
    ["f0_tokens", "f1_tokens", "f2_tokens", "f3_tokens", "f4_tokens", "f5_tokens"];
const LOSSES: [&str; 5] =
    ["cold_tokens", "retention_tokens", "routing_tokens", "race_tokens", "retrieval_tokens"];

#[test]
fn the_json_holds_the_engines_rows_and_every_funnel_adds_up() {
    let args = [
        "--workers",
        "1,3",
        "--worker-capacity",
        "300,3k",
        "--router",
        "round-robin,kv:temperature=0.5,cache-aware",
        "--speedup",
        "100",
        "--seed",
        "7",
        "--history",
        "20k",
        "--warmup-requests",
        "500",
    ];
    let report = json("fleet", &args);
    for key in [
        "requests",
        "measured_requests",
        "skipped_lines",
        "block_size",
        "engine_block_size",
        "timing",
        "speedup",
        "warmup",
        "history",
        "kv_bytes_per_token",
        "seed",
    ] {
        assert!(report.get(key).is_some(), "{key} missing from {report}");
    }
    assert_eq!(
        (report["timing"].as_str(), report["speedup"].as_f64()),
        (Some("mocker"), Some(100.0))
    );
    assert_eq!(
        (report["requests"].as_u64(), report["measured_requests"].as_u64()),
        (Some(3993), Some(3493))
    );
    let rows = report["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2 * 2 * 3, "workers x capacities x routers");

    // The same simulation through the library, on the loaded trace.
    let (requests, _) = load(vec![Source::Bundled], &TraceSettings::default(), 2).unwrap();
    let routers: Vec<Router> =
        Router::parse_list("round-robin,kv:temperature=0.5,cache-aware").unwrap();
    let config = FleetConfig {
        block_size: 512,
        engine_block_size: None,
        shapes: FleetConfig::grid(&[1, 3], &[300, 3000], &routers),
        timing: Timing::Mocker { speedup: 100.0 },
        history: Some(20_000),
        measure_from: 500,
        seed: 7,
    };
    let want = kvreuse::fleet::fleet(&config, &requests, 1).unwrap().rows;
    for (row, want) in rows.iter().zip(&want) {
        assert_eq!(row["router"], want.router.as_str());
        let f = &want.funnel;
        let values = [
            f.f0,
            f.f1,
            f.f2,
            f.f3,
            f.f4,
            f.f5,
            f.cold,
            f.retention,
            f.routing,
            f.race,
            f.retrieval,
        ];
        for (key, value) in STAGES.iter().chain(&LOSSES).zip(values) {
            assert_eq!(row[key], value, "{key} in {row}");
        }
        assert_eq!(row["ttft_ms_p50"].as_f64(), want.ttft_ms_p50);
        let per_worker = row["per_worker"].as_array().unwrap();
        assert_eq!(per_worker.len(), row["workers"].as_u64().unwrap() as usize);
        let sum = |key: &str| per_worker.iter().map(|w| w[key].as_u64().unwrap()).sum::<u64>();
        assert_eq!(sum("prompt_tokens"), row["f0_tokens"].as_u64().unwrap());
        assert_eq!(sum("reused_tokens"), row["f5_tokens"].as_u64().unwrap());
        let reused = row["f5_tokens"].as_u64().unwrap();
        let lost: u64 = LOSSES.iter().map(|k| row[k].as_u64().unwrap()).sum();
        assert_eq!(reused + lost, row["f0_tokens"].as_u64().unwrap(), "{row}");
    }
}

#[test]
fn instant_timing_has_the_replay_fifo_ceiling_and_no_race() {
    let fleet = json(
        "fleet",
        &[
            "--timing",
            "instant",
            "--history",
            "5000",
            "--workers",
            "2",
            "--worker-capacity",
            "1000",
            "--router",
            "kv,prefix-hash",
        ],
    );
    let replay = json("replay", &["--policy", "fifo", "--capacity", "5000"]);
    for row in fleet["rows"].as_array().unwrap() {
        assert_eq!(row["f1_tokens"], replay["rows"][0]["f1_tokens"]);
        assert_eq!(row["f0_tokens"], replay["rows"][0]["f0_tokens"]);
        assert_eq!(row["race_tokens"], 0);
        assert!(row["ttft_ms_p50"].is_null() && row["queue_ms_mean"].is_null());
    }
    assert_eq!(fleet["speedup"], Value::Null);
}

#[test]
fn conversations_stay_on_their_worker_with_the_session_router() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../traces/kv-cache-tester");
    let report = json(
        "fleet",
        &[dir, "--workers", "4", "--worker-capacity", "20k", "--router", "session,round-robin"],
    );
    let replay = json("replay", &[dir]);
    let rows = report["rows"].as_array().unwrap();
    assert_eq!(report["block_size"], 64, "the documents' own");
    for row in rows {
        assert_eq!(row["f0_tokens"], replay["rows"][0]["f0_tokens"]);
    }
    // Three conversations: with sticky sessions at most three workers get requests, and each
    // conversation's later turns find their earlier ones.
    let busy = |row: &Value| {
        row["per_worker"].as_array().unwrap().iter().filter(|w| w["requests"] != 0).count()
    };
    assert!(busy(&rows[0]) <= 3);
    assert!(
        rows[0]["f5_tokens"].as_u64() > rows[1]["f5_tokens"].as_u64(),
        "session beats round-robin"
    );
}

#[test]
fn the_plot_is_one_stacked_bar_per_row() {
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("funnel.svg");
    let out = kvreuse(&[
        "fleet",
        "--workers",
        "2",
        "--worker-capacity",
        "500,5k",
        "--plot",
        svg.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = std::fs::read_to_string(&svg).unwrap();
    for label in
        ["reused", "race", "routing", "retention", "cold", "2 x 500 kv", "2 x 5000 round-robin"]
    {
        assert!(text.contains(label), "{label} missing from the plot");
    }
    // The table: one line per row after the two header lines and the column names.
    let table = String::from_utf8_lossy(&out.stdout);
    assert_eq!(table.lines().count(), 3 + 4, "{table}");
}
