"""kvreuse: how much of your LLM prompt traffic was computed before, and where reuse is lost.

The engines are the Rust crates a router links; this package calls them directly:

- ``block_hashes(tokens, block_size, ...)``: a prompt's block ids, as NVIDIA Dynamo's router
  or vLLM's prefix cache computes them;
- ``History(capacity)``: a router's bounded FIFO history of block ids;
- ``replay(traces, ...)``: the rows of ``kvreuse replay --json`` (F0, F1 at many history
  sizes and policies);
- ``fleet(traces, ...)``: the rows of ``kvreuse fleet --json`` (where reuse goes in
  simulated fleets: cold, retention, routing, race);
- ``Tracker(block_size, ...)``: request guards counting F0-F5 exactly once, with Prometheus
  metrics (``tracker.metrics_text()``, or ``kvreuse.prometheus.register(tracker)``);
- ``parse_worker_report(payload, kind)``: a worker's cache report as routers receive it.

Keywords are the command line's flags in snake_case, plural when they take a list; values are
the command line's strings or Python numbers and lists, with its defaults.
"""

from ._kvreuse import (
    BUNDLED_TRACE_NAME,
    Guard,
    History,
    Tracker,
    block_hashes,
    fleet,
    parse_worker_report,
    replay,
)

__all__ = [
    "BUNDLED_TRACE_NAME",
    "Guard",
    "History",
    "Tracker",
    "block_hashes",
    "fleet",
    "parse_worker_report",
    "replay",
]
