"""The learned-credit study: RUDDER, HCA and COCOA against GRPO and PPO + GAE.

  python3 scripts/learned_credit.py --config=configs/learned_credit.py --workdir=DIR

Writes summary.json and summary.md into --workdir. All logic lives in
credit_jax/experiments/learned_credit/.
"""
from credit_jax.experiments import cli, learned_credit

if __name__ == "__main__":
  cli.main(learned_credit)
