"""scripts/check-docs, the documentation check scripts/test runs: the real script on the real
pages. It passes on this checkout; on a copy of the manual with a merge-conflict block, a
heading used twice, a broken link or a page left out of nav it fails, and its line names
the file and line of each problem."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.support.paths import ROOT

SCRIPT = ROOT / "scripts" / "check-docs"


def check_docs(checkout: Path) -> subprocess.CompletedProcess[str]:
    # mkdocs is in the test extra, beside this interpreter
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run(
        ["bash", str(SCRIPT), str(checkout)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def manual_copy(tmp_path: Path) -> Path:
    """The manual as it is (README, mkdocs.yml, docs/) in a git checkout of its own, every
    file tracked: the conflict check reads git's list of tracked files."""
    copy = tmp_path / "checkout"
    copy.mkdir()
    shutil.copy(ROOT / "README.md", copy / "README.md")
    shutil.copy(ROOT / "mkdocs.yml", copy / "mkdocs.yml")
    shutil.copytree(ROOT / "docs", copy / "docs")
    subprocess.run(["git", "init", "-q", str(copy)], check=True)
    return copy


def track_all(copy: Path) -> None:
    subprocess.run(["git", "-C", str(copy), "add", "-A"], check=True)


def line_number(path: Path, text: str) -> int:
    return path.read_text().splitlines().index(text) + 1


def test_the_checkout_passes() -> None:
    done = check_docs(ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout == ""


def test_the_copy_passes_before_anything_is_injected(tmp_path: Path) -> None:
    copy = manual_copy(tmp_path)
    track_all(copy)
    done = check_docs(copy)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_conflict_block_in_any_tracked_file_fails_at_its_lines(tmp_path: Path) -> None:
    copy = manual_copy(tmp_path)
    page = copy / "docs" / "run-file.md"
    lines = page.read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("| `server` "))
    lines[at : at + 1] = [
        "<<<<<<< HEAD",
        lines[at],
        "=======",
        "| `server` | older |",
        ">>>>>>> serve",
    ]
    page.write_text("\n".join(lines) + "\n")
    code = copy / "tool.py"
    code.write_text("x = 1\n<<<<<<< ours\nx = 2\n>>>>>>> theirs\n")
    # a line of "=======" alone is a setext underline or data, never a conflict by itself
    (copy / "data.txt").write_text("Title\n=======\n")
    track_all(copy)
    done = check_docs(copy)
    assert done.returncode == 1
    opened = line_number(page, "<<<<<<< HEAD")
    closed = line_number(page, ">>>>>>> serve")
    assert f'docs/run-file.md:{opened}: merge-conflict marker "<<<<<<< HEAD"' in done.stdout
    assert f'docs/run-file.md:{closed}: merge-conflict marker ">>>>>>> serve"' in done.stdout
    assert 'tool.py:2: merge-conflict marker "<<<<<<< ours"' in done.stdout
    assert "data.txt" not in done.stdout
    for line in done.stdout.splitlines():
        assert line.endswith(
            "resolve the conflict (read both sides, keep the right content) and delete the markers"
        )


def test_an_untracked_file_is_not_read_for_markers(tmp_path: Path) -> None:
    copy = manual_copy(tmp_path)
    track_all(copy)
    (copy / "scratch.txt").write_text("<<<<<<< HEAD\n")
    done = check_docs(copy)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_heading_used_twice_on_a_page_fails_at_the_second(tmp_path: Path) -> None:
    copy = manual_copy(tmp_path)
    page = copy / "docs" / "capacity.md"
    text = page.read_text()
    first = text.splitlines()[0]  # "# Capacity at an SLO"
    # The same title as a code block's comment is no heading; as a section it is.
    page.write_text(f"{text}\n```bash\n{first}\n```\n\n## Capacity at an SLO\n\nAgain.\n")
    readme = copy / "README.md"
    readme.write_text(readme.read_text() + "\n## Two Commands\n")
    track_all(copy)
    done = check_docs(copy)
    assert done.returncode == 1
    again = len(page.read_text().splitlines()) - 2
    assert done.stdout.splitlines() == [
        f'README.md:{len(readme.read_text().splitlines())}: heading "Two Commands" is used '
        f"twice on this page (first at line {line_number(readme, '## Two commands')}): "
        "rename one or merge the two sections",
        f'docs/capacity.md:{again}: heading "Capacity at an SLO" is used twice on this page '
        "(first at line 1): rename one or merge the two sections",
    ]


def test_a_broken_link_and_a_page_left_out_of_nav_fail_the_strict_build(tmp_path: Path) -> None:
    copy = manual_copy(tmp_path)
    page = copy / "docs" / "trials.md"
    page.write_text(
        page.read_text() + "\nSee [the gone page](gone.md) and [a section](results.md#gone).\n"
    )
    (copy / "docs" / "extra.md").write_text("# An extra page\n")
    track_all(copy)
    done = check_docs(copy)
    assert done.returncode == 1
    at = len(page.read_text().splitlines())
    assert (
        f"docs/trials.md:{at}: a link 'gone.md', but the target is not found among "
        "documentation files: fix the link" in done.stdout
    )
    assert (
        f"docs/trials.md:{at}: a link 'results.md#gone', but the doc 'results.md' does not "
        "contain an anchor '#gone': fix the link" in done.stdout
    )
    assert "docs/extra.md:1: page not in mkdocs.yml's nav: add it to nav" in done.stdout
    assert not (copy / "site").exists()  # built outside the checkout
