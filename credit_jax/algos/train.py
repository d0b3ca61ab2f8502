"""Pieces every recipe shares: the shared config fields and their checks, the train
state, the `Train` object, environments and networks from config (the optimiser and
minibatch epochs: `optim.py`, re-exported here; episode statistics: `credit_jax/episodes.py`).

The recipe contract (what a recipe module exports, its metrics, hparams vs static fields)
is written down in docs/RECIPES.md.

`Train.init` and `Train.run` expose the two halves so the host can run training in
compiled chunks of U updates (progress, checkpoints) with the state carried between them.
Because the RNG key lives in the state, chunked and unchunked runs produce the same numbers.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Mapping, NamedTuple, Optional, Tuple

import flax.struct
import jax
from jax import Array
import jax.numpy as jnp
import ml_collections

from credit_jax.addons import features, hooks
from credit_jax.config import ConfigError, require, require_one_of, require_range
from credit_jax import envs, nets
from credit_jax.envs.base import MAX_STEPS
from credit_jax.algos.optim import (OPTIMIZERS, Optimizer, learning_rate,  # noqa: F401
                                    make_optimizer, minibatch_epochs, shuffle_indices)

Hparams = Dict[str, Array]
Metrics = Dict[str, Array]


# --- the config fields every recipe shares ------------------------------------------------

_ACTIVATIONS = ("tanh", "relu", "gelu", "silu")


def base_config() -> ml_collections.ConfigDict:
  """The fields every recipe's `default_config()` starts from (each recipe overrides some).

  Recipe-specific fields (batch shapes, loss coefficients) are added by the recipe.
  """
  c = ml_collections.ConfigDict()
  c.algo = ""                     # recipe name, a key of credit_jax.algos.RECIPES
  c.env_name = "KeyChain-v0"      # any id of credit_jax.envs.registered_envs()
  c.env_kwargs = ml_collections.ConfigDict()  # overrides passed to envs.make
  c.history_window = 0            # >0: observe the last W observations (memory); 0: off
  c.seed = 0                      # base RNG seed; seed i of a multi-seed run is split from it
  c.seeds = 1                     # seeds trained side by side in one compiled call (vmap)

  c.optimizer = "adam"            # adam | adamw | sgd; gradients are clipped first
  c.lr = 3e-3                     # learning rate (a traced hparam: sweepable by vmap)
  c.anneal_lr = False             # linearly anneal lr to 0 over the run (per update)
  c.adam_eps = 1e-5               # epsilon of adam / adamw
  c.weight_decay = 0.0            # decoupled weight decay of adamw (others: must be 0)
  c.momentum = 0.0                # momentum of sgd (0: plain sgd; others: must be 0)
  c.max_grad_norm = 1.0           # global gradient-norm clip (a traced hparam)

  c.network = ml_collections.ConfigDict()
  c.network.hidden_sizes = (64, 64)  # MLP widths of each torso
  c.network.activation = "tanh"      # tanh | relu | gelu | silu
  c.network.shared_torso = False     # one torso for policy and value heads, or one each

  c.chunk_updates = 10            # updates per compiled call (one progress line each)
  c.checkpoint_every = 0          # updates between checkpoints (k * chunk_updates); 0: at the end
  c.keep_checkpoints = 3          # newest checkpoints kept
  return c


# The groups of fields every recipe shares (`base_config`): no feature claims them.
_SHARED_BLOCKS = ("env_kwargs", "network")


def checkpoint_at_end(c: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """Sets `c` to checkpoint once, at the end of training, and keep that one; returns `c`
  (recipes whose runs are short, or swept by the hundred)."""
  c.checkpoint_every = 0          # updates between checkpoints (k * chunk_updates); 0: at the end
  c.keep_checkpoints = 1          # newest checkpoints kept
  return c


def add_network_kind(c: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """Adds `c.network.kind` ("mlp") and the sequence networks' fields, for the recipes that
  can train a GRU or transformer (PPO, GRPO, REINFORCE; credit_jax/nets/sequence.py)."""
  c.network.kind = "mlp"             # mlp | tabular | linear (nets/tabular.py) | gru | transformer
  c.network.min_prob = 0.0           # tabular | linear: entropy floor, each action's least probability
  c.network.table_groups = ()        # tabular | linear: which env.onehot_groups it reads (indices; (): all)
  c.network.gru_size = 64            # GRU state size (kind "gru")
  c.network.d_model = 32             # transformer width (kind "transformer")
  c.network.num_heads = 2            # transformer attention heads
  c.network.num_layers = 1           # transformer blocks
  c.network.max_len = 64             # transformer KV-cache slots = attention window
  return c


def keychain_env(c: ml_collections.ConfigDict, horizon: int, num_pivotal: int,
                 num_actions: int = 4) -> ml_collections.ConfigDict:
  """Sets `c` to train on KeyChain-v0 with episodes of `horizon` steps (also the rollout
  length `c.horizon`), `num_pivotal` pivotal steps and `num_actions` actions."""
  c.env_name = "KeyChain-v0"      # any id of credit_jax.envs.registered_envs()
  c.env_kwargs.horizon = horizon  # KeyChain episode length T
  c.env_kwargs.num_pivotal = num_pivotal  # pivotal steps k
  c.env_kwargs.num_actions = num_actions  # actions A (random success (1/A)^k)
  c.env_kwargs.cue_delay = 0      # steps between a cue and its pivotal step
  c.horizon = horizon             # rollout steps per episode (>= the env's episode length)
  return c


def _validate_shared(config) -> None:
  req = require
  require_range(config, "seeds", 1)
  optimizer = config.get("optimizer", "adam")
  require_one_of(optimizer, "optimizer", OPTIMIZERS)
  req(config.lr >= 0.0, "lr", f"learning rate must be >= 0, got {config.lr}")
  require_range(config, ("max_grad_norm", "adam_eps"), 0.0, strict=True)
  decay, momentum = config.get("weight_decay", 0.0), config.get("momentum", 0.0)
  req(decay >= 0.0 and (decay == 0.0 or optimizer == "adamw"), "weight_decay",
      f"must be >= 0, and 0 unless optimizer='adamw'; got {decay} with {optimizer!r}")
  req(0.0 <= momentum < 1.0 and (momentum == 0.0 or optimizer == "sgd"), "momentum",
      f"must lie in [0, 1), and be 0 unless optimizer='sgd'; got {momentum} with "
      f"{optimizer!r}")
  req(int(config.history_window) >= 0, "history_window",
      f"must be >= 0 (0: no history), got {config.history_window}")
  sizes = tuple(config.network.hidden_sizes)
  req(len(sizes) >= 1 and all(int(s) >= 1 for s in sizes), "network.hidden_sizes",
      f"must be a non-empty list of positive ints, got {sizes}")
  req(config.network.activation in _ACTIVATIONS, "network.activation",
      f"must be tanh, relu, gelu or silu, got {config.network.activation!r}")
  require_range(config, "chunk_updates", 1)
  req(int(config.checkpoint_every) >= 0, "checkpoint_every",
      f"must be >= 0 (0: only at the end), got {config.checkpoint_every}")
  req(config.checkpoint_every % config.chunk_updates == 0, "checkpoint_every",
      f"{config.checkpoint_every} must be a multiple of chunk_updates="
      f"{config.chunk_updates} (checkpoints are taken between compiled chunks)")
  require_range(config, "keep_checkpoints", 1)


def _validate_env(config):
  """`(made, env, env_params)`: `envs.make`'s `(env, env_params)` and `make_env`'s."""
  try:
    envs.resolve(config.env_name)   # an unknown id: "did you mean", the ids listed
  except ValueError as e:
    raise ConfigError(f"config.env_name: {e}") from None
  try:
    made = envs.make(config.env_name, **dict(config.get("env_kwargs", {}) or {}))
    env, env_params = make_env(config, made)
  except ConfigError:   # a config wrapper's own check (features.CONFIG_WRAPPERS)
    raise
  except ValueError as e:
    raise ConfigError(
        f"config.env_kwargs: cannot make {config.env_name!r} with "
        f"{dict(config.env_kwargs)}: {e}") from e
  return made, env, env_params


def _unwrapped(env):
  """The environment inside credit_jax's (`inner`) and gymnax's (`_env`) wrappers."""
  for _ in range(16):
    inner = getattr(env, "inner", None) or getattr(env, "_env", None)
    if inner is None:
      break
    env = inner
  return env


def episode_limit(env, env_params) -> Optional[int]:
  """Steps an episode of `env` can last: a fixed-length environment's `horizon`, else
  its time limit `max_steps_in_episode` (through wrappers' `inner` params), or None when
  it has neither (bsuite's chains set no limit: they end themselves)."""
  horizon = getattr(_unwrapped(env), "horizon", None)
  if isinstance(horizon, int):
    return horizon
  while env_params is not None:
    limit = getattr(env_params, "max_steps_in_episode", None)
    if limit is not None:
      return int(limit) if int(limit) < MAX_STEPS else None
    env_params = getattr(env_params, "inner", None)
  return None


def episode_steps(config, env, env_params) -> int:
  """Env steps one episode of an episodic recipe's rollout can take: `config.horizon`,
  or the episode's length where that is shorter (the rollout's later steps are padding
  after the episode's end, not env steps)."""
  limit = episode_limit(env, env_params)
  horizon = int(config.horizon)
  return horizon if limit is None else min(horizon, limit)


def check_rollout_horizon(config, env, env_params, field: str = "horizon") -> None:
  """Raises `ConfigError` naming `field` (the rollout length of whole episodes) when it
  is shorter than `env`'s fixed episode length."""
  # A rollout shorter than a fixed-length episode cuts it before its end: on a
  # terminal-reward task (KeyChain pays at the last step) every update would then see
  # return 0 and train on nothing, without a word. Environments with a time limit only
  # (CartPole) may be cut: their reward comes on the way.
  del env_params
  inner = _unwrapped(env)
  limit = getattr(inner, "horizon", None)
  horizon = int(config[field])
  if not isinstance(limit, int) or horizon >= limit:
    return
  raise ConfigError(
      f"config.{field}: {horizon} rollout steps would cut {config.env_name}'s "
      f"{limit}-step episodes before their end, where their reward is paid; set "
      f"--config.{field}={limit}, or shorten the episodes: "
      f"--config.env_kwargs.horizon={horizon}")


class Checked(NamedTuple):
  """A config its recipe validated, with the environment the validation made: what
  `make_train(checked)` builds on without validating or making the environment again
  (`credit_jax/runtime/run.py` validates a run's config once, then builds on this)."""
  config: Any
  features: Tuple[hooks.Feature, ...]   # the feature objects given beside the registry's
  made: Tuple[Any, Any]                 # envs.make's (env, env_params) for config
  env: Any                              # make_env's: the retry and history wrappers on
  env_params: Any


def checked(config, features, validate_fn: Callable) -> Checked:
  """`config` itself where it is a `Checked` (then `features` must be empty or its own),
  else `validate_fn(config, features)`: the first line of a recipe's `make_train`."""
  if isinstance(config, Checked):
    if tuple(features) not in ((), config.features):
      raise ValueError("features: a Checked config carries the features it was "
                       "validated with; pass none beside it")
    return config
  return validate_fn(config, tuple(features))


def validate(config, algo: str, fields_fn: Callable[[Any], None],
             recipe: Optional[hooks.Recipe] = None,
             passed: Tuple[hooks.Feature, ...] = (), whole_episodes: bool = False,
             env_fn: Optional[Callable[[Checked], None]] = None) -> Checked:
  """A recipe's whole `validate_config`: shared fields, the recipe's own, its hooks, the
  environment; returns the `Checked` config.

  `whole_episodes`: the recipe declares that its `config.horizon` is the rollout length
  of whole episodes (every episode of an update starts at step 0 and the loss sees its
  return: GRPO, REINFORCE, relabeling GRPO, search-then-train), so the rollout must hold
  one (`check_rollout_horizon`).

  Raises `ConfigError` naming the first field that cannot run: `config.algo` must be
  `algo`, then the fields of `base_config()`, then `fields_fn(config)` (the recipe's own
  fields), then the features (`credit_jax/addons/features.py`): a config block no
  feature claims (the registry's or one of the `passed` objects) is refused, so is one
  `recipe` does not accept (`None`: a recipe that accepts none), an accepted one is
  validated; then
  the environment must be makeable with `config.env_kwargs`, and an episodic recipe's
  rollout (`config.horizon`) must hold a whole episode; last `env_fn(checked)`, the
  recipe's checks that read the environment. The environment is made once; nothing is
  compiled.
  """
  require(config.get("algo") == algo, "algo",
          f"this is the {algo!r} recipe's validation, got algo={config.get('algo')!r}")
  _validate_shared(config)
  fields_fn(config)
  features.check(config, recipe if recipe is not None else hooks.Recipe(algo), passed,
                 _SHARED_BLOCKS)
  made, env, env_params = _validate_env(config)
  if whole_episodes:
    check_rollout_horizon(config, env, env_params)
  out = Checked(config, tuple(passed), made, env, env_params)
  if env_fn is not None:
    env_fn(out)
  return out


def validator(algo: str, fields_fn: Callable[[Any], None], recipe=None, *,
              whole_episodes: bool = False, env_fn: Optional[Callable[[Checked], None]] = None,
              checked: bool = True) -> Callable:
  """A recipe's `validate_config(config, features=())`: `validate` with these arguments
  (`recipe`: a `hooks.Recipe`, None, or `config -> Recipe`), returning the `Checked`
  config, or None where `checked` is False (a recipe whose `make_train` builds on the
  config itself)."""
  def validate_config(config, features=()) -> Optional[Checked]:
    """Raises `ConfigError` naming the first field of `config` that cannot run
    (`features`: the feature objects given to `make_train`); returns the `Checked` config
    `make_train` builds on (None for a recipe that builds on `config`)."""
    out = validate(config, algo, fields_fn, recipe(config) if callable(recipe) else recipe,
                   tuple(features), whole_episodes, env_fn)
    return out if checked else None
  return validate_config


@flax.struct.dataclass
class TrainState:
  """Everything a run needs to continue exactly; a leading seed axis when vmapped."""
  params: Any      # network parameters
  opt_state: Any   # optax state (Adam moments and counts)
  key: Array       # [2] uint32: the run's RNG key, split once per update
  update: Array    # [] int32: updates done so far
  aux: Any         # recipe-specific carry (env state, last observation, reference params, ...)


class Train:
  """A compiled-friendly training run: `train(key, hparams=None) -> (state, metrics)`.

  Attributes:
    config: the (validated) config it was made from.
    num_updates: updates in a full run.
    env_steps_per_update: environment steps one seed takes per update.
    default_hparams: `{name: [] float32}` taken from the config.
    headline: metric names worth printing in progress lines, most important first.
  """

  def __init__(self, *, config, init_fn: Callable, update_fn: Callable,
               default_hparams: Hparams, num_updates: int, env_steps_per_update: int,
               headline: Tuple[str, ...]):
    self.config = config
    self._init_fn = init_fn
    self._update_fn = update_fn
    self.default_hparams = {k: jnp.asarray(v, jnp.float32) for k, v in default_hparams.items()}
    self.num_updates = int(num_updates)
    self.env_steps_per_update = int(env_steps_per_update)
    self.headline = tuple(headline)

  def _hparams(self, hparams: Optional[Mapping[str, Any]]) -> Hparams:
    if hparams is None:
      return self.default_hparams
    if set(hparams) != set(self.default_hparams):
      raise ValueError(
          f"hparams must have exactly the keys {sorted(self.default_hparams)}, got "
          f"{sorted(hparams)}")
    return {k: jnp.asarray(v, jnp.float32) for k, v in hparams.items()}

  def init(self, key: Array, hparams: Optional[Mapping[str, Any]] = None) -> TrainState:
    """A fresh `TrainState` from `key` ([2] uint32 or a typed key)."""
    key = _raw_key(key)
    return self._init_fn(key, self._hparams(hparams))

  def update(self, state: TrainState,
             hparams: Optional[Mapping[str, Any]] = None) -> Tuple[TrainState, Metrics]:
    """One update (collect + learn); metrics are `{name: []}` scalars."""
    return self._update_fn(state, self._hparams(hparams))

  def run(self, state: TrainState, hparams: Optional[Mapping[str, Any]],
          num_updates: int) -> Tuple[TrainState, Metrics]:
    """`num_updates` updates in one `lax.scan`; metrics are `{name: [num_updates]}`."""
    hp = self._hparams(hparams)
    return jax.lax.scan(lambda s, _: self._update_fn(s, hp), state, None,
                        length=int(num_updates))

  def __call__(self, key: Array, hparams: Optional[Mapping[str, Any]] = None
               ) -> Tuple[TrainState, Metrics]:
    """The whole run: init, then `num_updates` updates; metrics `{name: [num_updates]}`."""
    return self.run(self.init(key, hparams), hparams, self.num_updates)


# The attributes a `Train` carries when a trained run can be evaluated from a checkpoint
# (credit_jax/runtime/evaluate.py, scripts/evaluate.py).
EVALUATION = ("env", "env_params", "eval_policy")


def attach_evaluation(train: Train, env, env_params, network=None,
                      eval_policy: Optional[Callable] = None) -> Train:
  """Gives `train` what evaluating a checkpoint needs, for an MLP actor(-critic) `network`.

  Sets `train.env`, `train.env_params` (the environment the policy acts in, wrappers
  included) and `train.eval_policy(params, greedy=False) -> (policy, policy_params)`:
  for ONE seed's `params`, the rollout `PolicyFn` that samples actions as training does,
  or (`greedy`) the one that takes the most probable action; `eval_policy`: a recipe's
  own such function instead of the one built from `network`. Returns `train`.
  """
  if eval_policy is None:
    sampled = nets.make_policy_fn(network, value=False)
    greedy_policy = nets.make_greedy_policy_fn(network)
    eval_policy = lambda params, greedy=False: (greedy_policy if greedy else sampled, params)
  train.env, train.env_params, train.eval_policy = env, env_params, eval_policy
  return train


class MeasuredTrain(Train):
  """A `Train` whose `run` also reports a measurement every `every` updates.

  `run(state, hparams, U)` runs blocks of `every` updates (the last one shorter when
  `every` does not divide U); before each block, `measure_fn(state, hparams) -> {name:
  []}` is evaluated at the block's first state and reported as metric
  `prefix + name` at every update of the block (the latest measurement, as PPO's
  `return` carries the latest episodes'), with `prefix + "measured"` 1.0 at the
  block's first update and 0.0 at the others. No `lax.cond`: under a vmap over seeds a
  cond becomes a select that would run the measurement at every update. With `run` calls
  of a multiple of `every` updates (the runner's chunks, `config.chunk_updates`) the
  measured updates are those with `update % every == 0`, measured before that update
  learns. `update` (one step) is the wrapped train's, without the measurement.
  """

  def __init__(self, train: Train, every: int, measure_fn, prefix: str):
    super().__init__(config=train.config, init_fn=train._init_fn,  # pylint: disable=protected-access
                     update_fn=train._update_fn,  # pylint: disable=protected-access
                     default_hparams=train.default_hparams, num_updates=train.num_updates,
                     env_steps_per_update=train.env_steps_per_update,
                     headline=train.headline)
    for name in EVALUATION:   # what credit_jax.runtime.evaluate reads, if the train has it
      if hasattr(train, name):
        setattr(self, name, getattr(train, name))
    if int(every) < 1:
      raise ValueError(f"every must be >= 1, got {every}")
    self.every = int(every)
    self._measure_fn = measure_fn
    self.prefix = str(prefix)

  def _block(self, state, hp, length: int):
    stats = self._measure_fn(state, hp)
    state, metrics = jax.lax.scan(lambda s, _: self._update_fn(s, hp), state, None,
                                  length=length)
    for k, v in stats.items():
      metrics[self.prefix + k] = jnp.full((length,), v, jnp.float32)
    metrics[self.prefix + "measured"] = (jnp.arange(length) == 0).astype(jnp.float32)
    return state, metrics

  def run(self, state, hparams, num_updates):
    hp = self._hparams(hparams)
    blocks, tail = divmod(int(num_updates), self.every)
    parts = []
    if blocks:
      state, m = jax.lax.scan(lambda s, _: self._block(s, hp, self.every), state, None,
                              length=blocks)
      parts.append(jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), m))
    if tail or not blocks:
      state, m = self._block(state, hp, tail)
      parts.append(m)
    return state, jax.tree.map(lambda *xs: jnp.concatenate(xs), *parts)


