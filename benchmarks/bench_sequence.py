"""Benchmark: what sequence networks cost, printed side by side in one run.

  JAX_PLATFORMS=cpu python3 benchmarks/bench_sequence.py
  python3 benchmarks/bench_sequence.py --num_envs=64 --repeats=7       # GPU

Three measurements (compile excluded everywhere: each program is compiled and run once
before timing; the timed runs of the systems alternate, round after round, so a drift of
a shared machine's speed hits all alike; medians of `--repeats` rounds, and for ratios
the median of the per-round ratios):

1. PPO env steps/s at T = 1000: KeyChain-v0 (T = 1000, k = 2, A = 2, cue_delay = 16, no
   history window), `configs/ppo_gru_keychain.py` with `num_steps = 1000` (one rollout
   window = one episode), `--num_envs` environments, 2 epochs x 2 minibatches,
   `--updates` updates per compiled call; the same config with `network.kind` "mlp"
   (PPO's default MLP actor-critic, `ppo.default_config()`: a 64-64 tanh torso each for
   the policy and the value), "mlp, shared torso" (one 64-64 torso under both heads, as
   the GRU's trunk is shared; before 2026-12-02 this benchmark's "mlp" row was this one,
   inheriting the GRU config's `network.shared_torso = True`), "gru" (64-unit encoder,
   64-unit GRU, shared trunk) and "transformer" (d_model 32, 2 heads, 1 layer, 64 cache
   slots). Target for the GRU: >= 0.3 of the MLP's steps/s; the fractions of both MLP
   rows are printed. Every row is traced with `credit_jax.fast_paths`
   on (as `scripts/train.py` does on CPU) except "gru (plain)", the same GRU PPO traced
   with them off (jax's tanh/sigmoid and autodiff through the loop, see
   `credit_jax/nets/gru.py`, and GAE's values from a replay of the window instead of the
   rollout's own, `credit_jax/algos/ppo_agent.py`): the fast paths benchmarked both
   ways. `--bptt_chunks=50,100` adds rows "gru, bptt_chunk=L": the fast-path GRU with
   truncated BPTT in L-step chunks from stored hidden states (`network.bptt_chunk`).
   `--old_sequence_networks=FILE` adds the GRU built by a previous version of
   `credit_jax/nets/sequence.py` (run by `--old_ppo_sequence`'s module when given);
   `--old_ppo_sequence=FILE` the GRU PPO of a previous `credit_jax/algos/ppo_sequence.py`
   (fast paths on), e.g. the one before GAE read the rollout's values.
   `--old_gru=GRU_FILE,SN_FILE` adds "gru (old gru.py)": the GRU PPO with the cell of a
   previous `credit_jax/nets/gru.py` and the `sequence_networks.py` of its commit (fast paths
   on), e.g. 38bd487's split-gate cell (three `[H, H]` products per step) against the
   current one (one `[H, 3H]` product, the kernels concatenated outside the loops).
   `--gru_sizes=32` adds rows "gru, gru_size=N": the fast-path GRU with an N-unit cell
   (the encoder stays 64 units), for choosing a network's size by its cost.
2. Where the time of one PPO update goes (`--breakdown`, on by default), MLP and GRU at
   the same T and `--num_envs`: each update is timed with 1 and with 2 epochs of 2
   minibatches, so one minibatch gradient (with its optimizer step) is
   `(t2 - t1) / 2` and the rest of the update (rollout, GAE, bookkeeping) `2 t1 - t2`;
   the GRU's `gru.scan` forward and backward alone, at one minibatch's shape, is timed
   beside them. Multiply-adds per sample and forward pass are the networks' kernel
   weights (every kernel is used once per step; biases and activations left out), so
   `multiply-adds x samples x (1 + 3 x epochs)` (one forward to act, a forward and two
   backward products per gradient) gives each update's work and its GFLOP/s.
3. Transformer acting cost per step at episode step 10 vs step 1000 (`--num_envs`
   environments vmapped, d_model 32, 2 heads, 1 layer, `max_len` = 1024 so the whole
   episode is in the attention window):
   * with the KV cache: `TransformerActorCritic.step`, timed as a scan of 16 steps from
     a carry that has taken 10 (or 1000) steps, per step; the cache has a fixed number
     of slots, so the cost is the same at every step by construction (target <= 3x);
   * without a cache: the step's logits recomputed from the whole history, one
     full-sequence pass (`sequence_networks.unroll`) over the t tokens so far (a network
     with `max_len` = t: the window is the history, the empty cache t slots).
"""
import statistics
import time

