"""Batch columns that the evaluation connector adds and the keys of evaluation's results (no Ray import).

Dataset columns (``obs``, ``costs``, ``t``, ...) are in ``rllib_caps.data.schema``.
"""

COST_SPENT = "cost_spent"  # c_<t: undiscounted cost incurred so far in the episode
STEP = "step"  # t: 0-based step index within the episode
RESULTS_KEY = "dsrl"  # evaluation/dsrl/...: the DSRL-scored results per threshold (rllib_caps.core.evaluation)
GRADIENT_STEPS = "gradient_steps"  # a sweep trial's result: gradient steps trained so far (learning curves' x)
EVALUATION_FILE = "evaluation.json"  # in a checkpoint of the train CLI: its evaluation/dsrl results
TIME_LIMITS = ("bootstrap", "terminal", "time_aware")  # how critics treat time-outs (rllib_caps.core.time_limit)
