"""Vehicle control: get a car ready for a trip, one request at a time.

Tool-use skill: Multi-Step Workflows (medium), multi-instruction (BFCL multi-turn style) with a
computed answer. The requests are revealed one at a time: fill the tank (only as many liters as
fit, engine off), start the engine (refused until every door is locked and the brake is
pressed), sometimes set the cabin temperature, then set the navigation and report the distance.
`check_tire_pressure` is not needed.
"""

import json
import random

from tool_env import ToolEnv

DOORS = ["driver", "passenger", "rear_left", "rear_right"]
PLACES = [
  "Central Station",
  "Airport Terminal 2",
  "Lakeside Park",
  "City Museum",
  "North Mall",
  "Harbor Ferry",
  "Mountain Lodge",
  "University Campus",
  "Stadium",
  "Old Town Square",
]


def _call(tool, /, **arguments):
  return "<tool_call>" + json.dumps({"name": tool, "arguments": arguments}) + "</tool_call>"


def _tool(description, properties=None, required=()):
  params = {"type": "object", "properties": properties or {}, "required": list(required)}
  return {"description": description, "parameters": params}


class VehicleControlEnv(ToolEnv):
  def reset(self, seed=None):
    rng = random.Random(seed)
    self.locked = {d: rng.random() < 0.5 for d in DOORS}
    if all(self.locked.values()):
      self.locked[rng.choice(DOORS)] = False
    self.capacity = rng.randint(45, 70)
    self.fuel = rng.randint(5, self.capacity - 10)
    self.engine = False
    self.brake = False
    self.cabin = rng.randint(16, 28)
    self.navigation = None
    self.tires = {
      d: round(rng.uniform(2.0, 2.6), 1)
      for d in ["front_left", "front_right", "rear_left", "rear_right"]
    }
    self.places = {p: round(rng.uniform(3, 400), 1) for p in rng.sample(PLACES, rng.randint(5, 8))}
    self.destination = rng.choice(sorted(self.places))
    self.target_cabin = rng.choice([t for t in range(18, 26) if t != self.cabin])
    fill = f"The fuel gauge shows {self.fuel} liters left. Please fill the tank up completely."
    plan = [("fuel", fill), ("engine", "Now start the engine.")]
    if rng.random() < 0.5:
      plan.append(("climate", f"Set the cabin temperature to {self.target_cabin} degrees Celsius."))
    plan.append(
      ("navigation", f"Navigate to {self.destination} and tell me how far it is in kilometers.")
    )
    self.kinds = [k for k, _ in plan]
    self.instructions = [text for _, text in plan]
    self.expected_answer = f"{self.places[self.destination]:.1f}"
    self.tools = {
      "get_status": _tool(
        "Doors, engine, brake, fuel level and tank capacity, cabin temperature.", {}
      ),
      "refuel": _tool(
        "Add fuel (engine off; no more than fits in the tank).",
        {"liters": {"type": "number", "description": "liters to add"}},
        ["liters"],
      ),
      "lock_doors": _tool(
        "Lock doors: a list of driver, passenger, rear_left, rear_right, or ['all'].",
        {"doors": {"type": "array", "items": {"type": "string"}, "description": "door names"}},
        ["doors"],
      ),
      "press_brake": _tool("Press and hold the brake pedal.", {}),
      "start_engine": _tool("Start the engine (all doors locked and brake pressed first).", {}),
      "set_climate": _tool(
        "Set the cabin temperature in degrees Celsius (16-30).",
        {"temperature": {"type": "number", "description": "degrees Celsius"}},
        ["temperature"],
      ),
      "set_navigation": _tool(
        "Set the navigation destination; returns the route distance.",
        {"destination": {"type": "string", "description": "a saved place name"}},
        ["destination"],
      ),
      "check_tire_pressure": _tool("Tire pressures in bar.", {}),
    }
    return self.instructions[0], {}

  def instruction_done(self, i):
    kind = self.kinds[i]
    if kind == "fuel":
      return self.fuel == self.capacity
    if kind == "engine":
      return self.engine
    if kind == "climate":
      return self.cabin == self.target_cabin
    return self.navigation == self.destination

  def tool_get_status(self):
    return json.dumps(
      {
        "doors": {d: "locked" if v else "unlocked" for d, v in self.locked.items()},
        "engine": "running" if self.engine else "off",
        "brake_pressed": self.brake,
        "fuel_liters": self.fuel,
        "tank_capacity_liters": self.capacity,
        "cabin_celsius": self.cabin,
        "navigation": self.navigation,
      }
    )

  def tool_refuel(self, liters):
    try:
      amount = float(liters)
    except (TypeError, ValueError):
      return "Error: liters must be a number"
    if self.engine:
      return "Error: turn the engine off before refuelling"
    if amount <= 0:
      return "Error: liters must be positive"
    room = self.capacity - self.fuel
    if amount > room:
      return f"Error: only {room} liters fit in the tank"
    self.fuel = self.fuel + amount
    if self.fuel == int(self.fuel):
      self.fuel = int(self.fuel)
    return f"Added {amount:g} liters; the tank holds {self.fuel:g} of {self.capacity} liters."

  def tool_lock_doors(self, doors):
    names = [doors] if isinstance(doors, str) else doors
    if not isinstance(names, list) or not names:
      return "Error: doors must be a list of door names"
    wanted = []
    for name in names:
      key = str(name).strip().lower().replace(" ", "_")
      if key == "all":
        wanted = list(DOORS)
        break
      if key not in DOORS:
        return f"Error: unknown door '{name}' (doors: {', '.join(DOORS)})"
      wanted.append(key)
    for key in wanted:
      self.locked[key] = True
    return f"Locked: {', '.join(wanted)}."

  def tool_press_brake(self):
    self.brake = True
    return "Brake pedal pressed."

  def tool_start_engine(self):
    if self.engine:
      return "The engine is already running."
    open_doors = [d for d in DOORS if not self.locked[d]]
    if open_doors:
      return f"Error: cannot start: doors not locked ({', '.join(open_doors)})"
    if not self.brake:
      return "Error: cannot start: press the brake pedal first"
    self.engine = True
    return "Engine started."

  def tool_set_climate(self, temperature):
    try:
      value = float(temperature)
    except (TypeError, ValueError):
      return "Error: temperature must be a number"
    if not 16 <= value <= 30:
      return "Error: the climate control accepts 16 to 30 degrees Celsius"
    self.cabin = int(value) if value == int(value) else value
    return f"Cabin temperature set to {self.cabin} C."

  def tool_set_navigation(self, destination):
    wanted = " ".join(str(destination).split()).lower()
    matches = [p for p in sorted(self.places) if p.lower() == wanted]
    if not matches:
      return (
        f"Error: unknown place '{destination}' (saved places: {', '.join(sorted(self.places))})"
      )
    self.navigation = matches[0]
    distance = self.places[matches[0]]
    return (
      f"Navigating to {matches[0]}: {distance:.1f} km, about {round(distance / 70 * 60)} minutes."
    )

  def tool_check_tire_pressure(self):
    return json.dumps(self.tires)

  def solution(self):
    turns = []
    for kind in self.kinds:
      if kind == "fuel":
        turns.append(_call("get_status") + _call("refuel", liters=self.capacity - self.fuel))
      elif kind == "engine":
        unlocked = [d for d in DOORS if not self.locked[d]]
        turns.append(
          _call("lock_doors", doors=unlocked) + _call("press_brake") + _call("start_engine")
        )
      elif kind == "climate":
        turns.append(_call("set_climate", temperature=self.target_cabin))
      else:
        turns.append(_call("set_navigation", destination=self.destination))
    return turns + [f"<answer>{self.expected_answer}</answer>"]