from absl import app
from absl import flags

from credit_jax.runtime import launch

_ENVS = flags.DEFINE_integer("num_envs", 8, "environments (PPO batch, acting batch)")
_REPEATS = flags.DEFINE_integer("repeats", 5, "timed rounds")
_UPDATES = flags.DEFINE_integer("updates", 2, "PPO updates per compiled call")
_HORIZON = flags.DEFINE_integer("horizon", 1000, "KeyChain episode length T")
_STEPS = flags.DEFINE_list("steps", ["10", "1000"], "episode steps to time acting at")
_OLD = flags.DEFINE_string(
    "old_sequence_networks", None,
    "optional: a previous credit_jax/nets/sequence.py (e.g. `git show "
    "7467963:credit_jax/nets/sequence.py > /tmp/old_sn.py`); adds a row 'gru (old)' "
    "whose PPO uses its networks, timed in the same rounds (before/after in one run)")

_CHUNKS = flags.DEFINE_list(
    "bptt_chunks", [], "optional: GRU rows with network.bptt_chunk = each of these "
    "(divisors of --horizon), fast paths on")
_OLD_GRU = flags.DEFINE_list(
    "old_gru", [],
    "optional: GRU_FILE,SN_FILE, a previous credit_jax/nets/gru.py and the "
    "credit_jax/nets/sequence.py of the same commit (e.g. `git show "
    "653e042:credit_jax/nets/gru.py > /tmp/old_gru.py; git show "
    "653e042:credit_jax/nets/sequence.py > /tmp/old_gru_sn.py`); adds a row "
    "'gru (old gru.py)', the GRU PPO with those networks (fast paths on), timed in the "
    "same rounds")
_SIZES = flags.DEFINE_list(
    "gru_sizes", [], "optional: GRU rows with network.gru_size = each of these, fast paths "
    "on (the encoder stays 64 units)")
_BREAKDOWN = flags.DEFINE_boolean(
    "breakdown", True, "time the pieces of one PPO update (MLP and GRU): rollout and "
    "rest, one minibatch gradient, the GRU scan's forward and backward")
_OLD_PPO = flags.DEFINE_string(
    "old_ppo_sequence", None,
    "optional: a previous credit_jax/algos/ppo_sequence.py (e.g. `git show "
    "2844eba:credit_jax/algos/ppo_sequence.py > /tmp/old_ppo_seq.py`); adds a row "
    "'gru (old ppo_sequence)', its GRU PPO with the fast paths on")

SCAN = 16


def _timed(fn, *args):
  start = time.perf_counter()
  import jax  # pylint: disable=import-outside-toplevel
  jax.block_until_ready(fn(*args))
  return time.perf_counter() - start


def _rounds(fns, repeats):
  """`{name: [seconds per round]}`, the systems alternating (reversed every other round)."""
  times = {name: [] for name in fns}
  names = list(fns)
  for r in range(repeats):
    for name in (names if r % 2 == 0 else names[::-1]):
      fn, args = fns[name]
      times[name].append(_timed(fn, *args))
  return times


def _paired(times, a, b):
  return statistics.median(x / y for x, y in zip(times[a], times[b]))


def _load_module(path, name):
  import importlib.util  # pylint: disable=import-outside-toplevel
  import sys  # pylint: disable=import-outside-toplevel
  spec = importlib.util.spec_from_file_location(name, path)
  module = importlib.util.module_from_spec(spec)
  sys.modules[name] = module       # flax's dataclass transform looks the module up
  spec.loader.exec_module(module)
  return module


