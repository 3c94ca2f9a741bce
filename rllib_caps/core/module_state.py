"""Loading a module's state so that every parameter comes from it.

RLlib's ``TorchRLModule.set_state`` loads with ``strict=False`` and checks for missing keys only in inference-only
modules. A checkpoint whose layer names differ from the module's (one saved by an earlier release, say) would
therefore leave those layers at their random initialisation, silently. ``StrictStateMixin`` refuses that, and
lets a module rename the keys of an earlier layout first.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ray.rllib.utils.torch_utils import convert_to_torch_tensor


class StrictStateMixin:
    """For ``TorchRLModule`` subclasses (put it first among the bases): ``set_state`` renames keys with
    ``legacy_state_key``, ignores keys the module does not have (a full state loaded into an inference-only
    module, target nets that are built later) and raises if any of the module's own keys is missing."""

    def legacy_state_key(self, key: str) -> str:
        """Today's name of a state key saved under an earlier layout; the key itself by default."""
        return key

    def set_state(self, state: Mapping[str, Any]) -> None:
        renamed = {self.legacy_state_key(key): value for key, value in state.items()}
        missing, _ = self.load_state_dict(convert_to_torch_tensor(renamed), strict=False)
        if missing:
            shown = ", ".join(missing[:6]) + (f" and {len(missing) - 6} more" if len(missing) > 6 else "")
            raise ValueError(f"the module state has no values for {shown}: it was saved by an incompatible "
                             f"layout of {type(self).__name__} (state keys: {', '.join(list(state)[:6])}, …)")
