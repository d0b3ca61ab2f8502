"""Tests for credit_jax.runtime.parallel: seeds sharded over devices give the unsharded numbers.

The two-device check runs in a subprocess: the CPU device count is fixed when JAX starts,
and this test process has already started it with one device.
"""
import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from credit_jax.runtime import parallel

REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir)

TWO_DEVICES = textwrap.dedent("""
    import importlib.util, os, sys
    import jax
    jax.config.update("jax_num_cpu_devices", 2)   # before credit_jax imports gymnax
    import numpy as np
    from credit_jax.runtime import parallel
    from credit_jax.algos import ppo
    spec = importlib.util.spec_from_file_location(
        "c", os.path.join(sys.argv[1], "configs", "ppo_cartpole.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    config = module.get_config("small")
    config.num_steps, config.total_timesteps = 16, 4 * 16 * 3
    train = ppo.make_train(config)
    keys = jax.random.split(jax.random.PRNGKey(0), 4)
    state = jax.jit(jax.vmap(train.init))(keys)
    run = jax.vmap(lambda s: train.run(s, None, 3))
    plain_state, plain_metrics = jax.jit(run)(state)
    mesh = parallel.seed_mesh()
    sharding = parallel.seed_sharding(mesh)
    sharded = parallel.shard_seeds(state, mesh)
    out_state, out_metrics = jax.jit(run, in_shardings=sharding, out_shardings=sharding)(
        sharded)
    leaf = out_state.params["params"]["pi_torso"]["Dense_0"]["kernel"]
    assert len(leaf.sharding.device_set) == 2, leaf.sharding
    assert leaf.addressable_shards[0].data.shape[0] == 2
    for a, b in zip(jax.tree.leaves((plain_state, plain_metrics)),
                    jax.tree.leaves((out_state, out_metrics))):
      np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64),
                                 rtol=1e-5, atol=1e-6)
    try:
      parallel.shard_seeds(jax.numpy.zeros((3, 2)), mesh)
    except ValueError as e:
      assert "3 seeds" in str(e), e
    else:
      raise AssertionError("3 seeds over 2 devices were accepted")
    print("TWO_DEVICES_OK", len(jax.devices()))
""")


def test_two_cpu_devices_give_the_one_device_numbers():
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  proc = subprocess.run([sys.executable, "-c", TWO_DEVICES, REPO], capture_output=True,
                        text=True, env=env, timeout=600, check=False)
  assert "TWO_DEVICES_OK 2" in proc.stdout, proc.stderr[-3000:]


RUNNER_TWO_DEVICES = textwrap.dedent("""
    import importlib.util, json, os, shutil, sys
    import jax
    jax.config.update("jax_num_cpu_devices", 2)   # before credit_jax imports gymnax
    from credit_jax.runtime import checkpoint
    from credit_jax.runtime import run
    sys.path.insert(0, os.path.join(sys.argv[1], "tests"))
    from test_parallel import tiny_runner_config
    workdir = sys.argv[2]
    lines = []
    run.train_and_evaluate(tiny_runner_config(), workdir, log=lines.append)
    assert "seeds split over 2 devices, 2 per device" in lines, lines
    first = open(os.path.join(workdir, "metrics.jsonl")).read()
    ckdir = os.path.join(workdir, run.CHECKPOINT_DIR)
    with checkpoint.Checkpointer(ckdir) as ck:
      steps = ck.all_steps()
    assert steps[-1] == 4, steps
    shutil.rmtree(os.path.join(ckdir, str(steps[-1])))   # as if killed before the last save
    lines = []
    run.train_and_evaluate(tiny_runner_config(), workdir, log=lines.append)
    assert any(l.startswith("resumed from checkpoint at update 3/4") for l in lines), lines
    assert open(os.path.join(workdir, "metrics.jsonl")).read() == first
    lines = []
    run.seed_mesh_for(3, log=lines.append)
    assert any("do not split evenly over 2 devices" in l for l in lines), lines
    print("RUNNER_TWO_DEVICES_OK")
""")


def tiny_runner_config():
  """test_algos' tiny REINFORCE (6-step KeyChain, 4 updates, a checkpoint after each) with
  4 seeds."""
  from test_algos import tiny_reinforce  # pylint: disable=g-import-not-at-top
  return tiny_reinforce(seeds=4)


def test_runner_shards_seeds_and_resumes_them_sharded(tmp_path):
  from credit_jax.runtime import metrics
  from credit_jax.runtime import run
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  proc = subprocess.run([sys.executable, "-c", RUNNER_TWO_DEVICES, REPO,
                         str(tmp_path / "sharded")], capture_output=True, text=True,
                        env=env, timeout=600, check=False)
  assert "RUNNER_TWO_DEVICES_OK" in proc.stdout, proc.stderr[-3000:]
  # This process has one device: the same run unsharded logs the same numbers.
  lines = []
  run.train_and_evaluate(tiny_runner_config(), str(tmp_path / "plain"),
                            log=lines.append)
  assert not any("devices" in l for l in lines), lines
  sharded = metrics.read_jsonl(str(tmp_path / "sharded" / metrics.METRICS_FILE))
  plain = metrics.read_jsonl(str(tmp_path / "plain" / metrics.METRICS_FILE))
  assert [r["update"] for r in sharded] == [r["update"] for r in plain] == [1, 2, 3, 4]
  for a, b in zip(sharded, plain):
    for k, v in b["per_seed"].items():
      np.testing.assert_allclose(a["per_seed"][k], v, rtol=1e-5, atol=1e-6, err_msg=k)


def test_shard_seeds_on_one_device_keeps_values():
  mesh = parallel.seed_mesh(jax.devices()[:1])
  tree = {"a": jnp.arange(6.0).reshape(3, 2), "b": jnp.ones((3,), jnp.int32)}
  out = parallel.shard_seeds(tree, mesh)
  np.testing.assert_array_equal(out["a"], tree["a"])
  assert out["a"].sharding == parallel.seed_sharding(mesh)


def test_shard_seeds_rejects_mismatched_or_missing_seed_axes():
  mesh = parallel.seed_mesh(jax.devices()[:1])
  with pytest.raises(ValueError, match="leading seed axis"):
    parallel.shard_seeds({"a": jnp.zeros((3, 2)), "b": jnp.zeros((4,))}, mesh)
  with pytest.raises(ValueError, match="scalars"):
    parallel.shard_seeds({"a": jnp.zeros((3, 2)), "b": jnp.zeros(())}, mesh)
  with pytest.raises(ValueError, match="at least one device"):
    parallel.seed_mesh([])
