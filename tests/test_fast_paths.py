"""credit_jax.fast_paths: off by default, and each fast path equals the plain path.

The threefry lowering's equality with jax's is tested in tests/test_threefry_cpu.py, the
Feistel shuffle's statistics in tests/test_algos.py."""
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from credit_jax import fast_paths, nets, threefry_cpu
from credit_jax.algos import train as train_lib


def test_off_by_default_and_use_restores():
  # Where jax's lowering table cannot be read, the threefry lowering stays once registered.
  restorable = threefry_cpu._cpu_lowerings() is not None  # pylint: disable=protected-access
  assert not fast_paths.enabled()
  with fast_paths.use():
    assert fast_paths.enabled() and threefry_cpu.registered()
    with fast_paths.use(False):
      assert not fast_paths.enabled() and threefry_cpu.registered() != restorable
    assert fast_paths.enabled() and threefry_cpu.registered()
  assert not fast_paths.enabled() and threefry_cpu.registered() != restorable
  with pytest.raises(KeyError):
    with fast_paths.use(True):
      raise KeyError("restored on the way out too")
  assert not fast_paths.enabled()


def _values_and_grads(module, params, x):
  def f(p, x):
    return jnp.sum(jnp.sin(module.apply(p, x)) * jnp.arange(1.0, 1.0 + module.features))
  out = module.apply(params, x)
  g_params, g_x = jax.grad(f, argnums=(0, 1))(params, x)
  return out, g_params, g_x


@pytest.mark.parametrize("cls,in_features,features", [
    (nets.RowDense, 1, 5), (nets.RowDense, 8, 3), (nets.ColumnDense, 16, 2)])
@pytest.mark.parametrize("transform", ["jit", "vmap"])
def test_fast_dense_equals_dense_values_and_gradients(cls, in_features, features,
                                                       transform):
  x = jax.random.normal(jax.random.PRNGKey(1), (3, 5, in_features))
  dense, fast = nn.Dense(features), cls(features)
  params = dense.init(jax.random.PRNGKey(0), x)
  # Same parameter tree and init, so checkpoints do not depend on the switch.
  fast_params = fast.init(jax.random.PRNGKey(0), x)
  assert jax.tree.structure(fast_params) == jax.tree.structure(params)
  for a, b in zip(jax.tree.leaves(fast_params), jax.tree.leaves(params)):
    np.testing.assert_array_equal(a, b)
  run = {"jit": lambda m: jax.jit(lambda p, x: _values_and_grads(m, p, x))(params, x),
         "vmap": lambda m: jax.jit(jax.vmap(
             lambda x: _values_and_grads(m, params, x)))(x)}[transform]
  for got, want in zip(jax.tree.leaves(run(fast)), jax.tree.leaves(run(dense))):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def _uses_fast_layers(net, params, obs):
  jaxpr = str(jax.make_jaxpr(lambda p: net.apply(p, obs))(params))
  return "custom_jvp_call" in jaxpr   # RowDense's product has a custom JVP


@pytest.mark.parametrize("num_actions,obs_dim", [(2, 4), (3, 12), (9, 4)])
def test_actor_critic_on_and_off_agree(num_actions, obs_dim):
  net = nets.ActorCritic(num_actions=num_actions, hidden_sizes=(16, 16))
  obs = jax.random.normal(jax.random.PRNGKey(2), (6, obs_dim))
  params = net.init(jax.random.PRNGKey(0), obs[0])
  with fast_paths.use(True):
    fast_params = net.init(jax.random.PRNGKey(0), obs[0])
    assert _uses_fast_layers(net, params, obs) == (obs_dim <= 8)
  assert not _uses_fast_layers(net, params, obs)
  for a, b in zip(jax.tree.leaves(fast_params), jax.tree.leaves(params)):
    np.testing.assert_array_equal(a, b)

  def loss(p):
    logits, value = net.apply(p, obs)
    return jnp.sum(jax.nn.log_softmax(logits)[:, 0]) + jnp.sum(value ** 2)
  plain = jax.jit(lambda p: (net.apply(p, obs), jax.grad(loss)(p)))(params)
  with fast_paths.use(True):
    fast = jax.jit(lambda p: (net.apply(p, obs), jax.grad(loss)(p)))(params)
  for got, want in zip(jax.tree.leaves(fast), jax.tree.leaves(plain)):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


_OPT = train_lib.Optimizer(kind="adam", eps=1e-8)


def _reference_epochs(shuffle, params, opt_state, data, key, epochs, minibatches):
  """minibatch_epochs as a Python loop over explicit permutations."""
  n = data.shape[0]
  losses = []

  @jax.jit
  def step(params, opt_state, mb):
    (loss, _), grads = jax.value_and_grad(_loss, has_aux=True)(params, mb)
    params, opt_state, _ = _OPT.apply(params, opt_state, grads, 0.1, jnp.float32(1e9))
    return params, opt_state, loss
  for k in jax.random.split(key, epochs):
    perm = np.asarray(jax.jit(shuffle, static_argnums=1)(k, n))
    for mb in np.split(perm, minibatches):
      params, opt_state, loss = step(params, opt_state, data[mb])
      losses.append(loss)
  return params, float(np.mean(losses))


def _loss(p, mb):
  return jnp.mean((mb - p) ** 2), {}


@pytest.mark.parametrize("fast", [False, True])
def test_minibatch_epochs_shuffles_with_the_switched_shuffle(fast):
  data = jax.random.normal(jax.random.PRNGKey(3), (12, 2)) * jnp.arange(1.0, 13.0)[:, None]
  params = jnp.zeros(2)
  opt_state = _OPT.init(params, jnp.float32(1e9))
  key = jax.random.PRNGKey(4)
  with fast_paths.use(fast):
    run = jax.jit(lambda p, o, d, k: train_lib.minibatch_epochs(
        _loss, p, o, d, k, num_epochs=3, num_minibatches=4, axis=0, lr=0.1,
        max_grad_norm=jnp.float32(1e9), optimizer=_OPT))
    got_params, _, metrics = run(params, opt_state, data, key)
    jaxpr = str(jax.make_jaxpr(run)(params, opt_state, data, key))
  assert (" sort[" in jaxpr) == (not fast)   # jax.random.permutation sorts
  shuffle = train_lib.shuffle_indices if fast else jax.random.permutation
  want_params, want_loss = _reference_epochs(shuffle, params, opt_state, data, key, 3, 4)
  np.testing.assert_allclose(got_params, want_params, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(metrics["loss"], want_loss, rtol=1e-5)
  # The other shuffle visits the minibatches in another order: other parameters.
  other = jax.random.permutation if fast else train_lib.shuffle_indices
  other_params, _ = _reference_epochs(other, params, opt_state, data, key, 3, 4)
  assert not np.allclose(got_params, other_params, rtol=1e-4)
