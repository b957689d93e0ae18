//! Replica sync against a real `nats-server` (Debian's package; `./scripts/test` installs it),
//! started by each test on a free 127.0.0.1 port and stopped by it.
#![cfg(feature = "nats")]

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use kvreuse::core::chain::DynamoHasher;
use kvreuse::core::message::{self, Domain, SyncKey};
use kvreuse::sync::{Auth, ReplicaSyncConfig, Tls};
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
        if tokio::time::timeout(Duration::from_secs(20), replica.sync.warmed()).await.is_err() {
            let text = logs().text();
            let lines: Vec<&str> =
                text.lines().filter(|l| l.contains(&format!("replica={name}"))).collect();
            panic!("{name} did not catch up within 20 s; its log:\n{}", lines.join("\n"));
        }
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

    two_replicas_sync(with_token, "token", 85).await;
    let guess = ReplicaSyncConfig::new(nats.url(), domain()).with_auth(Auth::Token("guess".into()));
    never_connects(
        guess,
        "token-wrong",
        "refused this replica's credentials",
        &["guess", "s3cret"],
    )
    .await;
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

// ---------------------------------------------------------------- TLS and credentials

/// Two replicas with the same settings, warm and syncing: a completion on one reaches the
/// other.
async fn two_replicas_sync(config: impl Fn() -> ReplicaSyncConfig, name: &str, seed: u32) {
    let a = Replica::warm(config(), &format!("{name}-a")).await;
    let b = Replica::warm(config(), &format!("{name}-b")).await;
    assert!(a.sync.is_connected() && b.sync.is_connected());
    let p = prompt(seed);
    a.complete(&p);
    within(Duration::from_secs(3), &format!("{name}: B sees A's completion"), || {
        b.seen_blocks(&p) == 4
    })
    .await;
}

/// A replica whose settings the server refuses: it never connects, logs exactly one warning
/// naming `cause` (and none of `secrets`), serves requests as fast as ever, and counts the ids
/// it could not share.
async fn never_connects(config: ReplicaSyncConfig, name: &str, cause: &str, secrets: &[&str]) {
    let r = Replica::start(config, name).await;
    let warned = || log_lines_containing(name, "cannot connect to NATS") >= 1;
    within(Duration::from_secs(10), &format!("{name}: a warning"), warned).await;
    let start = Instant::now();
    for seed in 0..100 {
        r.complete(&prompt(500 + seed));
    }
    let took = start.elapsed();
    assert!(took < Duration::from_millis(200), "{name}: 100 requests took {took:?}");
    within(Duration::from_secs(5), &format!("{name}: dropped ids are counted"), || {
        r.metric("router_kv_history_sync_dropped_ids_total", Some("disconnected")) >= 400.0
    })
    .await;
    // Long enough for several reconnection attempts (100, 200, 400, 800 ms).
    tokio::time::sleep(Duration::from_millis(1600)).await;
    assert!(!r.sync.is_connected(), "{name} connected");
    assert_eq!(r.metric("router_kv_history_sync_connected", None), 0.0);
    let lines: Vec<String> = logs()
        .text()
        .lines()
        .filter(|l| l.contains(&format!("replica={name}")))
        .map(str::to_string)
        .collect();
    let warnings: Vec<&String> =
        lines.iter().filter(|l| l.contains("cannot connect to NATS")).collect();
    assert_eq!(warnings.len(), 1, "{name}: one warning, not {warnings:#?}");
    assert!(warnings[0].contains(cause), "{name}: {} should name {cause:?}", warnings[0]);
    for secret in secrets {
        assert!(lines.iter().all(|l| !l.contains(secret)), "{name} logged a secret: {lines:#?}");
    }
}

fn path(p: &std::path::Path) -> &str {
    p.to_str().unwrap()
}

/// A test CA, a server certificate for 127.0.0.1 and a client certificate, made with
/// Debian's `openssl` in `dir`.
struct Certificates {
    ca: PathBuf,
    server: (PathBuf, PathBuf),
    client: (PathBuf, PathBuf),
}

