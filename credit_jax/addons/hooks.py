"""Hooks: how a recipe takes on a feature without a branch in its training program.

A feature (a horizon curriculum, PRM reward shaping, retries with critique, the
GAE-gradient probe; next: step-level and learned credit estimators) is one `Feature`
object. A recipe lists the names of the features it accepts in its module's `HOOKS`
tuple and describes itself in a `Recipe`; everything else happens here and in
`credit_jax/addons/features.py` (the registry of every feature):

  * refusal, in one place (`check`): a feature whose config turns it on but whose name
    the recipe does not list raises `ConfigError` naming the feature's field
    (`config.curriculum.kind: the hierarchy recipe does not take the curriculum hook ...`);
    an accepted one validates its own fields against the recipe (`Feature.validate`);
  * the environment: each enabled feature may wrap or replace it (`Feature.wrap_env`),
    in registry order, before the recipe's own wrappers and the history window;
  * hparams: a feature's traced hyperparameters (`Feature.hparams`) join the recipe's
    `train.default_hparams`, so a sweep over them is a vmap too;
  * the run: `Feature.bind(context)` returns a `Bound` (pure functions the program calls
    at fixed points of every update) and `Hooks` calls all bound features at once; a
    recipe's program calls each slot once, whether or not any feature fills it:

      init(key) -> {name: pytree}        entries the feature adds to TrainState.aux
                                         (it owns those names; the slots below receive
                                         and return only them, its `carry`)
      initial_env_params(carry, p)       env params of the episodes reset by `init`
      env_params(carry, p, update, key)  this update's env params (a curriculum's episode
                                         length) and a `note` handed back to `observe`
      shape_rewards(carry, signal, traj, hp, key, update, params)
                                         the credit signal after shaping (`Signal`:
                                         per-step rewards, per-episode scores, per-step
                                         bonus, per-step scores); PRM shaping, RUDDER's
                                         redistribution
      advantages(carry, EstimatorInput)  an advantage estimator replacing the recipe's
                                         own (`Feature.estimator = True`, at most one)
      collect(carry, CollectInput)       a group rollout replacing the recipe's own
                                         (tree-structured groups; GROUPS recipes), at
                                         most one; its metric `env_steps` is the steps it
                                         took, which replace the recipe's count
      observe(carry, note, Outcome, metrics)
                                         after the update: promotion, priorities, metrics
      measure                            a `Measure`: a statistic of the train state every
                                         N updates (the GAE-gradient probe), reported as
                                         metrics by `train_lib.with_measures`

    Each slot's functions return `(..., carry, metrics)`; metrics are `{name: []}` and
    join the update's metrics; a metric `env_steps` adds to the recipe's `env_steps`
    (a feature that steps the environment for its own use counts those steps).
    Keys: the recipe hands `init` one key (`Hooks.init_keys` says whether it needs one)
    and each update one key `k`; slot `env_params` draws from `fold_in(k, 1)`,
    `shape_rewards` from `fold_in(k, 2)`, `advantages` from `fold_in(k, 3)`, `collect`
    from `fold_in(rollout key, 4)` (`CollectInput.key`), and the j-th
    feature (j >= 1) of those filling one slot from `fold_in(slot key, j)`.

Adding an advantage estimator needs no change to a recipe's program: a `Feature`
subclass (`name`, `field`, `estimator = True`, `traced`, `validate` reading
`recipe.rollout`) whose `bind(context)` returns a `Bound` with `advantages(carry,
EstimatorInput) -> (advantages [T, B...] or per-action credit, carry, metrics)`; where it
needs the environment state at every step, `wrap_env` puts it in `info` (restoring a
state is a gather). Pass the object to a recipe, `make_train(config,
features=(MyCredit(),))` (the `open` recipes: REINFORCE, PPO, GRPO); the library's own
are also in `FEATURES` (`credit_jax/addons/features.py`). docs/RECIPES.md "Add a credit
estimator" is a worked example, run by `tests/test_worked_example.py`.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict, NamedTuple, Optional, Sequence, Tuple

import jax
from jax import Array

from credit_jax.config import require

# How a recipe's rollout treats episodes (`Recipe.rollout`).
CONTINUING = "continuing"   # fixed windows of auto-resetting envs, episodes cross updates (PPO)
GROUPS = "groups"           # K whole episodes per start state, fresh each update (GRPO)
EPISODES = "episodes"       # one whole episode per environment, fresh each update
ROLLOUTS = (CONTINUING, GROUPS, EPISODES)


@dataclasses.dataclass(frozen=True)
class Recipe:
  """What a recipe tells the features about itself.

  name: the recipe (`config.algo`); accepts: the names of the registry's features it
  takes (its module's `HOOKS`); rollout: one of `ROLLOUTS`; critic: it learns a value
  function; open: its program calls every slot, so it takes features passed as objects
  (each one's `validate` still refuses what it cannot run with this recipe).
  """
  name: str
  accepts: Tuple[str, ...] = ()
  rollout: str = EPISODES
  critic: bool = False
  open: bool = False

  def __post_init__(self):
    if self.rollout not in ROLLOUTS:
      raise ValueError(f"rollout must be one of {ROLLOUTS}, got {self.rollout!r}")


class Signal(NamedTuple):
  """What a recipe computes credit from, shaped by `shape_rewards`."""
  rewards: Array                  # [T, B...] per-step rewards (what GAE reads)
  scores: Optional[Array] = None  # [B...] per-episode scores (group advantages), or None
  bonus: Optional[Array] = None   # [T, B...] per-step credit added to the advantages, or None
  # [T, B...] per-step scores, or None: a GROUPS recipe normalises them within each group
  # at every step instead of broadcasting the episode's score (RUDDER's returns-to-go,
  # which equal `scores` at t = 0); a hook that rewrites `scores` cannot join them.
  step_scores: Optional[Array] = None


def undiscounted(hp) -> float:
  """The discount of a recipe whose credit is undiscounted (GRPO's episode scores)."""
  del hp
  return 1.0


class Context(NamedTuple):
  """What `Feature.bind` receives: the recipe's pieces, built once per `make_train`, the
  same fields from every recipe (`features.bind` builds it).

  policy: the rollout policy (a `PolicyFn`, or a `SequencePolicy` for a GRU or
  transformer) as `rollout.collect` takes it; network: the recipe's flax network
  (None where it has several); logits: `(params, traj) -> [T, B..., A]` the policy's
  logits at every step of a rollout `traj [T, B...]` (a sequence network replays each
  episode from its initial carry); discount: `hp -> []` the discount of the recipe's
  credit (PPO, REINFORCE: `hp["gamma"]`; GRPO: 1.0, `undiscounted`).
  """
  config: Any
  recipe: Recipe
  env: Any               # the environment the recipe rolls out (wrapped)
  env_params: Any
  policy: Any
  network: Any
  logits: Callable
  discount: Callable
  batch: int             # environments per rollout (PPO: num_envs; GRPO: num_tasks * K)


class EstimatorInput(NamedTuple):
  """What an advantage estimator (`Bound.advantages`) receives each update."""
  traj: Any              # Trajectory [T, B...] of this update (info as the env wrote it)
  signal: Signal         # after shaping
  values: Optional[Array]   # [T, B...] the critic's values, None without a critic
  advantages: Array      # [T, B...] the recipe's own advantages of `signal`
  params: Any            # the policy parameters that collected `traj`
  hp: Dict[str, Array]
  key: Array


class CollectInput(NamedTuple):
  """What a rollout replacement (`Bound.collect`) receives: the recipe's group rollout
  `rollout.collect_groups(env, env_params, policy, params, key, num_tasks, group_size,
  horizon)`, as arguments."""
  env: Any
  env_params: Any
  policy: Any            # a PolicyFn or SequencePolicy
  params: Any
  key: Array
  num_tasks: int
  group_size: int
  horizon: int


class Outcome(NamedTuple):
  """What `Bound.observe` sees after an update."""
  success: Optional[Array]   # [] this update's success rate (None: the env has none)
  advantages: Array          # [T, B...] the advantages the update trained on
  traj: Any                  # the update's Trajectory


class Measure(NamedTuple):
  """`fn(state, hp) -> {name: []}` every `every` updates, reported as `prefix + name`."""
  every: int
  fn: Callable
  prefix: str


# The slots a `Bound` fills by overriding a method (`advantages` and `collect` are
# attributes, None when unfilled).
_SLOTS = ("init", "initial_env_params", "env_params", "shape_rewards", "observe")


class Bound:
  """The per-run half of a feature; every slot defaults to doing nothing."""
  owns: Tuple[str, ...] = ()   # the TrainState.aux entries `init` returns (its carry)
  init_key = False             # whether `init` draws from its key
  # The recipe reports the steps it took as metric `env_steps` (the number varies: a
  # curriculum's episode lengths); estimators and rollout replacements always do.
  counts_steps = False
  measure: Optional[Measure] = None

  def __init__(self, advantages: Optional[Callable] = None,
               collect: Optional[Callable] = None):
    """A feature that fills only the estimator and rollout slots passes them here (a
    subclass may instead define them as methods: None here leaves those in place)."""
    if advantages is not None:
      self.advantages = advantages
    if collect is not None:
      self.collect = collect

  def init(self, key) -> Dict[str, Any]:
    del key
    return {}

  def initial_env_params(self, carry, env_params):
    del carry
    return env_params

  def env_params(self, carry, env_params, update, key):
    del carry, update, key
    return env_params, None

  def shape_rewards(self, carry, signal: Signal, traj, hp, key, update, params):
    del traj, hp, key, update, params
    return signal, carry, {}

  # An estimator overrides this: `(carry, EstimatorInput) -> (advantages, carry, metrics)`.
  advantages: Optional[Callable] = None
  # A rollout replacement: `(carry, CollectInput) -> (traj [T, N, K], carry, metrics)`.
  collect: Optional[Callable] = None

  def observe(self, carry, note, outcome: Outcome, metrics):
    del note, outcome, metrics
    return carry, {}


def config_value(config, path: str):
  """The value of the dotted field `path` of `config` (`"gigpo.step_weight"`); KeyError
  naming `path` when a part is missing."""
  node = config
  for part in path.split("."):
    try:
      node = node[part]
    except (KeyError, TypeError, AttributeError) as e:
      raise KeyError(f"config has no field {path!r}") from e
  return node


class Feature:
  """A feature a recipe may accept (module doc); subclasses override what they use."""
  name = ""          # what a recipe lists in HOOKS
  field = ""         # the config field that turns it on, named when a recipe refuses it
  estimator = False  # fills the `advantages` slot (at most one enabled per run)
  # Fields of its config block that are traced hyperparameters: `hparams` names each by
  # its dotted config path ("gigpo.step_weight"), so a sweep axis over it is a vmap.
  traced: Tuple[str, ...] = ()

  @property
  def block(self) -> str:
    """The config block the feature claims (`field`'s first part: "gigpo")."""
    return self.field.split(".")[0]

  def enabled(self, config) -> bool:
    """Whether `config` turns it on: by default, an `enabled` field of its block that
    is true."""
    block = config.get(self.block)
    return block is not None and bool(block.get("enabled", False))

  def validate(self, config, recipe: Recipe) -> None:
    """Raises `ConfigError` naming the first of the feature's fields that cannot run."""
    del config, recipe

  def wrap_env(self, config, env, env_params):
    """`(env, env_params)` with the feature's wrapper (or a replacement env)."""
    del config
    return env, env_params

  def hparams(self, config) -> Dict[str, float]:
    """`{dotted config path: value}` of the `traced` fields (the names a sweep axis and
    `train(key, hparams)` use)."""
    return {f"{self.block}.{f}": float(config[self.block][f]) for f in self.traced}

  def bind(self, context: Context) -> Bound:
    del context
    return Bound()


def check(config, recipe: Recipe, features: Sequence[Feature],
          passed: Sequence[Feature] = ()) -> None:
  """Refuses what `recipe` does not accept and validates what it does: the one place.

  `features`: the registry's; `passed`: the objects given to the recipe's `make_train`,
  which an `open` recipe accepts. Raises `ConfigError` naming the field of the first
  enabled feature the recipe does not take (with the recipes' alternatives in the
  message), of a second enabled estimator, or the first field an accepted feature's
  `validate` rejects.
  """
  names = [f.name for f in features]
  unknown = sorted(set(recipe.accepts) - set(names))
  if unknown:
    raise ValueError(f"{recipe.name} accepts unknown hooks {unknown}; known: {names}")
  estimators = []
  for f in tuple(features) + tuple(passed):
    if not f.enabled(config):
      continue
    accepted = ", ".join(recipe.accepts) or "none: its program calls no hook slot"
    if recipe.open:
      accepted += ", and features passed as objects"
    require(f.name in recipe.accepts or (recipe.open and any(f is g for g in passed)),
            f.field,
            f"the {recipe.name} recipe does not take the {f.name} hook (it takes: "
            f"{accepted}); turn it off or choose a recipe that takes it")
    if f.estimator:
      estimators.append(f)
      require(len(estimators) == 1, f.field,
              f"one advantage estimator per run: {estimators[0].field} is already on")
    f.validate(config, recipe)


def _overrides(bound: Bound, slot: str) -> bool:
  return getattr(type(bound), slot, None) is not getattr(Bound, slot) or (
      slot in ("advantages", "collect") and getattr(bound, slot) is not None)


def _slot_keys(key, fills):
  """The key of each feature where `fills` (one bool per feature, in order) says it
  draws: the key itself for the first, `fold_in(key, j)` for the j-th; None elsewhere."""
  keys, j = [], 0
  for fill in fills:
    keys.append((key if j == 0 else jax.random.fold_in(key, j)) if fill else None)
    j += bool(fill)
  return keys


def merge_metrics(metrics: Dict[str, Array], new: Dict[str, Array]) -> Dict[str, Array]:
  """`metrics` updated with `new`; `env_steps` in both adds up (module doc)."""
  out = dict(metrics)
  for k, v in new.items():
    out[k] = out[k] + v if k == "env_steps" and k in out else v
  return out


class Hooks:
  """Every bound feature of a run, called slot by slot (module doc)."""

  def __init__(self, bound: Sequence[Tuple[str, Bound]] = ()):
    self.names = tuple(n for n, _ in bound)
    self.bound = tuple(b for _, b in bound)
    for name, b in zip(self.names, self.bound):
      shadowed = [s for s in _SLOTS if s in vars(b)]
      if shadowed:
        raise ValueError(f"hook {name!r} sets instance attributes named like its slots "
                         f"{shadowed}, which would replace them; rename them")
    owned = [n for b in self.bound for n in b.owns]
    if len(owned) != len(set(owned)):
      raise ValueError(f"two hooks claim one aux entry: {sorted(owned)}")
    self.measures = tuple(b.measure for b in self.bound if b.measure is not None)

  @property
  def counts_steps(self) -> bool:
    """Whether the recipe reports metric `env_steps` (its steps plus the hooks')."""
    return any(b.counts_steps or b.advantages is not None or b.collect is not None
               for b in self.bound)

  @property
  def init_keys(self) -> int:
    """1 when a feature draws from its init key, else 0 (`init` then takes none)."""
    return int(any(b.init_key for b in self.bound))

  def init(self, key=None) -> Dict[str, Any]:
    """Every feature's aux entries (each exactly the names its `owns` declares)."""
    aux = {}
    for i, (b, k) in enumerate(zip(self.bound,
                                   _slot_keys(key, [b.init_key for b in self.bound]))):
      entries = b.init(k)
      if set(entries) != set(b.owns):
        raise ValueError(f"hook {self.names[i]!r} declares aux entries {b.owns}, its "
                         f"init returned {sorted(entries)}")
      aux.update(entries)
    return aux

  def _fills(self, slot):
    return [_overrides(b, slot) for b in self.bound]

  def _carry(self, aux, i):
    return {k: aux[k] for k in self.bound[i].owns}

  def initial_env_params(self, aux, env_params):
    for i, b in enumerate(self.bound):
      env_params = b.initial_env_params(self._carry(aux, i), env_params)
    return env_params

  def env_params(self, aux, env_params, update, key):
    """`(env_params, notes)`: this update's env params and each feature's note."""
    notes = []
    keys = _slot_keys(jax.random.fold_in(key, 1), self._fills("env_params"))
    for i, (b, k) in enumerate(zip(self.bound, keys)):
      env_params, note = b.env_params(self._carry(aux, i), env_params, update, k)
      notes.append(note)
    return env_params, tuple(notes)

  def shape_rewards(self, aux, signal, traj, hp, key, update, params):
    """`(signal, aux, metrics)` after every feature's shaping, in order."""
    aux, metrics = dict(aux), {}
    keys = _slot_keys(jax.random.fold_in(key, 2), self._fills("shape_rewards"))
    for i, (b, k) in enumerate(zip(self.bound, keys)):
      if k is None:
        continue
      signal, carry, m = b.shape_rewards(self._carry(aux, i), signal, traj, hp, k, update,
                                         params)
      aux.update(carry)
      metrics = merge_metrics(metrics, m)
    return signal, aux, metrics

  def _replacing(self, slot: str, aux, inputs, salt: int):
    """The first feature filling `slot` ("advantages" | "collect"): `(out, aux,
    metrics)` of it on `inputs` with key `fold_in(inputs.key, salt)`; None without one."""
    for i, b in enumerate(self.bound):
      if getattr(b, slot) is not None:
        out, carry, m = getattr(b, slot)(self._carry(aux, i), inputs._replace(
            key=jax.random.fold_in(inputs.key, salt)))
        return out, {**aux, **carry}, m
    return None

  def advantages(self, aux, inputs: EstimatorInput):
    """`(advantages, aux, metrics)`: the estimator's, or `inputs.advantages` unchanged."""
    return self._replacing("advantages", aux, inputs, 3) or (inputs.advantages, aux, {})

  def collect(self, aux, default: Callable, inputs: CollectInput):
    """`(traj, aux, metrics)`: the rollout replacement's, or `default(*inputs)` (the
    recipe's own group rollout) with no metrics."""
    return self._replacing("collect", aux, inputs, 4) or (default(*inputs), aux, {})

  def observe(self, aux, notes, outcome: Outcome, metrics):
    """`(aux, metrics)` after every feature has seen the update."""
    aux = dict(aux)
    for i, b in enumerate(self.bound):
      carry, m = b.observe(self._carry(aux, i), notes[i], outcome, metrics)
      aux.update(carry)
      metrics = merge_metrics(metrics, m)
    return aux, metrics
