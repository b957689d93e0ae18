"""The Python package against the command line, the golden vectors and its own contracts.

Run by scripts/test-python in a virtualenv with the package (built once, in release) and
pytest installed; KVREUSE_BIN names the `kvreuse` binary the rows are compared with.
"""

import gc
import json
import os
import subprocess
from pathlib import Path

import pytest

import kvreuse

ROOT = Path(__file__).resolve().parents[2]
TRACE = ROOT / "traces" / "mooncake_synthetic_trace.jsonl"
KVCT = ROOT / "traces" / "kv-cache-tester"
DATA = ROOT / "core" / "tests" / "data"
KVREUSE_BIN = os.environ.get("KVREUSE_BIN", str(ROOT / "target" / "release" / "kvreuse"))


def cli(*args):
    out = subprocess.run([KVREUSE_BIN, *args, "--json"], check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


# ---------------------------------------------------------------- block ids


def test_dynamo_golden_vectors():
    vectors = json.loads((DATA / "dynamo_block_hashes.json").read_text())["vectors"]
    assert len(vectors) >= 18
    for v in vectors:
        got = kvreuse.block_hashes(
            v["tokens"],
            v["block_size"],
            lora_name=v["lora_name"],
            cache_namespace=v["cache_namespace"],
            eagle=v["is_eagle"],
        )
        assert got == v["sequence_hashes"], v["name"]


def test_vllm_golden_vectors():
    data = json.loads((DATA / "vllm_block_hashes.json").read_text())
    tokens = data["tokens_first_48"]
    cases = {
        "vllm_sha256_cbor_seed42": {"scheme": "vllm-sha256-cbor", "hash_seed": "42"},
        "vllm_sha256_cbor_seed42_lora_Alice": {
            "scheme": "vllm-sha256-cbor",
            "hash_seed": "42",
            "lora_name": "Alice",
        },
        "vllm_sha256_cbor_seed42_cache_salt_s1": {
            "scheme": "vllm-sha256-cbor",
            "hash_seed": "42",
            "cache_salt": "s1",
        },
        "vllm_xxhash_cbor_seed42": {"scheme": "vllm-xxhash-cbor", "hash_seed": "42"},
        "vllm_sha256_cbor_default_seed_vllm-none-hash": {"scheme": "vllm-sha256-cbor"},
    }
    for name, options in cases.items():
        want = [entry[1] for entry in data["chains"][name][1:]]
        assert kvreuse.block_hashes(tokens, 16, **options) == want, name


def test_block_hash_mistakes_are_value_errors():
    with pytest.raises(ValueError, match="block size must be at least 1"):
        kvreuse.block_hashes([1, 2], 0)
    with pytest.raises(ValueError, match="unknown scheme"):
        kvreuse.block_hashes([1, 2], 2, scheme="sha1")
    with pytest.raises(ValueError, match="hash_seed applies to the vLLM schemes only"):
        kvreuse.block_hashes([1, 2], 2, hash_seed="42")
    # Settings under which no vLLM publishes the ids.
    with pytest.raises(ValueError, match="PYTHONHASHSEED"):
        kvreuse.block_hashes([1, 2], 2, scheme="vllm-xxhash-cbor")
    with pytest.raises(ValueError, match="integer id"):
        kvreuse.block_hashes([1, 2], 2, scheme="vllm-legacy-sha256-cbor-64bit", lora_name="a")
    with pytest.raises(OverflowError):
        kvreuse.block_hashes([-1], 2)


# ---------------------------------------------------------------- history


def test_history_is_a_bounded_fifo():
    history = kvreuse.History(4)
    assert (len(history), history.capacity) == (0, 4)
    assert history.insert_all([1, 2, 3]) == 0
    assert history.seen_prefix_len([1, 2, 9, 3]) == 2
    assert history.insert_all([4, 5]) == 1
    assert 1 not in history and 5 in history
    assert kvreuse.History("256KiB").heap_bytes <= 256 * 1024
    with pytest.raises(ValueError, match='capacity: "0": a capacity must be positive'):
        kvreuse.History(0)


# ---------------------------------------------------------------- replay and fleet


def test_replay_rows_equal_the_command_lines():
    want = cli("replay", str(TRACE), "--capacity", "1k,10k,256KiB,inf", "--policy", "fifo,lru",
               "--warmup", "0.25")
    got = kvreuse.replay(TRACE, capacities=[1000, "10k", "256KiB", "inf"], policies="fifo,lru",
                         warmup=0.25)
    assert got == want["rows"]
    # The defaults are the command line's, and no trace is the bundled one.
    assert kvreuse.replay() == cli("replay")["rows"]


def test_replay_reads_every_format_and_directories():
    want = cli("replay", str(KVCT), "--stagger", "60")
    assert kvreuse.replay(KVCT, stagger=60) == want["rows"]
    assert kvreuse.replay([str(TRACE), TRACE], capacities="1k")[0]["f0_tokens"] == 2 * 61194628


def test_fleet_rows_equal_the_command_lines():
    args = ["--workers", "2,4", "--worker-capacity", "1k", "--router", "round-robin,kv,session",
            "--speedup", "100", "--seed", "3"]
    want = cli("fleet", str(TRACE), *args)
    got = kvreuse.fleet(TRACE, workers=[2, 4], worker_capacities="1k",
                        routers=["round-robin", "kv", "session"], speedup=100, seed=3)
    assert got == want["rows"]


def test_setting_mistakes_name_the_keyword():
    with pytest.raises(ValueError, match='capacities: "0": a capacity must be positive'):
        kvreuse.replay(TRACE, capacities="0")
    with pytest.raises(TypeError, match='policies: unknown policy "mru"'):
        kvreuse.replay(TRACE, policies=["fifo", "mru"])
    with pytest.raises(ValueError, match="warmup: 1.5 is not a fraction"):
        kvreuse.replay(TRACE, warmup=1.5)
    with pytest.raises(TypeError, match='routers: unknown router "best"'):
        kvreuse.fleet(TRACE, routers="best")
    with pytest.raises(ValueError, match="must divide the trace's block size"):
        kvreuse.fleet(TRACE, engine_block_size=100)
    with pytest.raises(OSError, match="no/such/trace"):
        kvreuse.replay("/no/such/trace.jsonl")
    with pytest.raises(OSError, match="no/such/trace"):
        kvreuse.replay("/no/such/trace.jsonl", warmup=0.5)
    for run in (kvreuse.replay, kvreuse.fleet):
        with pytest.raises(TypeError, match="warmup and warmup_requests exclude each other"):
            run(TRACE, warmup=0.25, warmup_requests=100)


def test_a_bad_line_names_file_and_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"timestamp": 0, "input_length": 4, "hash_ids": [1]}\n{"tokens": [1, -2]}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:2:\d+: "):
        kvreuse.replay(bad, block_size=4)
    rows = kvreuse.replay(bad, block_size=4, skip_invalid=True, capacities="10")
    assert rows[0]["f0_tokens"] == 4


