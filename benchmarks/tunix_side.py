"""Tunix's side of issue 26's comparison: its vanilla sampler and its GRPO update on a HF model dir.

Runs inside a separate venv with ``google-tunix`` (see BUILD_NOTES.md, "Speed vs Tunix and HF");
it must not import spade_jax. ``benchmarks/vs_tunix.py`` writes the random Qwen3 (the shape of
``train_step.py --vs-torch``) and runs this script and our side alternately. By hand::

  /work/tunix-venv/bin/python benchmarks/tunix_side.py --model DIR [--reps 3] [--steps 3]

* Model: ``tunix.models.qwen3.params.create_model_from_safe_tensors`` on ``DIR`` (config from
  ``DIR/config.json``), float32.
* Decode: ``tunix.generate.sampler.Sampler`` on prompts of ``--prompt`` random tokens (the same
  ``np.random.default_rng(batch)`` prompts as our side), exactly ``--new`` new tokens (pad and eos
  ids are -1 / -2, never sampled, so no sequence stops early), KV cache of ``--cache-size`` slots
  (default 256: the power-of-two bucket our engine picks for 64 + 128). The warm-up goes through
  ``Sampler.__call__`` (compiles); each timed rep then runs the same two jitted functions
  ``__call__`` runs, timed apart: prefill = ``init_sample_state`` + ``_compiled_prefill_fn``,
  decode = ``_compiled_decode_fn`` (the while-loop over the new tokens). Decode tokens/s =
  ``batch * new / decode time``. Modes as in ``generate.py``: ``greedy``; ``top_p`` (temperature
  1, top-p 0.95, no top-k: Tunix then sorts the whole vocabulary with ``lax.top_k``); ``spade``
  (temperature 0.6, top-p 0.95, top-k 20).
* Update: Tunix's own RL actor trainer (``tunix.rl.trainer.Trainer``, a ``PeftTrainer``) with
  ``tunix.rl.algo_core.grpo_loss_fn`` wired exactly as ``GRPOLearner.__init__`` wires it, driven
  on one fixed precomputed ``TrainExample`` (batch x (64 prompt + 128 completion) tokens, random,
  ``np.random.default_rng(0)`` as ``train_step.make_batch``): the timed call is the jitted
  ``train_step`` that ``PeftTrainer.train`` calls per step (value_and_grad of the loss, global
  norm, optimizer update; the optimizer state is donated). GRPOConfig: beta 0 (no reference
  forward), epsilon 0.2 / epsilon_high 0.28, ``sequence-mean-token-mean``, num_iterations 1 (old
  log-probs = stop_gradient of the current ones). TIS: Tunix takes precomputed per-token weights
  (``TrainExample.sampler_is_weights``, computed upstream by the agentic learner as
  ``min(exp(trainer - rollout logp), threshold)``); here they are computed once, before timing,
  from the initial model with rollout log-probs ``-log(V)`` and threshold 2 (our side computes them
  inside its step). Optimizer: ``optax.chain(clip_by_global_norm(1.0), adamw(1e-6, b1=0.9,
  b2=0.98, eps=1e-8, weight_decay=0.1, mask=ndim > 1))`` (the recipe of
  ``spade_jax.rl.optimizer``, written out). ``trainer_loop_s`` additionally times
  ``Trainer.train`` over ``--steps`` copies of the example (its host loop, metrics buffering and
  in-flight throttling included), per step.

Prints one JSON object (``--out FILE`` also writes it there).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

PAD, EOS = -1, -2
COMPILES = [0]


def _count_compile(event, duration, **_):
  if event == "/jax/core/compile/backend_compile_duration":
    COMPILES[0] += 1


jax.monitoring.register_event_duration_secs_listener(_count_compile)

MODES = {
  "greedy": dict(temperature=0.0, top_p=None, top_k=None),
  "top_p": dict(temperature=1.0, top_p=0.95, top_k=None),
  "spade": dict(temperature=0.6, top_p=0.95, top_k=20),
}


class IdTokenizer:
  """The tokenizer interface Tunix's sampler wants, over space-separated token ids."""

  def encode(self, text, **_):
    return [int(t) for t in text.split()]

  def decode(self, ids, **_):
    return " ".join(str(int(i)) for i in ids)

  def bos_id(self):
    return None

  def eos_id(self):
    return EOS

  def pad_id(self):
    return PAD


def load_model(model_dir: str):
  from tunix.models.qwen3 import model as qwen3_model
  from tunix.models.qwen3 import params as qwen3_params

  with open(os.path.join(model_dir, "config.json")) as f:
    hf = json.load(f)
  rope_theta = hf.get("rope_theta") or (hf.get("rope_parameters") or {}).get("rope_theta", 1e6)
  cfg = qwen3_model.ModelConfig(
    num_layers=hf["num_hidden_layers"],
    vocab_size=hf["vocab_size"],
    embed_dim=hf["hidden_size"],
    hidden_dim=hf["intermediate_size"],
    num_heads=hf["num_attention_heads"],
    head_dim=hf["head_dim"],
    num_kv_heads=hf["num_key_value_heads"],
    rope_theta=int(rope_theta),
    norm_eps=hf["rms_norm_eps"],
    use_tied_embedding=hf.get("tie_word_embeddings", False),
    dtype=jnp.float32,
    param_dtype=jnp.float32,
  )
  model = qwen3_params.create_model_from_safe_tensors(model_dir, cfg, mesh=None, dtype=jnp.float32)
  return model, cfg


