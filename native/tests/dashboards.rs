//! The operator kit in `deploy/` against a real Prometheus (Debian's `prometheus` package;
//! `./scripts/test` installs it): the example router, syncing with a local `nats-server`,
//! serves every family; Prometheus scrapes it with the recording and alert rules loaded, and
//! every dashboard query and every recording rule must return at least one series. Skipped
//! under an emulator (the aarch64 suite): what it checks does not depend on the architecture.
#![cfg(feature = "nats")]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kvreuse_tests::support::{
    NatsServer, Running, free_port, http_get, program, url_encode, wait_for_port,
};
use serde_json::Value;

fn deploy() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy")
}

/// The example router's binary, which `cargo test` builds next to this test's directory.
fn example_binary() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap();
    let path = dir.join("examples").join(format!("router{}", std::env::consts::EXE_SUFFIX));
    assert!(path.exists(), "{} missing: run through `cargo test`", path.display());
    path
}

/// A PromQL query's result series (panics on an error status).
fn query(port: u16, expr: &str) -> Vec<Value> {
    let (status, body) = http_get(port, &format!("/api/v1/query?query={}", url_encode(expr)))
        .unwrap_or_else(|e| panic!("query {expr}: {e}"));
    let reply: Value = serde_json::from_str(&body).unwrap_or_else(|_| panic!("{status}: {body}"));
    assert_eq!(reply["status"], "success", "{expr}: {body}");
    reply["data"]["result"].as_array().cloned().unwrap_or_default()
}

#[test]
fn every_dashboard_query_and_recording_rule_returns_series() {
    if std::env::var_os("CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER").is_some() {
        eprintln!("skipped under an emulator");
        return;
    }
    let nats = NatsServer::start(&[]);
    let mut router = Running(
        kvreuse_tests::support::target_command(example_binary())
            .args(["--workers", "4", "--worker-capacity", "300", "--timing", "mocker"])
            .args(["--no-report-every", "3", "--abort-every", "7", "--pace-ms", "4"])
            .env("DYN_ROUTER_CACHE_REUSE_HISTORY", "1")
            .env("DYN_ROUTER_CACHE_REUSE_SYNC", "1")
            .env("KVREUSE_NATS_URL", nats.url())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let mut lines = BufReader::new(router.0.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    let target = first.strip_prefix("metrics: http://").expect(&first).trim_end_matches("/metrics");
    let target = target.to_string();

    let dir = tempfile::tempdir().unwrap();
    let rules = deploy().join("prometheus");
    let config = dir.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n  - {}\n  - {}\n\
             scrape_configs:\n  - job_name: kvreuse\n    static_configs:\n      - targets: ['{target}']\n",
            rules.join("kvreuse-rules.yml").display(),
            rules.join("kvreuse-alerts.yml").display(),
        ),
    )
    .unwrap();
    let port = free_port();
    let _prometheus = Running(
        Command::new(program("prometheus", "prometheus"))
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", dir.path().join("data").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_for_port(port, 60, "prometheus");
    let deadline = Instant::now() + Duration::from_secs(60);
    while http_get(port, "/-/ready").map(|(status, _)| status).ok() != Some(200) {
        assert!(Instant::now() < deadline, "Prometheus did not become ready");
        std::thread::sleep(Duration::from_millis(100));
    }

    // Two scrapes while requests flow (the router paces them over about 16 s), then a rule
    // evaluation over them.
    let deadline = Instant::now() + Duration::from_secs(90);
    let scraped = "count_over_time(dynamo_component_router_kv_funnel_observations_total[1m])";
    loop {
        let enough = query(port, scraped)
            .iter()
            .any(|s| s["value"][1].as_str().and_then(|v| v.parse::<f64>().ok()) >= Some(3.0));
        if enough && !query(port, "kvreuse:funnel_share:ratio5m > 0").is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "Prometheus did not scrape the router twice");
        std::thread::sleep(Duration::from_millis(250));
    }

    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(deploy().join("grafana/kvreuse-dashboard.json")).unwrap(),
    )
    .unwrap();
    let mut checked = 0;
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            let expr = target["expr"].as_str().unwrap();
            // Grafana's variables, as the dashboard's defaults set them.
            let expr = expr.replace("$router_id", ".*").replace("$__rate_interval", "1m");
            let series = query(port, &expr);
            assert!(!series.is_empty(), "panel {:?}: no series for {expr}", panel["title"]);
            checked += 1;
        }
    }
    let rules: Vec<String> = std::fs::read_to_string(rules.join("kvreuse-rules.yml"))
        .unwrap()
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- record: ").map(str::to_string))
        .collect();
    assert!(rules.len() >= 8, "{rules:?}");
    for rule in &rules {
        // Rule groups are evaluated one after another, each on its own schedule.
        let deadline = Instant::now() + Duration::from_secs(30);
        while query(port, rule).is_empty() {
            assert!(Instant::now() < deadline, "recording rule {rule} has no series");
            std::thread::sleep(Duration::from_millis(250));
        }
        checked += 1;
    }
    // The funnel's losses add up with the reuse to the whole prompt.
    let total = query(
        port,
        "sum(kvreuse:funnel_loss:ratio5m) + on() sum(kvreuse:funnel_share:ratio5m{stage=\"f5\"})",
    );
    let total: f64 = total[0]["value"][1].as_str().unwrap().parse().unwrap();
    assert!((total - 1.0).abs() < 1e-9, "{total}");
    eprintln!("{checked} queries and rules answered with series");
    let driven = lines.next().unwrap().unwrap();
    assert!(driven.starts_with("driven: 3993 requests"), "{driven}");
    drop(nats);
}
