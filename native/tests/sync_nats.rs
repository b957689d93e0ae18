//! Replica sync against a real `nats-server` (Debian's package; `./scripts/test` installs it),
//! started by each test on a free 127.0.0.1 port and stopped by it.
#![cfg(feature = "nats")]

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use kvreuse::core::chain::DynamoHasher;
use kvreuse::core::message::{self, Domain, SyncKey};
use kvreuse::sync::{Auth, ReplicaSyncConfig};
use kvreuse::{Config, ReplicaSync, Tracker};
use kvreuse_tests::support::{Captured, NatsServer as Nats};
use prometheus::Registry;

const BLOCK: usize = 16;

fn domain() -> Domain {
    Domain { model: "test-model".into(), block_size: BLOCK, eagle: false, scheme: "dynamo".into() }
}

/// Log lines of every test in this process (tagged with the replica name).
fn logs() -> &'static Captured {
    static LOGS: OnceLock<Captured> = OnceLock::new();
    LOGS.get_or_init(|| {
        let logs = Captured::default();
        let _ = tracing::subscriber::set_global_default(logs.subscriber());
        logs
    })
}

fn log_lines_containing(replica: &str, text: &str) -> usize {
    logs()
        .text()
        .lines()
        .filter(|l| l.contains(&format!("replica={replica}")) && l.contains(text))
        .count()
}

struct Replica {
    tracker: Tracker,
    sync: ReplicaSync,
    registry: Registry,
}

impl Replica {
    async fn start(sync: ReplicaSyncConfig, name: &str) -> Replica {
        logs();
        let registry = Registry::new();
        let config =
            Config::new(BLOCK).with_history_bytes(1 << 20).with_const_label("router_id", name);
        let tracker = Tracker::new(&config, &registry).unwrap();
        let sync =
            ReplicaSync::start(&tracker, sync.with_name(name), &config, &registry).await.unwrap();
        Replica { tracker, sync, registry }
    }

    async fn warm(sync: ReplicaSyncConfig, name: &str) -> Replica {
        let replica = Replica::start(sync, name).await;
        tokio::time::timeout(Duration::from_secs(20), replica.sync.warmed()).await.unwrap();
        replica
    }

    fn complete(&self, prompt: &[u32]) {
        self.tracker.begin(prompt).complete();
    }

    fn seen_blocks(&self, prompt: &[u32]) -> usize {
        let ids = DynamoHasher::new(BLOCK).unwrap().hash(prompt).sequence;
        self.tracker.history().unwrap().seen_prefix_len(&ids)
    }

    /// A counter's or gauge's value (the series with `label` if given).
    fn metric(&self, name: &str, label: Option<&str>) -> f64 {
        kvreuse_tests::support::metric(&self.registry, name, label)
    }

    fn received(&self, result: &str) -> f64 {
        self.metric("router_kv_history_sync_messages_total", Some(result))
    }
}

fn prompt(seed: u32) -> Vec<u32> {
    (0..64).map(|i| seed * 1000 + i).collect()
}

