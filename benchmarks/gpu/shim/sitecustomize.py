"""Device-run shim (benchmarks/gpu/run.sh puts this folder on PYTHONPATH): the carried Ray wheel has no cluster
daemons (gcs_server, raylet; dropped to fit the 64 MiB carry), so RLlib's local GPU learner must not start a local
Ray to ask which GPU it may use. Outside a Ray worker RLlib then uses ``config.local_gpu_idx`` (0) itself."""

import ray.air._internal.torch_utils as torch_utils
import torch

torch_utils.get_devices = lambda: [torch.device("cuda", 0)]
