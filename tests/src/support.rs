//! Helpers for the integration tests of the other crates: reading metrics back from a
//! registry, capturing `tracing` output, starting a binary built for the test's target,
//! finding and starting the servers the tests talk to (`nats-server`), and a plain HTTP GET.

use std::ffi::OsStr;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prometheus::Registry;
use prometheus::proto::MetricType;

/// One request's funnel losses by the simple model the router library's metrics are checked
/// against: each prompt token not reused (at or past F5, `stages[5]`), charged to the first of
/// F1 to F5 it is not below. In the order cold, retention, routing, race, retrieval.
pub fn losses_token_by_token(stages: [u64; 6]) -> [u64; 5] {
    let mut losses = [0; 5];
    for p in stages[5]..stages[0] {
        let missed = (1..5).find(|&k| p >= stages[k]).unwrap_or(5);
        losses[missed - 1] += 1;
    }
    losses
}

/// The value of metric `dynamo_component_{name}`, summed over the series that carry a label
/// with value `label` (all series when `None`).
pub fn metric(registry: &Registry, name: &str, label: Option<&str>) -> f64 {
    let name = format!("dynamo_component_{name}");
    registry
        .gather()
        .iter()
        .filter(|f| f.name() == name)
        .flat_map(|f| f.get_metric().iter().map(move |m| (f.get_field_type(), m)))
        .filter(|(_, m)| label.is_none_or(|l| m.get_label().iter().any(|p| p.value() == l)))
        .map(|(kind, m)| match kind {
            MetricType::COUNTER => m.get_counter().get_value(),
            _ => m.get_gauge().get_value(),
        })
        .sum()
}

/// A `tracing` writer that keeps what is written.
#[derive(Clone, Debug, Default)]
pub struct Captured(pub Arc<Mutex<Vec<u8>>>);

impl Captured {
    /// Everything written so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }

    /// A plain-text subscriber writing here.
    pub fn subscriber(&self) -> impl tracing::Subscriber + Send + Sync + use<> {
        let writer = self.clone();
        tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .without_time()
            .with_target(false)
            .finish()
    }
}

impl Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A command that runs `program`, a binary built for the same target as this test.
///
/// When the tests are cross-run under an emulator, cargo starts each test binary through the
/// runner named in `CARGO_TARGET_<TRIPLE>_RUNNER` (`scripts/test-aarch64` sets it to
/// `qemu-aarch64 -L ...`), and the test inherits that variable: a binary the test starts goes
/// through the same runner. Natively the variable is unset and `program` runs directly.
pub fn target_command(program: impl AsRef<OsStr>) -> Command {
    let runner = match std::env::consts::ARCH {
        "aarch64" => std::env::var("CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER").ok(),
        _ => None,
    };
    let mut words = runner.as_deref().unwrap_or("").split_whitespace();
    match words.next() {
        Some(emulator) => {
            let mut command = Command::new(emulator);
            command.args(words).arg(program);
            command
        }
        None => Command::new(program),
    }
}

/// The path of Debian package `package`'s program `name` (on `PATH`, or in `/usr/sbin` or
/// `/usr/bin`); panics naming the package when it is missing (`./scripts/test` installs it).
pub fn program(name: &str, package: &str) -> PathBuf {
    let found = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/usr/bin")])
        .map(|dir| dir.join(name))
        .find(|p| p.is_file());
    found.unwrap_or_else(|| {
        panic!("{name} not found: install Debian's {package} (./scripts/test does)")
    })
}

/// A free TCP port on 127.0.0.1 (free when asked; the caller binds it soon after).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Waits up to `seconds` for something to listen on 127.0.0.1:`port`; panics naming `what`.
pub fn wait_for_port(port: u16, seconds: u64, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(seconds);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "{what} did not come up on port {port}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A `nats-server` with JetStream, on 127.0.0.1 and a port picked for it, killed on drop.
#[derive(Debug)]
pub struct NatsServer {
    child: Option<Child>,
    port: u16,
    store: tempfile::TempDir,
    extra: Vec<String>,
}

impl NatsServer {
    /// Starts a server with `extra` arguments.
    pub fn start(extra: &[&str]) -> NatsServer {
        let mut nats = NatsServer {
            child: None,
            port: free_port(),
            store: tempfile::tempdir().unwrap(),
            extra: extra.iter().map(|s| s.to_string()).collect(),
        };
        nats.run();
        nats
    }

    /// Starts (or restarts) the server on its port with its store.
    pub fn run(&mut self) {
        let mut child = Command::new(program("nats-server", "nats-server"))
            .args(["-a", "127.0.0.1", "-p", &self.port.to_string(), "-js", "-sd"])
            .arg(self.store.path())
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            if Instant::now() > deadline || child.try_wait().is_ok_and(|s| s.is_some()) {
                let _ = child.kill();
                let output = child.wait_with_output().unwrap();
                let log = String::from_utf8_lossy(&output.stderr);
                panic!(
                    "nats-server {:?} did not come up on port {}:\n{log}",
                    self.extra, self.port
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // Its log is drained once it runs: a full pipe would block the server on a write.
        if let Some(mut log) = child.stderr.take() {
            std::thread::spawn(move || std::io::copy(&mut log, &mut std::io::sink()));
        }
        self.child = Some(child);
    }

    /// Stops the server (it can be started again with [`run`](Self::run)).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().unwrap();
            child.wait().unwrap();
        }
    }

    /// Its URL.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A child process killed (and reaped) on drop.
#[derive(Debug)]
pub struct Running(pub Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `GET http://127.0.0.1:{port}{path}` (HTTP/1.0): the status code and the body.
pub fn http_get(port: u16, path: &str) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n\r\n")?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    Ok((status, body.to_string()))
}

/// `text` percent-encoded for a URL's query (everything but unreserved characters).
pub fn url_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
