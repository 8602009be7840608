#!/usr/bin/env bash
# Fails (exit 1) when a C++ source file is over 500 lines or a C++ function is over 60 lines, unless
# scripts/size-allowlist.txt names it with a reason. The habit: a file a reader can hold, a
# function that fits on a screen. The list cannot rot: an entry without a reason fails, and so does
# one that is no longer needed (the file or function is within its limit now, or gone).
#
# Files: *.cc, *.h, *.cu, *.cuh and *.inc under the tree, except build*/ at the top, hidden folders
# (.git, .ci), Testing/, third-party folders (third_party, third-party, external, vendor, _deps)
# and generated code (*.pb.h, *.pb.cc). A file's length is its line count (wc -l, plus an
# unterminated last line).
#
# Functions: a function body is a `{ ... }` opened at namespace or class level (not inside another
# function) whose preceding declaration looks like a function: a parameter list `( ... )` outside
# template brackets, followed only by qualifiers (const, noexcept, override, ->, ABSL_ macros) or
# by a constructor's initializer list. Its length is the lines from its `{` to its `}`, both
# included (a long signature does not count). Before matching braces, comments, string and
# character literals (raw strings included) and preprocessor lines are blanked, so braces in
# them do not count. Named as written (`JobManager::Submit`, `operator()`); a test macro by its
# arguments too (`TEST_F(Fixture,Name)`); whitespace removed. Overloads share their name.
# Limits of the heuristic (what it gets wrong, knowingly):
# - lambdas, local classes and nested functions count toward the function they sit in; a lambda
#   or table at namespace level (`auto f = [] { ... };`, `const T kTable[] = { ... };`) is not a
#   function and is never measured;
# - `#if` / `#else` branches that each open a brace are both read, and would unbalance the count;
#   a macro that expands to a function definition without a parameter list is not seen;
# - `<` and `>` in a declaration are read as template brackets (`operator<` excepted), so a
#   comparison in a default argument outside parentheses would confuse it;
# - function-try-blocks (`f() try { ... }`) and K&R definitions are not recognised.
#
# Allow-list (default scripts/size-allowlist.txt): one entry a line, `PATH REASON` for a file or
# `PATH:FUNCTION REASON` for a function (FUNCTION as this script prints it), PATH relative to the
# tree root; `#` starts a comment line. REASON is the rest of the line and must say something
# (a word of two letters or more).
#
# Usage: check-sizes.sh [ROOT] [--allowlist=FILE]   check ROOT (default: this repository)
#        check-sizes.sh --self-test                 check the checker on fixtures in a temp folder
# Needs bash and python3 (standard library only).
set -euo pipefail
exec python3 - "$(cd "$(dirname "$0")/.." && pwd)" "$@" <<'PYTHON'
import os
import re
import sys
import tempfile

FILE_LIMIT = 500
FUNCTION_LIMIT = 60
EXTENSIONS = (".cc", ".h", ".cu", ".cuh", ".inc")
SKIP_DIRS = {"third_party", "third-party", "external", "vendor", "_deps", "Testing"}
IDENT = re.compile(r"[A-Za-z_]\w*")


def blank(text):
    """Comments, literals' contents and preprocessor lines as spaces; newlines kept."""
    out = list(text)
    n = len(text)
    i = 0
    line_start = True

    def wipe(a, b):
        for k in range(a, b):
            if out[k] != "\n":
                out[k] = " "

    def skip_quoted(i, quote):
        # A string or character literal opening at i: blank its inside, return the index past it.
        j = i + 1
        while j < n and text[j] != quote and text[j] != "\n":
            j += 2 if text[j] == "\\" else 1
        wipe(i + 1, min(j, n))
        return j + 1

    while i < n:
        c = text[i]
        if c == "\n":
            line_start = True
            i += 1
            continue
        if line_start and c == "#":
            j = i
            while j < n and not (text[j] == "\n" and text[j - 1] != "\\"):
                j += 1
            wipe(i, j)
            i = j
            continue
        if not c.isspace():
            line_start = False
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            wipe(i, j)
            i = j
            continue
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            wipe(i, j)
            i = j
            continue
        if c == '"':
            m = re.search(r"(?:\b|(?<=\W))(?:u8|u|U|L)?R$", text[max(0, i - 3):i])
            if m and (i - len(m.group(0)) == 0 or not (text[i - len(m.group(0)) - 1].isalnum()
                                                      or text[i - len(m.group(0)) - 1] == "_")):
                paren = text.find("(", i)
                delim = text[i + 1:paren] if paren >= 0 else ""
                end = text.find(")" + delim + '"', paren) if paren >= 0 else -1
                j = n if end < 0 else end + len(delim) + 1
                wipe(i + 1, j)
                i = j + 1
                continue
            i = skip_quoted(i, '"')
            continue
        if c == "'":
            k = i
            while k > 0 and (text[k - 1].isalnum() or text[k - 1] == "_"):
                k -= 1
            word = text[k:i]
            if word and word[0].isdigit():  # a digit separator: 1'000'000
                i += 1
                continue
            i = skip_quoted(i, "'")
            continue
        i += 1
    return "".join(out)


