//! The catalogue of bad inputs: every surface that takes outside input, each bad input with a
//! check that it gets a clear error (or a counted, logged fallback) and changes no state.
//! `catalogue_size` counts them (the README's Reliability section quotes the count).

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Output};

use kvreuse::core::message::{self, MessageError};
use kvreuse::core::setup::{FleetSettings, ReplaySettings, Setting};
use kvreuse::{Config, Error, SharedHistory};
use kvreuse_tests::support::Captured;

// ---------------------------------------------------------------- environment

/// (variable, value, what the warning must mention).
const ENVIRONMENT: [(&str, &str); 10] = [
    ("DYN_ROUTER_CACHE_REUSE_HISTORY", "maybe"),
    ("DYN_ROUTER_CACHE_REUSE_HISTORY", "2"),
    ("DYN_ROUTER_CACHE_REUSE_HISTORY", "tru e"),
    ("DYN_ROUTER_CACHE_REUSE_HISTORY_BYTES", "0"),
    ("DYN_ROUTER_CACHE_REUSE_HISTORY_BYTES", "-1"),
    ("DYN_ROUTER_CACHE_REUSE_HISTORY_BYTES", "1e9"),
    ("DYN_ROUTER_CACHE_REUSE_HISTORY_BYTES", "12XB"),
    ("DYN_ROUTER_CACHE_REUSE_HISTORY_BYTES", "99999999999999999999999"),
    ("KVREUSE_SYNC_STREAM_BYTES", "-5"),
    ("KVREUSE_SYNC_STREAM_MAX_AGE_SECONDS", "soon"),
];

#[test]
fn environment_values_fall_back_with_one_warning_naming_them() {
    for (name, value) in ENVIRONMENT {
        let mut vars = HashMap::from([
            ("DYN_ROUTER_CACHE_REUSE_HISTORY".to_string(), "1".to_string()),
            ("DYN_ROUTER_CACHE_REUSE_SYNC".to_string(), "1".to_string()),
        ]);
        vars.insert(name.to_string(), value.to_string());
        let captured = Captured::default();
        let (config, sync) = tracing::subscriber::with_default(captured.subscriber(), || {
            let lookup = |n: &str| vars.get(n).cloned();
            let domain = message::Domain {
                model: "m".into(),
                block_size: 16,
                eagle: false,
                scheme: "dynamo".into(),
            };
            (
                Config::from_lookup(16, lookup),
                kvreuse::ReplicaSyncConfig::from_lookup(domain, lookup),
            )
        });
        let logs = captured.text();
        assert_eq!(logs.lines().count(), 1, "{name}={value:?}: {logs}");
        assert!(logs.contains(name) && logs.contains(&format!("{value:?}")), "{logs}");
        let default = Config::from_lookup(16, |n| {
            (n == "DYN_ROUTER_CACHE_REUSE_HISTORY").then(|| "1".to_string())
        });
        if name == "DYN_ROUTER_CACHE_REUSE_HISTORY" {
            assert!(!config.enabled(), "an unknown switch value means off");
        } else {
            assert_eq!(config.history_bytes(), default.history_bytes(), "{name}={value:?}");
        }
        assert!(sync.is_some());
    }
}

// ---------------------------------------------------------------- command line

fn kvreuse(args: &[&str], stdin: &[u8]) -> Output {
    let mut child = kvreuse_tests::support::target_command(env!("CARGO_BIN_EXE_kvreuse"))
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The tool may exit before reading its input (a bad flag): a closed pipe is fine then.
    let _ = child.stdin.take().unwrap().write_all(stdin);
    child.wait_with_output().unwrap()
}

