"""The documents stand on their own in a clone: links resolve, tables render, nothing cites a file outside it.

A clone of the repository has only the repository, so a doc, recipe or docstring that points at a machine path or a
sibling folder (``/work/...``, ``../shared/...``, ``reference/NAME.md``) points at nothing, and one that names an issue
number tells history instead of what is. The paper is cited by its arXiv id, the reference code by its public
repository.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
# the files the documentation owns: the docs, the recipes' comments, and the docstrings that explain the demo's design
DOC_FILES = [
    *DOCS,
    *sorted((ROOT / "recipes").glob("*.yaml")),
    ROOT / "t2g_core" / "demo" / "__init__.py",
    ROOT / "t2g_core" / "demo" / "summarization.py",
    ROOT / "t2g_core" / "reward_model" / "grounded.py",
]
OUTSIDE = [
    re.compile(r"shared/reference"),
    re.compile(r"\.\./shared"),
    re.compile(r"/work/"),
    re.compile(r"\breference/\w+\.md"),
    re.compile(r"\bARCHITECTURE §"),
    re.compile(r"\b(?:demo_task|reward_model)_findings\b|\b\w+_findings\.md\b"),
    re.compile(r"\bissues? #?\d+", re.IGNORECASE),
]
README_LIMIT = 8 * 1024  # a first screen: what it is, the two commands, the shape, the headline figures
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
EXTERNAL = ("http://", "https://", "mailto:")
SEPARATOR = re.compile(r"^\|(\s*:?-{3,}:?\s*\|)+$")
HEADLINES = "## Headline figures"
RESULTS = re.compile(r"\bdocs/results/[\w./-]+\.json\b")


def _name(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else path.name


def _offences(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8")
    return [
        f"{_name(path)}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)!r}"
        for pattern in OUTSIDE
        for m in pattern.finditer(text)
    ]


def _repository_files() -> list[Path]:
    """Tracked and new (not ignored) *.md, *.py and *.yaml files outside tests/."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z", "--", "*.md", "*.py", "*.yaml"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"not a git checkout ({exc})")
    names = [n for n in out.split("\0") if n and not n.startswith("tests/")]
    return [ROOT / n for n in sorted(set(names)) if (ROOT / n).is_file()]


def _prose(text: str) -> str:
    """``text`` without fenced code blocks and inline code spans (their brackets and pipes are not markdown)."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.MULTILINE | re.DOTALL)
    return re.sub(r"`[^`\n]*`", "``", text)


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped (``_`` and ``-`` kept), spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", path.read_text(encoding="utf-8"), flags=re.MULTILINE | re.DOTALL)
    seen: dict[str, int] = {}
    anchors = set()
    for line in text.splitlines():
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*$", line)
        if m:
            slug = _slug(m.group(1))
            anchors.add(f"{slug}-{seen[slug]}" if slug in seen else slug)
            seen[slug] = seen.get(slug, 0) + 1
    return anchors


def _broken_links(path: Path) -> list[str]:
    broken = []
    for m in LINK.finditer(_prose(path.read_text(encoding="utf-8"))):
        target = m.group(1)
        if target.startswith(EXTERNAL):
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        where = f"{_name(path)}: ({target})"
        if not dest.exists():
            broken.append(f"{where}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(f"{where}: no heading with anchor #{anchor} in {dest.name}")
    return broken


def _table_problems(path: Path) -> list[str]:
    """Each table: a separator row second, and every row with as many cells as the header (``\\|`` is no border)."""
    problems, table = [], []
    lines = re.sub(r"^```.*?^```", "", path.read_text(encoding="utf-8"), flags=re.MULTILINE | re.DOTALL)
    for line in [*lines.splitlines(), ""]:
        if line.startswith("|"):
            table.append(line.rstrip())
            continue
        if table:
            cells = [len(re.findall(r"(?<!\\)\|", row)) - 1 for row in table]
            if len(table) < 2 or not SEPARATOR.match(table[1]):
                problems.append(f"{_name(path)}: table {table[0][:60]!r} has no separator row")
            problems += [
                f"{_name(path)}: {n} cells, header has {cells[0]}: {row[:80]!r}"
                for row, n in zip(table, cells, strict=True)
                if n != cells[0]
            ]
            table = []
    return problems


def _headline_rows(text: str) -> list[str]:
    """The body rows of the first table under the README's headline heading (header and separator left out)."""
    _, found, section = text.partition(HEADLINES + "\n")
    rows = []
    for line in section.splitlines() if found else []:
        if line.startswith("#"):
            break
        if line.startswith("|"):
            rows.append(line.rstrip())
        elif rows:
            break
    return rows[2:]


