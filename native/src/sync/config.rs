//! Replica sync settings: a builder for code and [`ReplicaSyncConfig::from_env`] for deployments.

use std::path::PathBuf;
use std::time::Duration;

use kvreuse_core::message::{Domain, SyncKey};
use kvreuse_core::setup::parse_bytes;
use tracing::warn;

use crate::config::switch;

/// The switch.
pub const ENV_SYNC: &str = "DYN_ROUTER_CACHE_REUSE_SYNC";
/// The shared secret messages are signed and checked with: at least 32 bytes, hex or base64.
pub const ENV_KEY: &str = "KVREUSE_SYNC_KEY";
/// The NATS server URL(s), comma-separated.
pub const ENV_URL: &str = "KVREUSE_NATS_URL";
/// Dynamo's variable for its NATS server, used when [`ENV_URL`] is unset.
pub const ENV_DYNAMO_URL: &str = "NATS_SERVER";
/// Token authentication.
pub const ENV_TOKEN: &str = "KVREUSE_NATS_TOKEN";
/// User name (with [`ENV_PASSWORD`]).
pub const ENV_USER: &str = "KVREUSE_NATS_USER";
/// Password (with [`ENV_USER`]).
pub const ENV_PASSWORD: &str = "KVREUSE_NATS_PASSWORD";
/// An nkey seed.
pub const ENV_NKEY_SEED: &str = "KVREUSE_NATS_NKEY_SEED";
/// A credentials file (JWT and nkey seed).
pub const ENV_CREDS: &str = "KVREUSE_NATS_CREDS";
/// Require TLS (`1|true|on|yes`).
pub const ENV_TLS: &str = "KVREUSE_NATS_TLS";
/// A CA certificate file (PEM) to trust.
pub const ENV_TLS_CA: &str = "KVREUSE_NATS_TLS_CA";
/// A client certificate file (PEM), with [`ENV_TLS_KEY`].
pub const ENV_TLS_CERT: &str = "KVREUSE_NATS_TLS_CERT";
/// The client certificate's key file (PEM).
pub const ENV_TLS_KEY: &str = "KVREUSE_NATS_TLS_KEY";
/// The subject prefix.
pub const ENV_SUBJECT_PREFIX: &str = "KVREUSE_SYNC_SUBJECT_PREFIX";
/// The catch-up stream's size bound in bytes (`0` turns catch-up off).
pub const ENV_STREAM_BYTES: &str = "KVREUSE_SYNC_STREAM_BYTES";
/// The catch-up stream's age bound in seconds (unset: none).
pub const ENV_STREAM_MAX_AGE: &str = "KVREUSE_SYNC_STREAM_MAX_AGE_SECONDS";

/// The longest age bound a JetStream stream takes: its nanoseconds must fit an `i64` (longer
/// ones wrapped round to a fraction of a second, or below zero, on their way to the server).
pub const MAX_STREAM_AGE_SECONDS: u64 = i64::MAX as u64 / 1_000_000_000;

/// The default server.
pub const DEFAULT_URL: &str = "nats://127.0.0.1:4222";
/// The default subject prefix; the subject is `{prefix}.{domain digest in hex}`.
pub const DEFAULT_SUBJECT_PREFIX: &str = "kvreuse.ids";
/// The default bound of the catch-up stream.
pub const DEFAULT_STREAM_BYTES: u64 = 64 << 20;
/// Completions waiting to be published before new ones are dropped (and counted).
pub const DEFAULT_QUEUE: usize = 8192;

/// How to authenticate to NATS.
#[derive(Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Auth {
    /// No credentials.
    #[default]
    None,
    /// A token.
    Token(String),
    /// A user name and password.
    UserPassword(String, String),
    /// An nkey seed.
    NkeySeed(String),
    /// A credentials file (JWT and seed).
    CredentialsFile(PathBuf),
}

impl std::fmt::Debug for Auth {
    /// Never prints secrets.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Auth::None => f.write_str("None"),
            Auth::Token(_) => f.write_str("Token(..)"),
            Auth::UserPassword(user, _) => write!(f, "UserPassword({user:?}, ..)"),
            Auth::NkeySeed(_) => f.write_str("NkeySeed(..)"),
            Auth::CredentialsFile(path) => write!(f, "CredentialsFile({path:?})"),
        }
    }
}

