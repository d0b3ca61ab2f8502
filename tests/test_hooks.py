"""The hook protocol (credit_jax/addons/hooks.py): refusal in one place, keys per slot,
carries by declared names, env_steps adding up."""
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from credit_jax.addons import hooks
from credit_jax.config import ConfigError, require


class _Flag(hooks.Feature):
  """A feature turned on by `config.<name>_on`, validating `config.<name>_size >= 1`."""

  def __init__(self, name, estimator=False):
    self.name, self.field, self.estimator = name, f"{name}_on", estimator

  def enabled(self, config):
    return bool(config.get(self.field, False))

  def validate(self, config, recipe):
    size = config.get(f"{self.name}_size", 1)
    require(size >= 1, f"{self.name}_size", f"must be >= 1, got {size}")


def _config(**kw):
  return ml_collections.ConfigDict(kw)


def test_check_refuses_what_the_recipe_does_not_take_naming_the_field():
  features = (_Flag("a"), _Flag("b"))
  recipe = hooks.Recipe("toy", accepts=("a",))
  hooks.check(_config(), recipe, features)
  hooks.check(_config(a_on=True), recipe, features)
  with pytest.raises(ConfigError, match=r"^config\.b_on: the toy recipe does not take "
                                        r"the b hook \(it takes: a\)"):
    hooks.check(_config(b_on=True), recipe, features)
  with pytest.raises(ConfigError, match=r"^config\.a_size: must be >= 1"):
    hooks.check(_config(a_on=True, a_size=0), recipe, features)
  # A disabled feature is not validated, and a recipe naming an unknown hook is a bug.
  hooks.check(_config(a_size=0), recipe, features)
  with pytest.raises(ValueError, match="unknown hooks"):
    hooks.check(_config(), hooks.Recipe("toy", accepts=("c",)), features)
  with pytest.raises(ValueError, match="rollout"):
    hooks.Recipe("toy", rollout="sometimes")


def test_one_estimator_per_run():
  features = (_Flag("a", estimator=True), _Flag("b", estimator=True))
  recipe = hooks.Recipe("toy", accepts=("a", "b"))
  hooks.check(_config(a_on=True), recipe, features)
  with pytest.raises(ConfigError, match=r"^config\.b_on: one advantage estimator"):
    hooks.check(_config(a_on=True, b_on=True), recipe, features)


class _Counter(hooks.Bound):
  """Counts updates in its carry, records the keys it was given."""
  init_key = True

  def __init__(self, name):
    self.owns = (name,)
    self.seen = {}

  def init(self, key):
    self.seen["init"] = key
    return {self.owns[0]: jnp.zeros((), jnp.int32)}

  def env_params(self, carry, env_params, update, key):
    self.seen["env_params"] = key
    return env_params + 1, update

  def shape_rewards(self, carry, signal, traj, hp, key, update, params):
    self.seen["shape"] = key
    return signal._replace(rewards=signal.rewards * 2), carry, {"env_steps": 3.0}

  def observe(self, carry, note, outcome, metrics):
    name = self.owns[0]
    return {name: carry[name] + 1}, {f"{name}_note": note}


def test_hooks_call_every_slot_with_its_own_key_and_carry():
  a, b = _Counter("a"), _Counter("b")
  h = hooks.Hooks([("a", a), ("b", b)])
  assert h.init_keys == 1
  key = jax.random.PRNGKey(0)
  aux = {"recipe": 1.0, **h.init(key)}
  assert set(aux) == {"recipe", "a", "b"}
  np.testing.assert_array_equal(a.seen["init"], key)
  np.testing.assert_array_equal(b.seen["init"], jax.random.fold_in(key, 1))
  params, notes = h.env_params(aux, 10, 7, key)
  assert params == 12 and notes == (7, 7)
  slot = jax.random.fold_in(key, 1)
  np.testing.assert_array_equal(a.seen["env_params"], slot)
  np.testing.assert_array_equal(b.seen["env_params"], jax.random.fold_in(slot, 1))
  signal, aux, m = h.shape_rewards(aux, hooks.Signal(jnp.ones(3)), None, {}, key, 0, None)
  np.testing.assert_array_equal(signal.rewards, 4.0)
  np.testing.assert_array_equal(a.seen["shape"], jax.random.fold_in(key, 2))
  assert m == {"env_steps": 6.0}     # env_steps of two features add up
  aux, m = h.observe(aux, notes, None, {"env_steps": 1.0})
  assert int(aux["a"]) == 1 and int(aux["b"]) == 1 and aux["recipe"] == 1.0
  assert m == {"env_steps": 1.0, "a_note": 7, "b_note": 7}
  adv, _, _ = h.advantages(aux, hooks.EstimatorInput(None, signal, None, jnp.ones(3), None,
                                                     {}, key))
  np.testing.assert_array_equal(adv, 1.0)   # no estimator: the recipe's own


