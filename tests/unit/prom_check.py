#!/usr/bin/env python3
"""A strict check of the Prometheus text exposition format, version 0.0.4
(what node_exporter's textfile collector reads), for r2sock-stat
--prometheus. Stricter than the format where r2sock-stat promises more:

  - every line is a HELP, a TYPE or a sample (no blank lines, no other
    comments, no "# EOF": that belongs to OpenMetrics, not 0.0.4);
  - metric and label names match the format's syntax, label names do not
    start with "__", no label repeats within a sample;
  - label values are quoted, with only \\\\, \\" and \\n as escapes; HELP
    text has only \\\\ and \\n;
  - each family has one HELP and one TYPE (counter or gauge), both before
    its first sample; a family's samples are contiguous;
  - counters are named *_total, their values are non-negative integers;
    every value parses as a number; no series (name and label set) repeats;
  - the text is UTF-8 and ends with a newline (or is empty).

    prom_check.py FILE [--has 'NAME{L="V",...} VALUE']... [--type NAME=KIND]...

Each --has names a series that must be present with exactly that label set
(in any order) and value; VALUE may be written >=N. Each --type names a
family that must be present with that TYPE (counter or gauge). Prints
"prom_check: N families, M samples" and exits 0, or says what is wrong,
with the line number, and exits 1. Importable: parse(text) returns
{(name, frozenset(labels.items())): value_text}.
"""
import argparse
import math
import re
import sys

METRIC = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
TYPES = ("counter", "gauge")


class FormatError(Exception):
    pass


