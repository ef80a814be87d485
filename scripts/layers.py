#!/usr/bin/env python3
"""Checks that each source file imports only its own layer and those below,
as docs/LAYERS.md orders them.

    python3 scripts/layers.py          # exit 1 on a file out of its layer

docs/LAYERS.md names every file of the library (`src/`) in a numbered layer
(`N. **...**: `a.rs` (...), `dir/` (...)`; a directory names the files in it
that no other entry names), and the files of the command line (`cli/src/`)
and of the proxy (`proxy/src/`) each in a list "bottom up:" of backticked
module names (a directory's files as `dir/file`). A file may name (`crate::...`, `super::...`, or a name the
crate root re-exports) a file of its own layer or a layer below, never one
above; the crate root and what the document puts "On top" may name any.
A source file the document does not place, or a place that names no file,
is an error too: the document cannot drift from the code.

Test modules at the end of a file (`#[cfg(test)] mod tests`) and comments
are left out, as ../shared/tools/import-cycles.py leaves them out.
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = os.path.join(ROOT, "docs", "LAYERS.md")


def modules(src):
    """Module path (crate::a::b) to file path, for every .rs file of src."""
    files = {}
    for root, _dirs, names in os.walk(src):
        if os.path.relpath(root, src).split(os.sep)[0] == "bin":
            continue
        for n in names:
            if n.endswith(".rs"):
                p = os.path.join(root, n)
                rel = os.path.relpath(p, src)[:-3].split(os.sep)
                if rel[-1] in ("mod", "lib", "main"):
                    rel = rel[:-1]
                files["::".join(["crate"] + rel)] = p
    return files


def strip(text):
    m = re.search(r"#\[cfg\(test\)\]\s*(pub\s+)?mod\s+\w+\s*\{", text)
    text = text[: m.start()] if m else text
    return re.sub(r"//[^\n]*", "", text)


def imports(src):
    """file -> {file it names: the names}, within one crate."""
    files = modules(src)
    reexport = {}
    root = files.get("crate")
    if root:
        t = strip(open(root).read())
        for m in re.finditer(r"pub\s+use\s+(?:crate::)?([\w:]+?)::\{([^}]*)\}\s*;", t, re.S):
            for name in re.findall(r"\b([A-Za-z_]\w*)\b(?:\s+as\s+\w+)?", m.group(2)):
                reexport[name] = "crate::" + m.group(1)
        for m in re.finditer(r"pub\s+use\s+(?:crate::)?([\w:]+)::(\w+)\s*;", t):
            reexport[m.group(2)] = "crate::" + m.group(1)

    def resolve(path):
        parts = path.split("::")
        if len(parts) == 2 and parts[1] in reexport:
            parts = reexport[parts[1]].split("::") + [parts[1]]
        for i in range(len(parts), 0, -1):
            mod = "::".join(parts[:i])
            if mod in files and mod != "crate":
                return mod, parts[i] if i < len(parts) else parts[-1]
        return None, None

    def expand(text):
        out = []
        for m in re.finditer(r"\b((?:crate|super)(?:::super)*)::((?:\w+::)*)\{([^{}]*)\}", text):
            base = m.group(1) + "::" + m.group(2)
            for item in m.group(3).split(","):
                item = item.strip().split(" as ")[0].strip()
                if item and item != "self":
                    out.append(base + item)
                elif item == "self":
                    out.append(base.rstrip(":"))
        return out

    edges = {}
    for mod, path in files.items():
        text = strip(open(path).read())
        own = mod.split("::")
        is_dir = os.path.basename(path) in ("mod.rs", "lib.rs", "main.rs")
        found = re.findall(r"\b((?:crate|super)(?:::super)*(?:::\w+)+)", text) + expand(text)
        out = edges.setdefault(path, {})
        for p in found:
            parts = p.split("::")
            if parts[0] == "super":
                base = own if is_dir else own[:-1]
                while parts and parts[0] == "super":
                    parts = parts[1:]
                    if parts and parts[0] == "super":
                        base = base[:-1]
                parts = base + parts
            target, name = resolve("::".join(parts))
            if target and target != mod:
                out.setdefault(files[target], set()).add(name)
    return files, edges


def library_layers(doc, files):
    """file -> layer for src/, from the numbered entries and "On top"."""
    layer_of, errors = {}, []
    dirs = []
    top = None
    for line in doc.splitlines():
        m = re.match(r"^(\d+)\. \*\*", line)
        if m:
            level = int(m.group(1))
        elif line.startswith("On top:"):
            level = top = 1000
        elif top is not None and "command line" in line:
            break
        elif top is not None:
            level = top
        else:
            continue
        for name in re.findall(r"`([\w/]+(?:\.rs|/))`", line):
            path = os.path.join(ROOT, "src", name)
            if name.endswith("/"):
                dirs.append((path, level))
            elif path in files.values():
                layer_of[path] = level
            elif not line.startswith("On top:") and top is None:
                errors.append(f"docs/LAYERS.md places src/{name}, which is no file")
            elif os.path.exists(path):
                layer_of[path] = level
    for path in files.values():
        if path in layer_of:
            continue
        for d, level in dirs:
            if path.startswith(d):
                layer_of[path] = level
                break
    return layer_of, errors


def listed_layers(doc, crate, src, files):
    """file -> rank for a crate whose document paragraph lists its modules
    bottom up (the first paragraph that names `crate` and "bottom up")."""
    at = doc.find("`" + crate + "`")
    start = doc.find("bottom up:", at) if at >= 0 else -1
    if start < 0:
        return {}, [f"docs/LAYERS.md has no bottom-up list for {crate}"]
    end = doc.find("\n\n", start)
    listed = doc[start + len("bottom up:") : end if end >= 0 else len(doc)]
    # The modules, without what the parentheses say of each.
    listed = re.sub(r"\([^()]*\)", "", " ".join(listed.split()))
    layer_of, errors = {}, []
    # A module of its own directory is named by its files (`dir/file`).
    names = re.findall(r"`([\w/]+)`", listed)
    for rank, name in enumerate(names):
        path = os.path.join(src, name + ".rs")
        if path not in files.values():
            errors.append(f"docs/LAYERS.md lists {crate}'s module `{name}`, which is no file")
        layer_of[path] = rank
    return layer_of, errors


def check(src, layer_of, errors):
    files, edges = imports(src)
    root = files.get("crate")
    for path in sorted(files.values()):
        if path not in layer_of and path != root:
            errors.append(f"{os.path.relpath(path, ROOT)}: not placed in docs/LAYERS.md")
    for a, targets in sorted(edges.items()):
        if a == root or a not in layer_of:
            continue
        for b, names in sorted(targets.items()):
            if b in layer_of and layer_of[b] > layer_of[a]:
                errors.append(
                    f"{os.path.relpath(a, ROOT)} names {os.path.relpath(b, ROOT)}, a layer above "
                    f"it ({', '.join(sorted(names))})"
                )
    return len(files)


def main():
    doc = open(DOC).read()
    errors = []
    counted = 0
    src = os.path.join(ROOT, "src")
    files = modules(src)
    layers, errs = library_layers(doc, files)
    errors += errs
    counted += check(src, layers, errors)
    for crate, src in (
        ("tombstone-crypt-cli", os.path.join(ROOT, "cli", "src")),
        ("tombstone-crypt-proxy", os.path.join(ROOT, "proxy", "src")),
    ):
        files = modules(src)
        layers, errs = listed_layers(doc, crate, src, files)
        errors += errs
        counted += check(src, layers, errors)
    for e in errors:
        print(e)
    if errors:
        print(f"layers: {len(errors)} problems (docs/LAYERS.md)")
        sys.exit(1)
    print(f"layers: {counted} files, each names only its own layer and those below")


if __name__ == "__main__":
    main()
