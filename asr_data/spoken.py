"""Numbers, ordinals, years, dates, times and digit strings written as the words a speaker says.

The recogniser's units spell lowercase a-z, the apostrophe and the space (models/demo_en/units.txt), so every
transcript is words only: "1984" becomes "nineteen eighty four", "21st" "twenty first". No "and" inside
numbers and no hyphens, matching the old corpus (scripts/make_corpus.py).
"""

from __future__ import annotations

import random

ONES = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
TEENS = ("ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen",
         "nineteen")
TENS = ("", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety")
SCALES = ((10**12, "trillion"), (10**9, "billion"), (10**6, "million"), (1000, "thousand"), (100, "hundred"))
ORDINAL_WORDS = {"one": "first", "two": "second", "three": "third", "five": "fifth", "eight": "eighth",
                 "nine": "ninth", "twelve": "twelfth"}
MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
          "november", "december")
DAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")


def cardinal(n: int) -> str:
    """Non-negative integer in words: 1205 -> 'one thousand two hundred five'."""
    if n < 0:
        return "minus " + cardinal(-n)
    if n < 10:
        return ONES[n]
    if n < 20:
        return TEENS[n - 10]
    if n < 100:
        return TENS[n // 10] + ("" if n % 10 == 0 else " " + ONES[n % 10])
    for value, word in SCALES:
        if n >= value:
            head, rest = divmod(n, value)
            return f"{cardinal(head)} {word}" + ("" if rest == 0 else " " + cardinal(rest))
    raise AssertionError(n)  # unreachable: every n >= 100 meets a scale


def ordinal(n: int) -> str:
    """1 -> 'first', 22 -> 'twenty second', 100 -> 'one hundredth'."""
    words = cardinal(n).split()
    last = words[-1]
    if last in ORDINAL_WORDS:
        words[-1] = ORDINAL_WORDS[last]
    elif last.endswith("y"):
        words[-1] = last[:-1] + "ieth"
    else:
        words[-1] = last + "th"
    return " ".join(words)


def year(n: int) -> str:
    """Years as read aloud: 1984 'nineteen eighty four', 1900 'nineteen hundred', 2005 'two thousand five',
    2024 'twenty twenty four', 1805 'eighteen oh five'."""
    if n < 1000 or n >= 10000:
        return cardinal(n)
    if 2000 <= n < 2010:
        return cardinal(n)
    head, tail = divmod(n, 100)
    if tail == 0:
        return f"{cardinal(head)} hundred"
    if tail < 10:
        return f"{cardinal(head)} oh {ONES[tail]}"
    return f"{cardinal(head)} {cardinal(tail)}"


def digit_string(digits: str, zero: str = "zero") -> str:
    """'4071' -> 'four zero seven one' (or 'oh' for zero, as phone numbers are often read)."""
    return " ".join(zero if d == "0" else ONES[int(d)] for d in digits)


def decimal(text: str) -> str:
    """'3.14' -> 'three point one four'."""
    whole, _, frac = text.partition(".")
    return f"{cardinal(int(whole or '0'))} point {digit_string(frac)}"


def random_date(rng: random.Random) -> str:
    """A date in one of the ways people say them."""
    m, d, y = rng.choice(MONTHS), rng.randint(1, 28), rng.randint(1700, 2040)
    style = rng.randrange(5)
    if style == 0:
        return f"the {ordinal(d)} of {m} {year(y)}"
    if style == 1:
        return f"{m} {ordinal(d)} {year(y)}"
    if style == 2:
        return f"{rng.choice(DAYS)} the {ordinal(d)} of {m}"
    if style == 3:
        return f"{m} {year(y)}"
    return f"{m} the {ordinal(d)}"


def random_time(rng: random.Random) -> str:
    h, m = rng.randint(1, 12), rng.randrange(60)
    style = rng.random()
    if m == 0:
        return f"{cardinal(h)} o'clock" if style < 0.5 else f"{cardinal(h)} {rng.choice(('a m', 'p m'))}"
    if m in (15, 30, 45) and style < 0.4:
        return {15: f"quarter past {cardinal(h)}", 30: f"half past {cardinal(h)}",
                45: f"quarter to {cardinal(h % 12 + 1)}"}[m]
    minutes = f"oh {ONES[m]}" if m < 10 else cardinal(m)
    return f"{cardinal(h)} {minutes}"


def random_number(rng: random.Random) -> str:
    """A number as said in running text: small counts most, then large amounts, years, decimals, money."""
    kind = rng.random()
    if kind < 0.35:
        return cardinal(rng.randint(0, 100))
    if kind < 0.55:
        return cardinal(rng.randint(100, 10**rng.randint(3, 7)))
    if kind < 0.65:
        return year(rng.randint(1500, 2040))
    if kind < 0.75:
        return ordinal(rng.randint(1, 120))
    if kind < 0.85:
        return decimal(f"{rng.randint(0, 99)}.{rng.randint(0, 99)}")
    if kind < 0.93:
        amount = rng.randint(1, 9999)
        cents = rng.randint(1, 99) if rng.random() < 0.3 else 0
        unit = "dollar" if amount == 1 else "dollars"
        return f"{cardinal(amount)} {unit}" + (f" and {cardinal(cents)} cents" if cents else "")
    return f"{cardinal(rng.randint(1, 100))} percent"


def random_digits(rng: random.Random, lo: int = 3, hi: int = 10) -> str:
    """A digit string spoken digit by digit (phone numbers, codes, card numbers)."""
    n = rng.randint(lo, hi)
    return digit_string("".join(str(rng.randrange(10)) for _ in range(n)),
                        zero="oh" if rng.random() < 0.25 else "zero")
