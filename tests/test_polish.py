"""Small things a new user sees: count tick labels, TensorBoard without duplicate steps
after a resume, rate intervals inside [0, 1] in sweep tables."""
import glob
import math
import os
import struct

import pytest
from tensorboardX.proto import event_pb2

from credit_jax import stats
from credit_jax.runtime import metrics
from credit_jax.sweep import results


def _tensorboard_steps(workdir):
  """{tag: [steps]} of every scalar event in workdir's TensorBoard files (TFRecord
  framing: length u64, its crc u32, the event, its crc u32)."""
  steps = {}
  for path in sorted(glob.glob(os.path.join(workdir, metrics.TENSORBOARD_DIR,
                                            "events.out.*"))):
    data, i = open(path, "rb").read(), 0
    while i < len(data):
      (n,) = struct.unpack("<Q", data[i:i + 8])
      event = event_pb2.Event()
      event.ParseFromString(data[i + 12:i + 12 + n])
      i += 12 + n + 4
      for value in event.summary.value:
        steps.setdefault(value.tag, []).append(event.step)
  return steps


def _records(first, last):
  return [{"update": u, "env_steps": 10 * u, "return": float(u)}
          for u in range(first, last + 1)]


def test_resume_after_a_kill_leaves_each_tensorboard_step_once(tmp_path):
  with metrics.MetricsWriter(str(tmp_path)) as w:
    w.write_records(_records(1, 10))   # the killed run logged up to update 10 ...
  with metrics.MetricsWriter(str(tmp_path), resume_step=6) as w:   # ... saved at 6
    w.write_records(_records(7, 12))
  assert _tensorboard_steps(str(tmp_path)) == {"return": list(range(1, 13))}
  assert [r["update"] for r in metrics.read_jsonl(
      str(tmp_path / metrics.METRICS_FILE))] == list(range(1, 13))
  # A clean resume (nothing logged past the checkpoint) appends.
  with metrics.MetricsWriter(str(tmp_path), resume_step=12) as w:
    w.write_records(_records(13, 14))
  assert _tensorboard_steps(str(tmp_path))["return"] == list(range(1, 15))


@pytest.mark.parametrize("x,label", [(0, "0"), (500, "500"), (1e5, "100k"),
                                     (2.5e6, "2.5M"), (1.2e9, "1.2G"), (-3e3, "-3k")])
def test_count_tick_labels(x, label):
  assert metrics.format_count(x) == label


def test_rate_intervals_stay_inside_the_unit_interval():
  # Two seeds at 0.1 and 0.9: a t-interval spans [-4.58, 5.58].
  mean, low, high = results.interval([0.1, 0.9], "success")
  assert mean == pytest.approx(0.5)
  assert (low, high) == pytest.approx(stats.wilson_interval(1.0, 2))
  assert 0.0 <= low < 0.5 < high <= 1.0
  # Wilson score interval at p = 1/2, n = 2, z = 1.959964: centre 1/2, half-width
  # z sqrt(1/8 + z^2/16) / (1 + z^2/2).
  z = 1.959963984540054
  half = z * math.sqrt(0.125 + z * z / 16) / (1 + z * z / 2)
  assert (low, high) == pytest.approx((0.5 - half, 0.5 + half))
  # Not a rate: a t-interval; a "rate" outside [0, 1] is not treated as one.
  _, lo_t, hi_t = results.interval([1.0, 2.0, 3.0], "return")
  assert (lo_t, hi_t) == pytest.approx((2 - 4.302652729911275 / math.sqrt(3),
                                        2 + 4.302652729911275 / math.sqrt(3)))
  assert not results.is_rate("success", [0.5, 1.5])
  assert results.is_rate("degenerate_frac", [0.0, 1.0])
  rows = [{"cell": "c000-lr=0.1", "lr": 0.1, "seed": s, "final_success": v,
           "final_return": 3.0 * v} for s, v in enumerate([0.1, 0.9])]
  table = results.markdown(rows, ["lr"], "t", "success")
  assert f"0.5 [{low:.4g}, {high:.4g}]" in table
