"""Smart home: lights, doors and a thermostat changed through a series of user requests.

Tool-use skill: State Modification (easy), multi-instruction and state-graded. The user's
3-4 instructions are revealed one at a time; each is checked on the device states, and the final
state must satisfy all of them. `get_device`, `unlock_door` and `get_energy_report` are not
needed; `set_brightness` refuses a light that is off.
"""

import json
import random

from tool_env import ToolEnv

ROOMS = [
  "living room",
  "kitchen",
  "bedroom",
  "office",
  "garage",
  "hallway",
  "bathroom",
  "porch",
  "dining room",
  "nursery",
]
DOORS = ["front", "back", "garage", "patio", "side"]


def _call(tool, /, **arguments):
  return "<tool_call>" + json.dumps({"name": tool, "arguments": arguments}) + "</tool_call>"


def _tool(description, properties=None, required=()):
  params = {"type": "object", "properties": properties or {}, "required": list(required)}
  return {"description": description, "parameters": params}


def _flag(value):
  if isinstance(value, bool):
    return value
  text = str(value).strip().lower()
  if text in ("true", "on", "1", "yes"):
    return True
  if text in ("false", "off", "0", "no"):
    return False
  return None


class SmartHomeEnv(ToolEnv):
  def reset(self, seed=None):
    rng = random.Random(seed)
    rooms = rng.sample(ROOMS, rng.randint(5, 7))
    self.lights = {}
    for room in rooms:
      self.lights["light_" + room.replace(" ", "_")] = {
        "room": room,
        "on": rng.random() < 0.5,
        "brightness": rng.randrange(10, 101, 10),
      }
    self.doors = {"door_" + d: {"locked": rng.random() < 0.4} for d in rng.sample(DOORS, 3)}
    if all(d["locked"] for d in self.doors.values()):
      self.doors[rng.choice(sorted(self.doors))]["locked"] = False
    self.thermostat = rng.randint(17, 24)
    ids = sorted(self.lights)
    self.target_light = rng.choice(ids)
    self.lights[self.target_light]["on"] = False
    others = [i for i in ids if i != self.target_light]
    if not any(self.lights[i]["on"] for i in others):
      self.lights[rng.choice(others)]["on"] = True
    self.target_brightness = rng.randrange(20, 95, 5)
    self.target_temp = rng.choice([t for t in range(16, 27) if t != self.thermostat])
    room = self.lights[self.target_light]["room"]
    middle = [
      ("thermostat", f"Set the thermostat to {self.target_temp} degrees Celsius."),
      ("doors", "Lock every door that is currently unlocked."),
    ]
    rng.shuffle(middle)
    plan = [
      ("light", f"Turn on the {room} light and set it to {self.target_brightness}% brightness.")
    ]
    plan += middle
    if rng.random() < 0.5:
      plan.append(("others", f"Now turn off every light that is on, except the {room} light."))
    self.kinds = [k for k, _ in plan]
    self.instructions = [text for _, text in plan]
    self.expected_answer = None
    device = {"type": "string", "description": "a device id from list_devices"}
    self.tools = {
      "list_devices": _tool(
        "List the devices (lights, doors, thermostat) with their current state.",
        {"room": {"type": "string", "description": "only the devices of this room (optional)"}},
      ),
      "get_device": _tool("The full state of one device.", {"device_id": device}, ["device_id"]),
      "set_power": _tool(
        "Switch a light on or off.",
        {"device_id": device, "on": {"type": "boolean", "description": "true for on"}},
        ["device_id", "on"],
      ),
      "set_brightness": _tool(
        "Set the brightness of a light that is on.",
        {"device_id": device, "level": {"type": "integer", "description": "percent, 1-100"}},
        ["device_id", "level"],
      ),
      "set_thermostat": _tool(
        "Set the thermostat's target temperature in degrees Celsius (10-30).",
        {"temperature": {"type": "number", "description": "degrees Celsius"}},
        ["temperature"],
      ),
      "lock_door": _tool("Lock a door.", {"door_id": device}, ["door_id"]),
      "unlock_door": _tool("Unlock a door.", {"door_id": device}, ["door_id"]),
      "get_energy_report": _tool("Today's energy use of the house in kWh.", {}),
    }
    return self.instructions[0], {}

  def _holds(self, kind):
    if kind == "light":
      light = self.lights[self.target_light]
      return light["on"] and light["brightness"] == self.target_brightness
    if kind == "thermostat":
      return self.thermostat == self.target_temp
    if kind == "doors":
      return all(d["locked"] for d in self.doors.values())
    return all(not v["on"] for k, v in self.lights.items() if k != self.target_light)

  def instruction_done(self, i):
    return self._holds(self.kinds[i])

  def goal_reached(self):
    return all(self._holds(k) for k in self.kinds)

  def _describe(self, device_id):
    if device_id in self.lights:
      light = self.lights[device_id]
      return {
        "device_id": device_id,
        "type": "light",
        "room": light["room"],
        "power": "on" if light["on"] else "off",
        "brightness": light["brightness"],
      }
    if device_id in self.doors:
      state = "locked" if self.doors[device_id]["locked"] else "unlocked"
      return {"device_id": device_id, "type": "door", "state": state}
    return {"device_id": "thermostat", "type": "thermostat", "target_celsius": self.thermostat}

  def _light(self, device_id):
    key = str(device_id).strip()
    if key in self.lights:
      return key, None
    if key in self.doors or key == "thermostat":
      return None, f"Error: {key} is not a light"
    return None, f"Error: no device '{device_id}'. Use list_devices to see the device ids."

  def tool_list_devices(self, room=None):
    ids = sorted(self.lights) + sorted(self.doors) + ["thermostat"]
    if room:
      wanted = str(room).strip().lower()
      ids = [i for i in sorted(self.lights) if self.lights[i]["room"] == wanted]
      if not ids:
        return f"Error: no devices in room '{room}'"
    return json.dumps([self._describe(i) for i in ids])

  def tool_get_device(self, device_id):
    key = str(device_id).strip()
    if key not in self.lights and key not in self.doors and key != "thermostat":
      return f"Error: no device '{device_id}'. Use list_devices to see the device ids."
    return json.dumps(self._describe(key))

  def tool_set_power(self, device_id, on):
    key, error = self._light(device_id)
    if error:
      return error
    flag = _flag(on)
    if flag is None:
      return "Error: 'on' must be true or false"
    self.lights[key]["on"] = flag
    return f"{key} is now {'on' if flag else 'off'}."

  def tool_set_brightness(self, device_id, level):
    key, error = self._light(device_id)
    if error:
      return error
    try:
      value = int(level)
    except (TypeError, ValueError):
      return "Error: level must be an integer percentage"
    if not 1 <= value <= 100:
      return "Error: level must be between 1 and 100"
    if not self.lights[key]["on"]:
      return f"Error: {key} is off; switch it on before setting its brightness"
    self.lights[key]["brightness"] = value
    return f"{key} brightness set to {value}%."

  def tool_set_thermostat(self, temperature):
    try:
      value = float(temperature)
    except (TypeError, ValueError):
      return "Error: temperature must be a number"
    if not 10 <= value <= 30:
      return "Error: the thermostat accepts 10 to 30 degrees Celsius"
    self.thermostat = int(value) if value == int(value) else value
    return f"Thermostat set to {self.thermostat} C."

  def _door(self, door_id, locked):
    key = str(door_id).strip()
    if key not in self.doors:
      return f"Error: no door '{door_id}' (doors: {', '.join(sorted(self.doors))})"
    if self.doors[key]["locked"] == locked:
      return f"{key} was already {'locked' if locked else 'unlocked'}."
    self.doors[key]["locked"] = locked
    return f"{key} is now {'locked' if locked else 'unlocked'}."

  def tool_lock_door(self, door_id):
    return self._door(door_id, True)

  def tool_unlock_door(self, door_id):
    return self._door(door_id, False)

  def tool_get_energy_report(self):
    lit = sum(v["brightness"] for v in self.lights.values() if v["on"])
    return json.dumps({"lights_kwh": round(lit * 0.004, 2), "heating_kwh": self.thermostat * 0.6})

  def solution(self):
    turns = []
    for kind in self.kinds:
      if kind == "light":
        turn = _call("list_devices")
        turn += _call("set_power", device_id=self.target_light, on=True)
        turn += _call("set_brightness", device_id=self.target_light, level=self.target_brightness)
      elif kind == "thermostat":
        turn = _call("set_thermostat", temperature=self.target_temp)
      elif kind == "doors":
        unlocked = [k for k in sorted(self.doors) if not self.doors[k]["locked"]]
        turn = "".join(_call("lock_door", door_id=k) for k in unlocked)
      else:
        on = [k for k in sorted(self.lights) if k != self.target_light and self.lights[k]["on"]]
        turn = "".join(_call("set_power", device_id=k, on=False) for k in on)
      turns.append(turn)
    return turns + ["<answer>All done.</answer>"]
