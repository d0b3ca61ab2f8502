"""The experiments' cells and the methods' recipe configs for the bsuite study.

An experiment is a list of *settings* (chain / memory lengths, distractor counts,
context bits, mapping seeds) and an environment per setting (credit_jax/envs/bsuite.py).
A *cell* is the settings that run in one compiled program, all its settings x seeds
vmapped:

  * bucketed (`config.buckets`, for every family: PPO, GRPO, DQN, REINFORCE take a
    setting per run, see `runner.py`): the settings of one bucket of values (e.g. lengths
    1-10, 12-30, 40-100; mapping seeds all together) in a `PaddedChain`
    (credit_jax/envs/bsuite.py), the swept field data and every episode padded to the
    bucket's longest;
  * per setting (`config.buckets = ()`): one length per cell,
    or for discounting_chain the mapping seeds with the same bonus chain (`mapping_seed
    % 5`, bsuite's own rule: seeds 0, 5, 10, 15 are one environment).

Experiments (bsuite's sweeps: `scoring.SWEEPS`):
  umbrella_length          UmbrellaChain, n_distractor 20, chain_length swept
  umbrella_distract        UmbrellaChain, chain_length 20, n_distractor swept
  memory_len               MemoryChain, num_bits 1, memory_length swept
  memory_size              MemoryChain, memory_length 2, num_bits swept
  discounting_chain        DiscountingChain, mapping seeds 0..19
  discounting_chain_long   beyond bsuite: reward horizons (1, 3, 10, 30, 100, 300, 1000)
                           in episodes of 1000 steps, the bonus on each chain once
                           (mapping seeds 0..6), scored by discounting_chain's formula

Methods: "dqn" (credit_jax/algos/dqn.py without relabeling, bsuite's DQN settings
where they fit a cycle of whole episodes: `dqn_config`), and (names as in
credit_jax/experiments/methods.py) "reinforce",
"reinforce_rtg", "grpo_k<K>", "ppo_<critic>_g<gamma>_l<lambda>" with critic "mlp"
(MLP actor-critic), "gru" (GRU actor-critic, `network.kind = "gru"`) or "hist" (MLP
actor, GRU critic); a "_gru" suffix on a REINFORCE or GRPO name ("grpo_k5_gru") gives
it a GRU policy (`network.kind = "gru"`). Every method sees `episodes_per_update` (E)
whole episodes per update: PPO runs E environments for one episode length per update
(all episodes have a fixed length, so each env ends exactly one episode per update), GRPO
E / K tasks of K, REINFORCE and DQN E episodes; a setting's `NUM_EPISODES` episodes take
NUM_EPISODES / E updates.
"""
from __future__ import annotations

import dataclasses
from typing import Dict, List, Optional, Tuple

import ml_collections

from credit_jax import envs
from credit_jax.addons import curriculum
from credit_jax.algos import dqn
from credit_jax.config import ConfigError
from credit_jax.envs import bsuite as bsuite_envs
from credit_jax.experiments.bsuite import padded
from credit_jax.experiments import methods as horizon_methods

EXPERIMENTS = ("umbrella_length", "umbrella_distract", "memory_len", "memory_size",
               "discounting_chain", "discounting_chain_long")
ENV_IDS = {"umbrella_length": "bsuite/UmbrellaChain-v0",
           "umbrella_distract": "bsuite/UmbrellaChain-v0",
           "memory_len": "bsuite/MemoryChain-v0",
           "memory_size": "bsuite/MemoryChain-v0",
           "discounting_chain": "bsuite/DiscountingChain-v0",
           "discounting_chain_long": "bsuite/DiscountingChain-v0"}
# The one-program versions (padded.py's PaddedChain), registered with credit_jax.envs
# here, so that a recipe config can name them.
PADDED_FACTORIES = {"bsuite/PaddedUmbrellaChain-v0": padded.PaddedUmbrellaChain,
                    "bsuite/PaddedMemoryChain-v0": padded.PaddedMemoryChain,
                    "bsuite/PaddedDiscountingChain-v0": padded.PaddedDiscountingChain}
for _name, _factory in PADDED_FACTORIES.items():
  envs.register(_name, _factory)
PADDED_IDS = {"umbrella_length": "bsuite/PaddedUmbrellaChain-v0",
              "umbrella_distract": "bsuite/PaddedUmbrellaChain-v0",
              "memory_len": "bsuite/PaddedMemoryChain-v0",
              "memory_size": "bsuite/PaddedMemoryChain-v0",
              "discounting_chain": "bsuite/PaddedDiscountingChain-v0",
              "discounting_chain_long": "bsuite/PaddedDiscountingChain-v0"}
# bsuite's name of each experiment's setting (the CSV column its analysis groups by).
SETTING_NAMES = {"umbrella_length": "chain_length", "umbrella_distract": "n_distractor",
                 "memory_len": "memory_length", "memory_size": "num_bits",
                 "discounting_chain": "mapping_seed",
                 "discounting_chain_long": "mapping_seed"}
