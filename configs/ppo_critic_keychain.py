"""PPO with an MLP actor and a critic of its own on KeyChain-v0 (cue_delay 0), with the GAE
gradient measured against KeyChain's exact gradient during training.

  python3 scripts/train.py --config=configs/ppo_critic_keychain.py --workdir=/tmp/pc
  python3 scripts/train.py --config=configs/ppo_critic_keychain.py:oracle --workdir=...
  python3 scripts/train.py --config=configs/ppo_critic_keychain.py:small --workdir=...

The actor sees the current observation (the cue is shown at its pivotal step); the critic
is a GRU over the episode's observations and actions (default), an MLP over the current
observation plus KeyChain's oracle feature ("oracle": whether every pivotal step so far
was right, and the fraction left), or the actor-critic's own value head ("obs", the
observation-only critic). Every `gae_gradient_every` updates the metrics `gae_grad_*`
report the bias, cosine and variance of the GAE policy gradient under the current critic
against the exact gradient (credit_jax/addons/gae_probe.py).

Variants: none (T=50, k=3, A=4: random success 1/64; GRU critic), "oracle", "obs",
"small" (T=8, k=2, A=4, GRU critic, 70 updates: the setting of the CI learning test,
which reaches training success >= 0.94 from update 40 on, seed 0).

Measured (seed 0, one run each, 64 episodes per measurement, 2-core machine at load
average ~20): the exact success probability J of the actor at the measured updates
reached 0.96 by update 51 with the oracle critic, 0.88 by update 176 with the GRU critic,
and 0.75 by update 251 with the observation-only critic (all >= 0.95 at update 300).
One seed: an illustration, not a comparison (the horizon study measures that).
"""
from credit_jax.algos import ppo


def get_config(arg=None):
  """Returns the config; `arg` picks a variant (None, "oracle", "obs" or "small")."""
  c = ppo.default_config()
  c.env_name = "KeyChain-v0"      # any id of credit_jax.envs.registered_envs()
  c.env_kwargs.horizon = 50       # KeyChain episode length T
  c.env_kwargs.num_pivotal = 3    # pivotal steps k
  c.env_kwargs.num_actions = 4    # actions A (random success (1/A)^k)
  c.env_kwargs.cue_delay = 0      # the cue at its own pivotal step
  c.total_timesteps = 240_000     # env steps per seed; updates = this // (envs * steps)
  c.num_envs = 16                 # parallel environments per seed
  c.num_steps = 50                # rollout window per update (= T)
  c.num_minibatches = 2           # minibatches of whole env windows; must divide num_envs
  c.lr = 3e-3                     # learning rate (a traced hparam)
  c.anneal_lr = False             # constant learning rate
  c.gamma = 1.0                   # no discount: the task's objective is the success rate
  c.gae_lambda = 0.95             # GAE lambda (a traced hparam)
  c.network.hidden_sizes = (32,)  # actor MLP (and critic encoder / MLP) widths
  c.network.gru_size = 32         # GRU critic state size
  c.network.kind = "mlp"          # the actor: an MLP on the current observation
  c.network.critic_kind = "gru"   # same | mlp | gru | transformer
  c.network.critic_oracle = False # the critic also sees env.oracle_feature(state)
  c.gae_gradient_every = 25       # gae_grad_* metrics every 25 updates
  c.gae_gradient_episodes = 256   # fresh episodes per measurement
  c.chunk_updates = 50            # updates per compiled call (multiple of gae_gradient_every)
  c.checkpoint_every = 150        # updates between checkpoints (multiple of chunk_updates)

  if arg == "oracle":
    c.network.critic_kind = "mlp"
    c.network.critic_oracle = True
  elif arg == "obs":
    c.network.critic_kind = "same"
  elif arg == "small":
    c.env_kwargs.horizon = 8
    c.env_kwargs.num_pivotal = 2
    c.num_steps = 8
    c.total_timesteps = 70 * 16 * 8
    c.gae_gradient_every = 10
    c.chunk_updates = 70
    c.checkpoint_every = 70
  elif arg:
    raise ValueError(f"unknown variant {arg!r}; use none, 'oracle', 'obs' or 'small'")
  return c
