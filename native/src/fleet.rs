//! Simulating fleets over a streamed trace, on several threads.
//!
//! Each fleet shape of a [`FleetConfig`] is an independent simulation ([`kvreuse_core::fleet`])
//! with its own random generator, so the shapes are dealt into groups, each group simulated on
//! its own thread over the same batches of requests, and the rows put back in configuration
//! order: the numbers are the single-threaded engine's, whatever the number of threads.

use kvreuse_core::fleet::{Fleet, FleetConfig, FleetError, FleetRow};
use kvreuse_core::trace::Request;

pub use crate::stream::Stopped;
use crate::stream::{deal, fan_out, gather};
use crate::trace::{ReadStats, TraceFileError, TraceReader};

/// What a simulation gives: the rows, and the heap bytes its state held at the trace's end.
#[derive(Clone, Debug, PartialEq)]
pub struct Simulated {
    /// One row per shape, in configuration order.
    pub rows: Vec<FleetRow>,
    /// Heap bytes of the simulations' state (caches, histories, requests in flight) when the
    /// last request arrived.
    pub heap_bytes: usize,
}

/// Why a streamed simulation stopped.
#[derive(Debug)]
pub enum FleetStreamError<E> {
    /// The source of batches failed (a bad trace line, a read error).
    Source(E),
    /// The simulation refused the configuration or the trace.
    Fleet(FleetError),
}

/// Simulates `config`'s shapes over the batches `read` produces: `read` runs on the calling
/// thread, the shapes in up to `groups` groups (at least one), each on its own thread.
pub fn fleet_stream<T, E>(
    config: &FleetConfig,
    groups: usize,
    read: impl FnOnce(&mut dyn FnMut(Vec<Request>) -> Result<(), Stopped>) -> Result<T, E>,
) -> Result<(Simulated, T), FleetStreamError<E>> {
    if config.shapes.is_empty() {
        return Err(FleetStreamError::Fleet(FleetError::NoShapes));
    }
    // Every group is judged before any reading.
    let groups = groups.clamp(1, config.shapes.len().max(1));
    let engines = deal(&config.shapes, groups)
        .into_iter()
        .map(|shapes| Fleet::new(&FleetConfig { shapes, ..config.clone() }))
        .collect::<Result<Vec<_>, _>>()
        .map_err(FleetStreamError::Fleet)?;
    let (found, done) = fan_out(engines, Fleet::push, read);
    let mut fleets = Vec::new();
    for fleet in done {
        fleets.push(fleet.map_err(FleetStreamError::Fleet)?);
    }
    let found = found.map_err(FleetStreamError::Source)?;
    let heap_bytes = fleets.iter().map(Fleet::heap_bytes).sum();
    let rows = fleets
        .into_iter()
        .map(Fleet::finish)
        .collect::<Result<Vec<_>, _>>()
        .map_err(FleetStreamError::Fleet)?;
    Ok((Simulated { rows: gather(rows), heap_bytes }, found))
}

/// Why simulating a trace stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TraceFleetError {
    /// The trace could not be read (a bad line, a read error).
    #[error(transparent)]
    Trace(#[from] TraceFileError),
    /// The simulation refused the configuration or the trace.
    #[error(transparent)]
    Fleet(#[from] FleetError),
    /// A simulation thread stopped; its error is reported instead (never returned).
    #[error("a simulation thread stopped")]
    Stopped,
}

/// Simulates the trace `reader` reads, streaming ([`fleet_stream`] over its batches).
/// `batch` is called after each batch is read (for progress).
pub fn fleet_trace(
    config: &FleetConfig,
    reader: &TraceReader,
    groups: usize,
    mut batch: impl FnMut(),
) -> Result<(Simulated, ReadStats), TraceFleetError> {
    let streamed = fleet_stream(config, groups, |hand| {
        reader.read(|requests| {
            batch();
            hand(requests).map_err(|Stopped| TraceFleetError::Stopped)
        })
    });
    match streamed {
        Ok(done) => Ok(done),
        Err(FleetStreamError::Source(error)) => Err(error),
        Err(FleetStreamError::Fleet(error)) => Err(error.into()),
    }
}

/// Simulates requests already in memory (tests, benches): [`fleet_stream`] over one batch.
pub fn fleet(
    config: &FleetConfig,
    requests: &[Request],
    threads: usize,
) -> Result<Simulated, FleetError> {
    let result = fleet_stream(config, threads, |hand| {
        Ok::<_, std::convert::Infallible>(hand(requests.to_vec()))
    });
    match result {
        Ok((simulated, Ok(()) | Err(Stopped))) => Ok(simulated),
        Err(FleetStreamError::Fleet(error)) => Err(error),
        Err(FleetStreamError::Source(never)) => match never {},
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::{Source, load};
    use kvreuse_core::fleet::{Router, Timing};
    use kvreuse_core::setup::TraceSettings;

    /// Any number of threads gives the single-threaded engine's rows, in the same order.
    #[test]
    fn threads_change_nothing_but_time() {
        let (requests, _) = load(vec![Source::Bundled], &TraceSettings::default(), 2).unwrap();
        let requests = &requests[..800];
        let routers: Vec<Router> =
            ["round-robin", "kv", "random"].iter().map(|r| r.parse().unwrap()).collect();
        let config = FleetConfig {
            block_size: 512,
            engine_block_size: None,
            shapes: FleetConfig::grid(&[2, 4], &[500, 2000], &routers),
            timing: Timing::Mocker { speedup: 1000.0 },
            history: Some(100_000),
            measure_from: 100,
            seed: 3,
        };
        let mut single = Fleet::new(&config).unwrap();
        for r in requests {
            single.push(r).unwrap();
        }
        let want = single.finish().unwrap();
        for threads in [1, 2, 5, 64] {
            assert_eq!(fleet(&config, requests, threads).unwrap().rows, want, "{threads} threads");
        }
    }
}