def _raw_key(key: Array) -> Array:
  # Raw uint32 keys keep the state checkpointable by orbax without key-type handlers.
  if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
    return jax.random.key_data(key)
  return key


# --- environments and networks --------------------------------------------------------

def make_env(config, made=None):
  """`(env, env_params)` for `config.env_name` with `config.env_kwargs` overrides, wrapped in
  a `HistoryWrapper` of `config.history_window` observations when that is > 0. `made`:
  `envs.make`'s `(env, env_params)` for `config` where the caller has them (a
  `Checked`'s), else made here."""
  env, env_params = made or envs.make(config.env_name,
                                      **dict(config.get("env_kwargs", {}) or {}))
  # wrappers a top-level field turns on (retry episodes, addons/critique.py)
  env, env_params = features.config_wrappers(config, env, env_params)
  window = int(config.get("history_window", 0) or 0)
  if window > 0:
    env = envs.HistoryWrapper(env, window)
  return env, env_params


# Network kinds without memory: one forward pass per observation, the recipes' flat path.
FLAT_KINDS = ("mlp",) + nets.tabular.KINDS


def flat_network(config) -> bool:
  """Whether `config.network.kind` (default "mlp") is memoryless (`FLAT_KINDS`)."""
  return str(config.network.get("kind", "mlp")) in FLAT_KINDS


