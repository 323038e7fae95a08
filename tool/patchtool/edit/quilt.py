"""``patchtool export --quilt``: the series as a quilt ``patches/`` directory, for packaging that
expects quilt. A patch imported from a quilt series is given back as it came (``QUILT_DIR`` keeps
it, ``PatchEntry.imported`` names it): byte for byte while its diff is the one imported, else its
name and header over the new diff, on the kept series file's line. Any other patch is its
format-patch file with a DEP-3 header (``dep3.header``) among its mail headers, which ``git am``
and ``quilt push`` skip and ``import`` reads back."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from patchtool import fsroot, paths
from patchtool.diff.model import lines_of
from patchtool.errors import UsageError
from patchtool.project.metadata import QUILT_DIR
from patchtool.project.repository import Project, manifest_document
from patchtool.series import dep3, metadata
from patchtool.series.writes import refuse_inside_repository


def with_header(text: str, header: str) -> str:
    """Format-patch ``text`` with ``header``'s lines at the end of its mail headers."""
    mail, sep, rest = text.partition("\n\n")
    return f"{mail}\n{header.rstrip(chr(10))}{sep}{rest}"


def check_destination(project: Project, dest: Path, checkouts: Sequence[Path] = ()) -> None:
    """UsageError where ``dest/patches`` would be in the series, ``.git/`` or ``.patchtool/`` of
    the repository or in a checkout worktree (``writes.refuse_inside_repository``)."""
    refuse_inside_repository(
        project.root,
        dest.resolve() / "patches",  # the user's own directories, as the user named them
        checkouts,
        option=f"--quilt {dest}",
        command="export --quilt",
        hint="export into a directory of its own, e.g. debian/ or one outside the repository",
    )


def export_quilt(project: Project, dest: Path, *, force: bool = False, checkouts: Sequence[Path] = ()) -> list[str]:
    """patches/ and patches/series in ``dest`` (``check_destination``); ``force``: refresh a
    quilt directory that is there in place (as ``gbp pq export`` does), removing the patches its
    old series listed that the series no longer has."""
    check_destination(project, dest, checkouts)
    loaded = project.series()
    out = dest / "patches"
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise UsageError(f"{out} is not a directory; refusing to write a quilt series there")
    old = (paths.read_text_if_present(out, "series") or "") if out.exists() else ""
    if out.exists() and any(out.iterdir()) and not force:
        raise UsageError(
            f"{out} exists and is not empty; refusing to overwrite a quilt series",
            hint="refresh it in place with --force, export into a new directory, or remove that one first",
        )
    kept_series = paths.read_text_if_present(project.root, f"{QUILT_DIR}/series") or ""
    lines = _series_lines(kept_series)
    unset: dict[int, set[str]] = {}
    for index, key, _ in metadata.unfilled_defaults(manifest_document(project.root)):
        unset.setdefault(index, set()).add(key)
    written: dict[str, str] = {}  # name -> text
    order: list[tuple[str, bool]] = []  # (name, as the kept series lists it)
    for index, lp in enumerate(loaded):
        came = lp.entry.imported
        original = None
        if came is not None and came.name is not None and came.name not in written:
            original = paths.read_text_if_present(project.root, f"{QUILT_DIR}/{came.name}")
        if came is not None and came.name is not None and original is not None:
            strip = lines[came.name][1] if came.name in lines else 1
            written[came.name] = original if diff_digest(lp.text) == came.diff else rebuilt(original, lp.text, strip)
            order.append((came.name, came.name in lines))
            continue
        name = _free(Path(lp.entry.file).name, written)
        written[name] = with_header(lp.text, dep3.header(lp.entry.to_dict(), unset=unset.get(index, set())))
        order.append((name, False))
    disk = fsroot.Root(dest)
    disk.directory("patches")
    for name, text in written.items():
        disk.write(f"patches/{name}", text)
    disk.write("patches/series", merged_series(kept_series, order))
    for line in old.splitlines():
        words = line.split("#", 1)[0].split()
        gone = words[0] if words else None
        if gone and gone not in written and paths.tree_path_problem(gone) is None and disk.kind(f"patches/{gone}"):
            disk.unlink(f"patches/{gone}")  # kind: a file type (S_IFMT, never 0) or None
    return [str(out / n) for n in written] + [str(out / "series")]


def _free(name: str, taken: Mapping[str, str]) -> str:
    """``name``, or ``stem-2.patch`` ...: one no kept patch of the export has."""
    stem, n = name.removesuffix(".patch"), 2
    while name in taken:
        name, n = f"{stem}-{n}.patch", n + 1
    return name


