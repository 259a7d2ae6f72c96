"""The demo corpus's everyday template sentences ("the train to the station leaves at half past seven"),
written as the words a speaker says. scripts/make_corpus.py made the bundled demo model's corpus from them, and
scripts/gen_corpus.py mixes a small share of them into the open-English data. The draws are part of the
corpora's definition: the same seed gives the same sentences.
"""

from __future__ import annotations

import random

from asr_data.spoken import DAYS, MONTHS, ONES, cardinal as say_number  # numbers 0..9999 without 'and'

NAMES = ("anna", "ben", "carla", "david", "emma", "frank", "grace", "henry", "lucy", "mark", "nina", "oscar",
         "paul", "rosa", "sam", "tom", "maria", "john", "kate", "peter")
PLACES = ("the station", "the office", "the park", "the library", "the market", "the school", "the hospital",
          "the airport", "the bank", "the shop", "the kitchen", "the garden", "the beach", "the hotel",
          "the museum", "the city centre", "the bus stop", "the cinema", "the restaurant", "home")
THINGS = ("the keys", "my phone", "a coffee", "some bread", "the tickets", "a new car", "the newspaper",
          "a cup of tea", "the umbrella", "my bag", "the letter", "a glass of water", "the computer",
          "some apples", "the milk", "a sandwich", "the book", "my jacket", "the map", "a small table",
          "the red box", "two chairs", "the blue shirt", "fresh fruit", "the window")
COLOURS = ("red", "blue", "green", "yellow", "black", "white", "brown", "orange", "grey", "pink")
ADJECTIVES = ("good", "bad", "big", "small", "hot", "cold", "new", "old", "quick", "slow", "happy", "tired",
              "busy", "quiet", "early", "late", "cheap", "expensive", "easy", "difficult", "warm", "clean")
VERBS_PAST = ("bought", "found", "lost", "forgot", "took", "brought", "sold", "needed", "wanted", "opened",
              "closed", "cleaned", "moved", "washed", "carried", "ordered")
WEATHER = ("sunny", "rainy", "windy", "cloudy", "cold", "warm", "foggy", "hot")


def say_time(rng: random.Random) -> str:
    h = rng.randint(1, 12)
    m = rng.choice((0, 5, 10, 15, 20, 25, 30, 35, 40, 45, 50, 55, rng.randint(1, 59)))
    style = rng.random()
    if m == 0:
        return f"{say_number(h)} o'clock" if style < 0.6 else say_number(h)
    if m == 15 and style < 0.4:
        return f"quarter past {say_number(h)}"
    if m == 30 and style < 0.4:
        return f"half past {say_number(h)}"
    if m < 10:
        return f"{say_number(h)} oh {say_number(m)}"
    return f"{say_number(h)} {say_number(m)}"


def digits(rng: random.Random, lo: int, hi: int) -> str:
    return " ".join(ONES[rng.randint(0, 9)] for _ in range(rng.randint(lo, hi)))


def sentence(rng: random.Random) -> str:
    """One random everyday sentence, already written as the words espeak should say."""
    c = rng.randrange(16)
    n = rng.choice(NAMES)
    if c == 0:
        return f"my phone number is {digits(rng, 4, 8)}"
    if c == 1:
        return f"the train to {rng.choice(PLACES)} leaves at {say_time(rng)}"
    if c == 2:
        return f"{n} {rng.choice(VERBS_PAST)} {rng.choice(THINGS)} on {rng.choice(DAYS)}"
    if c == 3:
        return f"please meet me at {rng.choice(PLACES)} at {say_time(rng)}"
    if c == 4:
        return f"i need {say_number(rng.randint(2, 99))} {rng.choice(COLOURS)} {rng.choice(('boxes', 'cups', 'pens', 'bags', 'chairs', 'books'))}"
    if c == 5:
        return f"the weather is {rng.choice(WEATHER)} and {rng.choice(ADJECTIVES)} today"
    if c == 6:
        return f"it costs {say_number(rng.randint(1, 999))} dollars"
    if c == 7:
        return f"{n} is {rng.choice(('very', 'quite', 'not', 'so', 'really'))} {rng.choice(ADJECTIVES)}"
    if c == 8:
        return f"the meeting is on {rng.choice(DAYS)} the {say_number(rng.randint(1, 28))} of {rng.choice(MONTHS)}"
    if c == 9:
        return f"can you bring {rng.choice(THINGS)} to {rng.choice(PLACES)}"
    if c == 10:
        return f"room {say_number(rng.randint(1, 999))} is on floor {say_number(rng.randint(1, 40))}"
    if c == 11:
        return f"{n} and {rng.choice(NAMES)} went to {rng.choice(PLACES)} at {say_time(rng)}"
    if c == 12:
        return f"the code is {digits(rng, 3, 6)}"
    if c == 13:
        return f"i left {rng.choice(THINGS)} at {rng.choice(PLACES)} {rng.choice(('yesterday', 'today', 'this morning', 'last night', 'on ' + rng.choice(DAYS)))}"
    if c == 14:
        return f"it is {say_time(rng)} and {n} is {rng.choice(('late', 'early', 'here', 'at ' + rng.choice(PLACES)))}"
    return f"there are {say_number(rng.randint(2, 9999))} people in {rng.choice(PLACES)}"
