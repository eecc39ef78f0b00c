"""Meetings calendar: book, invite, cancel and move meetings in a work week, one request at a time.

Tool-use skill: Multi-Step Workflows (hard), multi-instruction and state-graded. The first
request books a meeting at the earliest free time of a day (the agent must read the calendar),
the next invites two colleagues to it by the new event's id, then a meeting is cancelled and
(on half the seeds) another moved. The final calendar must satisfy every request. `get_contact`
and `set_reminder` are not needed; creating or moving into a busy slot fails with the conflict.
"""

import json
import random

from tool_env import ToolEnv

DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday"]
OPEN, CLOSE = 9 * 60, 17 * 60
TITLES = [
  "Standup",
  "Design Review",
  "1:1 with Manager",
  "Budget Sync",
  "Customer Call",
  "Sprint Planning",
  "Retro",
  "Interview",
  "Lunch and Learn",
  "Vendor Demo",
  "Hiring Sync",
  "Roadmap Review",
  "Security Training",
  "Team Offsite Prep",
  "Board Prep",
  "Code Review",
  "Marketing Sync",
  "Ops Review",
  "Quarterly Review",
  "Coffee Chat",
  "Onboarding",
  "Incident Postmortem",
]
NEW_TITLES = [
  "Launch Plan",
  "Pricing Workshop",
  "Partner Kickoff",
  "Data Migration",
  "Offsite Debrief",
]
PEOPLE = [
  "Ana Lopez",
  "Ben Carter",
  "Chen Wei",
  "Dara Singh",
  "Eli Novak",
  "Fatima Khan",
  "Gus Meyer",
  "Hana Sato",
  "Ivan Petrov",
  "Jade Brown",
  "Kofi Mensah",
  "Lena Fischer",
]


def _call(tool, /, **arguments):
  return "<tool_call>" + json.dumps({"name": tool, "arguments": arguments}) + "</tool_call>"


def _tool(description, properties=None, required=()):
  params = {"type": "object", "properties": properties or {}, "required": list(required)}
  return {"description": description, "parameters": params}


def _hhmm(minutes):
  return f"{minutes // 60:02d}:{minutes % 60:02d}"


def _minutes(text):
  parts = str(text).strip().split(":")
  if len(parts) != 2 or not parts[0].isdigit() or not parts[1].isdigit():
    return None
  hours, mins = int(parts[0]), int(parts[1])
  return hours * 60 + mins if hours < 24 and mins < 60 else None


