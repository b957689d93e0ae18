//! Helpers for the integration tests of the other crates: reading metrics back from a
//! registry, capturing `tracing` output, and starting a binary built for the test's target.

use std::ffi::OsStr;
use std::io::Write;
use std::process::Command;
use std::sync::{Arc, Mutex};

use prometheus::Registry;
use prometheus::proto::MetricType;

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
