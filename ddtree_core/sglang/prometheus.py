"""DDTree histograms on SGLang's /metrics, recorded per decode round in the scheduler process.

Metrics (one observation per request per decode round: a verify forward of B requests is B rounds, the
convention of ddtree_core.metrics):

    sglang:ddtree_accept_length           histogram  tau: tokens the round commits, accepted drafts plus
                                                     the bonus; buckets 1, 2, .., D + 1
    sglang:ddtree_expected_accept_length  histogram  the drafter's forecast of tau (1 + the summed path
                                                     probabilities of the tree's nodes); same buckets
    sglang:ddtree_tree_nodes              histogram  non-root nodes of the round's tree; buckets 0, the
                                                     powers of two below N, N
    sglang:ddtree_depth_reached           histogram  depth of the tree's deepest node; buckets 0, 1, .., D
    sglang:ddtree_round_budget            histogram  the round's budget (with SGLANG_DDTREE_BUDGET=auto, the
                                                     one chosen for it); buckets the budgets it may take
    sglang:ddtree_rounds_total            counter    request-rounds recorded

D is the server's tree depth and N its node budget (config.ServerSettings); an integer observation v
lands in bucket le=v. tau is counted before any truncation at a stop, as in ddtree_core.metrics, so
sglang:ddtree_accept_length_sum / _count is the pooled acceptance length, SGLang's spec_accept_length up
to that truncation. The labels are those of the scheduler's own SGLang collector
(SchedulerMetricsCollector.labels, the labels of sglang:spec_accept_length): model_name, engine_type,
tp_rank, pp_rank, moe_ep_rank, plus dp_rank, priority and --extra-metric-labels where SGLang adds them.

How the values reach /metrics with --enable-metrics: the launcher points PROMETHEUS_MULTIPROC_DIR at a
temporary directory (utils.common.set_prometheus_multiproc_dir, from entrypoints.engine
._set_envs_and_config) before it spawns the schedulers, which inherit it; prometheus_client, first
imported after that, keeps each process's values in files there, and the HTTP server's /metrics merges
them (utils.common.add_prometheus_middleware: a MultiProcessCollector). prometheus_client chooses that
mode when it is imported, so this module imports it only when it creates the metrics, in the scheduler
process at its first recorded round, as SchedulerMetricsCollector does in its __init__.

Recorded only where SGLang records its scheduler metrics (SchedulerMetricsReporter
.current_scheduler_metrics_enabled: --enable-metrics, and attention-TP rank 0 unless
--enable-metrics-for-all-schedulers), from the stats row the batch result already brought to the host
(info.DDTreeBatchResult.ddtree_stats): no device read. Without --enable-metrics a request-round costs a
call and two attribute reads; a server that does not run DDTREE has no stats rows and never gets here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ddtree_core.sglang.config import ServerSettings
from ddtree_core.sglang.rounds import round_stats_from_row

ROUNDS = "sglang:ddtree_rounds_total"
BUDGET = "sglang:ddtree_round_budget"


@dataclass(frozen=True)
class HistogramSpec:
    """One DDTree histogram: the metrics.RoundStats field it observes and its bucket upper bounds."""

    name: str
    documentation: str
    field: str  # attribute of metrics.RoundStats
    buckets: tuple[float, ...]  # ascending; prometheus_client adds +Inf


def histogram_specs(settings: ServerSettings) -> tuple[HistogramSpec, ...]:
    """The histograms of a server, buckets sized by its tree depth and node budget."""
    depth = settings.tree_depth
    accept = integer_buckets(1, depth + 1)
    return (
        HistogramSpec(
            "sglang:ddtree_accept_length",
            "Tokens a DDTree round commits per request (accepted drafts + bonus token).",
            "accept_len",
            accept,
        ),
        HistogramSpec(
            "sglang:ddtree_expected_accept_length",
            "The drafter's forecast of a DDTree round's accept length (1 + summed node path probabilities).",
            "expected_accept_len",
            accept,
        ),
        HistogramSpec(
            "sglang:ddtree_tree_nodes",
            "Non-root nodes of a request's DDTree tree per round.",
            "num_nodes",
            node_buckets(settings.tree.budget),
        ),
        HistogramSpec(
            "sglang:ddtree_depth_reached",
            "Depth of the deepest node of a request's DDTree tree per round.",
            "depth_reached",
            integer_buckets(0, depth),
        ),
    )


def integer_buckets(low: int, high: int) -> tuple[float, ...]:
    """One bucket per integer low..high."""
    return tuple(float(value) for value in range(low, high + 1))


def node_buckets(budget: int) -> tuple[float, ...]:
    """0, the powers of two below the budget, the budget: exact for an empty tree, for full trees of
    power-of-two budgets and for the server's own budget, in about log2(budget) buckets."""
    powers = [2**i for i in range(budget.bit_length()) if 2**i < budget]
    return tuple(float(value) for value in [0, *powers, budget])


