"""HCA and COCOA as hooks: a hindsight model trained online beside the policy, its credit
in place of the recipe's advantages (the `advantages` estimator slot).

`config.hca` / `config.cocoa` (`add_config`): `enabled`; the model (`model`: "mlp", an
MLP of `hidden_sizes` on [o, u], "gated", COCOA's gated hypernetwork
`nets.credit_models.GatedHindsightModel` of width `hidden_sizes[0]`, or "tabular",
COCOA only, a table over the environment's one-hot observation rows and the reward
classes, `nets.credit_models.TabularHindsightModel`; `policy_prior`: h's
logits are the policy's log-probabilities plus the network's output,
`Hindsight.hindsight_logits` says why);
its training (`lr`, traced as `hca.lr` / `cocoa.lr`; `train_steps` full-batch Adam
steps per update, `weight_decay` AdamW's decoupled decay, `max_grad_norm` the clip, 0
none; `fit_first`: the order, below); HCA's `z_scale` (the return-to-go is fed to the
model times this);
COCOA's `reward_values` (the nonzero rewards the environment pays, one outcome class
each; `reward_values_of` knows KeyChain's and the linear key-to-door's).

Each update (`Hindsight.step`): by default the credit of the new episodes is computed
with the model as it was *before* seeing them (a model fitted to the very episodes it
judges would memorise their actions: `pi / h` would shrink towards `pi` of the action
taken and bias the estimate), then the model trains on them. `fit_first = True` is
COCOA's code's order (seijin-kobayashi/cocoa `ccoa/experiment.py`: the model takes its
steps on the batch, then credits it). HCA's credit is a per-step advantage
`[T, B]` for the action taken; COCOA's is a `contributions.CocoaCredit`, which the
policy loss consumes with `contributions.all_action_loss` (or its clipped form): the
estimator credits every action, not only the sampled one, so a recipe taking COCOA
needs its loss to read per-action credit (the one addition to the slot's contract).

Both need the policy's probabilities of every action at each step: the context provides
`logits(params, traj) -> [T, B..., A]` (a sequence network replays the episodes), and
the recipe's discount `context.discount(hp)` (GRPO: 1).

Metrics (`hca_` / `cocoa_` prefix): `loss` (the model's cross entropy before its update),
`credit_mass_pivotal` (the share of the credit on `info["pivotal"]` steps, where the
environment marks them: `diagnostics.credit_accuracy` of |A_t| for HCA, of
`contributions.step_credit_mass` for COCOA), `ratio_mean` (HCA: mean `pi / h` of the
action taken; COCOA: mean |w| over the steps and classes).
"""
from __future__ import annotations

from typing import Any, Dict, Sequence, Tuple

import jax
from jax import Array
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from credit_jax import diagnostics, returns
from credit_jax.addons import contributions as cb
from credit_jax.addons import hooks
from credit_jax.config import require, require_range
from credit_jax.nets import tabular as nets_tabular
from credit_jax.nets.credit_models import (GatedHindsightModel, HindsightModel,
                                           TabularHindsightModel)

__all__ = ["CocoaFeature", "HcaFeature", "Hindsight", "KINDS", "add_config",
           "reward_values_of"]

KINDS = ("hca", "cocoa")
MODELS = ("mlp", "gated", "tabular")


def add_config(c: ml_collections.ConfigDict, kind: str, **overrides
               ) -> ml_collections.ConfigDict:
  """Adds an enabled `config.hca` or `config.cocoa` block (`kind`) to `c`."""
  if kind not in KINDS:
    raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
  h = ml_collections.ConfigDict()
  h.enabled = True            # the hindsight credit replaces the recipe's advantages
  h.hidden_sizes = (64, 64)   # the hindsight model's MLP
  # HCA's model sees every step but learns from the rare successful returns; it needs
  # more and larger steps to keep up with the policy than COCOA's, whose loss weighs
  # only the steps followed by a reward.
  h.lr = 1e-2 if kind == "hca" else 3e-3   # its Adam step size (traced: <kind>.lr)
  h.train_steps = 8 if kind == "hca" else 4   # its full-batch steps per update
  h.policy_prior = True       # h's logits = log pi + the network's (Bayes' rule)
  h.model = "mlp"             # mlp | gated (COCOA's hypernetwork, width hidden_sizes[0])
                              # | tabular (COCOA: a table over obs rows and classes)
  h.fit_first = False         # True: train on the batch, then credit it (COCOA's order)
  h.weight_decay = 0.0        # AdamW's decoupled weight decay of the model
  h.max_grad_norm = 1.0       # the model's gradient clip (0: none)
  if kind == "hca":
    h.z_scale = 1.0           # the return-to-go enters the model times this
  else:
    h.reward_values = ()      # the nonzero rewards paid, one class each; () = the env's
  for k, v in overrides.items():
    h[k] = v
  c[kind] = h
  return c