/// Polls `done` every 5 ms until it holds; returns how long that took, or panics after
/// `limit`.
async fn within(limit: Duration, what: &str, done: impl Fn() -> bool) -> Duration {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < limit, "{what}: not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    start.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_see_a_completion_within_a_second_and_a_fourth_catches_up() {
    let nats = Nats::start(&[]);
    let config = || ReplicaSyncConfig::new(nats.url(), domain());
    let a = Replica::warm(config(), "three-a").await;
    let b = Replica::warm(config(), "three-b").await;
    let c = Replica::warm(config(), "three-c").await;

    let p = prompt(1);
    a.complete(&p);
    let took = within(Duration::from_secs(1), "B and C see A's prompt", || {
        b.seen_blocks(&p) == 4 && c.seen_blocks(&p) == 4
    })
    .await;
    eprintln!("A's completion reached B and C in {took:?}");
    within(Duration::from_secs(2), "A counts its own message", || a.received("own") >= 1.0).await;
    assert!(b.received("applied") >= 1.0 && c.received("applied") >= 1.0);

    // F1 > 0 on B for a request it never saw before.
    let guard = b.tracker.begin(&p);
    assert_eq!(guard.seen_tokens(), 64);
    guard.complete();

    // More history, spread over the replicas, then a replica that starts late.
    let prompts: Vec<Vec<u32>> = (10..40).map(prompt).collect();
    for (i, p) in prompts.iter().enumerate() {
        [&a, &b, &c][i % 3].complete(p);
    }
    within(Duration::from_secs(5), "every replica sees every prompt", || {
        prompts.iter().all(|p| [&a, &b, &c].iter().all(|r| r.seen_blocks(p) == 4))
    })
    .await;
    let d = Replica::start(config(), "three-d").await;
    assert!(d.metric("router_kv_history_sync_warming", None) == 1.0 || !d.sync.is_warming());
    tokio::time::timeout(Duration::from_secs(20), d.sync.warmed()).await.unwrap();
    assert_eq!(d.metric("router_kv_history_sync_warming", None), 0.0);
    for p in prompts.iter().chain([&p]) {
        assert_eq!(d.seen_blocks(p), a.seen_blocks(p), "D caught up on {:?}", &p[..2]);
        assert_eq!(d.seen_blocks(p), 4);
    }
    assert!(d.received("applied") >= 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_outage_costs_requests_nothing_and_sync_resumes() {
    let mut nats = Nats::start(&[]);
    let config = || ReplicaSyncConfig::new(nats.url(), domain());
    let a = Replica::warm(config(), "outage-a").await;
    let b = Replica::warm(config(), "outage-b").await;

    let timed = |seed: u32| {
        let mut took: Vec<Duration> = (0..400)
            .map(|i| {
                let p = prompt(seed + i);
                let start = Instant::now();
                a.complete(&p);
                start.elapsed()
            })
            .collect();
        took.sort();
        took[took.len() / 2]
    };
    let connected = timed(100_000);
    nats.kill();
    within(Duration::from_secs(10), "A notices the outage", || !a.sync.is_connected()).await;
    let down = timed(200_000);
    eprintln!("median begin+complete: {connected:?} connected, {down:?} during the outage");
    assert!(
        down <= connected * 2 + Duration::from_micros(20),
        "requests slowed by the outage: {down:?} vs {connected:?}"
    );
    within(Duration::from_secs(2), "dropped ids are counted", || {
        a.metric("router_kv_history_sync_dropped_ids_total", Some("disconnected")) > 0.0
    })
    .await;
    assert_eq!(
        log_lines_containing("outage-a", "lost the connection"),
        1,
        "one warning per outage"
    );

    nats.run();
    within(Duration::from_secs(15), "both reconnect", || {
        a.sync.is_connected() && b.sync.is_connected()
    })
    .await;
    let p = prompt(7);
    a.complete(&p);
    within(Duration::from_secs(2), "sync resumes", || b.seen_blocks(&p) == 4).await;
    assert_eq!(log_lines_containing("outage-a", "connection to NATS is back"), 1);
    assert_eq!(a.metric("router_kv_history_sync_connected", None), 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyed_replicas_sync_signed_and_refuse_unsigned_or_forged_messages() {
    let nats = Nats::start(&[]);
    let key = SyncKey::parse(&"5a".repeat(32)).unwrap();
    let keyed = || ReplicaSyncConfig::new(nats.url(), domain()).with_key(key.clone());
    let a = Replica::warm(keyed(), "key-a").await;
    let b = Replica::warm(keyed(), "key-b").await;
    let plain = Replica::warm(ReplicaSyncConfig::new(nats.url(), domain()), "key-plain").await;

    let p = prompt(70);
    a.complete(&p);
    within(Duration::from_secs(2), "B sees A's signed completion", || b.seen_blocks(&p) == 4).await;
    within(Duration::from_secs(2), "the unkeyed replica refuses it", || {
        plain.received("signed") >= 1.0
    })
    .await;
    assert_eq!(plain.seen_blocks(&p), 0);

    let q = prompt(71);
    plain.complete(&q);
    within(Duration::from_secs(2), "keyed replicas refuse the unsigned message", || {
        a.received("unsigned") >= 1.0 && b.received("unsigned") >= 1.0
    })
    .await;
    assert_eq!((a.seen_blocks(&q), b.seen_blocks(&q)), (0, 0));

    // A publisher with another key: its ids never reach a history.
    let other = SyncKey::from_bytes(&[1; 32]).unwrap();
    let mut forged = Vec::new();
    message::encode_into(5, domain().digest(), &[91, 92], Some(&other), &mut forged).unwrap();
    let peer = async_nats::connect(nats.url()).await.unwrap();
    peer.publish(a.sync.subject().to_string(), forged.into()).await.unwrap();
    peer.flush().await.unwrap();
    within(Duration::from_secs(2), "the forgery is counted", || a.received("bad_signature") >= 1.0)
        .await;
    assert!(!a.tracker.history().unwrap().contains(91));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_queue_drops_and_counts_instead_of_waiting() {
    let nats = Nats::start(&[]);
    let slow = ReplicaSyncConfig::new(nats.url(), domain())
        .with_queue(1)
        .with_linger(Duration::from_millis(500));
    let a = Replica::warm(slow, "queue-a").await;
    let start = Instant::now();
    for i in 0..50 {
        a.complete(&prompt(i));
    }
    assert!(start.elapsed() < Duration::from_millis(400), "completions waited for the queue");
    let dropped = a.metric("router_kv_history_sync_dropped_ids_total", Some("queue_full"));
    assert!(dropped >= 4.0 * 45.0, "{dropped} ids dropped");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_protected_server_refuses_ids_from_clients_without_it() {
    let nats = Nats::start(&["--auth", "s3cret"]);
    let with_token =
        || ReplicaSyncConfig::new(nats.url(), domain()).with_auth(Auth::Token("s3cret".into()));
    let r = Replica::warm(with_token(), "token-r").await;
    let ids = [11u64, 12, 13];
    let mut bytes = Vec::new();
    message::encode_into(0xbad, domain().digest(), &ids, None, &mut bytes).unwrap();

    let intruder = async_nats::ConnectOptions::new().connect(nats.url()).await;
    assert!(intruder.is_err(), "a client without the token must not connect");
    let wrong = async_nats::ConnectOptions::with_token("guess".into()).connect(nats.url()).await;
    assert!(wrong.is_err(), "nor one with a wrong token");

    let peer =
        async_nats::ConnectOptions::with_token("s3cret".into()).connect(nats.url()).await.unwrap();
    peer.publish(r.sync.subject().to_string(), bytes.into()).await.unwrap();
    peer.flush().await.unwrap();
    let history = r.tracker.history().unwrap();
    within(Duration::from_secs(2), "the token holder's ids arrive", || history.contains(13)).await;
    assert_eq!(history.seen_prefix_len(&ids), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_own_and_foreign_messages_are_ignored_and_counted() {
    let nats = Nats::start(&[]);
    let r = Replica::warm(ReplicaSyncConfig::new(nats.url(), domain()), "bad-r").await;
    let peer = async_nats::connect(nats.url()).await.unwrap();
    let encode = |source: u64, digest: u64, ids: &[u64]| {
        let mut bytes = Vec::new();
        message::encode_into(source, digest, ids, None, &mut bytes).unwrap();
        bytes
    };
    let foreign = Domain { block_size: 32, ..domain() }.digest();
    let mut oversized = encode(5, domain().digest(), &[1; message::MAX_IDS]);
    oversized.extend_from_slice(&[0; 64]);
    let sends = [
        b"not a kvreuse message".to_vec(),
        encode(5, domain().digest(), &[1, 2, 3])[..30].to_vec(),
        oversized,
        encode(5, foreign, &[21, 22]),
        encode(r.sync.source(), domain().digest(), &[31, 32]),
        encode(5, domain().digest(), &[41, 42]),
    ];
    for bytes in sends {
        peer.publish(r.sync.subject().to_string(), bytes.into()).await.unwrap();
    }
    peer.flush().await.unwrap();
    within(Duration::from_secs(3), "every message is classified", || {
        ["applied", "own", "foreign_domain", "oversized", "malformed"]
            .iter()
            .map(|r2| r.received(r2))
            .sum::<f64>()
            >= 6.0
    })
    .await;
    assert_eq!(r.received("malformed"), 2.0);
    assert_eq!(r.received("oversized"), 1.0);
    assert_eq!(r.received("foreign_domain"), 1.0);
    assert_eq!(r.received("own"), 1.0);
    assert_eq!(r.received("applied"), 1.0);
    assert_eq!(
        r.tracker.history().unwrap().oldest_first(),
        [41, 42],
        "only the valid peer message"
    );
}

/// Settings that cannot work are typed errors naming the cause; a tracker is synced once,
/// and a second start is refused before it registers or connects anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unusable_settings_are_named_errors() {
    use kvreuse::{Error, ReplicaSyncError};
    // A port nothing listens on: a server that is down is retried, not an error.
    let down = format!("nats://127.0.0.1:{}", free_port());
    let config = Config::new(BLOCK).with_history_bytes(1 << 20);
    let registry = Registry::new();
    let start = |tracker: &Tracker, sync: ReplicaSyncConfig, registry: &Registry| {
        let (tracker, config, registry) = (tracker.clone(), config.clone(), registry.clone());
        async move { ReplicaSync::start(&tracker, sync, &config, &registry).await }
    };

    let disabled = start(&Tracker::disabled(), ReplicaSyncConfig::new(&down, domain()), &registry);
    let error = disabled.await.unwrap_err();
    assert!(matches!(error, Error::Sync(ReplicaSyncError::DisabledTracker)), "{error}");
    assert!(error.to_string().contains("disabled"), "{error}");

    let tracker = Tracker::new(&config, &registry).unwrap();
    let families = registry.gather().len();
    let first = start(&tracker, ReplicaSyncConfig::new(&down, domain()), &registry).await.unwrap();
    let synced = registry.gather().len();
    assert!(synced > families);
    let other = Registry::new();
    let error = start(&tracker, ReplicaSyncConfig::new(&down, domain()), &other).await.unwrap_err();
    assert!(matches!(error, Error::Sync(ReplicaSyncError::AlreadySynced)), "{error}");
    assert!(other.gather().is_empty(), "nothing registered for a refused start");
    drop(first);

    let fresh = || Tracker::new(&config, &Registry::new()).unwrap();
    let missing = PathBuf::from("/no/such/creds/file.creds");
    let sync = ReplicaSyncConfig::new(&down, domain()).with_auth(Auth::CredentialsFile(missing));
    let error = start(&fresh(), sync, &Registry::new()).await.unwrap_err();
    assert!(matches!(error, Error::Sync(ReplicaSyncError::CredentialsFile { .. })), "{error}");
    assert!(error.to_string().contains("/no/such/creds/file.creds"), "{error}");

    let sync = ReplicaSyncConfig::new("nats://[not a host", domain());
    let error = start(&fresh(), sync, &Registry::new()).await.unwrap_err();
    assert!(matches!(error, Error::Sync(ReplicaSyncError::Connect { .. })), "{error}");
    assert!(error.to_string().contains("nats://[not a host"), "{error}");
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}
