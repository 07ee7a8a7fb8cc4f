"""Synthetic training prompts for the testbed drafter: many more prompts than the datasets' training splits
hold, in the three families the benchmark asks about, so that the target's answers to them (the drafter's
training data, `ddbench.testbed.distill`) cover math, code and chat without ever touching an evaluation prompt.

- math: grade-school word problems from templates with random names, objects and numbers, formatted as
  GSM8K prompts are (`datasets.format_gsm8k`);
- code: a Python function's signature and docstring, as HumanEval prompts are (`datasets.format_humaneval`);
  the functions are those of this interpreter's standard library that have a docstring of 40-1200
  characters, so the set depends on the Python version (record the written file's sha256 with a run);
- chat: instructions from templates crossed with topics (writing, explaining, advising, comparing, ...).

`synthetic_prompts(counts, seed)` is deterministic for a given Python version; every text is checked
against the held-out split (`heldout.check_training_texts`). Example:

    >>> rows = synthetic_prompts({"math": 2, "code": 1, "chat": 1}, seed=0)
    >>> [row["dataset"] for row in rows]
    ['synth-math', 'synth-math', 'synth-code', 'synth-chat']
    >>> rows[0]["prompt"].endswith("within \\\\boxed{}.")
    True
"""

from __future__ import annotations

import importlib
import inspect
import random
import warnings
from typing import Any

from ddbench import heldout
from ddbench.datasets import format_gsm8k, format_humaneval

FAMILIES = ("math", "code", "chat")

NAMES = (
    "Ava",
    "Ben",
    "Carlos",
    "Dina",
    "Eli",
    "Fatima",
    "Gus",
    "Hana",
    "Ivan",
    "Jade",
    "Kofi",
    "Lena",
    "Mateo",
    "Nora",
    "Omar",
    "Priya",
    "Quinn",
    "Rosa",
    "Sam",
    "Tariq",
    "Uma",
    "Victor",
    "Wen",
    "Yara",
    "Zane",
)
ITEMS = (
    "apples",
    "pencils",
    "stickers",
    "cookies",
    "marbles",
    "books",
    "eggs",
    "cupcakes",
    "stamps",
    "shells",
    "tickets",
    "flowers",
    "cards",
    "bottles",
    "candles",
    "toy cars",
    "beads",
    "muffins",
    "balloons",
    "coins",
)
PLACES = ("the market", "the bakery", "school", "the fair", "the library", "the garden", "the shop", "the park")

MATH = (
    "{a} has {x} {item}. {b} gives {a} {y} more, and then {a} gives away {z}. How many {item} does {a} have now?",
    "{a} buys {x} packs of {item}. Each pack has {y} {item}. {a} uses {z} of them. How many are left?",
    "A box holds {y} {item}. {a} has {x} boxes and sells {z} {item} at {place}. How many {item} remain?",
    "{a} earns ${x} per hour and works {y} hours a week. How much does {a} earn in {z} weeks?",
    "{a} reads {x} pages a day. The book has {big} pages. How many days does it take to finish the book?",
    "{a} has ${big}. {a} spends ${x} on {item} and ${y} on lunch at {place}. How much money is left?",
    "There are {x} students in a class. Each student brings {y} {item}. The teacher adds {z} more. How many "
    "{item} are there in total?",
    "{a} runs {x} miles on Monday, {y} miles on Tuesday and twice as far on Wednesday as on Monday. How many "
    "miles does {a} run in the three days?",
    "{a} and {b} share {big} {item} so that {a} gets {x} more than {b}. How many {item} does {b} get?",
    "A shirt costs ${big}. It is on sale for {pct}% off. {a} buys {y} shirts. How much does {a} pay?",
    "{a} plants {x} rows of flowers with {y} flowers in each row. {z} flowers do not grow. How many flowers grow?",
    "A train travels {x} miles per hour for {y} hours, then {z} miles per hour for 2 hours. How far does it go?",
    "{a} saves ${x} each week. How many weeks will it take {a} to save ${big}?",
    "{a} bakes {x} trays of {item} with {y} on each tray. {a} puts them in bags of {z}. How many full bags "
    "does {a} make?",
    "{a} is {x} years old. {b} is {y} years older than {a}. In {z} years, what will the sum of their ages be?",
    "A tank holds {big} liters of water. It loses {x} liters a day and is refilled with {y} liters every "
    "{z} days. How much water is in it after {z} days?",
    "{a} collects {x} {item} on the first day and {pct}% more on the second day. How many {item} does {a} "
    "collect in the two days?",
    "A rectangle is {x} meters long and {y} meters wide. {a} puts a fence around it that costs ${z} per meter. "
    "What does the fence cost?",
    "{a} has {x} quarters, {y} dimes and {z} nickels. How much money does {a} have in dollars?",
    "At {place}, {item} cost ${x} each or ${y} for a bundle of 5. How much does {a} save by buying {z} bundles "
    "instead of single ones?",
)