def _series_lines(text: str) -> dict[str, tuple[str, int]]:
    """Each patch a quilt series file lists: its first line there and its strip level."""
    found: dict[str, tuple[str, int]] = {}
    for line in lines_of(text):
        words = line.split("#", 1)[0].split()
        if words and words[0] not in found:
            strip = next((int(w[2:]) for w in words[1:] if re.fullmatch(r"-p\d{1,3}", w)), 1)
            found[words[0]] = (line if line.endswith("\n") else line + "\n", strip)
    return found


def merged_series(kept: str, order: Sequence[tuple[str, bool]]) -> str:
    """The series file for ``order`` (each patch's name, and whether ``kept`` lists it): the kept
    series' comments, blank lines, options and order where it has them, its lines for patches the
    series no longer has left out, and each other patch after the one before it."""
    lines = _series_lines(kept)
    queue = list(order)
    out: list[str] = []
    done: set[str] = set()
    for line in lines_of(kept):
        if not (words := line.split("#", 1)[0].split()):
            out.append(line if line.endswith("\n") else line + "\n")
            continue
        if words[0] in done or not any(name == words[0] and listed for name, listed in queue):
            continue  # a patch the series no longer has (or a second line for one)
        while queue and not queue[0][1]:
            out.append(f"{queue.pop(0)[0]}\n")
        name, _ = queue.pop(0)  # the next patch the kept series lists, in the series' own order
        out.append(lines[name][0])
        done.add(name)
    out += [f"{name}\n" for name, _ in queue]
    return "".join(out)


_DIFF_START = re.compile(r"^(?:diff --git |--- |Index: )", re.MULTILINE)
_SEPARATOR = re.compile(r"^---[ \t]*$")
_STAT = re.compile(  # a diffstat's lines, as format-patch writes them under its '---' line
    r"^ (?:.+\|\s+(?:\d+ ?[+-]*|Bin .*)|\d+ files? changed.*"
    r"|(?:create|delete) mode .*|rename .*|copy .*|mode change .*)$"
)
_SIGNATURE = re.compile(r"\n-- \n[^\n]*\n\s*\Z")


def rebuilt(original: str, text: str, strip: int) -> str:
    """A kept quilt patch ``original`` with the diff of the format-patch ``text`` in place of its
    own, at its series line's ``strip`` level: its header as it was (a diffstat under its ``---``
    line left out: it counted the old diff), the new diff, its signature where it had one."""
    m = _DIFF_START.search(original)
    head = original[: m.start()] if m else original.rstrip("\n") + "\n\n"
    kept: list[str] = []
    after_separator = False
    for line in lines_of(head):
        if after_separator and _STAT.match(line.rstrip("\n")):
            continue
        after_separator = after_separator or bool(_SEPARATOR.match(line.rstrip("\n")))
        kept.append(line)
    at = text.find("\ndiff --git ")
    diff = text[at + 1 :] if at >= 0 else ""
    signature = s.group(0)[1:] if m and (s := _SIGNATURE.search(original)) else ""
    return "".join(kept) + (diff if strip == 1 else reprefixed(diff, strip)) + signature


def reprefixed(diff: str, strip: int) -> str:
    """A git diff (``a/``, ``b/``) with names for ``patch -p{strip}``: no prefix at 0, ``a/a/`` at
    2 and so on; only the file header lines change, never a hunk's."""
    old, new = "a/" * strip, "b/" * strip
    out: list[str] = []
    header = False
    for line in lines_of(diff):
        if line.startswith("diff --git "):
            header = True
            rest = line[len("diff --git ") :]
            q = '"' if rest.startswith('"') else ""
            rest = q + old + rest[len(q) + 2 :]
            if (cut := max(rest.rfind(" b/"), rest.rfind(' "b/'))) >= 0:
                q2 = '"' if rest[cut + 1] == '"' else ""
                rest = rest[: cut + 1] + q2 + new + rest[cut + 1 + len(q2) + 2 :]
            line = "diff --git " + rest  # noqa: PLW2901 -- a header line rewritten, then kept
        elif line.startswith("@@"):
            header = False
        elif header and line.startswith(("--- a/", '--- "a/', "+++ b/", '+++ "b/')):
            q = '"' if line[4] == '"' else ""
            line = line[:4] + q + (old if line[0] == "-" else new) + line[4 + len(q) + 2 :]  # noqa: PLW2901
        out.append(line)
    return "".join(out)


def diff_digest(text: str) -> str:
    """The sha256 of a format-patch text's diff (from its first ``diff --git`` line on)."""
    at = text.find("\ndiff --git ")
    return hashlib.sha256(text[at + 1 if at >= 0 else 0 :].encode("utf-8")).hexdigest()
