"""REINFORCE on KeyChain-v0, with a choice of credit (terminal | rtg | gae) and baseline.

  python3 scripts/train.py --config=configs/reinforce_keychain.py --workdir=/tmp/rf
  python3 scripts/train.py --config=configs/reinforce_keychain.py:small --workdir=/tmp/rf_s
  python3 scripts/train.py --config=configs/reinforce_keychain.py \
      --config.credit=gae --config.baseline=value --workdir=/tmp/rf_gae

Variants: none, "small" (a quick check that runs in well under a minute on a 2-core CPU).
"""
import ml_collections


def get_config(arg=None):
  """Returns the config; `arg` picks a variant (None or "small")."""
  c = ml_collections.ConfigDict()
  c.algo = "reinforce"            # recipe in credit_jax.algos.RECIPES
  c.env_name = "KeyChain-v0"      # any id of credit_jax.envs.registered_envs()
  c.env_kwargs = ml_collections.ConfigDict()  # overrides passed to cj.envs.make
  c.env_kwargs.horizon = 20       # KeyChain episode length T
  c.env_kwargs.num_pivotal = 2    # pivotal steps k
  c.env_kwargs.num_actions = 4    # actions A (random success (1/A)^k)
  c.env_kwargs.cue_delay = 0      # steps between a cue and its pivotal step
  c.history_window = 0            # >0: observe the last W observations; needs >= cue_delay+1
  c.seed = 0                      # base RNG seed; seed i of a multi-seed run is split from it
  c.seeds = 1                     # seeds trained side by side in one compiled call (vmap)

  c.num_updates = 200             # updates (one batch of episodes each)
  c.num_envs = 64                 # episodes per update
  c.horizon = 20                  # rollout steps per episode (>= the env's episode length)
  c.credit = "rtg"                # terminal | rtg | gae: what each step is credited with
  c.baseline = "mean"             # none | mean (leave-one-out) | value (learned)
  c.normalize_advantages = False  # standardise advantages over the batch

  c.lr = 3e-3                     # Adam learning rate (swept as a traced hparam)
  c.anneal_lr = False             # linearly anneal lr to 0 over the run
  c.adam_eps = 1e-5               # Adam epsilon
  c.max_grad_norm = 1.0           # global gradient-norm clip
  c.gamma = 1.0                   # discount of returns-to-go / lambda-returns
  c.gae_lambda = 0.95             # lambda of credit="gae"
  c.ent_coef = 0.0                # entropy bonus weight
  c.vf_coef = 0.5                 # value loss weight (credit="gae" or baseline="value")

  c.network = ml_collections.ConfigDict()
  c.network.hidden_sizes = (64, 64)  # MLP widths of each torso
  c.network.activation = "tanh"      # tanh | relu | gelu | silu
  c.network.shared_torso = False     # one torso for policy and value, or one each

  c.chunk_updates = 25            # updates per compiled call (one progress line each)
  c.checkpoint_every = 50         # updates between checkpoints (multiple of chunk_updates)
  c.keep_checkpoints = 3          # newest checkpoints kept

  if arg == "small":
    c.num_updates = 20
    c.num_envs = 16
    c.chunk_updates = 5
    c.checkpoint_every = 5
  elif arg:
    raise ValueError(f"unknown variant {arg!r}; use none or 'small'")
  return c
