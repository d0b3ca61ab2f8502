"""The experiments' cells and the methods' recipe configs for the bsuite study.

An experiment is a list of *settings* (umbrella_length, memory_len: chain / memory
lengths; discounting_chain: mapping seeds) and an environment per setting
(credit_jax/envs/bsuite.py). A *cell* is the settings that share one environment and
therefore one compiled program: one length, or for discounting_chain the mapping seeds
with the same bonus chain (`mapping_seed % 5`, bsuite's own rule: seeds 0, 5, 10, 15
are one environment); all its settings x seeds are vmapped.

Experiments:
  umbrella_length          bsuite/UmbrellaChain-v0, n_distractor 20, one cell per length
  memory_len               bsuite/MemoryChain-v0, num_bits 1, one cell per length
  discounting_chain        bsuite/DiscountingChain-v0, mapping seeds 0..19, 5 cells
  discounting_chain_long   beyond bsuite: reward horizons (1, 3, 10, 30, 100, 300, 1000)
                           in episodes of 1000 steps, the bonus on each chain once
                           (mapping seeds 0..6), scored by discounting_chain's formula

Methods (names as in credit_jax/experiments/horizon/methods.py): "reinforce",
"reinforce_rtg", "grpo_k<K>", "ppo_<critic>_g<gamma>_l<lambda>" with critic "mlp"
(MLP actor-critic), "gru" (GRU actor-critic, `network.kind = "gru"`) or "hist" (MLP
actor, GRU critic); a "_gru" suffix on a REINFORCE or GRPO name ("grpo_k5_gru") gives
it a GRU policy (`network.kind = "gru"`). Every method sees `episodes_per_update` (E)
whole episodes per update: PPO runs E environments for one episode length per update
(all episodes have a fixed length, so each env ends exactly one episode per update), GRPO
E / K tasks of K, REINFORCE E episodes; a setting's `NUM_EPISODES` episodes take
NUM_EPISODES / E updates.
"""
from __future__ import annotations

import dataclasses
from typing import List, Tuple

import ml_collections

from credit_jax.config import ConfigError
from credit_jax.envs import bsuite as bsuite_envs
from credit_jax.experiments.horizon import methods as horizon_methods

EXPERIMENTS = ("umbrella_length", "memory_len", "discounting_chain",
               "discounting_chain_long")
ENV_IDS = {"umbrella_length": "bsuite/UmbrellaChain-v0",
           "memory_len": "bsuite/MemoryChain-v0",
           "discounting_chain": "bsuite/DiscountingChain-v0",
           "discounting_chain_long": "bsuite/DiscountingChain-v0"}
SETTING_NAMES = {"umbrella_length": "chain_length", "memory_len": "memory_length",
                 "discounting_chain": "mapping_seed",
                 "discounting_chain_long": "mapping_seed"}
# How each experiment is scored (discounting_chain_long as discounting_chain).
SCORED_AS = {"umbrella_length": "umbrella_length", "memory_len": "memory_len",
             "discounting_chain": "discounting_chain",
             "discounting_chain_long": "discounting_chain"}


@dataclasses.dataclass(frozen=True)
class Cell:
  """The settings of one experiment that share an environment (one compiled program)."""
  experiment: str
  settings: Tuple[int, ...]    # lengths (one) or mapping seeds (several)
  env_kwargs: tuple            # ((name, value), ...) for credit_jax.envs.make
  episode_len: int             # steps per episode (all episodes have this length)

  @property
  def name(self) -> str:
    """File-name tag: `<experiment>_<setting>` (discounting: `_bonus<chain>`)."""
    if self.experiment.startswith("discounting"):
      return f"{self.experiment}_bonus{self.settings[0]}"
    return f"{self.experiment}_{self.settings[0]}"


def long_horizons(config) -> Tuple[int, ...]:
  return tuple(int(h) for h in config.discounting_long_horizons)


