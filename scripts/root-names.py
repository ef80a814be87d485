#!/usr/bin/env python3
"""Counts the names the crate root re-exports (`pub use` at the top level of
src/lib.rs) and fails when there are more than the limit (25: one screen of
rustdoc). The feature areas belong in the public modules.

    python3 scripts/root-names.py [LIMIT]
"""
import re
import sys

limit = int(sys.argv[1]) if len(sys.argv) > 1 else 25
text = open("src/lib.rs").read()
text = re.sub(r"//[^\n]*", "", text)
# Top level only: drop the bodies of inline modules (`pub mod format { ... }`).
depth, top = 0, []
for ch in text:
    if ch == "{" and depth == 0 and re.search(r"\bmod\s+\w+\s*$", "".join(top[-80:])):
        depth = 1
        continue
    if depth:
        depth += ch == "{"
        depth -= ch == "}"
        continue
    top.append(ch)
top = "".join(top)
names = []
for m in re.finditer(r"\bpub\s+use\s+([^;]+);", top):
    path = m.group(1)
    if "{" in path:
        inner = path[path.index("{") + 1 : path.rindex("}")]
        names += [n.split(" as ")[-1].strip() for n in inner.split(",") if n.strip()]
    else:
        names.append(path.split("::")[-1].split(" as ")[-1].strip())
print(f"the crate root re-exports {len(names)} names (limit {limit}): {', '.join(sorted(names))}")
sys.exit(0 if len(names) <= limit else 1)
