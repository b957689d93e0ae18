//! The JS `Fleet` against kvreuse-core's fleet engine run directly in the same test, and a
//! trace in chunks (several files, every format) against the same trace whole.

use crate::common::{Kind, get, get_u64, json, throws};
use js_sys::{Array, Uint8Array};
use kvreuse_core::fleet::{Fleet as Engine, FleetRow};
use kvreuse_core::setup::{FleetSettings, Setting};
use kvreuse_core::trace::{Request, parse_bailian_line, parse_line};
use kvreuse_wasm::{Fleet, Replay, footprint};
use wasm_bindgen::JsValue;
use wasm_bindgen_test::wasm_bindgen_test;

const SAMPLE: &str = include_str!("../../../traces/mooncake_synthetic_trace.jsonl");

/// The core engine's rows for `flags` (as the command line's), over `requests`, with the
/// first `measure_from` only warming up.
fn engine_rows(
    flags: &[(Setting, &str)],
    requests: &[Request],
    measure_from: usize,
) -> Vec<FleetRow> {
    let mut settings = FleetSettings::default();
    for (setting, text) in flags {
        settings.set(*setting, text).unwrap();
    }
    let mut config = settings.config(footprint::blocks).unwrap();
    config.measure_from = measure_from;
    let mut engine = Engine::new(&config).unwrap();
    requests.iter().for_each(|r| engine.push(r).unwrap());
    engine.finish().unwrap()
}

fn sample_requests() -> Vec<Request> {
    let hasher = kvreuse_core::chain::DynamoHasher::new(512).unwrap();
    SAMPLE.lines().filter_map(|l| parse_line(l.as_bytes(), &hasher).unwrap()).collect()
}

/// An optional number field: `null`, or the value.
#[track_caller]
fn assert_optional(got: &JsValue, key: &str, want: Option<f64>, what: &str) {
    let value = get(got, key);
    match want {
        Some(v) => assert_eq!(value.as_f64(), Some(v), "{what}: {key}"),
        None => assert!(value.is_null(), "{what}: {key} is {value:?}"),
    }
}

/// `results()` must hold exactly the core's rows, field by field.
#[track_caller]
fn assert_rows(results: &Array, want: &[FleetRow], context: &str) {
    assert_eq!(results.length() as usize, want.len(), "{context}: rows");
    for (got, want) in results.iter().zip(want) {
        let what =
            format!("{context}: {} x {} {}", want.workers, want.worker_capacity, want.router);
        assert_eq!(get_u64(&got, "workers"), want.workers as u64, "{what}");
        assert_eq!(get_u64(&got, "worker_capacity"), want.worker_capacity as u64, "{what}");
        assert_eq!(get(&got, "router").as_string().as_deref(), Some(want.router.as_str()));
        let f = &want.funnel;
        for (key, value) in [
            ("requests", want.requests),
            ("rejected_requests", want.rejected_requests),
            ("truncated_outputs", want.truncated_outputs),
            ("f0_tokens", f.f0),
            ("f1_tokens", f.f1),
            ("f2_tokens", f.f2),
            ("f3_tokens", f.f3),
            ("f4_tokens", f.f4),
            ("f5_tokens", f.f5),
            ("cold_tokens", f.cold),
            ("retention_tokens", f.retention),
            ("routing_tokens", f.routing),
            ("race_tokens", f.race),
            ("retrieval_tokens", f.retrieval),
            ("evictions", want.evictions),
        ] {
            assert_eq!(get_u64(&got, key), value, "{what}: {key}");
        }
        assert_optional(&got, "ttft_ms_p50", want.ttft_ms_p50, &what);
        assert_optional(&got, "ttft_ms_p99", want.ttft_ms_p99, &what);
        assert_optional(&got, "queue_ms_mean", want.queue_ms_mean, &what);
        let workers = Array::from(&get(&got, "per_worker"));
        assert_eq!(workers.length() as usize, want.per_worker.len(), "{what}");
        for (w, share) in workers.iter().zip(&want.per_worker) {
            assert_eq!(get_u64(&w, "requests"), share.requests, "{what}");
            assert_eq!(get_u64(&w, "prompt_tokens"), share.prompt_tokens, "{what}");
            assert_eq!(get_u64(&w, "reused_tokens"), share.reused_tokens, "{what}");
        }
    }
}

