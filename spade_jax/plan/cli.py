"""``python -m spade_jax.plan``: arguments, errors (one line, exit 2), output."""

from __future__ import annotations

import argparse
import json
import math
import sys

from spade_jax.plan import args as plan_args
from spade_jax.plan.args import PlanError
from spade_jax.plan.report import format_report, plan


def build_parser() -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(
    prog="python -m spade_jax.plan", description="compiled memory plans (see spade_jax.plan)"
  )
  p.add_argument("--config", required=True, help="experiment config file[:arg]")
  p.add_argument("--mesh", required=True, help="name=size pairs, e.g. data=1,fsdp=8,tensor=1")
  p.add_argument("--devices", type=int, default=0, help="the target's chips (checks --mesh)")
  p.add_argument("--micro_batches", type=int, default=0, help="default: train.micro_batches")
  p.add_argument("--seq", type=int, default=0, help="update length (default: the config's)")
  p.add_argument("--batch", type=int, default=0, help="update batch (default: global_batch)")
  p.add_argument("--sample_batch", type=int, default=0, help="sampler sequences")
  p.add_argument("--context", type=int, default=0, help="sampler cache slots")
  p.add_argument("--prompt", type=int, default=0, help="sampler prompt slots")
  p.add_argument("--hbm", type=float, default=None, help="GiB per device: say fits / not")
  p.add_argument("--set", action="append", default=[], help="config override key=value")
  p.add_argument("--json", action="store_true", help="print the report as JSON")
  return p


class _Parser(argparse.ArgumentParser):
  def error(self, message):
    raise PlanError(message)


def main(argv: list[str] | None = None) -> int:
  parser = build_parser()
  parser.__class__ = _Parser
  try:
    args = parser.parse_args(argv)
    mesh_sizes = plan_args.parse_mesh(args.mesh)
    n = math.prod(mesh_sizes.values())
    if args.devices and args.devices != n:
      raise PlanError(f"--mesh {args.mesh} has {n} devices, --devices says {args.devices}")
    for name in ("devices", "micro_batches", "seq", "batch", "sample_batch", "context", "prompt"):
      if getattr(args, name) < 0:
        raise PlanError(f"--{name} must be positive")
    if args.hbm is not None and args.hbm <= 0:
      raise PlanError("--hbm must be positive")
    if "jax" not in sys.modules:
      plan_args.set_device_count(n)
    from spade_jax import xla_cpu

    xla_cpu.pin_isa()
    config = plan_args.load_config(args.config)
    plan_args.apply_overrides(config, args.set)
    shapes = plan_args.default_shapes(config, args)
    report = plan(config, mesh_sizes, shapes, args.hbm)
  except PlanError as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  print(json.dumps(report, indent=1) if args.json else format_report(report))
  return 0


if __name__ == "__main__":
  sys.exit(main())
