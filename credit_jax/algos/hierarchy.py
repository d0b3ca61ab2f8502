"""Manager / worker: a manager picks a subgoal every K steps, a goal-conditioned worker
walks to it; each learns at its own time scale.

The lecture's second answer to long horizons (after curricula): do not let one policy
assign credit over hundreds of steps; split the episode into segments of
`segment_length` (K) steps. On a goal environment (GoalGrid-v0: a large grid, a step
limit in the hundreds):

  * the **manager** sees the environment's observation at steps 0, K, 2K, ... and picks a
    subgoal cell from a lattice (`subgoal_stride` apart, the grid's last row and column
    included, so the corner targets are subgoals too);
  * the **worker** sees its own cell and the subgoal (GoalGrid's observation with the goal
    part replaced) and picks the moves; its reward is reaching the subgoal within the
    segment (its episode ends there), and with `worker_relabel` a segment that failed is
    also used, weighted `relabel_weight`, as a success at the cell it ended on
    (hindsight relabeling, credit_jax/relabel.py's "final" strategy at the segment
    level; the log-probabilities are recomputed under the relabeled goal).

Credit at the manager's time scale (`segment_returns`, `segment_advantages`): segment j's
reward is the environment reward summed over its K steps, the manager's return
`G_j = R_j + manager_gamma * G_{j+1}` counts segments, not steps, and its advantage is
leave-one-out group-relative at the same segment index: every update runs `group_size`
episodes from each of `num_tasks` start states (GRPO's group rollout), and the baseline of
member i at segment j is the mean `G_j` of the other members whose episode is still
running there. The worker's advantage is its segment success minus the batch's real
segment success rate. Both take PPO's clipped surrogate (ratio against the policy that
collected the data) with an entropy bonus, `update_epochs` passes over `num_minibatches`
minibatches of whole groups; the loss is the manager's mean over its decisions plus the
worker's weighted mean over its steps.

Implementation: `SubgoalWrapper` makes the pair one environment for the rollout engine
(its action is `subgoal * 4 + move`; the subgoal part is read at segment starts only) and
`policy_fn` samples both levels, so `rollout.collect_groups` runs it unchanged.

Metrics: `loss`, `success` (sampled episodes that reached the environment's goal),
`return`, `worker_success` (segments whose subgoal was reached), `manager_loss`,
`worker_loss`, `relabeled_frac`, `env_steps` (valid steps taken), `episode_length`.
Hyperparameters in `hparams` (traced): lr, clip_eps, ent_coef, max_grad_norm,
manager_gamma, relabel_weight.
"""
from __future__ import annotations

from typing import Any

import flax.struct
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from gymnax.environments import spaces

from credit_jax import nets, rollout
from credit_jax.algos import grpo, losses, train as train_lib
from credit_jax.envs import wrappers
from credit_jax.types import PresampledPolicy

HPARAMS = ("lr", "clip_eps", "ent_coef", "max_grad_norm", "manager_gamma", "relabel_weight")
_NUM_MOVES = 4


def default_config() -> ml_collections.ConfigDict:
  """Manager/worker on GoalGrid-v0 16x16, goals the four corners, 192 steps, K = 16."""
  c = train_lib.base_config()
  c.algo = "hierarchy"            # this recipe
  c.env_name = "GoalGrid-v0"      # a grid goal environment (cells as goals)
  c.env_kwargs.size = 16          # grid side
  c.env_kwargs.max_steps_in_episode = 192  # time limit (steps)
  c.horizon = 192                 # rollout steps per episode; a multiple of segment_length
  c.segment_length = 16           # K: steps between manager decisions
  c.subgoal_stride = 5            # manager's subgoals: cells whose row and col are multiples of this (or the last)
  c.num_updates = 60              # updates (one group rollout each)
  c.num_tasks = 8                 # start states per update
  c.group_size = 8                # episodes per start state (the manager's baseline group, >= 2)
  c.update_epochs = 2             # passes over each rollout
  c.num_minibatches = 2           # minibatches of whole groups; must divide num_tasks
  c.lr = 3e-3                     # learning rate (a traced hparam)
  c.clip_eps = 0.2                # ratio clip of both surrogates (a traced hparam)
  c.ent_coef = 0.01               # entropy bonus of both policies (a traced hparam)
  c.manager_gamma = 0.9           # manager's discount per segment (a traced hparam)
  c.worker_relabel = True         # also train the worker on failed segments relabeled to their final cell
  c.relabel_weight = 1.0          # weight of a relabeled segment (a traced hparam)
  c.chunk_updates = 10            # updates per compiled call (one progress line each)
  c.checkpoint_every = 0          # updates between checkpoints (k * chunk_updates); 0: at the end
  return c


