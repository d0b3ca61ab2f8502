"""Step-level credit (VinePPO, GiGPO, tree groups) against GRPO and PPO + GAE at equal env
steps on KeyChain without its memoryless shortcuts (credit_jax/experiments/step_credit/).

  python3 scripts/step_credit.py --workdir=runs/step_credit [--small]
"""
from credit_jax.runtime import launch

launch.configure_process(num_seeds=2)   # before JAX starts: the multi-seed XLA setting

from absl import app, flags  # pylint: disable=g-import-not-at-top,g-bad-import-order

from credit_jax.experiments import step_credit  # pylint: disable=g-import-not-at-top

_WORKDIR = flags.DEFINE_string("workdir", "runs/step_credit", "Output folder.")
_SMALL = flags.DEFINE_bool("small", False, "A seconds-long run (T = 20, 2 seeds).")
_HORIZONS = flags.DEFINE_list("horizons", [], "Override the horizons, e.g. 100,1000.")
_BUDGET = flags.DEFINE_integer("budget_updates", 0, "Override the budget (GRPO updates).")


def main(argv):
  del argv
  config = step_credit.default_config(_SMALL.value)
  if _HORIZONS.value:
    config.horizons = tuple(int(t) for t in _HORIZONS.value)
  if _BUDGET.value:
    config.budget_updates = _BUDGET.value
  out = step_credit.run(config, _WORKDIR.value)
  print("\n".join(out["markdown"]))


if __name__ == "__main__":
  app.run(main)