def observations(row: Sequence[int], specs: Sequence[HistogramSpec]) -> tuple[float, ...]:
    """What one stats row (rounds.round_stats_rows, as a list) gives each histogram, in specs order."""
    stats = round_stats_from_row(row)
    return tuple(float(getattr(stats, spec.field)) for spec in specs)


class DDTreeMetrics:
    """The DDTree histograms and round counter of one label set.

    histogram_cls / counter_cls: prometheus_client's Histogram and Counter or classes with their API
    (SGLang's stat-logger overrides); registry: prometheus_client's default registry unless given.
    Metric names may be registered once per registry, so a process creates this once.
    """

    def __init__(
        self,
        labels: Mapping[str, object],
        specs: Sequence[HistogramSpec],
        *,
        histogram_cls,
        counter_cls,
        budgets: Sequence[int] = (),
        registry=None,
    ):
        extra = {} if registry is None else {"registry": registry}
        names = list(labels)

        def create(metric_cls, name: str, documentation: str, **kwargs):
            metric = metric_cls(name=name, documentation=documentation, labelnames=names, **kwargs, **extra)
            # The child is bound once: the hot path skips the labels() lookup and its lock.
            return metric.labels(**labels) if names else metric

        self.specs = tuple(specs)
        self._histograms = [create(histogram_cls, s.name, s.documentation, buckets=list(s.buckets)) for s in self.specs]
        self._rounds = create(counter_cls, ROUNDS, "DDTree request-rounds (one per request and verify forward).")
        self._budget = None
        if budgets:
            buckets = [float(b) for b in sorted(budgets)]
            self._budget = create(histogram_cls, BUDGET, "The budget of a DDTree round per request.", buckets=buckets)

    def observe(self, row: Sequence[int], budget: int | None = None) -> None:
        """Record one request-round's stats row (and its budget, where the server keeps that histogram)."""
        for histogram, value in zip(self._histograms, observations(row, self.specs)):
            histogram.observe(value)
        if self._budget is not None and budget is not None:
            self._budget.observe(float(budget))
        self._rounds.inc()


_process_metrics: DDTreeMetrics | None = None  # this scheduler process's, made at its first recorded round


def observe_round(processor, row: Sequence[int], budget: int | None = None) -> None:
    """Record a request-round where SGLang records scheduler metrics; else do nothing.

    processor: the scheduler's SchedulerBatchResultProcessor (the plugin's _collect_round hook gets it).
    """
    reporter = getattr(processor, "metrics_reporter", None)
    if not getattr(reporter, "current_scheduler_metrics_enabled", False):
        return
    global _process_metrics
    if _process_metrics is None:
        _process_metrics = scheduler_metrics(processor)
    _process_metrics.observe(row, budget)


def scheduler_metrics(processor) -> DDTreeMetrics:
    """DDTreeMetrics with the labels and metric classes of the scheduler's SGLang collector."""
    from prometheus_client import Counter, Histogram  # only now: PROMETHEUS_MULTIPROC_DIR is set

    from ddtree_core.sglang.compat import scheduler_server_args
    from ddtree_core.sglang.spec_algo import settings_of

    collector = processor.metrics_collector
    settings = settings_of(scheduler_server_args(processor))
    return DDTreeMetrics(
        collector.labels,
        histogram_specs(settings),
        histogram_cls=getattr(collector, "_histogram_cls", None) or Histogram,
        counter_cls=getattr(collector, "_counter_cls", None) or Counter,
        budgets=settings.auto_budgets or (settings.tree.budget,),
    )