/// (arguments, stdin, what the one-line error must contain).
const COMMAND_LINE: [(&[&str], &str, &str); 43] = [
    (&["replay", "--block-size", "0"], "", "block size"),
    (&["replay", "--block-size", "-3"], "", "-3"),
    (&["replay", "--block-size", "abc"], "", "abc"),
    (&["replay", "--capacity", "0"], "", "capacity"),
    (&["replay", "--capacity", "1.5q"], "", "1.5q"),
    (&["replay", "--capacity", ""], "", "capacity"),
    (&["replay", "--capacity", "-5"], "", "--capacity: \"-5\""),
    (&["replay", "--policy", "fifo,bogus"], "", "bogus"),
    (&["replay", "--warmup", "1"], "", "fraction"),
    (&["replay", "--warmup", "nan"], "", "nan"),
    (&["replay", "--warmup", "-0.5"], "", "-0.5"),
    (&["replay", "--warmup-requests", "x"], "", "--warmup-requests: \"x\""),
    (&["replay", "--warmup", "0.5", "--warmup-requests", "3"], "", "--warmup"),
    // A share of the requests needs their number first; a pipe can be read only once.
    (&["replay", "--warmup", "0.5", "-"], GOOD[0], "--warmup-requests N"),
    (&["replay", "/no/such/trace.jsonl"], "", "/no/such/trace.jsonl"),
    (&["replay", "/"], "", "/"),
    (&["replay", "--bogus"], "", "--bogus"),
    (&["replay", "--plot", "/no/such/dir/reuse.svg"], "", "--plot /no/such/dir/reuse.svg"),
    (&["replay", "--plot", "/"], "", "is a directory"),
    (&["fleet", "--workers", "0"], "", "--workers: workers must be between 1 and 65536, not 0"),
    (&["fleet", "--workers", "2,x"], "", "--workers: \"x\""),
    (&["fleet", "--worker-capacity", "40GiB"], "", "bytes per token"),
    (&["fleet", "--worker-capacity", "lots"], "", "--worker-capacity: \"lots\""),
    (&["fleet", "--worker-capacity", "0"], "", "--worker-capacity"),
    (&["fleet", "--router", "kv,mru"], "", "unknown router \"mru\""),
    (&["fleet", "--router", "kv:credit=1"], "", "overlap_score_credit"),
    (&["fleet", "--engine-block-size", "100"], "", "must divide the trace's block size (512)"),
    (&["fleet", "--timing", "fast"], "", "unknown timing \"fast\""),
    (&["fleet", "--speedup", "0"], "", "--speedup: \"0\" is not a positive number"),
    (&["fleet", "--seed", "9007199254740992"], "", "2^53"),
    (&["fleet", "--history", "0"], "", "--history"),
    (&["fleet", "--kv-bytes-per-token", "-1"], "", "--kv-bytes-per-token"),
    (&["fleet", "--plot", "/"], "", "is a directory"),
    (&["fleet", "/no/such/trace.jsonl"], "", "/no/such/trace.jsonl"),
    (&["hash"], "[1]", "not provided: --block-size <N>"),
    (&["hash", "--block-size", "4"], "not json", "JSON"),
    (&["hash", "--block-size", "4"], "[1, -1]", "-1"),
    (&["hash", "--block-size", "4"], "[4294967296]", "4294967296"),
    (&["hash", "--block-size", "0"], "[1]", "block size"),
    (&["hash", "--block-size", "4", "--scheme", "sha1"], "[1]", "sha1"),
    (&["hash", "--block-size", "4"], "{\"token\": [1]}", "tokens"),
    (&["hash", "--block-size", "4"], "{\"tokens\": [1], \"tokens\": [2]}", "duplicate key"),
    (&["hash", "--block-size", "4", "--lora-name"], "[1]", "--lora-name"),
];

#[test]
fn command_line_mistakes_are_one_line_errors_with_status_2() {
    for (args, stdin, mention) in COMMAND_LINE {
        let out = kvreuse(args, stdin.as_bytes());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{args:?} printed a result");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: one line, got {stderr:?}");
        assert!(stderr.starts_with("kvreuse: error: "), "{stderr}");
        assert!(stderr.contains(mention), "{args:?}: {stderr:?} should mention {mention:?}");
    }
}

/// Five bad settings, in the shared setup's terms; `wasm/tests/it/errors.rs` gives the browser
/// build the same five.
const SETUP_MISTAKES: [(Setting, &str); 5] = [
    (Setting::Capacity, "0"),
    (Setting::Capacity, "10x"),
    (Setting::Policy, "fifo,mru"),
    (Setting::Warmup, "1.5"),
    (Setting::BlockSize, "0"),
];

/// The command line words a bad setting exactly as the shared setup in core does, after the
/// flag's name, as the browser build does after its option's name.
#[test]
fn setting_mistakes_are_worded_by_the_shared_setup() {
    for (setting, text) in SETUP_MISTAKES {
        let want = ReplaySettings::default().set(setting, text).unwrap_err();
        let out = kvreuse(&["replay", setting.flag(), text], b"");
        assert_eq!(out.status.code(), Some(2));
        assert_eq!(
            String::from_utf8_lossy(&out.stderr),
            format!("kvreuse: error: {}: {want}\n", setting.flag())
        );
    }
}

/// Bad fleet settings, in the shared setup's terms.
const FLEET_SETUP_MISTAKES: [(Setting, &str); 6] = [
    (Setting::Workers, "4,0"),
    (Setting::WorkerCapacity, "2k,ten"),
    (Setting::Router, "kv:temperature=-1"),
    (Setting::Timing, "slow"),
    (Setting::Speedup, "nan"),
    (Setting::EngineBlockSize, "0"),
];

