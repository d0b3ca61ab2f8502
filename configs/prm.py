"""The PRM experiment (issue 19, exercise 4): `credit_jax/experiments/prm.py`.

  python3 scripts/prm.py --config=configs/prm.py --workdir=/tmp/prm
  python3 scripts/prm.py --config=configs/prm.py:small --workdir=/tmp/prm_s

`get_config(arg)` starts from the experiment's `default_config()`; its `grpo` field is a
GRPO config (`grpo.default_config()` on RunningSum-v0 with a `prm` block) that can also
be trained alone. Variants: none (N=3 terms mod 3, T=6, 500 updates: outcome-only
GRPO learns, slowly; step w in {0.1, 0.3}), "small" (the same task, 300 updates,
shaping w = 0.05 and step w = 0.1: meant to fit 10 minutes on 2 idle CPU cores; 53
minutes measured on a machine at load average ~24), "speed" (part A's outcome-only and
truth-retrained per-step arms, w in {0.1, 0.3, 1}, 600 updates: steps to 50% success),
"tiny" (tests).
"""
from credit_jax.experiments import prm as prm_experiment


def get_config(arg=None):
  """Returns the experiment config; `arg`: None, "small", "speed" or "tiny"."""
  c = prm_experiment.default_config()
  g = c.grpo
  if arg == "small":
    g.num_updates = 300
    g.chunk_updates = 50
    g.checkpoint_every = 50
    c.weights = (0.05,)
    c.step_weights = (0.1,)
    c.compounding_episodes = 128
    c.label_episodes = 64
    c.rerank_tasks = 32
  elif arg == "speed":   # part A's speed question only, longer: 600 updates
    g.num_updates = 600
    g.chunk_updates = 100
    g.checkpoint_every = 100
    c.step_weights = (0.1, 0.3, 1.0)
    c.only_arms = ("outcome",) + tuple(f"step w={w:g} retrain truth" for w in c.step_weights)
    c.parts = "A"
  elif arg == "tiny":
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
    c.label_episodes = 8
    c.mc_N = (1, 4)
    c.retrain_every = 2
    g.prm.retrain_mc_states = 8
    g.prm.retrain_steps = 5
    c.rerank_N = (1, 2)
    c.rerank_tasks = 4
    c.step_weights = (0.1,)   # three compiled arm groups: the suite's time goes to compiles
    c.only_arms = ("outcome", "sum w=0.5", "PRM-only sum", "step w=0.1 retrain truth",
                   "step w=0.1 retrain mc")
  elif arg:
    raise ValueError(f"unknown variant {arg!r}; use none, 'small', 'speed' or 'tiny'")
  return c