# ---------------------------------------------------------------- guards and metrics


def metric(tracker, name, **labels):
    for family, _, _, samples in tracker.metric_families():
        if family == "dynamo_component_" + name:
            return sum(v for l, v in samples if all((k, x) in l for k, x in labels.items()))
    raise KeyError(name)


def test_guards_count_exactly_once():
    tracker = kvreuse.Tracker(4)
    prompt = list(range(12))
    with tracker.begin(prompt) as guard:
        guard.observe_output(0, [100, 101, 102, 103, 104])
        guard.observe_route(12, 8)
        guard.observe_worker(12, 4, cpu_hit_tokens=4, cpu_lookup_tokens=4)
    assert metric(tracker, "router_cache_loss_observations_total", result="complete") == 1
    second = tracker.begin(prompt)
    assert second.seen_tokens == 12
    second.complete()
    with pytest.raises(RuntimeError, match="already ended"):
        second.complete()
    # An exception inside `with` counts the request incomplete and propagates.
    with pytest.raises(KeyError):
        with tracker.begin(prompt) as guard:
            raise KeyError("the engine fell over")
    # A guard collected unfinished counts incomplete too.
    tracker.begin(prompt)
    gc.collect()
    assert metric(tracker, "router_cache_loss_observations_total", result="incomplete") == 2
    assert metric(tracker, "router_kv_funnel_observations_total", result="observed") == 1
    assert metric(tracker, "router_kv_funnel_observations_total", result="no_route") == 1
    assert metric(tracker, "router_kv_funnel_tokens_total", stage="f4") == 8
    assert metric(tracker, "router_kv_funnel_tokens_total", stage="f5") == 8


def test_worker_reports_are_parsed_and_checked():
    tracker = kvreuse.Tracker(4)
    guard = tracker.begin(list(range(8)))
    with pytest.raises(ValueError, match="reports a prompt of 9 tokens"):
        guard.observe_worker(9, 4)
    guard.incomplete()
    payload = '{"kv_cache_hit": {"complete": true, "prompt_tokens": 8, "gpu_hit_tokens": 4, ' \
              '"cpu_hit_tokens": 0, "cpu_lookup_tokens": 0}}'
    assert kvreuse.parse_worker_report(payload)["gpu_hit_tokens"] == 4
    assert kvreuse.parse_worker_report('{"kv_cache_hit": {"complete": false}}') is None
    usage = b'{"prompt_tokens": 8, "prompt_tokens_details": {"cached_tokens": 4}}'
    assert kvreuse.parse_worker_report(usage, "openai")["gpu_hit_tokens"] == 4
    with pytest.raises(ValueError, match="unreadable report"):
        kvreuse.parse_worker_report('{"cached_tokens": "4", "prompt_tokens": 8}', "sglang")


def test_prometheus_client_adapter():
    prometheus_client = pytest.importorskip("prometheus_client")
    import kvreuse.prometheus

    tracker = kvreuse.Tracker(4, const_labels={"router_id": "py"})
    registry = prometheus_client.CollectorRegistry()
    kvreuse.prometheus.register(tracker, registry)
    with tracker.begin(list(range(8))):
        pass
    with tracker.begin(list(range(8))):
        pass
    text = prometheus_client.generate_latest(registry).decode()
    assert 'dynamo_component_router_kv_history_cached_prefix_tokens_total{router_id="py"} 8.0' in text
    assert 'dynamo_component_router_cache_loss_observations_total{result="complete",router_id="py"} 2.0' in text
    assert "# TYPE dynamo_component_router_cache_loss_history_unique_hashes gauge" in text
    # Our own exposition says the same numbers.
    assert 'dynamo_component_router_kv_history_cached_prefix_tokens_total{router_id="py"} 8' in tracker.metrics_text()
