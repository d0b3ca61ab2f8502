"""bsuite's scores (credit_jax/experiments/bsuite/scoring.py) on hand-built results, and
against bsuite's own analysis functions where the `bsuite` package is installed."""
import csv
import os

import numpy as np
import pytest

import oracles

from credit_jax.experiments.bsuite import analysis, outputs, scoring
from config_files import load_config


# --- hand-built cases -------------------------------------------------------------------

def test_umbrella_score_counts_lengths_below_half_a_regret_per_episode():
  # Lengths 1, 2, 3 with 10,000 episodes: 2,000 / 2,499 / 2,500 wrong umbrellas, i.e.
  # regret per episode 0.4 / 0.4998 / 0.5; the last is not below the threshold.
  lengths = np.array([1, 2, 3])
  episodes = np.full(3, 10_000)
  regret = 2.0 * np.array([2_000, 2_499, 2_500])
  per = scoring.umbrella_length_per_length(lengths, episodes, regret)
  assert per == pytest.approx({1: 0.4, 2: 0.4998, 3: 0.5})
  assert scoring.umbrella_length_score(lengths, episodes, regret) == pytest.approx(2 / 3)


def test_scores_use_the_rows_at_the_groups_last_episode_up_to_num_episodes():
  # Two seeds of one length logged at 5,000 and 10,000 episodes; a third row past
  # NUM_EPISODES is ignored. At 10,000: regrets 4,000 and 6,000 -> mean 0.5 -> fails.
  lengths = np.array([7, 7, 7, 7, 7])
  episodes = np.array([5_000, 10_000, 5_000, 10_000, 12_000])
  regret = np.array([0.0, 4_000.0, 0.0, 6_000.0, 0.0])
  assert scoring.umbrella_length_per_length(lengths, episodes, regret) == {7: 0.5}
  assert scoring.umbrella_length_score(lengths, episodes, regret) == 0.0
  # A partially finished run is scored at its own last episode, as bsuite does.
  assert scoring.umbrella_length_per_length([7, 7], [100, 200], [0.0, 60.0]) == {7: 0.3}


def test_memory_score_is_regret_against_a_coin_below_three_quarters():
  # 10,000 episodes, right recalls 6,300 / 6,250 / 5,000: ratio (E - P) / 0.5 / E =
  # 0.74 / 0.75 / 1.0; only the first is below 0.75.
  lengths = np.array([1, 10, 100])
  episodes = np.full(3, 10_000)
  perfect = np.array([6_300, 6_250, 5_000])
  assert scoring.memory_len_per_length(lengths, episodes, perfect) == pytest.approx(
      {1: 0.74, 10: 0.75, 100: 1.0})
  assert scoring.memory_len_score(lengths, episodes, perfect) == pytest.approx(1 / 3)


def test_discounting_score_is_the_bonus_chain_rate():
  # Every chain pays 1 and the bonus 1.1: a run choosing the bonus in a fraction p of
  # its episodes returns 1 + 0.1 p per episode and scores exactly p.
  for p in (0.0, 0.2, 0.55, 1.0):
    ret = 1000 * (1.0 + 0.1 * p)
    assert scoring.discounting_chain_score([1000], [ret]) == pytest.approx(p)
  # pooled over runs (mapping seeds), clipped to [0, 1]
  assert scoring.discounting_chain_score([1000, 1000], [1000.0, 1100.0]) == \
      pytest.approx(0.5)
  assert scoring.discounting_chain_score([1000], [900.0]) == 0.0
  assert scoring.discounting_chain_score([1000], [1200.0]) == 1.0


def test_random_agent_scores_follow_from_the_formulas():
  n = 10_000
  assert scoring.umbrella_length_score([5], [n], [2.0 * n / 2]) == \
      scoring.RANDOM_SCORES["umbrella_length"]
  assert scoring.memory_len_score([5], [n], [n / 2]) == scoring.RANDOM_SCORES["memory_len"]
  assert scoring.discounting_chain_score([1000], [1000 * 1.02]) == pytest.approx(
      scoring.RANDOM_SCORES["discounting_chain"])


