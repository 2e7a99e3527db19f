"""docs/api.md names every public name of strategax, and every `sx.` name it mentions exists
(except those other issues are still building, listed here); links between pages resolve."""
import re
from pathlib import Path

import strategax as sx

PAGE = (Path(__file__).resolve().parent.parent / "docs" / "api.md").read_text()
NOT_YET: set[str] = set()  # names other issues are still building


def resolve(dotted: str):
    obj = sx
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


def test_every_public_name_is_documented():
    # Intent: a name added to sx.__all__ (or sx.nn, sx.metrics, sx.data) gets a line in the API page.
    names = [*sx.__all__, *(f"{m}.{n}" for m in ("nn", "metrics", "data") for n in getattr(sx, m).__all__)]
    missing = [n for n in names if f"sx.{n}" not in PAGE]
    assert not missing, f"docs/api.md does not mention: {missing}"


def test_every_documented_name_exists():
    # Intent: the API page does not promise names that are not there.
    mentioned = set(re.findall(r"sx\.([A-Za-z_][A-Za-z0-9_.]*[A-Za-z0-9_])", PAGE))
    missing = []
    for name in sorted(mentioned):
        if name.split(".")[0] in NOT_YET and not hasattr(sx, name.split(".")[0]):
            continue
        try:
            resolve(name)
        except AttributeError:
            missing.append(name)
    assert not missing, f"docs/api.md mentions names strategax lacks: {missing}"


def _anchor(heading: str) -> str:
    """GitHub's anchor for a Markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def test_links_between_pages_resolve():
    # Intent: every relative link of the README and docs/ points at a file that exists and,
    # for `page.md#anchor`, at a heading of that page.
    root = Path(__file__).resolve().parent.parent
    pages = [root / "README.md", *sorted((root / "docs").glob("*.md"))]
    broken = []
    for page in pages:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            if not file.exists():
                broken.append(f"{page.name}: {target}")
            elif anchor and file.suffix == ".md":
                headings = re.findall(r"^#+ (.*)$", file.read_text(), re.M)
                if anchor not in {_anchor(h) for h in headings}:
                    broken.append(f"{page.name}: {target}")
    assert not broken, broken


def test_readme_and_api_page_point_at_nothing_outside_the_repository():
    # Intent: a reader of the repository alone can follow every reference: no link or path to a
    # file outside it (the project's ../shared folder, absolute /work paths).
    root = Path(__file__).resolve().parent.parent
    for page in (root / "README.md", root / "docs" / "api.md"):
        text = page.read_text()
        assert "../shared" not in text and "/work/" not in text, page
        for target in re.findall(r"\]\(([^)#]+)", text):
            if "://" in target:
                continue
            resolved = (page.parent / target).resolve()
            assert resolved.is_relative_to(root) and resolved.exists(), (page.name, target)
