"""No hang from Python, with no setup call: the library never reaches the kernel that wedges.

jaxlib 0.10's batched CPU QR kernel (flax's orthogonal initialiser vmapped over seeds)
can wedge the process for good (BUILD.md "No hang from Python": 5 of 5 runs of
scripts/repro/direct_gru_ppo.py hung on 2 cores). Every network of the library draws its
orthogonal matrices through `credit_jax.nets.orthogonal`, which maps the unbatched QR over
a vmapped batch. These tests check that structurally (no LAPACK primitive of a vmapped
training program has a batch dimension, over every recipe's traced program; flax's own
initialiser has one, so the check can fail) and by running the no-setup direct-API script
in a fresh process without any XLA_FLAGS of this session, watched by scripts/soak.py's
CPU-idle watchdog (a run with no CPU for IDLE_S seconds is hung: killed, the test fails).
`cj.configure_process()` is optional: no warning without it, no re-execution after JAX
started.
"""
import os
import subprocess
import sys

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from credit_jax import algos, nets
from credit_jax.runtime import launch

from config_files import load_config, load_script

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPRO = os.path.join(ROOT, "scripts", "repro")
# A wedged run uses no CPU at all: one with no CPU for IDLE_S seconds is hung (killed, the
# test fails), whatever the machine's load; TIMEOUT_S only bounds a run that crawls.
IDLE_S, TIMEOUT_S = 60, 600
# Test infrastructure only (tests/conftest.py): halves the compile time of the scripts.
LEVEL0 = "--xla_backend_optimization_level=0"
# jax's CPU LAPACK-backed linear-algebra primitives.
LAPACK = {"qr", "householder_product", "geqrf", "geqp3", "cholesky", "eigh", "eig", "svd",
          "lu", "lu_pivots_to_permutation", "triangular_solve", "schur", "hessenberg",
          "tridiagonal", "tridiagonal_solve"}


def _clean_env():
  """The environment of a fresh `python3 script.py`: no XLA_FLAGS from this session."""
  env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
  env["PYTHONPATH"] = os.pathsep.join([ROOT] + [p for p in [env.get("PYTHONPATH")] if p])
  env.setdefault("JAX_PLATFORMS", "cpu")
  return env


def _eqns(jaxpr):
  """Every equation of `jaxpr` and of the jaxprs inside it (scan, cond, jit, custom rules)."""
  for eqn in jaxpr.eqns:
    yield eqn
    for value in eqn.params.values():
      for sub in (value if isinstance(value, (tuple, list)) else (value,)):
        if hasattr(sub, "eqns"):
          yield from _eqns(sub)
        elif hasattr(sub, "jaxpr") and hasattr(sub.jaxpr, "eqns"):
          yield from _eqns(sub.jaxpr)


def _batched_lapack(fn, *args):
  """[(primitive, operand shapes)] of the LAPACK calls in fn's jaxpr with a batch dim."""
  closed = jax.make_jaxpr(fn)(*args)
  return [(e.primitive.name, [tuple(v.aval.shape) for v in e.invars])
          for e in _eqns(closed.jaxpr) if e.primitive.name in LAPACK
          and any(len(getattr(v.aval, "shape", ())) > 2 for v in e.invars)]


def test_orthogonal_equals_flax_bit_for_bit_batched_and_nested():
  keys = jax.random.split(jax.random.PRNGKey(5), 6).reshape(2, 3, -1)
  for shape, scale, axis in [((5, 5), 1.0, -1), ((3, 7), np.sqrt(2), -1),
                             ((8, 2), 0.01, -1), ((2, 3, 4), 1.0, 0)]:
    ours = nets.orthogonal(scale, axis)
    flax_init = nn.initializers.orthogonal(scale, axis)
    one = keys[0, 0]
    assert np.array_equal(ours(one, shape), flax_init(one, shape))
    expected = np.stack([np.stack([flax_init(k, shape) for k in row]) for row in keys])
    got = jax.jit(jax.vmap(jax.vmap(lambda k: ours(k, shape))))(keys)
    assert np.array_equal(got, expected), shape
  with pytest.raises(ValueError, match="at least 2 dims"):
    nets.orthogonal()(keys[0, 0], (3,))


def test_vmapped_orthogonal_has_no_batched_qr_where_flax_has_one():
  keys = jax.random.split(jax.random.PRNGKey(0), 3)
  flax_qr = _batched_lapack(jax.vmap(lambda k: nn.initializers.orthogonal()(k, (4, 4))), keys)
  assert flax_qr and flax_qr[0][0] == "qr"      # the check sees the batched kernel
  assert _batched_lapack(jax.vmap(lambda k: nets.orthogonal()(k, (4, 4))), keys) == []


def _small(name, **changes):
  c = load_config(name, "small")
  for key, value in changes.items():
    parent = c
    *path, leaf = key.split(".")
    for p in path:
      parent = parent[p]
    parent[leaf] = value
  return c


