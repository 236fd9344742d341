#!/usr/bin/env python3
"""Migrate a single-file experiment (``experiments/<paper>.toml``, or a reproduction's copy of one) to an
experiment folder: ``experiment.toml`` (the run matrix in ``[[group]]``s with their defaults, the claims likewise)
and ``notes.md`` (the description, the differences and the figures' texts, by heading).

Usage: scripts/migrate_experiment.py FILE.toml [OUT_DIR]   (default OUT_DIR: beside FILE, named after it; a file
named experiment.toml is migrated in place). It checks that the folder reads back into the same run entries,
claims and prose, in the same order, and refuses to write otherwise. Comments are kept: a file's opening ones at
the top, those above a table above it, those after a value above its entry.
"""

from __future__ import annotations

import json
import re
import sys
import tomllib
from pathlib import Path

WIDTH = 156  # a value's line past this is split: a table into dotted keys, a string continued, a list by item
BARE = re.compile(r"^[A-Za-z0-9_-]+$")
HEADER = re.compile(r"^\[\[?([A-Za-z0-9_.]+)\]\]?\s*(#.*)?$")
PROSE = ("description", "differences")
OPEN = '"""'


def key(k: str) -> str:
    return k if BARE.match(k) else json.dumps(k)


def string(s: str) -> str:
    out = json.dumps(s, ensure_ascii=False)
    return out.replace("\\u007f", "\\u007F")


def value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return string(v)
    if isinstance(v, float):
        return repr(v).replace("inf", "inf")
    if isinstance(v, int):
        return str(v)
    if isinstance(v, list):
        return "[" + ", ".join(value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{key(k)} = {value(x)}" for k, x in v.items()) + " }" if v else "{}"
    raise TypeError(type(v))


def pair(k: str, v, comment: str = "") -> list[str]:
    """``k = v`` on as many lines as it needs to stay within WIDTH."""
    line = f"{k} = {value(v)}"
    tail = f"  {comment}" if comment else ""
    if len(line + tail) <= 160 and len(line) <= WIDTH or not isinstance(v, (dict, str, list)):
        return [line + tail]
    lead = [comment] if comment else []
    if isinstance(v, dict) and v:
        return lead + [x for sk, sv in v.items() for x in pair(f"{k}.{key(sk)}", sv)]
    if isinstance(v, list) and len(v) > 1:
        return lead + [f"{k} = ["] + [f"  {value(x)}," for x in v] + ["]"]
    if isinstance(v, str) and "\n" not in v and '"""' not in v and not v.endswith(("\\", '"')) and "  " not in v:
        lines, cur = [], f'{k} = """'
        for w in v.split(" "):  # a continued line: the backslash drops the break and the next line's indentation
            if not cur.endswith(OPEN) and len(cur) + len(json.dumps(w, ensure_ascii=False)) > WIDTH - 2:
                lines.append(cur)
                cur = json.dumps(w, ensure_ascii=False)[1:-1]
            else:
                sep = "" if cur.endswith(OPEN) else " "
                cur = f"{cur}{sep}{json.dumps(w, ensure_ascii=False)[1:-1]}"
        lines.append(cur)
        if len(lines) > 1:
            return lead + [f"{x} \\" for x in lines[:-1]] + [f'{lines[-1]}"""']
    return lead + [line]


