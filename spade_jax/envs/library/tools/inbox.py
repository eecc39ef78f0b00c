"""Messaging inbox: a fact looked up in a mailbox of a few dozen messages.

Tool-use skill: Data Retrieval (medium), answer-graded. Depending on the seed the agent counts
one sender's unread inbox messages, finds the room named in a sender's message about a topic,
or adds up the amounts of a sender's invoices (reading each message). `send_message` and
`delete_message` are not needed; reading a message does not change its unread flag.
"""

import json
import random

from tool_env import ToolEnv

SENDERS = [
  "Maya Patel",
  "Tom Fischer",
  "Lucia Romero",
  "Ken Watanabe",
  "Sara Ahmed",
  "Olu Adeyemi",
  "Nina Kowalski",
  "Raj Iyer",
  "Greta Lind",
  "Paul Dubois",
]
TOPICS = [
  "budget review",
  "offsite",
  "product launch",
  "training session",
  "quarterly planning",
  "client visit",
  "design workshop",
  "team lunch",
]
CHATTER = [
  "Quick question",
  "Following up",
  "Notes from today",
  "Re: schedule",
  "FYI",
  "Weekly update",
  "Thanks!",
  "Draft attached",
]


def _call(tool, /, **arguments):
  return "<tool_call>" + json.dumps({"name": tool, "arguments": arguments}) + "</tool_call>"


def _tool(description, properties=None, required=()):
  params = {"type": "object", "properties": properties or {}, "required": list(required)}
  return {"description": description, "parameters": params}