impl Certificates {
    fn make(dir: &std::path::Path) -> Certificates {
        let openssl = |args: &[&str]| {
            let out = std::process::Command::new("openssl")
                .args(args)
                .current_dir(dir)
                .output()
                .expect("openssl (Debian's openssl package) runs");
            assert!(
                out.status.success(),
                "openssl {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
        let days = ["-days", "2"];
        openssl(
            &[&["req", "-x509", "-subj", "/CN=kvreuse test CA"][..], &ec, &days]
                .concat()
                .into_iter()
                .chain(["-keyout", "ca.key", "-out", "ca.pem"])
                .collect::<Vec<_>>(),
        );
        std::fs::write(dir.join("server.ext"), "subjectAltName=IP:127.0.0.1\n").unwrap();
        std::fs::write(dir.join("client.ext"), "extendedKeyUsage=clientAuth\n").unwrap();
        for name in ["server", "client"] {
            let (key, csr, pem, ext, subject) = (
                format!("{name}.key"),
                format!("{name}.csr"),
                format!("{name}.pem"),
                format!("{name}.ext"),
                format!("/CN=kvreuse test {name}"),
            );
            let request = [&["req", "-subj", &subject][..], &ec, &["-keyout", &key, "-out", &csr]];
            openssl(&request.concat());
            let sign = ["x509", "-req", "-in", &csr, "-CA", "ca.pem", "-CAkey", "ca.key"];
            let out = ["-CAcreateserial", "-out", &pem, "-extfile", &ext];
            openssl(&[&sign[..], &out, &days].concat());
        }
        let pair = |name: &str| (dir.join(format!("{name}.pem")), dir.join(format!("{name}.key")));
        Certificates { ca: dir.join("ca.pem"), server: pair("server"), client: pair("client") }
    }

    /// `nats-server` arguments for TLS with this server certificate.
    fn server_args(&self) -> Vec<&str> {
        vec!["--tls", "--tlscert", path(&self.server.0), "--tlskey", path(&self.server.1)]
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_with_a_private_ca_syncs_and_required_tls_refuses_a_plain_server() {
    let dir = tempfile::tempdir().unwrap();
    let certs = Certificates::make(dir.path());
    let nats = Nats::start(&certs.server_args());
    let trusted = Tls { required: true, ca: Some(certs.ca.clone()), client: None };
    two_replicas_sync(
        || ReplicaSyncConfig::new(nats.url(), domain()).with_tls(trusted.clone()),
        "tls",
        80,
    )
    .await;

    // Without the CA the server's certificate is not trusted.
    let untrusted = Tls { required: true, ..Tls::default() };
    never_connects(
        ReplicaSyncConfig::new(nats.url(), domain()).with_tls(untrusted),
        "tls-untrusted",
        "signed by the CA this replica trusts",
        &[],
    )
    .await;

    let plain = Nats::start(&[]);
    never_connects(
        ReplicaSyncConfig::new(plain.url(), domain()).with_tls(trusted),
        "tls-plain",
        "requires TLS (KVREUSE_NATS_TLS) and the server does not offer it",
        &[],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_syncs_and_a_replica_without_a_client_certificate_never_connects() {
    let dir = tempfile::tempdir().unwrap();
    let certs = Certificates::make(dir.path());
    let mut args = certs.server_args();
    args.extend(["--tlsverify", "--tlscacert", path(&certs.ca)]);
    let nats = Nats::start(&args);
    let client = Some(certs.client.clone());
    let mutual = Tls { required: true, ca: Some(certs.ca.clone()), client };
    two_replicas_sync(
        || ReplicaSyncConfig::new(nats.url(), domain()).with_tls(mutual.clone()),
        "mtls",
        81,
    )
    .await;
    let anonymous = Tls { client: None, ..mutual };
    never_connects(
        ReplicaSyncConfig::new(nats.url(), domain()).with_tls(anonymous),
        "mtls-anonymous",
        "verifies client certificates and this replica has none",
        &[],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_and_password_sync_and_a_wrong_password_never_connects() {
    let nats = Nats::start(&["--user", "replica", "--pass", "correct-horse"]);
    let login = |password: &str| {
        let auth = Auth::UserPassword("replica".into(), password.into());
        ReplicaSyncConfig::new(nats.url(), domain()).with_auth(auth)
    };
    two_replicas_sync(|| login("correct-horse"), "password", 82).await;
    never_connects(
        login("battery-staple"),
        "password-wrong",
        "refused this replica's credentials",
        &["battery-staple", "correct-horse"],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_nkey_syncs_and_an_unknown_nkey_never_connects() {
    let dir = tempfile::tempdir().unwrap();
    let user = nkeys::KeyPair::new_user();
    let config = dir.path().join("nkey.conf");
    std::fs::write(
        &config,
        format!("authorization {{ users = [ {{ nkey: {} }} ] }}\n", user.public_key()),
    )
    .unwrap();
    let nats = Nats::start(&["-c", path(&config)]);
    let seed = user.seed().unwrap();
    let with_seed = |seed: &str| {
        ReplicaSyncConfig::new(nats.url(), domain()).with_auth(Auth::NkeySeed(seed.into()))
    };
    two_replicas_sync(|| with_seed(&seed), "nkey", 83).await;
    let stranger = nkeys::KeyPair::new_user().seed().unwrap();
    never_connects(
        with_seed(&stranger),
        "nkey-unknown",
        "refused this replica's credentials",
        &[&seed, &stranger],
    )
    .await;
}

/// Peers' ids that a replica applies evict its oldest like its own do, and are counted in
/// the same `router_kv_history_evictions_total`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peers_ids_evictions_are_counted() {
    let nats = Nats::start(&[]);
    let config = || ReplicaSyncConfig::new(nats.url(), domain()).with_stream(0, None);
    let a = Replica::warm(config(), "evict-a").await;
    let b = Replica::warm(config(), "evict-b").await;
    let capacity = b.tracker.history().unwrap().capacity() as u32;
    // A's completions, four new ids each, until B has applied more ids than it holds.
    let applied = || b.tracker.history().unwrap().total_inserted();
    let mut seed = 0;
    let start = Instant::now();
    while applied() <= u64::from(capacity) {
        assert!(start.elapsed() < Duration::from_secs(120), "B applied {} ids", applied());
        for _ in 0..capacity / 4 / 8 {
            a.complete(&prompt(2000 + seed));
            seed += 1;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Every id beyond B's capacity evicted one, and B counts them as its own (A's count is
    // A's own evictions).
    let evicted = || b.metric("router_kv_history_evictions_total", None);
    within(Duration::from_secs(30), "B's evictions are counted", || {
        evicted() as u64 == applied() - u64::from(capacity)
    })
    .await;
}

/// A stream whose messages have all expired keeps its last sequence number: a replica that
/// starts then has nothing to catch up on and warms at once, rather than waiting for a peer
/// to publish.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_warms_when_the_streams_messages_have_expired() {
    let nats = Nats::start(&[]);
    let config = || {
        ReplicaSyncConfig::new(nats.url(), domain())
            .with_stream(1 << 20, Some(Duration::from_secs(1)))
    };
    let a = Replica::warm(config(), "expired-a").await;
    let p = prompt(300);
    a.complete(&p);
    within(Duration::from_secs(3), "A counts its own message", || a.received("own") >= 1.0).await;
    // The stream keeps it for a second.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let started = Instant::now();
    let late = Replica::warm(config(), "expired-late").await;
    assert!(started.elapsed() < Duration::from_secs(10), "warmed in {:?}", started.elapsed());
    assert_eq!(late.seen_blocks(&p), 0, "an expired message was replayed");
}

/// A user whose permissions leave out the JetStream API cannot catch up: its replicas stay
/// warming, and learn their peers' ids as they are published all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_jetstream_api_live_ids_still_arrive() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("ids-only.conf");
    std::fs::write(
        &config,
        "authorization {\n  users = [\n    { user: ids, password: ids-secret, permissions: \
         { publish: [\"kvreuse.ids.>\"], subscribe: [\"kvreuse.ids.>\", \"_INBOX.>\"] } }\n  ]\n}\n",
    )
    .unwrap();
    let nats = Nats::start(&["-c", path(&config)]);
    let login = || {
        let auth = Auth::UserPassword("ids".into(), "ids-secret".into());
        ReplicaSyncConfig::new(nats.url(), domain()).with_auth(auth)
    };
    let a = Replica::start(login(), "ids-only-a").await;
    let b = Replica::start(login(), "ids-only-b").await;
    // A completes a new prompt every 100 ms until B has one: a message published before the
    // server has B's subscription reaches no one (and there is no stream to replay it from).
    // B applies them once its first catch-up attempt has failed, which under qemu takes
    // more than ten seconds.
    let start = Instant::now();
    let mut sent: Vec<Vec<u32>> = Vec::new();
    while !sent.iter().any(|p| b.seen_blocks(p) == 4) {
        assert!(start.elapsed() < Duration::from_secs(60), "B saw none of A's completions");
        let p = prompt(310 + sent.len() as u32);
        a.complete(&p);
        sent.push(p);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(log_lines_containing("ids-only-b", "catch-up failed"), 1);
    assert!(b.sync.is_warming());
    assert_eq!(b.metric("router_kv_history_sync_warming", None), 1.0);
    assert!(b.received("applied") >= 1.0);
}

/// NATS's decentralized JWT authentication, minted here: an operator signs an account (with
/// JetStream enabled), the account signs users, and a user's credentials file holds its JWT and
/// nkey seed.
mod jwt {
    use base64::Engine;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use nkeys::KeyPair;
    use serde_json::json;

    /// A JWT for `subject`, signed by `issuer`, with `nats` as its NATS claims.
    pub(super) fn mint(
        issuer: &KeyPair,
        subject: &str,
        name: &str,
        nats: serde_json::Value,
    ) -> String {
        let header =
            URL_SAFE_NO_PAD.encode(json!({"typ": "JWT", "alg": "ed25519-nkey"}).to_string());
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap();
        let claims = json!({
            "jti": format!("KVREUSE{}{}", now.as_nanos(), subject),
            "iat": now.as_secs(),
            "iss": issuer.public_key(),
            "name": name,
            "sub": subject,
            "nats": nats,
        });
        let claims = URL_SAFE_NO_PAD.encode(claims.to_string());
        let signed = format!("{header}.{claims}");
        let signature = URL_SAFE_NO_PAD.encode(issuer.sign(signed.as_bytes()).unwrap());
        format!("{signed}.{signature}")
    }

    pub(super) fn operator(operator: &KeyPair) -> String {
        mint(
            operator,
            &operator.public_key(),
            "test-operator",
            json!({"type": "operator", "version": 2}),
        )
    }

    /// An account's JWT, with JetStream unless it is the system account.
    pub(super) fn account(operator: &KeyPair, account: &KeyPair, jetstream: bool) -> String {
        let mut unlimited = json!({
            "subs": -1, "data": -1, "payload": -1, "imports": -1, "exports": -1,
            "wildcards": true, "conn": -1, "leaf": -1,
        });
        if jetstream {
            for limit in ["mem_storage", "disk_storage", "streams", "consumer"] {
                unlimited[limit] = json!(-1);
            }
        }
        let nats = json!({"type": "account", "version": 2, "limits": unlimited});
        mint(operator, &account.public_key(), "kvreuse", nats)
    }

    /// A credentials file's text for `user`, signed by `account`.
    pub(super) fn credentials(account: &KeyPair, user: &KeyPair) -> String {
        // A user's limits sit among its claims, not under "limits" as an account's do.
        let nats = json!({"type": "user", "version": 2, "subs": -1, "data": -1, "payload": -1});
        let jwt = mint(account, &user.public_key(), "replica", nats);
        let seed = user.seed().unwrap();
        format!(
            "-----BEGIN NATS USER JWT-----\n{jwt}\n------END NATS USER JWT------\n\n\
             -----BEGIN USER NKEY SEED-----\n{seed}\n------END USER NKEY SEED------\n"
        )
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_credentials_file_syncs_in_operator_mode_and_a_foreign_one_never_connects() {
    let dir = tempfile::tempdir().unwrap();
    let (operator, account) = (nkeys::KeyPair::new_operator(), nkeys::KeyPair::new_account());
    // JetStream in operator mode needs a system account.
    let system = nkeys::KeyPair::new_account();
    let operator_jwt = dir.path().join("operator.jwt");
    std::fs::write(&operator_jwt, jwt::operator(&operator)).unwrap();
    let config = dir.path().join("operator.conf");
    let preload = [(&account, true), (&system, false)]
        .map(|(a, jetstream)| {
            format!("{}: {}", a.public_key(), jwt::account(&operator, a, jetstream))
        })
        .join("\n  ");
    std::fs::write(
        &config,
        format!(
            "operator: {}\nsystem_account: {}\nresolver: MEMORY\nresolver_preload: {{\n  {preload}\n}}\n",
            path(&operator_jwt),
            system.public_key(),
        ),
    )
    .unwrap();
    let nats = Nats::start(&["-c", path(&config)]);
    let creds = dir.path().join("replica.creds");
    std::fs::write(&creds, jwt::credentials(&account, &nkeys::KeyPair::new_user())).unwrap();
    let with_creds = |file: &PathBuf| {
        ReplicaSyncConfig::new(nats.url(), domain()).with_auth(Auth::CredentialsFile(file.clone()))
    };
    two_replicas_sync(|| with_creds(&creds), "creds", 84).await;

    // A user of an account this operator never signed.
    let stranger = nkeys::KeyPair::new_user();
    let foreign = dir.path().join("foreign.creds");
    std::fs::write(&foreign, jwt::credentials(&nkeys::KeyPair::new_account(), &stranger)).unwrap();
    never_connects(
        with_creds(&foreign),
        "creds-foreign",
        "refused this replica's credentials",
        &[&stranger.seed().unwrap()],
    )
    .await;
}

/// The README's least-privilege block: replicas may publish only ids and what catch-up asks
/// JetStream, and subscribe only to ids and replies; a user without publish permission on the
/// ids' subject cannot put ids into any history.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn least_privilege_replicas_sync_and_a_listener_cannot_inject_ids() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("permissions.conf");
    std::fs::write(&config, PERMISSIONS).unwrap();
    let nats = Nats::start(&["-c", path(&config)]);
    let login = |user: &str, password: &str| {
        let auth = Auth::UserPassword(user.into(), password.into());
        ReplicaSyncConfig::new(nats.url(), domain()).with_auth(auth)
    };
    let a = Replica::warm(login("replica", "replica-secret"), "least-a").await;
    let b = Replica::warm(login("replica", "replica-secret"), "least-b").await;
    let listener = Replica::warm(login("listener", "listener-secret"), "least-listener").await;
    let p = prompt(90);
    a.complete(&p);
    within(Duration::from_secs(3), "B and the listener see A's completion", || {
        b.seen_blocks(&p) == 4 && listener.seen_blocks(&p) == 4
    })
    .await;
    // Catch-up works with these permissions: a late replica reads the stream.
    let late = Replica::warm(login("replica", "replica-secret"), "least-late").await;
    assert_eq!(late.seen_blocks(&p), 4, "the late replica caught up");

    // Its first message is published and refused; from the server's refusal on, what it
    // would publish is counted as not permitted.
    let injected: Vec<Vec<u32>> = (1000..1100).map(prompt).collect();
    let mut next = injected.iter();
    let refused = || {
        listener.metric("router_kv_history_sync_dropped_ids_total", Some("not_permitted")) >= 4.0
    };
    while !refused() {
        let q = next.next().expect("the listener's refused ids are counted");
        listener.complete(q);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // A message A publishes after the listener's: once it arrives, the listener's would have.
    let marker = prompt(102);
    a.complete(&marker);
    within(Duration::from_secs(3), "B sees A's later completion", || b.seen_blocks(&marker) == 4)
        .await;
    for q in &injected {
        assert_eq!((a.seen_blocks(q), b.seen_blocks(q)), (0, 0), "an injected id arrived");
    }
    // Both received the same messages: A's own copy of its marker can arrive after B's, so
    // the counts are compared once it has (an injected message either got to neither, or
    // would show in the seen blocks above).
    let delivered = |r: &Replica| r.received("applied") + r.received("own");
    within(Duration::from_secs(3), "A and B count the same messages", || {
        delivered(&a) == delivered(&b)
    })
    .await;
    for q in next.take(3) {
        listener.complete(q);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        log_lines_containing("least-listener", "does not permit this replica's user to publish"),
        1,
        "one warning however many refusals"
    );
    let text = logs().text();
    assert!(!text.contains("listener-secret") && !text.contains("replica-secret"));

    // Even a raw client of that user cannot publish ids.
    let raw = async_nats::ConnectOptions::with_user_and_password(
        "listener".into(),
        "listener-secret".into(),
    )
    .connect(nats.url())
    .await
    .unwrap();
    let mut bytes = Vec::new();
    message::encode_into(5, domain().digest(), &[777], None, &mut bytes).unwrap();
    raw.publish(a.sync.subject().to_string(), bytes.into()).await.unwrap();
    raw.flush().await.unwrap();
    let later = prompt(103);
    a.complete(&later);
    within(Duration::from_secs(3), "B sees A's last completion", || b.seen_blocks(&later) == 4)
        .await;
    assert!(!b.tracker.history().unwrap().contains(777));
}

/// The least-privilege configuration the README shows.
const PERMISSIONS: &str = include_str!("../../deploy/nats/kvreuse-permissions.conf");

#[test]
fn the_readme_shows_the_tested_permissions() {
    let block = &PERMISSIONS[PERMISSIONS.find("authorization {").unwrap()..];
    let readme = include_str!("../../README.md");
    assert!(
        readme.contains(&format!("```conf\n{block}```")),
        "README differs from the tested file"
    );
}
