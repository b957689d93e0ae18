//! Replica sync over NATS: every replica of a router learns what the others completed, and a
//! new replica catches up instead of starting blind.
//!
//! - **Publishing.** Each completion's ids (exactly what the local history learns) go into a
//!   bounded queue from the request path, a non-blocking `try_send`; when the queue is full
//!   the ids are dropped and counted. A publisher task batches queued completions into
//!   [messages](kvreuse_core::message) of at most 4,096 ids and publishes them on the
//!   domain's subject, `{prefix}.{domain digest}`. While the connection is down it drops
//!   (and counts) what it would publish rather than letting it pile up.
//! - **Receiving.** A subscriber task decodes every message on the subject and inserts its
//!   ids into the local history directly, so they are never published again. It ignores and
//!   counts, by reason, its own messages, other domains' (a digest that does not match),
//!   oversized and malformed ones.
//! - **Catch-up.** The subject is also captured by a JetStream stream bounded by bytes (and
//!   optionally age), discarding the oldest. A replica that starts replays the stream into its
//!   history before applying live messages, and reports [`ReplicaSync::is_warming`] until it is done.
//! - **Outages.** The client reconnects with a backoff from 100 ms to 5 s, logging one warning
//!   when the connection is lost and one line when it is back; requests never wait on NATS.
//!
//! - **Security.** Authentication (token, user and password, nkey seed, credentials file) and
//!   TLS (a private CA, client certificates) go to the NATS client. A replica the server
//!   refuses keeps retrying and logs one warning per outage naming the cause, worked out from
//!   the client's error and the server's `INFO` line, never a secret. A permission the server
//!   denies is logged once per subject, and ids it would not accept are counted as dropped.
//!   With a [`SyncKey`] messages are signed and checked.
//!
//! See [`ReplicaSyncConfig`] for the settings and their environment variables.

mod config;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream;
use async_nats::{Client, ConnectOptions, Event, ServerError};
use futures_util::StreamExt;
use kvreuse_core::message::{self, MAX_IDS, MessageError, SyncKey};
use prometheus::{IntCounter, IntCounterVec, IntGauge, Registry};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tracing::{info, warn};

pub use config::*;

use crate::config::Config;
use crate::error::Result;
use crate::history::SharedHistory;
use crate::metrics::opts;
use crate::tracker::Tracker;

/// Why replica sync could not start. Nothing was registered or connected, except where a
/// variant says so.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReplicaSyncError {
    /// The tracker is disabled: it has no history to share.
    #[error(
        "the tracker is disabled, so it has no history to share (set {} to turn it on)",
        crate::config::ENV_ENABLED
    )]
    DisabledTracker,
    /// Replica sync was started for this tracker before; one sync per tracker.
    #[error("this tracker is already synced (start replica sync once per tracker)")]
    AlreadySynced,
    /// The credentials file ([`ENV_CREDS`]) could not be read.
    #[error("cannot read the credentials file {}: {error}", path.display())]
    CredentialsFile {
        /// The file.
        path: std::path::PathBuf,
        /// What went wrong.
        error: std::io::Error,
    },
    /// The connection settings are unusable (a malformed URL, unreadable TLS files). A server
    /// that is merely down is not an error: it is retried in the background.
    #[error("cannot connect to {urls}: {error}")]
    Connect {
        /// The server URL(s), without any user name or password they hold.
        urls: String,
        /// What the client said.
        error: async_nats::ConnectError,
    },
    /// The subscription to the domain's subject was refused.
    #[error("cannot subscribe to {subject}: {error}")]
    Subscribe {
        /// The subject.
        subject: String,
        /// What the client said.
        error: async_nats::SubscribeError,
    },
}

/// A running replica sync. Dropping it stops its tasks.
#[derive(Debug)]
pub struct ReplicaSync {
    shared: Arc<Shared>,
    client: Client,
    tasks: Vec<JoinHandle<()>>,
}