def collapse_braces(s):
    """`{...}` groups (braced initialisers inside a declaration) as `{}`."""
    out, depth = [], 0
    for c in s:
        if c == "{":
            if depth == 0:
                out.append("{")
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                out.append("}")
        elif depth == 0:
            out.append(c)
    return "".join(out)


NOT_NAMES = {"decltype", "alignas", "__attribute__", "__declspec", "noexcept", "sizeof",
             "alignof", "static_assert"}


def parameter_list(s):
    """(index of the parameter list's `(`, of its `)`) in a declaration, or None."""
    angle = 0
    i = 0
    n = len(s)
    while i < n:
        c = s[i]
        if s.startswith("->", i):
            i += 2
            continue
        if s.startswith("operator", i) and (i == 0 or not (s[i - 1].isalnum() or s[i - 1] == "_")):
            m = re.match(r"operator\s*(\(\s*\)|\[\s*\]|[^\w\s(]+|\s[\w:\s*&<>]+?(?=\())", s[i:])
            if m:
                i += m.end()
                continue
        if c == "<":
            angle += 1
        elif c == ">":
            angle = max(0, angle - 1)
        elif c == "=" and angle == 0:
            return None  # an initialised variable, or a lambda assigned to one
        elif c == "(" and angle == 0:
            before = s[:i].rstrip()
            word = re.search(r"(\w+)$", before)
            depth, j = 0, i
            while j < n:
                if s[j] == "(":
                    depth += 1
                elif s[j] == ")":
                    depth -= 1
                    if depth == 0:
                        break
                j += 1
            if j >= n:
                return None  # unbalanced: the brace is inside an argument list
            if word and word.group(1) in NOT_NAMES:
                i = j + 1
                continue
            return i, j
        i += 1
    return None


def function_name(decl, open_paren):
    before = decl[:open_paren].rstrip()
    m = re.search(r"((?:[\w~]+\s*(?:<[^<>;{}]*>)?\s*::\s*)*(?:operator\s*(?:\(\s*\)|\[\s*\]|"
                  r"[^\w\s(]+|\s[\w:\s*&<>]+)|~?\w+))$", before)
    if not m:
        return None
    name = re.sub(r"\s+", "", m.group(1))
    if name.startswith("operator") and len(name) > 8 and name[8].isalnum():
        name = "operator " + name[8:]
    return name


def classify(decl):
    """('ns'|'class'|'func'|'expr', function name or None) for the text before a `{`."""
    d = collapse_braces(decl)
    d = re.sub(r"\b(public|private|protected)\s*:(?!:)", " ", d)
    d = re.sub(r"\[\[.*?\]\]", " ", d)
    stripped = d.strip()
    if d.count("(") > d.count(")"):
        return "expr", None  # a lambda or braced argument inside a call
    if re.search(r"\bnamespace\b", d) or re.fullmatch(r'extern\s*"\s*"', stripped):
        return "ns", None
    params = parameter_list(d)
    if params:
        open_paren, close_paren = params
        name = function_name(d, open_paren)
        rest = d[close_paren + 1:]
        init = re.search(r"(?<!:):(?!:)", rest)
        if name and not re.search(r"(?<![=!<>])=(?!=)", rest):
            if init is None:
                if not re.search(r"[;{}\[\]]", rest.replace("{}", "")):
                    return "func", name
            elif re.search(r"[)}]\s*$", rest[init.end():]):
                return "func", name
            else:
                return "expr", None  # `Foo() : a_{`: a member's braced initialiser
    if re.search(r"\benum\b", d):
        return "expr", None
    if re.search(r"\b(class|struct|union)\b", d) and "=" not in d:
        return "class", None
    return "expr", None


