"""Cost of the tiny iteration's GRPO update: one padded batch vs length segments.

  python benchmarks/tiny_update.py [--config-arg ""] [--reps 7]

The tiny iteration trains ``G`` designer rows (prompt + program: ``designer.prompt_len +
program_tokens + 1`` slots) and ``G * P`` agent rows (an episode: ``agent.max_context`` slots)
in one update. Times `rl.update.train_step` on the shapes of ``experiments/configs/tiny.py[:ARG]``
(random tokens with full loss masks; the update's cost does not depend on their values) in two
layouts, alternating, side by side in one process:

* ``padded``: one batch, every row padded to the longer (designer) length (the iteration before
  segments); replay steps carry the ``G`` designer rows as invalid pads;
* ``segments``: the designer rows and the agent rows as two segments of their own lengths
  (`rl.update.loss_and_grads`); replay steps train the agent rows only.

Prints the median seconds of each (regeneration step / replay step) and the ratios.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from benchmarks.common import median_time, tiny_setup  # noqa: E402
from spade_jax import trajectories  # noqa: E402
from spade_jax.rl.optimizer import learning_rate_schedule, make_optimizer  # noqa: E402
from spade_jax.rl.update import train_step  # noqa: E402


def rows(n: int, length: int, role: int, valid: bool, seed: int) -> trajectories.Trajectories:
  rng = np.random.default_rng(seed)
  mask = np.full((n, length), float(valid), np.float32)
  return trajectories.Trajectories(
    tokens_BT=jnp.asarray(rng.integers(1, 500, (n, length)), jnp.int32),
    loss_mask_BT=jnp.asarray(mask),
    rollout_logprobs_BT=jnp.asarray(-np.abs(rng.normal(size=(n, length))) * mask, jnp.float32),
    advantages_B=jnp.asarray(rng.normal(size=n), jnp.float32),
    role_B=jnp.full((n,), role, jnp.int32),
    rewards_B=jnp.zeros((n,), jnp.float32),
    group_id_B=jnp.zeros((n,), jnp.int32),
    valid_B=jnp.full((n,), valid),
    turns_B=jnp.ones((n,), jnp.int32),
  )


def main() -> None:
  args, config, setup = tiny_setup(__doc__, reps=7)
  graphdef, state, _ = setup.init_state()
  spec = setup.spec
  G, P = spec.num_games, spec.plays
  Td, Ta = spec.design_len, spec.rollout.max_context
  D, A = trajectories.ROLE_DESIGNER, trajectories.ROLE_AGENT
  pad = lambda t: jax.tree.map(
    lambda x: jnp.pad(x, ((0, 0), (0, Td - x.shape[1]))) if x.ndim == 2 else x, t
  )
  cat = lambda a, b: jax.tree.map(lambda x, y: jnp.concatenate([x, y]), a, b)
  agent = rows(G * P, Ta, A, True, 1)
  layouts = {
    ("padded", "regen"): cat(rows(G, Td, D, True, 0), pad(agent)),
    ("padded", "replay"): cat(rows(G, Td, D, False, 0), pad(agent)),
    ("segments", "regen"): (rows(G, Td, D, True, 0), agent),
    ("segments", "replay"): (agent,),
  }
  step_fn = jax.jit(
    functools.partial(
      train_step, graphdef, make_optimizer(spec.opt), learning_rate_schedule(spec.opt), spec.loss
    )
  )
  times = {k: [] for k in layouts}
  for _ in range(args.reps):  # alternate layouts so machine-speed drift hits both alike
    for key, batch in layouts.items():
      times[key].append(median_time(lambda b=batch: step_fn(state, b), warmup=1, repeats=3))
  med = {k: float(np.median(v)) for k, v in times.items()}
  print(f"designer rows {G} x {Td}, agent rows {G * P} x {Ta}")
  for (layout, kind), t in med.items():
    print(f"{layout:9s} {kind:6s} update {t * 1e3:8.1f} ms")
  for kind in ("regen", "replay"):
    print(f"ratio segments / padded, {kind}: {med['segments', kind] / med['padded', kind]:.2f}")


if __name__ == "__main__":
  main()