def bench_config(name, num_envs, horizon, updates, epochs=2):
  """The PPO config of a row `name` ("mlp", "gru", "gru, bptt_chunk=L", "gru,
  gru_size=N", "transformer", ...): `configs/ppo_gru_keychain.py` at T = `horizon` (one
  rollout window = one episode), `num_envs` environments, `epochs` x 2 minibatches,
  `updates` updates."""
  import os  # pylint: disable=import-outside-toplevel
  path = os.path.join(os.path.dirname(__file__), os.pardir, "configs", "ppo_gru_keychain.py")
  c = _load_module(path, "ppo_gru_keychain").get_config()
  c.env_kwargs.horizon, c.num_steps, c.num_envs = horizon, horizon, num_envs
  c.num_minibatches, c.update_epochs = 2, epochs
  c.total_timesteps = updates * num_envs * horizon
  c.network.kind = name.split()[0].rstrip(",")
  if c.network.kind == "mlp":       # PPO's default actor-critic: a 64-64 torso each
    c.network.hidden_sizes = (64, 64)
    c.network.shared_torso = name == "mlp, shared torso"
  if "bptt_chunk=" in name:
    c.network.bptt_chunk = int(name.split("=")[1])
  if "gru_size=" in name:
    c.network.gru_size = int(name.split("=")[1])
  return c


def ppo_programs(num_envs, horizon, updates, old_networks=None, chunks=(),
                 old_ppo=None, old_gru=None, sizes=()):
  """`{name: (compiled train, (key,))}` and the compile seconds of each; with
  `old_networks` (a sequence_networks module) also "gru (old)", PPO's GRU built by it;
  with `chunks` rows "gru, bptt_chunk=L"; with `sizes` rows "gru, gru_size=N"; with
  `old_ppo` (a ppo_sequence module) "gru (old ppo_sequence)", the GRU PPO it builds, and
  "gru (old)" is built by it too (networks from before 8df80de need a ppo_sequence of
  their time: the current one stores the GRU's hidden states through
  `make_sequence_policy(..., carry=True)`)."""
  import jax  # pylint: disable=import-outside-toplevel
  from credit_jax import algos, fast_paths
  from credit_jax import nets
  from credit_jax.algos import ppo, ppo_agent
  from credit_jax.nets import gru
  fns, compile_s = {}, {}
  names = (("mlp", "mlp, shared torso", "gru", "gru (plain)")
           + tuple(f"gru, bptt_chunk={int(n)}" for n in chunks)
           + tuple(f"gru, gru_size={int(n)}" for n in sizes)
           + (("gru (old ppo_sequence)",) if old_ppo else ())
           + (("gru (old)",) if old_networks else ())
           + (("gru (old gru.py)",) if old_gru else ()) + ("transformer",))
  for name in names:
    c = bench_config(name, num_envs, horizon, updates)
    key = jax.random.PRNGKey(0)
    start = time.perf_counter()
    old_row = name in ("gru (old)", "gru (old ppo_sequence)")
    module = old_ppo if old_row and old_ppo else ppo_agent
    current = module.sn
    module.sn = old_networks if name == "gru (old)" else current
    if name == "gru (old gru.py)":       # old_gru = (gru module, its sequence_networks)
      module.sn, ppo_agent.gru = old_gru[1], old_gru[0]
    nets.sequence = module.sn if module is ppo_agent else current   # what builds the net
    try:
      with fast_paths.use(name != "gru (plain)"):
        if old_row:
          train = module.make_train(c, ppo.HPARAMS, ppo.num_updates(c))
        else:
          train = algos.make_train(c)
        fn = jax.jit(train).lower(key).compile()
    finally:
      module.sn, ppo_agent.gru, nets.sequence = current, gru, current
    jax.block_until_ready(fn(key))
    compile_s[name] = time.perf_counter() - start
    fns[name] = (fn, (key,))
  return fns, compile_s