def settings_of(experiment: str, config) -> Tuple[int, ...]:
  """The experiment's settings in `config` (lengths or mapping seeds)."""
  if experiment == "umbrella_length":
    return tuple(int(v) for v in config.umbrella_lengths)
  if experiment == "memory_len":
    return tuple(int(v) for v in config.memory_lengths)
  if experiment == "discounting_chain":
    return tuple(int(v) for v in config.discounting_mapping_seeds)
  if experiment == "discounting_chain_long":
    return tuple(range(len(long_horizons(config))))
  raise ConfigError(f"config.experiments: unknown experiment {experiment!r}; known: "
                    f"{EXPERIMENTS}")


def horizons_of(experiment: str, config) -> Tuple[int, ...]:
  """A discounting experiment's reward horizons (bsuite's, or the long ones)."""
  if experiment == "discounting_chain":
    return tuple(bsuite_envs.BSUITE_HORIZONS)
  return long_horizons(config)


def cells_of(experiment: str, config) -> List[Cell]:
  """The experiment's cells, shortest episodes first."""
  settings = settings_of(experiment, config)
  if experiment == "umbrella_length":
    return [Cell(experiment, (n,), (("chain_length", n), ("n_distractor", 20)), n)
            for n in sorted(set(settings))]
  if experiment == "memory_len":
    return [Cell(experiment, (n,), (("memory_length", n), ("num_bits", 1)), n + 1)
            for n in sorted(set(settings))]
  horizons = horizons_of(experiment, config)
  chains = len(horizons)
  cells = []
  for bonus in sorted({m % chains for m in settings}):
    seeds = tuple(m for m in settings if m % chains == bonus)
    kwargs = (("mapping_seed", bonus), ("reward_horizons", tuple(horizons)))
    cells.append(Cell(experiment, seeds, kwargs, max(horizons)))
  return cells


def num_episodes(experiment: str, config) -> int:
  return int(config.episodes[experiment])


def num_updates(experiment: str, config) -> int:
  """Updates per run: the experiment's episodes / episodes_per_update (validated)."""
  return num_episodes(experiment, config) // int(config.episodes_per_update)


def recipe_config(method: str, cell: Cell, config) -> ml_collections.ConfigDict:
  """The recipe config of `method` on `cell` (one run; the runner vmaps the seeds).

  The horizon study's method configs (horizon_methods.recipe_config: E episodes of one
  length per update, 2 epochs x 2 minibatches, no lr annealing) with the cell's
  environment in place of KeyChain, PPO's entropy bonus and the GRU width from `config`.
  """
  base, recurrent = split_gru(method)
  family, opt = horizon_methods.parse(base)
  if family == "ppo" and opt["critic"] == "oracle":
    raise ConfigError(f"config.methods: {method!r}: the bsuite chains have no oracle "
                      f"feature for an oracle critic")
  per_update = int(config.episodes_per_update)
  if family == "grpo":
    k = opt["group_size"]
    if per_update % k or ((per_update // k) % 2 and per_update // k != 1):
      raise ConfigError(f"config.episodes_per_update: {per_update} must be K = {k} "
                        f"times 1 or an even number of tasks for {method!r}")
  spec = ml_collections.ConfigDict({
      "episodes": per_update, "num_pivotal": 1, "num_actions": 2,
      "hidden_sizes": tuple(config.hidden_sizes), "seeds": int(config.seeds),
      "seed": int(config.seed), "chunk_updates": int(config.chunk_updates)})
  c = horizon_methods.recipe_config(base, cell.episode_len, spec,
                                    float(config.lrs[family]),
                                    num_updates(cell.experiment, config))
  c.env_name = ENV_IDS[cell.experiment]
  c.env_kwargs = ml_collections.ConfigDict(dict(cell.env_kwargs))
  if family == "ppo":
    c.ent_coef = float(config.ppo_ent_coef)
    if opt["critic"] in ("gru", "hist"):
      c.network.gru_size = int(config.gru_size)
  if recurrent:
    c.network.kind, c.network.gru_size = "gru", int(config.gru_size)
  return c


def split_gru(method: str) -> Tuple[str, bool]:
  """(the horizon_methods name, whether a "_gru" suffix asks for a GRU policy)."""
  if method.endswith("_gru") and not method.startswith("ppo"):
    return method[:-len("_gru")], True
  return method, False


def family_of(method: str) -> str:
  return horizon_methods.parse(split_gru(method)[0])[0]
