"""The corridor study's methods as REINFORCE configs: COCOA's four arms (REINFORCE,
Advantage, HCA on returns, COCOA-reward) with their protocol's settings (module doc of
`study.py`). Shared by `study.py` (the learning runs) and `probe.py` (the shadow-mode
gradient statistics), so neither imports the other.
"""
from __future__ import annotations

import ml_collections

from credit_jax.addons import hindsight_credit
from credit_jax.algos import reinforce, train as train_lib

__all__ = ["LABELS", "METHODS", "cell_config", "entropy_coef"]

METHODS = ("reinforce", "advantage", "hca_return", "cocoa", "cocoa_exact")
LABELS = {"reinforce": "REINFORCE", "advantage": "Advantage",
          "hca_return": "HCA (return)", "cocoa": "COCOA-reward",
          "cocoa_exact": "COCOA (exact w)"}


def entropy_coef(length: int) -> float:
  """Their entropy bonus at corridor length L: 0.03 (20 / (L - 3))^0.6826."""
  return 0.03 * (20.0 / (int(length) - 3)) ** 0.68260619448


def cell_config(method: str, length: int, config) -> ml_collections.ConfigDict:
  """The REINFORCE config of `method` on the corridor of length `length` (module doc of `study.py`)."""
  c = reinforce.default_config()
  c.env_name = "ConveyorTreasure-v0"
  c.env_kwargs = ml_collections.ConfigDict({"length": int(length)})
  c.horizon = int(length)
  c.num_envs, c.num_updates = int(config.episodes), int(config.updates)
  c.credit, c.gamma = "rtg", 1.0
  c.baseline = "value" if method == "advantage" else "none"
  c.optimizer, c.weight_decay, c.adam_eps = "adamw", float(config.weight_decay), 1e-8
  c.max_grad_norm = 1e9           # no clip (theirs)
  c.lr = float(config.lrs[method])
  c.ent_coef = entropy_coef(length)
  c.explore_epsilon = float(config.epsilon)
  c.network.hidden_sizes = tuple(config.hidden_sizes)
  if method == "advantage" and tuple(config.get("value_sizes", ())):
    c.network.value_hidden_sizes = tuple(config.value_sizes)   # the ablation's critic
  c.network.activation = "relu"
  c.network.kind = str(config.get("policy", "mlp"))   # mlp (theirs) | tabular
  c.network.table_groups = tuple(config.get("table_groups", ()))
  c.network.min_prob = float(config.get("min_prob", 0.0))
  c.chunk_updates = int(config.eval_every)
  train_lib.checkpoint_at_end(c)  # the study saves its own state between chunks
  if method == "cocoa_exact":   # the feature object: study.run_cell passes it (exact_credit.py)
    c.cocoa_exact = ml_collections.ConfigDict({"enabled": True})
  if method in ("hca_return", "cocoa"):
    model = "gated" if method == "hca_return" else str(config.get("model", "gated"))
    hindsight_credit.add_config(
        c, "hca" if method == "hca_return" else "cocoa", model=model,
        hidden_sizes=(int(config.model_width),),
        lr=float(config.table_lr if model == "tabular" else config.model_lr),
        train_steps=1, fit_first=bool(config.fit_first),
        weight_decay=float(config.weight_decay), max_grad_norm=0.0)
  return c
