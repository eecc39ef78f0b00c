"""Restaurant orders: enter a table's order, replacing a sold-out dish, and send it to the kitchen.

Tool-use skill: Error Recovery (medium), state-graded. The menu does not show availability:
adding the sold-out dish fails, and the agent must follow the waiter's rule (the cheapest
available dish of the same category, same quantity), then submit. The submitted order of the
table must be exactly right. `get_bill` and `list_tables` are not needed.
"""

import json
import random

from tool_env import ToolEnv

DISHES = {
  "starter": [
    "tomato soup",
    "garlic bread",
    "caesar salad",
    "bruschetta",
    "spring rolls",
    "calamari",
    "hummus plate",
  ],
  "main": [
    "margherita pizza",
    "beef burger",
    "mushroom risotto",
    "grilled salmon",
    "chicken curry",
    "pad thai",
    "lasagna",
  ],
  "dessert": [
    "tiramisu",
    "apple pie",
    "chocolate mousse",
    "cheesecake",
    "panna cotta",
    "lemon tart",
    "ice cream",
  ],
  "drink": [
    "lemonade",
    "iced tea",
    "espresso",
    "sparkling water",
    "orange juice",
    "cola",
    "ginger beer",
  ],
}


def _call(tool, /, **arguments):
  return "<tool_call>" + json.dumps({"name": tool, "arguments": arguments}) + "</tool_call>"


def _tool(description, properties=None, required=()):
  params = {"type": "object", "properties": properties or {}, "required": list(required)}
  return {"description": description, "parameters": params}


