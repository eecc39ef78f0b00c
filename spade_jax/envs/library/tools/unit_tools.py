"""Math tools: a word problem solved with a unit converter and a calculator.

Tool-use skill: Tool Selection (easy), answer-graded. Each task needs one unit conversion
(`convert_units`) followed by one arithmetic step (`calculator`); `get_constant` and
`percent_change` are distractors. The answer is the calculator's result rounded to 2 decimals.
"""

import json
import random
import re

from tool_env import ToolEnv

FACTORS = {  # unit -> (dimension, size in the dimension's base unit)
  "m": ("length", 1.0),
  "km": ("length", 1000.0),
  "cm": ("length", 0.01),
  "mi": ("length", 1609.344),
  "ft": ("length", 0.3048),
  "in": ("length", 0.0254),
  "yd": ("length", 0.9144),
  "kg": ("mass", 1.0),
  "g": ("mass", 0.001),
  "lb": ("mass", 0.45359237),
  "oz": ("mass", 0.028349523125),
  "l": ("volume", 1.0),
  "ml": ("volume", 0.001),
  "gal": ("volume", 3.785411784),
  "cup": ("volume", 0.2365882365),
}
TEMPERATURES = ("c", "f", "k")
ALIASES = {
  "meter": "m",
  "meters": "m",
  "kilometer": "km",
  "kilometers": "km",
  "mile": "mi",
  "miles": "mi",
  "foot": "ft",
  "feet": "ft",
  "inch": "in",
  "inches": "in",
  "kilogram": "kg",
  "kilograms": "kg",
  "gram": "g",
  "grams": "g",
  "pound": "lb",
  "pounds": "lb",
  "lbs": "lb",
  "ounce": "oz",
  "ounces": "oz",
  "liter": "l",
  "liters": "l",
  "litre": "l",
  "litres": "l",
  "gallon": "gal",
  "gallons": "gal",
  "celsius": "c",
  "fahrenheit": "f",
  "kelvin": "k",
}
CONSTANTS = {"pi": 3.141592653589793, "e": 2.718281828459045, "g": 9.80665, "c": 299792458.0}
_TOKEN = re.compile(r"\s*(\d+\.?\d*|\.\d+|[-+*/()])")


def _call(tool, /, **arguments):
  return "<tool_call>" + json.dumps({"name": tool, "arguments": arguments}) + "</tool_call>"


def _tool(description, properties=None, required=()):
  params = {"type": "object", "properties": properties or {}, "required": list(required)}
  return {"description": description, "parameters": params}


def _fmt(value):
  text = f"{value:.4f}".rstrip("0").rstrip(".")
  return "0" if text in ("", "-0") else text


def _unit(name):
  key = str(name).strip().lower().replace("°", "")
  key = ALIASES.get(key, key)
  return key if key in FACTORS or key in TEMPERATURES else None


def _convert(value, src, dst):
  """`value` in unit `src` expressed in unit `dst`, or an error text."""
  if src in TEMPERATURES or dst in TEMPERATURES:
    if src not in TEMPERATURES or dst not in TEMPERATURES:
      return "Error: cannot convert between a temperature and another kind of unit"
    kelvin = {"c": value + 273.15, "f": (value - 32) * 5 / 9 + 273.15, "k": value}[src]
    return {"c": kelvin - 273.15, "f": (kelvin - 273.15) * 9 / 5 + 32, "k": kelvin}[dst]
  (dim_a, size_a), (dim_b, size_b) = FACTORS[src], FACTORS[dst]
  if dim_a != dim_b:
    return f"Error: cannot convert {dim_a} ({src}) to {dim_b} ({dst})"
  return value * size_a / size_b


def _evaluate(expression):
  """The value of an arithmetic expression (+ - * / and parentheses), or an error text."""
  text = str(expression)
  if len(text) > 200:
    return "Error: expression too long (200 characters at most)"
  tokens, pos = [], 0
  while pos < len(text):
    m = _TOKEN.match(text, pos)
    if m is None:
      if text[pos:].strip() == "":
        break
      return f"Error: unexpected character {text[pos:].strip()[0]!r} in the expression"
    tokens.append(m.group(1))
    pos = m.end()
  out = []  # postfix, by shunting-yard; a unary minus becomes "neg"
  ops = []
  prec = {"+": 1, "-": 1, "*": 2, "/": 2, "neg": 3}
  prev = None
  for tok in tokens:
    if tok[0].isdigit() or tok[0] == ".":
      out.append(float(tok))
    elif tok == "(":
      ops.append(tok)
    elif tok == ")":
      while ops and ops[-1] != "(":
        out.append(ops.pop())
      if not ops:
        return "Error: unbalanced parentheses"
      ops.pop()
    else:
      if tok == "-" and (prev is None or prev in prec or prev == "("):
        ops.append("neg")
        prev = "neg"
        continue
      while ops and ops[-1] != "(" and prec[ops[-1]] >= prec[tok]:
        out.append(ops.pop())
      ops.append(tok)
    prev = tok
  while ops:
    if ops[-1] == "(":
      return "Error: unbalanced parentheses"
    out.append(ops.pop())
  stack = []
  for item in out:
    if isinstance(item, float):
      stack.append(item)
    elif item == "neg":
      if not stack:
        return "Error: malformed expression"
      stack.append(-stack.pop())
    else:
      if len(stack) < 2:
        return "Error: malformed expression"
      b, a = stack.pop(), stack.pop()
      if item == "/" and b == 0:
        return "Error: division by zero"
      stack.append({"+": a + b, "-": a - b, "*": a * b, "/": a / b if b else 0.0}[item])
  if len(stack) != 1:
    return "Error: malformed expression"
  return stack[0]


