"""Tests for credit_jax.runtime.metrics: records, the resumable writer, progress lines, plots."""
import glob
import json
import os

import numpy as np
import pytest

from credit_jax.runtime import metrics


def _chunk(seeds, updates, offset=0.0):
  base = np.arange(seeds * updates, dtype=np.float32).reshape(seeds, updates) + offset
  return {"return": base, "loss": -base}


def test_chunk_to_records_single_and_multi_seed():
  recs = metrics.chunk_to_records(_chunk(1, 3), first_update=5, env_steps_per_update=10)
  assert [r["update"] for r in recs] == [5, 6, 7]
  assert [r["env_steps"] for r in recs] == [50, 60, 70]
  assert recs[1]["return"] == 1.0 and "per_seed" not in recs[1]
  recs = metrics.chunk_to_records(_chunk(2, 3), first_update=1, env_steps_per_update=1)
  # Seed 0 has [0, 1, 2], seed 1 has [3, 4, 5].
  assert recs[0]["return"] == 1.5
  assert recs[2]["per_seed"]["return"] == [2.0, 5.0]
  assert recs[2]["per_seed"]["loss"] == [-2.0, -5.0]


def test_chunk_to_records_rejects_ragged_metrics():
  with pytest.raises(ValueError, match=r"\[S, U\]"):
    metrics.chunk_to_records({"a": np.zeros((2, 3)), "b": np.zeros((2, 4))}, 1, 1)


def test_writer_appends_and_resume_drops_records_past_checkpoint(tmp_path):
  workdir = str(tmp_path)
  with metrics.MetricsWriter(workdir) as w:
    w.write_records(metrics.chunk_to_records(_chunk(1, 4), 1, 8))
  assert [r["update"] for r in metrics.read_jsonl(w.path)] == [1, 2, 3, 4]
  assert glob.glob(os.path.join(workdir, metrics.TENSORBOARD_DIR, "events.out.*"))
  # A killed run logged updates 3-4 but its checkpoint holds update 2.
  with metrics.MetricsWriter(workdir, resume_step=2) as w:
    assert [r["update"] for r in metrics.read_jsonl(w.path)] == [1, 2]
    w.write_records(metrics.chunk_to_records(_chunk(1, 2, offset=100.0), 3, 8))
  recs = metrics.read_jsonl(w.path)
  assert [r["update"] for r in recs] == [1, 2, 3, 4]
  assert recs[2]["return"] == 100.0


def test_read_jsonl_stops_at_a_torn_last_line(tmp_path):
  path = tmp_path / "m.jsonl"
  path.write_text(json.dumps({"update": 1}) + "\n" + '{"update": 2, "ret')
  assert metrics.read_jsonl(str(path)) == [{"update": 1}]
  assert metrics.read_jsonl(str(tmp_path / "missing.jsonl")) == []


def test_non_finite_values_become_nan_floats():
  recs = metrics.chunk_to_records({"loss": np.array([[np.inf]])}, 1, 1)
  assert np.isnan(recs[0]["loss"])


def test_progress_line_has_updates_rate_eta_and_metrics():
  lines = []
  p = metrics.Progress(total_updates=100, env_steps_per_update=512,
                       show=("return", "missing"), log=lines.append)
  line = p.report(updates_done=25, chunk_updates=25, chunk_seconds=2.0,
                  latest={"return": 123.456})
  assert lines == [line]
  assert "update  25/100" in line
  assert "6,400 env steps/s" in line
  assert "ETA 0:00:06" in line
  assert "return 123.456" in line and "missing" not in line


def test_plot_learning_curves_writes_png(tmp_path):
  recs = metrics.chunk_to_records(_chunk(3, 5), 1, 100)
  path = metrics.plot_learning_curves(recs, str(tmp_path / "c.png"), keys=("return", "loss"))
  with open(path, "rb") as f:
    assert f.read(8) == b"\x89PNG\r\n\x1a\n"
  with pytest.raises(ValueError, match="nothing to plot"):
    metrics.plot_learning_curves(recs, str(tmp_path / "d.png"), keys=("absent",))


def test_summarize_averages_the_tail():
  recs = [{"return": float(i)} for i in range(20)]
  assert metrics.summarize(recs, ("return",), last=4) == {"return": 17.5}
