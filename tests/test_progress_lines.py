"""Progress lines say what each number is (issue 46): the env steps/s of the run so far,
the last update's metrics, the best checkpoint's and the final figures as the means they
are; the run header's chunk plan; a short last chunk's compile says why; the sweep's
last line counts every cell done."""
import types

import pytest

from credit_jax.runtime import metrics
from credit_jax.runtime import run as runner
from credit_jax.sweep import execute

from config_files import load_config


def test_progress_rate_is_the_run_average_and_metrics_are_labelled_last_update():
  lines = []
  p = metrics.Progress(total_updates=27, env_steps_per_update=512, show=("success",),
                       log=lines.append)
  p.report(25, 25, 2.0, {"success": 0.5})
  line = p.report(27, 2, 1.0, {"success": 0.938})   # a short last chunk, slower per update
  # 27 updates x 512 steps in 3.0 s, not the last chunk's 2 x 512 / 1.0 s = 1,024.
  assert "4,608 env steps/s (run avg)" in line
  assert line.endswith("| last update: success 0.938")


@pytest.mark.parametrize("left,chunk,expected", [
    (39, 61, "one chunk of 39 updates"), (1, 5, "one chunk of 1 update"),
    (60, 20, "3 chunks of 20 updates"),
    (62, 30, "2 chunks of 30 updates, then one of 2 (compiled on its own)")])
def test_run_header_states_the_chunks_the_run_will_compile(left, chunk, expected):
  assert runner._chunk_plan(left, chunk) == expected   # pylint: disable=protected-access


def test_run_lines_label_best_final_and_the_short_last_chunk(tmp_path):
  c = load_config("grpo_keychain", "small")
  c.env_kwargs.update(horizon=6, num_pivotal=1, num_actions=2)
  c.update(horizon=6, num_tasks=4, group_size=4, num_updates=5, chunk_updates=2,
           checkpoint_every=2)
  c.network.hidden_sizes = (8,)
  lines = []
  runner.train_and_evaluate(c, str(tmp_path), log=lines.append)
  text = "\n".join(lines)
  assert "5 updates x 96 env steps x 1 seed(s), 2 chunks of 2 updates, then one of 1 " \
         "(compiled on its own)" in text, text
  assert "compiled a chunk of 1 update in" in text and \
         "for the last 1 of 5 updates (5 is not a multiple of chunk_updates=2" in text, text
  best = [l for l in lines if l.startswith("best success so far: ")]
  assert best and "(mean of update" in best[0] and "kept the checkpoint of update" in best[0]
  final = [l for l in lines if l.startswith("final ")]
  assert final and final[0].startswith("final (mean of the last 5 updates): success "), final
  progress = [l for l in lines if l.startswith("update ")]
  assert len(progress) == 3 and all("last update: success " in l for l in progress)


def test_sweep_line_of_a_call_s_last_update_counts_its_cells_done():
  lines = []
  plan = types.SimpleNamespace(cells=list(range(8)))
  p = execute.Progress(plan, total_steps=100, log=lines.append)
  call = types.SimpleNamespace(name="k000", cells=list(range(8)))
  p.report(call, (5, 10), 50, 1.0, {"return": 1.0})
  p.report(call, (10, 10), 50, 1.0, {"return": 1.0})
  assert lines[0].startswith("cells 0/8 done") and lines[1].startswith("cells 8/8 done")
