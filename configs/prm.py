"""GRPO on RunningSum-v0 with process-reward-model shaping (issue 19, exercise 4).

  python3 scripts/train.py --config=configs/prm.py --workdir=/tmp/prm_grpo
  python3 scripts/train.py --config=configs/prm.py:small --workdir=/tmp/prm_grpo_s
  python3 scripts/prm.py --config=configs/prm.py:small --workdir=/tmp/prm_exp

`get_config(arg)` is a GRPO config (`grpo.default_config()` with `config.prm`, see
`credit_jax/prm.py`'s `default_config()`); the experiment (`scripts/prm.py`) takes it as
the base config of every arm and reads its `experiment` block (arms, seeds, compounding).
Variants: none (N=6 terms, T=24 steps), "small" (N=4, T=16, fewer updates: the
experiment in <= 10 minutes on 2 CPU cores), "tiny" (for tests).
"""
from credit_jax import prm
from credit_jax.algos import grpo


def get_config(arg=None):
  """Returns the config; `arg` picks a variant (None, "small" or "tiny")."""
  c = grpo.default_config()
  c.env_name = "RunningSum-v0"    # step-verifiable running-sum chain of thought
  c.env_kwargs = dict()           # KeyChain's fields dropped; RunningSum's below
  c.env_kwargs.num_terms = 6      # N numbers to add (progress steps to the answer)
  c.env_kwargs.modulus = 4        # M: sums mod M; actions 2 (M + 1)
  c.env_kwargs.horizon = 24       # T: time limit (room for padding)
  c.horizon = 24                  # rollout steps per episode
  c.num_updates = 100             # GRPO updates
  c.num_tasks = 16                # problems per update
  c.group_size = 8                # rollouts per problem
  c.lr = 3e-3                     # policy learning rate
  c.ent_coef = 0.01               # entropy bonus
  c.prm = prm.default_config()    # the PRM block (credit_jax/prm.py)
  c.prm.weight = 0.1              # lightly weighted PRM shaping
  c.experiment = dict(            # read by credit_jax/experiments/prm.py only
      seeds=5,                    # seeds per arm (vmapped)
      weights=(0.05, 0.5),        # shaping weights w of the outcome + PRM arms
      retrain_every=10,           # updates between PRM retrainings (retrain arm)
      compounding_T=(1, 5, 10, 20, 50, 100, 200, 500),  # trajectory lengths for a^T
      compounding_episodes=200,   # trajectories per T
      mc_N=(1, 2, 4, 8, 16),      # completions per MC label (label cost vs noise)
  )
  if arg == "small":
    c.env_kwargs.num_terms = 4
    c.env_kwargs.horizon = 16
    c.horizon = 16
    c.num_updates = 60
    c.chunk_updates = 20
    c.checkpoint_every = 20
  elif arg == "tiny":
    c.env_kwargs.num_terms = 2
    c.env_kwargs.horizon = 4
    c.horizon = 4
    c.num_updates = 3
    c.num_tasks = 4
    c.group_size = 2
    c.num_minibatches = 1
    c.chunk_updates = 3
    c.checkpoint_every = 3
    c.prm.demo_episodes = 16
    c.prm.train_steps = 5
    c.prm.batch_size = 16
    c.experiment.seeds = 2
    c.experiment.compounding_T = (1, 5)
    c.experiment.compounding_episodes = 8
    c.experiment.mc_N = (1, 4)
  elif arg:
    raise ValueError(f"unknown variant {arg!r}; use none, 'small' or 'tiny'")
  return c