def test_longest_length_at_level_and_final_window():
  lengths = [1, 10, 30, 100]
  assert scoring.longest_at_level(lengths, [95, 90, 89, 91], [100] * 4, 0.9) == 100
  assert scoring.longest_at_level(lengths, [95, 90, 89, 10], [100] * 4, 0.9) == 10
  assert scoring.longest_at_level(lengths, [1, 2, 3, 4], [100] * 4, 0.9) == 0
  assert scoring.final_window(500, 0.1) == 50
  assert scoring.final_window(25, 0.1) == 3
  assert scoring.final_window(3, 0.01) == 1
  with pytest.raises(ValueError, match="fraction"):
    scoring.final_window(10, 0.0)


def test_bad_rows_are_refused():
  with pytest.raises(ValueError, match="rows"):
    scoring.umbrella_length_score([1, 2], [10], [0, 0])
  with pytest.raises(ValueError, match="episode count"):
    scoring.memory_len_score([1], [0], [0])


# --- records -> rows -> scores --------------------------------------------------------

def record(experiment, settings, seeds, episodes, successes, returns):
  return {"method": "m", "experiment": experiment, "cell": "c", "episode_len": 3,
          "settings": settings, "seeds": seeds, "episodes": episodes,
          "successes": successes, "return_sum": returns, "env_steps_per_seed": 30,
          "program_steps_per_seed": 30, "compile_s": 0.0, "run_s": 0.0}


def small_config():
  c = load_config("bsuite", "smoke")
  c.episodes.umbrella_length = 40
  c.episodes.discounting_chain = 40
  c.final_fraction = 0.5
  return c


def umbrella_records():
  # Two lengths x two seeds, 2 updates of 20 episodes each.
  return [record("umbrella_length", [1, 1], [0, 1], [[20, 20], [20, 20]],
                 [[15, 20], [10, 18]], [[10.0, 20.0], [0.0, 16.0]]),
          record("umbrella_length", [3, 3], [0, 1], [[20, 20], [20, 20]],
                 [[10, 10], [12, 19]], [[0.0, 0.0], [4.0, 18.0]])]


def test_rows_scores_and_rates_from_records():
  config = small_config()
  recs = umbrella_records()
  rows = analysis.bsuite_rows(recs)
  assert rows["episode"].tolist() == [20, 40, 20, 40, 20, 40, 20, 40]
  assert rows["total_regret"].tolist() == [10, 10, 20, 24, 20, 40, 16, 18]
  s = analysis.summarize_experiment("umbrella_length", recs, config)
  # Pooled: length 1 regret (10 + 24) / 2 / 40 = 0.425 < 0.5 passes, length 3 (40 + 18)
  # / 2 / 40 = 0.725 fails -> 0.5. Seed 0 passes length 1 only (0.25; 1.0), seed 1
  # length 3 only (0.6; 0.45) -> 0.5 each.
  assert s["bsuite_score"] == 0.5
  assert s["seed_scores"] == [0.5, 0.5]
  per = s["per_setting"]
  assert per[1]["whole"]["successes"] == 63 and per[1]["whole"]["episodes"] == 80
  assert per[1]["final"]["successes"] == 38 and per[1]["final"]["episodes"] == 40
  assert per[1]["seeds_at_level"] == 2 and per[3]["seeds_at_level"] == 1
  assert s["longest_at_level"] == 1                        # 38/40 = .95; 29/40 < .9
  lo, hi = s["longest_at_level_final"]["wilson"]
  assert lo < 0.95 < hi


def test_lengths_past_bsuites_sweep_are_reported_but_not_scored():
  config = small_config()
  beyond = record("umbrella_length", [300, 300], [0, 1], [[20, 20], [20, 20]],
                  [[20, 20], [20, 20]], [[0.0, 0.0], [0.0, 0.0]])   # all right
  s = analysis.summarize_experiment("umbrella_length", umbrella_records() + [beyond],
                                    config)
  assert s["bsuite_score"] == 0.5                  # lengths 1 and 3 alone, as before
  assert s["scored_settings"] == [1, 3] and s["sweep_size"] == 23
  assert s["per_setting"][300]["final"]["rate"] == 1.0
  assert s["longest_at_level"] == 300
  only = analysis.summarize_experiment("umbrella_length", [beyond], config)
  assert only["bsuite_score"] is None and only["seed_score_min"] is None
  # Each seed passed 1 of the 2 lengths run; over bsuite's 23: 1/23 with the 21 unrun
  # lengths failed, 22/23 with them passed.
  assert s["sweep_bounds"] == pytest.approx([1 / 23, 22 / 23])
  table = "\n".join(outputs.markdown_tables({"m": {"umbrella_length": s}}))
  assert ("0.50 [0.50, 0.50] (pooled 0.50) (2/23 settings; over the whole sweep 0.04 "
          "to 0.96)") in table