def sequence_kwargs(net, kind: str) -> dict:
  """The constructor arguments of a `kind` ("gru" | "transformer") sequence network from
  the fields of `config.network` (`net`)."""
  if kind == "gru":
    return dict(hidden_size=int(net.get("gru_size", 64)),
                encoder_sizes=tuple(net.hidden_sizes), activation=net.activation,
                shared_torso=bool(net.shared_torso))
  return dict(d_model=int(net.get("d_model", 32)), num_heads=int(net.get("num_heads", 2)),
              num_layers=int(net.get("num_layers", 1)), max_len=int(net.get("max_len", 64)))


def validate_sequence_fields(config) -> None:
  """The sequence networks' fields of `config.network` (`add_network_kind`); raises
  `ConfigError` naming the field."""
  net = config.network
  for f, default in (("gru_size", 64), ("d_model", 32), ("num_heads", 2),
                     ("num_layers", 1), ("max_len", 64)):
    require(int(net.get(f, default)) >= 1, f"network.{f}",
            f"must be >= 1, got {net.get(f)}")
  require(int(net.get("d_model", 32)) % int(net.get("num_heads", 2)) == 0,
          "network.d_model", f"must be divisible by network.num_heads="
          f"{net.get('num_heads', 2)}")


NETWORK_KINDS = FLAT_KINDS + nets.sequence.KINDS