def comments(text: str) -> dict:
    """The comments of a TOML file: ``top`` (its opening lines), and per table (``("runs", 3)``) those above it
    (``above``) and those after a value (``inline``, by key)."""
    lines = text.splitlines()
    out: dict = {"top": [], "above": {}, "inline": {}}
    counts: dict[str, int] = {}
    pending: list[str] = []
    table = None
    started = False
    for line in lines:
        s = line.strip()
        m = HEADER.match(s)
        if m:
            name = m.group(1)
            idx = counts.get(name, 0)
            counts[name] = idx + 1 if s.startswith("[[") else idx
            table = (name, idx) if s.startswith("[[") else (name, 0)
            if pending:
                if not started:
                    out["top"] = pending
                else:
                    out["above"][table] = pending
            pending, started = [], True
            continue
        if s.startswith("#"):
            pending.append(s)
            continue
        if not s:
            if not started and pending:
                out["top"], pending = pending + [""], []
            continue
        pending = [] if started else pending
        k, eq, rest = line.partition("=")
        c = _inline_comment(rest) if eq else None
        if c and table is not None:
            out["inline"].setdefault(table, {})[k.strip().strip('"')] = c
    out["top"] = [x for x in out["top"]]
    while out["top"] and out["top"][-1] == "":
        out["top"].pop()
    return out


def _inline_comment(rest: str) -> str | None:
    quote = None
    i = 0
    while i < len(rest):
        ch = rest[i]
        if quote:
            if ch == "\\" and quote == '"':
                i += 2
                continue
            if ch == quote:
                quote = None
        elif ch in "\"'":
            quote = ch
        elif ch == "#":
            return rest[i:].strip()
        i += 1
    return None


def common(dicts: list) -> dict:
    """What every table of ``dicts`` holds alike, key by key (nested tables intersected)."""
    first, out = dicts[0], {}
    for k, v in first.items():
        others = [d.get(k, _NONE) for d in dicts[1:]]
        if isinstance(v, dict) and all(isinstance(o, dict) for o in others):
            sub = common([v, *others])
            if sub:
                out[k] = sub
        elif all(o == v and type(o) is type(v) for o in others):
            out[k] = v
    return out


_NONE = object()


def minus(d: dict, c: dict) -> dict:
    out = {}
    for k, v in d.items():
        if k in c and isinstance(v, dict) and isinstance(c[k], dict):
            rest = minus(v, c[k])
            if rest:
                out[k] = rest
        elif k not in c:
            out[k] = v
    return out


def leaves(d: dict, path: tuple = ()) -> list[tuple[tuple, object]]:
    return [x for k, v in d.items() for x in (leaves(v, path + (k,)) if isinstance(v, dict) and v
                                               else [(path + (k,), v)])]


def put(d: dict, path: tuple, v) -> None:
    for k in path[:-1]:
        d = d.setdefault(k, {})
    d[path[-1]] = v


def dump(x) -> str:
    return json.dumps(x, default=str)


def factor(chunk: list[dict], shared: set[str]) -> tuple[dict, list[dict]]:
    """The defaults a run of entries shares (those that read back in each entry's written order, leaf by leaf)
    and each entry without them."""
    from edgeml.reproduce.load import _merged

    if len(chunk) == 1:
        return {}, list(chunk)
    defaults = {}
    for k in shared:
        vals = [e.get(k, _NONE) for e in chunk]
        if any(v is _NONE for v in vals):
            continue
        if all(isinstance(v, dict) for v in vals):
            c = common(vals)
            if c:
                defaults[k] = c
        elif all(dump(v) == dump(vals[0]) for v in vals):
            defaults[k] = vals[0]
    for k in list(defaults):
        if isinstance(defaults[k], dict):
            kept: dict = {}
            for path, v in leaves(defaults[k]):
                trial = json.loads(dump(kept))
                put(trial, path, v)
                if all(dump(_merged(trial, minus(e[k], trial))) == dump(e[k]) for e in chunk):
                    kept = trial
            if kept:
                defaults[k] = kept
            else:
                del defaults[k]
    defaults = {k: defaults[k] for k in chunk[0] if k in defaults}
    members = []
    for e in chunk:
        m = {}
        for k, v in e.items():
            if k in defaults and isinstance(defaults[k], dict):
                rest = minus(v, defaults[k])
                if rest:
                    m[k] = rest
            elif k not in defaults:
                m[k] = v
        members.append(m)
    return defaults, members