def unescape(s, escapes, what):
    out, i = [], 0
    while i < len(s):
        c = s[i]
        if c == "\\":
            if i + 1 >= len(s) or s[i + 1] not in escapes:
                raise FormatError(f"{what}: invalid escape {s[i:i + 2]!r}")
            out.append(escapes[s[i + 1]])
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def parse_value(text, what):
    if text in ("NaN", "+Inf", "-Inf", "Inf"):
        return float(text.replace("Inf", "inf"))
    if not re.fullmatch(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?", text):
        raise FormatError(f"{what}: value {text!r} is not a number")
    return float(text)


def parse_sample(line):
    """(name, {label: value}, value_text) of one sample line."""
    m = METRIC.match(line)
    if not m:
        raise FormatError("a sample must start with a metric name")
    name, i, labels = m.group(0), m.end(), {}
    if i < len(line) and line[i] == "{":
        i += 1
        while True:
            if line[i:i + 1] == "}":
                i += 1
                break
            m = LABEL.match(line, i)
            if not m:
                raise FormatError(f"bad label name at column {i + 1}")
            lname, i = m.group(0), m.end()
            if lname.startswith("__"):
                raise FormatError(f"label name {lname!r} is reserved (starts with __)")
            if lname in labels:
                raise FormatError(f"label {lname!r} repeats")
            if line[i:i + 2] != '="':
                raise FormatError(f"label {lname!r}: expected =\" at column {i + 1}")
            i += 2
            m = re.compile(r'((?:[^"\\]|\\.)*)"').match(line, i)
            if not m:
                raise FormatError(f"label {lname!r}: unterminated value")
            labels[lname] = unescape(m.group(1), {"\\": "\\", '"': '"', "n": "\n"}, f"label {lname!r}")
            i = m.end()
            if line[i:i + 1] == ",":
                i += 1
            elif line[i:i + 1] != "}":
                raise FormatError(f"expected , or }} after label {lname!r} at column {i + 1}")
    rest = line[i:]
    if not rest.startswith(" ") or rest.startswith("  "):
        raise FormatError("expected one space before the value")
    fields = rest[1:].split(" ")
    if len(fields) not in (1, 2) or "" in fields:
        raise FormatError(f"expected a value and an optional timestamp, saw {rest[1:]!r}")
    parse_value(fields[0], name)
    if len(fields) == 2 and not re.fullmatch(r"-?\d+", fields[1]):
        raise FormatError(f"timestamp {fields[1]!r} is not an integer")
    return name, labels, fields[0]


def parse(text, types_out=None):
    if text and not text.endswith("\n"):
        raise FormatError("line %d: the text does not end with a newline" % (text.count("\n") + 1))
    helps, types, series = {}, {}, {}
    done, current = set(), None  # families whose samples are over; the one being written
    for n, line in enumerate(text.split("\n")[:-1], 1):
        try:
            if "\r" in line:
                raise FormatError("carriage return")
            if line.startswith("#"):
                m = re.fullmatch(r"# (HELP|TYPE) (\S+) (.*)", line) or re.fullmatch(r"# (HELP) (\S+)()", line)
                if not m:
                    raise FormatError(f"a comment line that is neither HELP nor TYPE: {line!r}")
                kind, name, rest = m.groups()
                if not METRIC.fullmatch(name):
                    raise FormatError(f"bad metric name {name!r}")
                if name in done or name == current:
                    raise FormatError(f"{kind} for {name} after its samples")
                if kind == "HELP":
                    if name in helps:
                        raise FormatError(f"second HELP for {name}")
                    helps[name] = unescape(rest, {"\\": "\\", "n": "\n"}, f"HELP {name}")
                else:
                    if name in types:
                        raise FormatError(f"second TYPE for {name}")
                    if rest not in TYPES:
                        raise FormatError(f"TYPE {name}: {rest!r} (r2sock-stat writes counter or gauge)")
                    if rest == "counter" and not name.endswith("_total"):
                        raise FormatError(f"counter {name} does not end in _total")
                    types[name] = rest
                if current is not None:
                    done.add(current)
                    current = None
                continue
            if not line:
                raise FormatError("blank line")
            name, labels, value = parse_sample(line)
            if name not in types or name not in helps:
                raise FormatError(f"sample of {name} before (or without) its HELP and TYPE")
            if name in done:
                raise FormatError(f"samples of {name} are not contiguous")
            if current is not None and current != name:
                done.add(current)
            current = name
            if types[name] == "counter" and not re.fullmatch(r"\d+", value):
                raise FormatError(f"counter {name}: {value!r} is not a non-negative integer")
            if math.isnan(parse_value(value, name)) and types[name] == "counter":
                raise FormatError(f"counter {name} is NaN")
            key = (name, frozenset(labels.items()))
            if key in series:
                raise FormatError(f"series repeats: {line}")
            series[key] = value
        except FormatError as e:
            raise FormatError(f"line {n}: {e}") from None
    if types_out is not None:
        types_out.update(types)
    return series


def check_has(series, spec):
    left, _, want = spec.rpartition(" ")
    name, labels, _ = parse_sample(left + " 0")
    got = series.get((name, frozenset(labels.items())))
    if got is None:
        near = [f"{n}{dict(l)}" for (n, l) in series if n == name][:8]
        raise FormatError(f"no series {left}; series of {name}: {near}")
    ok = int(got) >= int(want[2:]) if want.startswith(">=") else got == want
    if not ok:
        raise FormatError(f"{left} is {got}, expected {want}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--has", action="append", default=[])
    ap.add_argument("--type", action="append", default=[])
    a = ap.parse_args()
    try:
        with open(a.file, "rb") as f:
            raw = f.read()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise FormatError(f"not UTF-8: {e}") from None
        types = {}
        series = parse(text, types)
        for spec in a.has:
            check_has(series, spec)
        for spec in a.type:
            name, _, kind = spec.partition("=")
            if types.get(name) != kind:
                raise FormatError(f"family {name} is of TYPE {types.get(name)}, expected {kind}")
    except FormatError as e:
        print(f"prom_check: {a.file}: {e}", file=sys.stderr)
        return 1
    families = {name for name, _ in series}
    print(f"prom_check: {len(families)} families, {len(series)} samples")
    return 0


if __name__ == "__main__":
    sys.exit(main())
