"""The designer's reply prefix (`DesignerConfig.reply_prefix`): forced after the assistant header,
part of the prompt ids and of the extracted source; off by default (prompts unchanged)."""

import ast
from types import SimpleNamespace

from hf_fixtures import tiny_tokenizer_dir

from spade_jax.envs.sandbox.validate import ValidatorConfig, extract_code
from spade_jax.envs.translate import answers
from spade_jax.envs.translate.pipeline import ByteTokenizer, translate
from spade_jax.spade import designer as designer_lib
from spade_jax.spade import warmstart
from spade_jax.spade.config import base_config
from spade_jax.spade.library_seeds import library_entries, seed_memory
from spade_jax.spade.memory import EnvMemory, normalise_source
from spade_jax.spade.prompts import GAME_REPLY_HELPERS
from spade_jax.tokenizer import load_tokenizer

PREFIX = "```python\nimport random\nimport re\n\n\nclass"
# the rest of a valid environment, as a model continuing PREFIX would write it
REST = r""" ParityEnv:
  def __init__(self, max_turns=3):
    self.max_turns = max_turns
    self.reset()

  def reset(self, seed=None):
    rng = random.Random(seed)
    self.numbers = [rng.randint(1, 99) for _ in range(5)]
    self.answer, self.turn = sum(n % 2 for n in self.numbers), 0
    return f"How many of {self.numbers} are odd? Answer with \\boxed{{N}}.", {}

  def solution(self):
    return str(self.answer)

  def step(self, action):
    self.turn += 1
    found = re.findall(r"\\boxed\{([^{}]*)\}", action)
    if found and found[-1].strip() == str(self.answer):
      return "Correct!", 1.0, True, False, {}
    truncated = self.turn >= self.max_turns
    return "Wrong. Count the odd numbers again.", 0.0, False, truncated, {}
```
"""


class FakeEngine:
  """Records the prompt ids it is given and "samples" fixed token lists (each ends in eos)."""

  def __init__(self, replies):
    self.replies, self.prompts = replies, []

  def bucket(self, n):
    return n

  def init(self, prompts_ids, **kw):
    self.prompts.append([list(p) for p in prompts_ids])
    return len(prompts_ids)

  def run(self, state, sampling, params=None):
    return state

  def outputs(self, n):
    toks = [list(self.replies[k % len(self.replies)]) for k in range(n)]
    return SimpleNamespace(
      tokens=toks,
      finished=[True] * n,
      logprobs=[[0.0] * len(t) for t in toks],
      loss_mask=[[1] * len(t) for t in toks],
    )


def _design(tmp_path, prefix, reply_text):
  tok = load_tokenizer(tiny_tokenizer_dir())
  engine = FakeEngine([tok.encode(reply_text) + [tok.eos_ids[0]]])
  cfg = designer_lib.DesignerConfig(num_games=1, max_attempts=1, reply_prefix=prefix)
  validator = ValidatorConfig(seeds=(0, 1, 2))
  d = designer_lib.Designer(engine, tok, cfg, validator, tmp_path, max_context=8192)
  d.write_hints = lambda games, **kw: {}  # no hint sampling, no translation
  memory = EnvMemory()
  seed_memory(memory, "game")
  games, samples, metrics = d.design(
    gen_step=0, skills=["Mathematical Reasoning"], memory=memory, corpus=None, seed=0
  )
  return d, engine, games, samples, metrics


def test_reply_prefix_is_in_the_prompt_and_the_extracted_source(tmp_path):
  d, engine, games, samples, metrics = _design(tmp_path, PREFIX, REST)
  forced = d.tok.encode(PREFIX)
  (prompt,) = engine.prompts[0]
  assert prompt[-len(forced) :] == forced  # forced after the assistant header
  assert samples[0]["prompt"] == prompt  # the prefix is prompt, not response (no gradient)
  assert metrics["designer/passed"] == 1.0, (
    tmp_path / "step000000_game00_attempt0.json"
  ).read_text()
  (game,) = games
  assert game.class_name == "ParityEnv"
  assert game.source.startswith("import random\nimport re\n\n\nclass ParityEnv:")
  assert (tmp_path / game.file).read_text() == game.source
  # the same reply without the prefix is not a module: the prefix is part of what is validated
  _, _, games, _, metrics = _design(tmp_path / "bare", "", REST)
  assert games == [None] and metrics["designer/passed"] == 0.0