def reward_values_of(env, env_params) -> Tuple[float, ...]:
  """The nonzero reward values of the environments that declare them: KeyChain's 1.0,
  the linear key-to-door's and COCOA's corridor's two apple values and treasure (scaled);
  ValueError else."""
  name = getattr(env, "name", type(env).__name__)
  inner = env
  while hasattr(inner, "inner") and not hasattr(inner, "num_pivotal"):
    inner = inner.inner
  if getattr(inner, "name", "") == "KeyChain-v0":
    return (1.0,)
  if getattr(inner, "name", "") in ("LinearKeyToDoor-v0", "ConveyorTreasure-v0"):
    s = float(env_params.reward_scale)
    return (float(env_params.apple_low) * s, float(env_params.apple_high) * s,
            float(env_params.treasure_reward) * s)
  raise ValueError(f"set reward_values: {name} does not declare its reward values")


class Hindsight:
  """The hindsight model of one kind (module doc) as pure functions.

  `init(key) -> carry`; `credit(params, logits [T, B, A], traj, gamma) -> (credit,
  extras)`; `train(carry, traj, gamma, lr, key, logits) -> (carry, loss)`;
  `step(carry, logits, traj, gamma, lr, key) -> (credit, carry, metrics)`; `logits` are
  the policy's at the batch's observations.
  """

  def __init__(self, kind: str, cfg, num_actions: int, obs_size: int,
               reward_values: Sequence[float] = (), groups=None):
    if kind not in KINDS:
      raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    self.kind, self.num_actions, self.obs_size = kind, int(num_actions), int(obs_size)
    self.values = tuple(float(v) for v in reward_values)
    if kind == "cocoa" and not self.values:
      raise ValueError("COCOA needs the environment's nonzero reward values")
    self.outcome_size = 1 if kind == "hca" else len(self.values)
    self.z_scale = float(cfg.get("z_scale", 1.0))
    self.policy_prior = bool(cfg.get("policy_prior", True))
    model = cfg.get("model", "mlp")
    if model == "tabular" and (kind != "cocoa" or groups is None):
      raise ValueError(f"{kind}.model = 'tabular' needs COCOA's discrete outcomes and an "
                       f"environment that names its one-hot observation parts "
                       f"(env.onehot_groups)")
    self.gated = model in ("gated", "tabular")   # the net also takes the policy's logits
    if model == "tabular":
      self.net = TabularHindsightModel(self.num_actions, tuple(map(tuple, groups)),
                                       self.outcome_size)
    elif model == "gated":
      self.net = GatedHindsightModel(self.num_actions, int(tuple(cfg.hidden_sizes)[0]))
    else:
      self.net = HindsightModel(self.num_actions, tuple(cfg.hidden_sizes))
    self.tx = optax.scale_by_adam()
    self.train_steps = int(cfg.train_steps)
    self.fit_first = bool(cfg.get("fit_first", False))
    self.weight_decay = float(cfg.get("weight_decay", 0.0))
    self.max_grad_norm = float(cfg.get("max_grad_norm", 1.0))
    self.owns = (f"{kind}_params", f"{kind}_opt")

  def init(self, key) -> Dict[str, Any]:
    extra = (jnp.zeros((1, self.num_actions)),) if self.gated else ()
    params = self.net.init(key, jnp.zeros((1, self.obs_size)),
                           jnp.zeros((1, self.outcome_size)), *extra)
    return {self.owns[0]: params, self.owns[1]: self.tx.init(params)}

  def _obs(self, traj) -> Array:
    return jnp.reshape(traj.obs, np.shape(traj.actions) + (-1,)).astype(jnp.float32)

  def _z(self, traj, gamma) -> Array:
    rewards = jnp.where(traj.valid, traj.rewards, 0.0)
    return returns.discounted_returns(rewards, jnp.asarray(gamma, jnp.float32),
                                      terminated=traj.dones & traj.valid)

  def hindsight_logits(self, params, traj, gamma, pi_logits: Array) -> Array:
    """HCA: [T, B, A] logits of h(. | o_t, Z_t); COCOA: [T, B, M, A] of h(. | o_t, m).

    With `policy_prior` (the default) the network's output is added to the policy's
    log-probabilities `pi_logits [T, B, A]` (held constant): Bayes' rule, `log h(a | o, u)
    = log pi(a | o) + log P(u | o, a) - log P(u | o)`, so the network learns only how
    the outcome's likelihood depends on the action. An outcome the action does not
    influence then gives `h = pi` (no credit) however the policy has moved since the
    model last trained; a plain classifier lags the policy instead, and its lag times
    every unrelated reward (a corridor's apples) becomes credit.
    """
    obs = self._obs(traj)
    prior = jax.lax.stop_gradient(jax.nn.log_softmax(pi_logits, axis=-1))
    if self.kind == "hca":
      z = self._z(traj, gamma)[..., None] * self.z_scale
      out = self.net.apply(params, obs, z, *((prior,) if self.gated else ()))
      return out + prior if self.policy_prior else out
    m = self.outcome_size
    obs_m = jnp.broadcast_to(obs[:, :, None], obs.shape[:2] + (m, obs.shape[-1]))
    hot = jnp.broadcast_to(jnp.eye(m, dtype=jnp.float32), obs.shape[:2] + (m, m))
    prior_m = jnp.broadcast_to(prior[:, :, None], obs.shape[:2] + (m, prior.shape[-1]))
    out = self.net.apply(params, obs_m, hot, *((prior_m,) if self.gated else ()))
    return out + prior[:, :, None] if self.policy_prior else out

  def _classes(self, traj):
    return cb.reward_classes(jnp.where(traj.valid, traj.rewards, 0.0), self.values)

  def loss(self, params, traj, gamma, pi_logits) -> Array:
    logits = self.hindsight_logits(params, traj, gamma, pi_logits)
    if self.kind == "hca":
      return cb.hca_loss(logits, traj.actions, traj.valid)
    _, counts = cb.future_by_class(traj.rewards, self._classes(traj), self.outcome_size,
                                   gamma, traj.dones, traj.valid)
    return cb.cocoa_loss(logits, traj.actions, counts)

  def credit(self, params, logits: Array, traj, gamma):
    """HCA: the advantages [T, B]; COCOA: a `CocoaCredit`. Also (mass [T, B], ratio [])."""
    pi = jax.nn.softmax(logits, axis=-1)
    h = jax.nn.softmax(self.hindsight_logits(params, traj, gamma, logits), axis=-1)
    if self.kind == "hca":
      take = lambda p: jnp.take_along_axis(p, traj.actions[..., None].astype(jnp.int32),
                                           -1)[..., 0]
      pi_t, h_t = take(pi), take(h)
      adv = cb.hca_advantages(pi_t, h_t, self._z(traj, gamma), traj.valid)
      ratio = jnp.sum(jnp.where(traj.valid, pi_t / jnp.maximum(h_t, cb.H_FLOOR), 0.0)) \
          / jnp.maximum(jnp.sum(traj.valid), 1)
      return adv, jnp.abs(adv), ratio
    credit = cb.cocoa_credit(pi, h, traj.rewards, self._classes(traj), gamma, traj.dones,
                             traj.valid)
    mass = jnp.where(traj.valid, cb.step_credit_mass(pi, credit.immediate,
                                                     credit.contributions), 0.0)
    w_abs = jnp.mean(jnp.abs(credit.coefficients), axis=(2, 3))
    ratio = jnp.sum(jnp.where(traj.valid, w_abs, 0.0)) / jnp.maximum(
        jnp.sum(traj.valid), 1)
    return credit, mass, ratio

  def train(self, carry, traj, gamma, lr, key, pi_logits):
    del key   # full-batch steps: nothing to draw
    params, opt_state = carry[self.owns[0]], carry[self.owns[1]]
    grad_fn = jax.value_and_grad(self.loss)

    def body(state, _):
      params, opt_state = state
      loss, grads = grad_fn(params, traj, gamma, pi_logits)
      if self.max_grad_norm > 0:
        grads = optax.clip_by_global_norm(self.max_grad_norm).update(
            grads, optax.EmptyState())[0]
      updates, opt_state = self.tx.update(grads, opt_state, params)
      wd = self.weight_decay   # AdamW: the decay joins the step, scaled by lr
      return (jax.tree.map(lambda p, u: p - lr * (u + wd * p), params, updates),
              opt_state), loss

    (params, opt_state), losses = jax.lax.scan(body, (params, opt_state), None,
                                               length=self.train_steps)
    return {self.owns[0]: params, self.owns[1]: opt_state}, losses[0]

  def step(self, carry, logits, traj, gamma, lr, key):
    if self.fit_first:
      carry, loss = self.train(carry, traj, gamma, lr, key, logits)
    credit, mass, ratio = self.credit(carry[self.owns[0]], logits, traj, gamma)
    if not self.fit_first:
      carry, loss = self.train(carry, traj, gamma, lr, key, logits)
    p = self.kind
    metrics = {f"{p}_loss": loss, f"{p}_ratio_mean": ratio}
    pivotal = traj.info.get("pivotal") if isinstance(traj.info, dict) else None
    if pivotal is not None:
      metrics[f"{p}_credit_mass_pivotal"] = diagnostics.credit_accuracy(
          mass, pivotal, traj.valid)
    return credit, carry, metrics