def kernel_weights(params) -> int:
  """Multiply-adds per sample of one forward pass: the number of kernel weights (every
  `kernel` of the parameter tree, the GRU's gate kernels included, is used once)."""
  import jax  # pylint: disable=import-outside-toplevel
  leaves = jax.tree_util.tree_flatten_with_path(params)[0]
  return sum(int(x.size) for path, x in leaves
             if getattr(path[-1], "key", None) == "kernel")


def update_pieces(num_envs, horizon, repeats):
  """`{kind: {piece: seconds}}` for kind "mlp" and "gru" (fast paths on): "update" (2
  epochs x 2 minibatches), "gradient" (one minibatch's, with its optimizer step),
  "rest" (rollout, GAE and bookkeeping), "scan" (the GRU's `gru.scan` forward and
  backward at one minibatch's shape), and "weights" (multiply-adds per sample)."""
  import jax  # pylint: disable=import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  from credit_jax import algos, fast_paths
  from credit_jax.nets import gru
  key = jax.random.PRNGKey(0)
  fns, weights = {}, {}
  with fast_paths.use(True):
    for kind in ("mlp", "gru"):
      for epochs in (1, 2):
        train = algos.make_train(bench_config(kind, num_envs, horizon, 1, epochs))
        state = jax.jit(train.init)(key)
        fn = jax.jit(lambda s, train=train: train.update(s)[0].params)
        jax.block_until_ready(fn(state))
        fns[kind, epochs] = (fn, (state,))
        weights[kind] = kernel_weights(state.params)
    hidden = 64
    k = jax.random.split(key, 5)
    ws = tuple(0.1 * jax.random.normal(k[i], (1, hidden, hidden)) for i in range(3))
    b_h = 0.1 * jax.random.normal(k[3], (1, 3 * hidden))
    xp = jax.random.normal(k[4], (num_envs // 2, horizon, 1, 3 * hidden))
    h0 = jnp.zeros((num_envs // 2, 1, hidden))
    starts = jnp.zeros((num_envs // 2, horizon), bool)
    scan = jax.vmap(gru.scan, in_axes=(None, None, 0, 0, 0))
    grad = jax.jit(jax.grad(lambda w, b, x: jnp.sum(jnp.sin(scan(w, b, h0, x, starts))),
                            argnums=(0, 1, 2)))
    jax.block_until_ready(grad(ws, b_h, xp))
    fns["scan"] = (grad, (ws, b_h, xp))
  times = {name: statistics.median(ts) for name, ts in _rounds(fns, repeats).items()}
  pieces = {}
  for kind in ("mlp", "gru"):
    t1, t2 = times[kind, 1], times[kind, 2]
    pieces[kind] = {"update": t2, "gradient": (t2 - t1) / 2, "rest": 2 * t1 - t2,
                    "weights": weights[kind]}
  pieces["gru"]["scan"] = times["scan"]
  return pieces


def print_pieces(pieces, num_envs, horizon):
  samples = num_envs * horizon
  print(f"\nWhere one PPO update goes (T={horizon}, {num_envs} envs, 2 epochs x 2 "
        f"minibatches, fast paths on; medians; gradient = (t(2 epochs) - t(1)) / 2, "
        f"rest = 2 t(1) - t(2))")
  print("| piece | mlp ms | gru ms | gru / mlp |")
  print("|---|---|---|---|")
  mlp, gru_ = pieces["mlp"], pieces["gru"]
  for name, label in (("update", "whole update"), ("rest", "rollout, GAE, bookkeeping"),
                      ("gradient", "one minibatch gradient (4 per update)")):
    print(f"| {label} | {1e3 * mlp[name]:.2f} | {1e3 * gru_[name]:.2f} | "
          f"{gru_[name] / mlp[name]:.2f} |")
  print(f"| gru.scan forward + backward ({num_envs // 2} x {horizon} steps; inside each "
        f"gradient) | - | {1e3 * gru_['scan']:.2f} | - |")
  epochs = 2                        # the update timed as "update": 2 epochs
  flop = {k: 2 * p["weights"] * samples * (1 + 3 * epochs) for k, p in pieces.items()}
  print(f"| multiply-adds per sample and forward pass (kernel weights) | "
        f"{mlp['weights']} | {gru_['weights']} | {gru_['weights'] / mlp['weights']:.2f} |")
  print(f"| GFLOP/s over the update (2 x weights x samples x (1 + 3 x epochs)) | "
        f"{1e-9 * flop['mlp'] / mlp['update']:.1f} | {1e-9 * flop['gru'] / gru_['update']:.1f}"
        f" | {flop['gru'] / gru_['update'] / (flop['mlp'] / mlp['update']):.2f} |")
  if any(p[k] <= 0 for p in (mlp, gru_) for k in ("gradient", "rest")):
    print("A piece came out <= 0: the difference of two timings is within their noise "
          "here; time a longer horizon or more --repeats.")
  print(f"At the MLP's GFLOP/s the GRU PPO would run at {mlp['weights'] / gru_['weights']:.3f}"
        f" of the MLP's env steps/s; the GRU's scans (4 x forward + backward) take "
        f"{4 * gru_['scan'] / gru_['update']:.0%} of its update.")


def acting_programs(num_envs, steps):
  """`{(mode, t): (compiled fn, args)}`: per-step acting with and without the cache."""
  import jax  # pylint: disable=import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  from credit_jax.nets import sequence as sn
  obs_dim, num_actions, max_len = 8, 2, 1024
  net = sn.TransformerActorCritic(num_actions=num_actions, max_len=max_len)
  params = sn.init_params(net, jax.random.PRNGKey(0), (obs_dim,))
  obs = jax.random.normal(jax.random.PRNGKey(1), (max(steps) + SCAN, num_envs, obs_dim))
  acts = jnp.zeros((max(steps) + SCAN, num_envs), jnp.int32)
  rews = jnp.zeros((max(steps) + SCAN, num_envs), jnp.float32)

  def run_steps(params, carry, obs, acts, rews):   # [S, B, ...] -> logits [S, B, A]
    def body(c, x):
      c, logits, _ = jax.vmap(lambda c, o, a, r: net.apply(
          params, c, o, a, r, method="step"))(c, *x)
      return c, logits
    return jax.lax.scan(body, carry, (obs, acts, rews))

  run_steps = jax.jit(run_steps)
  carry0 = jax.tree.map(lambda x: jnp.broadcast_to(x, (num_envs,) + x.shape),
                        net.initial_carry())
  fns = {}
  for t in steps:
    carry_t, _ = run_steps(params, carry0, obs[:t], acts[:t], rews[:t])
    window = (obs[t:t + SCAN], acts[t:t + SCAN], rews[t:t + SCAN])
    fns["cache", t] = (run_steps, (params, carry_t) + window)
    recompute_net = sn.TransformerActorCritic(num_actions=num_actions, max_len=t + 1)
    empty = recompute_net.initial_carry()

    def recompute(params, obs, acts, rews, net=recompute_net, empty=empty):
      starts = jnp.zeros(obs.shape[:1], bool)
      logits, _, _ = jax.vmap(lambda o, a, r: sn.unroll(
          net, params, empty, o, a, r, starts), in_axes=1)(obs, acts, rews)
      return logits[:, -1]                                 # [B, A]: the step's logits

    fn = jax.jit(recompute)
    fns["recompute", t] = (fn, (params, obs[:t + 1], acts[:t + 1], rews[:t + 1]))
  for fn, args in fns.values():
    jax.block_until_ready(fn(*args))
  return fns


def main(argv):
  del argv
  launch.configure_process(num_seeds=1)
  import jax  # pylint: disable=import-outside-toplevel
  device = jax.devices()[0]
  num_envs, horizon, repeats = _ENVS.value, _HORIZON.value, _REPEATS.value
  steps = [int(s) for s in _STEPS.value]
  print(f"device: {device.device_kind} ({device.platform}), jax {jax.__version__}; "
        f"{repeats} alternating rounds, medians, compile excluded")

  old = _load_module(_OLD.value, "old_sequence_networks") if _OLD.value else None
  old_ppo = _load_module(_OLD_PPO.value, "old_ppo_sequence") if _OLD_PPO.value else None
  chunks = [int(n) for n in _CHUNKS.value]
  old_gru = None
  if _OLD_GRU.value:
    old_gru = (_load_module(_OLD_GRU.value[0], "old_gru"),
               _load_module(_OLD_GRU.value[1], "old_gru_sequence_networks"))
    old_gru[1].gru = old_gru[0]                # its networks run its cell
  sizes = [int(n) for n in _SIZES.value]
  ppo, compile_s = ppo_programs(num_envs, horizon, _UPDATES.value, old, chunks, old_ppo,
                                old_gru, sizes)
  times = _rounds(ppo, repeats)
  env_steps = _UPDATES.value * num_envs * horizon
  print(f"\nPPO on KeyChain-v0 T={horizon} (k=2, A=2, cue_delay=16), {num_envs} envs x "
        f"{horizon} steps per update, 2 epochs x 2 minibatches, {_UPDATES.value} updates "
        f"per call")
  print("| network | env steps/s (median) | s per call (min) | fraction of mlp "
        "(median of paired ratios) | fraction of mlp, shared torso | compile s |")
  print("|---|---|---|---|---|---|")
  for kind, ts in times.items():
    print(f"| {kind} | {env_steps / statistics.median(ts):.3g} | {min(ts):.3f} | "
          f"{_paired(times, 'mlp', kind):.3f} | "
          f"{_paired(times, 'mlp, shared torso', kind):.3f} | {compile_s[kind]:.1f} |")
  print(f"GRU PPO, fast paths on over off (median of paired ratios): "
        f"{_paired(times, 'gru (plain)', 'gru'):.2f}x")
  for n in chunks:
    print(f"GRU PPO, bptt_chunk={n} over the whole window (median of paired ratios): "
          f"{_paired(times, 'gru', f'gru, bptt_chunk={n}'):.2f}x")
  if old_ppo:
    print(f"GRU PPO over the old ppo_sequence (median of paired ratios): "
          f"{_paired(times, 'gru (old ppo_sequence)', 'gru'):.2f}x")
  if old_gru:
    print(f"GRU PPO over the old gru.py (median of paired ratios): "
          f"{_paired(times, 'gru (old gru.py)', 'gru'):.2f}x")
  if old:
    print(f"GRU speed-up over the old networks (median of paired ratios): "
          f"{_paired(times, 'gru (old)', 'gru'):.2f}x")

  if _BREAKDOWN.value:
    print_pieces(update_pieces(num_envs, horizon, repeats), num_envs, horizon)

  acting = acting_programs(num_envs, steps)
  times = _rounds(acting, repeats)
  per_step = {k: statistics.median(v) / (SCAN if k[0] == "cache" else 1)
              for k, v in times.items()}
  lo, hi = min(steps), max(steps)
  print(f"\nTransformer acting, {num_envs} envs vmapped, d_model 32, 2 heads, 1 layer, "
        f"max_len 1024 (cache: per step of a {SCAN}-step scan)")
  print("| acting | " + " | ".join(f"ms per step at step {t}" for t in steps)
        + f" | step {hi} / step {lo} (median of paired ratios) |")
  print("|---|" + "---|" * len(steps) + "---|")
  for mode, label in (("cache", "KV cache"), ("recompute", "no cache (recompute history)")):
    cells = " | ".join(f"{1e3 * per_step[mode, t]:.3f}" for t in steps)
    print(f"| {label} | {cells} | {_paired(times, (mode, hi), (mode, lo)):.2f}x |")


if __name__ == "__main__":
  app.run(main)
