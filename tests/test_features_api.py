"""Extension by argument (issue 45): no config block is silently ignored, for every
recipe; features passed as objects; the typed context every recipe binds."""
import ml_collections
import pytest

from credit_jax import algos
from credit_jax.addons import hindsight_credit, rudder
from credit_jax.config import ConfigError


def _block(c):
  c.my_credit = ml_collections.ConfigDict({"enabled": True, "weight": 0.5})
  return c


@pytest.mark.parametrize("algo", sorted(algos.RECIPES))
@pytest.mark.parametrize("name,add", [
    ("my_credit", _block),
    ("rudder", rudder.add_config),
    ("hca", lambda c: hindsight_credit.add_config(c, "hca")),
    ("cocoa", lambda c: hindsight_credit.add_config(c, "cocoa"))])
def test_a_block_no_feature_of_the_recipe_runs_is_refused(algo, name, add):
  module = algos.RECIPES[algo]
  c = add(module.default_config())
  accepts = getattr(getattr(module, "RECIPE", None), "accepts", ())
  if name in accepts:   # the recipe takes it: it may refuse its settings, saying why
    try:
      algos.validate_config(c)
    except ConfigError as e:
      assert "no feature claims" not in str(e) and "does not take" not in str(e), str(e)
    return
  with pytest.raises(ConfigError, match=rf"^config\.{name}[.:]") as e:
    algos.validate_config(c)
  assert "\n" not in str(e.value)


# --- features passed as objects, the typed context ------------------------------------

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from credit_jax.addons import hooks  # noqa: E402
from credit_jax.algos import grpo, ppo, reinforce  # noqa: E402

SEEN = []


class Scaled(hooks.Feature):
  """The recipe's own advantages times `scaled.weight`, recording the context it got."""
  name = "scaled"
  field = "scaled.enabled"
  estimator = True
  traced = ("weight",)

  def bind(self, context):
    SEEN.append(context)
    bound = hooks.Bound()
    bound.advantages = lambda carry, inputs: (inputs.advantages * inputs.hp[
        "scaled.weight"], carry, {"scaled_mean": inputs.advantages.mean()})
    return bound


def _tiny(algo):
  if algo == "ppo":
    c = ppo.default_config()
    c.env_name = "KeyChain-v0"
    c.env_kwargs = ml_collections.ConfigDict({"horizon": 6, "num_pivotal": 1})
    c.num_envs, c.num_steps, c.total_timesteps = 4, 12, 2 * 4 * 12
    c.num_minibatches, c.update_epochs = 2, 1
  elif algo == "grpo":
    c = grpo.default_config()
    c.env_kwargs.horizon, c.horizon, c.env_kwargs.num_pivotal = 6, 6, 1
    c.num_updates, c.num_tasks, c.group_size, c.num_minibatches = 2, 2, 4, 1
  else:
    c = reinforce.default_config()
    c.env_kwargs.horizon, c.horizon, c.env_kwargs.num_pivotal = 6, 6, 1
    c.num_updates, c.num_envs = 2, 8
  c.network.hidden_sizes = (8,)
  return c


def _run(config, features=()):
  train = algos.make_train(config, features=features)
  return jax.jit(train)(jax.random.PRNGKey(0))


@pytest.mark.parametrize("algo", ["ppo", "grpo", "reinforce"])
def test_a_feature_object_fills_the_slot_of_every_open_recipe(algo):
  plain = _run(_tiny(algo))[0].params
  c = _tiny(algo)
  c.scaled = ml_collections.ConfigDict({"enabled": True, "weight": 1.0})
  SEEN.clear()
  train = algos.make_train(c, features=(Scaled(),))
  assert "scaled.weight" in train.default_hparams
  state, metrics = jax.jit(train)(jax.random.PRNGKey(0))
  assert "scaled_mean" in metrics
  # Times 1: the recipe trains on its own advantages, bit for bit.
  jax.tree.map(np.testing.assert_array_equal, state.params, plain)
  ctx = SEEN[-1]
  assert isinstance(ctx, hooks.Context) and ctx.policy is not None
  hp = {"gamma": jnp.float32(0.5)}
  assert float(ctx.discount(hp)) == (1.0 if algo == "grpo" else 0.5)
  if algo == "grpo":   # times 0: no policy gradient, the parameters stay where they began
    zero = {**train.default_hparams, "scaled.weight": jnp.float32(0.0)}
    s0, _ = jax.jit(train)(jax.random.PRNGKey(0), zero)
    init = jax.jit(train.init)(jax.random.PRNGKey(0), zero)
    jax.tree.map(np.testing.assert_array_equal, s0.params, init.params)
  # Without the object the block is unclaimed, and a recipe without slots refuses it.
  with pytest.raises(ConfigError, match=r"^config\.scaled: no feature claims"):
    algos.make_train(c)
  d = algos.RECIPES["dqn"].default_config()
  d.scaled = c.scaled
  with pytest.raises(ConfigError, match=r"^config\.scaled\.enabled: the dqn recipe"):
    algos.validate_config(d, features=(Scaled(),))


