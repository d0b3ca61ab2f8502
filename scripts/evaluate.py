"""Measures a trained run's policy: restores a checkpoint, runs fresh episodes, a table.

  python3 scripts/evaluate.py --workdir=/tmp/grpo
  python3 scripts/evaluate.py --workdir=/tmp/grpo --checkpoint=best --episodes=1024
  python3 scripts/evaluate.py --workdir=/tmp/grpo --checkpoint=40 --greedy --seed=3

--workdir is one scripts/train.py wrote. --checkpoint: latest (default), best (the one
kept by the run's best metric, checkpoints_best/) or an update number. Every seed of the
run is measured with the sampled and the greedy policy (--greedy: greedy only,
--nogreedy: sampled only) on --episodes fresh episodes each, from keys independent of
training's; success (where the env defines it) gets a 95% Wilson interval, the return a
95% t-interval. Prints the table, then writes its JSON to --output=PATH or, by default,
to a new file per evaluation, --workdir/eval/<which>_update<N>.json (never overwriting
one). A read-only workdir still gets the table, with a line saying where the JSON could
not go (exit status 0); an --output that cannot be written exits 5. Every recipe and
network kind is measured (DQN: greedy argmax Q, sampled epsilon-greedy at config.epsilon;
goal-conditioned recipes on their env's goals). --imports=MODULE imports modules first (one that registers
the run's environment by name). Failures are one line with scripts/train.py's exit
statuses (`--debug`: the traceback).
All logic lives in credit_jax/runtime/evaluate.py.
"""
import sys

import cpu_affinity

from absl import app, flags  # pylint: disable=g-bad-import-order

from credit_jax import fast_paths  # pylint: disable=g-import-not-at-top,g-bad-import-order
from credit_jax.runtime import cli, evaluate  # pylint: disable=g-import-not-at-top

_WORKDIR = flags.DEFINE_string("workdir", None, "The run's directory (scripts/train.py's).")
_CHECKPOINT = flags.DEFINE_string("checkpoint", "latest", "latest, best or an update number.")
_EPISODES = flags.DEFINE_integer("episodes", 256, "Fresh episodes per seed and policy.")
_GREEDY = flags.DEFINE_bool("greedy", None, "Unset: sampled and greedy policies; "
                            "--greedy: greedy only; --nogreedy: sampled only.")
_SEED = flags.DEFINE_integer("seed", 0, "Seed of the evaluation's keys.")
_MAX_STEPS = flags.DEFINE_integer("max_steps", None, "Steps an episode may take (default: "
                                  "the env's time limit, else config.horizon).")
_OUTPUT = flags.DEFINE_string("output", None, "Where to write the evaluation's JSON (replaced "
                              "if it exists; an unwritable path: exit status 5). Default: a "
                              "new file per evaluation, --workdir/eval/<which>_update<N>.json.")
_IMPORTS = flags.DEFINE_list("imports", [], "Modules to import first (e.g. one that "
                             "registers the run's environment).")
flags.mark_flags_as_required(["workdir"])


def main(argv):
  if len(argv) > 1:
    cli.fail(f"unexpected arguments: {argv[1:]}", cli.EXIT_USAGE)
  cli.quiet_library_logs()
  fast_paths.set_enabled(not cpu_affinity.accelerator_present())
  cli.guard(lambda: evaluate.evaluate_run(
      _WORKDIR.value, checkpoint=_CHECKPOINT.value, episodes=_EPISODES.value,
      greedy=_GREEDY.value, seed=_SEED.value, max_steps=_MAX_STEPS.value,
      imports=_IMPORTS.value, output=_OUTPUT.value, log=print))
  sys.exit(0)


if __name__ == "__main__":
  app.run(main, flags_parser=cli.parse_flags)