class RestaurantEnv(ToolEnv):
  def reset(self, seed=None):
    rng = random.Random(seed)
    self.menu = {}  # dish -> {"category", "price" (cents), "sold_out"}
    for category, names in DISHES.items():
      picked = rng.sample(names, rng.randint(4, 6))
      low, high = {
        "starter": (450, 1200),
        "main": (1100, 2900),
        "dessert": (500, 1100),
        "drink": (250, 600),
      }[category]
      prices = rng.sample(range(low, high, 25), len(picked))
      for name, price in zip(picked, prices):
        self.menu[name] = {"category": category, "price": price, "sold_out": rng.random() < 0.2}
    categories = rng.sample(sorted(DISHES), 3)
    self.requested = []
    for category in categories:
      dish = rng.choice(sorted(d for d, v in self.menu.items() if v["category"] == category))
      self.requested.append((dish, rng.randint(1, 4)))
    self.missing = rng.randrange(3)
    for i, (dish, _) in enumerate(self.requested):
      self.menu[dish]["sold_out"] = i == self.missing
    gone, qty = self.requested[self.missing]
    category = self.menu[gone]["category"]
    left = [
      d for d, v in sorted(self.menu.items()) if v["category"] == category and not v["sold_out"]
    ]
    if not left:
      left = [d for d, v in sorted(self.menu.items()) if v["category"] == category and d != gone]
      self.menu[left[0]]["sold_out"] = False
      left = left[:1]
    self.replacement = min(left, key=lambda d: self.menu[d]["price"])
    self.expected = {d: q for i, (d, q) in enumerate(self.requested) if i != self.missing}
    self.expected[self.replacement] = qty
    self.tables = {t: {"items": {}, "submitted": False} for t in range(1, rng.randint(8, 16))}
    self.table = rng.choice(sorted(self.tables))
    for t in sorted(self.tables):
      if t != self.table and rng.random() < 0.4:
        available = [d for d, v in sorted(self.menu.items()) if not v["sold_out"]]
        items = {d: rng.randint(1, 3) for d in rng.sample(available, rng.randint(1, 3))}
        self.tables[t] = {"items": items, "submitted": rng.random() < 0.5}
    self.expected_answer = None
    wants = ", ".join(f"{q} x {d}" for d, q in self.requested)
    task = (
      f"Table {self.table} would like {wants}. House rule: if a dish is sold out, order the "
      "cheapest available dish of the same category instead, in the same quantity. Enter the "
      "order and send it to the kitchen."
    )
    table = {"type": "integer", "description": "the table number"}
    dish = {"type": "string", "description": "the dish name as on the menu"}
    self.tools = {
      "get_menu": _tool(
        "The menu (dish, category, price), optionally one category: starter, main, dessert, drink.",
        {"category": {"type": "string", "description": "a category (optional)"}},
      ),
      "add_item": _tool(
        "Add a dish to a table's open order.",
        {"table": table, "dish": dish, "quantity": {"type": "integer", "description": "1-10"}},
        ["table", "dish", "quantity"],
      ),
      "remove_item": _tool(
        "Remove a dish from a table's open order.",
        {"table": table, "dish": dish},
        ["table", "dish"],
      ),
      "view_order": _tool("A table's current order.", {"table": table}, ["table"]),
      "submit_order": _tool(
        "Send a table's order to the kitchen (it cannot be changed afterwards).",
        {"table": table},
        ["table"],
      ),
      "get_bill": _tool("A table's bill so far.", {"table": table}, ["table"]),
      "list_tables": _tool("All tables and whether they have an order.", {}),
    }
    return task, {}

  def goal_reached(self):
    order = self.tables[self.table]
    return order["submitted"] and order["items"] == self.expected

  def _table(self, table):
    try:
      key = int(table)
    except (TypeError, ValueError):
      return None, f"Error: table must be a number, got {table!r}"
    if key not in self.tables:
      return None, f"Error: there is no table {table} (tables 1-{len(self.tables)})"
    return key, None

  def _open(self, table):
    key, error = self._table(table)
    if error:
      return None, error
    if self.tables[key]["submitted"]:
      return None, f"Error: the order of table {key} was already sent to the kitchen"
    return key, None

  def _dish(self, dish):
    name = " ".join(str(dish).split()).lower()
    if name in self.menu:
      return name, None
    return None, f"Error: '{dish}' is not on the menu. Use get_menu to see the dishes."

  def tool_get_menu(self, category=None):
    rows = [
      {"dish": d, "category": v["category"], "price": f"{v['price'] / 100:.2f}"}
      for d, v in sorted(self.menu.items(), key=lambda kv: (kv[1]["category"], kv[1]["price"]))
    ]
    if category:
      wanted = str(category).strip().lower().rstrip("s")
      rows = [r for r in rows if r["category"] == wanted]
      if not rows:
        return f"Error: unknown category '{category}' (starter, main, dessert, drink)"
    return json.dumps(rows)

  def tool_add_item(self, table, dish, quantity=1):
    key, error = self._open(table)
    if error:
      return error
    name, error = self._dish(dish)
    if error:
      return error
    try:
      qty = int(quantity)
    except (TypeError, ValueError):
      return "Error: quantity must be an integer"
    if not 1 <= qty <= 10:
      return "Error: quantity must be between 1 and 10"
    if self.menu[name]["sold_out"]:
      return f"Error: {name} is sold out today"
    items = self.tables[key]["items"]
    items[name] = items.get(name, 0) + qty
    return f"Added {qty} x {name} to table {key} (now {items[name]})."

  def tool_remove_item(self, table, dish):
    key, error = self._open(table)
    if error:
      return error
    name, error = self._dish(dish)
    if error:
      return error
    if name not in self.tables[key]["items"]:
      return f"Error: table {key} has no {name} on its order"
    del self.tables[key]["items"][name]
    return f"Removed {name} from table {key}."

  def tool_view_order(self, table):
    key, error = self._table(table)
    if error:
      return error
    order = self.tables[key]
    items = [{"dish": d, "quantity": q} for d, q in sorted(order["items"].items())]
    return json.dumps({"table": key, "items": items, "sent_to_kitchen": order["submitted"]})

  def tool_submit_order(self, table):
    key, error = self._open(table)
    if error:
      return error
    if not self.tables[key]["items"]:
      return f"Error: the order of table {key} is empty"
    self.tables[key]["submitted"] = True
    return f"Order of table {key} sent to the kitchen."

  def tool_get_bill(self, table):
    key, error = self._table(table)
    if error:
      return error
    total = sum(self.menu[d]["price"] * q for d, q in self.tables[key]["items"].items())
    return json.dumps({"table": key, "total": f"{total / 100:.2f}"})

  def tool_list_tables(self):
    rows = [
      {"table": t, "items": sum(v["items"].values()), "sent_to_kitchen": v["submitted"]}
      for t, v in sorted(self.tables.items())
    ]
    return json.dumps(rows)

  def solution(self):
    gone, qty = self.requested[self.missing]
    first = "".join(
      _call("add_item", table=self.table, dish=d, quantity=q) for d, q in self.requested
    )
    return [
      first,  # the sold-out dish fails here
      _call("get_menu", category=self.menu[gone]["category"])
      + _call("add_item", table=self.table, dish=self.replacement, quantity=qty),
      _call("view_order", table=self.table) + _call("submit_order", table=self.table),
      "<answer>The order is in and sent to the kitchen.</answer>",
    ]