def _learned(algo, name, kind):
  c = _tiny(algo)
  if algo == "ppo":
    c.rollout, c.num_steps, c.num_minibatches = "episodes", 6, 1
    c.total_timesteps = 2 * 4 * 6
  if kind == "gru":
    c.network.kind, c.network.gru_size = "gru", 8
  if name == "rudder":
    rudder.add_config(c, hidden_size=8, encoder_sizes=(8,), replay_episodes=4,
                      capacity=8, train_steps=1)
  else:
    hindsight_credit.add_config(c, name, hidden_sizes=(8,), train_steps=1)
  return c


# Every (recipe, estimator) pair the recipes take, with an MLP (GRPO's RUDDER: in
# tests/test_grpo_rudder.py); each estimator once with a GRU (the replayed-logits path), in
# a recipe whose GRU program differs from the others'.
# Each case is one compile of a whole training program, the suite's main cost, so the
# REINFORCE and PPO pairs with an MLP are checked (the same assertions) by their learning
# tests, tests/test_learned_credit_learning.py::test_each_option_learns_keychain.
@pytest.mark.parametrize("algo,name,kind", [
    ("reinforce", "rudder", "gru"), ("grpo", "hca", "mlp"), ("grpo", "cocoa", "mlp"),
    ("grpo", "hca", "gru"), ("reinforce", "cocoa", "gru")])
def test_learned_credit_runs_in_the_recipes(algo, name, kind):
  state, metrics = _run(_learned(algo, name, kind))
  assert np.isfinite(np.asarray(metrics["loss"])).all()
  assert f"{name}_loss" in metrics and np.isfinite(np.asarray(metrics[f"{name}_loss"])).all()
  assert all(k in state.aux for k in (f"{name}_params",))


@pytest.mark.parametrize("algo,name,kind,field", [
    ("ppo", "hca", "mlp", "hca.enabled"),
    ("ppo", "rudder", "gru", "rollout"),
    ("grpo", "hca", "transformer", None)])
def test_where_learned_credit_cannot_run_it_is_refused_saying_why(algo, name, kind, field):
  c = _learned(algo, name, "mlp")
  if algo == "ppo" and name == "hca":
    c.rollout = "continuing"   # windows: the outcomes after a step may lie beyond it
  if kind != "mlp":
    c.network.kind = kind
  if field is None:   # a transformer replays like a GRU: it runs
    algos.validate_config(c)
    return
  with pytest.raises(ConfigError, match=rf"^config\.{field}: ") as e:
    algos.validate_config(c)
  assert "\n" not in str(e.value)


@pytest.mark.parametrize("algo", sorted(algos.RECIPES))
def test_every_recipe_takes_features_as_objects(algo):
  """make_train(config, features=...) and validate_config(config, features=...) in every
  recipe, as the contract says (algos/__init__.py)."""
  import inspect   # pylint: disable=g-import-not-at-top
  module = algos.RECIPES[algo]
  for fn in (module.make_train, module.validate_config):
    assert "features" in inspect.signature(fn).parameters, (algo, fn.__name__)


def test_token_agent_refuses_a_feature_it_cannot_run_in_one_line():
  token_agent = algos.RECIPES["token_agent"]
  c = token_agent.default_config()
  c.scaled = ml_collections.ConfigDict({"enabled": True, "weight": 1.0})
  for call in (token_agent.make_train, algos.make_train):
    with pytest.raises(ConfigError) as e:
      call(c, features=(Scaled(),))
    assert str(e.value) == (
        "config.scaled.enabled: the token_agent recipe does not take the scaled hook (it "
        "takes: none: its program calls no hook slot); turn it off or choose a recipe "
        "that takes it")
  c.scaled.enabled = False     # present but off: nothing to refuse, nothing run
  token_agent.validate_config(c, features=(Scaled(),))
