"""What an algorithm adds to the generic sweep, evaluation and report: ``AlgorithmExtension``, named by its
registry entry (``AlgorithmEntry.extension``). The generic layers call these hooks and nothing else of an
algorithm's own; each hook's default does nothing. No Ray import."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


class AlgorithmExtension:
    """The hooks of one algorithm; subclass and override what the algorithm adds (e.g. CAPS's critic variants)."""

    def evaluate_variants(self, algorithm: Any, variants: Sequence[str], settings: Mapping[str, Any]
                          ) -> dict[str, dict[str, Any]]:
        """After a sweep trial trains: its trained ``algorithm`` evaluated once per value in ``variants`` of the
        entry's evaluated axis (e.g. CAPS's critics), value -> the results schema. ``settings`` are the sweep's
        values of the entry's other sweep options (e.g. ``fqe_steps``)."""
        raise NotImplementedError(f"{type(self).__name__} evaluates no variants")