def _unbacked_headlines(path: Path) -> list[str]:
    """Each headline row names at least one results file under docs/results/, and every file it names exists."""
    rows = _headline_rows(path.read_text(encoding="utf-8"))
    if not rows:
        return [f"{_name(path)}: no table under {HEADLINES!r}"]
    results = (path.parent / "docs" / "results").resolve()
    problems = []
    for row in rows:
        named = dict.fromkeys(RESULTS.findall(row))
        targets = {n: (path.parent / n).resolve() for n in named}
        missing = [n for n, t in targets.items() if not (t.is_file() and t.is_relative_to(results))]
        if not named:
            problems.append(f"{_name(path)}: names no results file under docs/results/: {row[:100]!r}")
        problems += [f"{_name(path)}: names {n}, no such file under docs/results/: {row[:100]!r}" for n in missing]
    return problems


def test_docs_recipes_and_design_docstrings_cite_nothing_outside_the_repository():
    offences = [o for path in DOC_FILES for o in _offences(path)]
    assert offences == [], "state the finding itself, or cite the arXiv id or public repository:\n" + "\n".join(
        offences
    )


def test_no_file_cites_outside_the_repository_or_an_issue():
    offences = [o for path in _repository_files() for o in _offences(path)]
    assert offences == [], "\n".join(offences)


def test_relative_links_point_at_existing_files_and_headings():
    broken = [b for path in DOCS for b in _broken_links(path)]
    assert broken == [], "\n".join(broken)


def test_markdown_tables_are_well_formed():
    problems = [p for path in DOCS for p in _table_problems(path)]
    assert problems == [], "\n".join(problems)


def test_readme_is_a_first_screen():
    size = len((ROOT / "README.md").read_bytes())
    assert size <= README_LIMIT, f"README.md is {size} bytes; move details to docs/ (limit {README_LIMIT})"


def test_each_headline_figure_names_its_committed_results_file():
    problems = _unbacked_headlines(ROOT / "README.md")
    assert problems == [], "name the committed results file beside each headline figure:\n" + "\n".join(problems)


def test_the_checks_find_what_they_look_for(tmp_path):
    """Each check fails on a document that breaks it, so a pass means something."""
    doc = tmp_path / "doc.md"
    doc.write_text(
        "# Title\n\nSee [gone](missing.md), [here](#title), [nowhere](#nope), `[code](not-a-link.md)`.\n\n"
        "| a | b |\n|---|---|\n| 1 | 2 | 3 |\n| `x\\|y` | 4 |\n\nFrom `/work/shared/reference/x.md` (issue 7).\n",
        encoding="utf-8",
    )
    assert [b.split(": ", 2)[-1] for b in _broken_links(doc)] == [
        "no such file",
        "no heading with anchor #nope in doc.md",
    ]
    assert [p.split(": ", 1)[1] for p in _table_problems(doc)] == ["3 cells, header has 2: '| 1 | 2 | 3 |'"]
    assert len(_offences(doc)) == 4  # shared/reference, /work/, reference/x.md, issue 7
    (tmp_path / "docs" / "results").mkdir(parents=True)
    for name in ("docs/results/a.json", "x.json"):
        (tmp_path / name).write_text("{}", encoding="utf-8")
    readme = tmp_path / "README.md"
    readme.write_text(
        f"{HEADLINES}\n\n| what | measured |\n|---|---|\n| backed | 1 ([a.json](docs/results/a.json)) |\n"
        "| bare | 2 |\n| gone | 3 (`docs/results/b.json`) |\n| out | 4 (`docs/results/../../x.json`) |\n\n"
        "| other | table |\n|---|---|\n| not | a headline |\n",
        encoding="utf-8",
    )
    assert [p.split(": ", 2)[1] for p in _unbacked_headlines(readme)] == [
        "names no results file under docs/results/",
        "names docs/results/b.json, no such file under docs/results/",
        "names docs/results/../../x.json, no such file under docs/results/",
    ]
