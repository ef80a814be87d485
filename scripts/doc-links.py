#!/usr/bin/env python3
"""Checks the crate's docs for links that do not work where they are read.

The crate's docs are the doc comments of src/**/*.rs (`///`, `//!`, and
`#[doc = "..."]`) and the files they pull in with `include_str!`. Rustdoc
resolves no relative link to a file (`[format](docs/FORMAT.md)`,
`[x](../tests/a.rs)`): on the published API docs it points nowhere, and the
repository's files outside the package are not there at all. So a link in
them must be one of:

- an absolute URL (`https://...`), or an anchor on the same page (`#...`);
- an intra-doc link (`[Keyset]`, `[x](crate::guide::kafka)`,
  `[y](Self::rotate)`, `mod@format`), which `cargo doc` with
  `-D warnings` resolves.

Anything else is reported with its file and line, and the script exits 1.

It also checks that the README's Quick start is `examples/quickstart.rs`
as it is (the crate docs include that file, so the README's copy is the one
that could drift).

    python3 scripts/doc-links.py [ROOT]
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()

URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
DISAMBIGUATOR = (
    "mod|struct|enum|trait|fn|type|const|static|macro|method|field|variant|"
    "prim|primitive|value|derive|tymethod|associatedtype|associatedconstant|"
    "union|attr|keyword"
)
IDENT = r"[A-Za-z_][A-Za-z0-9_]*(?:<[^>]*>)?"
INTRA_DOC = re.compile(
    rf"^(?:(?:{DISAMBIGUATOR})@)?(?:{IDENT})(?:::{IDENT})*(?:\(\)|!)?(?:#[\w.-]*)?$"
)
INLINE_LINK = re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REF_DEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s.*)?$")
INCLUDE = re.compile(r'include_str!\(\s*"([^"]+)"\s*\)')
DOC_ATTR = re.compile(r'#!?\[doc\s*=\s*"((?:[^"\\]|\\.)*)"\s*\]')


def doc_lines_of_rs(path):
    """(line number, doc text) of every doc comment line of a .rs file,
    and the files its doc attributes include."""
    lines, includes = [], []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        s = line.strip()
        for prefix in ("//!", "///"):
            if s.startswith(prefix) and not s.startswith("////"):
                lines.append((n, s[len(prefix):]))
                break
        else:
            m = DOC_ATTR.search(s)
            if m:
                lines.append((n, m.group(1)))
            if re.match(r"#!?\[doc\s*=\s*include_str!", s):
                for inc in INCLUDE.findall(s):
                    includes.append((path.parent / inc).resolve())
    return lines, includes


def bad_links(lines):
    """(line number, target) of each link that is neither absolute, an
    anchor, nor an intra-doc link; fenced code and code spans skipped."""
    out, fence = [], None
    for n, text in lines:
        s = text.strip()
        m = re.match(r"(`{3,}|~{3,})", s)
        if m:
            if fence is None:
                fence = m.group(1)
            elif s.startswith(fence):
                fence = None
            continue
        if fence is not None:
            continue
        text = re.sub(r"(`+)(?:(?!\1).)*?\1", "", text)  # code spans
        targets = INLINE_LINK.findall(text)
        m = REF_DEF.match(text)
        if m:
            targets.append(m.group(1))
        for t in targets:
            if URL.match(t) or t.startswith("#") or INTRA_DOC.match(t):
                continue
            out.append((n, t))
    return out


def main():
    failures = []
    seen = set()
    queue = sorted((ROOT / "src").rglob("*.rs"))
    while queue:
        path = queue.pop(0)
        if path in seen:
            continue
        seen.add(path)
        if not path.exists():
            failures.append(f"{path.relative_to(ROOT)}: included but missing")
            continue
        if path.suffix == ".rs" and path.is_relative_to(ROOT / "src"):
            lines, includes = doc_lines_of_rs(path)
            queue += [p for p in includes if p.suffix == ".md"]
        else:
            lines = list(enumerate(path.read_text().splitlines(), 1))
        for n, target in bad_links(lines):
            failures.append(
                f"{path.relative_to(ROOT)}:{n}: relative link ({target}): rustdoc does "
                "not resolve it; use an intra-doc link or an absolute URL"
            )
    checked = len(seen)

    readme = (ROOT / "README.md").read_text()
    quick = re.search(r"## Quick start\n.*?```rust\n(.*?)```", readme, re.S)
    example = (ROOT / "examples" / "quickstart.rs").read_text()
    if not quick or quick.group(1) != example:
        failures.append(
            "README.md: the Quick start is not examples/quickstart.rs as it is "
            "(copy the file into the README's block)"
        )

    for f in failures:
        print(f, file=sys.stderr)
    if failures:
        print(f"{len(failures)} problem(s) in the crate's docs", file=sys.stderr)
        return 1
    print(f"the crate's docs ({checked} files) hold no relative links; the README's Quick start is examples/quickstart.rs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