def test_no_prefix_leaves_prompts_unchanged(tmp_path):
  d, engine, _, _, _ = _design(tmp_path, "", "```python\nx = 1\n```")
  (prompt,) = engine.prompts[0]
  # the default prompt is the chat template's rendering of the messages, nothing after it
  memory = EnvMemory()
  seed_memory(memory, "game")
  seeds, negative = memory.select("Mathematical Reasoning", seed=(0, 0, 0, 0))
  conv, _ = d.fitted_messages("Mathematical Reasoning", None, seeds, negative, (0, 0, 0, 0))
  assert prompt == d.tok.apply_chat_template(conv)
  assert base_config().designer.reply_prefix == ""
  assert designer_lib.DesignerConfig().reply_prefix == ""


def test_prefix_counts_toward_the_prompt_budget(tmp_path):
  tok = load_tokenizer(tiny_tokenizer_dir())
  conv = [{"role": "user", "content": "x"}]
  n = len(tok.apply_chat_template(conv))
  k = len(tok.encode(PREFIX))
  for prefix in ("", PREFIX):
    cfg = designer_lib.DesignerConfig(max_new_tokens=10, reply_prefix=prefix)
    d = designer_lib.Designer(None, tok, cfg, None, tmp_path, max_context=8192)
    assert len(d.prompt_ids(conv, prefix)) == n + (k if prefix else 0)
    # seeds are dropped, the last first, until prompt + prefix + max_new_tokens fit
    memory = EnvMemory()
    seed_memory(memory, "game")
    seeds, _ = memory.select("Mathematical Reasoning", seed=(0, 0, 0, 0))
    assert len(seeds) == 2
    sizes = []
    for m in range(3):
      full = d.messages("Mathematical Reasoning", None, seeds[:m], None, (0, 0, 0, 0))
      sizes.append(len(d.prompt_ids(full, prefix)))
    for m in range(3):
      d.max_context = sizes[m] + 10
      _, kept = d.fitted_messages("Mathematical Reasoning", None, seeds, None, (0, 0, 0, 0))
      assert kept == tuple(seeds[:m])
      d.max_context = sizes[m] + 9
      _, kept = d.fitted_messages("Mathematical Reasoning", None, seeds, None, (0, 0, 0, 0))
      assert kept == tuple(seeds[: max(m - 1, 0)])


def test_helpers_prefix_parses_answers_as_the_device_does():
  """`reply=helpers` opens the reply with the library twins' own answer parser, the one the
  translator lowers to the device parser: a class written after it can be put on device (an
  earlier prefix with a parser of its own made every such environment untranslatable)."""
  code = GAME_REPLY_HELPERS.removeprefix("```python\n").removesuffix("class")
  tree = ast.parse(code)
  fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "_boxed_ints")
  consts = {
    n.targets[0].id: n.value.args[0].value
    for n in tree.body
    if isinstance(n, ast.Assign) and n.targets[0].id in ("_BOXED", "_INTS")
  }
  assert (answers.function_dump(fn), consts) == answers.reference_parser()
  twin = next(e for e in library_entries("game") if e.name == "arith_chain")
  reply = warmstart.reply_text(twin.source, twin.class_name, GAME_REPLY_HELPERS)
  result = translate(extract_code(reply), ByteTokenizer())
  assert result.program is not None, result.reason
  assert result.answer_parse == "exact"


def test_a_class_copied_after_the_prefix_is_a_copy():
  """The "copy" stage compares code from the class on, so a seed's class written after a reply
  prefix (which replaces the seed's docstring, imports and helpers) is still a copy."""
  memory = EnvMemory()
  seed_memory(memory, "game")
  for e in library_entries("game")[:3]:
    code = extract_code(warmstart.reply_text(e.source, e.class_name, GAME_REPLY_HELPERS))
    assert normalise_source(code) != normalise_source(e.source)
    assert memory.is_seed_copy(code).name == e.name
    assert memory.is_seed_copy(code.replace("max_turns=", "max_turns=1 + ", 1)) is None