# The env params field that carries the setting in a padded program.
SWEPT_FIELDS = {"umbrella_length": "chain_length",
                "umbrella_distract": "active_distractors",
                "memory_len": "memory_length", "memory_size": "active_bits",
                "discounting_chain": "mapping_seed",
                "discounting_chain_long": "mapping_seed"}
# How each experiment is scored (bsuite: umbrella_distract as umbrella_length grouped by
# n_distractor, memory_size as memory_len by num_bits).
SCORED_AS = {"umbrella_length": "umbrella_length", "umbrella_distract": "umbrella_length",
             "memory_len": "memory_len", "memory_size": "memory_len",
             "discounting_chain": "discounting_chain",
             "discounting_chain_long": "discounting_chain"}
UMBRELLA_DISTRACT_LENGTH = 20    # bsuite's umbrella_distract chain_length
MEMORY_SIZE_LENGTH = 2           # bsuite's memory_size memory_length
UMBRELLA_LENGTH_DISTRACTORS = 20  # bsuite's umbrella_length n_distractor
# Families whose recipe takes a setting per run (runner.place_settings); others run
# one program per setting.
BUCKETED_FAMILIES = ("ppo", "grpo", "dqn", "reinforce")
# Families whose bucketed program takes its setting through a one-stage curriculum.
CURRICULUM_FAMILIES = ("grpo", "dqn", "reinforce")


@dataclasses.dataclass(frozen=True)
class Cell:
  """The settings of one experiment that run in one compiled program."""
  experiment: str
  settings: Tuple[int, ...]    # the settings it runs (lengths, bits, mapping seeds)
  env_id: str                  # credit_jax.envs.make id
  env_kwargs: tuple            # ((name, value), ...) for credit_jax.envs.make
  episode_len: int             # steps per episode in the program (padded: the longest)
  field: Optional[str] = None  # padded: the env params field each run's setting sets

  @property
  def name(self) -> str:
    """File-name tag: `<experiment>_<setting>`, a bucket `_<first>-<last>`,
    discounting per bonus chain `_bonus<chain>`."""
    if self.field is not None:
      if len(self.settings) == 1:
        return f"{self.experiment}_{self.settings[0]}_padded"
      return f"{self.experiment}_{self.settings[0]}-{self.settings[-1]}"
    if self.experiment.startswith("discounting"):
      return f"{self.experiment}_bonus{self.settings[0]}"
    return f"{self.experiment}_{self.settings[0]}"


def long_horizons(config) -> Tuple[int, ...]:
  return tuple(int(h) for h in config.discounting_long_horizons)


def settings_of(experiment: str, config) -> Tuple[int, ...]:
  """The experiment's settings in `config` (lengths, sizes or mapping seeds)."""
  if experiment == "umbrella_length":
    return tuple(int(v) for v in config.umbrella_lengths)
  if experiment == "umbrella_distract":
    return tuple(int(v) for v in config.umbrella_distractors)
  if experiment == "memory_len":
    return tuple(int(v) for v in config.memory_lengths)
  if experiment == "memory_size":
    return tuple(int(v) for v in config.memory_bits)
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


def episode_len(experiment: str, setting: int, config) -> int:
  """Steps of one real episode of `experiment` at `setting`."""
  if experiment == "umbrella_length":
    return int(setting)
  if experiment == "umbrella_distract":
    return UMBRELLA_DISTRACT_LENGTH
  if experiment == "memory_len":
    return int(setting) + 1
  if experiment == "memory_size":
    return MEMORY_SIZE_LENGTH + 1
  return max(horizons_of(experiment, config))


def _plain_kwargs(experiment: str, setting: int, config) -> dict:
  """The unpadded environment's overrides at one setting."""
  if experiment == "umbrella_length":
    return {"chain_length": setting, "n_distractor": UMBRELLA_LENGTH_DISTRACTORS}
  if experiment == "umbrella_distract":
    return {"chain_length": UMBRELLA_DISTRACT_LENGTH, "n_distractor": setting}
  if experiment == "memory_len":
    return {"memory_length": setting, "num_bits": 1}
  if experiment == "memory_size":
    return {"memory_length": MEMORY_SIZE_LENGTH, "num_bits": setting}
  return {"mapping_seed": setting, "reward_horizons": horizons_of(experiment, config)}


def buckets_of(experiment: str, config) -> List[Tuple[int, ...]]:
  """The experiment's settings grouped into one bucket per program: values in
  (bound[i-1], bound[i]] of `config.buckets` together, each value past the last bound
  alone; mapping seeds all in one."""
  settings = sorted(set(settings_of(experiment, config)))
  if experiment.startswith("discounting"):
    return [tuple(settings)]
  bounds = sorted(int(b) for b in config.buckets)
  groups: Dict[int, List[int]] = {}
  for s in settings:
    above = [b for b in bounds if s <= b]
    groups.setdefault(above[0] if above else -s, []).append(s)
  return [tuple(v) for _, v in sorted(groups.items(), key=lambda kv: kv[1][0])]


