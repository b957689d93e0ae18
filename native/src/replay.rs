//! Replaying a loaded trace on several threads.
//!
//! The [core engine](kvreuse_core::replay) drives all histories in one pass on one thread.
//! Histories never interact, so this splits them into groups, replays each group on its own
//! thread over the same requests, and puts the rows back in configuration order: the numbers
//! are the engine's, only sooner.

use kvreuse_core::replay::{Replay, ReplayConfig, ReplayError, Row};
use kvreuse_core::trace::Request;

/// Replays `requests` against `config`'s histories on up to `threads` threads. `progress` is
/// called now and then with the number of requests replayed so far (by the first group).
pub fn replay(
    config: &ReplayConfig,
    requests: &[Request],
    threads: usize,
    progress: &(dyn Fn(usize) + Sync),
) -> Result<Vec<Row>, ReplayError> {
    let groups = threads.clamp(1, config.histories.len().max(1));
    // History `i` goes to group `i % groups`: the configuration is sorted by policy and
    // capacity, so each group gets a similar mix of work.
    let configs: Vec<ReplayConfig> = (0..groups)
        .map(|g| ReplayConfig {
            histories: config.histories.iter().skip(g).step_by(groups).copied().collect(),
            ..config.clone()
        })
        .collect();
    let ids: usize = requests.iter().map(|r| r.prompt_ids.len() + r.output_ids.len()).sum();
    let run = |config: &ReplayConfig, report: bool| -> Result<Vec<Row>, ReplayError> {
        let mut replay = Replay::new(config)?;
        replay.reserve(ids);
        for (i, request) in requests.iter().enumerate() {
            replay.push(request)?;
            if report && i % 4096 == 0 {
                progress(i);
            }
        }
        Ok(replay.results())
    };
    let results: Vec<Result<Vec<Row>, ReplayError>> = std::thread::scope(|scope| {
        let handles: Vec<_> =
            configs[1..].iter().map(|config| scope.spawn(move || run(config, false))).collect();
        std::iter::once(run(&configs[0], true))
            .chain(handles.into_iter().map(|h| h.join().expect("a replay thread panicked")))
            .collect()
    });
    let groups_rows = results.into_iter().collect::<Result<Vec<_>, _>>()?;
    let mut rows: Vec<Option<Row>> = vec![None; config.histories.len()];
    for (g, group_rows) in groups_rows.into_iter().enumerate() {
        for (k, row) in group_rows.into_iter().enumerate() {
            rows[g + k * groups] = Some(row);
        }
    }
    Ok(rows.into_iter().map(|row| row.expect("every history has a row")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvreuse_core::chain::DynamoHasher;
    use kvreuse_core::replay::Policy;

    /// Any number of threads gives the single-threaded engine's rows, in the same order.
    #[test]
    fn threads_change_nothing_but_time() {
        let hasher = DynamoHasher::new(512).unwrap();
        let loaded = crate::trace::load(&[] as &[&str], &hasher, false, 2).unwrap();
        let requests = &loaded.requests[..1500];
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
            assert_eq!(replay(&config, requests, threads, &|_| {}).unwrap(), want, "{threads}");
        }
        let empty = ReplayConfig { histories: vec![], ..config };
        assert_eq!(replay(&empty, requests, 2, &|_| {}).unwrap(), vec![]);
    }
}
