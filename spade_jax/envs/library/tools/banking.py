"""Online banking: transfers, bill payments and a balance, chained through account and bill ids.

Tool-use skill: API Orchestration (medium), multi-instruction (BFCL multi-turn style) with a
computed answer. The user speaks of "savings" and "checking" and of payees by name; the tools
take ids that only `get_accounts` and `list_bills` reveal. Three instructions: move money from
savings, pay a bill (it exceeds the checking balance before the transfer), send money to a
contact and report the checking balance. `get_transactions` and `get_exchange_rate` are not
needed.
"""

import json
import random

from tool_env import ToolEnv

PAYEES = [
  "City Electric",
  "Water Utility",
  "FiberNet Internet",
  "Mobile Phone",
  "Home Insurance",
  "Car Insurance",
  "Gym Membership",
  "Streaming Plus",
  "Student Loan",
  "Credit Union Card",
]
CONTACTS = [
  "Alice Moreno",
  "Ben Okafor",
  "Chloe Park",
  "Diego Santos",
  "Emma Novak",
  "Farid Haddad",
]
MERCHANTS = ["Grocer", "Coffee Bar", "Gas Station", "Pharmacy", "Bookshop", "Hardware", "Bakery"]
RATES = {"EUR": 0.92, "GBP": 0.79, "JPY": 151.3, "CAD": 1.36, "MXN": 17.1}


def _call(tool, /, **arguments):
  return "<tool_call>" + json.dumps({"name": tool, "arguments": arguments}) + "</tool_call>"


def _tool(description, properties=None, required=()):
  params = {"type": "object", "properties": properties or {}, "required": list(required)}
  return {"description": description, "parameters": params}


def _money(cents):
  return f"{cents / 100:.2f}"


def _cents(amount):
  try:
    value = float(str(amount).replace("$", "").replace(",", "").strip())
  except ValueError:
    return None
  return round(value * 100)


