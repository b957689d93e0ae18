//! The public trace formats end to end: the same requests written as Mooncake, Bailian and
//! kv-cache-tester records replay to the same rows, and the bundled kv-cache-tester samples
//! replay as concurrent conversations in the order a plain model of the format gives.

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::Path;
use std::process::Output;

use serde_json::{Value, json};

fn kvreuse(args: &[&str]) -> Output {
    kvreuse_tests::support::target_command(env!("CARGO_BIN_EXE_kvreuse"))
        .args(args)
        .output()
        .unwrap()
}

fn replay(args: &[&str]) -> (Value, String) {
    let out = kvreuse(&[&["replay", "--json"], args].concat());
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{args:?}: {stderr}");
    (serde_json::from_slice(&out.stdout).unwrap(), stderr)
}

/// Requests of a few conversations, each growing its prompt turn by turn (prefix-chained ids),
/// some prompts ending in a partial block when `partial`.
fn requests(partial: bool) -> Vec<(u64, u64, Vec<u64>)> {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = move |n: u64| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state % n
    };
    let mut conversations: Vec<Vec<u64>> = vec![Vec::new(); 5];
    let mut fresh = 1000;
    (0..60u64)
        .map(|k| {
            let c = &mut conversations[next(5) as usize];
            for _ in 0..1 + next(4) {
                fresh += 1;
                c.push(fresh);
            }
            let blocks = c.len() as u64;
            let tokens = if partial { blocks * 16 - next(16) } else { blocks * 16 };
            (k * 1000 + next(1000) / 500 * 500, tokens, c.clone())
        })
        .collect()
}

#[test]
fn the_same_requests_in_every_format_replay_to_the_same_rows() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: String| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    };
    let rows = |path: &Path, extra: &[&str]| {
        let args = [&[path.to_str().unwrap(), "--capacity", "8,30,inf"][..], extra].concat();
        let (report, _) = replay(&args);
        assert_eq!(report["block_size"], 16, "{}", path.display());
        (report["requests"].clone(), report["rows"].clone())
    };
    for partial in [false, true] {
        let requests = requests(partial);
        let mooncake: String = requests
            .iter()
            .map(|(ms, tokens, ids)| {
                let record = json!({"timestamp": ms, "input_length": tokens, "output_length": 7, "hash_ids": ids});
                format!("{record}\n")
            })
            .collect();
        let bailian: String = requests
            .iter()
            .enumerate()
            .map(|(k, (ms, tokens, ids))| {
                // Seconds, with the fraction as the published files write it.
                let seconds = format!("{}.{:03}", ms / 1000, ms % 1000);
                format!(
                    "{{\"chat_id\": {k}, \"parent_chat_id\": -1, \"timestamp\": {seconds}, \"input_length\": {tokens}, \"output_length\": 7, \"type\": \"text\", \"turn\": 1, \"hash_ids\": {}}}\n",
                    json!(ids)
                )
            })
            .collect();
        let mooncake = write("same.jsonl", mooncake);
        let bailian = write("same-bailian.jsonl", bailian);
        let want = rows(&mooncake, &["--block-size", "16"]);
        assert_eq!(rows(&bailian, &[]), want, "Bailian (its own block size, 16) as Mooncake");
        // An empty file first tells nothing: the Bailian file after it settles the block size.
        let empty = write("0-empty.jsonl", "\n".into());
        let args = [empty.to_str().unwrap(), bailian.to_str().unwrap(), "--capacity", "8,30,inf"];
        let (report, _) = replay(&args);
        assert_eq!(
            (report["requests"].clone(), report["rows"].clone()),
            want,
            "after a blank file"
        );
        if partial {
            continue;
        }
        // kv-cache-tester lists complete blocks only: representable when every prompt ends on a
        // block boundary. One conversation document, ids shared (`global`) as the others'.
        let document = json!({
            "id": "same", "block_size": 16, "hash_id_scope": "global",
            "requests": requests.iter().map(|(ms, tokens, ids)| json!({
                "t": *ms as f64 / 1000.0, "type": "n", "in": tokens, "out": 7, "hash_ids": ids,
            })).collect::<Vec<_>>(),
        });
        let kvct = write("same.json", document.to_string());
        assert_eq!(rows(&kvct, &[]), want, "kv-cache-tester as Mooncake");
    }
}