def test_two_hooks_cannot_own_one_entry():
  with pytest.raises(ValueError, match="two hooks claim"):
    hooks.Hooks([("a", _Counter("x")), ("b", _Counter("x"))])
  empty = hooks.Hooks()
  assert empty.init_keys == 0 and empty.init() == {}
  assert empty.env_params({}, 5, 0, jax.random.PRNGKey(0)) == (5, ())


# Every recipe of the registry, every feature of the registry (credit_jax/addons/features.py):
# a feature a recipe does not list in its HOOKS is refused by validate_config, naming the
# feature's own field; one it lists is not refused as "does not take".


def _enable(c, name):
  from credit_jax.addons import (curriculum, gigpo, hindsight_credit, prm, rudder,
                                 tree_groups, vine_ppo)
  if name == "curriculum":
    curriculum.add_config(c)
    c.curriculum.kind = "fixed"
  elif name == "prm":
    c.prm = prm.default_config()
  elif name in ("hca", "cocoa"):
    hindsight_credit.add_config(c, name)
  else:
    {"vine": vine_ppo, "gigpo": gigpo, "tree": tree_groups,
     "rudder": rudder}[name].add_config(c)
  return c


@pytest.mark.parametrize("algo", ["ppo", "grpo", "reinforce", "dqn", "grpo_relabel",
                                  "search_then_train", "hierarchy", "token_agent"])
def test_every_recipe_refuses_the_features_it_does_not_take(algo):
  from credit_jax.addons import features
  from credit_jax.algos import RECIPES
  module = RECIPES[algo]
  accepts = tuple(getattr(module, "HOOKS", ()))
  assert set(accepts) <= {f.name for f in features.FEATURES}
  for feature in features.FEATURES:
    c = _enable(module.default_config(), feature.name)
    assert feature.enabled(c), feature.name
    if feature.name in accepts:
      try:
        module.validate_config(c)
      except ConfigError as e:   # an accepted feature may still reject its settings here
        assert "does not take" not in str(e), str(e)
      continue
    with pytest.raises(ConfigError, match=f"config.{feature.field}: the {algo} recipe "
                       f"does not take the {feature.name} hook"):
      module.validate_config(c)


def test_an_attribute_named_like_a_slot_is_refused():
  class Shadowing(hooks.Bound):
    def __init__(self):
      self.env_params = object()   # would replace the env_params slot
  with pytest.raises(ValueError, match="env_params"):
    hooks.Hooks([("bad", Shadowing())])


def test_estimator_slot_as_a_method_or_a_passed_function():
  """A Bound subclass may define `advantages` / `collect` as methods (no __init__ of its
  own) or pass functions to `Bound(...)`; either fills the slot, neither is dropped."""
  class Method(hooks.Bound):
    def advantages(self, carry, inputs):
      return inputs.advantages * 2.0, carry, {}

  def passed(carry, inputs):
    return inputs.advantages + 1.0, carry, {}

  inputs = hooks.EstimatorInput(traj=None, signal=None, values=None,
                                advantages=jnp.ones((2, 3)), params=None, hp={},
                                key=jax.random.key(0))
  for bound, want in ((Method(), 2.0), (hooks.Bound(advantages=passed), 2.0)):
    assert hooks._overrides(bound, "advantages")
    h = hooks.Hooks.__new__(hooks.Hooks)
    h.bound, h.names = (bound,), ("x",)
    out, _, _ = h.advantages({}, inputs)
    np.testing.assert_allclose(np.asarray(out), want)
  assert not hooks._overrides(hooks.Bound(), "advantages")
  assert not hooks._overrides(hooks.Bound(), "collect")
