//! `kvreuse replay` end to end: the expected numbers of the bundled and toy traces (from
//! `traces/README` of the project's reference material), formats, options and bad input.

use std::io::Write;
use std::process::Output;

use serde_json::Value;

fn kvreuse(args: &[&str]) -> Output {
    kvreuse_tests::support::target_command(env!("CARGO_BIN_EXE_kvreuse"))
        .args(args)
        .output()
        .unwrap()
}

fn json(args: &[&str]) -> Value {
    let out = kvreuse(&[&["replay", "--json"], args].concat());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn row<'a>(report: &'a Value, policy: &str, capacity: Value) -> &'a Value {
    report["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["policy"] == policy && r["capacity"] == capacity)
        .unwrap_or_else(|| panic!("no row {policy} {capacity}"))
}

fn numbers(row: &Value) -> [u64; 5] {
    ["f0_tokens", "f1_tokens", "any_tokens", "f1_blocks", "evictions"]
        .map(|k| row[k].as_u64().unwrap_or_else(|| panic!("{k} in {row}")))
}

#[test]
fn bundled_trace_matches_the_expected_table() {
    let report = json(&["--capacity", "1k,10k,100k,inf", "--policy", "fifo,lru"]);
    assert_eq!(report["requests"], 3993);
    let f0 = 61_194_628;
    let expected: [(&str, Value, [u64; 5]); 6] = [
        ("inf", "inf".into(), [f0, 39_852_661, 39_852_661, 77_953, 0]),
        ("fifo", 1000.into(), [f0, 4_908_762, 5_095_804, 9_593, 111_280]),
        ("fifo", 10_000.into(), [f0, 24_860_852, 25_078_166, 48_622, 63_244]),
        ("fifo", 100_000.into(), [f0, 39_852_661, 39_852_661, 77_953, 0]),
        ("lru", 1000.into(), [f0, 5_142_055, 5_242_919, 10_050, 110_827]),
        ("lru", 10_000.into(), [f0, 26_393_500, 26_421_148, 51_614, 60_263]),
    ];
    for (policy, capacity, want) in expected {
        assert_eq!(numbers(row(&report, policy, capacity.clone())), want, "{policy} {capacity}");
    }
}

#[test]
fn toy_trace_matches_the_expected_table() {
    let trace = concat!(env!("CARGO_MANIFEST_DIR"), "/../traces/toy_semantics.jsonl");
    let report = json(&[trace, "--capacity", "3,4,inf"]);
    // (prefix tokens, any tokens, prefix blocks)
    for (policy, capacity, want) in [
        ("inf", Value::from("inf"), [2560, 2560, 5]),
        ("fifo", 3.into(), [1024, 1024, 2]),
        ("fifo", 4.into(), [1024, 1536, 2]),
        ("lru", 3.into(), [1024, 1024, 2]),
        ("lru", 4.into(), [1024, 1536, 2]),
    ] {
        let n = numbers(row(&report, policy, capacity.clone()));
        assert_eq!([n[1], n[2], n[3]], want, "{policy} {capacity}");
        assert_eq!(n[0], 4266);
    }
}

#[test]
fn gzip_token_traces_byte_capacities_warmup_and_plot() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokens.jsonl.gz");
    let mut gz = flate2::write::GzEncoder::new(
        std::fs::File::create(&path).unwrap(),
        flate2::Compression::fast(),
    );
    // The same 8-token prompt twice: with 4-token blocks, the second sees both blocks; the
    // output continues the chain and is learned too.
    for _ in 0..2 {
        writeln!(gz, r#"{{"tokens": [1,2,3,4,5,6,7,8], "output_tokens": [9,10,11,12,13]}}"#)
            .unwrap();
    }
    writeln!(gz, r#"{{"tokens": [1,2,3,4,5,6,7,8,9,10,11,12,99]}}"#).unwrap();
    gz.finish().unwrap();
    let svg = dir.path().join("reuse.svg");
    let p = path.to_str().unwrap();
    let report =
        json(&[p, "--block-size", "4", "--capacity", "1MiB,inf", "--plot", svg.to_str().unwrap()]);
    let inf = row(&report, "inf", "inf".into());
    // 8 + 8 + 13 prompt tokens; the second request reuses 2 blocks, the third 3 (two prompt
    // blocks and the output block the first request generated).
    assert_eq!(numbers(inf)[..4], [29, 8 + 12, 8 + 12, 5]);
    let fifo = &report["rows"][0];
    assert!(fifo["heap_bytes"].as_u64().unwrap() <= 1 << 20);
    // About 18.4 bytes an id at this size (the history's index at 50% load, its summary
    // directory and the ring): 56,934 ids.
    let capacity = fifo["capacity"].as_u64().unwrap();
    assert!(capacity > 56_000, "{capacity}");
    assert!(std::fs::read_to_string(&svg).unwrap().contains("<svg"));

    let warm = json(&[p, "--block-size", "4", "--capacity", "inf", "--warmup", "0.5"]);
    assert_eq!(warm["measured_requests"], 2);
    assert_eq!(numbers(row(&warm, "inf", "inf".into()))[..2], [8 + 13, 8 + 12]);
}

#[test]
fn bad_lines_name_the_file_and_line_or_are_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.jsonl");
    std::fs::write(&path, "{\"tokens\": [1,2]}\n{\"tokens\": [1, -2]}\n{\"tokens\": [3]}\n")
        .unwrap();
    let p = path.to_str().unwrap();
    let out = kvreuse(&["replay", p, "--block-size", "1"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr.contains(&format!("{p}:2:16: expected a token id")), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");

    let out = kvreuse(&["replay", p, "--block-size", "1", "--skip-invalid", "--json"]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("skipped 1 invalid lines"));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((report["requests"].as_u64(), report["skipped_lines"].as_u64()), (Some(2), Some(1)));
}

#[test]
fn bad_arguments_are_clear_errors() {
    for (args, needle) in [
        (&["replay", "--capacity", "10x"][..], "10x"),
        (&["replay", "--capacity", "0"][..], "positive"),
        (&["replay", "--capacity", "10B"][..], "too few bytes"),
        (&["replay", "--policy", "mru"][..], "unknown policy"),
        (&["replay", "--warmup", "1.5"][..], "fraction"),
        (&["replay", "--block-size", "0"][..], "block size"),
        (&["replay", "/no/such/trace.jsonl"][..], "/no/such/trace.jsonl"),
    ] {
        let out = kvreuse(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
    }
}