/// TLS settings.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tls {
    /// Refuse a connection without TLS.
    pub required: bool,
    /// A CA certificate (PEM) to trust besides the system's.
    pub ca: Option<PathBuf>,
    /// A client certificate and its key (PEM).
    pub client: Option<(PathBuf, PathBuf)>,
}

/// Replica sync settings. See the [module docs](super).
#[derive(Clone, Debug, PartialEq)]
pub struct ReplicaSyncConfig {
    pub(crate) urls: String,
    pub(crate) domain: Domain,
    pub(crate) subject_prefix: String,
    pub(crate) stream_bytes: u64,
    pub(crate) stream_max_age: Option<Duration>,
    pub(crate) auth: Auth,
    pub(crate) tls: Tls,
    pub(crate) queue: usize,
    pub(crate) linger: Duration,
    pub(crate) name: String,
    pub(crate) key: Option<SyncKey>,
}

impl ReplicaSyncConfig {
    /// Sync for `domain` through the NATS server(s) at `urls` (comma-separated), with the
    /// defaults: catch-up stream of 64 MiB, no authentication, TLS when the server asks.
    pub fn new(urls: impl Into<String>, domain: Domain) -> ReplicaSyncConfig {
        ReplicaSyncConfig {
            urls: urls.into(),
            domain,
            subject_prefix: DEFAULT_SUBJECT_PREFIX.into(),
            stream_bytes: DEFAULT_STREAM_BYTES,
            stream_max_age: None,
            auth: Auth::None,
            tls: Tls::default(),
            queue: DEFAULT_QUEUE,
            linger: Duration::from_millis(2),
            name: "kvreuse".into(),
            key: None,
        }
    }

    /// Settings from the environment, or `None` when [`ENV_SYNC`] is not on. Values that are
    /// not understood log one warning each and fall back to their defaults.
    pub fn from_env(domain: Domain) -> Option<ReplicaSyncConfig> {
        Self::from_lookup(domain, |name| std::env::var(name).ok())
    }

    /// [`from_env`](Self::from_env) with variables read through `lookup`.
    pub fn from_lookup(
        domain: Domain,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Option<ReplicaSyncConfig> {
        if !switch(&lookup, ENV_SYNC, "replica sync") {
            return None;
        }
        let urls = lookup(ENV_URL)
            .or_else(|| lookup(ENV_DYNAMO_URL))
            .filter(|u| !u.trim().is_empty())
            .unwrap_or_else(|| DEFAULT_URL.into());
        let mut config = ReplicaSyncConfig::new(urls.trim(), domain);
        let present = |name: &str| lookup(name).filter(|v| !v.is_empty());
        config.auth = match (
            present(ENV_TOKEN),
            present(ENV_USER),
            present(ENV_PASSWORD),
            present(ENV_NKEY_SEED),
            present(ENV_CREDS),
        ) {
            (Some(token), None, None, None, None) => Auth::Token(token),
            (None, Some(user), Some(password), None, None) => Auth::UserPassword(user, password),
            (None, None, None, Some(seed), None) => Auth::NkeySeed(seed),
            (None, None, None, None, Some(file)) => Auth::CredentialsFile(file.into()),
            (None, None, None, None, None) => Auth::None,
            _ => {
                warn!(
                    "give exactly one of {ENV_TOKEN}, {ENV_USER}+{ENV_PASSWORD}, \
                     {ENV_NKEY_SEED}, {ENV_CREDS}; connecting without credentials"
                );
                Auth::None
            }
        };
        config.tls.required = switch(&lookup, ENV_TLS, "requiring TLS");
        config.tls.ca = present(ENV_TLS_CA).map(PathBuf::from);
        config.tls.client = match (present(ENV_TLS_CERT), present(ENV_TLS_KEY)) {
            (Some(cert), Some(key)) => Some((cert.into(), key.into())),
            (None, None) => None,
            _ => {
                warn!("{ENV_TLS_CERT} and {ENV_TLS_KEY} go together; using no client certificate");
                None
            }
        };
        if let Some(prefix) = present(ENV_SUBJECT_PREFIX) {
            config.subject_prefix = prefix;
        }
        if let Some(text) = present(ENV_KEY) {
            match SyncKey::parse(&text) {
                Ok(key) => config.key = Some(key),
                Err(error) => {
                    // Syncing unsigned instead would quietly drop the protection asked for.
                    warn!("{ENV_KEY} is not usable ({error}); replica sync stays off");
                    return None;
                }
            }
        }
        if let Some(value) = lookup(ENV_STREAM_BYTES) {
            // A number with an optional unit, as the history's budget; `0` turns catch-up off.
            match parse_bytes(&value) {
                Ok(bytes) if bytes <= i64::MAX as u64 => config.stream_bytes = bytes,
                _ => warn!(
                    "{ENV_STREAM_BYTES}={value:?} is not a byte count; using the default of \
                     {DEFAULT_STREAM_BYTES}"
                ),
            }
        }
        if let Some(value) = lookup(ENV_STREAM_MAX_AGE) {
            match value.trim().parse::<u64>() {
                Ok(seconds) if (1..=MAX_STREAM_AGE_SECONDS).contains(&seconds) => {
                    config.stream_max_age = Some(Duration::from_secs(seconds));
                }
                Ok(seconds) if seconds > MAX_STREAM_AGE_SECONDS => warn!(
                    "{ENV_STREAM_MAX_AGE}={value:?} is longer than a stream's age bound can be \
                     ({MAX_STREAM_AGE_SECONDS} seconds, 292 years); keeping ids without an age \
                     limit"
                ),
                _ => warn!(
                    "{ENV_STREAM_MAX_AGE}={value:?} is not a positive number of seconds; \
                     keeping ids without an age limit"
                ),
            }
        }
        Some(config)
    }

    /// The subject messages of this domain travel on.
    pub fn subject(&self) -> String {
        format!("{}.{:016x}", self.subject_prefix, self.domain.digest())
    }

    /// The catch-up stream's name (derived from the subject's domain digest).
    pub fn stream_name(&self) -> String {
        format!("KVREUSE_{:016x}", self.domain.digest())
    }

    /// Sets the subject prefix.
    pub fn with_subject_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.subject_prefix = prefix.into();
        self
    }

