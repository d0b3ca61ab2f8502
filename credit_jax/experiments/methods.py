"""Method names as recipe configs, shared by the studies that compare recipes on KeyChain-v0
and bsuite's chains: the horizon study (experiments/horizon/), bsuite (experiments/bsuite/)
and learned credit (experiments/learned_credit/).

A method is a name; `recipe_config(name, horizon, spec)` turns it into the config of a
recipe in `credit_jax/algos/` training on KeyChain-v0 (T = `horizon`, k pivotal steps,
A actions, cues at the step). Every method sees `spec.episodes` episodes of T steps per
update, so an update costs the same `episodes * T` env steps for all of them, and every
policy is one network shared across the steps (an MLP of the observation, or a GRU over
the episode), so the noise of the T - k distractor steps lands on the parameters that
answer the pivotal ones.

Names:
  "reinforce"            REINFORCE, terminal reward on every step, leave-one-out mean
                         baseline, one gradient step per update. On KeyChain the only
                         reward is the last step's, so at gamma = 1 returns-to-go equal
                         the terminal return at every step: "reinforce_rtg" is the same
                         estimator and is kept only as a name for that check.
  "reinforce_rtg"        REINFORCE with returns-to-go (gamma = 1), same baseline.
  "grpo_k<K>"            GRPO, groups of K rollouts per task, episodes / K tasks.
  "ppo_<critic>_g<gamma>_l<lambda>"
                         PPO + GAE(gamma, lambda), num_steps = T (one episode per env
                         and update). Critics: "mlp" (MLP actor and MLP critic of the
                         observation), "gru" (a GRU actor-critic, network.kind="gru"),
                         "hist" (MLP actor, independent GRU critic over observations,
                         previous actions and rewards: network.critic_kind="gru") and
                         "oracle" (MLP actor, MLP critic that also sees KeyChain's
                         `oracle_feature`: "all pivotal steps right so far" and the share
                         of pivotal steps left; network.critic_oracle=True). See
                         credit_jax/algos/ppo_agent.py (the "split" arrangement).
"""
from __future__ import annotations

import re
from typing import Tuple

import ml_collections

from credit_jax.algos import ConfigError, grpo, ppo, reinforce

PPO_CRITICS = ("mlp", "gru", "hist", "oracle")
_PPO_RE = re.compile(r"^ppo_([a-z]+)_g([0-9.]+)_l([0-9.]+)$")
_GRPO_RE = re.compile(r"^grpo_k([0-9]+)$")


def parse(name: str) -> Tuple[str, dict]:
  """`(family, options)` of a method name; raises ConfigError for an unknown one."""
  if name in ("reinforce", "reinforce_rtg"):
    return "reinforce", {"credit": "terminal" if name == "reinforce" else "rtg"}
  m = _GRPO_RE.match(name)
  if m:
    k = int(m.group(1))
    if k < 2:
      raise ConfigError(f"config.methods: {name!r}: a GRPO group needs K >= 2")
    return "grpo", {"group_size": k}
  m = _PPO_RE.match(name)
  if m:
    critic, gamma, lam = m.group(1), float(m.group(2)), float(m.group(3))
    if critic not in PPO_CRITICS:
      raise ConfigError(f"config.methods: {name!r}: critic {critic!r} is not one of "
                        f"{PPO_CRITICS}")
    if not (0.0 <= gamma <= 1.0 and 0.0 <= lam <= 1.0):
      raise ConfigError(f"config.methods: {name!r}: gamma and lambda must lie in [0, 1]")
    return "ppo", {"critic": critic, "gamma": gamma, "gae_lambda": lam}
  raise ConfigError(f"config.methods: unknown method {name!r} (reinforce, reinforce_rtg, "
                    f"grpo_k<K>, ppo_<critic>_g<gamma>_l<lambda>)")


def recipe_config(name: str, horizon: int, spec, lr: float, num_updates: int
                  ) -> ml_collections.ConfigDict:
  """The recipe config of method `name` at episode length `horizon`.

  Args:
    spec: the study config's fields `episodes` (per update), `num_pivotal`,
      `num_actions`, `hidden_sizes`, `seeds`, `seed`, `chunk_updates`.
    lr: the method's learning rate; num_updates: updates per seed.
  """
  family, opt = parse(name)
  episodes = int(spec.episodes)
  if family == "reinforce":
    c = reinforce.default_config()
    c.credit, c.baseline, c.gamma = opt["credit"], "mean", 1.0
    c.num_envs, c.num_updates = episodes, int(num_updates)
  elif family == "grpo":
    c = grpo.default_config()
    k = opt["group_size"]
    if episodes % k or (episodes // k) % 2 and episodes // k != 1:
      raise ConfigError(f"config.episodes: {episodes} must be K = {k} times 1 or an even "
                        f"number of tasks for {name!r}")
    c.group_size, c.num_tasks = k, episodes // k
    c.num_minibatches = 2 if c.num_tasks % 2 == 0 else 1
    c.update_epochs, c.num_updates = 2, int(num_updates)
  else:
    c = ppo.default_config()
    c.num_envs, c.num_steps = episodes, int(horizon)
    c.total_timesteps = int(num_updates) * episodes * int(horizon)
    c.update_epochs, c.num_minibatches = 2, 2
    c.gamma, c.gae_lambda = opt["gamma"], opt["gae_lambda"]
    c.ent_coef, c.anneal_lr, c.max_grad_norm = 0.0, False, 1.0
    if opt["critic"] == "gru":
      c.network.kind, c.network.gru_size = "gru", 64
    elif opt["critic"] == "hist":
      c.network.critic_kind, c.network.gru_size = "gru", 64
    elif opt["critic"] == "oracle":
      c.network.critic_kind, c.network.critic_oracle = "mlp", True
  c.env_name = "KeyChain-v0"
  c.env_kwargs = ml_collections.ConfigDict(
      {"horizon": int(horizon), "num_pivotal": int(spec.num_pivotal),
       "num_actions": int(spec.num_actions), "cue_delay": 0})
  if family != "ppo":
    c.horizon = int(horizon)
  c.lr = float(lr)
  c.network.hidden_sizes = tuple(spec.hidden_sizes)
  c.seeds, c.seed = int(spec.seeds), int(spec.seed)
  c.chunk_updates = int(spec.chunk_updates)
  c.checkpoint_every = 0
  return c


def measures_gae(name: str) -> bool:
  """Whether method `name` can report the GAE-gradient measurement (PPO, MLP actor)."""
  family, opt = parse(name)
  return family == "ppo" and opt["critic"] != "gru"
