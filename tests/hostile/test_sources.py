"""Pins that disagree with the cache, sources that misbehave, and what a failed or killed command leaves.

A pin changed under a warm cache, a git pin naming a commit that does not exist, an index that
answers 404, a corrupt partial download, a bad URL or timestamp: each gets a message that says
what is wrong and what to do, with its documented exit code, and changes nothing on disk.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from conftest import Demo
from helpers import git, sha256, snapshot
from helpers import import_tag as tag_of
from patchtool import git as gitmod
from patchtool.errors import GitError, UpstreamError
from patchtool.git.stream import quote_path
from patchtool.project.pins import Pin
from patchtool.upstream.cache import Cache
from patchtool.urls import SourceUrl

PIN = "upstream-pins/demo-1.0.toml"


def run(demo: Demo, *args: str, env: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
    res = demo.run(*args, "--json", env=env)
    assert "Traceback" not in res.stderr, res.stderr
    return res.returncode, json.loads(res.stdout)


def unchanged(demo: Demo, *args: str, env: dict[str, str] | None = None) -> tuple[int, list[dict[str, Any]]]:
    """Run a command that must fail: the project and a warm cache are byte-identical afterwards; a cold
    cache holds no more than an empty repository (no object, no ref, no download)."""
    cold = not demo.cache.exists()
    project, cache = snapshot(demo.root), snapshot(demo.cache)
    code, out = run(demo, *args, env=env)
    assert snapshot(demo.root) == project
    if cold:
        left = [Path(p).relative_to(demo.cache).as_posix() for p in snapshot(demo.cache)]
        assert all(
            p == "lock"
            or (p.startswith("upstream.git/") and not p.startswith(("upstream.git/objects/", "upstream.git/refs/")))
            for p in left
        ), left
    else:
        assert snapshot(demo.cache) == cache
    return code, out["errors"]


def edit_pin(demo: Demo, old: str, new: str) -> None:
    pin = demo.root / PIN
    text = pin.read_text()
    assert old in text
    pin.write_text(text.replace(old, new, 1))


def import_tag(demo: Demo) -> str:
    """The tag of the demo pin's import: by distribution, version, the wheel's sha256 and the prefix."""
    return tag_of(demo.wheel)


def tag_commit(demo: Demo) -> str:
    return git(demo.cache / "upstream.git", "rev-parse", import_tag(demo)).strip()


# -- a pin changed under a warm cache ------------------------------------------------------------


def other_digit(hexdigest: str) -> str:
    return hexdigest[:-1] + ("0" if hexdigest[-1] != "0" else "1")


@pytest.mark.parametrize("with_tree", [False, True])
def test_changed_sha256_is_refused_by_a_warm_cache(one_patch: Demo, with_tree: bool) -> None:
    code, out = run(one_patch, "apply", "--into", str(one_patch.root.parent / "tree"))
    assert code == 0, out
    if with_tree:  # the pin records the import's tree, as the real pin does
        tree = git(one_patch.cache / "upstream.git", "rev-parse", f"{import_tag(one_patch)}^{{tree}}").strip()
        edit_pin(one_patch, "prefix = ", f'tree = "{tree}"\nprefix = ')
    good = sha256(one_patch.wheel)
    edit_pin(one_patch, good, other_digit(good))
    commit, tag = tag_commit(one_patch), import_tag(one_patch)
    for command, code in (("check", 1), ("status", 4), ("apply", 4), ("build", 4)):
        got, errors = unchanged(
            one_patch, command, *(["--into", str(one_patch.root.parent / "t2")] if command == "apply" else [])
        )
        assert got == code, errors
        assert errors[0]["message"] == (
            f"pin demo-1.0 does not match the cached import {tag} ({commit[:12]}): "
            f"sha256: the pin says {other_digit(good)}, the import recorded {good}"
        )
        assert errors[0]["file"] == PIN
        assert errors[0]["hint"] == (
            f"if the pin is right, remove the cached import with `git --git-dir={one_patch.cache / 'upstream.git'} "
            f"tag -d {tag}` and run again: the artifact is then downloaded and verified against the pin; otherwise "
            "correct the pin"
        )


def test_changed_size_or_prefix_is_refused_by_a_warm_cache(one_patch: Demo) -> None:
    code, _ = run(one_patch, "status")
    assert code == 0
    size = one_patch.wheel.stat().st_size
    commit = tag_commit(one_patch)
    pin = one_patch.root / PIN
    text = pin.read_text()
    pin.write_text(text + f"size = {size + 1}\n")
    got, errors = unchanged(one_patch, "status")
    assert got == 4
    assert errors[0]["message"] == (
        f"pin demo-1.0 does not match the cached import {import_tag(one_patch)} ({commit[:12]}): "
        f"size: the pin says {size + 1}, the import recorded {size}"
    )
    # another prefix is another import, under a tag of its own; one moved onto this import is refused
    pin.write_text(text.replace('to = "python/demo/"', 'to = "src/demo/"'))
    assert run(one_patch, "status")[0] == 0
    other = tag_of(one_patch.wheel, prefix="demo/ -> src/demo/")
    assert git(one_patch.cache / "upstream.git", "rev-parse", other).strip() != commit
    git(one_patch.cache / "upstream.git", "tag", "-f", other, commit)
    got, errors = unchanged(one_patch, "status")
    assert got == 4
    assert errors[0]["message"] == (
        f"pin demo-1.0 does not match the cached import {other} ({commit[:12]}): "
        "prefix: the pin says demo/ -> src/demo/, the import recorded demo/ -> python/demo/"
    )
    # a size that is right is fine, warm or cold
    pin.write_text(text + f"size = {size}\n")
    assert run(one_patch, "status")[0] == 0


def test_wrong_size_is_refused_when_importing(one_patch: Demo) -> None:
    size = one_patch.wheel.stat().st_size
    edit_pin(one_patch, "prefix = ", f"size = {size - 1}\nprefix = ")
    got, errors = unchanged(one_patch, "status")
    assert got == 4
    assert errors[0]["message"].endswith(
        f"demo-1.0-py3-none-any.whl is {size} bytes, more than the {size - 1} patchtool takes from it; refusing it"
    )  # said by its Content-Length


def test_import_from_an_older_layout_is_made_again(one_patch: Demo) -> None:
    """A cache from before the import recorded the size: the same file is imported again, not refused."""
    assert run(one_patch, "status")[0] == 0
    repo = gitmod.Repo(one_patch.cache / "upstream.git")
    new = tag_commit(one_patch)
    message = repo.commit_message(new)
    old_message = re.sub(r"size \d+\nlayout 2", "layout 1", message) + "\n"
    ident = gitmod.Ident(*gitmod.FIXED_IDENT)
    old = repo.commit_tree(repo.tree_of(new), [], old_message, author=ident, committer=ident)
    repo.update_ref(f"refs/tags/{import_tag(one_patch)}", old)
    assert run(one_patch, "status")[0] == 0
    assert tag_commit(one_patch) == new
    # but an older layout's import of another file is refused like any other
    repo.update_ref(f"refs/tags/{import_tag(one_patch)}", old)
    good = sha256(one_patch.wheel)
    edit_pin(one_patch, good, other_digit(good))
    got, errors = unchanged(one_patch, "status")
    assert got == 4 and "sha256: the pin says" in errors[0]["message"]


def test_tag_that_is_no_import_is_refused(one_patch: Demo) -> None:
    assert run(one_patch, "status")[0] == 0
    repo = gitmod.Repo(one_patch.cache / "upstream.git")
    someone = gitmod.Ident("x", "x@example.org")
    tag = f"refs/tags/{import_tag(one_patch)}"
    repo.update_ref(tag, repo.commit_tree(repo.tree_of(tag), [], "mine\n", author=someone, committer=someone))
    got, errors = unchanged(one_patch, "status")
    assert got == 4
    assert errors[0]["message"].endswith("is not an import patchtool made: the tag moved or the cache was changed")


# -- git pins: a wrong commit is not a moved tag --------------------------------------------------


def git_release(tmp_path: Path) -> tuple[Path, str, str]:
    up = tmp_path / "upstream"
    up.mkdir()
    git(up, "init", "-q")
    (up / "f.py").write_text("a = 1\n")
    git(up, "add", "-A")
    git(up, "commit", "-q", "-m", "one")
    first = git(up, "rev-parse", "HEAD").strip()
    (up / "f.py").write_text("a = 2\n")
    git(up, "commit", "-qam", "two")
    git(up, "tag", "v1.0")
    return up, first, git(up, "rev-parse", "HEAD").strip()


def git_pin(url: Path, commit: str, tag: str = "v1.0") -> Pin:
    return Pin.from_dict(
        {"schema": 1, "name": "demo", "version": "1.0", "git": {"url": str(url), "tag": tag, "commit": commit}},
        name="demo-1.0",
        file=PIN,
    )


def test_git_pin_naming_a_commit_the_remote_lacks(tmp_path: Path) -> None:
    up, _, tagged = git_release(tmp_path)
    typo = other_digit(tagged)
    cache = Cache(tmp_path / "c")
    with pytest.raises(UpstreamError) as exc:
        cache.ensure(git_pin(up, typo))
    assert exc.value.message == (
        f"pin demo-1.0 names commit {typo}, which {up} does not have (its tag v1.0 is {tagged}); refusing it"
    )
    assert exc.value.hint and exc.value.hint.startswith("the pin's commit is wrong (a typo?)")
    assert not cache.repo.out("for-each-ref") and not cache.repo.has_object(f"{typo}^{{commit}}")


def test_git_pin_whose_tag_moved(tmp_path: Path) -> None:
    up, first, tagged = git_release(tmp_path)
    cache = Cache(tmp_path / "c")
    for _ in range(2):  # asking whether the remote has the commit does not put it in the cache
        with pytest.raises(UpstreamError) as exc:
            cache.ensure(git_pin(up, first))
        assert (
            exc.value.message == f"tag v1.0 at {up} is {tagged}, but pin demo-1.0 says {first}: the tag moved; "
            "refusing it"
        )
        assert not cache.repo.has_object(f"{first}^{{commit}}") and not cache.repo.out("for-each-ref")
        cache = Cache(tmp_path / "c")


def test_git_pin_whose_tag_does_not_exist(tmp_path: Path) -> None:
    up, _, tagged = git_release(tmp_path)
    with pytest.raises(UpstreamError) as exc:
        Cache(tmp_path / "c").ensure(git_pin(up, tagged, tag="v9.9"))
    assert exc.value.message.startswith(f"could not fetch tag v9.9 from {up}: git fetch ")
    assert exc.value.hint == "check the network, and the url and tag in the pin"


# -- the fetcher: 4xx is final, a corrupt partial file is fetched afresh --------------------------


def files_requests(demo: Demo) -> list[str]:
    return [r for r in demo.index.requests if r.startswith("/files/")]


def test_404_is_not_retried(one_patch: Demo) -> None:
    url = one_patch.index.url.removesuffix("/simple") + "/files/missing.whl"
    edit_pin(one_patch, "prefix = ", f'url = "{url}"\nprefix = ')
    got, errors = unchanged(one_patch, "status")
    assert got == 4
    assert errors[0]["message"] == f"download of {url} failed: HTTP Error 404: Not Found"
    assert errors[0]["hint"] == "check the pin's 'url', 'filename' and 'index'; nothing was imported"
    assert files_requests(one_patch) == ["/files/missing.whl"]


@pytest.mark.parametrize("status", [403, 410])
def test_other_4xx_is_final_at_once(one_patch: Demo, status: int) -> None:
    one_patch.index.fail_with = [status] * 4
    got, errors = unchanged(one_patch, "status")
    assert got == 4 and f"failed: HTTP Error {status}: " in errors[0]["message"]
    assert len(files_requests(one_patch)) == 1


@pytest.mark.parametrize("status", [408, 429, 503])
def test_transient_answers_are_retried(one_patch: Demo, status: int) -> None:
    one_patch.index.fail_with = [status, status]
    assert run(one_patch, "status")[0] == 0
    assert len(files_requests(one_patch)) == 3


def test_index_answering_404_is_not_retried(one_patch: Demo) -> None:
    index = one_patch.index.url.removesuffix("/simple") + "/nothing"
    got, errors = unchanged(one_patch, "status", env={"PATCHTOOL_INDEX_URL": index})
    assert got == 4
    assert errors[0]["message"] == f"the package index at {index}/demo/ answered HTTP Error 404: Not Found"
    assert one_patch.index.requests == ["/nothing/demo/"]


def test_corrupt_partial_download_is_fetched_again(one_patch: Demo) -> None:
    """A .part a killed command left is resumed; when the result fails the hash, it is fetched afresh
    instead of blaming the pin."""
    wheel = one_patch.wheel.read_bytes()
    part = one_patch.cache / "downloads" / sha256(one_patch.wheel) / f"{one_patch.wheel.name}.part"
    part.parent.mkdir(parents=True)
    part.write_bytes(b"\0" * (len(wheel) // 2))
    code, out = run(one_patch, "status")
    assert code == 0, out
    assert len(files_requests(one_patch)) == 2  # the resumed one, then one from scratch
    assert not part.exists()


def test_wrong_file_from_scratch_still_names_the_pin(one_patch: Demo) -> None:
    good = sha256(one_patch.wheel)
    edit_pin(one_patch, good, "0" * 64)
    url = one_patch.index.url.removesuffix("/simple") + f"/files/{one_patch.wheel.name}"
    edit_pin(one_patch, "prefix = ", f'url = "{url}"\nprefix = ')
    code, errors = unchanged(one_patch, "status")
    assert code == 4 and errors[0]["message"].endswith(
        f"sha256 is {good}, but pin demo-1.0 says {'0' * 64}; the file was not used"
    )
    assert "update the pin's sha256" in errors[0]["hint"]


def test_a_url_patchtool_cannot_fetch_is_no_source_url() -> None:
    with pytest.raises(ValueError, match="'notaurl' is not an https URL"):
        SourceUrl.parse("notaurl")


# -- URLs and timestamps from the environment and the pin ----------------------------------------


def test_index_url_from_the_environment_is_checked(one_patch: Demo) -> None:
    got, errors = unchanged(one_patch, "status", env={"PATCHTOOL_INDEX_URL": "notaurl"})
    assert got == 2
    assert errors[0]["message"] == "PATCHTOOL_INDEX_URL='notaurl' is not an https URL (nor http, file:)"


def test_index_url_in_the_pin_is_checked(one_patch: Demo) -> None:
    edit_pin(one_patch, f'index = "{one_patch.index.url}"', 'index = "ftp//nowhere"')
    got, errors = unchanged(one_patch, "status")
    assert got == 1
    assert [(e["key"], e["message"]) for e in errors] == [
        ("artifact.index", "'ftp//nowhere' is not an https URL (nor http, file:)")
    ]


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (
            ["--source-date-epoch", "99999999999999"],
            {},
            "--source-date-epoch 99999999999999 is after 2107-12-31, the last date a wheel (a zip) can carry",
        ),
        (
            [],
            {"SOURCE_DATE_EPOCH": "4354819200"},
            "SOURCE_DATE_EPOCH=4354819200 is after 2107-12-31, the last date a wheel (a zip) can carry",
        ),
    ],
)
def test_timestamp_a_wheel_cannot_carry(one_patch: Demo, args: list[str], env: dict[str, str], message: str) -> None:
    out = one_patch.root / "dist"
    got, errors = unchanged(one_patch, "build", "--out", str(out), *args, env=env)
    assert got == 2 and errors[0]["message"] == message and not out.exists()
    assert errors[0]["hint"] == "give seconds since the epoch, at most 4354819198"


def test_last_timestamp_a_wheel_can_carry(one_patch: Demo) -> None:
    code, out = run(one_patch, "build", "--out", str(one_patch.root / "dist"), "--source-date-epoch", "4354819198")
    assert code == 0, out


# -- leftovers: a killed build, a failed fast-import -----------------------------------------------


def test_partial_wheels_of_killed_builds_are_removed(one_patch: Demo) -> None:
    dist = one_patch.root / "dist"
    dist.mkdir()
    stale = dist / ".demo-1.0+pt.000000000000-py3-none-any.whl.0123abcd.part"  # a kill -9 left it
    stale.write_bytes(b"PK half a wheel")
    running = dist / ".demo-1.0+pt.111111111111-py3-none-any.whl.4567cdef.part"  # a build writing now
    running.write_bytes(b"PK")
    mine = dist / ".notes.part"  # not ours
    mine.write_text("keep")
    with open(running, "rb") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        code, out = run(one_patch, "build", "--out", str(dist))
    assert code == 0, out
    assert sorted(p.name for p in dist.iterdir()) == sorted([running.name, mine.name, Path(out["data"]["wheel"]).name])


def test_failed_fast_import_leaves_no_crash_report(tmp_path: Path) -> None:
    repo = gitmod.Repo.init_bare(tmp_path / "r.git")
    (repo.git_dir / "fast_import_crash_99999").write_text("a killed process left this")
    before = snapshot(repo.git_dir)
    with pytest.raises(GitError) as exc:
        repo.fast_import([b"bogus\n"])
    assert exc.value.message == "git fast-import failed: fatal: Unsupported command: bogus"
    assert snapshot(repo.git_dir) == {k: v for k, v in before.items() if "fast_import_crash" not in k}


def test_stream_writer_quotes_paths_and_refuses_unsafe_ones(tmp_path: Path) -> None:
    assert quote_path("plain/path with spaces.py") == b"plain/path with spaces.py"
    assert quote_path('a"b.py') == b'a"b.py'
    assert quote_path('"q.py') == b'"\\"q.py"'
    assert quote_path('"a\\b\n\t\x01\x7f.py') == b'"\\"a\\\\b\\n\\t\\001\\177.py"'
    repo = gitmod.Repo.init_bare(tmp_path / "r.git")
    ident = gitmod.Ident("a", "a@example.org")
    odd = ('"q.py', 'a "b" c.py', "\u00fc.py", "a\\b.py")
    commit = gitmod.NewCommit(
        message="odd\n",
        author=ident,
        committer=ident,
        files=tuple(gitmod.FileWrite(p, "100644", data=p.encode()) for p in odd[:3]),
    )
    (sha,) = repo.write_commits(None, [commit], ref="refs/test/odd")
    assert repo.cat_files(sha, list(odd[:3])) == {p: p.encode() for p in odd[:3]}
    assert git(repo.git_dir, "rev-list", "--parents", "-1", sha).split() == [sha]  # a root commit
    before = snapshot(repo.git_dir)
    for bad in ("a\nM 100644 inline x", "a/./b.py", ".git/hooks/x", odd[3]):
        evil = gitmod.NewCommit(
            message="evil\n", author=ident, committer=ident, files=(gitmod.FileWrite(bad, "100644", data=b"x"),)
        )
        with pytest.raises(GitError, match=f"refusing to write {re.escape(repr(bad))} into a commit: "):
            repo.write_commits(sha, [evil], ref="refs/test/evil")
        assert snapshot(repo.git_dir) == before


def test_import_sweeps_crash_reports_a_killed_import_left(one_patch: Demo) -> None:
    repo = gitmod.Repo.init_bare(one_patch.cache / "upstream.git")
    (repo.git_dir / "fast_import_crash_4242").write_text("left by a killed import")
    assert run(one_patch, "status")[0] == 0
    assert not list(repo.git_dir.glob("fast_import_crash_*"))
    assert os.listdir(repo.git_dir / "refs" / "tags") == [import_tag(one_patch)]


# -- an index that answers with nonsense ---------------------------------------------------------


class Answering:
    """An index that answers every page with ``page`` (what Cache asks of a Fetcher)."""

    def __init__(self, page: Any) -> None:
        self.page = page

    def json(self, url: str) -> Any:
        return self.page


@pytest.mark.parametrize(
    ("page", "message"),
    [
        (
            {"files": [{"filename": "demo-1.1-py3-none-any.whl", "url": "x", "hashes": {"sha256": "../../../../etc"}}]},
            "the index gives '../../../../etc' as the sha256 of demo-1.1-py3-none-any.whl, which is not a sha256 hex "
            "digest; refusing it",
        ),
        (
            {"files": [{"filename": "demo-1.1-py3-none-any.whl", "url": "x", "hashes": "nope"}]},
            "the index gives no sha256 for demo-1.1-py3-none-any.whl; refusing an unverifiable file",
        ),
        (
            ["not", "a", "page"],
            "the package index at https://pypi.org/simple/demo/ did not answer with a PEP 691 project page",
        ),
        (
            {"files": "nope"},
            "the package index at https://pypi.org/simple/demo/ did not answer with a PEP 691 project page",
        ),
    ],
)
def test_index_answering_nonsense_is_refused(tmp_path: Path, page: Any, message: str) -> None:
    from packaging.version import Version

    from patchtool.upstream.releases import pin_for_version

    pin = Pin.from_dict(
        {
            "schema": 1,
            "name": "demo",
            "version": "1.0",
            "artifact": {
                "distribution": "demo",
                "version": "1.0",
                "filename": "demo-1.0-py3-none-any.whl",
                "sha256": "a" * 64,
                "prefix": {"from": "demo/", "to": "python/demo/"},
            },
        },
        name="demo-1.0",
        file=PIN,
    )
    cache = Cache(tmp_path / "c", fetcher=Answering(page))  # type: ignore[arg-type]
    with pytest.raises(UpstreamError) as exc:
        pin_for_version(pin, Version("1.1"), cache=cache)
    assert exc.value.message == message
    assert not (tmp_path / "c").exists()
