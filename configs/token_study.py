"""The token-agent study: RL arms against an equal-token SFT arm, from one warm start.

  python3 scripts/token_study.py --config=configs/token_study.py:small --workdir=/tmp/t_s
  python3 scripts/token_study.py --config=configs/token_study.py --workdir=/tmp/tokens

Variants: none (k = 8 and 16, 5 seeds, a 600-step warm start, then SFT, GRPO and
turn-level GRPO at both k and PPO at k = 8, 100 updates of 32 prompts x 8 with the
reference KL and an approx_kl target of 0.01; not run on a 2-core CPU: its CPU-hours are
in docs/results/token_agent.md), "steps" (the same with step-indexed prompts and tool
outputs), "spread" (warm starts stopped once sampled training success reaches 0.3),
"length" (warm starts on k = 1-4 demonstrations, then the arms at k = 8 and 16),
"small" (every arm at k = 2, 2 seeds, a check that runs in minutes on a 2-core CPU).
Fields: `credit_jax/experiments/token_study/study.py`.
"""
from credit_jax.experiments import token_study

VARIANTS = (None, "small", "steps", "spread", "length")


def get_config(arg=None):
  """Returns the config; `arg` picks a variant (see VARIANTS)."""
  if arg not in VARIANTS:
    raise ValueError(f"unknown variant {arg!r}; use one of {VARIANTS}")
  c = token_study.default_config()
  if arg == "small":
    c.turns = (2,)
    c.compare_turns = (2,)
    c.seeds = 2
    c.eval_episodes = 32
    c.chunk_updates = 5
    c.recipe.num_updates = 10
    c.recipe.num_tasks = 8
    c.recipe.group_size = 4
    c.recipe.num_minibatches = 2
    c.recipe.sft_steps = 60
  elif arg == "steps":
    c.recipe.env_kwargs.step_index = True
  elif arg == "spread":
    c.warm_start = "spread"
  elif arg == "length":
    c.warm_turns = (1, 2, 3, 4)
  return c
