#!/usr/bin/python3
"""Checks that every shmap-coordinator / shmap-worker / shmapctl command line
written in the deployment files and docs uses options the programs accept
(as listed by their --help), that shmapctl options follow a subcommand, and
that every SHMAP_* variable they name is one a program reads.

  check_deploy.py COORDINATOR WORKER SHMAPCTL FILE...

FILE may be YAML (container command/args/entrypoint/healthcheck, plus any
comment lines) or anything else (every line, backslash continuations joined).
Prints one line per command line and "N passed, N failed"; exit 1 on a
problem, 77 (skipped) without python3-yaml.
"""
import re
import shlex
import subprocess
import sys

try:
    import yaml
except ImportError:
    print("skipped: python3-yaml is not installed (apt-get install python3-yaml)")
    sys.exit(77)

PROGS = ("shmap-coordinator", "shmap-worker", "shmapctl")
SEPS = {"&&", "||", "|", ";", "&", "(", ")", "\\"}
PREFIX = {"exec", "--", "env", "sudo", "time", "timeout", "nohup", "$", "-c"}


def help_text(argv):
    r = subprocess.run(argv + ["--help"], capture_output=True, text=True, timeout=30)
    return r.stdout + r.stderr


def yaml_commands(node):
    """Yields command lines (strings) found in a YAML document."""
    if isinstance(node, dict):
        parts = []
        for key in ("entrypoint", "command", "args", "test"):
            v = node.get(key)
            if isinstance(v, list):
                parts += [str(x) for x in v if x not in ("CMD", "CMD-SHELL")]
            elif isinstance(v, str):
                parts.append(v)
        if parts:
            yield " ".join(shlex.quote(p) if " " not in p else p for p in parts)
        for v in node.values():
            yield from yaml_commands(v)
    elif isinstance(node, list):
        for v in node:
            yield from yaml_commands(v)


def text_commands(text):
    """Yields logical lines (continuations joined, comment markers stripped)."""
    buf = ""
    for raw in text.splitlines():
        line = re.sub(r"^\s*#\s?", "", raw)
        if line.rstrip().endswith("\\"):
            buf += line.rstrip()[:-1] + " "
            continue
        yield buf + line
        buf = ""
    if buf:
        yield buf


def tokens(line):
    # Substitutions ($(VAR), $$(cmd), ${VAR##*-}) are values, not syntax here.
    line = re.sub(r"\$+(\([^()]*\)|\{[^{}]*\})", "SUBST", line)
    lex = shlex.shlex(line, posix=True, punctuation_chars="|&;()")
    lex.whitespace_split = True
    try:
        return list(lex)
    except ValueError:  # unbalanced quotes in prose: fall back
        return line.split()


def main(argv):
    if len(argv) < 5:
        print(__doc__, file=sys.stderr)
        return 2
    bins = dict(zip(PROGS, argv[1:4]))
    helps = {p: help_text([b]) for p, b in bins.items()}
    sub_helps = {}
    subcommands = set(re.findall(r"^\s{2}([a-z][a-z-]+)\s{2,}", helps["shmapctl"], re.M))
    passed = failed = 0
    for path in argv[4:]:
        text = open(path).read()
        lines = list(text_commands(text))
        if path.endswith((".yml", ".yaml")):
            for doc in yaml.safe_load_all(text):
                lines += list(yaml_commands(doc))
        for line in lines:
            toks = tokens(line)
            for i, t in enumerate(toks):
                prog = t.rsplit("/", 1)[-1]
                if prog not in PROGS:
                    continue
                # Only in command position: first word, after a separator or
                # a prefix command, or a path to the binary.
                is_path = "/" in t and t[0] in "/.$~b"
                prev = toks[i - 1] if i > 0 else None
                if not (is_path or prev is None or prev in SEPS or prev in PREFIX
                        or re.match(r"^[A-Z_]+=", prev)):
                    continue
                args = []
                for a in toks[i + 1:]:
                    if a in SEPS or a.rsplit("/", 1)[-1] in PROGS:
                        break
                    args.append(a)
                if not args or args[0] in ("--help", "-h", "help"):
                    continue
                where = f"{path}: {prog} {' '.join(args)}"[:200]
                text_help = helps[prog]
                if prog == "shmapctl":
                    sub = args[0]
                    if sub not in subcommands:
                        print(f"FAIL - {where}: '{sub}' is not a shmapctl subcommand "
                              f"(options go after the subcommand)")
                        failed += 1
                        continue
                    if sub not in sub_helps:
                        sub_helps[sub] = help_text([bins["shmapctl"], sub])
                    text_help = sub_helps[sub]
                bad = [a.split("=", 1)[0] for a in args
                       if a.startswith("--") and not re.search(
                           re.escape(a.split("=", 1)[0]) + r"\b", text_help)]
                if bad:
                    print(f"FAIL - {where}: unknown option(s) {', '.join(bad)}")
                    failed += 1
                else:
                    print(f"ok   - {where}")
                    passed += 1
    # Every SHMAP_* variable the deployment files (not the docs, which name
    # scripts' variables too) set or name is one a program reads (its --help
    # lists it).
    known = set(re.findall(r"\bSHMAP_[A-Z0-9_]*[A-Z0-9]", " ".join(helps.values())))
    for path in argv[4:]:
        if not path.endswith((".yml", ".yaml", "Dockerfile")):
            continue
        for var in sorted(set(re.findall(r"\bSHMAP_[A-Z0-9_]*[A-Z0-9]\b", open(path).read()))):
            if var in known:
                passed += 1
            else:
                print(f"FAIL - {path}: {var} is not a variable any program reads (not in --help)")
                failed += 1
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