FORMS = (
    "a short story",
    "a poem",
    "an email",
    "a blog post",
    "a product description",
    "a speech",
    "a letter",
    "a dialogue",
    "a news report",
    "a haiku",
    "a limerick",
    "a travel guide entry",
)
TOPICS = (
    "the ocean",
    "a rainy day",
    "learning to cook",
    "space travel",
    "a lost dog",
    "friendship",
    "climate change",
    "a new smartphone",
    "the first day of school",
    "a mountain hike",
    "coffee",
    "a robot that learns to paint",
    "recycling",
    "a city at night",
    "the history of tea",
    "winter",
    "a job interview",
    "public libraries",
    "electric cars",
    "a garden in spring",
    "time management",
    "a surprise party",
    "the moon landing",
    "volcanoes",
    "remote work",
    "honeybees",
    "chess",
    "a music festival",
    "sleep",
    "the internet",
    "ancient Rome",
    "a small bakery",
    "rainforests",
)
CONCEPTS = (
    "photosynthesis",
    "inflation",
    "machine learning",
    "the water cycle",
    "compound interest",
    "gravity",
    "the immune system",
    "supply and demand",
    "blockchains",
    "plate tectonics",
    "recursion",
    "the greenhouse effect",
    "vaccines",
    "probability",
    "democracy",
    "black holes",
    "a hash table",
    "the stock market",
    "evolution",
    "electricity",
    "DNA",
    "the French Revolution",
    "encryption",
    "a neural network",
    "interest rates",
    "the scientific method",
    "entropy",
)
AUDIENCES = ("a five-year-old", "a high school student", "a busy manager", "a beginner", "an expert")
ACTIVITIES = (
    "staying productive",
    "learning a language",
    "saving money",
    "running a marathon",
    "public speaking",
    "studying for exams",
    "starting a business",
    "eating healthy",
    "sleeping better",
    "making friends in a new city",
    "writing a novel",
    "keeping plants alive",
)
CHAT = (
    "Write {form} about {topic}.",
    "Write {form} about {topic} in under 150 words.",
    "Explain {concept} to {audience}.",
    "What is {concept}? Give an example.",
    "Give me {n} tips for {activity}.",
    "Compare {concept} and {concept2}. How are they alike and how do they differ?",
    "What are the pros and cons of {topic}?",
    "Summarize the main ideas of {concept} in {n} bullet points.",
    "I want to get better at {activity}. Make me a {n}-week plan.",
    "Describe {topic} from the point of view of {audience}.",
    "Write a persuasive paragraph arguing for {topic}.",
    "List {n} interesting facts about {topic}.",
    "How would you teach {concept} in a one-hour class?",
    "Write {form} that mentions {topic} and {topic2}.",
    "Answer as a friendly assistant: why is {concept} important?",
    'Rewrite this sentence to sound more formal: "{topic} is really cool and everybody should try it."',
    "Create a quiz with {n} questions about {concept}.",
    "What mistakes do people make when {activity}, and how can they avoid them?",
)

STDLIB_MODULES = (
    "string",
    "textwrap",
    "itertools",
    "functools",
    "statistics",
    "math",
    "bisect",
    "heapq",
    "collections",
    "os.path",
    "posixpath",
    "shlex",
    "fnmatch",
    "difflib",
    "random",
    "json",
    "base64",
    "calendar",
    "datetime",
    "fractions",
    "decimal",
    "html",
    "urllib.parse",
    "ipaddress",
    "colorsys",
    "operator",
    "copy",
    "re",
    "glob",
    "csv",
    "email.utils",
    "uuid",
    "zlib",
    "hashlib",
    "secrets",
    "gettext",
    "locale",
    "quopri",
    "binascii",
    "keyword",
    "pprint",
    "reprlib",
    "contextlib",
    "inspect",
    "typing",
    "dataclasses",
    "enum",
    "numbers",
    "argparse",
    "configparser",
    "tokenize",
    "ast",
    "dis",
    "codecs",
    "unicodedata",
    "stringprep",
    "sched",
    "queue",
    "threading",
    "shutil",
    "tempfile",
    "pathlib",
    "zipfile",
    "tarfile",
    "gzip",
    "bz2",
    "lzma",
    "mimetypes",
    "http.cookies",
    "http.client",
    "wsgiref.util",
    "xml.dom.minidom",
    "plistlib",
    "pickletools",
    "filecmp",
    "graphlib",
    "imghdr",
    "sndhdr",
    "turtle",
    "timeit",
    "trace",
    "traceback",
    "warnings",
    "weakref",
    "abc",
    "logging",
    "optparse",
    "getopt",
    "platform",
    "sysconfig",
    "site",
    "runpy",
    "zipimport",
    "pkgutil",
    "symtable",
    "tabnanny",
    "py_compile",
    "compileall",
    "pyclbr",
    "netrc",
    "ftplib",
    "poplib",
    "smtplib",
    "mailbox",
    "cgi",
    "wave",
    "chunk",
    "aifc",
    "audioop",
    "sunau",
    "webbrowser",
    "cmd",
    "code",
    "codeop",
)


