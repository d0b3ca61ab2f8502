"""Benchmark: a token agent's rollout with and without its KV cache, and the whole RL
update, printed side by side in one run.

  JAX_PLATFORMS=cpu python3 benchmarks/bench_tokens.py
  python3 benchmarks/bench_tokens.py --num_envs=256 --repeats=7          # GPU

Programs are compiled and run once before timing; the timed runs alternate round after
round (reversed every other round), so a drift of a shared machine's speed hits all
alike; medians over `--repeats` rounds, and for ratios the median of per-round ratios.

1. Rollout tokens/s (`rollout.collect` of the LM policy on ToolArith-v0, `--num_envs`
   streams; every step is one token of the stream, prompt, agent or tool, and all are
   counted) at a context of ~100 and ~1000 tokens: ToolArith-v0 with 2-digit numbers
   and 7 turns (100-token oracle episodes, a 109-token limit) or 76 turns (997, limit
   1006); the LM (`--d_model`, 2 heads, 2 layers) has that many cache slots.
     * cached: `TokenLM.step`, one token against the KV cache;
     * re-encode: the same LM without a cache, every step re-encoding the whole token
       buffer with the full-sequence pass (`make_policy(..., reencode=True)`).
   Both have fixed shapes (the cache and the buffer hold `max_len` slots from the first
   step), so every step of a window costs the same, wherever the stream is: the timed
   window is `--window` steps from a reset (the whole episode at ~100 tokens) and its
   tokens/s is the whole episode's. A re-encode that ran only over the t tokens so far
   (shapes growing with t, i.e. a recompile per length or length buckets) would do about
   half the work on average over an episode; the ratio against it would be about half.
2. The whole RL update, one compiled call (rollout + loss + optimiser): the token-agent
   recipe (`configs/token_agent.py`) on the ~100-token env, GRPO and PPO, 8 prompts x 8
   samples, 2 epochs x 2 minibatches, `--updates` updates per call; tokens/s counts the
   rollout's tokens (prompts x samples x horizon per update).
"""
import statistics
import time

from absl import app
from absl import flags

from credit_jax.runtime import launch

_ENVS = flags.DEFINE_integer("num_envs", 8, "streams rolled out side by side")
_REPEATS = flags.DEFINE_integer("repeats", 5, "timed rounds")
_WINDOW = flags.DEFINE_integer("window", 100, "rollout steps timed per call")
_D_MODEL = flags.DEFINE_integer("d_model", 32, "the LM's width")
_UPDATES = flags.DEFINE_integer("updates", 2, "RL updates per compiled call")

# num_turns of 2-digit ToolArith-v0 giving oracle episodes of ~100 and ~1000 tokens.
CONTEXTS = {100: 7, 1000: 76}


def _timed(fn, *args):
  import jax  # pylint: disable=import-outside-toplevel
  start = time.perf_counter()
  jax.block_until_ready(fn(*args))
  return time.perf_counter() - start


def _rounds(fns, repeats):
  """`{name: [seconds per round]}`, the programs alternating."""
  times = {name: [] for name in fns}
  names = list(fns)
  for r in range(repeats):
    for name in (names if r % 2 == 0 else names[::-1]):
      fn, args = fns[name]
      times[name].append(_timed(fn, *args))
  return times


def _paired(times, a, b):
  return statistics.median(x / y for x, y in zip(times[a], times[b]))


