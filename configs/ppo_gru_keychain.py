"""PPO with a GRU actor-critic on KeyChain-v0 with delayed cues (memory needed).

  python3 scripts/train.py --config=configs/ppo_gru_keychain.py --workdir=/tmp/ppo_gru
  python3 scripts/train.py --config=configs/ppo_gru_keychain.py:small --workdir=/tmp/g_s
  python3 scripts/train.py --config=configs/ppo_gru_keychain.py:transformer --workdir=...

The cue of each pivotal step is shown `cue_delay` steps before it and never at it, and
there is no history window, so a memoryless policy succeeds with probability exactly
(1/A)^k whatever it learns (at a pivotal step its observation is independent of the
answer). The GRU remembers the cue.

Variants: none (T=64, k=2, A=2, cue_delay=16: MLP ceiling 25%; 300 updates of 32 x 64
steps, seed 0: GRU training return 0.93 over the last 10 updates, and >= 0.88 at every
20th update from update 60 on), "small" (T=16, k=1, A=4, cue_delay=4: MLP ceiling 25%;
the setting of the CI learning test), "transformer" (the default task with a causal
transformer over the episode instead of the GRU; 400 updates, seed 0: training return
0.92 over the last 10 updates).
"""
import ml_collections


def get_config(arg=None):
  """Returns the config; `arg` picks a variant (None, "small" or "transformer")."""
  # Fields as in configs/ppo_cartpole.py (PPO's config), then the sequence network's.
  c = ml_collections.ConfigDict()
  c.algo = "ppo"                  # recipe in credit_jax.algos.RECIPES
  c.env_name = "KeyChain-v0"      # any id of credit_jax.envs.registered_envs()
  c.env_kwargs = ml_collections.ConfigDict()  # overrides passed to cj.envs.make
  c.env_kwargs.horizon = 64       # KeyChain episode length T
  c.env_kwargs.num_pivotal = 2    # pivotal steps k
  c.env_kwargs.num_actions = 2    # actions A (memoryless success (1/A)^k)
  c.env_kwargs.cue_delay = 16     # steps between a cue and its pivotal step
  c.history_window = 0            # no window: memory must come from the network
  c.seed = 0                      # base RNG seed; seed i of a multi-seed run is split from it
  c.seeds = 1                     # seeds trained side by side in one compiled call (vmap)

  c.total_timesteps = 614_400     # env steps per seed; updates = this // (envs * steps)
  c.num_envs = 32                 # parallel environments per seed
  c.num_steps = 64                # rollout window per update (= T: one episode each)
  c.update_epochs = 4             # passes over each rollout
  c.num_minibatches = 4           # minibatches of whole env windows; must divide num_envs

  c.lr = 3e-3                     # Adam learning rate (swept as a traced hparam)
  c.anneal_lr = False             # linearly anneal lr to 0 over the run
  c.adam_eps = 1e-5               # Adam epsilon
  c.max_grad_norm = 0.5           # global gradient-norm clip
  c.gamma = 0.99                  # discount
  c.gae_lambda = 1.0              # GAE lambda (1: the critic's memory of the pivotal
                                  # answer is hard to learn, so no bootstrapping)
  c.gae_method = "auto"           # cj.gae method: "scan", "associative" or "auto"
  c.clip_eps = 0.2                # PPO ratio clip (also the value clip)
  c.clip_value_loss = True        # clip the value update around the rollout's values
  c.ent_coef = 0.01               # entropy bonus weight
  c.vf_coef = 0.5                 # value loss weight

  c.network = ml_collections.ConfigDict()
  c.network.kind = "gru"             # mlp | gru | transformer
  c.network.hidden_sizes = (64,)     # MLP widths (the GRU's input encoder)
  c.network.activation = "tanh"      # tanh | relu | gelu | silu
  c.network.shared_torso = True      # one GRU trunk for policy and value, or one each
  c.network.gru_size = 64            # GRU state size
  c.network.d_model = 32             # transformer width
  c.network.num_heads = 2            # transformer attention heads
  c.network.num_layers = 1           # transformer blocks
  c.network.max_len = 64             # transformer KV-cache slots = attention window

  c.chunk_updates = 50            # updates per compiled call (one progress line each)
  c.checkpoint_every = 150        # updates between checkpoints (multiple of chunk_updates)
  c.keep_checkpoints = 3          # newest checkpoints kept

  if arg == "small":
    c.env_kwargs.horizon = 16
    c.env_kwargs.num_pivotal = 1
    c.env_kwargs.num_actions = 4
    c.env_kwargs.cue_delay = 4
    c.num_steps = 16
    c.network.gru_size = 32
    c.network.hidden_sizes = (32,)
    c.total_timesteps = 32 * 16 * 100  # 100 updates
    c.chunk_updates = 50
    c.checkpoint_every = 100
  elif arg == "transformer":
    c.network.kind = "transformer"
    c.lr = 1e-3                   # (3e-3: 0.77 over the last 10 of 300 updates)
    c.total_timesteps = 819_200   # 400 updates
  elif arg:
    raise ValueError(f"unknown variant {arg!r}; use none, 'small' or 'transformer'")
  return c