/// Runs the JS `Fleet` over the sample in slices of `slice` requests.
fn js_rows(options: &str, slice: usize) -> (Array, JsValue) {
    let mut fleet = Fleet::new(&JsValue::from_str(SAMPLE), &json(options)).unwrap();
    assert_eq!(fleet.requests(), Some(3993.0));
    let mut progress = 0.0;
    while !fleet.step(&JsValue::from(slice as f64)).unwrap() {
        assert!(fleet.progress() >= progress && fleet.progress() < 1.0);
        progress = fleet.progress();
    }
    assert_eq!((fleet.phase().as_str(), fleet.progress()), ("done", 1.0));
    assert_eq!(fleet.simulated(), 3993.0);
    (fleet.results().unwrap(), fleet.report().unwrap().into())
}

#[wasm_bindgen_test]
fn the_page_settings_give_the_engines_rows() {
    let requests = sample_requests();
    let want = engine_rows(
        &[
            (Setting::Workers, "4,8"),
            (Setting::WorkerCapacity, "2k,10k"),
            (Setting::Router, "round-robin,kv"),
            (Setting::Speedup, "1000"),
        ],
        &requests,
        0,
    );
    let options = r#"{"workers": "4,8", "workerCapacities": [2000, "10k"],
        "routers": ["round-robin", "kv"], "speedup": 1000}"#;
    let (rows, report) = js_rows(options, 500);
    assert_rows(&rows, &want, "page settings");
    assert_eq!(get_u64(&report, "requests"), 3993);
    assert_eq!(get_u64(&report, "engine_block_size"), 512);
    assert_eq!(get(&report, "timing").as_string().as_deref(), Some("mocker"));
    assert_eq!(get(&report, "speedup").as_f64(), Some(1000.0));
    assert_eq!(
        get_u64(&report, "history"),
        footprint::blocks(kvreuse_core::replay::Capacity::parse("256MiB").unwrap())
            .unwrap()
            .unwrap() as u64
    );
    assert_rows(&Array::from(&get(&report, "rows")), &want, "report");
}

#[wasm_bindgen_test]
fn instant_timing_other_routers_a_warmup_and_smaller_engine_blocks() {
    let requests = sample_requests();
    let want = engine_rows(
        &[
            (Setting::Workers, "3"),
            (Setting::WorkerCapacity, "1500"),
            (Setting::Router, "session,cache-aware,prefix-hash,kv:temperature=0.5"),
            (Setting::Timing, "instant"),
            (Setting::EngineBlockSize, "128"),
            (Setting::History, "20k"),
            (Setting::Seed, "7"),
        ],
        &requests,
        998,
    );
    let options = r#"{"workers": 3, "workerCapacities": 1500,
        "routers": "session,cache-aware,prefix-hash,kv:temperature=0.5", "timing": "instant",
        "engineBlockSize": 128, "history": "20k", "seed": 7, "warmup": 0.25}"#;
    let (rows, report) = js_rows(options, 1);
    assert_rows(&rows, &want, "instant");
    assert_eq!(get_u64(&report, "measured_requests"), 3993 - 998);
    assert!(get(&report, "speedup").is_null());
    assert_eq!(get_u64(&report, "history"), 20_000);
}

/// Hands `files` over in chunks of `chunk` bytes.
fn push_files<T>(
    run: &mut T,
    files: &[(&str, &[u8])],
    chunk: usize,
    begin: impl Fn(&mut T, &str),
    push: impl Fn(&mut T, &JsValue),
) {
    for (name, bytes) in files {
        begin(run, name);
        for piece in bytes.chunks(chunk) {
            push(run, &Uint8Array::from(piece).into());
        }
    }
}