def test_discounting_summary_pools_bonus_rates():
  config = small_config()
  recs = [record("discounting_chain", [0, 0, 5, 5], [0, 1, 0, 1], [[20, 20]] * 4,
                 [[4, 20], [4, 10], [0, 0], [20, 20]],
                 [[20.4, 22.0], [20.4, 21.0], [20.0, 20.0], [22.0, 22.0]])]
  s = analysis.summarize_experiment("discounting_chain", recs, config)
  assert s["bonus_rate"]["successes"] == 78 and s["bonus_rate"]["episodes"] == 160
  assert s["bsuite_score"] == pytest.approx(78 / 160)
  assert s["final_bonus_rate"]["rate"] == pytest.approx(50 / 80)
  # mapping seeds 0 and 5 are one environment: the bonus on the horizon-1 chain
  assert list(s["per_bonus_horizon"]) == [1]
  assert s["per_bonus_horizon"][1]["whole"]["successes"] == 78
  assert s["per_bonus_horizon"][1]["seeds"] == 4


# --- bsuite's own analysis as the oracle ------------------------------------------------

def test_scores_match_bsuites_analysis_on_random_rows():
  pd = pytest.importorskip("pandas")
  umbrella = oracles.import_oracle("bsuite.experiments.umbrella_length.analysis")
  memory = oracles.import_oracle("bsuite.experiments.memory_len.analysis")
  discounting = oracles.import_oracle("bsuite.experiments.discounting_chain.analysis")
  rng = np.random.default_rng(0)
  for trial in range(20):
    lengths = rng.choice([1, 5, 10, 30], size=24)
    episodes = rng.choice([500, 5_000, 10_000, 12_000], size=24)
    rate = rng.uniform(0.4, 1.0, size=24)
    wrong = np.rint((1 - rate) * episodes)
    df = pd.DataFrame({"chain_length": lengths, "episode": episodes,
                       "total_regret": 2 * wrong})
    assert scoring.umbrella_length_score(lengths, episodes, 2 * wrong) == \
        pytest.approx(umbrella.score(df)), trial
    df = pd.DataFrame({"memory_length": lengths, "episode": episodes,
                       "total_perfect": episodes - wrong})
    assert scoring.memory_len_score(lengths, episodes, episodes - wrong) == \
        pytest.approx(memory.score(df)), trial
    seeds = rng.integers(0, 20, size=24)
    eps = rng.choice([100, 1_000, 1_200], size=24)
    ret = eps * (1.0 + 0.1 * rng.uniform(0.5, 1.0, size=24))
    df = pd.DataFrame({"mapping_seed": seeds, "episode": eps, "total_return": ret})
    assert scoring.discounting_chain_score(eps, ret) == pytest.approx(
        discounting.score(df)), trial


