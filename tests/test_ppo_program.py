"""PPO is one program (credit_jax/algos/ppo.py) whatever its network: every network kind
and critic (the agents of credit_jax/algos/ppo_agent.py) reaches the same hook slots.

A feature passed as an object (tests/test_features_api.py's) scales the advantages by
`scaled.weight`: times 1 the run is bit for bit the run without it (every slot passes its
input through); times 0 the run differs, and an actor with parameters of its own gets no gradient at all (the
entropy bonus is 0 here), so it stays where it began. A curriculum sets the episode
length per update for an MLP actor with a GRU critic (its own check keeps a GRU actor
out)."""
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from credit_jax.addons import curriculum, vine_ppo
from credit_jax.algos import ppo
from credit_jax.config import ConfigError
from test_features_api import SEEN, Scaled


def _config(kind="mlp", critic="same", oracle=False):
  c = ppo.default_config()
  c.env_name = "KeyChain-v0"
  c.env_kwargs = ml_collections.ConfigDict({"horizon": 6, "num_pivotal": 1,
                                            "num_actions": 2})
  c.num_envs, c.num_steps, c.total_timesteps = 2, 6, 2 * 2 * 6
  c.num_minibatches, c.update_epochs, c.ent_coef = 1, 1, 0.0
  c.network.hidden_sizes, c.network.gru_size = (4,), 4
  c.network.d_model, c.network.num_heads, c.network.max_len = 4, 2, 8
  c.network.kind, c.network.critic_kind, c.network.critic_oracle = kind, critic, oracle
  return c


ARRANGEMENTS = [("tabular", "same", False), ("gru", "same", False),
                ("transformer", "same", False), ("mlp", "gru", False),
                ("gru", "mlp", False), ("mlp", "same", True)]


@pytest.mark.parametrize("kind,critic,oracle", ARRANGEMENTS)
def test_every_network_and_critic_reaches_the_estimator_slot(kind, critic, oracle):
  # Hyperparameters passed as arguments to both programs, so that the runs at weight 1 and
  # 0 share one compile.
  key = jax.random.PRNGKey(0)
  plain = ppo.make_train(_config(kind, critic, oracle))
  plain_state, _ = jax.jit(plain)(key, plain.default_hparams)
  c = _config(kind, critic, oracle)
  c.scaled = ml_collections.ConfigDict({"enabled": True, "weight": 1.0})
  SEEN.clear()
  train = ppo.make_train(c, features=(Scaled(),))
  assert SEEN and SEEN[-1].policy is not None and SEEN[-1].recipe is ppo.RECIPE
  run = jax.jit(train)
  state, _ = run(key, train.default_hparams)
  jax.tree.map(np.testing.assert_array_equal, state.params, plain_state.params)
  zero = {**train.default_hparams, "scaled.weight": jnp.float32(0.0)}
  zeroed, _ = run(key, zero)
  differ = lambda a, b: any(jax.tree.leaves(jax.tree.map(
      lambda x, y: bool(np.any(np.asarray(x) != np.asarray(y))), a, b)))
  assert differ(zeroed.params, state.params)   # the slot's output is what PPO trains on
  if critic != "same" or oracle:   # an actor of its own has no gradient at all
    init = jax.jit(train.init)(key, zero)
    assert not differ(zeroed.params["actor"], init.params["actor"])


def test_a_curriculum_sets_the_episode_length_with_a_critic_of_its_own():
  c = curriculum.add_config(_config("mlp", "gru"))
  c.env_kwargs.horizon, c.num_steps, c.total_timesteps = 6, 6, 3 * 2 * 6
  c.curriculum.kind, c.curriculum.stages, c.curriculum.stage_updates = (
      "fixed", (2, 4, 6), (1, 1))
  _, m = jax.jit(ppo.make_train(c))(jax.random.PRNGKey(1))
  np.testing.assert_array_equal(m["curriculum_value"], [2, 4, 6])
  np.testing.assert_array_equal(m["env_steps"], 12.0)
  c.network.critic_kind, c.network.kind = "same", "gru"   # the curriculum's own check
  with pytest.raises(ConfigError, match=r"^config\.network\.kind: PPO runs a curriculum"):
    ppo.validate_config(c)


def test_what_an_arrangement_cannot_run_is_refused_naming_the_field():
  c = vine_ppo.add_config(_config("mlp", "gru"))
  with pytest.raises(ConfigError, match=r"^config\.network\.critic_kind: ") as e:
    ppo.validate_config(c)
  assert "vine" in str(e.value)
  c = curriculum.add_config(_config("mlp", "same", True))
  c.curriculum.kind = "fixed"
  with pytest.raises(ConfigError, match=r"^config\.network\.critic_oracle: "):
    ppo.validate_config(c)
  c = _config("gru")
  c.rollout = "episodes"
  with pytest.raises(ConfigError, match=r"^config\.rollout: "):
    ppo.validate_config(c)
