"""Travel booking: the price of the cheapest matching flight, in another currency.

Tool-use skill: Tool Selection (medium), answer-graded. The agent maps city names to airport
codes (`list_airports`), searches the route on the date (`search_flights`), picks the cheapest
flight (nonstop only, when asked: then the cheapest flight overall has a stop) and converts its
US-dollar price (`convert_currency`). `search_hotels` and `book_flight` are not needed.
"""

import json
import random

from tool_env import ToolEnv

AIRPORTS = {
  "JFK": "New York",
  "LHR": "London",
  "CDG": "Paris",
  "HND": "Tokyo",
  "BER": "Berlin",
  "MAD": "Madrid",
  "FCO": "Rome",
  "YYZ": "Toronto",
  "SYD": "Sydney",
  "DXB": "Dubai",
  "SIN": "Singapore",
  "ORD": "Chicago",
}
AIRLINES = ["AZ", "BA", "LH", "AF", "UA", "EK", "QF", "SQ", "IB", "AC"]
CURRENCIES = {"EUR": (0.85, 0.95), "GBP": (0.74, 0.82), "JPY": (140.0, 160.0), "CAD": (1.3, 1.4)}
HOTELS = ["Grand", "Central", "Harbor View", "Park Inn", "Riverside", "Plaza", "Garden Suites"]


def _call(tool, /, **arguments):
  return "<tool_call>" + json.dumps({"name": tool, "arguments": arguments}) + "</tool_call>"


def _tool(description, properties=None, required=()):
  params = {"type": "object", "properties": properties or {}, "required": list(required)}
  return {"description": description, "parameters": params}


