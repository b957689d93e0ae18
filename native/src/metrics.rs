//! Prometheus metrics, named as NVIDIA Dynamo's router names its cache-reuse metrics.
//!
//! All names take the configured prefix (default `dynamo_component_`) and the configured
//! constant labels; they are registered into a [`Registry`] the caller owns (no global
//! registry). Counters are pre-resolved handles, so the request path does one atomic add per
//! count. The history gauges are computed from the live history each time the registry is
//! gathered, so they cannot go stale or move backwards when many requests complete at once.
//!
//! | metric | type | meaning |
//! |---|---|---|
//! | `router_cache_loss_observation_input_tokens_total` | counter | prompt tokens of begun requests |
//! | `router_cache_loss_funnel_tokens_total{stage="f0"}` | counter | F0: prompt tokens of completed requests |
//! | `router_kv_history_cached_prefix_tokens_total` | counter | F1: tokens in leading blocks computed before |
//! | `router_cache_loss_observations_total{result="complete"\|"incomplete"}` | counter | requests counted, by outcome |
//! | `router_kv_history_evictions_total` | counter | ids evicted from the history |
//! | `router_kv_funnel_tokens_total{stage="f0"..."f5"}` | counter | F0-F5 of observed attempts only (completed with a route and an accepted worker report), so any two stages divide meaningfully |
//! | `router_kv_funnel_observations_total{result="observed"\|"no_route"\|"no_report"\|"prompt_mismatch"\|"incomplete"}` | counter | every ended attempt, exactly once: how much of the traffic the funnel covers |
//! | `router_kv_funnel_clamped_total{stage}` | counter | observed attempts whose stage exceeded the prompt and was clamped to it |
//! | `router_kv_funnel_loss_tokens_total{loss="cold"\|"retention"\|"routing"\|"race"\|"retrieval"}` | counter | prompt tokens of observed attempts not reused, each charged to the first stage it missed (with F5, they add up to F0) |
//! | `router_cache_loss_history_unique_hashes` | gauge | ids in the history |
//! | `router_cache_loss_history_represented_tokens` | gauge | ids times the block size |
//! | `router_cache_loss_history_estimated_bytes` | gauge | the history's heap bytes, times its fill fraction |
//! | `router_cache_loss_history_capacity_blocks` | gauge | ids the history can hold |
//! | `router_cache_loss_history_capacity_bytes` | gauge | the history's heap bytes (allocated up front) |
//! | `router_kv_history_oldest_age_seconds` | gauge | how long ago the oldest id present was inserted (may overstate it by the time 1/64 of a capacity's insertions took) |

use std::collections::HashMap;
use std::sync::Arc;

use kvreuse_core::attempt::{FunnelOutcome, FunnelResult, LOSSES, Ledger, STAGES};
use prometheus::core::{Collector, Desc};
use prometheus::proto::{Gauge, Metric, MetricFamily, MetricType};
use prometheus::{IntCounter, IntCounterVec, Opts, Registry};

use crate::config::Config;
use crate::history::SharedHistory;

/// The request-path counters.
#[derive(Clone, Debug)]
pub(crate) struct Metrics {
    input_tokens: IntCounter,
    f0_tokens: IntCounter,
    f1_tokens: IntCounter,
    complete: IntCounter,
    incomplete: IntCounter,
    pub(crate) evictions: IntCounter,
    /// The funnel families: per stage, per result (in `FunnelResult::ALL`'s order), per
    /// clamped stage, per loss (in `LOSSES`' order).
    funnel_tokens: [IntCounter; 6],
    funnel_results: [IntCounter; 5],
    funnel_clamped: [IntCounter; 6],
    funnel_losses: [IntCounter; 5],
}

/// Counts an attempt's steps into the counters.
pub(crate) struct MetricsLedger<'a>(pub(crate) &'a Metrics);

impl Ledger for MetricsLedger<'_> {
    fn begun(&mut self, prompt_tokens: u64) {
        self.0.input_tokens.inc_by(prompt_tokens);
    }

    fn completed(&mut self, f0_tokens: u64, f1_tokens: u64) {
        self.0.f0_tokens.inc_by(f0_tokens);
        self.0.f1_tokens.inc_by(f1_tokens);
        self.0.complete.inc();
    }

    fn ended_incomplete(&mut self) {
        self.0.incomplete.inc();
    }

    fn funnel(&mut self, outcome: &FunnelOutcome) {
        let at = FunnelResult::ALL.iter().position(|&r| r == outcome.result).unwrap_or(0);
        self.0.funnel_results[at].inc();
        if outcome.result == FunnelResult::Observed {
            for k in 0..6 {
                self.0.funnel_tokens[k].inc_by(outcome.stages[k]);
                if outcome.clamped[k] {
                    self.0.funnel_clamped[k].inc();
                }
            }
            for (counter, &loss) in self.0.funnel_losses.iter().zip(&outcome.losses) {
                counter.inc_by(loss);
            }
        }
    }
}

/// Options for one metric name under the configured prefix and labels.
pub(crate) fn opts(config: &Config, name: &str, help: &str) -> Opts {
    let labels: HashMap<String, String> =
        config.const_labels().iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    Opts::new(format!("{}{name}", config.metric_prefix()), help).const_labels(labels)
}