class MeetingsEnv(ToolEnv):
  def reset(self, seed=None):
    rng = random.Random(seed)
    titles = rng.sample(TITLES, len(TITLES))
    self.events = {}
    next_id = rng.randint(100, 800)
    for day in DAYS:
      taken = []
      for _ in range(rng.randint(2, 4)):
        duration = rng.choice([30, 60, 90])
        start = rng.randrange(OPEN, CLOSE - duration + 1, 30)
        if any(start < e and s < start + duration for s, e in taken):
          continue
        taken.append((start, start + duration))
        self.events[f"E{next_id}"] = {
          "title": titles.pop(),
          "day": day,
          "start": start,
          "duration": duration,
          "attendees": sorted(rng.sample(PEOPLE, rng.randint(1, 3))),
          "reminder": None,
        }
        next_id += 1
    self.new_id = f"E{next_id}"
    self.title = rng.choice(NEW_TITLES)
    self.day = rng.choice(DAYS)
    self.duration = rng.choice([30, 60, 90])
    self.start = self._earliest(self.day, self.duration)
    for _ in range(2 * len(DAYS)):  # no room that day: try the next day, then a short meeting
      if self.start is not None:
        break
      self.day = DAYS[(DAYS.index(self.day) + 1) % len(DAYS)]
      if self.day == DAYS[0]:
        self.duration = 30
      self.start = self._earliest(self.day, self.duration)
    self.invitees = rng.sample(PEOPLE, 2)
    ids = sorted(self.events)
    self.cancelled = rng.choice(ids)
    plan = [
      (
        "book",
        f"Book a {self.duration}-minute meeting called '{self.title}' on {self.day} at the "
        "earliest time I'm free (my working hours are 09:00 to 17:00).",
      ),
      ("invite", f"Invite {self.invitees[0]} and {self.invitees[1]} to '{self.title}'."),
    ]
    cancelled = self.events[self.cancelled]
    later = [("cancel", f"Cancel my '{cancelled['title']}' meeting on {cancelled['day']}.")]
    self.moved = None
    movable = [i for i in ids if i != self.cancelled]
    moved = rng.choice(movable)
    days = [d for d in DAYS if d not in (self.day, self.events[moved]["day"])]
    move_day = rng.choice(days)
    slots = self._free(move_day, self.events[moved]["duration"])
    if rng.random() < 0.5 and slots:
      self.moved, self.move_day, self.move_start = moved, move_day, rng.choice(slots)
      event = self.events[moved]
      later.append(
        (
          "move",
          f"Move '{event['title']}' to {self.move_day} at {_hhmm(self.move_start)}, same length.",
        )
      )
    rng.shuffle(later)
    plan += later
    self.kinds = [k for k, _ in plan]
    self.instructions = [text for _, text in plan]
    self.expected_answer = None
    event_id = {"type": "string", "description": "an event id such as E123"}
    day = {"type": "string", "description": "a weekday, Monday to Friday"}
    time = {"type": "string", "description": "a time HH:MM"}
    length = {"type": "integer", "description": "minutes"}
    self.tools = {
      "list_events": _tool("List the events of one day.", {"day": day}, ["day"]),
      "find_free_slots": _tool(
        "The start times (on the half hour) at which a meeting of the given length fits.",
        {"day": day, "duration_minutes": length},
        ["day", "duration_minutes"],
      ),
      "create_event": _tool(
        "Create an event; fails if it overlaps another event or leaves 09:00-17:00.",
        {
          "title": {"type": "string", "description": "the event's title"},
          "day": day,
          "start": time,
          "duration_minutes": length,
        },
        ["title", "day", "start", "duration_minutes"],
      ),
      "add_attendee": _tool(
        "Invite a colleague (full name) to an event.",
        {"event_id": event_id, "person": {"type": "string", "description": "a full name"}},
        ["event_id", "person"],
      ),
      "cancel_event": _tool("Delete an event.", {"event_id": event_id}, ["event_id"]),
      "move_event": _tool(
        "Move an event to another day and start time, keeping its length.",
        {"event_id": event_id, "day": day, "start": time},
        ["event_id", "day", "start"],
      ),
      "get_contact": _tool(
        "A colleague's email address and team.",
        {"name": {"type": "string", "description": "a full name"}},
        ["name"],
      ),
      "set_reminder": _tool(
        "Set a reminder before an event.",
        {"event_id": event_id, "minutes_before": length},
        ["event_id", "minutes_before"],
      ),
    }
    return self.instructions[0], {}

  def _busy(self, day, start, duration, ignore=None):
    """The first event of `day` overlapping [start, start + duration), or None."""
    for key in sorted(self.events):
      e = self.events[key]
      if key != ignore and e["day"] == day and start < e["start"] + e["duration"]:
        if e["start"] < start + duration:
          return key
    return None

  def _free(self, day, duration):
    starts = range(OPEN, CLOSE - duration + 1, 30)
    return [s for s in starts if self._busy(day, s, duration) is None]

  def _earliest(self, day, duration):
    free = self._free(day, duration)
    return free[0] if free else None

  def _find(self, title):
    return [k for k in sorted(self.events) if self.events[k]["title"].lower() == title.lower()]

  def _holds(self, kind):
    if kind == "book":
      return any(
        self.events[k]["day"] == self.day
        and self.events[k]["start"] == self.start
        and self.events[k]["duration"] == self.duration
        for k in self._find(self.title)
      )
    if kind == "invite":
      return any(
        all(p in self.events[k]["attendees"] for p in self.invitees) for k in self._find(self.title)
      )
    if kind == "cancel":
      return self.cancelled not in self.events
    event = self.events.get(self.moved)
    return event is not None and (event["day"], event["start"]) == (self.move_day, self.move_start)

  def instruction_done(self, i):
    return self._holds(self.kinds[i])

  def goal_reached(self):
    return all(self._holds(k) for k in self.kinds)

  def _day(self, day):
    text = str(day).strip().capitalize()
    return text if text in DAYS else None

  def _slot(self, day, start, duration):
    """(day, start minutes, None) or (None, None, error) for a wanted slot."""
    d, s = self._day(day), _minutes(start)
    if d is None:
      return None, None, f"Error: unknown day '{day}' (use Monday to Friday)"
    if s is None:
      return None, None, f"Error: start must be a time HH:MM, got '{start}'"
    if s < OPEN or s + duration > CLOSE:
      return None, None, "Error: events must lie within working hours 09:00-17:00"
    return d, s, None

  def _show(self, key):
    e = self.events[key]
    return {
      "event_id": key,
      "title": e["title"],
      "day": e["day"],
      "start": _hhmm(e["start"]),
      "end": _hhmm(e["start"] + e["duration"]),
      "attendees": e["attendees"],
    }

  def tool_list_events(self, day):
    d = self._day(day)
    if d is None:
      return f"Error: unknown day '{day}' (use Monday to Friday)"
    keys = sorted(
      (k for k in self.events if self.events[k]["day"] == d), key=lambda k: self.events[k]["start"]
    )
    return json.dumps([self._show(k) for k in keys]) if keys else f"No events on {d}."

  def tool_find_free_slots(self, day, duration_minutes):
    d = self._day(day)
    if d is None:
      return f"Error: unknown day '{day}' (use Monday to Friday)"
    try:
      duration = int(duration_minutes)
    except (TypeError, ValueError):
      return "Error: duration_minutes must be an integer"
    if not 15 <= duration <= 480:
      return "Error: duration_minutes must be between 15 and 480"
    free = self._free(d, duration)
    return json.dumps([_hhmm(s) for s in free]) if free else f"No free slot on {d}."

  def tool_create_event(self, title, day, start, duration_minutes):
    try:
      duration = int(duration_minutes)
    except (TypeError, ValueError):
      return "Error: duration_minutes must be an integer"
    if duration <= 0 or not str(title).strip():
      return "Error: a title and a positive duration are required"
    d, s, error = self._slot(day, start, duration)
    if error:
      return error
    clash = self._busy(d, s, duration)
    if clash:
      e = self._show(clash)
      return f"Error: conflicts with '{e['title']}' ({e['start']}-{e['end']}) on {d}"
    key = f"E{max(int(k[1:]) for k in self.events) + 1}" if self.events else "E1"
    self.events[key] = {
      "title": str(title).strip(),
      "day": d,
      "start": s,
      "duration": duration,
      "attendees": [],
      "reminder": None,
    }
    return f"Created {key}: '{str(title).strip()}' on {d} {_hhmm(s)}-{_hhmm(s + duration)}."

  def _event(self, event_id):
    key = str(event_id).strip().upper()
    if key in self.events:
      return key, None
    return None, f"Error: no event '{event_id}'. Use list_events to see event ids."

  def tool_add_attendee(self, event_id, person):
    key, error = self._event(event_id)
    if error:
      return error
    name = " ".join(str(person).split()).title()
    if name not in PEOPLE:
      return f"Error: '{person}' is not in the company directory"
    if name in self.events[key]["attendees"]:
      return f"{name} is already invited to {key}."
    self.events[key]["attendees"] = sorted(self.events[key]["attendees"] + [name])
    return f"Invited {name} to {key}."

  def tool_cancel_event(self, event_id):
    key, error = self._event(event_id)
    if error:
      return error
    title = self.events.pop(key)["title"]
    return f"Cancelled {key} ('{title}')."

  def tool_move_event(self, event_id, day, start):
    key, error = self._event(event_id)
    if error:
      return error
    duration = self.events[key]["duration"]
    d, s, error = self._slot(day, start, duration)
    if error:
      return error
    clash = self._busy(d, s, duration, ignore=key)
    if clash:
      e = self._show(clash)
      return f"Error: conflicts with '{e['title']}' ({e['start']}-{e['end']}) on {d}"
    self.events[key]["day"], self.events[key]["start"] = d, s
    return f"Moved {key} to {d} {_hhmm(s)}-{_hhmm(s + duration)}."

  def tool_get_contact(self, name):
    person = " ".join(str(name).split()).title()
    if person not in PEOPLE:
      return f"Error: '{name}' is not in the company directory"
    email = person.lower().replace(" ", ".") + "@example.com"
    return json.dumps(
      {
        "name": person,
        "email": email,
        "team": ["Product", "Eng", "Sales"][PEOPLE.index(person) % 3],
      }
    )

  def tool_set_reminder(self, event_id, minutes_before):
    key, error = self._event(event_id)
    if error:
      return error
    try:
      minutes = int(minutes_before)
    except (TypeError, ValueError):
      return "Error: minutes_before must be an integer"
    self.events[key]["reminder"] = minutes
    return f"Reminder set {minutes} minutes before {key}."

  def solution(self):
    turns = []
    for kind in self.kinds:
      if kind == "book":
        turn = _call("find_free_slots", day=self.day, duration_minutes=self.duration)
        turn += _call(
          "create_event",
          title=self.title,
          day=self.day,
          start=_hhmm(self.start),
          duration_minutes=self.duration,
        )
      elif kind == "invite":
        turn = "".join(_call("add_attendee", event_id=self.new_id, person=p) for p in self.invitees)
      elif kind == "cancel":
        day = self.events[self.cancelled]["day"]
        turn = _call("list_events", day=day) + _call("cancel_event", event_id=self.cancelled)
      else:
        turn = _call("list_events", day=self.events[self.moved]["day"])
        turn += _call(
          "move_event", event_id=self.moved, day=self.move_day, start=_hhmm(self.move_start)
        )
      turns.append(turn)
    return turns + ["<answer>Done: the calendar is updated.</answer>"]
