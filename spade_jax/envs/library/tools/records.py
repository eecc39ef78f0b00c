"""Spreadsheet records: a question about an employee table, answered by chaining query tools.

Tool-use skill: API Orchestration (hard), answer-graded. The table tools share a view: each
`filter_rows` narrows it, `aggregate` and `sort_rows` work on it, `clear_filters` resets it. A
question needs two or three filters followed by an aggregate or a sort (an average salary, the
top earner's name, or a count). `get_row` and `update_cell` are not needed.
"""

import json
import random

from tool_env import ToolEnv

FIRST = [
  "Aiko",
  "Bilal",
  "Carmen",
  "Dmitri",
  "Esther",
  "Femi",
  "Goran",
  "Hilde",
  "Ismael",
  "Jun",
  "Kamala",
  "Luca",
  "Mira",
  "Nils",
]
LAST = ["Abe", "Brook", "Castro", "Duval", "Eze", "Frost", "Grimm", "Huang", "Ivanova", "Joshi"]
DEPARTMENTS = ["Sales", "Engineering", "Marketing", "Finance", "Support", "HR"]
CITIES = ["Berlin", "Austin", "Lagos", "Pune", "Toronto"]
COLUMNS = {
  "row_id": "text",
  "name": "text",
  "department": "text",
  "city": "text",
  "salary": "number",
  "hire_year": "number",
}
OPS = ["==", "!=", ">", ">=", "<", "<="]


def _call(tool, /, **arguments):
  return "<tool_call>" + json.dumps({"name": tool, "arguments": arguments}) + "</tool_call>"


def _tool(description, properties=None, required=()):
  params = {"type": "object", "properties": properties or {}, "required": list(required)}
  return {"description": description, "parameters": params}


def _compare(cell, op, value):
  if op == "==":
    return cell == value
  if op == "!=":
    return cell != value
  if op == ">":
    return cell > value
  if op == ">=":
    return cell >= value
  if op == "<":
    return cell < value
  return cell <= value


