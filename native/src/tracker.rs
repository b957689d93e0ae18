//! What a router links: one [`Tracker`] per router, one [`RequestGuard`] per routed request.
//!
//! [`Tracker::begin`] hashes the prompt, measures how long a leading run of its blocks the
//! shared history holds, and counts the prompt's tokens as observed. The guard then ends
//! exactly once: [`complete`](RequestGuard::complete) counts F0 and F1 and teaches the history
//! the prompt's and the generated blocks; [`incomplete`](RequestGuard::incomplete) counts an
//! incomplete observation and teaches nothing; and dropping an unfinished guard (an aborted
//! or cancelled task, a panic unwinding through it) counts it incomplete. A retried request is
//! a new attempt: it gets a new guard from a new `begin`.
//!
//! On the way, a guard takes the rest of the funnel's evidence:
//! [`observe_route`](RequestGuard::observe_route) with what the router saw when it chose the
//! worker (F2, F3) and [`observe_worker`](RequestGuard::observe_worker) with the worker's
//! report (F4, F5; parsed from what the backend sends by [`WorkerReport`]'s parsers). The
//! funnel's metrics count an attempt's stages and losses only when it completes with both, and
//! count every ended attempt once by its evidence, so their coverage is visible.
//!
//! A disabled tracker allocates nothing and registers nothing; its guards carry no state and
//! cost a branch.

use std::fmt;
use std::sync::Arc;

use kvreuse_core::attempt::Attempt;
use kvreuse_core::chain::DynamoHasher;
use kvreuse_core::output::OutputTracker;
use kvreuse_core::report::{ReportError, Route, WorkerReport};
use prometheus::Registry;

use crate::config::Config;
use crate::error::Result;
use crate::history::SharedHistory;
use crate::metrics::{Metrics, MetricsLedger};

/// A router's prefix-reuse accounting: its history, hasher settings and metrics. Cheap to
/// clone (clones share everything).
#[derive(Clone, Debug)]
pub struct Tracker {
    inner: Option<Arc<Inner>>,
}

/// Something to tell about every completion's ids besides the local history (replica sync).
pub type LearnHook = Box<dyn Fn(&[u64]) + Send + Sync>;

struct Inner {
    history: Arc<SharedHistory>,
    hasher: DynamoHasher,
    metrics: Metrics,
    on_learn: std::sync::OnceLock<LearnHook>,
}

impl fmt::Debug for Inner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tracker")
            .field("history", &self.history)
            .field("hasher", &self.hasher)
            .finish_non_exhaustive()
    }
}

impl Tracker {
    /// A tracker set up by `config`; its metrics go into `registry`. Disabled configs give a
    /// [disabled](Tracker::disabled) tracker and touch neither memory nor registry.
    pub fn new(config: &Config, registry: &Registry) -> Result<Tracker> {
        if !config.enabled() {
            return Ok(Tracker::disabled());
        }
        let hasher = DynamoHasher::new(config.block_size())?.with_eagle(config.eagle());
        let history = Arc::new(SharedHistory::with_byte_budget(config.history_bytes())?);
        let metrics = Metrics::register(config, registry, &history)?;
        let inner = Inner { history, hasher, metrics, on_learn: std::sync::OnceLock::new() };
        Ok(Tracker { inner: Some(Arc::new(inner)) })
    }

    /// A tracker that does nothing.
    pub const fn disabled() -> Tracker {
        Tracker { inner: None }
    }

    /// Whether the tracker counts anything.
    pub fn is_enabled(&self) -> bool {
        self.inner.is_some()
    }

    /// The shared history (`None` when disabled).
    pub fn history(&self) -> Option<&Arc<SharedHistory>> {
        self.inner.as_ref().map(|inner| &inner.history)
    }

    /// The counter of ids evicted from the history (`None` when disabled), for what else
    /// inserts into it (replica sync) to count its evictions too.
    #[cfg(feature = "nats")]
    pub(crate) fn eviction_counter(&self) -> Option<prometheus::IntCounter> {
        self.inner.as_ref().map(|inner| inner.metrics.evictions.clone())
    }

    /// Whether a learn hook is set (replica sync has been started for this tracker).
    pub fn has_learn_hook(&self) -> bool {
        self.inner.as_ref().is_some_and(|inner| inner.on_learn.get().is_some())
    }

    /// Registers what every completion's ids are also given to (at most once; later calls
    /// are ignored and return false).
    pub fn set_learn_hook(&self, hook: LearnHook) -> bool {
        self.inner.as_ref().is_some_and(|inner| inner.on_learn.set(hook).is_ok())
    }

    /// Begins a request for the base model.
    #[inline]
    pub fn begin(&self, prompt: &[u32]) -> RequestGuard {
        self.begin_with_lora(prompt, "")
    }

    /// Begins a request for LoRA adapter `lora_name` (empty: the base model), whose blocks
    /// are hashed with the adapter's seed as the router does.
    #[inline]
    pub fn begin_with_lora(&self, prompt: &[u32], lora_name: &str) -> RequestGuard {
        let Some(inner) = &self.inner else {
            return RequestGuard { active: None };
        };
        let hasher = inner.hasher.with_lora_name(lora_name);
        let mut ids = Vec::with_capacity(hasher.complete_blocks(prompt.len()));
        hasher.sequence_hashes_into(prompt, &mut ids);
        let tail = &prompt[ids.len() * hasher.block_size()..];
        let output = OutputTracker::resume(hasher, ids.last().copied(), tail);
        inner.begin(prompt.len() as u64, ids, Some(output))
    }

