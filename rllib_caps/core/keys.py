"""Batch columns that the evaluation connector adds and module outputs that evaluation reads (no Ray import).

Dataset columns (``obs``, ``costs``, ``t``, ...) are in ``rllib_caps.data.schema``.
"""

COST_SPENT = "cost_spent"  # c_<t: undiscounted cost incurred so far in the episode
STEP = "step"  # t: 0-based step index within the episode
HEAD = "head"  # extra model output: which policy head acted (0 for single-policy algorithms)
PREDICTED_COST = "predicted_cost"  # extra model output of a module with a cost critic: Q^c(s, a) of the action taken
RESULTS_KEY = "dsrl"  # evaluation/dsrl/...: the DSRL-scored results per threshold (rllib_caps.core.evaluation)
GRADIENT_STEPS = "gradient_steps"  # a sweep trial's result: gradient steps trained so far (learning curves' x)
EVALUATION_FILE = "evaluation.json"  # in a checkpoint of the train CLI: its evaluation/dsrl results
TIME_LIMITS = ("bootstrap", "terminal", "time_aware")  # how critics treat time-outs (rllib_caps.core.time_limit)