def inline_form(members: list[dict]) -> bool:
    """Whether each entry fits one line (``runs = [ { ... }, ]``)."""
    return all(len(f"  {value(m)},") <= 160 and "diagnosis" not in m for m in members)


def size(defaults: dict, members: list[dict]) -> int:
    """The lines a group takes (its header only where it has defaults: neighbours without share one)."""
    def lines(d: dict) -> int:
        return sum(len(pair(key(k), v)) for k, v in d.items())
    head = 1 + lines(defaults)
    if inline_form(members):
        return head + 2 + len(members)
    return (head if defaults else 0) + sum(1 + lines(m) for m in members)


def grouped(entries: list[dict], shared: set[str]) -> list[tuple[dict, list[dict]]]:
    """Consecutive entries in groups, each where its defaults save lines (greedy: each entry joins the group
    before it, starts one, or starts one with the entry before it, whichever is shortest)."""
    chunks: list[list[dict]] = []
    for e in entries:
        if not chunks:
            chunks.append([e])
            continue
        cur = chunks[-1]
        options = {"join": size(*factor(cur + [e], shared)) - size(*factor(cur, shared)),
                   "new": size(*factor([e], shared))}
        if len(cur) > 1:
            options["pair"] = (size(*factor(cur[:-1], shared)) + size(*factor([cur[-1], e], shared))
                               - size(*factor(cur, shared)))
        best = min(options, key=options.get)
        if best == "join":
            cur.append(e)
        elif best == "new":
            chunks.append([e])
        else:
            chunks[-1] = cur[:-1]
            chunks.append([cur[-1], e])
    merged: list[tuple[dict, list[dict]]] = []
    for defaults, members in (factor(c, shared) for c in chunks):  # neighbours without defaults share one group
        if not defaults and merged and not merged[-1][0]:
            merged[-1][1].extend(members)
        else:
            merged.append((defaults, members))
    return merged


def migrate(src: Path, doc: dict | None = None) -> tuple[str, str]:
    """The folder's experiment.toml and notes.md for the file ``src`` (``doc``: its tables, edited; default:
    as read)."""
    text = src.read_text()
    doc = doc if doc is not None else tomllib.loads(text)
    notes_of = comments(text)
    lines = [*notes_of["top"], ""] if notes_of["top"] else []

    def table(name: str, idx: int, body: dict, header: str, skip=()) -> None:
        above = notes_of["above"].get((name, idx), [])
        inline = notes_of["inline"].get((name, idx), {})
        lines.extend([*above, header])
        for k, v in body.items():
            if k not in skip:
                lines.extend(pair(key(k), v, inline.get(k, "")))

    exp = dict(doc.get("experiment", {}))
    notes = [f"# {exp.get('title') or src.stem}", ""]
    for k in PROSE:
        if exp.get(k, "").strip():
            notes += [f"## {k}", "", exp[k].strip(), ""]
    if exp:
        table("experiment", 0, exp, "[experiment]", skip=PROSE)
        lines.append("")
    for name in ("settings", "quick"):
        if name in doc:
            table(name, 0, doc[name], f"[{name}]")
            lines.append("")
    for i, f in enumerate(doc.get("figures", [])):
        table("figures", i, f, "[[figures]]", skip=("text",))
        if f.get("text", "").strip():
            notes += [f"## {f['id']}", "", f["text"].strip(), ""]
        lines.append("")
    for kind, shared in (("runs", {"algorithm", "config", "quick", "sweep", "quick_sweep", "figure", "seeds",
                                         "quick_seeds"}),
                               ("claims", {"metric", "run", "baseline", "kind", "op", "paper_value", "direction",
                                           "effect", "seeds", "targets", "rule", "figure", "margin", "headline",
                                           "window"})):
        index = 0
        for defaults, members in grouped(doc.get(kind, []), shared):
            lines.extend(["[[group]]", *[x for k, v in defaults.items() for x in pair(key(k), v)]])
            if inline_form(members):  # an entry a line: what differs from the group's defaults
                lines.append(f"{kind} = [")
                for m in members:
                    notes_here = notes_of["above"].get((kind, index), [])
                    inline = notes_of["inline"].get((kind, index), {})
                    lines.extend(f"  {c}" for c in [*notes_here, *(c for k, c in inline.items() if k in m)])
                    lines.append(f"  {value(m)},")
                    index += 1
                lines.extend(["]", ""])
                continue
            for m in members:
                header = f"[[group.{kind}]]"
                sub = {k: v for k, v in m.items() if kind == "claims" and k == "diagnosis"}
                table(kind, index, {k: v for k, v in m.items() if k not in sub}, header)
                for k, v in sub.items():  # a diagnosis key by key: its text continues over lines
                    for sk, sv in v.items():
                        lines.extend(pair(f"{key(k)}.{key(sk)}", sv))
                index += 1
            lines.append("")
    return "\n".join(lines).rstrip() + "\n", "\n".join(notes).rstrip() + "\n"