class UnitToolsEnv(ToolEnv):
  def reset(self, seed=None):
    rng = random.Random(seed)
    kind = rng.choice(["speed", "shipping", "oven", "fuel"])
    if kind == "speed":
      miles, minutes = round(rng.uniform(3, 27), 1), rng.randint(20, 240)
      self.conversion = (miles, "mi", "km")
      self.template = "{} / " + str(minutes) + " * 60"
      task = (
        f"I ran {miles} miles in {minutes} minutes. What was my average speed in kilometers "
        "per hour?"
      )
    elif kind == "shipping":
      pounds, rate = round(rng.uniform(2, 80), 1), round(rng.uniform(1.5, 9.5), 2)
      self.conversion = (pounds, "lb", "kg")
      self.template = "{} * " + str(rate)
      task = (
        f"My parcel weighs {pounds} pounds and the courier charges ${rate} per kilogram. "
        "How many dollars will shipping cost?"
      )
    elif kind == "oven":
      oven = rng.randint(300, 480)
      target = rng.randint(110, int((oven - 32) * 5 / 9) - 5)
      self.conversion = (oven, "f", "c")
      self.template = "{} - " + str(target)
      task = (
        f"My oven is at {oven} degrees Fahrenheit and the recipe wants {target} degrees "
        "Celsius. By how many degrees Celsius is the oven too hot?"
      )
    else:
      gallons, price = round(rng.uniform(5, 20), 1), round(rng.uniform(1.2, 2.2), 3)
      self.conversion = (gallons, "gal", "l")
      self.template = "{} * " + str(price)
      task = (
        f"I put {gallons} US gallons of fuel in my car; fuel costs {price} euros per liter. "
        "How many euros did I pay?"
      )
    value, src, dst = self.conversion
    self.converted = _fmt(_convert(value, src, dst))
    self.expression = self.template.format(self.converted)
    result = _fmt(_evaluate(self.expression))
    self.expected_answer = f"{float(result):.2f}"
    number = {"type": "number", "description": "a number"}
    self.tools = {
      "calculator": _tool(
        "Evaluate an arithmetic expression with + - * / and parentheses.",
        {"expression": {"type": "string", "description": "e.g. '(3.5 + 2) * 4'"}},
        ["expression"],
      ),
      "convert_units": _tool(
        "Convert a value between units of length (m, km, cm, mi, ft, in, yd), mass (kg, g, lb, "
        "oz), volume (l, ml, gal, cup) or temperature (c, f, k).",
        {
          "value": number,
          "from_unit": {"type": "string", "description": "the unit of value"},
          "to_unit": {"type": "string", "description": "the wanted unit"},
        },
        ["value", "from_unit", "to_unit"],
      ),
      "get_constant": _tool(
        "The value of a named constant: pi, e, g (gravity) or c (speed of light).",
        {"name": {"type": "string", "description": "the constant's name"}},
        ["name"],
      ),
      "percent_change": _tool(
        "The percentage change from an old value to a new value.",
        {"old": number, "new": number},
        ["old", "new"],
      ),
    }
    return task + " Round to 2 decimals.", {}

  def tool_calculator(self, expression):
    result = _evaluate(expression)
    return result if isinstance(result, str) else _fmt(result)

  def tool_convert_units(self, value, from_unit, to_unit):
    try:
      number = float(value)
    except (TypeError, ValueError):
      return f"Error: value must be a number, got {value!r}"
    src, dst = _unit(from_unit), _unit(to_unit)
    if src is None or dst is None:
      bad = from_unit if src is None else to_unit
      return f"Error: unknown unit '{bad}'"
    result = _convert(number, src, dst)
    return result if isinstance(result, str) else f"{_fmt(number)} {src} = {_fmt(result)} {dst}"

  def tool_get_constant(self, name):
    key = str(name).strip().lower()
    if key not in CONSTANTS:
      return f"Error: unknown constant '{name}' (known: {', '.join(sorted(CONSTANTS))})"
    return _fmt(CONSTANTS[key]) if key != "c" else "299792458"

  def tool_percent_change(self, old, new):
    try:
      a, b = float(old), float(new)
    except (TypeError, ValueError):
      return "Error: old and new must be numbers"
    if a == 0:
      return "Error: the old value must not be zero"
    return _fmt((b - a) / abs(a) * 100) + "%"

  def solution(self):
    value, src, dst = self.conversion
    return [
      _call("convert_units", value=value, from_unit=src, to_unit=dst),
      _call("calculator", expression=self.expression),
      f"<answer>{self.expected_answer}</answer>",
    ]
