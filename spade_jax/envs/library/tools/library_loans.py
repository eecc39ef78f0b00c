"""Library loans: return a member's overdue books, then lend them the title they asked for.

Tool-use skill: State Modification (medium), state-graded. Checking a book out fails while the
member has overdue loans, and a copy that is on loan cannot be lent, so the agent must look up
the member and their loans, return exactly the overdue copies (not the others) and check out an
available copy. `renew_loan` and `place_hold` are not needed.
"""

import json
import random

from tool_env import ToolEnv

ADJECTIVES = [
  "Silent",
  "Crimson",
  "Hidden",
  "Last",
  "Golden",
  "Broken",
  "Distant",
  "Winter",
  "Secret",
  "Burning",
  "Paper",
  "Northern",
]
NOUNS = [
  "River",
  "Garden",
  "Lighthouse",
  "Kingdom",
  "Orchard",
  "Archive",
  "Harbor",
  "Mountain",
  "Letter",
  "Compass",
  "Forest",
  "Station",
]
AUTHORS = ["A. Rivera", "J. Okoro", "M. Laurent", "S. Kim", "T. Haldane", "R. Gupta", "E. Varga"]
FIRST = [
  "Ada",
  "Bruno",
  "Cleo",
  "Dev",
  "Elif",
  "Femi",
  "Gita",
  "Hugo",
  "Iris",
  "Jonas",
  "Kira",
  "Liam",
]
LAST = ["Hart", "Silva", "Moreau", "Tanaka", "Berg", "Osei", "Novak", "Reyes", "Quinn", "Walsh"]


def _call(tool, /, **arguments):
  return "<tool_call>" + json.dumps({"name": tool, "arguments": arguments}) + "</tool_call>"


def _tool(description, properties=None, required=()):
  params = {"type": "object", "properties": properties or {}, "required": list(required)}
  return {"description": description, "parameters": params}


def _date(day):
  return f"2025-04-{day:02d}"