/// The bundled samples, by a plain model: every request (sub-agents' at the sub-agent's start,
/// `t - duration_ms`) on one clock, document k starting at k times the stagger; ids local to
/// each document; in time order, ties by document and then by place in it; FIFO of 300 ids
/// and the unbounded history, F1 = leading blocks seen before, 64 tokens each.
fn model(stagger_ms: u64) -> (u64, u64, u64) {
    /// One request on the shared clock: when, which document, its place there, tokens, ids.
    type Flat = (u64, usize, usize, u64, Vec<(usize, u64)>);
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../traces/kv-cache-tester");
    let mut files: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    let mut flat: Vec<Flat> = Vec::new();
    for (k, file) in files.iter().enumerate() {
        let doc: Value = serde_json::from_slice(&std::fs::read(file).unwrap()).unwrap();
        let start = k as u64 * stagger_ms;
        let ms = |v: &Value| (v.as_f64().unwrap() * 1000.0).round() as u64;
        let ids = |r: &Value| {
            r["hash_ids"].as_array().unwrap().iter().map(|i| (k, i.as_u64().unwrap())).collect()
        };
        for r in doc["requests"].as_array().unwrap() {
            if r["type"] == "subagent" {
                let begun = ms(&r["t"]) - r["duration_ms"].as_u64().map_or(0, |d| d);
                for q in r["requests"].as_array().unwrap() {
                    let order = flat.iter().filter(|f| f.1 == k).count();
                    flat.push((
                        start + begun + ms(&q["t"]),
                        k,
                        order,
                        q["in"].as_u64().unwrap(),
                        ids(q),
                    ));
                }
            } else {
                let order = flat.iter().filter(|f| f.1 == k).count();
                flat.push((start + ms(&r["t"]), k, order, r["in"].as_u64().unwrap(), ids(r)));
            }
        }
    }
    flat.sort_by_key(|f| (f.0, f.1, f.2));
    let (mut f0, mut fifo_f1, mut inf_f1) = (0, 0, 0);
    let mut seen = HashSet::new();
    let (mut fifo, mut queue) = (HashSet::new(), VecDeque::new());
    for (_, _, _, tokens, ids) in &flat {
        f0 += tokens;
        inf_f1 += 64 * ids.iter().take_while(|id| seen.contains(*id)).count() as u64;
        fifo_f1 += 64 * ids.iter().take_while(|id| fifo.contains(*id)).count() as u64;
        for id in ids {
            seen.insert(*id);
            if fifo.insert(*id) {
                queue.push_back(*id);
                if queue.len() > 300 {
                    fifo.remove(&queue.pop_front().unwrap());
                }
            }
        }
    }
    (f0, fifo_f1, inf_f1)
}

#[test]
fn kv_cache_tester_samples_replay_as_concurrent_conversations() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../traces/kv-cache-tester");
    let mut f1_by_stagger = HashMap::new();
    for stagger in [0u64, 60] {
        let (report, stderr) = replay(&[
            dir,
            "--capacity",
            "300,inf",
            "--policy",
            "fifo",
            "--stagger",
            &stagger.to_string(),
        ]);
        assert!(stderr.contains("kvcache-tester (3 files)"), "{stderr}");
        assert_eq!(report["requests"], 38);
        assert_eq!(report["block_size"], 64, "the documents' own");
        let (f0, fifo_f1, inf_f1) = model(stagger * 1000);
        let rows = report["rows"].as_array().unwrap();
        assert_eq!(f0, 2_340_618);
        for row in rows {
            let want = if row["policy"] == "inf" { inf_f1 } else { fifo_f1 };
            assert_eq!(
                (row["f0_tokens"].as_u64(), row["f1_tokens"].as_u64()),
                (Some(f0), Some(want)),
                "{row}"
            );
        }
        f1_by_stagger.insert(stagger, fifo_f1);
    }
    assert_ne!(
        f1_by_stagger[&0], f1_by_stagger[&60],
        "the stagger changes what a small history keeps"
    );
}
