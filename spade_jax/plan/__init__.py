"""Compiled memory plans: will a config's GRPO update and sampler fit a target's accelerators?

  python -m spade_jax.plan --config experiments/configs/qwen3.py:8b --mesh data=1,fsdp=8,tensor=1
  python -m spade_jax.plan --config experiments/configs/tool_use.py:30b_a3b \
      --mesh fsdp=16 --micro_batches 48 --seq 32768 --hbm 16 --json

Before jax is imported, ``XLA_FLAGS`` gets ``--xla_force_host_platform_device_count=<mesh
size>``, so a fake CPU mesh of the target's size exists. The model config comes from the
config's ``model.path`` without weights: an architecture preset (`spade_jax.models.presets`,
the hub ids of the paper's Qwen3 models) or a local directory's ``config.json``. Then, on
abstract inputs only (``jax.ShapeDtypeStruct`` with shardings, ``nnx.eval_shape``; no weight is
allocated), it lowers and compiles

* the GRPO update: `spade_jax.rl.update.train_step` jitted exactly as `make_update` does
  (state and batch shardings, state donated) for the config's global batch, micro-batches,
  sequence length (``train.seq_len``, else the longest context a sample can have), compute
  dtype, rematerialisation and KL reference;
* the sampler: `spade_jax.engine.decode.prefill` (a prompt into a fresh KV cache) and the
  decode loop `spade_jax.engine.decode.run_loop` (the engine's ``run``: a ``while_loop`` of
  decode steps, state donated), over the train state's parameters (the loop samples from
  them) with the cache in bfloat16 (the engine's choice on accelerators), for the sampling
  batch (every episode of a step: ``num_games x (plays + hint_plays)``) and the agent's
  context,

with the sharding rules the runner uses (`spade_jax.sharding`), and prints per device the bytes
of XLA's memory analysis of each compiled executable (arguments, outputs, temporaries, aliased
= donated, generated code; peak = arguments + outputs - aliased + temporaries) beside an
analytic estimate, and the update's FLOPs from XLA's cost analysis. While sampling, the rest of
the train state (Adam moments, reference parameters) stays on the device: the sampler's total
adds it. ``--hbm GiB`` says whether the largest of those fits.

Caveats: this is the CPU compiler's memory analysis of the SPMD-partitioned program; the TPU and
GPU compilers schedule, fuse and rematerialise differently (usually with less temporary memory
on TPU) and reserve memory of their own (runtime, collectives' buffers, fragmentation); none of
that is counted. Bad input (unknown size, a mesh whose product does not match, unknown mesh
axes) prints one line on stderr and exits 2.

Modules: `args` (command line, config and model without weights, shapes), `programs`
(lowering and compiling on abstract inputs), `report` (analytic estimate, report, text), `cli`
(``main``, run by ``python -m spade_jax.plan``).
"""