#[derive(Debug)]
struct Shared {
    source: u64,
    domain: u64,
    subject: String,
    name: String,
    warming: AtomicBool,
    metrics: SyncMetrics,
    /// The tracker's count of ids evicted from the history, which peers' ids evict too.
    evictions: IntCounter,
    /// Signs what is published, checks what is received.
    key: Option<SyncKey>,
    /// The server refused this replica's publishing on the subject (a permission this user
    /// lacks); cleared when the connection is made again.
    publish_refused: AtomicBool,
}

/// The sync counters.
#[derive(Clone, Debug)]
struct SyncMetrics {
    messages: IntCounterVec,
    published_messages: IntCounter,
    published_ids: IntCounter,
    dropped_ids: IntCounterVec,
    warming: IntGauge,
    connected: IntGauge,
}

/// Why received bytes were or were not applied (the `result` label).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Received {
    Applied,
    Own,
    ForeignDomain,
    Oversized,
    Malformed,
    /// Unsigned, and this replica has a key.
    Unsigned,
    /// Signed with another key.
    BadSignature,
    /// Signed, and this replica has no key.
    Signed,
}

impl Received {
    fn label(self) -> &'static str {
        match self {
            Received::Applied => "applied",
            Received::Own => "own",
            Received::ForeignDomain => "foreign_domain",
            Received::Oversized => "oversized",
            Received::Malformed => "malformed",
            Received::Unsigned => "unsigned",
            Received::BadSignature => "bad_signature",
            Received::Signed => "signed",
        }
    }
}

impl SyncMetrics {
    fn register(config: &Config, registry: &Registry) -> prometheus::Result<SyncMetrics> {
        let counter_vec = |name: &str, help: &str, label: &str| {
            let vec = IntCounterVec::new(opts(config, name, help), &[label])?;
            registry.register(Box::new(vec.clone()))?;
            prometheus::Result::Ok(vec)
        };
        let counter = |name: &str, help: &str| {
            let counter = IntCounter::with_opts(opts(config, name, help))?;
            registry.register(Box::new(counter.clone()))?;
            prometheus::Result::Ok(counter)
        };
        let gauge = |name: &str, help: &str| {
            let gauge = IntGauge::with_opts(opts(config, name, help))?;
            registry.register(Box::new(gauge.clone()))?;
            prometheus::Result::Ok(gauge)
        };
        let messages = counter_vec(
            "router_kv_history_sync_messages_total",
            "Sync messages received, by what was done with them.",
            "result",
        )?;
        for result in [
            Received::Applied,
            Received::Own,
            Received::ForeignDomain,
            Received::Oversized,
            Received::Malformed,
            Received::Unsigned,
            Received::BadSignature,
            Received::Signed,
        ] {
            messages.with_label_values(&[result.label()]);
        }
        let dropped_ids = counter_vec(
            "router_kv_history_sync_dropped_ids_total",
            "Learned block ids not shared: the queue was full, the connection down, or the \
             server does not permit this replica to publish.",
            "reason",
        )?;
        for reason in ["queue_full", "disconnected", "not_permitted"] {
            dropped_ids.with_label_values(&[reason]);
        }
        Ok(SyncMetrics {
            messages,
            published_messages: counter(
                "router_kv_history_sync_published_messages_total",
                "Sync messages published.",
            )?,
            published_ids: counter(
                "router_kv_history_sync_published_ids_total",
                "Block ids published to the other replicas.",
            )?,
            dropped_ids,
            warming: gauge(
                "router_kv_history_sync_warming",
                "1 while the replica replays the catch-up stream, then 0.",
            )?,
            connected: gauge(
                "router_kv_history_sync_connected",
                "1 while connected to NATS, else 0.",
            )?,
        })
    }
}