class _HindsightFeature(hooks.Feature):
  kind = ""
  estimator = True
  traced = ("lr",)

  @property
  def name(self):
    return self.kind

  @property
  def field(self):
    return f"{self.kind}.enabled"

  def validate(self, config, recipe: hooks.Recipe) -> None:
    h = config[self.kind]
    require_range(h, "train_steps", 1, prefix=f"{self.kind}.")
    require_range(h, "lr", 0.0, strict=True, prefix=f"{self.kind}.")
    require(h.get("model", "mlp") in MODELS, f"{self.kind}.model",
            f"must be one of {MODELS}, got {h.get('model')!r}")
    require(h.get("model", "mlp") != "tabular" or self.kind == "cocoa",
            f"{self.kind}.model", "'tabular' is COCOA's only: HCA's outcome (the "
            "return-to-go) is continuous")
    for f in ("weight_decay", "max_grad_norm"):
      require(float(h.get(f, 0.0)) >= 0, f"{self.kind}.{f}", f"must be >= 0, got {h[f]}")
    require(recipe.rollout != hooks.CONTINUING, f"{self.kind}.enabled",
            "the outcomes that follow a step must lie in its window: whole episodes "
            "(REINFORCE, GRPO, or PPO with rollout = 'episodes')")
    require(int(config.get("history_window", 0) or 0) == 0, "history_window",
            "the hindsight model reads the observations as the environment gives them")

  def bind(self, context: hooks.Context) -> hooks.Bound:
    return _HindsightBound(self.kind, context)