def validate_fields(config) -> None:
  """Raises `ConfigError` naming the first recipe-specific field that cannot run."""
  req = train_lib.require
  req(config.env_name == "GoalGrid-v0", "env_name",
      f"the manager picks grid cells: GoalGrid-v0 only, got {config.env_name!r}")
  req(int(config.group_size) >= 2, "group_size",
      f"the manager's leave-one-out baseline needs >= 2 episodes, got {config.group_size}")
  train_lib.require_range(config, ("num_tasks", "horizon", "num_updates", "update_epochs",
                                   "num_minibatches", "segment_length", "subgoal_stride"), 1)
  req(config.horizon % config.segment_length == 0, "segment_length",
      f"must divide horizon={config.horizon}, got {config.segment_length}")
  req(config.num_tasks % config.num_minibatches == 0, "num_minibatches",
      f"num_tasks={config.num_tasks} is not divisible by num_minibatches="
      f"{config.num_minibatches}")
  train_lib.require_range(config, "clip_eps", 0.0, strict=True)
  train_lib.require_range(config, "ent_coef", 0.0)
  train_lib.require_range(config, "manager_gamma", 0.0, 1.0)
  train_lib.require_range(config, "relabel_weight", 0.0)
  req(int(config.history_window) == 0, "history_window", "the worker sees no history")
  req(str(config.network.get("kind", "mlp")) == "mlp", "network.kind", "MLPs only")


validate_config = train_lib.validator("hierarchy", validate_fields, checked=False)


def subgoal_cells(size: int, stride: int) -> np.ndarray:
  """[G, 2] int32 the manager's subgoals: rows and cols in `0, stride, ...` and `size - 1`."""
  axis = sorted(set(range(0, size, stride)) | {size - 1})
  return np.array([(r, c) for r in axis for c in axis], np.int32)


# ------------------------------------------------------- credit at the manager's time scale