def padded_cell(experiment: str, settings: Tuple[int, ...], config) -> Cell:
  """One program for `settings` of `experiment`: a PaddedChain padded to the longest."""
  top = max(settings)
  kwargs = _plain_kwargs(experiment, top, config)
  field = SWEPT_FIELDS[experiment]
  if experiment == "umbrella_distract":
    kwargs["active_distractors"] = top
  if experiment == "memory_size":
    kwargs["active_bits"] = top
  pad_to = max(episode_len(experiment, s, config) for s in settings)
  kwargs.update(pad_to=pad_to, field=field)
  return Cell(experiment, tuple(settings), PADDED_IDS[experiment],
              tuple(sorted(kwargs.items())), pad_to, field)


def cells_of(experiment: str, config, method: Optional[str] = None) -> List[Cell]:
  """The experiment's cells for `method` (None: as PPO), shortest episodes first."""
  family = family_of(method) if method else "ppo"
  if tuple(config.buckets) and family in BUCKETED_FAMILIES:
    return [padded_cell(experiment, b, config) for b in buckets_of(experiment, config)]
  settings = settings_of(experiment, config)
  if not experiment.startswith("discounting"):
    return [Cell(experiment, (n,), ENV_IDS[experiment],
                 tuple(sorted(_plain_kwargs(experiment, n, config).items())),
                 episode_len(experiment, n, config))
            for n in sorted(set(settings))]
  horizons = horizons_of(experiment, config)
  chains = len(horizons)
  cells = []
  for bonus in sorted({m % chains for m in settings}):
    seeds = tuple(m for m in settings if m % chains == bonus)
    kwargs = (("mapping_seed", bonus), ("reward_horizons", tuple(horizons)))
    cells.append(Cell(experiment, seeds, ENV_IDS[experiment], kwargs,
                      max(horizons)))
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
  if method == "dqn":
    return dqn_config(cell, config)
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
  c.env_name = cell.env_id
  c.env_kwargs = ml_collections.ConfigDict(dict(cell.env_kwargs))
  if cell.field is not None and family in CURRICULUM_FAMILIES:
    _setting_curriculum(c, cell)
  if family == "ppo":
    c.ent_coef = float(config.ppo_ent_coef)
    if opt["critic"] in ("gru", "hist"):
      c.network.gru_size = int(config.gru_size)
  if recurrent:
    c.network.kind, c.network.gru_size = "gru", int(config.gru_size)
  return c


def _setting_curriculum(c: ml_collections.ConfigDict, cell: Cell) -> None:
  """A one-stage fixed curriculum on the swept field: its stage value rides in
  TrainState.aux["curriculum"]["values"], which runner.place_settings sets per run."""
  curriculum.add_config(c)
  c.curriculum.kind, c.curriculum.param = "fixed", cell.field
  c.curriculum.stages, c.curriculum.stage_updates = (max(cell.settings),), ()


def dqn_config(cell: Cell, config) -> ml_collections.ConfigDict:
  """DQN's recipe config on `cell` (one run): double DQN without relabeling
  (`relabel_weight` 0), rewards as the chain gives them (offset 0, targets not clipped),
  bsuite's DQN agent's settings where they carry over (`config.dqn`: epsilon 0.05,
  batch 32, replay 10,000, Adam at `config.lrs.dqn` = 1e-3, gamma 0.99, MLP
  `config.hidden_sizes` = bsuite's (64, 64)); a cycle collects `episodes_per_update`
  whole episodes, then takes one gradient step per `config.dqn.steps_per_grad` steps
  the cycle computed (bsuite: one per step) and moves the target network by
  `config.dqn.target_tau` (1: a hard copy per cycle; bsuite copies every 4 steps)."""
  c = dqn.default_config()
  c.env_name = cell.env_id
  c.env_kwargs = ml_collections.ConfigDict(dict(cell.env_kwargs))
  per_update, d = int(config.episodes_per_update), config.dqn
  c.relabel_weight, c.reward_offset, c.clip_target = 0.0, 0.0, False
  c.num_envs, c.horizon = per_update, int(cell.episode_len)
  c.num_updates = num_updates(cell.experiment, config)
  c.eval_envs = 1                 # greedy_success is not scored; keep it cheap
  c.buffer_size, c.batch_size = int(d.buffer_size), int(d.batch_size)
  c.grad_steps = max(1, per_update * int(cell.episode_len) // int(d.steps_per_grad))
  c.lr, c.gamma, c.epsilon = float(config.lrs["dqn"]), float(d.gamma), float(d.epsilon)
  c.target_tau = float(d.target_tau)
  c.network.hidden_sizes = tuple(config.hidden_sizes)
  c.network.activation = "relu"
  c.seed, c.chunk_updates = int(config.seed), int(config.chunk_updates)
  if cell.field is not None:
    _setting_curriculum(c, cell)
  return c


def split_gru(method: str) -> Tuple[str, bool]:
  """(the horizon_methods name, whether a "_gru" suffix asks for a GRU policy)."""
  if method.endswith("_gru") and not method.startswith("ppo"):
    return method[:-len("_gru")], True
  return method, False


def family_of(method: str) -> str:
  if method == "dqn":
    return "dqn"
  return horizon_methods.parse(split_gru(method)[0])[0]