def synthetic_prompts(counts: dict[str, int], seed: int = 0) -> list[dict[str, Any]]:
    """`counts[family]` prompts of each family in FAMILIES, as rows {"dataset": "synth-<family>", "index", "prompt"};
    HeldOutError if any text is held out. Texts repeat only where a family has fewer distinct ones (code)."""
    unknown = sorted(set(counts) - set(FAMILIES))
    if unknown:
        raise ValueError(f"unknown prompt families {unknown}; known: {', '.join(FAMILIES)}")
    rng = random.Random(seed)
    rows = []
    for family in FAMILIES:
        make = {"math": _math, "code": _code_prompts, "chat": _chat}[family]
        texts = make(counts.get(family, 0), rng)
        rows += [{"dataset": f"synth-{family}", "index": i, "prompt": text} for i, text in enumerate(texts)]
    heldout.check_training_texts(row["prompt"] for row in rows)
    return rows


def _unique(count: int, make) -> list[str]:
    seen: dict[str, None] = {}
    for _ in range(count * 20):
        if len(seen) == count:
            break
        seen.setdefault(make(), None)
    return list(seen)


def _math(count: int, rng: random.Random) -> list[str]:
    def make() -> str:
        a, b = rng.sample(NAMES, 2)
        x, y, z = rng.randint(2, 60), rng.randint(2, 40), rng.randint(2, 12)
        values = dict(
            a=a,
            b=b,
            x=x,
            y=y,
            z=z,
            big=rng.randint(8, 90) * 10,
            pct=rng.choice((10, 20, 25, 30, 40, 50)),
            item=rng.choice(ITEMS),
            place=rng.choice(PLACES),
        )
        return format_gsm8k(rng.choice(MATH).format(**values))

    return _unique(count, make)


def _chat(count: int, rng: random.Random) -> list[str]:
    def make() -> str:
        concept, concept2 = rng.sample(CONCEPTS, 2)
        topic, topic2 = rng.sample(TOPICS, 2)
        values = dict(
            form=rng.choice(FORMS),
            topic=topic,
            topic2=topic2,
            concept=concept,
            concept2=concept2,
            audience=rng.choice(AUDIENCES),
            activity=rng.choice(ACTIVITIES),
            n=rng.randint(3, 7),
        )
        return rng.choice(CHAT).format(**values)

    return _unique(count, make)


def _code_prompts(count: int, rng: random.Random) -> list[str]:
    functions = stdlib_functions()
    rng.shuffle(functions)
    return [format_humaneval(functions[i % len(functions)]) for i in range(count)] if functions else []


def stdlib_functions() -> list[str]:
    """`def name(signature):` plus the docstring, for each documented public function (or method of a class) of
    STDLIB_MODULES that this interpreter has (sorted, so the list is the same on every run of one Python version)."""
    found: dict[str, None] = {}
    for module_name in STDLIB_MODULES:
        try:
            with warnings.catch_warnings():  # deprecated modules still document their functions
                warnings.simplefilter("ignore")
                module = importlib.import_module(module_name)
        except Exception:  # noqa: BLE001 - a module this Python lacks (or refuses to import) is skipped
            continue
        members = sorted(vars(module).items())
        for _, cls in list(members):  # and the methods of the module's own classes
            if inspect.isclass(cls) and cls.__module__ == module.__name__:
                members += sorted(vars(cls).items())
        for name, value in members:
            if name.startswith("_") or not inspect.isfunction(value):
                continue
            doc = inspect.getdoc(value) or ""
            if not 40 <= len(doc) <= 1200:
                continue
            try:
                signature = str(inspect.signature(value))
            except (TypeError, ValueError):
                continue
            body = "\n".join(("    " + line).rstrip() for line in doc.splitlines())
            found.setdefault(f'def {name}{signature}:\n    """\n{body}\n    """\n', None)
    return sorted(found)