class HcaFeature(_HindsightFeature):
  kind = "hca"


class CocoaFeature(_HindsightFeature):
  kind = "cocoa"


class _HindsightBound(hooks.Bound):
  init_key = True

  def __init__(self, kind: str, context: hooks.Context):
    cfg = context.config[kind]
    env, params = context.env, context.env_params
    values = tuple(cfg.get("reward_values", ()) or ())
    if kind == "cocoa" and not values:
      values = reward_values_of(env, params)
    groups = None
    if cfg.get("model", "mlp") == "tabular":   # the rows the policy's table reads
      net = context.config.get("network", {})
      groups = nets_tabular.env_groups(env, tuple(net.get("table_groups", ())),
                                       f"{kind}.model = 'tabular'")
    self.model = Hindsight(kind, cfg, env.num_actions,
                           int(np.prod(env.observation_space(params).shape)), values, groups)
    self.owns = self.model.owns
    self.logits = context.logits
    self.discount = context.discount
    self.kind = kind
    self.advantages = self._advantages

  def init(self, key):
    return self.model.init(key)

  def _advantages(self, carry, inputs: hooks.EstimatorInput):
    traj = inputs.traj
    flat = lambda x: jnp.reshape(x, np.shape(x)[:1] + (-1,) + tuple(np.shape(x)[
        np.ndim(traj.actions):]))
    batch_shape = np.shape(traj.actions)
    flat_traj = jax.tree.map(flat, traj._replace(rewards=inputs.signal.rewards))
    logits = flat(jax.lax.stop_gradient(self.logits(inputs.params, traj)))
    credit, carry, metrics = self.model.step(carry, logits, flat_traj,
                                             self.discount(inputs.hp),
                                             inputs.hp[f"{self.kind}.lr"], inputs.key)
    unflat = lambda x: jnp.reshape(x, batch_shape + tuple(np.shape(x)[2:]))
    return jax.tree.map(unflat, credit), carry, metrics

