"""Policy evaluation: generation, task metrics, paired-bootstrap comparisons, reports."""

from t2g_core.evaluation.report import comparison_table, write_report
from t2g_core.evaluation.results import EvalResults, evaluate_policies, merge_results

__all__ = ["EvalResults", "comparison_table", "evaluate_policies", "merge_results", "write_report"]