class InboxEnv(ToolEnv):
  def reset(self, seed=None):
    rng = random.Random(seed)
    self.messages = {}
    self.sent, self.deleted = [], []
    self.next_id = rng.randint(1000, 5000)
    for _ in range(rng.randint(20, 40)):
      sender = rng.choice(SENDERS)
      if rng.random() < 0.5:
        topic = rng.choice(TOPICS)
        room = f"{rng.choice('ABCD')}-{rng.randint(100, 450)}"
        subject, body = (
          f"About the {topic}",
          f"The {topic} will be held in room {room}. See you there.",
        )
      else:
        subject = rng.choice(CHATTER)
        body = f"Hi, {rng.choice(['see below', 'just checking in', 'any news?', 'all good here'])}."
      self._add(rng, sender, subject, body)
    self.sender = rng.choice(SENDERS)
    self.kind = rng.choice(["unread", "room", "invoices"])
    if self.kind == "unread":
      self._add(rng, self.sender, rng.choice(CHATTER), "Hi, just checking in.", "inbox", True)
      self.expected_answer = str(
        sum(
          1
          for m in self.messages.values()
          if m["sender"] == self.sender and m["folder"] == "inbox" and m["unread"]
        )
      )
      task = f"How many unread messages from {self.sender} are in my inbox?"
    elif self.kind == "room":
      self.topic = rng.choice(TOPICS)
      for key in sorted(self.messages):  # only one message of that sender mentions the topic
        m = self.messages[key]
        if m["sender"] == self.sender and self.topic in m["body"]:
          del self.messages[key]
      self.room = f"{rng.choice('ABCD')}-{rng.randint(100, 450)}"
      body = f"The {self.topic} will be held in room {self.room}. See you there."
      self.target = self._add(rng, self.sender, f"About the {self.topic}", body)
      self.expected_answer = self.room
      task = f"{self.sender} emailed me about the {self.topic}. Which room is it in?"
    else:
      self.invoices = []
      total = 0
      for _ in range(rng.randint(2, 4)):
        cents = rng.randint(5000, 250000)
        number = rng.randint(10000, 99999)
        body = (
          f"Please find invoice #{number} for ${cents // 100}.{cents % 100:02d}, due in 30 days."
        )
        self.invoices.append(self._add(rng, self.sender, f"Invoice #{number}", body))
        total += cents
      other = rng.choice([s for s in SENDERS if s != self.sender])
      self._add(rng, other, "Invoice #00001", "Please find invoice #00001 for $99.00.")
      self.expected_answer = f"{total // 100}.{total % 100:02d}"
      task = f"What is the total amount, in dollars, of all the invoices {self.sender} sent me?"
    self.tools = {
      "list_messages": _tool(
        "List the messages of a folder (id, sender, subject, date, unread), newest first.",
        {
          "folder": {"type": "string", "description": "'inbox' (default) or 'archive'"},
          "unread_only": {"type": "boolean", "description": "only unread messages"},
        },
      ),
      "search_messages": _tool(
        "Search all folders for messages whose subject or body contains the query text.",
        {
          "query": {"type": "string", "description": "text to look for (case-insensitive)"},
          "sender": {"type": "string", "description": "only messages from this sender (optional)"},
        },
        ["query"],
      ),
      "read_message": _tool(
        "The full text of one message (its unread flag is left as it is).",
        {"message_id": {"type": "string", "description": "a message id such as M1234"}},
        ["message_id"],
      ),
      "send_message": _tool(
        "Send a new message.",
        {
          "to": {"type": "string", "description": "the recipient's name"},
          "subject": {"type": "string", "description": "the subject line"},
          "body": {"type": "string", "description": "the text"},
        },
        ["to", "subject", "body"],
      ),
      "delete_message": _tool(
        "Move a message to the trash.",
        {"message_id": {"type": "string", "description": "a message id"}},
        ["message_id"],
      ),
    }
    return task, {}

  def _add(self, rng, sender, subject, body, folder=None, unread=None):
    key = f"M{self.next_id}"
    self.next_id += rng.randint(1, 9)
    self.messages[key] = {
      "sender": sender,
      "subject": subject,
      "body": body,
      "date": f"2025-03-{rng.randint(1, 31):02d}",
      "folder": folder or ("inbox" if rng.random() < 0.7 else "archive"),
      "unread": rng.random() < 0.4 if unread is None else unread,
    }
    return key

  def _row(self, key):
    m = self.messages[key]
    return {
      "message_id": key,
      "sender": m["sender"],
      "subject": m["subject"],
      "date": m["date"],
      "folder": m["folder"],
      "unread": m["unread"],
    }

  def _newest_first(self, keys):
    return sorted(keys, key=lambda k: (self.messages[k]["date"], int(k[1:])), reverse=True)

  def tool_list_messages(self, folder="inbox", unread_only=False):
    name = str(folder or "inbox").strip().lower()
    if name not in ("inbox", "archive"):
      return f"Error: unknown folder '{folder}' (folders: inbox, archive)"
    only = unread_only is True or str(unread_only).strip().lower() == "true"
    keys = [
      k for k, m in self.messages.items() if m["folder"] == name and (m["unread"] or not only)
    ]
    return json.dumps([self._row(k) for k in self._newest_first(keys)]) if keys else "No messages."

  def tool_search_messages(self, query, sender=None):
    text = str(query).strip().lower()
    if not text:
      return "Error: the query must not be empty"
    who = " ".join(str(sender).split()).lower() if sender else None
    keys = [
      k
      for k, m in self.messages.items()
      if (text in m["subject"].lower() or text in m["body"].lower())
      and (who is None or m["sender"].lower() == who)
    ]
    return json.dumps([self._row(k) for k in self._newest_first(keys)]) if keys else "No matches."

  def tool_read_message(self, message_id):
    key = str(message_id).strip().upper()
    if key not in self.messages:
      return f"Error: no message '{message_id}'"
    return json.dumps({**self._row(key), "body": self.messages[key]["body"]})

  def tool_send_message(self, to, subject, body):
    if not str(to).strip() or not str(body).strip():
      return "Error: a recipient and a body are required"
    self.sent.append((str(to).strip(), str(subject), str(body)))
    return f"Message sent to {str(to).strip()}."

  def tool_delete_message(self, message_id):
    key = str(message_id).strip().upper()
    if key not in self.messages:
      return f"Error: no message '{message_id}'"
    self.deleted.append(key)
    self.messages[key]["folder"] = "trash"
    return f"Moved {key} to the trash."

  def solution(self):
    if self.kind == "unread":
      turns = [_call("list_messages", folder="inbox", unread_only=True)]
    elif self.kind == "room":
      turns = [
        _call("search_messages", query=self.topic, sender=self.sender),
        _call("read_message", message_id=self.target),
      ]
    else:
      turns = [
        _call("search_messages", query="invoice", sender=self.sender),
        "".join(_call("read_message", message_id=k) for k in self.invoices),
      ]
    return turns + [f"<answer>{self.expected_answer}</answer>"]