#[wasm_bindgen_test]
fn chunks_give_what_the_whole_text_gives() {
    let cut = SAMPLE[SAMPLE.len() / 2..].find('\n').unwrap() + SAMPLE.len() / 2 + 1;
    let files: [(&str, &[u8]); 2] =
        [("a.jsonl", &SAMPLE.as_bytes()[..cut]), ("b.jsonl", &SAMPLE.as_bytes()[cut..])];
    let options = json(
        r#"{"workers": "2", "workerCapacities": "3k", "speedup": 100,
        "warmupRequests": 100}"#,
    );
    let mut whole = Fleet::new(&JsValue::from_str(SAMPLE), &options).unwrap();
    whole.step(&JsValue::UNDEFINED).unwrap();
    for chunk in [4096, 1 << 20] {
        let mut fleet = Fleet::new(&JsValue::NULL, &options).unwrap();
        push_files(
            &mut fleet,
            &files,
            chunk,
            |f, name| f.begin_file(name).unwrap(),
            |f, bytes| f.push(bytes).unwrap(),
        );
        assert_eq!(fleet.requests(), None, "not known before finish");
        fleet.finish().unwrap();
        assert_eq!(fleet.requests(), Some(3993.0));
        assert!(fleet.step(&JsValue::UNDEFINED).unwrap());
        let report = fleet.report().unwrap();
        assert_eq!(get_u64(&report, "warmup_requests"), 100);
        assert_eq!(
            js_sys::JSON::stringify(&report).unwrap(),
            js_sys::JSON::stringify(&whole.report().unwrap()).unwrap(),
            "chunks of {chunk}"
        );
        let files = Array::from(&fleet.files());
        assert_eq!(files.length(), 2);
        assert_eq!(get(&files.get(1), "format").as_string().as_deref(), Some("mooncake"));
    }

    let replay_options = json(r#"{"capacities": "1k,inf", "warmupRequests": 10}"#);
    let mut whole = Replay::new(&JsValue::from_str(SAMPLE), &replay_options).unwrap();
    whole.step(&JsValue::UNDEFINED).unwrap();
    let mut replay = Replay::new(&JsValue::NULL, &replay_options).unwrap();
    push_files(
        &mut replay,
        &files,
        777,
        |r, n| r.begin_file(n).unwrap(),
        |r, b| r.push(b).unwrap(),
    );
    replay.finish().unwrap();
    assert!(replay.step(&JsValue::UNDEFINED).unwrap());
    assert_eq!(
        js_sys::JSON::stringify(&replay.report().unwrap()).unwrap(),
        js_sys::JSON::stringify(&whole.report().unwrap()).unwrap()
    );
}

/// Two kv-cache-tester conversations, as their files hold them.
fn documents() -> [String; 2] {
    let doc = |id: &str, offset: u64| {
        let requests: Vec<String> = (0..20u64)
            .map(|i| {
                let ids: Vec<String> = (0..=i).map(|k| (offset + k).to_string()).collect();
                format!(
                    r#"{{"t":{}.5,"type":"n","in":{},"out":7,"hash_ids":[{}]}}"#,
                    3 * i,
                    64 * (i + 1) + 10,
                    ids.join(",")
                )
            })
            .collect();
        format!(
            r#"{{"id":"{id}","block_size":64,"hash_id_scope":"local","requests":[{}]}}"#,
            requests.join(",")
        )
    };
    [doc("one", 0), doc("two", 5)]
}