#[test]
fn fleet_setting_mistakes_are_worded_by_the_shared_setup() {
    for (setting, text) in FLEET_SETUP_MISTAKES {
        let want = FleetSettings::default().set(setting, text).unwrap_err();
        let out = kvreuse(&["fleet", setting.flag(), text], b"");
        assert_eq!(out.status.code(), Some(2));
        assert_eq!(
            String::from_utf8_lossy(&out.stderr),
            format!("kvreuse: error: {}: {want}\n", setting.flag())
        );
    }
}

// ---------------------------------------------------------------- trace lines

const GOOD: [&str; 3] = [
    r#"{"timestamp": 0, "input_length": 10, "hash_ids": [1, 2, 3]}"#,
    r#"{"timestamp": 5, "input_length": 12, "hash_ids": [1, 2, 4]}"#,
    r#"{"timestamp": 9, "tokens": [5, 6, 7, 8, 9], "output_tokens": [1, 2, 3, 4]}"#,
];

/// (a bad line, what the error must say).
fn trace_lines() -> Vec<(Vec<u8>, &'static str)> {
    let mut huge = b"{\"tokens\": [".to_vec();
    huge.resize(100 << 20, b'7');
    let lines: [(&[u8], &str); 15] = [
        (br#"{"tokens": "abc"}"#, "expected an array, found the string \"abc\""),
        (br#"{"timestamp": 5}"#, "neither"),
        (br#"{"hash_ids": [1, 2]}"#, "input_length"),
        (br#"{"input_length": 10, "hash_ids": [1, 2, 3, 4, 5, 6]}"#, "has 6 ids"),
        (br#"{"tokens": [1, -2]}"#, "-2"),
        (br#"{"tokens": [4294967296]}"#, "4294967296"),
        (br#"{"input_length": 1e30, "hash_ids": []}"#, "found the number 1e30"),
        (
            br#"{"input_length": 18446744073709551616, "hash_ids": []}"#,
            "expected an unsigned integer",
        ),
        (br#"{"tokens": [1], "hash_ids": [1], "input_length": 1}"#, "not both"),
        (b"{\"tokens\": [1, 2, 3, 4]}\xff\xfe", "trailing characters"),
        (b"[1, 2, 3]", "a record is a JSON object"),
        (br#"{"tokens": [1, 2"#, "found the end of the text"),
        // A key of the other format, or a key given twice, is named.
        (br#"{"tokens": [1], "input_length": 1}"#, "\"input_length\""),
        (br#"{"input_length": 4, "hash_ids": [1], "output_tokens": [1]}"#, "\"output_tokens\""),
        (br#"{"tokens": [1], "tokens": [2]}"#, "duplicate key \"tokens\""),
    ];
    let mut all: Vec<(Vec<u8>, &str)> = lines.iter().map(|&(l, m)| (l.to_vec(), m)).collect();
    all.push((huge, "line longer than"));
    all
}

fn write_trace(dir: &Path, name: &str, bad: Option<&[u8]>) -> std::path::PathBuf {
    let path = dir.join(name);
    let mut file = std::fs::File::create(&path).unwrap();
    writeln!(file, "{}", GOOD[0]).unwrap();
    if let Some(bad) = bad {
        file.write_all(bad).unwrap();
        file.write_all(b"\n").unwrap();
    }
    // Blank lines are not errors: they are skipped.
    writeln!(file, "\n   \n{}\n{}", GOOD[1], GOOD[2]).unwrap();
    path
}

#[test]
fn bad_trace_lines_name_file_and_line_and_skipping_them_changes_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let clean = write_trace(dir.path(), "clean.jsonl", None);
    let args = ["replay", "--block-size", "4", "--capacity", "2,inf", "--json"];
    let run = |path: &Path, extra: &[&str]| {
        let mut all: Vec<&str> = args.to_vec();
        all.push(path.to_str().unwrap());
        all.extend(extra);
        kvreuse(&all, b"")
    };
    let want = run(&clean, &[]);
    assert!(want.status.success(), "{}", String::from_utf8_lossy(&want.stderr));
    let want: serde_json::Value = serde_json::from_slice(&want.stdout).unwrap();
    assert_eq!(want["skipped_lines"], 0);
    for (i, (line, mention)) in trace_lines().into_iter().enumerate() {
        let path = write_trace(dir.path(), &format!("bad{i}.jsonl"), Some(&line));
        let out = run(&path, &[]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "line {i}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        // `file:line:column:` where the JSON went wrong, `file:line:` otherwise.
        let at = format!("{}:2:", path.display());
        assert!(
            stderr.contains(&at) && stderr.contains(mention),
            "{stderr:?} wants {at} {mention:?}"
        );
        let skipped = run(&path, &["--skip-invalid"]);
        assert!(skipped.status.success(), "{}", String::from_utf8_lossy(&skipped.stderr));
        let mut got: serde_json::Value = serde_json::from_slice(&skipped.stdout).unwrap();
        assert_eq!(got["skipped_lines"], 1);
        got["skipped_lines"] = 0.into();
        assert_eq!(
            got, want,
            "skipping line {i} must leave the other requests' results as they are"
        );
    }
}

// ---------------------------------------------------------------- files, pipes and limits

/// The cases below, for the catalogue's count.
const STREAMS: [&str; 11] = [
    "a byte order mark is skipped",
    "gzip without a .gz name is read",
    "timestamps going back are one warning",
    "an empty trace is a warning",
    "--plot naming an input trace",
    "--plot over an existing file, the replay failing",
    "a closed stdout",
    "an argument that is not UTF-8",
    "kvreuse hash given more than 256 MiB",
    "histories that cannot get their memory",
    "kv-cache-tester documents and JSONL traces in one run",
];

fn replay_json(args: &[&str]) -> (serde_json::Value, String) {
    let out = kvreuse(&[&["replay", "--json"], args].concat(), b"");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{args:?}: {stderr}");
    (serde_json::from_slice(&out.stdout).unwrap(), stderr)
}

/// A byte order mark, gzip behind another name, and timestamps going back are read as what
/// they are, with one warning for the last; an empty trace gives zeros and a warning.
#[test]
fn marks_gzip_backward_time_and_empty_traces_are_read_with_warnings() {
    let dir = tempfile::tempdir().unwrap();
    let plain = write_trace(dir.path(), "plain.jsonl", None);
    let text = std::fs::read(&plain).unwrap();
    let args = ["--block-size", "4", "--capacity", "2,inf"];
    let (want, _) = replay_json(&[&args[..], &[plain.to_str().unwrap()]].concat());

    let marked = dir.path().join("marked.jsonl");
    std::fs::write(&marked, [&b"\xEF\xBB\xBF"[..], &text].concat()).unwrap();
    let gzipped = dir.path().join("gzip-named.txt");
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&text).unwrap();
    std::fs::write(&gzipped, gz.finish().unwrap()).unwrap();
    // Each file's format is told from its first bytes, and said in one line.
    let told = |path: &Path| {
        format!("kvreuse: formats told from the files: mooncake ({})\n", path.display())
    };
    for path in [&marked, &gzipped] {
        let (got, stderr) = replay_json(&[&args[..], &[path.to_str().unwrap()]].concat());
        assert_eq!(got, want, "{}", path.display());
        assert_eq!(stderr, told(path));
    }

    // Timestamps 0, 9, 5: one step back, at line 3; the reach counts from the latest, 9 ms,
    // to the first request's 0.
    let backward = dir.path().join("backward.jsonl");
    std::fs::write(&backward, format!("{}\n{}\n{}\n", GOOD[0], GOOD[2], GOOD[1])).unwrap();
    let (got, stderr) = replay_json(&[&args[..], &[backward.to_str().unwrap()]].concat());
    assert_eq!(
        stderr,
        format!(
            "{}kvreuse: warning: {}: 1 record is stamped earlier than the record before (first \
             at line 3); the reach counts from the latest timestamp\n",
            told(&backward),
            backward.display()
        )
    );
    let inf = got["rows"].as_array().unwrap().iter().find(|r| r["policy"] == "inf").unwrap();
    assert_eq!(inf["reach_ms"], 9, "{got}");

    let empty = dir.path().join("empty.jsonl");
    std::fs::write(&empty, b"\n\n").unwrap();
    let (got, stderr) = replay_json(&[empty.to_str().unwrap()]);
    assert_eq!(got["requests"], 0);
    assert!(stderr.contains("warning: the trace holds no requests"), "{stderr}");
}

/// `--plot` is checked before any work: never an input trace, and an existing file is replaced
/// only by a complete plot.
#[test]
fn plot_files_are_checked_before_the_replay_and_replaced_only_whole() {
    let dir = tempfile::tempdir().unwrap();
    let trace = write_trace(dir.path(), "trace.jsonl", None);
    let before = std::fs::read(&trace).unwrap();
    let relative = dir.path().join(".").join("trace.jsonl");
    let out = kvreuse(
        &[
            "replay",
            "--block-size",
            "4",
            trace.to_str().unwrap(),
            "--plot",
            relative.to_str().unwrap(),
        ],
        b"",
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("is the input trace"), "{stderr}");
    assert_eq!(std::fs::read(&trace).unwrap(), before, "the trace is untouched");

    let plot = dir.path().join("reuse.svg");
    std::fs::write(&plot, b"an earlier plot").unwrap();
    let bad = write_trace(dir.path(), "bad.jsonl", Some(b"not json"));
    let out = kvreuse(
        &["replay", "--block-size", "4", bad.to_str().unwrap(), "--plot", plot.to_str().unwrap()],
        b"",
    );
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(std::fs::read(&plot).unwrap(), b"an earlier plot", "a failed run leaves it");
    let out = kvreuse(
        &["replay", "--block-size", "4", trace.to_str().unwrap(), "--plot", plot.to_str().unwrap()],
        b"",
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(std::fs::read(&plot).unwrap().starts_with(b"<svg"), "a complete run replaces it");
    let leftovers = std::fs::read_dir(dir.path())
        .unwrap()
        .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().starts_with(".kvreuse-"));
    assert_eq!(leftovers.count(), 0, "no temporary file is left behind");
}

/// A file that an input directory holds is an input too: `--plot` refuses it.
#[test]
fn a_plot_never_replaces_a_file_of_an_input_directory() {
    let dir = tempfile::tempdir().unwrap();
    let trace = write_trace(dir.path(), "a.json", None);
    let before = std::fs::read(&trace).unwrap();
    for command in ["replay", "fleet"] {
        let out = kvreuse(
            &[
                command,
                "--block-size",
                "4",
                dir.path().to_str().unwrap(),
                "--plot",
                trace.to_str().unwrap(),
            ],
            b"",
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{command}: {stderr}");
        assert!(stderr.contains("is the input trace"), "{command}: {stderr}");
        assert_eq!(std::fs::read(&trace).unwrap(), before, "{command}: the trace is untouched");
    }
}

/// A plot gets the permissions of the file it replaces, or a new file's (not a temporary
/// file's owner-only ones).
#[cfg(unix)]
#[test]
fn a_plot_has_the_permissions_a_written_file_has() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let trace = write_trace(dir.path(), "trace.jsonl", None);
    let mode =
        |path: &std::path::Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
    // A new file: what the umask leaves of rw-rw-rw-, as for the file this test wrote.
    let plot = dir.path().join("new.svg");
    let args = |plot: &std::path::Path| {
        ["replay", "--block-size", "4", trace.to_str().unwrap(), "--plot", plot.to_str().unwrap()]
            .map(str::to_string)
    };
    let run = |plot: &std::path::Path| {
        let args = args(plot);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = kvreuse(&args, b"");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    };
    run(&plot);
    assert_eq!(mode(&plot), mode(&trace));
    // An existing file keeps its own.
    for wanted in [0o640, 0o604] {
        std::fs::set_permissions(&plot, std::fs::Permissions::from_mode(wanted)).unwrap();
        run(&plot);
        assert_eq!(mode(&plot), wanted);
    }
}

/// `kvreuse replay | head -1`: a reader that goes away is not a failure.
#[test]
fn a_closed_stdout_ends_quietly() {
    let mut child = kvreuse_tests::support::target_command(env!("CARGO_BIN_EXE_kvreuse"))
        .args(["replay", "--capacity", "1k"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("error"), "{stderr}");
}

/// A flag's value that is not UTF-8 names the flag.
#[test]
fn an_argument_that_is_not_utf8_names_its_flag() {
    use std::os::unix::ffi::OsStrExt;
    let bad = std::ffi::OsStr::from_bytes(b"10\xffk");
    let out = kvreuse_tests::support::target_command(env!("CARGO_BIN_EXE_kvreuse"))
        .args(["replay".as_ref(), "--capacity".as_ref(), bad])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("--capacity") && stderr.contains("not valid UTF-8"), "{stderr}");
}

/// `kvreuse hash < /dev/zero` stops at its bound instead of growing without one.
#[test]
fn hash_reads_at_most_its_bound_from_stdin() {
    let mut child = kvreuse_tests::support::target_command(env!("CARGO_BIN_EXE_kvreuse"))
        .args(["hash", "--block-size", "4"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        let block = vec![b' '; 1 << 20];
        // The tool stops reading past its bound; the pipe then breaks, which is expected.
        for _ in 0..300 {
            if stdin.write_all(&block).is_err() {
                break;
            }
        }
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("more than 256 MiB"), "{stderr}");
}

/// Histories whose memory the allocator refuses are an error naming the size and the setting
/// that asked for it, not an abort. (A cap on the process's address space makes the
/// allocator refuse; `prlimit` is util-linux's.)
#[test]
fn histories_that_cannot_get_their_memory_are_a_named_error() {
    if std::env::consts::ARCH != "x86_64"
        || Command::new("prlimit").arg("--version").output().is_err()
    {
        eprintln!("skipped: needs prlimit on x86_64");
        return;
    }
    let capacities: Vec<String> = (1..=4000).map(|c| (c * 10).to_string()).collect();
    let out = Command::new("prlimit")
        .arg(format!("--as={}", 768u64 << 20))
        .arg(env!("CARGO_BIN_EXE_kvreuse"))
        .args(["replay", "--policy", "lru", "--capacity", &capacities.join(",")])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(out.stdout.is_empty());
    assert!(stderr.contains("out of memory") && stderr.contains("4000 LRU"), "{stderr}");
    assert!(stderr.contains("bytes asked for"), "{stderr}");
}

// ---------------------------------------------------------------- kv-cache-tester documents

/// (a document, extra flags, what the error names after the file's name).
const DOCUMENTS: [(&str, &[&str], &str); 7] = [
    (r#"{"id": "a", "block_size": 64}"#, &[], "requests: missing"),
    (
        r#"{"id": "a", "requests": [{"t": 0, "in": 64, "hash_ids": [1]}, {"t": 1, "in": 130, "hash_ids": [1, 2, 3]}]}"#,
        &[],
        "requests[1].hash_ids: has 3 ids, but `in` (130 tokens) holds only 2 complete blocks of 64",
    ),
    (
        r#"{"id": "a", "requests": [{"t": -2.5, "in": 64, "hash_ids": [1]}]}"#,
        &[],
        "requests[0].t: expected a non-negative number",
    ),
    (
        r#"{"id": "a", "requests": [{"t": 9, "type": "subagent", "duration_ms": 5, "requests": [{"t": 0, "in": 10, "hash_ids": [1]}]}]}"#,
        &[],
        "requests[0].requests[0].hash_ids: has 1 ids",
    ),
    (
        r#"{"id": "a", "block_size": 64, "requests": []}"#,
        &["--block-size", "16"],
        "block_size: is 64, but the replay's block size is 16",
    ),
    (r#"{"id": "a", "hash_id_scope": "team", "requests": []}"#, &[], "hash_id_scope: is \"team\""),
    (
        r#"{"id": "a", "requests": [{"t": 0, "in": 64, "hash_ids": [1]}]"#,
        &[],
        "document: ends too early",
    ),
];

#[test]
fn bad_documents_name_the_file_and_the_json_path_and_mixing_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    for (i, (document, extra, mention)) in DOCUMENTS.iter().enumerate() {
        let path = dir.path().join(format!("doc{i}.json"));
        std::fs::write(&path, document).unwrap();
        let args =
            [&["replay", "--format", "kvcache-tester", path.to_str().unwrap()][..], extra].concat();
        let out = kvreuse(&args, b"");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{document}: {stderr}");
        assert!(out.stdout.is_empty());
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        let want = format!("kvreuse: error: {}: {mention}", path.display());
        assert!(stderr.starts_with(&want), "{stderr:?} should start {want:?}");
    }
    // Documents replay as concurrent conversations, JSONL traces one after another: one run
    // does not take both.
    let document = dir.path().join("ok.json");
    std::fs::write(&document, r#"{"id": "ok", "requests": [{"t": 0, "in": 64, "hash_ids": [1]}]}"#)
        .unwrap();
    let jsonl = write_trace(dir.path(), "lines.jsonl", None);
    let out = kvreuse(&["replay", document.to_str().unwrap(), jsonl.to_str().unwrap()], b"");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("lines.jsonl: a mooncake trace among kv-cache-tester documents"),
        "{stderr}"
    );
    // And the other way round, a document after JSONL traces.
    let paths = [jsonl.to_str().unwrap(), document.to_str().unwrap()];
    let out = kvreuse(&["replay", "--block-size", "4", paths[0], paths[1]], b"");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("ok.json: a kv-cache-tester document after JSONL traces"), "{stderr}");
}

/// A trace read from a pipe, as standard input (`-`) or by a path that names one
/// (`/dev/stdin`, a shell's `<(...)`), can be read only once: its format is told from its
/// first bytes without losing them, and it replays exactly as the file does, block size and
/// all (a Bailian trace's 16).
#[test]
fn a_trace_from_a_pipe_replays_as_the_file_does() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bailian.jsonl");
    // Longer than the bytes read to tell the format, so that a lost head would show.
    let text: String = (0..400u64)
        .map(|k| {
            let ids: Vec<u64> = (0..1 + k % 5).map(|i| k / 3 * 10 + i).collect();
            format!(
                "{{\"chat_id\": {k}, \"parent_chat_id\": -1, \"timestamp\": {k}.5, \"input_length\": {}, \"output_length\": 7, \"type\": \"text\", \"turn\": 1, \"hash_ids\": {ids:?}}}\n",
                ids.len() * 16 - 3
            )
        })
        .collect();
    assert!(text.len() > 32 << 10);
    std::fs::write(&path, &text).unwrap();
    let args = ["replay", "--json", "--capacity", "50,inf"];
    let from_file = kvreuse(&[&args[..], &[path.to_str().unwrap()]].concat(), b"");
    assert!(from_file.status.success(), "{}", String::from_utf8_lossy(&from_file.stderr));
    let report: serde_json::Value = serde_json::from_slice(&from_file.stdout).unwrap();
    assert_eq!((report["requests"].as_u64(), report["block_size"].as_u64()), (Some(400), Some(16)));
    for name in ["-", "/dev/stdin"] {
        let out = kvreuse(&[&args[..], &[name]].concat(), text.as_bytes());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{name}: {stderr}");
        assert_eq!(out.stdout, from_file.stdout, "{name}: {stderr}");
    }
    // A warm-up given as a share of the requests needs their number, which a pipe cannot
    // give: refused before anything is read from it (the pipe stays open and empty here).
    let mut child = kvreuse_tests::support::target_command(env!("CARGO_BIN_EXE_kvreuse"))
        .args(["replay", "--warmup", "0.5", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let waited = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if waited.elapsed() > std::time::Duration::from_secs(30) {
            child.kill().unwrap();
            panic!("kvreuse waited for the pipe before refusing a warm-up share");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("give --warmup-requests N instead"), "{stderr}");
    // A file that does not exist is no pipe: opening it says what is wrong.
    let missing = dir.path().join("missing.jsonl");
    let out = kvreuse(&["replay", "--warmup", "0.5", missing.to_str().unwrap()], b"");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("No such file") && !stderr.contains("pipe"), "{stderr}");
}

// ---------------------------------------------------------------- peer messages

/// A bad message and a test of the error it must get.
type BadMessage = (Vec<u8>, fn(&MessageError) -> bool);

fn messages() -> Vec<BadMessage> {
    let mut good = Vec::new();
    message::encode_into(1, 2, &[3, 4, 5], None, &mut good).unwrap();
    let with = |at: usize, byte: u8| {
        let mut b = good.clone();
        b[at] = byte;
        b
    };
    vec![
        (good[..12].to_vec(), |e| matches!(e, MessageError::Truncated { .. })),
        (with(0, b'X'), |e| matches!(e, MessageError::BadMagic)),
        (with(4, 9), |e| matches!(e, MessageError::UnsupportedVersion(9))),
        (with(5, 4), |e| matches!(e, MessageError::UnknownFlags(4))),
        (good[..good.len() - 3].to_vec(), |e| matches!(e, MessageError::LengthMismatch { .. })),
        (with(7, 0x7f), |e| e.is_oversized()),
        (vec![0; message::MAX_MESSAGE_BYTES + 1], |e| e.is_oversized()),
        (signed(&[3, 4, 5]), |e| matches!(e, MessageError::Signed)),
    ]
}

/// A message signed with a key the receiver does not have.
fn signed(ids: &[u64]) -> Vec<u8> {
    let key = message::SyncKey::from_bytes(&[9; 32]).unwrap();
    let mut bytes = Vec::new();
    message::encode_into(1, 2, ids, Some(&key), &mut bytes).unwrap();
    bytes
}

#[test]
fn bad_peer_messages_are_named_errors() {
    for (bytes, expected) in messages() {
        let err = message::decode(&bytes, None).unwrap_err();
        assert!(expected(&err), "{err:?}");
        assert!(!err.to_string().is_empty());
    }
    // That each is counted and changes no history is sync_nats.rs's
    // bad_own_and_foreign_messages_are_ignored_and_counted, against a real server.
}

// ---------------------------------------------------------------- snapshot files

fn snapshots(dir: &Path) -> Vec<(std::path::PathBuf, &'static str)> {
    let source = SharedHistory::with_capacity(50).unwrap();
    source.insert_all(&(100..140).collect::<Vec<u64>>());
    let good = dir.join("good");
    source.save_in_domain(&good, 77).unwrap();
    let bytes = std::fs::read(&good).unwrap();
    let file = |name: &str, contents: &[u8]| {
        let path = dir.join(name);
        std::fs::write(&path, contents).unwrap();
        path
    };
    let mut flipped = bytes.clone();
    flipped[100] ^= 4;
    let mut absurd = bytes.clone();
    absurd[24..32].copy_from_slice(&u64::MAX.to_le_bytes());
    let mut version = bytes.clone();
    version[8] = 3;
    vec![
        (file("empty", b""), "truncated"),
        (file("truncated", &bytes[..bytes.len() - 11]), "truncated or damaged"),
        (file("magic", b"PK\x03\x04 this is a zip file, not a snapshot at all"), "bad magic"),
        (file("version", &version), "unsupported snapshot version"),
        (file("flipped", &flipped), "checksum mismatch"),
        (file("absurd", &absurd), "truncated or damaged"),
        (dir.to_path_buf(), "directory"),
        (good, "domain"),
    ]
}

#[test]
fn bad_snapshot_files_are_rejected_and_leave_the_history_alone() {
    let dir = tempfile::tempdir().unwrap();
    for (path, mention) in snapshots(dir.path()) {
        let history = SharedHistory::with_capacity(10).unwrap();
        history.insert_all(&[1, 2, 3]);
        let err = history.load_in_domain(&path, 78).unwrap_err();
        let message = err.to_string();
        assert!(
            matches!(
                err,
                Error::Snapshot { .. } | Error::Io { .. } | Error::ForeignSnapshot { .. }
            ),
            "{err:?}"
        );
        assert!(message.to_lowercase().contains(mention), "{message:?} should say {mention:?}");
        assert_eq!(history.oldest_first(), [1, 2, 3], "{}", path.display());
    }
}

#[test]
fn catalogue_size() {
    let dir = tempfile::tempdir().unwrap();
    let total = ENVIRONMENT.len()
        + COMMAND_LINE.len()
        + SETUP_MISTAKES.len()
        + FLEET_SETUP_MISTAKES.len()
        + STREAMS.len()
        + DOCUMENTS.len()
        + trace_lines().len()
        + messages().len()
        + snapshots(dir.path()).len();
    eprintln!("bad-input catalogue: {total} inputs");
    assert!(total >= 40, "{total}");
}

/// Settings that could change nothing say so: a warm-up that takes every request, a stagger
/// with no kv-cache-tester document to space out.
#[test]
fn a_warmup_of_every_request_and_a_stagger_without_documents_are_warned_of() {
    let dir = tempfile::tempdir().unwrap();
    let trace = write_trace(dir.path(), "trace.jsonl", None);
    let trace = trace.to_str().unwrap();
    for (command, extra, warning) in [
        ("replay", ["--warmup-requests", "3"], "the warm-up takes all 3 requests"),
        ("fleet", ["--warmup-requests", "10"], "the warm-up takes all 3 requests"),
        ("replay", ["--stagger", "5"], "--stagger spaces kv-cache-tester documents' starts"),
    ] {
        let out = kvreuse(&[&[command, "--block-size", "4", trace][..], &extra[..]].concat(), b"");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{command} {extra:?}: {stderr}");
        assert!(stderr.contains(warning), "{command} {extra:?}: {stderr}");
    }
    let out = kvreuse(&["replay", "--block-size", "4", trace, "--warmup-requests", "2"], b"");
    assert!(!String::from_utf8_lossy(&out.stderr).contains("warning"), "one request counted");
}

/// A setting that the other settings leave nothing to act on is an error: a speedup with
/// instant timing, capacities with only the unbounded history.
#[test]
fn settings_with_nothing_to_act_on_are_refused() {
    for (args, needle) in [
        (
            &["fleet", "--timing", "instant", "--speedup", "100"][..],
            "--speedup: applies to mocker timing only",
        ),
        (
            &["replay", "--policy", "inf", "--capacity", "1k,10k"],
            "--capacity: needs a fifo or lru policy",
        ),
    ] {
        let out = kvreuse(args, b"");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
    }
    // Each alone, or with what it acts on, is fine.
    for args in [
        &["fleet", "--timing", "instant", "--workers", "2", "--worker-capacity", "100"][..],
        &["replay", "--policy", "inf"],
        &["replay", "--policy", "fifo,inf", "--capacity", "1k"],
    ] {
        let out = kvreuse(args, b"");
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    // The defaults the help gives are the shared setup's.
    let help = kvreuse(&["replay", "--help"], b"");
    let help = String::from_utf8_lossy(&help.stdout);
    let default = kvreuse::core::setup::ReplaySettings::DEFAULT_CAPACITIES;
    assert!(help.contains(&format!("[default: {default}]")), "{help}");
}
