"""Policy evaluation: generation, task metrics, paired-bootstrap comparisons, reports."""

from t2g_core.evaluation.bootstrap import BootstrapResult, paired_bootstrap
from t2g_core.evaluation.generate import generate, generate_samples, load_policy
from t2g_core.evaluation.metrics import pass_at_k, task_metrics
from t2g_core.evaluation.report import comparison_table, write_report
from t2g_core.evaluation.results import EvalResults, evaluate_policies, merge_results

__all__ = [
    "BootstrapResult",
    "EvalResults",
    "comparison_table",
    "evaluate_policies",
    "generate",
    "generate_samples",
    "load_policy",
    "merge_results",
    "paired_bootstrap",
    "pass_at_k",
    "task_metrics",
    "write_report",
]