def check(src: Path, toml_text: str, notes_text: str, old: dict | None = None) -> None:
    """The folder reads back into the same entries, claims and prose, in order: refuse to write otherwise."""
    from edgeml.reproduce.load import NOTE_KEYS, _entries

    old = old if old is not None else tomllib.loads(src.read_text())
    new = tomllib.loads(toml_text)
    top = [x for x in old if x not in ("runs", "claims")]
    # runs and claims interleave with no groups in the old file: the new file holds them in groups
    old_top = {k: v for k, v in old.items() if k in top}
    new_top = {k: v for k, v in new.items() if k != "group" and k not in ("runs", "claims")}
    sections = {}
    cur = None
    for line in notes_text.splitlines():
        if line.startswith("## "):
            cur = line[3:].strip()
            sections[cur] = []
        elif cur:
            sections[cur].append(line)
    sections = {k: "\n".join(v).strip() for k, v in sections.items()}
    for k in NOTE_KEYS:
        if k in sections:
            new_top["experiment"][k] = sections[k]
    for f in new_top.get("figures", []):
        if f["id"] in sections:
            f["text"] = sections[f["id"]]

    def norm(d):  # prose compares stripped (the report strips it)
        d = json.loads(dump(d))
        for k in NOTE_KEYS:
            if k in d.get("experiment", {}):
                d["experiment"][k] = d["experiment"][k].strip()
        for f in d.get("figures", []):
            if "text" in f:
                f["text"] = f["text"].strip()
        return d

    assert json.dumps(norm(old_top), sort_keys=True) == json.dumps(norm(new_top), sort_keys=True), \
        f"{src}: the top-level tables differ"
    for kind in ("runs", "claims"):
        # an entry's keys in any order (they are fields); its tables' keys in the order written (layers merge so)
        a = [dump({k: e[k] for k in sorted(e)}) for e in old.get(kind, [])]
        b = [dump({k: e[k] for k in sorted(e)}) for e in _entries(src, new, kind)]
        assert a == b, f"{src}: the {kind} differ: {next((x, y) for x, y in zip(a, b) if x != y)}"


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3) or not argv[1].endswith(".toml") or not Path(argv[1]).is_file():
        print("usage: scripts/migrate_experiment.py FILE.toml [OUT_DIR]", file=sys.stderr)
        return 2
    src = Path(argv[1])
    out = Path(argv[2]) if len(argv) == 3 else src.parent if src.name == "experiment.toml" else src.with_suffix("")
    toml_text, notes_text = migrate(src)
    check(src, toml_text, notes_text)
    out.mkdir(parents=True, exist_ok=True)
    (out / "experiment.toml").write_text(toml_text)
    (out / "notes.md").write_text(notes_text)
    print(f"{src} -> {out}/ ({len(toml_text.splitlines())} + {len(notes_text.splitlines())} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
