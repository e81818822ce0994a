"""Every tag and dataset-context name the pipeline writes into MLflow and reads back, defined once.

Written by ``runs``, ``datasets``, ``registry`` and ``tasks.links``; read by ``lineage`` (``t2g lineage``) and the
command line's run summary. A name spelled anywhere else is a lineage that silently finds nothing.
"""

from __future__ import annotations

# runs: the pipeline's parent run and its nested stage runs
ROLE_TAG = "t2g.role"
PIPELINE_ROLE = "pipeline"  # ROLE_TAG of the parent run of one root Prefect flow run
STAGE_ROLE = "stage"  # ROLE_TAG of a stage's nested run
STAGE_TAG = "t2g.stage"
ENDED_BY_TAG = "t2g.ended_by"  # why a stage run left RUNNING by a killed attempt was closed
PROCESS_TAG = "t2g.process"  # host:pid:start of the process running a pipeline (a dead one's runs are closed)
STAGE_RUN_TAG_PREFIX = "t2g.stage_run."  # t2g.stage_run.<stage> = run id, on the parent run
OUTPUT_TAG_PREFIX = "t2g.output."  # t2g.output.<name> = sha256 of an artifact a stage produced

# MLflow's own names
PARENT_RUN_TAG = "mlflow.parentRunId"
DATA_CONTEXT_TAG = "mlflow.data.context"
NOTE_TAG = "mlflow.note.content"  # a run's description, shown as markdown on its page
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"  # which overview the experiment page opens on

# datasets: contexts and the tags on one dataset input
OUTPUT_CONTEXT = "output"  # dataset context of what a stage produced
PIPELINE_CONTEXT = "pipeline"  # dataset context on the parent run: a stage output the pipeline used
PRODUCER_TAG = "t2g.producer_run_id"  # dataset-input tag: the run that produced that input
SHA256_TAG = "sha256"
ARTIFACT_KEY_TAG = "artifact_key"
SCHEMA_TAG = "schema"
ROWS_TAG = "n_rows"

# the model registry
MODEL_TAG_PREFIX = "t2g.model."  # t2g.model.<name> = version, on the run that logged it
USES_TAG_PREFIX = "t2g.uses."  # t2g.uses.<name> = version, on a run that consumed a registered model
METRIC_TAG = "t2g.metric."  # t2g.metric.<metric> = value as measured, on a model version (promotion compares it)
DIRECTION_TAG = "t2g.metric.direction"  # which way that metric is better: HIGHER or LOWER
HIGHER, LOWER = "higher_is_better", "lower_is_better"
VERDICT_TAG = "t2g.verdict"  # the evaluation's verdict against the policy before PPO (model version, parent run)
PROMOTED_TAG = "t2g.promoted"  # on the parent run: "champion" or "not promoted"
POLICY_VERSION_TAG = "t2g.policy_version"  # on the parent run: the registered version of the trained policy
SOURCE_RUN_TAG = "source_run_id"  # on a model version: the run that logged it

# Prefect ids on MLflow runs and logged models (a logged model copies those of the run that logged it)
PREFECT_TAG_PREFIX = "prefect."
FLOW_RUN_TAG = "prefect.flow_run_id"  # root flow run on the parent; the stage's own flow run on stage runs
FLOW_RUN_NAME_TAG = "prefect.flow_run_name"
FLOW_NAME_TAG = "prefect.flow_name"
ROOT_FLOW_RUN_TAG = "prefect.root_flow_run_id"
DEPLOYMENT_TAG = "prefect.deployment"
TASK_RUN_TAG = "prefect.task_run_id"
TASK_RUN_NAME_TAG = "prefect.task_run_name"
FLOW_RUN_URL_TAG = "prefect.flow_run_url"
