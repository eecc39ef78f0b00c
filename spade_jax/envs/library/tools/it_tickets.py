"""IT helpdesk: resolve the most urgent ticket of a queue and close it.

Tool-use skill: Error Recovery (hard), state-graded. The agent finds the highest-priority open
ticket of a queue, reads what the user needs (an unlock, a password reset or a group), applies
the fix and closes the ticket. The backend refuses in realistic ways: changes to a locked
account fail until it is unlocked (the ticket may not say it is locked), and a ticket must be
assigned before it can be closed. Only the right ticket may be closed.
"""

import json
import random

from tool_env import ToolEnv

FIRST = [
  "amy",
  "bob",
  "carla",
  "dmitri",
  "eva",
  "felix",
  "grace",
  "hiro",
  "ines",
  "jamal",
  "kate",
  "leo",
]
LAST = ["archer", "brandt", "costa", "dunn", "ellis", "ferraro", "gomez", "holm", "ito", "jensen"]
GROUPS = [
  "vpn-users",
  "finance-share",
  "design-tools",
  "hr-portal",
  "github-org",
  "analytics",
  "printers",
]
QUEUES = ["access", "accounts", "workstations"]
NOISE = [
  "My second monitor flickers.",
  "The printer on floor 3 is jammed.",
  "Outlook keeps asking for my password.",
  "Laptop battery drains fast.",
  "Can I get a new keyboard?",
  "Wi-Fi drops in meeting room B.",
]


def _call(tool, /, **arguments):
  return "<tool_call>" + json.dumps({"name": tool, "arguments": arguments}) + "</tool_call>"


def _tool(description, properties=None, required=()):
  params = {"type": "object", "properties": properties or {}, "required": list(required)}
  return {"description": description, "parameters": params}