# ------------------------------------------------------------------------------------- decode
def decode_case(sampler, vocab: int, batch: int, mode: str, args) -> dict:
  kw = MODES[mode]
  prompts = np.random.default_rng(batch).integers(0, vocab, (batch, args.prompt)).astype(np.int32)
  strings = [" ".join(map(str, p)) for p in prompts]
  sampler.eos_ids = jnp.array([EOS])
  t0 = time.perf_counter()
  out = sampler(
    strings,
    max_generation_steps=args.new,
    max_prompt_length=args.prompt,
    eos_tokens=[EOS],
    temperature=kw["temperature"],
    top_p=kw["top_p"],
    top_k=kw["top_k"],
    seed=0,
  )
  warmup_s = time.perf_counter() - t0
  call_tokens = np.array([np.asarray(t) for t in out.tokens])
  params = sampler._flattened_transformer_state
  total = args.prompt + args.new
  compiles = COMPILES[0]
  pre, dec, tokens = [], [], None
  for _ in range(args.reps):
    t0 = time.perf_counter()
    state = sampler.init_sample_state(
      jnp.asarray(prompts),
      total_sampling_steps=total,
      include_logits=False,
      forbidden_token_ids=None,
      temperature=kw["temperature"],
      top_p=kw["top_p"],
      top_k=kw["top_k"],
      seed=jax.random.PRNGKey(0),
      beam_size=None,
    )
    state = sampler._compiled_prefill_fn(params, state, None, echo=False)
    jax.block_until_ready(state.token_buffer)
    t1 = time.perf_counter()
    state = sampler._compiled_decode_fn(params, state)
    jax.block_until_ready(state.token_buffer)
    t2 = time.perf_counter()
    pre.append(batch * args.prompt / (t1 - t0))
    dec.append(batch * args.new / (t2 - t1))
    tokens = np.asarray(state.token_buffer)[:, args.prompt : total]
  row = dict(
    batch=batch,
    mode=mode,
    warmup_call_s=round(warmup_s, 2),
    prefill_tok_s=round(statistics.median(pre), 1),
    decode_tok_s=round(statistics.median(dec), 1),
    decode_tok_s_all=[round(x, 1) for x in dec],
    new_tokens=int(tokens.shape[1]),
    compiles_while_timed=COMPILES[0] - compiles,
    call_matches_internal=bool(call_tokens.shape == tokens.shape and (call_tokens == tokens).all())
    if mode == "greedy"
    else None,
  )
  if mode == "greedy" and args.tokens:
    row["tokens"] = tokens.tolist()
  return row


def bench_decode(model, cfg, args) -> list[dict]:
  from tunix.generate import sampler as sampler_lib

  cache = sampler_lib.CacheConfig(
    cache_size=args.cache_size,
    num_layers=cfg.num_layers,
    num_kv_heads=cfg.num_kv_heads,
    head_dim=cfg.head_dim,
  )
  sampler = sampler_lib.Sampler(model, IdTokenizer(), cache)
  rows = []
  for batch in (int(b) for b in args.batches.split(",")):
    for mode in args.modes.split(","):
      rows.append(decode_case(sampler, cfg.vocab_size, batch, mode, args))
      print(json.dumps({k: v for k, v in rows[-1].items() if k != "tokens"}), flush=True)
  return rows


# ------------------------------------------------------------------------------------- update
def make_example(vocab: int, batch: int, prompt: int, completion: int):
  """The batch of ``train_step.make_batch`` (seed 0, tokens then advantages), split in two."""
  from tunix.rl.grpo.grpo_learner import TrainExample

  rng = np.random.default_rng(0)
  tokens = rng.integers(0, vocab, (batch, prompt + completion)).astype(np.int32)
  adv = rng.normal(size=batch).astype(np.float32)
  return TrainExample(
    prompt_ids=jnp.asarray(tokens[:, :prompt]),
    prompt_mask=jnp.ones((batch, prompt), jnp.bool_),
    completion_ids=jnp.asarray(tokens[:, prompt:]),
    completion_mask=jnp.ones((batch, completion), jnp.int32),
    advantages=jnp.asarray(adv),
    ref_per_token_logps=None,
    old_per_token_logps=None,
  )