def functions(text):
    """[(name, line of the name, lines from `{` to `}`)] of the functions defined in text."""
    clean = blank(text)
    found = []
    stack = [("ns", None, 0, 0)]  # kind, name, line of `{`, line of the name
    decl_start = 0
    line = 1
    for i, c in enumerate(clean):
        if c == "\n":
            line += 1
            continue
        top = stack[-1][0]
        outer = top in ("ns", "class")
        if c == ";" and outer:
            decl_start = i + 1
        elif c == "{":
            if outer:
                kind, name = classify(clean[decl_start:i])
                name_line = line
                if name:
                    base = name.split("::")[-1].lstrip("~")
                    at = clean.rfind(base[:8] if base else name, decl_start, i)
                    if at >= 0:
                        name_line = clean.count("\n", 0, at) + 1
                    if re.fullmatch(r"[A-Z][A-Z0-9_]*", name):
                        p = parameter_list(collapse_braces(clean[decl_start:i]))
                        d = collapse_braces(clean[decl_start:i])
                        if p:
                            name += re.sub(r"\s+", "", d[p[0]:p[1] + 1])
                stack.append((kind, name, line, name_line))
                if kind in ("ns", "class"):
                    decl_start = i + 1
            else:
                stack.append(("block", None, line, line))
        elif c == "}":
            if len(stack) == 1:
                continue  # unbalanced; keep going
            kind, name, open_line, name_line = stack.pop()
            if kind == "func":
                found.append((name, name_line, line - open_line + 1))
            if kind in ("ns", "class", "func") and stack[-1][0] in ("ns", "class"):
                decl_start = i + 1
    return found


def sources(root):
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        keep = []
        for d in sorted(dirnames):
            if d.startswith(".") or d in SKIP_DIRS or (rel == "." and d.startswith("build")):
                continue
            keep.append(d)
        dirnames[:] = keep
        for f in sorted(filenames):
            if f.endswith(EXTENSIONS) and not re.search(r"\.pb\.(h|cc)$", f):
                out.append(os.path.normpath(os.path.join(rel, f)))
    return sorted(out)


def read_allowlist(path, problems):
    entries = {}
    if not os.path.exists(path):
        return entries
    with open(path, encoding="utf-8") as f:
        for number, raw in enumerate(f, 1):
            text = raw.strip()
            if not text or text.startswith("#"):
                continue
            parts = text.split(None, 1)
            entry = parts[0]
            reason = parts[1].strip() if len(parts) > 1 else ""
            where = f"{os.path.basename(path)}:{number}"
            if not re.search(r"[A-Za-z]{2,}", reason):
                problems.append(f"{where}: {entry} has no reason (write it after the entry, "
                                f"on the same line)")
                continue
            if entry in entries:
                problems.append(f"{where}: {entry} is listed twice")
                continue
            entries[entry] = where
    return entries


def check(root, allowlist):
    """(exit status, lines to print)."""
    problems = []
    allowed = read_allowlist(allowlist, problems)
    used = set()
    long_files, long_functions = {}, {}
    for rel in sources(root):
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
            text = f.read()
        lines = len(text.splitlines())
        if lines > FILE_LIMIT:
            long_files[rel] = lines
            if rel in allowed:
                used.add(rel)
            else:
                problems.append(f"{rel}: file is {lines} lines (limit {FILE_LIMIT})")
        for name, line, length in functions(text):
            if length <= FUNCTION_LIMIT:
                continue
            key = f"{rel}:{name}"
            long_functions[key] = length
            if key in allowed:
                used.add(key)
            else:
                problems.append(f"{rel}:{line}: function {name} is {length} lines "
                                f"(limit {FUNCTION_LIMIT})")
    for entry, where in allowed.items():
        if entry in used:
            continue
        path = entry.split(":", 1)[0]
        gone = not os.path.exists(os.path.join(root, path))
        if gone:
            state = "the file is gone"
        elif ":" not in entry:
            state = f"the file is within {FILE_LIMIT} lines now"
        else:
            state = f"no function of that name is over {FUNCTION_LIMIT} lines now"
        problems.append(f"{where}: {entry} is no longer needed: {state}; remove the entry")
    if problems:
        shown = os.path.relpath(allowlist, root)
        shown = allowlist if shown.startswith("..") else shown
        problems.append(f"check-sizes: {len(problems)} problem(s). Split what is too long, or "
                        f"list it in {shown} with a reason "
                        f"(docs/testing.md, \"Size check\")")
        return 1, problems
    return 0, [f"check-sizes: {len(sources(root))} files within {FILE_LIMIT} lines and their "
               f"functions within {FUNCTION_LIMIT}, or listed ({len(allowed)} entries)"]


