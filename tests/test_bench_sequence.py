"""benchmarks/bench_sequence.py's row configs and its multiply-add count (kernel weights),
checked against the networks' shapes by hand. No program is compiled or timed here."""
import jax
import pytest

from credit_jax import algos
from config_files import load_benchmark


@pytest.fixture(scope="module")
def bench():
  return load_benchmark("bench_sequence")


def _params(config):
  """The parameter shapes the row's PPO trains (nothing is computed)."""
  return jax.eval_shape(algos.make_train(config).init, jax.random.PRNGKey(0)).params


@pytest.mark.parametrize("name, expected", [
    # KeyChain-v0 (k=2, A=2): observation 4, so the MLP reads 4 inputs and the
    # sequence token 4 + 2 (one-hot previous action) + 1 (previous reward) = 7.
    ("mlp", 2 * (4 * 64 + 64 * 64) + 64 * 2 + 64 * 1),          # a torso each
    ("mlp, shared torso", (4 * 64 + 64 * 64) + 64 * 2 + 64 * 1),
    ("gru", 7 * 64 + 64 * 3 * 64 + 3 * 64 * 64 + 64 * 2 + 64 * 1),
    ("gru, gru_size=32", 7 * 64 + 64 * 3 * 32 + 3 * 32 * 32 + 32 * 2 + 32 * 1),
])
def test_kernel_weights_count_each_rows_multiply_adds(bench, name, expected):
  config = bench.bench_config(name, num_envs=4, horizon=20, updates=1)
  assert config.num_steps == config.env_kwargs.horizon == 20
  assert config.total_timesteps == 4 * 20
  assert bench.kernel_weights(_params(config)) == expected


def test_bench_config_rows(bench):
  chunked = bench.bench_config("gru, bptt_chunk=10", num_envs=4, horizon=20, updates=2,
                               epochs=1)
  assert (chunked.network.kind, chunked.network.bptt_chunk, chunked.update_epochs,
          chunked.num_minibatches) == ("gru", 10, 1, 2)
  mlp = bench.bench_config("mlp", num_envs=4, horizon=20, updates=1)
  assert (mlp.network.kind, tuple(mlp.network.hidden_sizes), mlp.network.shared_torso) == (
      "mlp", (64, 64), False)
  assert bench.bench_config("transformer", 4, 20, 1).network.kind == "transformer"