class BankingEnv(ToolEnv):
  def reset(self, seed=None):
    rng = random.Random(seed)
    self.checking = f"CHK-{rng.randint(1000, 9999)}"
    self.savings = f"SAV-{rng.randint(1000, 9999)}"
    self.balances = {
      self.checking: rng.randint(5000, 60000),
      self.savings: rng.randint(300000, 1500000),
    }
    self.bills = {}
    for payee in rng.sample(PAYEES, rng.randint(3, 6)):
      bill_id = f"BILL-{rng.randint(100, 999)}"
      while bill_id in self.bills:
        bill_id = f"BILL-{rng.randint(100, 999)}"
      amount = rng.randint(3000, 90000)
      self.bills[bill_id] = {
        "payee": payee,
        "amount": amount,
        "status": "due",
        "day": rng.randint(1, 28),
      }
    self.bill = rng.choice(sorted(self.bills))
    amount = self.bills[self.bill]["amount"]
    if amount <= self.balances[self.checking]:  # the bill must need the transfer
      amount = self.balances[self.checking] + rng.randint(1000, 30000)
      self.bills[self.bill]["amount"] = amount
    self.contact = rng.choice(CONTACTS)
    self.gift = rng.randint(10, 150) * 100
    shortfall = amount + self.gift - self.balances[self.checking]
    self.transfer_amount = (shortfall // 5000 + rng.randint(1, 8)) * 5000
    self.history = []
    for day in sorted(rng.sample(range(1, 29), rng.randint(10, 20))):
      merchant = rng.choice(MERCHANTS)
      self.history.append({"day": day, "description": merchant, "amount": -rng.randint(300, 9000)})
    self.transfers, self.payments = [], []
    final = self.balances[self.checking] + self.transfer_amount - amount - self.gift
    self.expected_answer = _money(final)
    payee = self.bills[self.bill]["payee"]
    self.instructions = [
      f"Please move ${self.transfer_amount // 100} from my savings account to my checking account.",
      f"Now pay my {payee} bill from checking.",
      f"Finally, send ${self.gift // 100} to {self.contact} from checking and tell me my checking "
      "balance afterwards.",
    ]
    account = {"type": "string", "description": "an account id such as CHK-1234"}
    money = {"type": "number", "description": "an amount in dollars"}
    self.tools = {
      "get_accounts": _tool("List the user's accounts (id, type and balance).", {}),
      "get_balance": _tool("The balance of one account.", {"account_id": account}, ["account_id"]),
      "transfer": _tool(
        "Move money between two of the user's accounts.",
        {"from_account": account, "to_account": account, "amount": money},
        ["from_account", "to_account", "amount"],
      ),
      "list_bills": _tool("List the user's bills (id, payee, amount, status).", {}),
      "pay_bill": _tool(
        "Pay a bill in full from an account.",
        {"bill_id": {"type": "string", "description": "a bill id"}, "from_account": account},
        ["bill_id", "from_account"],
      ),
      "send_payment": _tool(
        "Send money to one of the user's saved contacts.",
        {
          "recipient": {"type": "string", "description": "the contact's full name"},
          "amount": money,
          "from_account": account,
        },
        ["recipient", "amount", "from_account"],
      ),
      "get_transactions": _tool(
        "Recent card transactions of an account.",
        {"account_id": account, "limit": {"type": "integer", "description": "how many (max 20)"}},
        ["account_id"],
      ),
      "get_exchange_rate": _tool(
        "How many units of a foreign currency one US dollar buys.",
        {"currency": {"type": "string", "description": "a code such as EUR"}},
        ["currency"],
      ),
    }
    return self.instructions[0], {}

  def instruction_done(self, i):
    if i == 0:
      return (self.savings, self.checking, self.transfer_amount) in self.transfers
    if i == 1:
      return self.bills[self.bill]["status"] == "paid"
    return (self.contact, self.gift, self.checking) in self.payments

  def _account(self, account_id):
    key = str(account_id).strip().upper()
    if key in self.balances:
      return key, None
    return None, f"Error: unknown account '{account_id}'. Use get_accounts to see the account ids."

  def _debit(self, account, cents):
    if cents <= 0:
      return "Error: the amount must be positive"
    if self.balances[account] < cents:
      have = _money(self.balances[account])
      return f"Error: insufficient funds in {account}: balance ${have}, needed ${_money(cents)}"
    self.balances[account] -= cents
    return None

  def tool_get_accounts(self):
    kinds = {self.checking: "checking", self.savings: "savings"}
    return json.dumps(
      [{"account_id": a, "type": kinds[a], "balance": _money(b)} for a, b in self.balances.items()]
    )

  def tool_get_balance(self, account_id):
    key, error = self._account(account_id)
    return error or json.dumps({"account_id": key, "balance": _money(self.balances[key])})

  def tool_transfer(self, from_account, to_account, amount):
    src, error = self._account(from_account)
    dst, error2 = self._account(to_account)
    if error or error2:
      return error or error2
    if src == dst:
      return "Error: the two accounts must differ"
    cents = _cents(amount)
    if cents is None:
      return "Error: amount must be a number"
    error = self._debit(src, cents)
    if error:
      return error
    self.balances[dst] += cents
    self.transfers.append((src, dst, cents))
    return f"Transferred ${_money(cents)} from {src} to {dst}."

  def tool_list_bills(self):
    rows = [
      {"bill_id": k, **v, "amount": _money(v["amount"])} for k, v in sorted(self.bills.items())
    ]
    return json.dumps(rows)

  def tool_pay_bill(self, bill_id, from_account):
    key = str(bill_id).strip().upper()
    if key not in self.bills:
      return f"Error: unknown bill '{bill_id}'. Use list_bills to see the bill ids."
    account, error = self._account(from_account)
    if error:
      return error
    bill = self.bills[key]
    if bill["status"] == "paid":
      return f"Error: bill {key} is already paid"
    error = self._debit(account, bill["amount"])
    if error:
      return error
    bill["status"] = "paid"
    return f"Paid {key} ({bill['payee']}, ${_money(bill['amount'])}) from {account}."

  def tool_send_payment(self, recipient, amount, from_account):
    name = " ".join(str(recipient).split()).title()
    if name not in CONTACTS:
      return f"Error: '{recipient}' is not a saved contact (contacts: {', '.join(CONTACTS)})"
    account, error = self._account(from_account)
    if error:
      return error
    cents = _cents(amount)
    if cents is None:
      return "Error: amount must be a number"
    error = self._debit(account, cents)
    if error:
      return error
    self.payments.append((name, cents, account))
    return f"Sent ${_money(cents)} to {name} from {account}."

  def tool_get_transactions(self, account_id, limit=10):
    key, error = self._account(account_id)
    if error:
      return error
    try:
      count = max(1, min(20, int(limit)))
    except (TypeError, ValueError):
      return "Error: limit must be an integer"
    rows = self.history[-count:] if key == self.checking else []
    return json.dumps([{**r, "amount": _money(r["amount"])} for r in rows])

  def tool_get_exchange_rate(self, currency):
    code = str(currency).strip().upper()
    if code not in RATES:
      return f"Error: unsupported currency '{currency}' (supported: {', '.join(sorted(RATES))})"
    return json.dumps({"from": "USD", "to": code, "rate": RATES[code]})

  def solution(self):
    return [
      _call("get_accounts")
      + _call(
        "transfer",
        from_account=self.savings,
        to_account=self.checking,
        amount=self.transfer_amount // 100,
      ),
      _call("list_bills") + _call("pay_bill", bill_id=self.bill, from_account=self.checking),
      _call(
        "send_payment", recipient=self.contact, amount=self.gift // 100, from_account=self.checking
      )
      + _call("get_balance", account_id=self.checking),
      f"<answer>{self.expected_answer}</answer>",
    ]