    /// Bounds the catch-up stream by bytes (`0`: no catch-up stream) and optionally by age.
    /// An age beyond [`MAX_STREAM_AGE_SECONDS`] is no bound.
    pub fn with_stream(mut self, bytes: u64, max_age: Option<Duration>) -> Self {
        self.stream_bytes = bytes;
        self.stream_max_age =
            max_age.filter(|age| age.as_secs() <= MAX_STREAM_AGE_SECONDS && !age.is_zero());
        self
    }

    /// Sets the credentials.
    pub fn with_auth(mut self, auth: Auth) -> Self {
        self.auth = auth;
        self
    }

    /// Sets the TLS settings.
    pub fn with_tls(mut self, tls: Tls) -> Self {
        self.tls = tls;
        self
    }

    /// Completions that may wait to be published before new ones are dropped.
    pub fn with_queue(mut self, completions: usize) -> Self {
        self.queue = completions.max(1);
        self
    }

    /// How long the publisher waits to batch small completions into one message.
    pub fn with_linger(mut self, linger: Duration) -> Self {
        self.linger = linger;
        self
    }

    /// Signs published messages and accepts only messages signed with `key` (format
    /// version 2); without a key, messages are unsigned (version 1) and signed ones refused.
    pub fn with_key(mut self, key: SyncKey) -> Self {
        self.key = Some(key);
        self
    }

    /// The name the connection announces to the server (and logs carry).
    pub fn with_name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// The domain.
    pub fn domain(&self) -> &Domain {
        &self.domain
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn domain() -> Domain {
        Domain { model: "m".into(), block_size: 16, eagle: false, scheme: "dynamo".into() }
    }

    fn from(vars: &[(&str, &str)]) -> Option<ReplicaSyncConfig> {
        let vars: HashMap<&str, &str> = vars.iter().copied().collect();
        ReplicaSyncConfig::from_lookup(domain(), |n| vars.get(n).map(|v| v.to_string()))
    }

    #[test]
    fn a_sync_key_is_read_and_an_unusable_one_keeps_sync_off() {
        let domain =
            Domain { model: "m".into(), block_size: 16, eagle: false, scheme: "dynamo".into() };
        let env = |key: &'static str| {
            move |name: &str| match name {
                ENV_SYNC => Some("1".to_string()),
                ENV_KEY => Some(key.to_string()),
                _ => None,
            }
        };
        let hex = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
        let config = ReplicaSyncConfig::from_lookup(domain.clone(), env(hex)).unwrap();
        assert_eq!(config.key, Some(SyncKey::parse(hex).unwrap()));
        assert!(ReplicaSyncConfig::from_lookup(domain.clone(), env("too short")).is_none());
        assert!(ReplicaSyncConfig::from_lookup(domain, env("")).unwrap().key.is_none());
    }