def rollout_programs(num_envs, window, d_model):
  """`{(context, mode): (compiled fn, args)}` and `{context: horizon}`."""
  import jax  # pylint: disable=import-outside-toplevel
  from credit_jax import envs, rollout  # pylint: disable=import-outside-toplevel
  from credit_jax.nets import lm  # pylint: disable=import-outside-toplevel
  programs, horizons = {}, {}
  for context, turns in CONTEXTS.items():
    env, params = envs.make("ToolArith-v0", num_turns=turns, num_digits=2)
    horizon = int(params.max_steps_in_episode)
    horizons[context] = horizon
    net = lm.TokenLM(vocab_size=env.num_actions, d_model=d_model, num_heads=2,
                     num_layers=2, max_len=horizon)
    net_params = lm.init_params(net, jax.random.key(0))
    steps = min(window, horizon)
    for mode in ("cached", "re-encode"):
      policy = lm.make_policy(net, value=False, reencode=mode == "re-encode")

      def run(p, key, policy=policy, env=env, params=params, steps=steps):
        k_reset, k_run = jax.random.split(key)
        obs, state = rollout.reset(env, params, k_reset, num_envs)
        start = rollout.initial_policy_state(policy, num_envs)
        traj, _ = rollout.collect(env, params, policy, p, k_run, state, obs, steps, start)
        return traj.actions
      fn = jax.jit(run)
      args = (net_params, jax.random.key(1))
      jax.block_until_ready(fn(*args))
      programs[context, mode] = (fn, args)
  return programs, horizons


def update_programs(updates):
  """`{estimator: (compiled fn, args)}`, `{estimator: tokens per call}`."""
  import jax  # pylint: disable=import-outside-toplevel
  from credit_jax.algos import token_agent  # pylint: disable=import-outside-toplevel
  programs, tokens_per_call, compile_s = {}, {}, {}
  for estimator in ("grpo", "ppo"):
    c = token_agent.default_config()
    c.estimator = estimator
    c.env_kwargs.num_turns, c.env_kwargs.num_digits = CONTEXTS[100], 2
    c.sft_steps = 0
    train = token_agent.make_train(c)
    state = jax.jit(train.init)(jax.random.key(0))
    fn = jax.jit(lambda s, train=train: train.run(s, None, updates)[0])
    start = time.perf_counter()
    state = jax.block_until_ready(fn(state))
    compile_s[estimator] = time.perf_counter() - start
    programs[estimator] = (fn, (state,))
    tokens_per_call[estimator] = updates * train.env_steps_per_update
  return programs, tokens_per_call, compile_s


def main(argv):
  del argv
  launch.configure_process(num_seeds=1)
  import jax  # pylint: disable=import-outside-toplevel
  device = jax.devices()[0]
  num_envs, repeats, window = _ENVS.value, _REPEATS.value, _WINDOW.value
  print(f"device: {device.device_kind} ({device.platform}), jax {jax.__version__}; "
        f"{repeats} alternating rounds, medians, compile excluded")

  programs, horizons = rollout_programs(num_envs, window, _D_MODEL.value)
  times = _rounds(programs, repeats)
  print(f"\nRollout tokens/s, LM d_model {_D_MODEL.value}, 2 heads, 2 layers, "
        f"{num_envs} streams, {window}-step windows (the whole episode when shorter)")
  print("| context (cache slots) | cached tokens/s | re-encode tokens/s | cached / "
        "re-encode (median of paired ratios) |")
  print("|---|---|---|---|")
  for context, horizon in horizons.items():
    steps = min(window, horizon)
    cached = num_envs * steps / statistics.median(times[context, "cached"])
    again = num_envs * steps / statistics.median(times[context, "re-encode"])
    ratio = _paired(times, (context, "re-encode"), (context, "cached"))
    print(f"| ~{context} ({horizon}) | {cached:.4g} | {again:.4g} | {ratio:.1f}x |")

  programs, tokens_per_call, compile_s = update_programs(_UPDATES.value)
  times = _rounds(programs, repeats)
  print(f"\nThe whole RL update in one compiled call (rollout + loss + optimiser), "
        f"ToolArith-v0 7 turns x 2 digits ({horizons[100]}-token horizon), 8 prompts x "
        f"8 samples, 2 epochs x 2 minibatches, {_UPDATES.value} updates per call")
  print("| estimator | rollout tokens/s | s per update (median) | compile s |")
  print("|---|---|---|---|")
  for name, ts in times.items():
    median = statistics.median(ts)
    print(f"| {name} | {tokens_per_call[name] / median:.4g} | "
          f"{median / _UPDATES.value:.3f} | {compile_s[name]:.1f} |")


if __name__ == "__main__":
  app.run(main)
