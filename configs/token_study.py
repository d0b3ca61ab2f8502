"""The token-agent study: held-out success against the number of calculator turns.

  python3 scripts/token_study.py --config=configs/token_study.py --workdir=/tmp/tokens
  python3 scripts/token_study.py --config=configs/token_study.py:small --workdir=/tmp/t_s

Variants: none (k = 1, 2, 4, 8, 16, 5 seeds, a warm start of 600 supervised steps on the
oracle's demonstrations, then 100 GRPO updates; GRPO vs PPO at k = 4 at equal tokens;
docs/results/token_agent.md), "small" (a check that runs in a few minutes on a 2-core
CPU). Fields: `credit_jax/experiments/token_study/study.py`.
"""
from credit_jax.experiments import token_study


def get_config(arg=None):
  """Returns the config; `arg` picks a variant (None or "small")."""
  c = token_study.default_config()
  if arg == "small":
    c.turns = (1, 2)
    c.compare_turns = (1,)
    c.seeds = 2
    c.eval_episodes = 32
    c.chunk_updates = 5
    c.recipe.num_updates = 10
    c.recipe.sft_steps = 40
  elif arg:
    raise ValueError(f"unknown variant {arg!r}; use none or 'small'")
  return c
