//! Replaying a streamed trace on several threads.
//!
//! The [core engine](kvreuse_core::replay) drives all histories in one pass on one thread.
//! Histories never interact, so this splits them into groups, replays each group on its own
//! thread over the same batches of requests, and puts the rows back in configuration order:
//! the numbers are the engine's, only sooner.

use kvreuse_core::replay::{Replay, ReplayConfig, ReplayError, Row};
use kvreuse_core::trace::Request;

pub use crate::stream::Stopped;
use crate::stream::{deal, fan_out, gather};
use crate::trace::{ReadStats, TraceFileError, TraceReader};

/// What a replay gives: the rows, and the heap bytes its engines held at the end.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Replayed {
    /// One row per history, in configuration order.
    pub rows: Vec<Row>,
    /// Heap bytes of the engines' state (histories and distinct-id tables) at the end.
    pub heap_bytes: usize,
}

/// Why a streamed replay stopped.
#[derive(Debug)]
pub enum StreamError<E> {
    /// The source of batches failed (a bad trace line, a read error).
    Source(E),
    /// An engine refused the configuration or the trace.
    Replay(ReplayError),
}

/// Replays `config`'s histories over the batches `read` produces. `read` runs on the calling
/// thread and hands each batch over; the histories are replayed meanwhile on their own threads,
/// in up to `groups` groups (at least one), each a thread. `read` returns what the reading found
/// (or why it stopped), which is handed back with the rows.
pub fn replay_stream<T, E>(
    config: &ReplayConfig,
    groups: usize,
    read: impl FnOnce(&mut dyn FnMut(Vec<Request>) -> Result<(), Stopped>) -> Result<T, E>,
) -> Result<(Replayed, T), StreamError<E>> {
    let groups = groups.clamp(1, config.histories.len().max(1));
    // History `i` goes to group `i % groups`: the configuration is sorted by policy and
    // capacity, so each group gets a similar mix of work.
    let configs: Vec<ReplayConfig> = deal(&config.histories, groups)
        .into_iter()
        .map(|histories| ReplayConfig { histories, ..config.clone() })
        .collect();
    // Judge the configuration before any reading.
    let engines = configs
        .iter()
        .map(Replay::new)
        .collect::<Result<Vec<_>, _>>()
        .map_err(StreamError::Replay)?;
    let (found, done) = fan_out(engines, Replay::push, read);
    // A replay error stopped the reading: report it rather than what the reading made of it,
    // and in terms of the whole configuration (a thread holds only its group's histories).
    if let Some(error) = done.iter().find_map(|d| d.as_ref().err()) {
        let error = match error.clone() {
            ReplayError::OutOfMemory { bytes, ids, .. } => {
                ReplayError::OutOfMemory { bytes, ids, histories: config.policy_counts() }
            }
            error => error,
        };
        return Err(StreamError::Replay(error));
    }
    let found = found.map_err(StreamError::Source)?;
    let engines: Vec<Replay> = done.into_iter().map(|d| d.expect("checked above")).collect();
    let heap_bytes = engines.iter().map(Replay::heap_bytes).sum();
    let rows = gather(engines.iter().map(Replay::results).collect());
    Ok((Replayed { rows, heap_bytes }, found))
}

/// Why replaying a trace stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TraceReplayError {
    /// The trace could not be read (a bad line, a read error).
    #[error(transparent)]
    Trace(#[from] TraceFileError),
    /// An engine refused the configuration or the trace.
    #[error(transparent)]
    Replay(#[from] ReplayError),
    /// A replay thread stopped; its error is reported instead (never returned).
    #[error("a replay thread stopped")]
    Stopped,
}

/// Replays the trace `reader` reads, streaming ([`replay_stream`] over its batches): the
/// reading and parsing on the calling thread, the histories in `groups` groups on their own
/// threads meanwhile. `batch` is called after each batch is read (for progress).
pub fn replay_trace(
    config: &ReplayConfig,
    reader: &TraceReader,
    groups: usize,
    mut batch: impl FnMut(),
) -> Result<(Replayed, ReadStats), TraceReplayError> {
    let streamed = replay_stream(config, groups, |hand| {
        reader.read(|requests| {
            batch();
            // A stopped replay thread has its own error, which `replay_stream` reports.
            hand(requests).map_err(|Stopped| TraceReplayError::Stopped)
        })
    });
    match streamed {
        Ok(done) => Ok(done),
        Err(StreamError::Source(error)) => Err(error),
        Err(StreamError::Replay(error)) => Err(error.into()),
    }
}

/// Replays requests already in memory (tests, benches): [`replay_stream`] over one batch.
pub fn replay(
    config: &ReplayConfig,
    requests: &[Request],
    threads: usize,
) -> Result<Replayed, ReplayError> {
    let result = replay_stream(config, threads, |hand| {
        Ok::<_, std::convert::Infallible>(hand(requests.to_vec()))
    });
    match result {
        Ok((replayed, Ok(()) | Err(Stopped))) => Ok(replayed),
        Err(StreamError::Replay(error)) => Err(error),
        Err(StreamError::Source(never)) => match never {},
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::{Source, load};
    use kvreuse_core::replay::Policy;
    use kvreuse_core::setup::TraceSettings;

    /// Any number of threads and any batching gives the single-threaded engine's rows, in the
    /// same order.
    #[test]
    fn threads_and_batches_change_nothing_but_time() {
        let (requests, _) = load(vec![Source::Bundled], &TraceSettings::default(), 2).unwrap();
        let requests = &requests[..1500];
        let mut config = ReplayConfig::grid(
            512,
            &[Policy::Fifo, Policy::Lru],
            &[Some(100), Some(1000), Some(3000), None],
        );
        config.measure_from = 300;
        let mut single = Replay::new(&config).unwrap();
        requests.iter().for_each(|r| single.push(r).unwrap());
        let want = single.results();
        for threads in [1, 2, 3, 7, 100] {
            assert_eq!(replay(&config, requests, threads).unwrap().rows, want, "{threads}");
            let (streamed, ()) = replay_stream(&config, threads, |hand| {
                requests.chunks(97).try_for_each(|batch| hand(batch.to_vec()))
            })
            .unwrap();
            assert_eq!(streamed.rows, want, "{threads} in batches");
            assert!(streamed.heap_bytes > 0);
        }
        let empty = ReplayConfig { histories: vec![], ..config };
        assert_eq!(replay(&empty, requests, 2).unwrap().rows, vec![]);
    }

    #[test]
    fn a_failing_source_stops_every_thread() {
        let config = ReplayConfig::grid(4, &[Policy::Fifo, Policy::Lru], &[Some(10), None]);
        let request = Request { prompt_tokens: 4, prompt_ids: vec![1], ..Request::default() };
        let result = replay_stream(&config, 3, |hand| {
            for _ in 0..50 {
                hand(vec![request.clone(); 10]).map_err(|Stopped| "stopped".to_string())?;
            }
            Err::<(), _>("bad line 51".to_string())
        });
        assert!(matches!(result, Err(StreamError::Source(e)) if e == "bad line 51"));
    }
}
