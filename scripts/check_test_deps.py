#!/usr/bin/env python3
"""Fails when a script that the test suite runs imports a Python module that scripts/setup.sh
does not provide.

A fresh machine has python3 with its standard library and whatever setup.sh installs, nothing
more: a test that imports numpy passes only where someone installed numpy by hand. This walks
every script the suite runs (tests/run.sh, the integration scripts, the tools and Python files
they call), finds the Python they run (files, `python3 -c` one-liners, `python3 - <<'EOF'`
here-documents) and checks each imported top-level module against the standard library and
the modules setup.sh declares on its `# python-modules:` line. A module beside the file that
imports it is the project's own and is checked in turn. An import that runs only on a GPU machine
(a benchmark's measuring path behind its CI dry run) says so with a `# device only` comment.

Usage: scripts/check_test_deps.py [ROOT]   (exit 1 and one line per offending import)
"""
import os
import re
import sys

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))

# The scripts CI runs, directly or through ctest (tests/CMakeLists.txt discovers these).
ENTRY_GLOBS = [("tests", "run.sh"), (".ci", "run"), ("scripts", "setup.sh"), ("tests/integration", ".sh"),
               ("tests/tools", ".sh"), ("tests/tools", ".py"), ("examples", ".sh")]

IMPORT_RE = re.compile(r"^\s*(?:from\s+([A-Za-z_][\w.]*)\s+import\b|import\s+([A-Za-z_][\w.]*(?:\s*(?:as\s+\w+)?\s*,\s*[A-Za-z_][\w.]*)*))")
HEREDOC_RE = re.compile(r"python3?\b[^\n]*?<<-?\s*'?\"?(\w+)'?\"?[^\n]*\n(.*?)\n\s*\1\s*$", re.S | re.M)
DASH_C_RE = re.compile(r"python3?\s+-c\s+(\"(?:[^\"\\]|\\.)*\"|'[^']*')", re.S)
PY_FILE_RE = re.compile(r"python3?\s+(?:-\w+\s+)*\"?(?:\$\w+/|\$\{\w+\}/)?([\w./-]+\.py)\b")


def declared_modules():
    """Modules setup.sh installs, from its '# python-modules: a b c' line."""
    mods = set()
    with open(os.path.join(ROOT, "scripts", "setup.sh")) as f:
        for line in f:
            m = re.match(r"\s*#\s*python-modules:(.*)", line)
            if m:
                mods.update(m.group(1).split())
    return mods


def imports_in(code):
    """(line offset, top-level module) for each import statement in a Python text."""
    found = []
    for n, line in enumerate(code.splitlines()):
        if "# device only" in line:
            continue
        for stmt in line.split(";"):
            m = IMPORT_RE.match(stmt)
            if not m:
                continue
            if m.group(1):
                if not m.group(1).startswith("."):
                    found.append((n, m.group(1).split(".")[0]))
            else:
                for part in m.group(2).split(","):
                    found.append((n, part.split()[0].split(".")[0]))
    return found


def python_in_shell(text):
    """Python texts a shell script runs inline, with the line each starts on."""
    out = []
    for m in HEREDOC_RE.finditer(text):
        out.append((text.count("\n", 0, m.start(2)) + 1, m.group(2)))
    for m in DASH_C_RE.finditer(text):
        out.append((text.count("\n", 0, m.start()) + 1, m.group(1)[1:-1]))
    return out


def main():
    allowed = set(sys.stdlib_module_names) | declared_modules()
    todo = []
    for d, suffix in ENTRY_GLOBS:
        full = os.path.join(ROOT, d)
        if os.path.isfile(full + "/" + suffix):
            todo.append(os.path.join(full, suffix))
        elif os.path.isdir(full):
            todo += sorted(os.path.join(full, f) for f in os.listdir(full) if f.endswith(suffix))
    seen, bad, checked = set(), [], 0
    while todo:
        path = os.path.normpath(todo.pop())
        if path in seen or not os.path.isfile(path):
            continue
        seen.add(path)
        text = open(path, encoding="utf-8", errors="replace").read()
        rel = os.path.relpath(path, ROOT)
        if path.endswith(".py"):
            pieces = [(1, text)]
        else:
            pieces = python_in_shell(text)
            # Python files a script runs are checked too, as they are run.
            for m in PY_FILE_RE.finditer(text):
                cand = os.path.join(ROOT, m.group(1))
                if os.path.isfile(cand):
                    todo.append(cand)
        for start, code in pieces:
            checked += 1
            for off, mod in imports_in(code):
                local = os.path.join(os.path.dirname(path), mod)
                if path.endswith(".py") and (os.path.isfile(local + ".py") or os.path.isfile(os.path.join(local, "__init__.py"))):
                    todo.append(local + ".py" if os.path.isfile(local + ".py") else os.path.join(local, "__init__.py"))
                    continue
                if mod not in allowed:
                    bad.append("%s:%d: imports '%s', which scripts/setup.sh does not provide "
                               "(standard library only, or add it to setup.sh's packages and its "
                               "'# python-modules:' line)" % (rel, start + off, mod))
    for b in bad:
        print(b)
    print("check_test_deps: %d scripts, %d Python texts, %d undeclared imports" % (len(seen), checked, len(bad)),
          file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