    /// Begins a request whose block ids the router computed already (its prompt has
    /// `prompt_tokens` tokens). Generated blocks are not tracked.
    #[inline]
    pub fn begin_hashed(&self, prompt_tokens: u64, ids: &[u64]) -> RequestGuard {
        match &self.inner {
            None => RequestGuard { active: None },
            Some(inner) => inner.begin(prompt_tokens, ids.to_vec(), None),
        }
    }
}

trait Begin {
    fn begin(
        &self,
        prompt_tokens: u64,
        ids: Vec<u64>,
        output: Option<OutputTracker>,
    ) -> RequestGuard;
}

impl Begin for Arc<Inner> {
    fn begin(
        &self,
        prompt_tokens: u64,
        ids: Vec<u64>,
        output: Option<OutputTracker>,
    ) -> RequestGuard {
        let seen = self.history.seen_prefix_len(&ids);
        let block_size = self.hasher.block_size();
        let mut ledger = MetricsLedger(&self.metrics);
        let attempt = Attempt::begin(&mut ledger, prompt_tokens, ids, seen, block_size, output);
        RequestGuard { active: Some(Box::new(Active { attempt, inner: Arc::clone(self) })) }
    }
}

/// One routed request, counted exactly once. See the [module docs](self).
///
/// The guard is `Send`, so it can move into the task that streams the response. Ending it
/// twice does not compile:
///
/// ```compile_fail,E0382
/// # let tracker = kvreuse::Tracker::disabled();
/// let guard = tracker.begin(&[1, 2, 3]);
/// guard.complete();
/// guard.complete(); // error[E0382]: use of moved value: `guard`
/// ```
#[must_use = "a request guard counts its request when it ends: call `complete` or `incomplete` \
              (dropping it counts the request incomplete)"]
#[derive(Debug)]
pub struct RequestGuard {
    /// Boxed so that a guard is one pointer: cheap to move into a task, and a disabled
    /// tracker's guard (`None`) costs nothing to create and end.
    active: Option<Box<Active>>,
}

#[derive(Debug)]
struct Active {
    attempt: Attempt,
    inner: Arc<Inner>,
}

impl RequestGuard {
    /// Whether the guard counts anything (false for a disabled tracker's).
    pub fn is_active(&self) -> bool {
        self.active.is_some()
    }

    /// Tokens of the prompt's leading blocks that were in the history at begin: the request's
    /// F1 if it completes.
    pub fn seen_tokens(&self) -> u64 {
        self.active.as_ref().map_or(0, |a| a.attempt.seen_tokens())
    }

    /// Feeds generated tokens of choice `choice_index` (for `n > 1` sampling, each choice
    /// continues the prompt separately).
    #[inline]
    pub fn observe_output(&mut self, choice_index: u32, tokens: &[u32]) {
        if let Some(active) = &mut self.active {
            active.attempt.observe_output(choice_index, tokens);
        }
    }

    /// Records what the router saw when it chose the worker: tokens cached on the best
    /// eligible worker (F2) and on the one selected (F3), by its index. A second route is
    /// refused (the first stands).
    #[inline]
    pub fn observe_route(&mut self, route: Route) {
        if let Some(active) = &mut self.active
            && active.attempt.observe_route(route).is_err()
        {
            tracing::debug!("a second route for one request was ignored");
        }
    }

    /// Records the worker's report (F4, F5). Refused with an error, and not counted: a
    /// second report, and a report whose prompt differs from the routed one (the request then
    /// counts as `prompt_mismatch`). A disabled tracker's guard accepts anything.
    #[inline]
    pub fn observe_worker(&mut self, report: WorkerReport) -> Result<(), ReportError> {
        match &mut self.active {
            Some(active) => active.attempt.observe_worker(report),
            None => Ok(()),
        }
    }

    /// Ends the request as complete: counts F0 and F1 and teaches the history its blocks.
    #[inline]
    pub fn complete(mut self) {
        if let Some(active) = self.active.take() {
            (*active).complete();
        }
    }

    /// Ends the request as incomplete (aborted, cancelled, failed): counts it and nothing else.
    #[inline]
    pub fn incomplete(mut self) {
        self.end_incomplete();
    }

    #[inline]
    fn end_incomplete(&mut self) {
        if let Some(active) = self.active.take() {
            (*active).incomplete();
        }
    }
}

impl Active {
    fn complete(self) {
        let Active { attempt, inner } = self;
        let completion = attempt.complete(&mut MetricsLedger(&inner.metrics));
        let inserted = inner.history.insert_all(&completion.ids);
        inner.metrics.evictions.inc_by(inserted.evicted as u64);
        if let Some(hook) = inner.on_learn.get() {
            hook(&completion.ids);
        }
    }

    fn incomplete(self) {
        let Active { attempt, inner } = self;
        attempt.incomplete(&mut MetricsLedger(&inner.metrics));
    }
}

impl Drop for RequestGuard {
    /// An unfinished guard (a cancelled task, a panic unwinding) counts as incomplete.
    #[inline]
    fn drop(&mut self) {
        self.end_incomplete();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guards_are_send_and_trackers_share() {
        fn assert_send<T: Send>() {}
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send::<RequestGuard>();
        assert_send_sync::<Tracker>();
    }

    #[test]
    fn disabled_trackers_do_nothing() {
        let registry = Registry::new();
        let tracker = Tracker::new(&Config::disabled(), &registry).unwrap();
        assert!(!tracker.is_enabled() && tracker.history().is_none());
        let mut guard = tracker.begin(&[1, 2, 3]);
        assert!(!guard.is_active());
        guard.observe_output(0, &[4]);
        guard.complete();
        assert!(registry.gather().is_empty());
    }
}
