"""Warehouse inventory: a stock question answered from per-warehouse counts.

Tool-use skill: Data Retrieval (easy), answer-graded. The agent looks up two items with
`get_stock` and combines their counts for one warehouse (a sum or a difference); `list_items`,
`get_price` and `reorder` are not needed.
"""

import json
import random

from tool_env import ToolEnv

CATALOG = {
  "bolts": "fasteners",
  "nuts": "fasteners",
  "washers": "fasteners",
  "wood screws": "fasteners",
  "rivets": "fasteners",
  "anchors": "fasteners",
  "hinges": "hardware",
  "brackets": "hardware",
  "door handles": "hardware",
  "padlocks": "hardware",
  "latches": "hardware",
  "pulleys": "hardware",
  "copper pipe": "plumbing",
  "pvc elbows": "plumbing",
  "valves": "plumbing",
  "faucets": "plumbing",
  "drain traps": "plumbing",
  "light bulbs": "electrical",
  "cable ties": "electrical",
  "fuses": "electrical",
  "switches": "electrical",
  "sockets": "electrical",
  "extension cords": "electrical",
  "sandpaper": "finishing",
  "paint brushes": "finishing",
  "wood stain": "finishing",
  "varnish": "finishing",
  "putty knives": "finishing",
  "tape measures": "tools",
  "hammers": "tools",
  "chisels": "tools",
  "spirit levels": "tools",
}
WAREHOUSES = ["north", "south", "east", "west", "central", "harbor"]


def _call(tool, /, **arguments):
  return "<tool_call>" + json.dumps({"name": tool, "arguments": arguments}) + "</tool_call>"


def _tool(description, properties=None, required=()):
  params = {"type": "object", "properties": properties or {}, "required": list(required)}
  return {"description": description, "parameters": params}


class WarehouseInventoryEnv(ToolEnv):
  def reset(self, seed=None):
    rng = random.Random(seed)
    self.warehouses = sorted(rng.sample(WAREHOUSES, 3))
    names = rng.sample(sorted(CATALOG), rng.randint(12, 24))
    self.items = {}
    for name in names:
      self.items[name] = {
        "category": CATALOG[name],
        "unit_price": round(rng.uniform(0.2, 40.0), 2),
        "stock": {w: rng.randint(0, 300) for w in self.warehouses},
      }
    self.reorders = []
    self.item_a, self.item_b = rng.sample(names, 2)
    self.warehouse = rng.choice(self.warehouses)
    a = self.items[self.item_a]["stock"][self.warehouse]
    b = self.items[self.item_b]["stock"][self.warehouse]
    self.mode = rng.choice(["sum", "difference"])
    if self.mode == "sum":
      self.expected_answer = str(a + b)
      task = (
        f"How many units of {self.item_a} and {self.item_b} combined are stored in the "
        f"{self.warehouse} warehouse?"
      )
    else:
      self.expected_answer = str(a - b)
      task = (
        f"In the {self.warehouse} warehouse, how many more units of {self.item_a} than of "
        f"{self.item_b} do we have? (Give a negative number if there are fewer.)"
      )
    item = {"type": "string", "description": "the item name, e.g. 'bolts'"}
    self.tools = {
      "list_items": _tool(
        "List the catalog's item names, optionally only those of one category.",
        {"category": {"type": "string", "description": "a category to filter by (optional)"}},
      ),
      "get_stock": _tool(
        "Units in stock of one item, per warehouse (or in one warehouse when given).",
        {
          "item": item,
          "warehouse": {"type": "string", "description": "a warehouse name (optional)"},
        },
        ["item"],
      ),
      "get_price": _tool("The unit price of an item in dollars.", {"item": item}, ["item"]),
      "reorder": _tool(
        "Place a reorder of an item for a warehouse.",
        {
          "item": item,
          "warehouse": {"type": "string", "description": "the receiving warehouse"},
          "quantity": {"type": "integer", "description": "units to order (1-1000)"},
        },
        ["item", "warehouse", "quantity"],
      ),
    }
    return task + " Answer with just the number.", {}

  def _item(self, name):
    key = str(name).strip().lower()
    return key if key in self.items else None

  def _warehouse(self, name):
    key = str(name).strip().lower()
    return key if key in self.warehouses else None

  def tool_list_items(self, category=None):
    names = sorted(self.items)
    if category:
      cat = str(category).strip().lower()
      names = [n for n in names if self.items[n]["category"] == cat]
      if not names:
        cats = sorted({self.items[n]["category"] for n in self.items})
        return f"Error: no items in category '{category}' (categories: {', '.join(cats)})"
    return json.dumps([{"item": n, "category": self.items[n]["category"]} for n in names])

  def tool_get_stock(self, item, warehouse=None):
    key = self._item(item)
    if key is None:
      return f"Error: no item named '{item}'. Use list_items to see the catalog."
    stock = self.items[key]["stock"]
    if warehouse is None or warehouse == "":
      return json.dumps({"item": key, "stock": stock})
    w = self._warehouse(warehouse)
    if w is None:
      return f"Error: unknown warehouse '{warehouse}' (warehouses: {', '.join(self.warehouses)})"
    return json.dumps({"item": key, "warehouse": w, "units": stock[w]})

  def tool_get_price(self, item):
    key = self._item(item)
    if key is None:
      return f"Error: no item named '{item}'. Use list_items to see the catalog."
    return json.dumps({"item": key, "unit_price": self.items[key]["unit_price"]})

  def tool_reorder(self, item, warehouse, quantity):
    key, w = self._item(item), self._warehouse(warehouse)
    if key is None:
      return f"Error: no item named '{item}'."
    if w is None:
      return f"Error: unknown warehouse '{warehouse}' (warehouses: {', '.join(self.warehouses)})"
    try:
      qty = int(quantity)
    except (TypeError, ValueError):
      return "Error: quantity must be an integer"
    if not 1 <= qty <= 1000:
      return "Error: quantity must be between 1 and 1000"
    self.reorders.append((key, w, qty))
    return f"Reorder placed: {qty} units of {key} for the {w} warehouse (arrives in 5 days)."

  def solution(self):
    return [
      _call("get_stock", item=self.item_a) + _call("get_stock", item=self.item_b),
      f"<answer>{self.expected_answer}</answer>",
    ]