impl ReplicaSync {
    /// Starts syncing `tracker`'s history with the other replicas of `sync`'s domain; its
    /// metrics go into `registry` with `config`'s prefix and labels. Returns at once: the
    /// connection, catch-up and publishing proceed in background tasks of the current tokio
    /// runtime, and a server that is down is retried, not an error.
    ///
    /// Fails when the tracker is disabled or already synced, or the settings are unusable
    /// (for example an unreadable credentials file).
    pub async fn start(
        tracker: &Tracker,
        sync: ReplicaSyncConfig,
        config: &Config,
        registry: &Registry,
    ) -> Result<ReplicaSync> {
        let (Some(history), Some(evictions)) =
            (tracker.history().cloned(), tracker.eviction_counter())
        else {
            return Err(ReplicaSyncError::DisabledTracker.into());
        };
        // Checked before anything is registered or connected; `set_learn_hook` below settles
        // a race between two starts.
        if tracker.has_learn_hook() {
            return Err(ReplicaSyncError::AlreadySynced.into());
        }
        let metrics = SyncMetrics::register(config, registry)?;
        let source = loop {
            let source = std::hash::BuildHasher::hash_one(&std::hash::RandomState::new(), 0u8);
            if source != 0 {
                break source;
            }
        };
        let shared = Arc::new(Shared {
            source,
            domain: sync.domain.digest(),
            subject: sync.subject(),
            name: sync.name.clone(),
            warming: AtomicBool::new(true),
            metrics,
            evictions,
            key: sync.key.clone(),
            publish_refused: AtomicBool::new(false),
        });
        shared.metrics.warming.set(1);
        let client = connect(&sync, &shared).await?;

        let (queue, queued) = mpsc::channel::<Vec<u64>>(sync.queue);
        let hook_shared = Arc::clone(&shared);
        let hooked = tracker.set_learn_hook(Box::new(move |ids: &[u64]| {
            if let Err(e) = queue.try_send(ids.to_vec()) {
                let ids = match e {
                    mpsc::error::TrySendError::Full(ids)
                    | mpsc::error::TrySendError::Closed(ids) => ids,
                };
                hook_shared
                    .metrics
                    .dropped_ids
                    .with_label_values(&["queue_full"])
                    .inc_by(ids.len() as u64);
            }
        }));
        if !hooked {
            return Err(ReplicaSyncError::AlreadySynced.into());
        }
        // Subscribe before catching up, so nothing published meanwhile is missed.
        let subscriber = client.subscribe(shared.subject.clone()).await.map_err(|error| {
            ReplicaSyncError::Subscribe { subject: shared.subject.clone(), error }
        })?;
        let tasks = vec![
            tokio::spawn(publish(client.clone(), Arc::clone(&shared), queued, sync.linger)),
            tokio::spawn(receive(client.clone(), Arc::clone(&shared), history, subscriber, sync)),
        ];
        Ok(ReplicaSync { shared, client, tasks })
    }

    /// Whether the replica is still replaying the catch-up stream.
    pub fn is_warming(&self) -> bool {
        // Ordering: Acquire pairs with the Release store that ends the catch-up, so a caller
        // that sees `false` also sees the history the catch-up filled.
        self.shared.warming.load(Ordering::Acquire)
    }

