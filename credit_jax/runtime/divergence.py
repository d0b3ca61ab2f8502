"""A run that has stopped learning says so: warnings for a collapsed or exploding run.

The run loop (credit_jax/runtime/run.py) hands each chunk's metrics `{name: [S, U]}` to
`DivergenceGuard.observe`, which returns one warning line per kind, the first time it is
seen in the run (the run goes on; a non-finite loss is what stops it):

  * entropy collapse: `entropy` <= `_ZERO` for `patience` updates in a row (some seed):
    the policy acts deterministically and stops exploring;
  * no gradient: `grad_norm` <= `_ZERO` for `patience` updates in a row: no update
    changes the parameters (updates where every group had no contrast, `degenerate_frac`
    1, do not count: GRPO then has no signal yet, which is not a fault);
  * loss explosion: |`loss`| above `factor` times the larger of 1 and the median |loss|
    of the run's first `patience` updates seen by the guard.

Recipes that report none of these metrics are not checked for that kind.
"""
from __future__ import annotations

from typing import Dict, List, Mapping, Optional

import numpy as np

_ZERO = 1e-6          # entropy / gradient norm at or below this count as zero
_PATIENCE = 5         # updates in a row
_EXPLODE_FACTOR = 1e3


class DivergenceGuard:
  """Tracks collapse and explosion across chunks (see the module docstring).

  Args:
    patience: updates in a row a collapse must last (and updates the loss scale is
      taken from).
    factor: how many times its early scale the loss must reach to count as exploding.
    lr: the run's learning rate, named in the advice.
  """

  def __init__(self, patience: int = _PATIENCE, factor: float = _EXPLODE_FACTOR,
               lr: Optional[float] = None):
    if patience < 1 or factor <= 1:
      raise ValueError(f"need patience >= 1 and factor > 1, got {patience}, {factor}")
    self.patience, self.factor, self.lr = int(patience), float(factor), lr
    self._streak: Dict[str, np.ndarray] = {}   # [S] updates in a row at zero
    self._early: List[np.ndarray] = []         # |loss| [S] of the first updates
    self._scale: Optional[float] = None
    self.warned: set = set()

  def _advice(self) -> str:
    lr = f" (now {self.lr:g})" if self.lr is not None else ""
    return f"lower config.lr{lr} or check the rewards"

  def _zero_streak(self, name: str, values: np.ndarray, first_update: int,
                   what: str) -> Optional[str]:
    streak = self._streak.get(name, np.zeros(values.shape[0], np.int64))
    for u in range(values.shape[1]):
      streak = np.where(np.abs(values[:, u]) <= _ZERO, streak + 1, 0)
      hit = np.flatnonzero(streak >= self.patience)
      if hit.size and name not in self.warned:
        self.warned.add(name)
        self._streak[name] = streak
        end = first_update + u
        seeds = ", ".join(str(s) for s in hit[:8]) + (" ..." if hit.size > 8 else "")
        return (f"warning: {name} has been 0 for {self.patience} updates in a row "
                f"(updates {end - self.patience + 1}-{end}, seed {seeds}): {what}; "
                f"{self._advice()}")
    self._streak[name] = streak
    return None

  def _explosion(self, loss: np.ndarray, first_update: int) -> Optional[str]:
    mag = np.abs(loss)
    for u in range(mag.shape[1]):
      if self._scale is None:
        self._early.append(mag[:, u])
        if len(self._early) >= self.patience:
          self._scale = max(1.0, float(np.nanmedian(np.stack(self._early))))
        continue
      bad = np.flatnonzero(np.isfinite(mag[:, u]) & (mag[:, u] > self.factor * self._scale))
      if bad.size and "loss" not in self.warned:
        self.warned.add("loss")
        return (f"warning: the loss exploded at update {first_update + u} (|loss| "
                f"{mag[bad[0], u]:.3g} on seed {bad[0]}, over {self.factor:g}x its early "
                f"scale {self._scale:.3g}); {self._advice()}")
    return None

  def observe(self, metrics: Mapping[str, np.ndarray], first_update: int) -> List[str]:
    """Warning lines for a chunk's metrics `{name: [S, U]}` whose first update is
    `first_update` (1-based); each kind is reported once per run."""
    lines = []
    if "entropy" in metrics:
      lines.append(self._zero_streak(
          "entropy", np.asarray(metrics["entropy"], np.float64), first_update,
          "the policy has collapsed to deterministic actions and stopped exploring"))
    if "grad_norm" in metrics:
      norm = np.asarray(metrics["grad_norm"], np.float64)
      if "degenerate_frac" in metrics:   # no contrast in any group: no signal yet, not a fault
        norm = np.where(np.asarray(metrics["degenerate_frac"]) >= 1.0, np.inf, norm)
      lines.append(self._zero_streak(
          "grad_norm", norm, first_update,
          "no update changes the parameters"))
    if "loss" in metrics:
      lines.append(self._explosion(np.asarray(metrics["loss"], np.float64), first_update))
    return [line for line in lines if line]