def self_test():
    failures = []

    def body(n, indent="  "):
        return "".join(f"{indent}x += {k};\n" for k in range(n - 2))

    def expect(name, files, allow, status, wanted=(), unwanted=()):
        with tempfile.TemporaryDirectory() as d:
            for rel, text in files.items():
                os.makedirs(os.path.dirname(os.path.join(d, rel)), exist_ok=True)
                with open(os.path.join(d, rel), "w") as f:
                    f.write(text)
            allowlist = os.path.join(d, "allow.txt")
            with open(allowlist, "w") as f:
                f.write(allow)
            got, lines = check(d, allowlist)
            out = "\n".join(lines)
            ok = got == status and all(w in out for w in wanted) and \
                not any(u in out for u in unwanted)
            print(("ok    " if ok else "FAIL  ") + name)
            if not ok:
                failures.append(name)
                print(f"      status {got}, wanted {status}; output:\n      " +
                      out.replace("\n", "\n      "))

    long_fn = "namespace a {\n\nint Long(int x) {\n" + body(70) + "}\n\n}  // namespace a\n"
    expect("an over-long function fails, named with its line and length",
           {"src/long.cc": long_fn}, "", 1,
           ["src/long.cc:3: function Long is 70 lines (limit 60)"])
    expect("an allow-list entry with a reason lets it pass",
           {"src/long.cc": long_fn}, "src/long.cc:Long  a table of 68 cases\n", 0)
    expect("an allow-list entry without a reason fails",
           {"src/long.cc": long_fn}, "src/long.cc:Long\n", 1,
           ["allow.txt:1: src/long.cc:Long has no reason",
            "src/long.cc:3: function Long is 70 lines"])
    expect("an entry that is no longer needed fails",
           {"src/short.cc": "int Short() {\n  return 1;\n}\n"},
           "src/short.cc:Short  was long once\nsrc/gone.cc  was long once\n", 1,
           ["allow.txt:1: src/short.cc:Short is no longer needed",
            "allow.txt:2: src/gone.cc is no longer needed: the file is gone"])
    big = "".join(f"int v{k} = {k};\n" for k in range(501))
    expect("an over-long file fails, and passes when listed",
           {"src/big.h": big}, "", 1, ["src/big.h: file is 501 lines (limit 500)"])
    expect("a listed over-long file passes", {"src/big.h": big}, "src/big.h  generated table\n", 0)
    tricky = (
        "#define OPEN {\n"
        "namespace b {\n"
        'const char* kBraces = "{{{ \\" {";\n'
        "const char kOpen = '{';\n"
        "int n = 1'000'000;  // {\n"
        "/* { { { */\n"
        'const char* kRaw = R"x(}}} )" {)x";\n'
        "const int kTable[] = {\n" + "".join(f"  {k},\n" for k in range(80)) + "};\n"
        "class Widget : public Base {\n"
        " public:\n"
        "  Widget(int a) : a_{a}, b_(a) {\n" + body(62, "    ") + "  }\n"
        "  int Small() const { return a_; }\n"
        "  bool operator()(int x) const {\n" + body(65, "    ") + "  }\n"
        " private:\n"
        "  int a_{0}, b_ = 0;\n"
        "};\n"
        "std::vector<int> Widget::Many(const std::map<int, int>& m) const\n"
        "    ABSL_LOCKS_EXCLUDED(mu_) {\n"
        '  auto f = [](int y) { return "}"; };\n' + body(60) + "}\n"
        "TEST_F(WidgetTest, Grows) {\n" + body(61) + "}\n"
        "}  // namespace b\n")
    expect("braces in strings, characters, comments, raw strings and macros do not count",
           {"src/tricky.cc": tricky}, "", 1,
           ["function Widget is 62 lines", "function operator() is 65 lines",
            "function Widget::Many is 61 lines", "function TEST_F(WidgetTest,Grows) is 61 lines"],
           ["Small", "kTable", "kRaw", "kOpen"])
    print("self-test: " + ("all passed" if not failures else f"{len(failures)} failed"))
    return 1 if failures else 0


def main(argv):
    repo, args = argv[0], argv[1:]
    root, allowlist = None, None
    for a in args:
        if a == "--self-test":
            return self_test()
        if a.startswith("--allowlist="):
            allowlist = a.split("=", 1)[1]
        elif a.startswith("-"):
            print(f"check-sizes: unknown flag {a}", file=sys.stderr)
            return 2
        else:
            root = a
    root = os.path.abspath(root or repo)
    allowlist = os.path.abspath(allowlist or os.path.join(root, "scripts", "size-allowlist.txt"))
    status, lines = check(root, allowlist)
    print("\n".join(lines))
    return status


sys.exit(main(sys.argv[1:]))
PYTHON