def bench_update(model, cfg, args) -> dict:
  from flax import nnx
  from tunix.rl import algo_core, common
  from tunix.rl import trainer as rl_trainer
  from tunix.rl.grpo.grpo_learner import GRPOConfig
  from tunix.sft import peft_trainer

  algo = GRPOConfig(
    num_generations=2,
    num_iterations=1,
    beta=0.0,
    epsilon=0.2,
    loss_agg_mode="sequence-mean-token-mean",
  )
  algo.epsilon_high = 0.28
  algo.temperature = 1.0
  example = make_example(cfg.vocab_size, args.batch, args.prompt, args.new)

  # TIS weights from the initial model, as the learner computes them upstream of the step.
  graphdef, state = nnx.split(model)
  logps = common.compute_per_token_logps(
    graphdef,
    state,
    prompt_tokens=example.prompt_ids,
    completion_tokens=example.completion_ids,
    pad_id=PAD,
    eos_id=EOS,
    stop_gradient=True,
    temperature=1.0,
  )
  rollout = -np.log(cfg.vocab_size)
  weights = jnp.minimum(jnp.exp(jnp.clip(logps - rollout, -20.0, 20.0)), 2.0)
  example = example.replace(sampler_is_weights=jax.lax.stop_gradient(weights))

  def decay(params):
    return jax.tree.map(lambda p: p.ndim > 1, params)

  optimizer = optax.chain(
    optax.clip_by_global_norm(1.0),
    optax.adamw(1e-6, b1=0.9, b2=0.98, eps=1e-8, weight_decay=0.1, mask=decay),
  )
  trainer = rl_trainer.Trainer(
    model,
    optimizer,
    peft_trainer.TrainingConfig(eval_every_n_steps=10**9, max_steps=10**9),
    custom_checkpoint_metadata_fn=lambda: {},
  )
  loss_fn = lambda model, train_example, algo_config: algo_core.grpo_loss_fn(  # noqa: E731
    model, train_example, algo_config=algo, pad_id=PAD, eos_id=EOS
  )
  trainer.with_loss_fn(loss_fn, has_aux=True)
  trainer.with_gen_model_input_fn(lambda x: {"train_example": x, "algo_config": algo})
  train_step, _ = trainer.jit_train_and_eval_step(cache_nnx_graph=True)

  t0 = time.perf_counter()
  loss, aux, gnorm = train_step(example)
  jax.block_until_ready(loss)
  compile_s = time.perf_counter() - t0
  first = dict(loss=float(loss), grad_norm=float(gnorm))
  compiles = COMPILES[0]
  t0 = time.perf_counter()
  jax.block_until_ready(train_step(example))  # a second warm-up step
  second_s = time.perf_counter() - t0
  second_compiles, compiles = COMPILES[0] - compiles, COMPILES[0]
  times = []
  for _ in range(args.steps):
    t0 = time.perf_counter()
    jax.block_until_ready(train_step(example))
    times.append(time.perf_counter() - t0)
  out = dict(
    batch=args.batch,
    seq=args.prompt + args.new,
    trained_tokens=args.new,
    compile_s=round(compile_s, 2),
    second_step_s=round(second_s, 3),
    compiles_in_second_step=second_compiles,
    compiles_while_timed=COMPILES[0] - compiles,
    first=first,
    step_s=statistics.median(times),
    step_s_all=[round(t, 4) for t in times],
  )
  try:  # Tunix's own loop over the same step (host work per step included)
    trainer.is_managed_externally = True
    t0 = time.perf_counter()
    trainer.train([example] * args.steps)
    trainer._throttler.wait_for_all()
    out["trainer_loop_s"] = (time.perf_counter() - t0) / args.steps
  except Exception as e:  # noqa: BLE001 - reported, not fatal
    out["trainer_loop_error"] = f"{type(e).__name__}: {e}"[:300]
  return out


def main():
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--model", required=True, help="HF model directory (safetensors + config.json)")
  ap.add_argument("--batches", default="16,64")
  ap.add_argument("--modes", default="greedy,spade", help="comma list of " + " | ".join(MODES))
  ap.add_argument("--prompt", type=int, default=64)
  ap.add_argument("--new", type=int, default=128)
  ap.add_argument("--cache-size", type=int, default=256)
  ap.add_argument("--reps", type=int, default=3)
  ap.add_argument("--batch", type=int, default=16, help="update batch")
  ap.add_argument("--steps", type=int, default=3, help="timed update steps")
  ap.add_argument("--no-decode", action="store_true")
  ap.add_argument("--no-update", action="store_true")
  ap.add_argument("--tokens", action="store_true", help="include greedy tokens in the JSON")
  ap.add_argument("--out", default=None)
  args = ap.parse_args()

  import importlib.metadata as md

  model, cfg = load_model(args.model)
  out = dict(
    side="tunix",
    versions={p: md.version(p) for p in ("google-tunix", "jax", "jaxlib", "flax", "optax")},
    backend=jax.default_backend(),
    cpu_count=os.cpu_count(),
    load_avg_1m_start=round(os.getloadavg()[0], 2),
    cache_size=args.cache_size,
  )
  if not args.no_decode:
    out["decode"] = bench_decode(model, cfg, args)
  if not args.no_update:
    model, cfg = load_model(args.model)  # fresh weights: the sampler's copy is untouched anyway
    out["update"] = bench_update(model, cfg, args)
  out["load_avg_1m_end"] = round(os.getloadavg()[0], 2)
  text = json.dumps(out)
  if args.out:
    with open(args.out, "w") as f:
      f.write(text)
  print(text, flush=True)


if __name__ == "__main__":
  main()