    /// Waits until the catch-up is done (polling every 10 ms).
    pub async fn warmed(&self) {
        while self.is_warming() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// This replica's random id, carried by its messages.
    pub fn source(&self) -> u64 {
        self.shared.source
    }

    /// The subject this replica publishes and listens on.
    pub fn subject(&self) -> &str {
        &self.shared.subject
    }

    /// Whether the NATS connection is up.
    pub fn is_connected(&self) -> bool {
        self.client.connection_state() == async_nats::connection::State::Connected
    }
}

impl Drop for ReplicaSync {
    fn drop(&mut self) {
        self.tasks.iter().for_each(JoinHandle::abort);
    }
}

/// Connects with the configured credentials, retrying in the background while the server is
/// unreachable, with one warning per outage.
async fn connect(sync: &ReplicaSyncConfig, shared: &Arc<Shared>) -> Result<Client> {
    let mut options = match &sync.auth {
        Auth::None => ConnectOptions::new(),
        Auth::Token(token) => ConnectOptions::with_token(token.clone()),
        Auth::UserPassword(user, password) => {
            ConnectOptions::with_user_and_password(user.clone(), password.clone())
        }
        Auth::NkeySeed(seed) => ConnectOptions::with_nkey(seed.clone()),
        Auth::CredentialsFile(path) => ConnectOptions::with_credentials_file(path)
            .await
            .map_err(|error| ReplicaSyncError::CredentialsFile { path: path.clone(), error })?,
    };
    if sync.tls.required {
        options = options.require_tls(true);
    }
    if let Some(ca) = &sync.tls.ca {
        options = options.add_root_certificates(ca.clone());
    }
    if let Some((cert, key)) = &sync.tls.client {
        options = options.add_client_certificate(cert.clone(), key.clone());
    }
    let shared = Arc::clone(shared);
    let watch = Arc::new(Watch::default());
    let (urls, tls) = (Arc::new(sync.urls.clone()), Arc::new(sync.tls.clone()));
    options = options
        .name(&sync.name)
        .retry_on_initial_connect()
        .max_reconnects(None)
        .connection_timeout(Duration::from_secs(2))
        .reconnect_delay_callback(reconnect_delay)
        .event_callback(move |event| {
            let (shared, watch) = (Arc::clone(&shared), Arc::clone(&watch));
            let (urls, tls) = (Arc::clone(&urls), Arc::clone(&tls));
            async move { watch.on(event, &shared, &urls, &tls).await }
        });
    options.connect(sync.urls.as_str()).await.map_err(|error| {
        ReplicaSyncError::Connect { urls: without_credentials(&sync.urls), error }.into()
    })
}

/// `urls` (comma-separated) without the user names and passwords a URL may hold
/// (`nats://user:password@host`), for messages.
fn without_credentials(urls: &str) -> String {
    let url = |url: &str| match url.split_once("://") {
        Some((scheme, rest)) => match rest.rsplit_once('@') {
            Some((_, host)) => format!("{scheme}://{host}"),
            None => url.to_string(),
        },
        None => url.rsplit_once('@').map_or(url, |(_, host)| host).to_string(),
    };
    urls.split(',').map(|u| url(u.trim())).collect::<Vec<_>>().join(",")
}

/// What the connection's event callback remembers so that each problem is logged once: one
/// warning per outage, one naming why connecting fails, one per permission the server refuses.
#[derive(Default)]
struct Watch {
    down: AtomicBool,
    explained: AtomicBool,
    refusals: Mutex<Vec<String>>,
}

impl Watch {
    async fn on(&self, event: Event, shared: &Shared, urls: &str, tls: &Tls) {
        // Ordering: every flag here is touched by this callback only, which the client calls
        // for one event at a time; AcqRel keeps the swaps simple to reason about anyway.
        match event {
            Event::Connected => {
                self.explained.store(false, Ordering::Release);
                shared.publish_refused.store(false, Ordering::Relaxed);
                shared.metrics.connected.set(1);
                if self.down.swap(false, Ordering::AcqRel) {
                    info!(replica = %shared.name, "replica sync: connection to NATS is back");
                }
            }
            Event::Disconnected => {
                shared.metrics.connected.set(0);
                if !self.down.swap(true, Ordering::AcqRel) {
                    warn!(
                        replica = %shared.name,
                        "replica sync: lost the connection to NATS; requests go on, learned ids \
                         are not shared until it is back"
                    );
                }
            }
            Event::ClientError(error) => {
                if !self.explained.swap(true, Ordering::AcqRel) {
                    let cause = diagnose(urls, tls, &error.to_string()).await;
                    warn!(
                        replica = %shared.name,
                        "replica sync: cannot connect to NATS: {cause}; requests go on, learned \
                         ids are not shared, retrying"
                    );
                }
            }
            Event::ServerError(ServerError::Other(text))
                if text.contains("Permissions Violation") =>
            {
                // "Permissions Violation for Publish to \"subject\"" (or Subscription to).
                let what = text.split_once(" for ").map_or(text.as_str(), |(_, what)| what);
                if what.starts_with("Publish to") && what.contains(shared.subject.as_str()) {
                    shared.publish_refused.store(true, Ordering::Relaxed);
                }
                let first = {
                    let mut seen = self.refusals.lock().unwrap_or_else(|e| e.into_inner());
                    let first = !seen.iter().any(|s| s == what);
                    if first {
                        seen.push(what.to_string());
                    }
                    first
                };
                if first {
                    warn!(
                        replica = %shared.name,
                        "replica sync: the NATS server does not permit this replica's user to {}: \
                         {} (see the README's permissions for replicas)",
                        what.to_lowercase(),
                        if what.starts_with("Publish to") {
                            "its learned ids are not shared"
                        } else {
                            "it cannot learn from the other replicas"
                        }
                    );
                }
            }
            other => info!(replica = %shared.name, "replica sync: {other}"),
        }
    }
}

/// Why a connection fails, in words an operator can act on: the client's error, and for an
/// I/O error what the server announces (its `INFO` line: TLS required, client certificates
/// verified, authentication required) set against this replica's settings. Never names a
/// secret.
async fn diagnose(urls: &str, tls: &Tls, error: &str) -> String {
    if error.contains("authorization violation") {
        return "the server refused this replica's credentials (authorization violation: check \
                KVREUSE_NATS_TOKEN, KVREUSE_NATS_USER and KVREUSE_NATS_PASSWORD, \
                KVREUSE_NATS_NKEY_SEED or KVREUSE_NATS_CREDS)"
            .into();
    }
    let Some(info) = server_info(urls).await else {
        return format!("the server at {} cannot be reached ({error})", without_credentials(urls));
    };
    let flag = |key: &str| info.get(key).and_then(serde_json::Value::as_bool).unwrap_or(false);
    if tls.required && !flag("tls_required") && !flag("tls_available") {
        return "this replica requires TLS (KVREUSE_NATS_TLS) and the server does not offer it"
            .into();
    }
    if flag("tls_verify") && tls.client.is_none() {
        return "the server verifies client certificates and this replica has none \
                (KVREUSE_NATS_TLS_CERT and KVREUSE_NATS_TLS_KEY)"
            .into();
    }
    if flag("tls_required") {
        return format!(
            "the TLS handshake failed ({error}): is the server's certificate signed by the CA \
             this replica trusts (KVREUSE_NATS_TLS_CA), and valid for the host in its URL?"
        );
    }
    error.to_string()
}

/// The JSON of the `INFO` line a NATS server sends first, from the first of `urls`.
async fn server_info(urls: &str) -> Option<serde_json::Value> {
    use tokio::io::AsyncReadExt;
    let url = urls.split(',').next()?.trim();
    let address = url.split("://").last()?.split('/').next()?;
    let address = address.rsplit('@').next()?;
    // NATS's default port when the URL names none (`host`, `[::1]`).
    let address = match address.rsplit_once(':') {
        Some((_, port)) if !port.contains(']') => address.to_string(),
        _ => format!("{address}:4222"),
    };
    let connect = tokio::net::TcpStream::connect(address);
    let mut stream = tokio::time::timeout(Duration::from_secs(1), connect).await.ok()?.ok()?;
    let mut line = Vec::new();
    let mut buf = [0u8; 1024];
    while !line.contains(&b'\n') && line.len() < 16 << 10 {
        let read = tokio::time::timeout(Duration::from_secs(1), stream.read(&mut buf));
        let n = read.await.ok()?.ok()?;
        if n == 0 {
            break;
        }
        line.extend_from_slice(&buf[..n]);
    }
    let text = std::str::from_utf8(&line).ok()?;
    let json = text.strip_prefix("INFO ")?.lines().next()?;
    serde_json::from_str(json).ok()
}

/// 100 ms doubling to 5 s.
fn reconnect_delay(attempts: usize) -> Duration {
    let shift = attempts.saturating_sub(1).min(6) as u32;
    Duration::from_millis(100u64 << shift).min(Duration::from_secs(5))
}

/// The publisher task: batches queued completions into messages and publishes them.
async fn publish(
    client: Client,
    shared: Arc<Shared>,
    mut queued: mpsc::Receiver<Vec<u64>>,
    linger: Duration,
) {
    let mut completions = Vec::new();
    let mut ids: Vec<u64> = Vec::with_capacity(MAX_IDS);
    let mut bytes = Vec::with_capacity(message::MAX_MESSAGE_BYTES);
    while queued.recv_many(&mut completions, 1024).await > 0 {
        if !linger.is_zero() && completions.iter().map(Vec::len).sum::<usize>() < MAX_IDS {
            // Let small completions gather into one message.
            tokio::time::sleep(linger).await;
            while let Ok(more) = queued.try_recv() {
                completions.push(more);
            }
        }
        ids.clear();
        for completion in completions.drain(..) {
            for chunk in completion.chunks(MAX_IDS) {
                if ids.len() + chunk.len() > MAX_IDS {
                    send(&client, &shared, &ids, &mut bytes).await;
                    ids.clear();
                }
                ids.extend_from_slice(chunk);
            }
        }
        if !ids.is_empty() {
            send(&client, &shared, &ids, &mut bytes).await;
        }
    }
}

async fn send(client: &Client, shared: &Shared, ids: &[u64], bytes: &mut Vec<u8>) {
    let metrics = &shared.metrics;
    if client.connection_state() != async_nats::connection::State::Connected {
        metrics.dropped_ids.with_label_values(&["disconnected"]).inc_by(ids.len() as u64);
        return;
    }
    bytes.clear();
    message::encode_into(shared.source, shared.domain, ids, shared.key.as_ref(), bytes)
        .expect("at most MAX_IDS ids");
    let published = client.publish(shared.subject.clone(), bytes.clone().into()).await;
    // Ordering: Relaxed; a flag the event callback sets, read for counting only.
    if shared.publish_refused.load(Ordering::Relaxed) {
        // Still published, so a permission granted later takes effect at once; counted as
        // dropped because the server discards it.
        metrics.dropped_ids.with_label_values(&["not_permitted"]).inc_by(ids.len() as u64);
        return;
    }
    match published {
        Ok(()) => {
            metrics.published_messages.inc();
            metrics.published_ids.inc_by(ids.len() as u64);
        }
        Err(_) => metrics.dropped_ids.with_label_values(&["disconnected"]).inc_by(ids.len() as u64),
    }
}

/// Classifies received bytes and applies them to the history when they are a peer's.
fn apply(shared: &Shared, history: &SharedHistory, bytes: &[u8]) -> Received {
    let received = match message::decode(bytes, shared.key.as_ref()) {
        Err(e) if e.is_oversized() => Received::Oversized,
        Err(MessageError::Unsigned) => Received::Unsigned,
        Err(MessageError::BadSignature) => Received::BadSignature,
        Err(MessageError::Signed) => Received::Signed,
        Err(_) => Received::Malformed,
        Ok(m) if m.domain != shared.domain => Received::ForeignDomain,
        Ok(m) if m.source == shared.source => Received::Own,
        Ok(m) => {
            let inserted = history.insert_all(&m.ids);
            shared.evictions.inc_by(inserted.evicted as u64);
            Received::Applied
        }
    };
    shared.metrics.messages.with_label_values(&[received.label()]).inc();
    received
}

/// How long a catch-up waits for the stream's next message before it takes the stream as
/// read: the messages it expected may have expired meanwhile. (A stream being read delivers
/// its messages back to back.)
const CATCH_UP_SILENCE: Duration = Duration::from_secs(5);

/// The receiver task: catch-up from the stream, then live messages.
async fn receive(
    client: Client,
    shared: Arc<Shared>,
    history: Arc<SharedHistory>,
    mut subscriber: async_nats::Subscriber,
    sync: ReplicaSyncConfig,
) {
    if sync.stream_bytes > 0 {
        let mut attempt = 0;
        while let Err(e) = catch_up(&client, &shared, &history, &sync).await {
            attempt += 1;
            if attempt == 1 {
                warn!(replica = %shared.name, "replica sync: catch-up failed ({e}); retrying");
            }
            // Live messages are applied while the next attempt waits: a stream that cannot
            // be read (no JetStream, no permission for its API) must not stop the replica
            // learning its peers' ids. It stays warming until a catch-up succeeds.
            let retry = tokio::time::Instant::now() + reconnect_delay(attempt);
            while let Ok(message) = tokio::time::timeout_at(retry, subscriber.next()).await {
                let Some(message) = message else { return };
                apply(&shared, &history, &message.payload);
            }
        }
    }
    // Ordering: Release publishes the ids the catch-up inserted before it (see `is_warming`).
    shared.warming.store(false, Ordering::Release);
    shared.metrics.warming.set(0);
    while let Some(message) = subscriber.next().await {
        apply(&shared, &history, &message.payload);
    }
}

/// Makes sure the stream exists and replays it, up to its last message at the start, into
/// the history.
async fn catch_up(
    client: &Client,
    shared: &Shared,
    history: &SharedHistory,
    sync: &ReplicaSyncConfig,
) -> std::result::Result<(), async_nats::Error> {
    let context = jetstream::new(client.clone());
    let mut stream = context
        .get_or_create_stream(jetstream::stream::Config {
            name: sync.stream_name(),
            subjects: vec![shared.subject.clone()],
            max_bytes: sync.stream_bytes as i64,
            max_age: sync.stream_max_age.unwrap_or_default(),
            discard: jetstream::stream::DiscardPolicy::Old,
            ..Default::default()
        })
        .await?;
    let info = stream.info().await?;
    // A stream whose messages have all expired (or been purged) keeps its last sequence
    // number: with nothing to deliver, the consumer below would wait for the next message.
    let (last, messages) = (info.state.last_sequence, info.state.messages);
    if last == 0 || messages == 0 {
        return Ok(());
    }
    let consumer = stream
        .create_consumer(jetstream::consumer::pull::OrderedConfig {
            deliver_policy: jetstream::consumer::DeliverPolicy::All,
            ..Default::default()
        })
        .await?;
    let mut messages = consumer.messages().await?;
    // Messages that expire between the stream's info and their delivery are never delivered:
    // a silence this long ends the catch-up rather than waiting for a peer to publish.
    while let Ok(Some(message)) = tokio::time::timeout(CATCH_UP_SILENCE, messages.next()).await {
        let message = message?;
        apply(shared, history, &message.payload);
        let info = message.info()?;
        if info.stream_sequence >= last || info.pending == 0 {
            break;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_never_show_a_urls_credentials() {
        assert_eq!(
            without_credentials("nats://replica:s3cret@10.0.0.1:4222, tls://nats.example:4443"),
            "nats://10.0.0.1:4222,tls://nats.example:4443"
        );
        assert_eq!(without_credentials("user:pw@host:4222"), "host:4222");
        assert_eq!(without_credentials("nats://[::1]:4222"), "nats://[::1]:4222");
    }

    #[test]
    fn reconnect_delays_grow_from_100_ms_to_5_s() {
        let delays: Vec<u64> = (1..=9).map(|a| reconnect_delay(a).as_millis() as u64).collect();
        assert_eq!(delays, [100, 200, 400, 800, 1600, 3200, 5000, 5000, 5000]);
        assert_eq!(reconnect_delay(0).as_millis(), 100);
        assert_eq!(reconnect_delay(usize::MAX), Duration::from_secs(5));
    }
}