def test_bsuite_format_csv_is_scored_by_bsuite_as_by_us(tmp_path):
  pd = pytest.importorskip("pandas")
  umbrella = oracles.import_oracle("bsuite.experiments.umbrella_length.analysis")
  discounting = oracles.import_oracle("bsuite.experiments.discounting_chain.analysis")
  config = small_config()
  disc = [record("discounting_chain", [0, 5], [0, 0], [[20, 20]] * 2,
                 [[4, 20], [0, 7]], [[20.4, 22.0], [20.0, 20.7]])]
  beyond = record("umbrella_length", [300], [0], [[20, 20]], [[20, 20]], [[0.0, 0.0]])
  records = {"m": {"umbrella_length": umbrella_records() + [beyond],
                   "discounting_chain": disc}}
  outputs.write_bsuite_format(records, str(tmp_path))
  df = pd.read_csv(os.path.join(tmp_path, "bsuite_format", "m.csv"))
  ours = analysis.summarize(records, config)["m"]
  # bsuite scores against its own NUM_EPISODES (10k / 1k): these 40-episode runs are
  # "partially finished" and scored at their last episode, as ours with num_episodes 40.
  assert umbrella.score(df[df.bsuite_env == "umbrella_length"]) == \
      ours["umbrella_length"]["bsuite_score"]
  assert discounting.score(df[df.bsuite_env == "discounting_chain"]) == \
      pytest.approx(ours["discounting_chain"]["bsuite_score"])
  with open(os.path.join(tmp_path, "bsuite_format", "m.csv")) as f:
    header = next(csv.reader(f))
  assert header[:3] == ["bsuite_id", "bsuite_env", "episode"]
  assert set(df[df.bsuite_env == "umbrella_length_beyond"].chain_length) == {300}


# --- per-seed scores: the headline, and bsuite's analysis one seed at a time ----------

def test_headline_is_the_mean_of_per_seed_scores_not_the_pooled_score():
  # memory_len at L = 30, three seeds recalling 55%, 55% and 95% of 40 episodes: pooled
  # (68%) passes bsuite's threshold (> 62.5% right), two of the three seeds do not.
  config = small_config()
  config.episodes.memory_len = 40
  recs = [record("memory_len", [30, 30, 30], [0, 1, 2], [[20, 20]] * 3,
                 [[11, 11], [11, 11], [19, 19]], [[0.0, 0.0]] * 3)]
  s = analysis.summarize_experiment("memory_len", recs, config)
  assert s["bsuite_score"] == 1.0
  assert s["seed_scores"] == [0.0, 0.0, 1.0]
  assert s["seed_score_mean"] == pytest.approx(1 / 3)
  table = "\n".join(outputs.markdown_tables({"m": {"memory_len": s}}))
  assert ("0.33 [0.00, 1.00] (pooled 1.00) (1/23 settings; over the whole sweep 0.01 to "
          "0.97)") in table


def _random_records(experiment, settings, seeds, rng, updates=3, per_update=20):
  recs = []
  for setting in settings:
    succ = rng.integers(0, per_update + 1, size=(len(seeds), updates))
    ret = rng.normal(size=(len(seeds), updates)) * 5
    if experiment == "discounting_chain":   # every chain pays 1, the bonus chain 1.1
      ret = per_update + 0.1 * succ
    recs.append(record(experiment, [setting] * len(seeds), list(seeds),
                       [[per_update] * updates] * len(seeds), succ.tolist(),
                       ret.tolist()))
  return recs


@pytest.mark.parametrize("experiment,module,settings", [
    ("umbrella_length", "umbrella_length", (1, 5, 30)),
    ("umbrella_distract", "umbrella_distract", (1, 20, 100)),
    ("memory_len", "memory_len", (1, 3, 10)),
    ("memory_size", "memory_size", (1, 12, 40)),
    ("discounting_chain", "discounting_chain", (0, 3, 7, 19)),
])
def test_bsuite_scores_each_seed_of_our_csv_as_we_do(tmp_path, experiment, module,
                                                     settings):
  pd = pytest.importorskip("pandas")
  bsuite_analysis = oracles.import_oracle(f"bsuite.experiments.{module}.analysis")
  config = small_config()
  config.episodes[experiment] = 60
  rng = np.random.default_rng(len(experiment))
  seeds = (0, 1, 2)
  for trial in range(5):
    records = {"m": {experiment: _random_records(experiment, settings, seeds, rng)}}
    outputs.write_bsuite_format(records, str(tmp_path))
    df = pd.read_csv(os.path.join(tmp_path, "bsuite_format", "m.csv"))
    ours = analysis.summarize(records, config)["m"][experiment]
    theirs = [bsuite_analysis.score(df[(df.bsuite_env == experiment) & (df.seed == j)])
              for j in seeds]
    assert ours["seed_scores"] == pytest.approx(theirs), trial
    assert ours["seed_score_mean"] == pytest.approx(np.mean(theirs))
    assert ours["bsuite_score"] == pytest.approx(
        bsuite_analysis.score(df[df.bsuite_env == experiment]))