def network_kind(config) -> str:
  """`config.network.kind`, "mlp" when the config has no such field."""
  return str(config.network.get("kind", "mlp"))


def validate_network(config, sequence_ok: bool = True) -> None:
  """`config.network.kind` and a sequence network's fields; raises `ConfigError` naming
  the field. `sequence_ok=False`: the recipe runs memoryless policies only."""
  kind = network_kind(config)
  require_one_of(kind, "network.kind", NETWORK_KINDS)
  require(sequence_ok or kind in FLAT_KINDS, "network.kind",
          f"recipe {config.get('algo', '?')!r} runs memoryless policies only "
          f"{FLAT_KINDS}, got {kind!r}")
  if kind not in FLAT_KINDS:
    validate_sequence_fields(config)


def make_network(config, env, env_params, value_head: bool):
  """`(network, obs_shape)`: the actor-critic for `config.network` on `env`'s
  observations: an MLP, a table / linear policy (`network.kind` "tabular" | "linear",
  `credit_jax/nets/tabular.py`), or a sequence network ("gru" | "transformer",
  `credit_jax/nets/sequence.py`, whose value head is always there)."""
  net = config.network
  obs_shape = env.observation_space(env_params).shape
  kind = str(net.get("kind", "mlp"))
  value_sizes = tuple(net.get("value_hidden_sizes", ()))
  if value_sizes and (kind != "mlp" or net.shared_torso):
    raise ConfigError(f"network.value_hidden_sizes: a value torso of its own is an MLP "
                      f"option (kind mlp, shared_torso False); got kind {kind!r}, "
                      f"shared_torso {bool(net.shared_torso)}")
  if kind in nets.sequence.KINDS:
    return nets.sequence.make_sequence_network(
        kind, env.num_actions, obs_rank=len(obs_shape), **sequence_kwargs(net, kind)), \
        obs_shape
  if kind in nets.tabular.KINDS:
    try:
      network = nets.make_table_network(kind, env, obs_shape, value_head,
                                        float(net.get("min_prob", 0.0)),
                                        tuple(net.get("table_groups", ())))
    except ValueError as e:
      raise ConfigError(str(e)) from None
    return network, obs_shape
  # obs_shape is the wrapped env's ([W, D] with a history window), so obs_rank covers it.
  network = nets.ActorCritic(
      num_actions=env.num_actions, hidden_sizes=tuple(net.hidden_sizes),
      activation=net.activation, shared_torso=net.shared_torso, value_head=value_head,
      obs_rank=len(obs_shape), value_hidden_sizes=value_sizes)
  return network, obs_shape


def init_params(network, key: Array, obs_shape):
  return network.init(key, jnp.zeros(obs_shape, jnp.float32))


def init_train_state(network, key: Array, obs_shape, hp, optimizer: Optimizer,
                     aux_fn: Optional[Callable] = None, aux_keys: int = 0) -> TrainState:
  """A recipe's first `TrainState`: fresh parameters and optimiser state, update 0.

  `key` is split into `2 + aux_keys` keys: the parameters', `aux_keys` for the recipe's
  extra state, and the run's (last). `aux_fn(params, *keys) -> dict` builds that extra
  state (a frozen reference policy, a replay buffer, environments reset with the keys...).
  """
  k_params, *k_aux, k_run = jax.random.split(key, 2 + int(aux_keys))
  params = init_params(network, k_params, obs_shape)
  opt_state = optimizer.init(params, hp["max_grad_norm"])
  return TrainState(params=params, opt_state=opt_state, key=k_run,
                    update=jnp.zeros((), jnp.int32),
                    aux={} if aux_fn is None else aux_fn(params, *k_aux))