    #[test]
    fn environment() {
        assert_eq!(from(&[]), None);
        assert_eq!(from(&[(ENV_SYNC, "off"), (ENV_URL, "nats://x:1")]), None);
        let on = (ENV_SYNC, "1");
        let c = from(&[on]).unwrap();
        assert_eq!(
            (c.urls.as_str(), c.stream_bytes, &c.auth),
            (DEFAULT_URL, DEFAULT_STREAM_BYTES, &Auth::None)
        );
        assert_eq!(from(&[on, (ENV_DYNAMO_URL, "nats://d:4222")]).unwrap().urls, "nats://d:4222");
        let both = from(&[on, (ENV_DYNAMO_URL, "nats://d:1"), (ENV_URL, "nats://k:2")]).unwrap();
        assert_eq!(both.urls, "nats://k:2");
        assert_eq!(from(&[on, (ENV_TOKEN, "t")]).unwrap().auth, Auth::Token("t".into()));
        assert_eq!(
            from(&[on, (ENV_USER, "u"), (ENV_PASSWORD, "p")]).unwrap().auth,
            Auth::UserPassword("u".into(), "p".into())
        );
        assert_eq!(from(&[on, (ENV_NKEY_SEED, "S")]).unwrap().auth, Auth::NkeySeed("S".into()));
        assert_eq!(from(&[on, (ENV_TOKEN, "t"), (ENV_USER, "u")]).unwrap().auth, Auth::None);
        let tls = from(&[on, (ENV_TLS, "yes"), (ENV_TLS_CA, "ca.pem")]).unwrap().tls;
        assert!(tls.required && tls.ca == Some("ca.pem".into()) && tls.client.is_none());
        let c = from(&[on, (ENV_STREAM_BYTES, "0"), (ENV_STREAM_MAX_AGE, "60")]).unwrap();
        assert_eq!(from(&[on, (ENV_STREAM_BYTES, " 16MiB")]).unwrap().stream_bytes, 16 << 20);
        assert_eq!((c.stream_bytes, c.stream_max_age), (0, Some(Duration::from_secs(60))));
        let c = from(&[on, (ENV_STREAM_BYTES, "lots"), (ENV_STREAM_MAX_AGE, "-1")]).unwrap();
        assert_eq!((c.stream_bytes, c.stream_max_age), (DEFAULT_STREAM_BYTES, None));
        // "Effectively forever" would have wrapped round to 0.29 s on its way to the server.
        for (seconds, kept) in [("9223372036", true), ("9223372037", false), ("18446744074", false)]
        {
            let c = from(&[on, (ENV_STREAM_MAX_AGE, seconds)]).unwrap();
            assert_eq!(c.stream_max_age.is_some(), kept, "{seconds}");
        }
        let forever = Some(Duration::from_secs(u64::MAX));
        assert_eq!(c.clone().with_stream(1, forever).stream_max_age, None);
        assert!(format!("{:?}", Auth::Token("secret".into())).find("secret").is_none());
    }

    #[test]
    fn subjects_and_streams_follow_the_domain() {
        let a = ReplicaSyncConfig::new(DEFAULT_URL, domain());
        let b = ReplicaSyncConfig::new(DEFAULT_URL, Domain { block_size: 32, ..domain() });
        assert_ne!(a.subject(), b.subject());
        assert_ne!(a.stream_name(), b.stream_name());
        assert_eq!(a.subject(), format!("kvreuse.ids.{:016x}", domain().digest()));
        assert!(!a.stream_name().contains('.'));
    }
}