#[wasm_bindgen_test]
fn documents_and_bailian_records_in_chunks() {
    let [one, two] = documents();
    let options = json(r#"{"capacities": "10,inf", "policies": "fifo", "stagger": 1.5}"#);
    let mut replay = Replay::new(&JsValue::NULL, &options).unwrap();
    let files: [(&str, &[u8]); 2] = [("one.json", one.as_bytes()), ("two.json", two.as_bytes())];
    push_files(
        &mut replay,
        &files,
        100,
        |r, n| r.begin_file(n).unwrap(),
        |r, b| r.push(b).unwrap(),
    );
    assert_eq!(replay.replayed(), 0.0, "documents wait for finish");
    replay.finish().unwrap();
    assert!(!replay.step(&JsValue::from(5.0)).unwrap());
    assert!(replay.step(&JsValue::UNDEFINED).unwrap());
    let report = replay.report().unwrap();
    assert_eq!(get_u64(&report, "block_size"), 64, "the documents' own");
    assert_eq!(get_u64(&report, "requests"), 40);
    let inf = Array::from(&get(&report, "rows")).get(1);
    // Each request repeats the previous one's blocks and adds one: 19 x (1 + ... ) hits per
    // conversation, never across them (local ids).
    let hits: u64 = (1..20u64).map(|i| 64 * i).sum::<u64>() * 2;
    assert_eq!(get_u64(&inf, "f1_tokens"), hits);

    // A Bailian row: seconds as floats, 16-token blocks by default.
    let bailian = r#"{"chat_id": 1, "parent_chat_id": -1, "timestamp": 0.25, "input_length": 40, "output_length": 3, "type": "text", "turn": 1, "hash_ids": [7, 8, 9]}
{"chat_id": 2, "parent_chat_id": 1, "timestamp": 1.5, "input_length": 50, "output_length": 3, "type": "text", "turn": 2, "hash_ids": [7, 8, 9, 10]}"#;
    let want: Vec<Request> =
        bailian.lines().filter_map(|l| parse_bailian_line(l.as_bytes(), 16).unwrap()).collect();
    let flags = [(Setting::Workers, "2"), (Setting::Router, "session"), (Setting::BlockSize, "16")];
    let want = engine_rows(&flags, &want, 0);
    let mut fleet =
        Fleet::new(&JsValue::NULL, &json(r#"{"workers": 2, "routers": "session"}"#)).unwrap();
    fleet.push(&JsValue::from_str(bailian)).unwrap();
    fleet.finish().unwrap();
    assert!(fleet.step(&JsValue::UNDEFINED).unwrap());
    assert_rows(&fleet.results().unwrap(), &want, "bailian");
    let files = Array::from(&fleet.files());
    assert_eq!(get(&files.get(0), "format").as_string().as_deref(), Some("bailian"));
}

#[wasm_bindgen_test]
fn bad_fleet_options_and_input_throw_typed_errors() {
    let new = |options: &str| Fleet::new(&JsValue::from_str(SAMPLE), &json(options));
    throws(new(r#"{"worker": 4}"#), Kind::Type, "unknown option \"worker\"");
    throws(new(r#"{"workers": 0}"#), Kind::Range, "options.workers: ");
    throws(new(r#"{"workers": "four"}"#), Kind::Type, "options.workers: ");
    throws(new(r#"{"routers": "best"}"#), Kind::Type, "options.routers: ");
    throws(new(r#"{"routers": "kv:temperature=-1"}"#), Kind::Range, "options.routers: ");
    throws(new(r#"{"timing": "slow"}"#), Kind::Type, "options.timing: ");
    throws(new(r#"{"speedup": 0}"#), Kind::Range, "options.speedup: ");
    throws(new(r#"{"seed": 9007199254740992}"#), Kind::Range, "options.seed: ");
    throws(new(r#"{"engineBlockSize": 300}"#), Kind::Range, "options.engineBlockSize: ");
    throws(new(r#"{"workerCapacities": "4GiB"}"#), Kind::Type, "options.workerCapacities: ");
    throws(new(r#"{"warmup": 0.1, "warmupRequests": 4}"#), Kind::Type, "exclude each other");
    let mut chunked = Fleet::new(&JsValue::NULL, &json(r#"{"warmup": 0.5}"#)).unwrap();
    throws(chunked.push(&JsValue::from_str(SAMPLE)), Kind::Type, "warmupRequests");
    let mut whole = new("{}").unwrap();
    throws(whole.push(&JsValue::from_str("{}")), Kind::Type, "whole trace");
    let mut bad = Fleet::new(&JsValue::NULL, &JsValue::UNDEFINED).unwrap();
    bad.begin_file("x.jsonl").unwrap();
    let error = bad
        .push(&JsValue::from_str(
            "{\"timestamp\": 0, \"input_length\": 1, \"hash_ids\": [1]}\n{\"x\": 1}\n",
        ))
        .and_then(|()| bad.finish());
    throws(error, Kind::Type, "x.jsonl: line 2");
}