RECIPE_CONFIGS = [
    ("ppo_cartpole", {}), ("ppo_gru_keychain", {}),
    ("ppo_gru_keychain", {"network.kind": "transformer"}), ("ppo_critic_keychain", {}),
    ("ppo_critic_keychain", {"network.critic_kind": "mlp"}),
    ("grpo_keychain", {}), ("reinforce_keychain", {}), ("dqn_bitflip", {}),
    ("grpo_relabel_goalgrid", {}), ("search_then_train_keychain", {}),
    ("hierarchy_goalgrid", {}), ("token_agent", {}),
]


@pytest.mark.parametrize("name,changes", RECIPE_CONFIGS,
                         ids=[f"{n}{'-' + '-'.join(map(str, c.values())) if c else ''}"
                              for n, c in RECIPE_CONFIGS])
def test_no_recipe_vmapped_over_seeds_reaches_a_batched_lapack_kernel(name, changes):
  train = algos.make_train(_small(name, **changes))
  keys = jax.random.split(jax.random.PRNGKey(0), 2)
  assert _batched_lapack(jax.vmap(train.init), keys) == []
  state = jax.eval_shape(jax.vmap(train.init), keys)
  hp = {k: jnp.full((2,), v) for k, v in train.default_hparams.items()}
  assert _batched_lapack(jax.vmap(lambda s, h: train.run(s, h, 1)), state, hp) == []


@pytest.mark.slow
def test_direct_api_script_without_the_setup_call_finishes(tmp_path, monkeypatch):
  # Before issue 46 this very run (no call, XLA_FLAGS holding only the level) hung 3 of 3.
  soak = load_script("soak")   # its watchdog: CPU idleness read from /proc, then a kill
  env = _clean_env()    # run_once replaces XLA_FLAGS; the rest comes from os.environ
  monkeypatch.setenv("PYTHONPATH", env["PYTHONPATH"])
  monkeypatch.setenv("JAX_PLATFORMS", env["JAX_PLATFORMS"])
  out_path = str(tmp_path / "run.out")
  r = soak.run_once([sys.executable, os.path.join(REPRO, "direct_gru_ppo.py"),
                     "--steps=4096", "--no-configure"], LEVEL0, TIMEOUT_S, IDLE_S, 0.2,
                    out_path)
  with open(out_path) as f:
    out = f.read()
  assert r["status"] != "hung", f"hung ({r['reason']}); output:\n{out[-3000:]}"
  assert r["status"] == "finished", f"failed ({r['reason']}):\n{out[-3000:]}"
  assert "env steps/s" in out and "Warning" not in out, out[-3000:]


def _python(code):
  proc = subprocess.run([sys.executable, "-c", code], env=_clean_env(), cwd=ROOT,
                        capture_output=True, text=True, timeout=TIMEOUT_S)
  assert proc.returncode == 0, proc.stderr[-3000:]
  return proc


def test_import_starts_no_backend_so_the_optional_call_applies_in_process():
  proc = _python("import os, credit_jax as cj\n"
                 "from jax._src import xla_bridge\n"
                 "assert not xla_bridge.backends_are_initialized(), 'import started one'\n"
                 "added = cj.configure_process()\n"
                 "import jax.numpy as jnp\n"
                 "float(jnp.ones(3).sum())\n"
                 "print('ADDED', added, 'FLAGS', os.environ.get('XLA_FLAGS', ''))\n")
  for flag in launch.xla_flags_for(None):
    assert flag in proc.stdout
  assert proc.stderr == "", proc.stderr


def test_use_without_the_call_is_silent_and_a_late_call_changes_nothing():
  proc = _python("import os, credit_jax as cj\n"
                 "import jax.numpy as jnp\n"
                 "float(cj.gae(jnp.ones(3), jnp.full(3, 0.9), jnp.zeros(4), 0.9).sum())\n"
                 "cj.envs.make('KeyChain-v0')\n"
                 "print('LATE', cj.configure_process(), repr(os.environ.get('XLA_FLAGS')))\n")
  assert "LATE [] None" in proc.stdout, proc.stdout
  assert proc.stderr == "", proc.stderr


def test_default_call_sets_the_flags_for_any_program_on_affected_jaxlib():
  env = {}
  added = launch.configure_process(environ=env, version=(0, 10))
  assert added and all(f in env["XLA_FLAGS"] for f in added)
  assert "--xla_cpu_enable_concurrency_optimized_scheduler=false" in added
  assert launch.configure_process(environ={}, version=(0, 99)) == []
  # Entry points still say how many seeds they vmap; one seed gets no flag.
  assert launch.configure_process(num_seeds=1, environ={}, version=(0, 10)) == []


def test_hang_advice_tells_a_user_with_their_own_flax_initialiser_what_to_do():
  advice = launch.hang_advice((0, 10), {"XLA_FLAGS": ""})
  assert "nn.initializers.orthogonal" in advice and "credit_jax.nets.orthogonal" in advice
  assert "\n" not in advice