impl Metrics {
    /// Creates the counters and registers them, with the history gauges, into `registry`.
    pub(crate) fn register(
        config: &Config,
        registry: &Registry,
        history: &Arc<SharedHistory>,
    ) -> prometheus::Result<Metrics> {
        let counter = |name: &str, help: &str| -> prometheus::Result<IntCounter> {
            let counter = IntCounter::with_opts(opts(config, name, help))?;
            registry.register(Box::new(counter.clone()))?;
            Ok(counter)
        };
        let counter_vec = |name: &str, help: &str, label: &str| {
            let vec = IntCounterVec::new(opts(config, name, help), &[label])?;
            registry.register(Box::new(vec.clone()))?;
            prometheus::Result::Ok(vec)
        };
        let input_tokens = counter(
            "router_cache_loss_observation_input_tokens_total",
            "Prompt tokens of requests that began (completed or not).",
        )?;
        let funnel = counter_vec(
            "router_cache_loss_funnel_tokens_total",
            "Prompt tokens of completed requests by funnel stage; f0 is all of them.",
            "stage",
        )?;
        let f1_tokens = counter(
            "router_kv_history_cached_prefix_tokens_total",
            "F1: prompt tokens of completed requests in leading blocks computed before.",
        )?;
        let observations = counter_vec(
            "router_cache_loss_observations_total",
            "Requests counted, by outcome (complete or incomplete).",
            "result",
        )?;
        let evictions = counter(
            "router_kv_history_evictions_total",
            "Block ids evicted from the history to make room.",
        )?;
        let funnel_tokens = counter_vec(
            "router_kv_funnel_tokens_total",
            "Prompt tokens by cache-loss funnel stage (f0 prompt, f1 seen before, f2 cached on the best worker, f3 on the selected worker, f4 found by its lookup, f5 reused), over observed attempts only.",
            "stage",
        )?;
        let funnel_results = counter_vec(
            "router_kv_funnel_observations_total",
            "Ended attempts by funnel evidence: observed (route and worker report), no_route, no_report, prompt_mismatch, incomplete.",
            "result",
        )?;
        let funnel_clamped = counter_vec(
            "router_kv_funnel_clamped_total",
            "Observed attempts whose stage exceeded the prompt and was clamped to it.",
            "stage",
        )?;
        let funnel_losses = counter_vec(
            "router_kv_funnel_loss_tokens_total",
            "Prompt tokens of observed attempts not reused, each charged to the first funnel stage it missed: cold (f1), retention (f2), routing (f3), race (f4), retrieval (f5).",
            "loss",
        )?;
        registry.register(Box::new(HistoryGauges::new(config, history)?))?;
        Ok(Metrics {
            funnel_losses: LOSSES.map(|loss| funnel_losses.with_label_values(&[loss])),
            funnel_tokens: STAGES.map(|stage| funnel_tokens.with_label_values(&[stage])),
            funnel_results: FunnelResult::ALL
                .map(|r| funnel_results.with_label_values(&[r.name()])),
            funnel_clamped: STAGES.map(|stage| funnel_clamped.with_label_values(&[stage])),
            input_tokens,
            f0_tokens: funnel.with_label_values(&["f0"]),
            f1_tokens,
            complete: observations.with_label_values(&["complete"]),
            incomplete: observations.with_label_values(&["incomplete"]),
            evictions,
        })
    }
}

type Reading = Box<dyn Fn(&SharedHistory) -> f64 + Send + Sync>;

/// The history gauges, read from the history at gather time.
struct HistoryGauges {
    history: Arc<SharedHistory>,
    gauges: Vec<(Desc, Reading)>,
}

impl HistoryGauges {
    fn new(config: &Config, history: &Arc<SharedHistory>) -> prometheus::Result<Self> {
        let block_size = config.block_size() as f64;
        let readings: [(&str, &str, Reading); 6] = [
            (
                "router_cache_loss_history_unique_hashes",
                "Block ids in the history.",
                Box::new(|h| h.len() as f64),
            ),
            (
                "router_cache_loss_history_represented_tokens",
                "Tokens the history's block ids stand for (ids times the block size).",
                Box::new(move |h| h.len() as f64 * block_size),
            ),
            (
                "router_cache_loss_history_estimated_bytes",
                "Heap bytes of the history in use (its footprint times its fill fraction).",
                Box::new(|h| h.heap_bytes() as f64 * h.len() as f64 / h.capacity() as f64),
            ),
            (
                "router_cache_loss_history_capacity_blocks",
                "Block ids the history can hold.",
                Box::new(|h| h.capacity() as f64),
            ),
            (
                "router_cache_loss_history_capacity_bytes",
                "Heap bytes of the history (allocated up front).",
                Box::new(|h| h.heap_bytes() as f64),
            ),
            (
                "router_kv_history_oldest_age_seconds",
                "Seconds since the oldest block id in the history was inserted (may overstate it by the time 1/64 of a capacity of insertions took).",
                Box::new(|h| h.oldest_age().map_or(0.0, |age| age.as_secs_f64())),
            ),
        ];
        let gauges = readings
            .into_iter()
            .map(|(name, help, read)| {
                let opts = opts(config, name, help);
                let desc = Desc::new(opts.fq_name(), opts.help, Vec::new(), opts.const_labels)?;
                Ok((desc, read))
            })
            .collect::<prometheus::Result<_>>()?;
        Ok(HistoryGauges { history: Arc::clone(history), gauges })
    }
}

impl Collector for HistoryGauges {
    fn desc(&self) -> Vec<&Desc> {
        self.gauges.iter().map(|(desc, _)| desc).collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        self.gauges
            .iter()
            .map(|(desc, read)| {
                let mut gauge = Gauge::default();
                gauge.set_value(read(&self.history));
                let mut metric = Metric::from_gauge(gauge);
                metric.set_label(desc.const_label_pairs.clone());
                let mut family = MetricFamily::default();
                family.set_name(desc.fq_name.clone());
                family.set_help(desc.help.clone());
                family.set_field_type(MetricType::GAUGE);
                family.set_metric(vec![metric]);
                family
            })
            .collect()
    }
}