class LibraryLoansEnv(ToolEnv):
  def reset(self, seed=None):
    rng = random.Random(seed)
    self.today = rng.randint(12, 20)
    pairs = [(a, n) for a in ADJECTIVES for n in NOUNS]
    self.books = {}  # title -> author
    self.copies = {}  # copy id -> {"title", "member", "due"}
    copy_no = rng.randint(100, 700)
    for adj, noun in rng.sample(pairs, rng.randint(20, 35)):
      title = f"The {adj} {noun}"
      self.books[title] = rng.choice(AUTHORS)
      for _ in range(rng.randint(1, 3)):
        self.copies[f"C-{copy_no}"] = {"title": title, "member": None, "due": None}
        copy_no += rng.randint(1, 4)
    names = rng.sample([f"{f} {s}" for f in FIRST for s in LAST], rng.randint(10, 20))
    numbers = rng.sample(range(1000, 10000), len(names))
    self.members = {f"M-{i}": n for i, n in zip(numbers, names)}
    self.member = rng.choice(sorted(self.members))
    copy_ids = sorted(self.copies)
    rng.shuffle(copy_ids)
    self.overdue = sorted(copy_ids[: rng.randint(1, 2)])
    self.kept = sorted(copy_ids[len(self.overdue) : len(self.overdue) + rng.randint(0, 2)])
    for c in self.overdue:
      self._lend(c, self.member, rng.randint(1, self.today - 1))
    for c in self.kept:
      self._lend(c, self.member, rng.randint(self.today, 30))
    others = [m for m in sorted(self.members) if m != self.member]
    for c in copy_ids[len(self.overdue) + len(self.kept) :]:
      if rng.random() < 0.35:
        self._lend(c, rng.choice(others), rng.randint(1, 30))
    mine = {self.copies[c]["title"] for c in self.overdue + self.kept}
    wanted = sorted(
      {v["title"] for v in self.copies.values() if v["member"] is None and v["title"] not in mine}
    )
    self.title = rng.choice(wanted)
    self.holds, self.renewals = [], []
    self.expected_answer = None
    name = self.members[self.member]
    task = (
      f"{name} is at the desk and wants to borrow '{self.title}'. They have brought back all "
      f"their overdue books. Return those overdue books (only those: {name} keeps any book that "
      f"is not overdue), then check out an available copy of '{self.title}' to {name}. "
      f"Today is {_date(self.today)}."
    )
    member = {"type": "string", "description": "a member id such as M-1234"}
    copy = {"type": "string", "description": "a copy id such as C-123"}
    self.tools = {
      "find_member": _tool(
        "Look up library members by (part of) their name.",
        {"name": {"type": "string", "description": "a name"}},
        ["name"],
      ),
      "list_loans": _tool(
        "The copies a member has on loan, with due dates.", {"member_id": member}, ["member_id"]
      ),
      "search_catalog": _tool(
        "Search books by title or author; lists each copy and whether it is available.",
        {"query": {"type": "string", "description": "text in the title or author"}},
        ["query"],
      ),
      "return_book": _tool("Check a returned copy back in.", {"copy_id": copy}, ["copy_id"]),
      "checkout_book": _tool(
        "Lend an available copy to a member (refused while they have overdue loans).",
        {"copy_id": copy, "member_id": member},
        ["copy_id", "member_id"],
      ),
      "renew_loan": _tool("Extend a loan by 14 days.", {"copy_id": copy}, ["copy_id"]),
      "place_hold": _tool(
        "Reserve a title for a member when no copy is available.",
        {"title": {"type": "string", "description": "the book title"}, "member_id": member},
        ["title", "member_id"],
      ),
    }
    return task, {}

  def _lend(self, copy_id, member, day):
    self.copies[copy_id]["member"], self.copies[copy_id]["due"] = member, day

  def _loans(self, member):
    return sorted(c for c, v in self.copies.items() if v["member"] == member)

  def _is_overdue(self, copy_id):
    return self.copies[copy_id]["due"] is not None and self.copies[copy_id]["due"] < self.today

  def goal_reached(self):
    loans = self._loans(self.member)
    return (
      not any(self._is_overdue(c) for c in loans)
      and all(c in loans for c in self.kept)
      and any(self.copies[c]["title"] == self.title for c in loans)
    )

  def _copy(self, copy_id):
    key = str(copy_id).strip().upper()
    if key in self.copies:
      return key, None
    return None, f"Error: no copy '{copy_id}'. Copy ids look like C-123 (see search_catalog)."

  def _member(self, member_id):
    key = str(member_id).strip().upper()
    if key in self.members:
      return key, None
    return None, f"Error: no member '{member_id}'. Use find_member to get the member id."

  def tool_find_member(self, name):
    text = " ".join(str(name).split()).lower()
    if not text:
      return "Error: give (part of) a name"
    rows = [
      {"member_id": k, "name": v} for k, v in sorted(self.members.items()) if text in v.lower()
    ]
    return json.dumps(rows) if rows else f"No member matches '{name}'."

  def tool_list_loans(self, member_id):
    key, error = self._member(member_id)
    if error:
      return error
    rows = []
    for c in self._loans(key):
      v = self.copies[c]
      rows.append(
        {"copy_id": c, "title": v["title"], "due": _date(v["due"]), "overdue": self._is_overdue(c)}
      )
    return json.dumps(rows) if rows else f"{key} has no books on loan."

  def tool_search_catalog(self, query):
    text = str(query).strip().lower()
    if not text:
      return "Error: the query must not be empty"
    rows = []
    for title in sorted(self.books):
      if text in title.lower() or text in self.books[title].lower():
        copies = [
          {"copy_id": c, "available": v["member"] is None}
          for c, v in sorted(self.copies.items())
          if v["title"] == title
        ]
        rows.append({"title": title, "author": self.books[title], "copies": copies})
    return json.dumps(rows[:10]) if rows else f"No books match '{query}'."

  def tool_return_book(self, copy_id):
    key, error = self._copy(copy_id)
    if error:
      return error
    if self.copies[key]["member"] is None:
      return f"Error: copy {key} is not on loan"
    self.copies[key]["member"] = self.copies[key]["due"] = None
    return f"Copy {key} ('{self.copies[key]['title']}') checked in."

  def tool_checkout_book(self, copy_id, member_id):
    key, error = self._copy(copy_id)
    member, error2 = self._member(member_id)
    if error or error2:
      return error or error2
    late = [c for c in self._loans(member) if self._is_overdue(c)]
    if late:
      return f"Error: {member} has overdue loans ({', '.join(late)}); they must be returned first"
    if self.copies[key]["member"] is not None:
      return f"Error: copy {key} is on loan; pick an available copy"
    self._lend(key, member, min(self.today + 21, 30))
    return f"Copy {key} ('{self.copies[key]['title']}') lent to {member}, due {_date(self.copies[key]['due'])}."

  def tool_renew_loan(self, copy_id):
    key, error = self._copy(copy_id)
    if error:
      return error
    if self.copies[key]["member"] is None:
      return f"Error: copy {key} is not on loan"
    if self._is_overdue(key):
      return f"Error: copy {key} is overdue and cannot be renewed"
    self.copies[key]["due"] = min(self.copies[key]["due"] + 14, 30)
    self.renewals.append(key)
    return f"Copy {key} renewed until {_date(self.copies[key]['due'])}."

  def tool_place_hold(self, title, member_id):
    member, error = self._member(member_id)
    if error:
      return error
    matches = [t for t in self.books if t.lower() == str(title).strip().lower()]
    if not matches:
      return f"Error: no book titled '{title}'"
    self.holds.append((matches[0], member))
    return f"Hold placed on '{matches[0]}' for {member}."

  def solution(self):
    available = [c for c in self._loans(None) if self.copies[c]["title"] == self.title]
    return [
      _call("find_member", name=self.members[self.member])
      + _call("list_loans", member_id=self.member),
      "".join(_call("return_book", copy_id=c) for c in self.overdue)
      + _call("search_catalog", query=self.title),
      _call("checkout_book", copy_id=available[0], member_id=self.member),
      "<answer>Done: overdue books returned and the book checked out.</answer>",
    ]