class TravelBookingEnv(ToolEnv):
  def reset(self, seed=None):
    rng = random.Random(seed)
    self.airports = sorted(rng.sample(sorted(AIRPORTS), rng.randint(6, 9)))
    self.dates = [
      f"2025-{rng.randint(5, 9):02d}-{d:02d}" for d in sorted(rng.sample(range(1, 29), 4))
    ]
    self.rates = {"USD": 1.0}
    for code, (lo, hi) in CURRENCIES.items():
      self.rates[code] = round(rng.uniform(lo, hi), 4)
    self.flights = {}
    for _ in range(rng.randint(20, 40)):
      origin, dest = rng.sample(self.airports, 2)
      self._add_flight(rng, origin, dest, rng.choice(self.dates), rng.random() < 0.5)
    self.origin, self.dest = rng.sample(self.airports, 2)
    self.date = rng.choice(self.dates)
    self.nonstop = rng.random() < 0.5
    for _ in range(rng.randint(2, 4)):
      self._add_flight(rng, self.origin, self.dest, self.date, rng.random() < 0.5)
    route = self._route(self.origin, self.dest, self.date)
    self.cheapest_any = min(route, key=lambda k: self.flights[k]["price"])
    if self.nonstop:
      if self.flights[self.cheapest_any]["stops"] == 0:  # make the cheapest one stop over
        self.flights[self.cheapest_any]["stops"] = 1
      if all(self.flights[k]["stops"] for k in route):
        self._add_flight(rng, self.origin, self.dest, self.date, True)
        route = self._route(self.origin, self.dest, self.date)
      route = [k for k in route if self.flights[k]["stops"] == 0]
    self.flight = min(route, key=lambda k: self.flights[k]["price"])
    self.currency = rng.choice(sorted(CURRENCIES))
    self.price = self.flights[self.flight]["price"]
    self.expected_answer = f"{self._convert(self.price, 'USD', self.currency):.2f}"
    self.bookings = []
    kind = "nonstop flight" if self.nonstop else "flight"
    task = (
      f"What is the price of the cheapest {kind} from {AIRPORTS[self.origin]} to "
      f"{AIRPORTS[self.dest]} on {self.date}, in {self.currency}? Answer with the amount, "
      "rounded to 2 decimals."
    )
    code = {"type": "string", "description": "a 3-letter IATA airport code"}
    self.tools = {
      "list_airports": _tool("The airports served, as IATA code and city.", {}),
      "search_flights": _tool(
        "Flights on one route and date, with prices in US dollars and the number of stops.",
        {
          "origin": code,
          "destination": code,
          "date": {"type": "string", "description": "YYYY-MM-DD"},
        },
        ["origin", "destination", "date"],
      ),
      "convert_currency": _tool(
        "Convert an amount between USD, EUR, GBP, JPY and CAD at today's rate.",
        {
          "amount": {"type": "number", "description": "the amount to convert"},
          "from_currency": {"type": "string", "description": "a currency code"},
          "to_currency": {"type": "string", "description": "a currency code"},
        },
        ["amount", "from_currency", "to_currency"],
      ),
      "search_hotels": _tool(
        "Hotels in a city with their nightly price in US dollars.",
        {"city": {"type": "string", "description": "a city name"}},
        ["city"],
      ),
      "book_flight": _tool(
        "Book a seat on a flight for a passenger.",
        {
          "flight_id": {"type": "string", "description": "a flight id from search_flights"},
          "passenger": {"type": "string", "description": "the passenger's full name"},
        },
        ["flight_id", "passenger"],
      ),
    }
    return task, {}

  def _add_flight(self, rng, origin, dest, date, nonstop):
    key = rng.choice(AIRLINES) + str(rng.randint(100, 999))
    while key in self.flights:
      key = rng.choice(AIRLINES) + str(rng.randint(100, 999))
    prices = {f["price"] for f in self.flights.values()}
    price = rng.randint(120, 1500)
    while price in prices:
      price += 1
    self.flights[key] = {
      "origin": origin,
      "destination": dest,
      "date": date,
      "departure": f"{rng.randint(6, 22):02d}:{rng.choice(['00', '15', '30', '45'])}",
      "stops": 0 if nonstop else rng.randint(1, 2),
      "price": price,
    }

  def _route(self, origin, dest, date):
    return sorted(
      k
      for k, f in self.flights.items()
      if (f["origin"], f["destination"], f["date"]) == (origin, dest, date)
    )

  def _convert(self, amount, src, dst):
    return round(amount / self.rates[src] * self.rates[dst], 2)

  def tool_list_airports(self):
    return json.dumps([{"code": c, "city": AIRPORTS[c]} for c in self.airports])

  def tool_search_flights(self, origin, destination, date):
    codes = [str(origin).strip().upper(), str(destination).strip().upper()]
    for given, c in zip([origin, destination], codes):
      if c not in self.airports:
        return f"Error: unknown airport code '{given}'. Use list_airports to find the codes."
    day = str(date).strip()
    if day not in self.dates:
      return f"No flights found from {codes[0]} to {codes[1]} on {day}."
    keys = self._route(codes[0], codes[1], day)
    if not keys:
      return f"No flights found from {codes[0]} to {codes[1]} on {day}."
    rows = []
    for k in keys:
      f = self.flights[k]
      rows.append(
        {"flight_id": k, "departure": f["departure"], "stops": f["stops"], "price_usd": f["price"]}
      )
    return json.dumps(rows)

  def tool_convert_currency(self, amount, from_currency, to_currency):
    try:
      value = float(str(amount).replace(",", ""))
    except ValueError:
      return "Error: amount must be a number"
    src, dst = str(from_currency).strip().upper(), str(to_currency).strip().upper()
    for code in (src, dst):
      if code not in self.rates:
        return f"Error: unsupported currency '{code}' (supported: {', '.join(sorted(self.rates))})"
    return f"{value:.2f} {src} = {self._convert(value, src, dst):.2f} {dst}"

  def tool_search_hotels(self, city):
    name = str(city).strip().title()
    codes = [c for c in self.airports if AIRPORTS[c] == name]
    if not codes:
      return f"Error: no hotel data for '{city}'"
    base = sum(ord(ch) for ch in codes[0])
    rows = [
      {"hotel": f"{h} {name}", "nightly_usd": 80 + (base * (i + 3)) % 220}
      for i, h in enumerate(HOTELS[:4])
    ]
    return json.dumps(rows)

  def tool_book_flight(self, flight_id, passenger):
    key = str(flight_id).strip().upper()
    if key not in self.flights:
      return f"Error: no flight '{flight_id}'"
    if not str(passenger).strip():
      return "Error: a passenger name is required"
    self.bookings.append((key, str(passenger).strip()))
    return f"Booked {key} for {str(passenger).strip()}; confirmation BK{len(self.bookings):04d}."

  def solution(self):
    return [
      _call("list_airports")
      + _call("search_flights", origin=self.origin, destination=self.dest, date=self.date),
      _call("convert_currency", amount=self.price, from_currency="USD", to_currency=self.currency),
      f"<answer>{self.expected_answer}</answer>",
    ]