def segment_returns(rewards: jax.Array, valid: jax.Array, segment_length: int, gamma):
  """The manager's rewards and returns per segment.

  Args:
    rewards: [T, ...] env rewards; valid: [T, ...] bool, the steps of the episode.
    segment_length: K (divides T); gamma: [] the discount per segment.
  Returns:
    `(seg_rewards [J, ...], seg_returns [J, ...], seg_valid [J, ...])`, J = T / K:
    R_j = sum of valid rewards in steps [jK, (j+1)K), G_j = R_j + gamma G_{j+1} (0 past
    the episode), a segment is valid when its first step is.
  """
  rewards, valid = jnp.asarray(rewards, jnp.float32), jnp.asarray(valid, bool)
  if rewards.shape != valid.shape or rewards.ndim < 1:
    raise ValueError(f"rewards and valid must share a shape [T, ...], got {rewards.shape} "
                     f"and {valid.shape}")
  t, k = rewards.shape[0], int(segment_length)
  if k < 1 or t % k:
    raise ValueError(f"segment_length must divide T={t}, got {segment_length}")
  seg = jnp.where(valid, rewards, 0.0).reshape((t // k, k) + rewards.shape[1:]).sum(1)
  seg_valid = valid[::k]

  def back(g, x):
    r, v = x
    g = jnp.where(v, r + gamma * g, 0.0)
    return g, g

  _, returns = jax.lax.scan(back, jnp.zeros(rewards.shape[1:], jnp.float32),
                            (seg, seg_valid), reverse=True)
  return seg, returns, seg_valid


def segment_advantages(returns: jax.Array, seg_valid: jax.Array) -> jax.Array:
  """[J, N, G] leave-one-out advantages: `G_j` minus the mean `G_j` of the other members
  of the group (axis 2) valid at segment j; 0 where invalid or alone.

  Args:
    returns, seg_valid: [J, N, G] segment returns and validity (`segment_returns`).
  """
  if returns.shape != seg_valid.shape or returns.ndim != 3:
    raise ValueError(f"returns and seg_valid must be [J, N, G], got {returns.shape} and "
                     f"{seg_valid.shape}")
  v = seg_valid.astype(jnp.float32)
  total = jnp.sum(returns * v, axis=2, keepdims=True)
  n = jnp.sum(v, axis=2, keepdims=True)
  others = (total - returns * v) / jnp.maximum(n - v, 1.0)
  return jnp.where(seg_valid & (n - v >= 1), returns - others, 0.0)


def first_hit_mask(hit: jax.Array, valid: jax.Array, segment_length: int):
  """Steps of each segment up to and including its first hit.

  Args:
    hit, valid: [T, ...] bool (hit counts only where valid).
  Returns:
    `(mask [T, ...], reached [J, ...])`: valid steps of segment j up to its first hit,
    and whether segment j had one.
  """
  t, k = hit.shape[0], int(segment_length)
  hit = jnp.logical_and(hit, valid).reshape((t // k, k) + hit.shape[1:]).astype(jnp.int32)
  before = jnp.cumsum(hit, axis=1) - hit
  mask = (before == 0).reshape((t,) + hit.shape[2:]) & valid
  return mask, jnp.any(hit > 0, axis=1)


# ------------------------------------------------------------- the pair as one environment

@flax.struct.dataclass
class SubgoalState:
  inner: Any        # the goal grid's state
  subgoal: Any      # [] int32 index of the current subgoal
  t: Any            # [] int32 steps in this episode


class SubgoalWrapper(wrappers.Wrapper):
  """GoalGrid with the joint action `subgoal * 4 + move`; the observation is the grid's,
  then the current subgoal one-hot [G], then 1.0 at a segment start (t % K == 0).
  `inner` is the GoalGrid acted in."""

  wraps_state = True

  def __init__(self, env, cells: np.ndarray, segment_length: int):
    super().__init__(env)
    self.cells, self.k = jnp.asarray(cells), int(segment_length)
    self.num_subgoals = int(cells.shape[0])
    self.inner_dim = int(env.observation_space(env.default_params).shape[0])

  def _obs(self, inner_obs, subgoal, t):
    return jnp.concatenate([inner_obs, jax.nn.one_hot(subgoal, self.num_subgoals),
                            (t % self.k == 0).astype(jnp.float32)[None]])

  def reset_env(self, key, params):
    obs, inner = self._env.reset_env(key, params)
    state = SubgoalState(inner=inner, subgoal=jnp.zeros((), jnp.int32),
                         t=jnp.zeros((), jnp.int32))
    return self._obs(obs, state.subgoal, state.t), state

  def step_env(self, key, state, action, params):
    action = jnp.asarray(action, jnp.int32)
    obs, inner, reward, terminated, info = self._env.step_env(
        key, state.inner, action % _NUM_MOVES, params)
    state = SubgoalState(inner=inner, subgoal=action // _NUM_MOVES, t=state.t + 1)
    return self._obs(obs, state.subgoal, state.t), state, reward, terminated, info

  def observation_space(self, params):
    return spaces.Box(0.0, 1.0, (self.inner_dim + self.num_subgoals + 1,), jnp.float32)

  def action_space(self, params):
    return spaces.Discrete(self.num_subgoals * _NUM_MOVES)

  @property
  def num_actions(self) -> int:
    return self.num_subgoals * _NUM_MOVES

  @property
  def name(self) -> str:
    return f"Subgoals{self.num_subgoals}x{self.k}({self._env.name})"


class Pair:
  """The two networks and how observations become their inputs."""

  def __init__(self, config, wrapped: SubgoalWrapper, size: int):
    net = config.network
    mk = lambda a: nets.ActorCritic(   # noqa: E731
        num_actions=a, hidden_sizes=tuple(net.hidden_sizes), activation=net.activation,
        shared_torso=net.shared_torso, value_head=False, obs_rank=1)
    self.manager, self.worker = mk(wrapped.num_subgoals), mk(_NUM_MOVES)
    self.env, self.size, self.cells2 = wrapped, size, size * size
    self.cell_index = wrapped.cells[:, 0] * size + wrapped.cells[:, 1]   # [G]

  def init(self, key):
    km, kw = jax.random.split(key)
    d = self.env.inner_dim
    return {"manager": self.manager.init(km, jnp.zeros((d,))),
            "worker": self.worker.init(kw, jnp.zeros((2 * self.cells2,)))}

  def worker_obs(self, cell, goal):
    """[..., 2 S^2] the worker's observation (GoalGrid's layout): one-hot agent cell
    index `cell [...]`, one-hot goal cell index `goal [...]` (broadcastable)."""
    cell, goal = jnp.broadcast_arrays(jnp.asarray(cell), jnp.asarray(goal))
    return jnp.concatenate([jax.nn.one_hot(cell, self.cells2),
                            jax.nn.one_hot(goal, self.cells2)], axis=-1)

  def policy_fn(self) -> PresampledPolicy:
    g, d = self.env.num_subgoals, self.env.inner_dim

    def draw(key):
      return jax.random.gumbel(key, (g + _NUM_MOVES,), jnp.float32)

    def act(params, obs, noise):
      inner, start = obs[:d], obs[-1] > 0.5
      m_logits, _ = self.manager.apply(params["manager"], inner)
      sub = jnp.where(start, jnp.argmax(m_logits + noise[:g]),
                      jnp.argmax(obs[d:d + g])).astype(jnp.int32)
      w_in = jnp.concatenate([inner[:self.cells2],
                              jax.nn.one_hot(self.cell_index[sub], self.cells2)])
      w_logits, _ = self.worker.apply(params["worker"], w_in)
      move = jnp.argmax(w_logits + noise[g:]).astype(jnp.int32)
      log_prob = (nets.categorical_log_prob(w_logits, move)
                  + jnp.where(start, nets.categorical_log_prob(m_logits, sub), 0.0))
      return sub * _NUM_MOVES + move, log_prob, {}
    return PresampledPolicy(draw=draw, act=act)


def _clipped(logits, actions, old, adv, weights, norm, hp):
  """Weighted clipped surrogate minus entropy, summed and divided by `norm`; and the
  entropy's weighted mean."""
  log_probs = nets.categorical_log_prob(logits, actions)
  pg, _, _ = losses.clipped_surrogate(log_probs, old, adv, hp["clip_eps"])
  ent = nets.categorical_entropy(logits)
  loss = jnp.sum(weights * (pg - hp["ent_coef"] * ent)) / jnp.maximum(norm, 1.0)
  return loss, jnp.sum(weights * ent) / jnp.maximum(jnp.sum(weights), 1.0)


def _build_data(pair, params, traj, hp, k: int, relabel: bool):
  """The manager's and the worker's training examples from a group rollout
  `traj [T, N, G]`, old log-probs under `params`; returns `(data, metrics)`.

  The worker's examples come in two copies on axis 2 (`[T, N, 2, G]`): 0 the real
  subgoals, 1 the relabeled ones (weight 0 where none or `relabel` is off)."""
  d, t_len, size2 = pair.env.inner_dim, traj.rewards.shape[0], pair.cells2
  valid = traj.valid
  inner = traj.obs[..., :d]
  cell = jnp.argmax(inner[..., :size2], axis=-1).astype(jnp.int32)    # [T, N, G] before the step
  sub = traj.actions // _NUM_MOVES                                       # [T, N, G]
  moves = traj.actions % _NUM_MOVES
  achieved = traj.info["achieved_goal"]                                 # after the step
  ach_idx = achieved[..., 0] * pair.size + achieved[..., 1]
  sub_idx = pair.cell_index[sub]
  # Manager: one example per segment start.
  _, seg_ret, seg_valid = segment_returns(traj.rewards, valid, k, hp["manager_gamma"])
  m_adv = segment_advantages(seg_ret, seg_valid)                        # [J, N, G]
  m_obs, m_act = inner[::k], sub[::k]
  m_old = nets.categorical_log_prob(pair.manager.apply(params["manager"], m_obs)[0],
                                        m_act)
  # Worker: steps up to the first reach of the subgoal; advantage success - mean success.
  w_mask, reached = first_hit_mask(ach_idx == sub_idx, valid, k)
  sv = seg_valid.astype(jnp.float32)
  rate = jnp.sum(reached * sv) / jnp.maximum(jnp.sum(sv), 1.0)
  w_adv = jnp.repeat(reached.astype(jnp.float32) - rate, k, axis=0)     # [T, N, G]
  goals = jnp.stack([sub_idx, sub_idx])                                 # [2, T, N, G]
  weights = jnp.stack([w_mask.astype(jnp.float32), jnp.zeros_like(w_adv)])
  advs = jnp.stack([w_adv, jnp.zeros_like(w_adv)])
  rel_frac = jnp.zeros(())
  if relabel:   # failed segments as successes at their final cell
    seg_shape = (t_len // k, k) + valid.shape[1:]
    last = jnp.argmax(jnp.cumsum(valid.reshape(seg_shape), axis=1), axis=1)  # last valid step
    final = jnp.take_along_axis(ach_idx.reshape(seg_shape), last[:, None], axis=1)[:, 0]
    use = seg_valid & ~reached & (final != cell[::k])                  # moved somewhere
    new = jnp.repeat(final, k, axis=0)                                  # [T, N, G]
    r_mask, _ = first_hit_mask(ach_idx == new, valid & jnp.repeat(use, k, axis=0), k)
    goals = goals.at[1].set(new)
    weights = weights.at[1].set(hp["relabel_weight"] * r_mask)
    advs = advs.at[1].set(jnp.where(r_mask, 1.0 - rate, 0.0))
    rel_frac = jnp.sum(use * sv) / jnp.maximum(jnp.sum(sv), 1.0)
  both = jnp.stack([moves, moves])
  w_old = nets.categorical_log_prob(
      pair.worker.apply(params["worker"], pair.worker_obs(cell[None], goals))[0], both)
  to_axis2 = lambda x: jnp.moveaxis(x, 0, 2)   # noqa: E731  [2, T, N, G] -> [T, N, 2, G]
  data = {"m_obs": m_obs, "m_act": m_act, "m_old": m_old, "m_adv": m_adv, "m_valid": sv,
          "w_cell": cell, "w_goal": to_axis2(goals), "w_act": to_axis2(both),
          "w_old": to_axis2(w_old), "w_adv": to_axis2(advs), "w_weights": to_axis2(weights)}
  metrics = {"worker_success": rate, "relabeled_frac": rel_frac}
  return data, metrics


def make_train(config, features=()) -> train_lib.Train:
  """`Train` for the manager/worker pair on `config.env_name`."""
  validate_config(config, features)   # it takes no features: any turned on is refused
  inner_env, env_params = train_lib.make_env(config)
  size = int(inner_env.size)
  env = SubgoalWrapper(inner_env, subgoal_cells(size, int(config.subgoal_stride)),
                       int(config.segment_length))
  pair = Pair(config, env, size)
  policy_fn = pair.policy_fn()
  num_tasks, group, horizon = int(config.num_tasks), int(config.group_size), int(config.horizon)
  n_mb, n_epochs, n_updates = (int(config.num_minibatches), int(config.update_epochs),
                               int(config.num_updates))
  optimizer = train_lib.make_optimizer(config)
  k, relabel = int(config.segment_length), bool(config.worker_relabel)

  def init_fn(key, hp):
    k_params, k_run = jax.random.split(key)
    params = pair.init(k_params)
    return train_lib.TrainState(params=params, opt_state=optimizer.init(params, hp["max_grad_norm"]),
                             key=k_run, update=jnp.zeros((), jnp.int32), aux={})

  def loss_fn(params, mb, hp):
    m_logits, _ = pair.manager.apply(params["manager"], mb["m_obs"])
    m_loss, m_ent = _clipped(m_logits, mb["m_act"], mb["m_old"], mb["m_adv"],
                             mb["m_valid"], jnp.sum(mb["m_valid"]), hp)
    w_obs = pair.worker_obs(mb["w_cell"][:, :, None], mb["w_goal"])  # [T, n, 2, G, D]
    w_logits, _ = pair.worker.apply(params["worker"], w_obs)
    w_loss, w_ent = _clipped(w_logits, mb["w_act"], mb["w_old"], mb["w_adv"],
                             mb["w_weights"], jnp.sum(mb["w_weights"][:, :, 0]), hp)
    return m_loss + w_loss, {"manager_loss": m_loss, "worker_loss": w_loss,
                             "manager_entropy": m_ent, "worker_entropy": w_ent}

  def update_fn(state, hp):
    key, k_roll, k_perm = jax.random.split(state.key, 3)
    traj = rollout.collect_groups(env, env_params, policy_fn, state.params, k_roll,
                                  num_tasks, group, horizon)            # [T, N, G]
    valid = traj.valid
    returns = jnp.sum(jnp.where(valid, traj.rewards, 0.0), axis=0)     # [N, G]
    data, extra = _build_data(pair, state.params, traj, hp, k, relabel)
    params, opt_state, metrics, lr = grpo.optimise(   # every group stays whole
        lambda p, mb, _, hp: loss_fn(p, mb, hp), state, {}, data, hp, k_perm,
        anneal_lr=bool(config.anneal_lr), num_updates=n_updates, num_epochs=n_epochs,
        num_minibatches=n_mb, optimizer=optimizer)
    metrics.update({**extra, **grpo.episode_metrics(valid, returns, lr),
                    "success": jnp.mean((returns > 0).astype(jnp.float32)),
                    "env_steps": jnp.sum(valid).astype(jnp.float32)})
    return train_lib.TrainState(params=params, opt_state=opt_state, key=key,
                             update=state.update + 1, aux={}), metrics

  train = train_lib.Train(
      config=config, init_fn=init_fn, update_fn=update_fn,
      default_hparams={k_: config[k_] for k_ in HPARAMS}, num_updates=n_updates,
      env_steps_per_update=num_tasks * group * horizon,
      headline=("success", "worker_success", "manager_loss"))
  # What evaluating a checkpoint needs (train_lib.EVALUATION): the pair acting in the
  # subgoal env as in training, or (greedy) with zero Gumbel noise, so the manager takes
  # its most probable subgoal and the worker its most probable move.
  greedy_policy = PresampledPolicy(
      draw=lambda key: jnp.zeros((env.num_subgoals + _NUM_MOVES,), jnp.float32),
      act=policy_fn.act)
  return train_lib.attach_evaluation(train, env, env_params, eval_policy=lambda params,
                                     greedy=False: (greedy_policy if greedy else policy_fn, params))
