"""Fixed-seed initial parameters are bit-identical to those of the code before issue 46.

Issue 46 replaced flax's orthogonal initialiser (whose QR, vmapped over seeds, reached
jaxlib 0.10's batched CPU LAPACK kernel that can wedge) by `credit_jax.nets.orthogonal`,
which maps the unbatched QR over a vmapped batch. The hashes below were computed on the
code before that change (commit 8db5fb2, at XLA's default CPU optimisation level and at level 0, with XLA_FLAGS turning off the concurrency-
optimised scheduler so the vmapped runs could not hang): one key and two keys vmapped
under jit, for every network kind. Rerun this file as a script to print the hashes.
"""
import hashlib
import os
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from credit_jax import nets
from credit_jax.nets import credit_models, lm, sequence


def _digest(tree) -> str:
  h = hashlib.sha256()
  for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
    leaf = np.asarray(leaf)
    h.update(jax.tree_util.keystr(path).encode())
    h.update(str(leaf.dtype).encode() + str(leaf.shape).encode())
    h.update(np.ascontiguousarray(leaf).tobytes())
  return h.hexdigest()[:24]


def _inits():
  """{name: init(key) -> params}, one per network kind the library builds."""
  mlp_net = nets.ActorCritic(num_actions=3, hidden_sizes=(16, 8))
  shared = nets.ActorCritic(num_actions=5, hidden_sizes=(8,), shared_torso=True)
  gru = sequence.make_sequence_network("gru", num_actions=3, hidden_size=16)
  transformer = sequence.make_sequence_network("transformer", num_actions=3)
  returns = credit_models.ReturnPredictor(hidden_size=8, encoder_sizes=(8,))
  hindsight = credit_models.HindsightModel(num_actions=4, hidden_sizes=(8, 8))
  token_lm = lm.TokenLM(vocab_size=11, d_model=16, num_heads=2, num_layers=1, max_len=8)
  return {
      "mlp": lambda k: mlp_net.init(k, jnp.zeros((6,))),
      "mlp_shared": lambda k: shared.init(k, jnp.zeros((2, 4))),
      "gru": lambda k: sequence.init_params(gru, k, (6,)),
      "transformer": lambda k: sequence.init_params(transformer, k, (6,)),
      "return_predictor": lambda k: returns.init(k, jnp.zeros((4, 2, 5)),
                                                 jnp.zeros((4, 2), bool)),
      "hindsight_model": lambda k: hindsight.init(k, jnp.zeros((3,)), jnp.zeros((2,))),
      "lm": lambda k: lm.init_params(token_lm, k),
  }


def hashes():
  out = {}
  for name, init in _inits().items():
    out[name] = _digest(init(jax.random.PRNGKey(7)))
    out[name + "/vmap2"] = _digest(jax.jit(jax.vmap(init))(jax.random.split(
        jax.random.PRNGKey(3), 2)))
  return out


EXPECTED = {
    "mlp": "84af284c69cc6ea3ffe634ab",
    "mlp/vmap2": "15dc6462785b45d2edb6bd90",
    "mlp_shared": "8a98f7b51500fb2096cc5e88",
    "mlp_shared/vmap2": "7e4a64bccf1e744f44a1c938",
    "gru": "dc0d68e81bbf230bf5330eb2",
    "gru/vmap2": "c193a66441a3dc2974e8afe4",
    "transformer": "f886def3c11baa1ddc0a5812",
    "transformer/vmap2": "abafe69f0f9ce0e90ed6ec36",
    "return_predictor": "4105b01824f283f2316abd0b",
    "return_predictor/vmap2": "b7bb24126b5a0574a8ba68ab",
    "hindsight_model": "e7da098ba75d923b98d09149",
    "hindsight_model/vmap2": "5ca099d67e25f51e9e69ded1",
    "lm": "a373d5a2799fe08eabbbb2a6",
    "lm/vmap2": "7e7eb7141ca29bdbeeb0c326",
}


# The same under XLA's CPU optimisation level 0, which tests/conftest.py sets for the
# suite (it changes the bits of the normal samples some initialisers draw).
EXPECTED_LEVEL0 = {
    "mlp": "1dd0b466485a78bc65e7cdeb",
    "mlp/vmap2": "9c2f7e0feff1b152b348d2c3",
    "mlp_shared": "6324e1138ce71615190f3535",
    "mlp_shared/vmap2": "45a3f26664bde08b229f7ecc",
    "gru": "3533e604ac8e666494fb0a7a",
    "gru/vmap2": "d3f9a47ae1da6e23a4527118",
    "transformer": "9fb94a6a14268cf4dd958546",
    "transformer/vmap2": "0964811d732fe55e0f13ceee",
    "return_predictor": "d2aacc476f25abea81eac46c",
    "return_predictor/vmap2": "1f8261ad4751cb9e3773e806",
    "hindsight_model": "5b9d746e1a71c0e5270e17c6",
    "hindsight_model/vmap2": "09f5dd94010a6de9cce2ce51",
    "lm": "7d576c6dbe84a5ba48b37d3a",
    "lm/vmap2": "5d6bc38a76457e397cdcc459",
}


def _expected():
  flags = os.environ.get("XLA_FLAGS", "")
  if re.search(r"--xla_backend_optimization_level=0\b", flags):
    return EXPECTED_LEVEL0
  if "xla_backend_optimization_level" in flags:
    pytest.skip(f"hashes recorded at XLA's default and level-0 CPU optimisation only "
                f"(XLA_FLAGS={flags!r})")
  return EXPECTED


@pytest.fixture(scope="module")
def computed():
  return hashes()


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_initial_params_bit_identical(name, computed):
  assert computed[name] == _expected()[name]


if __name__ == "__main__":
  for k, v in hashes().items():
    print(f"    {k!r}: {v!r},")