class RecordsQueryEnv(ToolEnv):
  def reset(self, seed=None):
    rng = random.Random(seed)
    names = rng.sample([f"{f} {s}" for f in FIRST for s in LAST], rng.randint(25, 45))
    salaries = rng.sample(range(40000, 150001, 500), len(names))
    self.rows = []
    for i, (name, salary) in enumerate(zip(names, salaries)):
      self.rows.append(
        {
          "row_id": f"R{i + 1}",
          "name": name,
          "department": rng.choice(DEPARTMENTS),
          "city": rng.choice(CITIES),
          "salary": salary,
          "hire_year": rng.randint(2012, 2024),
        }
      )
    self.view = list(range(len(self.rows)))
    self.edits = []
    for _ in range(200):  # draw questions until one has enough matching rows
      self.kind = rng.choice(["average", "top", "count"])
      dept, city = rng.choice(DEPARTMENTS), rng.choice(CITIES)
      year, limit = rng.randint(2014, 2021), rng.randrange(60000, 120001, 5000)
      if self.kind == "average":
        self.filters = [("department", "==", dept), ("hire_year", ">", year)]
        task = f"What is the average salary of {dept} employees hired after {year}?"
      elif self.kind == "top":
        self.filters = [("city", "==", city), ("department", "==", dept)]
        task = f"Who is the highest-paid employee in the {dept} department of the {city} office?"
      else:
        self.filters = [("city", "==", city), ("hire_year", "<=", year), ("salary", ">", limit)]
        task = (
          f"How many employees in {city} were hired in {year} or earlier and earn more than "
          f"${limit:,}?"
        )
      matched = [r for r in self.rows if all(_compare(r[c], o, v) for c, o, v in self.filters)]
      if len(matched) >= 2:
        break
    if self.kind == "average":
      self.expected_answer = f"{sum(r['salary'] for r in matched) / len(matched):.2f}"
      task += " Round to 2 decimals."
    elif self.kind == "top":
      self.expected_answer = max(matched, key=lambda r: r["salary"])["name"]
      task += " Answer with the full name."
    else:
      self.expected_answer = str(len(matched))
    column = {"type": "string", "description": "a column name"}
    self.tools = {
      "list_columns": _tool("The table's columns and their types.", {}),
      "filter_rows": _tool(
        "Keep only the rows of the current view where `column op value` holds (text columns "
        "support == and != only). Filters accumulate until clear_filters.",
        {
          "column": column,
          "op": {"type": "string", "description": "one of == != > >= < <="},
          "value": {"type": "string", "description": "the value to compare with"},
        },
        ["column", "op", "value"],
      ),
      "clear_filters": _tool("Reset the view to the whole table.", {}),
      "aggregate": _tool(
        "sum, avg, min, max or count of a column over the current view.",
        {
          "column": column,
          "function": {"type": "string", "description": "sum, avg, min, max, count"},
        },
        ["column", "function"],
      ),
      "sort_rows": _tool(
        "The current view's rows sorted by a column.",
        {
          "column": column,
          "descending": {"type": "boolean", "description": "largest first (default true)"},
          "limit": {"type": "integer", "description": "how many rows (default 5)"},
        },
        ["column"],
      ),
      "get_row": _tool(
        "One row by id.",
        {"row_id": {"type": "string", "description": "a row id such as R7"}},
        ["row_id"],
      ),
      "update_cell": _tool(
        "Change one cell of the table.",
        {
          "row_id": {"type": "string", "description": "a row id"},
          "column": column,
          "value": {"type": "string", "description": "the new value"},
        },
        ["row_id", "column", "value"],
      ),
    }
    return task, {}

  def _column(self, column):
    key = str(column).strip().lower()
    return (
      (key, None)
      if key in COLUMNS
      else (None, f"Error: no column '{column}' (columns: {', '.join(COLUMNS)})")
    )

  def _value(self, column, value):
    if COLUMNS[column] == "number":
      try:
        return float(str(value).replace(",", "").replace("$", "")), None
      except ValueError:
        return None, f"Error: column {column} holds numbers; '{value}' is not a number"
    return str(value).strip().lower(), None

  def _cell(self, row, column):
    cell = row[column]
    return cell.lower() if isinstance(cell, str) else cell

  def tool_list_columns(self):
    return json.dumps({"rows": len(self.rows), "columns": COLUMNS})

  def tool_filter_rows(self, column, op, value):
    key, error = self._column(column)
    if error:
      return error
    operator = str(op).strip()
    operator = "==" if operator == "=" else operator
    if operator not in OPS:
      return f"Error: unknown operator '{op}' (use one of {' '.join(OPS)})"
    if COLUMNS[key] == "text" and operator not in ("==", "!="):
      return f"Error: text column {key} supports only == and !="
    wanted, error = self._value(key, value)
    if error:
      return error
    self.view = [i for i in self.view if _compare(self._cell(self.rows[i], key), operator, wanted)]
    preview = [self.rows[i] for i in self.view[:5]]
    return json.dumps({"rows_in_view": len(self.view), "first_rows": preview})

  def tool_clear_filters(self):
    self.view = list(range(len(self.rows)))
    return f"Filters cleared; {len(self.view)} rows in view."

  def tool_aggregate(self, column, function):
    key, error = self._column(column)
    if error:
      return error
    fn = str(function).strip().lower()
    if fn not in ("sum", "avg", "min", "max", "count"):
      return f"Error: unknown function '{function}' (sum, avg, min, max, count)"
    if fn == "count":
      return json.dumps({"count": len(self.view)})
    if COLUMNS[key] != "number":
      return f"Error: {fn} needs a numeric column; {key} holds text"
    values = [self.rows[i][key] for i in self.view]
    if not values:
      return "Error: the view is empty (clear_filters to start over)"
    result = {"sum": sum(values), "min": min(values), "max": max(values)}.get(fn)
    if fn == "avg":
      result = round(sum(values) / len(values), 2)
    return json.dumps({fn: result, "rows": len(values)})

  def tool_sort_rows(self, column, descending=True, limit=5):
    key, error = self._column(column)
    if error:
      return error
    try:
      count = max(1, min(20, int(limit)))
    except (TypeError, ValueError):
      return "Error: limit must be an integer"
    down = descending is True or str(descending).strip().lower() in ("true", "1", "yes")
    order = sorted(self.view, key=lambda i: (self._cell(self.rows[i], key), i), reverse=down)
    return json.dumps([self.rows[i] for i in order[:count]])

  def tool_get_row(self, row_id):
    key = str(row_id).strip().upper()
    for row in self.rows:
      if row["row_id"] == key:
        return json.dumps(row)
    return f"Error: no row '{row_id}'"

  def tool_update_cell(self, row_id, column, value):
    key, error = self._column(column)
    if error:
      return error
    if key == "row_id":
      return "Error: row_id cannot be changed"
    rows = [r for r in self.rows if r["row_id"] == str(row_id).strip().upper()]
    if not rows:
      return f"Error: no row '{row_id}'"
    new, error = self._value(key, value)
    if error:
      return error
    rows[0][key] = str(value).strip() if COLUMNS[key] == "text" else new
    self.edits.append((rows[0]["row_id"], key))
    return f"Updated {rows[0]['row_id']}.{key}."

  def solution(self):
    calls = _call("clear_filters")
    for column, op, value in self.filters:
      calls += _call("filter_rows", column=column, op=op, value=str(value))
    if self.kind == "average":
      calls += _call("aggregate", column="salary", function="avg")
    elif self.kind == "top":
      calls += _call("sort_rows", column="salary", descending=True, limit=1)
    else:
      calls += _call("aggregate", column="row_id", function="count")
    return [_call("list_columns"), calls, f"<answer>{self.expected_answer}</answer>"]
