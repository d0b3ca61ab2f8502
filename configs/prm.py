"""The PRM experiment (exercise 4): `credit_jax/experiments/prm/study.py`.

  python3 scripts/prm.py --config=configs/prm.py --workdir=/tmp/prm          # = :small
  python3 scripts/prm.py --config=configs/prm.py:speed --workdir=/tmp/prm_speed

`get_config(arg)` starts from the experiment's `default_config()`; its `grpo` field is a
GRPO config (`grpo.default_config()` on RunningSum-v0 with a `prm` block) and its `ppo`
field a PPO one (`configs/ppo_prm.py`), each trainable alone. Variants:
  "small" (the default; N=3 terms mod 3, T=6, 300 GRPO updates, 5 seeds; shaping
    w = 0.05, step w = 0.1; parts A-E, part E PPO outcome vs step w in {0.1, 0.3} over
    300k env steps; what the README reports. Parts A-D ran in 3 min 31 s on the quiet
    2-core machine; A-E in 20 min 45 s at load average 15-18, 404 s of CPU),
  "speed" (part A's outcome-only and truth-retrained per-step arms, w in {0.1, 0.3, 1},
    600 updates: GRPO env steps to 50% success),
  "ppo" (part E alone),
  "full" (500 updates, w in {0.05, 0.5}, step w in {0.1, 0.3}, more problems and
    episodes in parts B-D; about 2.5x the default's GRPO work; not run yet),
  "smoke" (alias "tiny"; seconds of training, what the tests run).
"""
from credit_jax.experiments import prm as prm_experiment


def get_config(arg=None):
  """Returns the experiment config; `arg`: None / "small", "speed", "ppo", "full", "smoke"."""
  c = prm_experiment.default_config()
  g = c.grpo
  if arg in (None, "", "small"):
    pass
  elif arg == "speed":   # part A's speed question only, longer: 600 updates
    g.num_updates = 600
    g.chunk_updates = 100
    g.checkpoint_every = 100
    c.step_weights = (0.1, 0.3, 1.0)
    c.only_arms = ("outcome",) + tuple(f"step w={w:g} retrain truth" for w in c.step_weights)
    c.parts = "A"
  elif arg == "ppo":
    c.parts = "E"
  elif arg == "full":
    g.num_updates = 500
    g.chunk_updates = 100
    g.checkpoint_every = 100
    c.weights = (0.05, 0.5)
    c.step_weights = (0.1, 0.3)
    c.compounding_episodes = 256
    c.label_episodes = 128
    c.rerank_tasks = 64
  elif arg in ("smoke", "tiny"):
    g.env_kwargs = dict(num_terms=2, modulus=3, horizon=4)
    g.horizon = 4
    g.num_updates = 3
    g.num_tasks = 4
    g.group_size = 2
    g.num_minibatches = 1
    g.chunk_updates = 3
    g.checkpoint_every = 3
    g.prm.demo_episodes = 16
    g.prm.train_steps = 5
    g.prm.batch_size = 16
    c.seeds = 2
    c.weights = (0.5,)
    c.compounding_T = (1, 5)
    c.compounding_episodes = 8
    c.label_episodes = 16           # = demo_episodes: one compiled demo_data
    c.mc_N = (1, 4)
    c.retrain_every = 2
    g.prm.retrain_mc_states = 8
    g.prm.retrain_steps = 5
    c.rerank_N = (1, 2)
    c.rerank_tasks = 4
    c.step_weights = (0.1,)
    # One compiled arm group (the suite's time goes to compiles): outcome, sum and
    # PRM-only share a program. The step form and retraining have their own tests
    # (tests/test_prm_shaping.py).
    c.only_arms = ("outcome", "sum w=0.5", "PRM-only sum")
    p = c.ppo
    p.env_kwargs = dict(num_terms=2, modulus=3, horizon=4, time_limit_terminates=True)
    p.num_envs, p.num_steps, p.num_minibatches, p.update_epochs = 4, 8, 1, 1
    p.total_timesteps = 4 * 8 * 3
    p.chunk_updates, p.checkpoint_every = 3, 3
    p.prm.demo_episodes, p.prm.train_steps, p.prm.batch_size = 16, 5, 16
    p.prm.retrain_every, p.prm.retrain_steps = 2, 5
    c.ppo_weights = (0.3,)
  else:
    raise ValueError(f"unknown variant {arg!r}; use 'small' (default), 'speed', 'ppo', "
                     "'full' or 'smoke'")
  return c