class HelpdeskEnv(ToolEnv):
  def reset(self, seed=None):
    rng = random.Random(seed)
    names = rng.sample([f + "." + s for f in FIRST for s in LAST], rng.randint(10, 25))
    self.users = {}
    for name in names:
      self.users[name] = {
        "locked": rng.random() < 0.15,
        "groups": sorted(rng.sample(GROUPS, rng.randint(0, 3))),
        "password_reset": False,
      }
    self.tickets = {}
    numbers = rng.sample(range(1000, 9999), rng.randint(8, 15))
    for n in numbers:
      self.tickets[f"T-{n}"] = {
        "queue": rng.choice(QUEUES),
        "priority": rng.randint(2, 4),
        "status": rng.choice(["open", "open", "closed"]),
        "user": rng.choice(names),
        "description": rng.choice(NOISE),
        "assigned": False,
        "resolution": None,
      }
    self.queue = rng.choice(QUEUES)
    for key in sorted(self.tickets):  # an urgent ticket elsewhere, or an already closed one
      t = self.tickets[key]
      if rng.random() < 0.3 and (t["queue"] != self.queue or t["status"] == "closed"):
        t["priority"] = 1
    number = rng.randint(1000, 9998)
    while number in numbers:
      number = rng.randint(1000, 9998)
    self.ticket = f"T-{number}"
    self.user = rng.choice(names)
    self.issue = rng.choice(["locked", "password", "access"])
    account = self.users[self.user]
    if self.issue == "locked":
      account["locked"] = True
      text = f"I mistyped my password too often and my account {self.user} is locked. Please help!"
    elif self.issue == "password":
      account["locked"] = rng.random() < 0.5
      text = f"I forgot my password. Could you reset it for my account {self.user}?"
    else:
      self.group = rng.choice([g for g in GROUPS if g not in account["groups"]])
      account["locked"] = rng.random() < 0.3
      text = (
        f"Please add my account {self.user} to the {self.group} group, I need it for a project."
      )
    self.was_locked = account["locked"]
    self.tickets[self.ticket] = {
      "queue": self.queue,
      "priority": 1,
      "status": "open",
      "user": self.user,
      "description": text,
      "assigned": False,
      "resolution": None,
    }
    self.initially_open = sorted(k for k, t in self.tickets.items() if t["status"] != "closed")
    self.expected_answer = None
    waiting = sum(1 for k in self.initially_open if self.tickets[k]["queue"] == self.queue)
    task = (
      f"The '{self.queue}' queue has {waiting} open tickets. Please handle the highest-priority "
      "one (priority 1 is the most urgent): fix what the user asks for, then close the ticket "
      "with a short resolution note."
    )
    ticket = {"type": "string", "description": "a ticket id such as T-1234"}
    user = {"type": "string", "description": "a username such as amy.archer"}
    self.tools = {
      "list_tickets": _tool(
        "List tickets (id, priority, status, summary), optionally of one queue and/or status.",
        {
          "queue": {"type": "string", "description": "access, accounts or workstations"},
          "status": {"type": "string", "description": "open, in_progress or closed"},
        },
      ),
      "get_ticket": _tool("A ticket's full details.", {"ticket_id": ticket}, ["ticket_id"]),
      "get_user": _tool(
        "A user account's state (locked, groups).", {"username": user}, ["username"]
      ),
      "unlock_account": _tool("Unlock a locked user account.", {"username": user}, ["username"]),
      "reset_password": _tool(
        "Reset a user's password (mails them a reset link).", {"username": user}, ["username"]
      ),
      "add_to_group": _tool(
        "Add a user to an access group.",
        {"username": user, "group": {"type": "string", "description": "a group name"}},
        ["username", "group"],
      ),
      "assign_ticket": _tool(
        "Assign a ticket to yourself (status becomes in_progress).",
        {"ticket_id": ticket},
        ["ticket_id"],
      ),
      "close_ticket": _tool(
        "Close a ticket assigned to you, with a resolution note.",
        {"ticket_id": ticket, "resolution": {"type": "string", "description": "what was done"}},
        ["ticket_id", "resolution"],
      ),
    }
    return task, {}

  def _fixed(self):
    account = self.users[self.user]
    if self.issue == "locked":
      return not account["locked"]
    if self.issue == "password":
      return account["password_reset"]
    return self.group in account["groups"]

  def goal_reached(self):
    closed = [k for k in self.initially_open if self.tickets[k]["status"] == "closed"]
    return closed == [self.ticket] and self._fixed()

  def _ticket(self, ticket_id):
    key = str(ticket_id).strip().upper()
    if key in self.tickets:
      return key, None
    return None, f"Error: no ticket '{ticket_id}'. Use list_tickets to see the ticket ids."

  def _user(self, username, change=True):
    key = str(username).strip().lower()
    if key not in self.users:
      return None, f"Error: no user '{username}'"
    if change and self.users[key]["locked"]:
      return None, f"Error: account {key} is locked; unlock it before changing it"
    return key, None

  def tool_list_tickets(self, queue=None, status=None):
    rows = []
    for key in sorted(self.tickets):
      t = self.tickets[key]
      if queue and t["queue"] != str(queue).strip().lower():
        continue
      if status and t["status"] != str(status).strip().lower():
        continue
      summary = t["description"][:40] + ("..." if len(t["description"]) > 40 else "")
      rows.append(
        {
          "ticket_id": key,
          "queue": t["queue"],
          "priority": t["priority"],
          "status": t["status"],
          "summary": summary,
        }
      )
    return json.dumps(rows) if rows else "No tickets match."

  def tool_get_ticket(self, ticket_id):
    key, error = self._ticket(ticket_id)
    return error or json.dumps({"ticket_id": key, **self.tickets[key]})

  def tool_get_user(self, username):
    key, error = self._user(username, change=False)
    if error:
      return error
    u = self.users[key]
    return json.dumps({"username": key, "locked": u["locked"], "groups": u["groups"]})

  def tool_unlock_account(self, username):
    key, error = self._user(username, change=False)
    if error:
      return error
    if not self.users[key]["locked"]:
      return f"Account {key} is not locked."
    self.users[key]["locked"] = False
    return f"Account {key} unlocked."

  def tool_reset_password(self, username):
    key, error = self._user(username)
    if error:
      return error
    self.users[key]["password_reset"] = True
    return f"Password reset link sent to {key}."

  def tool_add_to_group(self, username, group):
    key, error = self._user(username)
    if error:
      return error
    name = str(group).strip().lower()
    if name not in GROUPS:
      return f"Error: no group '{group}' (groups: {', '.join(GROUPS)})"
    if name in self.users[key]["groups"]:
      return f"{key} is already in {name}."
    self.users[key]["groups"] = sorted(self.users[key]["groups"] + [name])
    return f"Added {key} to {name}."

  def tool_assign_ticket(self, ticket_id):
    key, error = self._ticket(ticket_id)
    if error:
      return error
    if self.tickets[key]["status"] == "closed":
      return f"Error: ticket {key} is closed"
    self.tickets[key]["assigned"], self.tickets[key]["status"] = True, "in_progress"
    return f"Ticket {key} assigned to you (in_progress)."

  def tool_close_ticket(self, ticket_id, resolution):
    key, error = self._ticket(ticket_id)
    if error:
      return error
    t = self.tickets[key]
    if t["status"] == "closed":
      return f"Error: ticket {key} is already closed"
    if not t["assigned"]:
      return f"Error: ticket {key} must be assigned (assign_ticket) before it can be closed"
    if not str(resolution).strip():
      return "Error: a resolution note is required"
    t["status"], t["resolution"] = "closed", str(resolution).strip()
    return f"Ticket {key} closed."

  def solution(self):
    fix = _call("unlock_account", username=self.user) if self.was_locked else ""
    if self.issue == "password":
      fix += _call("reset_password", username=self.user)
    elif self.issue == "access":
      fix += _call("add_to_group", username=self.user, group=self.group)
    note = {"locked": "Unlocked the account.", "password": "Password reset link sent."}
    return [
      _call("list_tickets", queue=self.queue, status="open")
      + _call("get_ticket", ticket_id=self.ticket),
      _call("get_user", username=self.user) + _call("assign_ticket", ticket_id=self.ticket),
      fix,
      _call(
        "close_ticket",
        ticket_id=self.ticket,
        resolution=note.get(self.issue, "Added to the group."),
      ),
      "<answer>The ticket is resolved and closed.</answer>",
    ]
