"""Data read as a git option, urls the repository may not choose, and downloads without end.

A git pin's url that is an option (``--upload-pack=...``) runs nothing on any command; no git
command line takes data before ``--end-of-options``; a repository's url is https unless the user
allows local and plain-http ones (``PATCHTOOL_ALLOW_LOCAL_URLS=1``, ``--allow-local-urls``), and
git itself is held to that; every download is capped (the pin's size, else a maximum), and a
``file:`` URL reads only a regular file. Each refusal has its message and exit code and changes
nothing on disk.
"""

from __future__ import annotations

import http.server
import json
import os
import textwrap
import urllib.parse
from pathlib import Path
from typing import Any, ClassVar

import pytest

from cli_run import in_process
from conftest import Demo
from helpers import git, serving, sha256, snapshot
from patchtool import git as gitmod
from patchtool.errors import GitError, PatchtoolError, UpstreamError
from patchtool.git.command import Argv, Runner
from patchtool.upstream.index import Fetcher
from patchtool.urls import ALLOW_LOCAL_ENV, SourceUrl, redact

PIN = "upstream-pins/demo-1.0.toml"
HINT = (
    f"if you trust this repository's urls, allow local and plain-http ones: {ALLOW_LOCAL_ENV}=1 or "
    "patchtool --allow-local-urls ..."
)


def run(demo: Demo, *args: str, env: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
    res = demo.run("--json", *args, env=env)
    assert "Traceback" not in res.stderr, res.stderr
    return res.returncode, json.loads(res.stdout)


def script(tmp_path: Path) -> tuple[Path, Path]:
    """An executable that leaves a marker when anything runs it: (script, marker)."""
    marker = tmp_path / "ran"
    path = tmp_path / "evil.sh"
    path.write_text(f"#!/bin/sh\ntouch {marker}\n")
    path.chmod(0o755)
    return path, marker


def git_release(tmp_path: Path) -> tuple[Path, str]:
    up = tmp_path / "up"
    up.mkdir()
    git(up, "init", "-q")
    (up / "f.py").write_text("a = 1\n")
    git(up, "add", "-A")
    git(up, "commit", "-qm", "one")
    git(up, "tag", "v1.0")
    return up, git(up, "rev-parse", "HEAD").strip()


def git_pin_text(url: str, commit: str) -> str:
    return textwrap.dedent(f"""\
        schema = 1
        name = "demo"
        version = "1.0"
        use = "git"

        [git]
        url = "{url}"
        tag = "v1.0"
        commit = "{commit}"
        """)


def unsafe_outside(demo: Demo) -> dict[str, bytes]:
    return snapshot(demo.root, demo.cache, demo.root.parent / "work")


# -- a url that is an option ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "command", [["status"], ["check"], ["scan", "--versions", "1.0"], ["rebase", "--dry-run", "--to", "1.1"]]
)
@pytest.mark.parametrize("spaced", [False, True])
def test_git_pin_url_that_is_an_option_runs_nothing(
    one_patch: Demo, tmp_path: Path, command: list[str], spaced: bool
) -> None:
    evil, marker = script(tmp_path)
    url = f"--upload-pack=touch {marker};" if spaced else f"--upload-pack={evil}"
    (one_patch.root / PIN).write_text(git_pin_text(url, "a" * 40))
    before = unsafe_outside(one_patch)
    code, out = run(one_patch, *command)
    assert not marker.exists()
    assert unsafe_outside(one_patch) == before
    assert code == 1, out
    why = "contains a space or a control character" if spaced else "starts with '-' (git would read it as an option)"
    assert [(e["file"], e["key"], e["message"]) for e in out["errors"]] == [
        (PIN, "git.url", f"{url!r} is not a git remote: it {why}")
    ]


def test_pin_add_with_a_git_url_that_is_an_option_runs_nothing(one_patch: Demo, tmp_path: Path) -> None:
    evil, marker = script(tmp_path)
    before = unsafe_outside(one_patch)
    code, out = run(one_patch, "pin", "add", "--git", f"--upload-pack={evil}", "--tag", "v1.0")
    assert not marker.exists() and unsafe_outside(one_patch) == before
    assert code == 2
    assert out["errors"][0]["message"] == (
        f"--git '--upload-pack={evil}': '--upload-pack={evil}' is not a git "
        "remote: it starts with '-' (git would read it as an option)"
    )


def test_data_is_never_read_as_an_option(tmp_path: Path) -> None:
    """Below the pin's validation, the git layer itself: a revision, a url or a path that starts
    with a dash goes after --end-of-options (or is refused where git has none), so
    ``--output=FILE`` writes no file and ``--upload-pack`` runs nothing."""
    up, commit = git_release(tmp_path)
    repo = gitmod.Repo(up / ".git")
    target = tmp_path / "written"
    with pytest.raises(GitError):
        repo.commit_time(f"--output={target}")
    with pytest.raises(GitError):
        repo.rev_list(f"--output={target}", commit)
    assert not target.exists()
    evil, marker = script(tmp_path)
    res = repo.git("fetch", args=[f"--upload-pack={evil}", "refs/tags/v1.0"], check=False)
    assert res.returncode != 0 and not marker.exists()
    assert not gitmod.ref_format_ok("--normalize")
    with pytest.raises(GitError, match="refusing to run git reset with '--hard': it would be read as an option"):
        Argv("reset", ("--quiet",), ("--hard",))
    with pytest.raises(ValueError, match="data goes in args or paths"):
        Runner().run("rev-parse", commit)


# -- urls the repository may not choose -----------------------------------------------------------


def without_permission(demo: Demo, *args: str, env: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
    """A command run with PATCHTOOL_ALLOW_LOCAL_URLS unset, as a user who allowed nothing."""
    base = {k: v for k, v in os.environ.items() if k != ALLOW_LOCAL_ENV}
    proc = in_process([*args], cwd=demo.root, env={**base, "PATCHTOOL_CACHE_DIR": str(demo.cache), **(env or {})})
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, json.loads(proc.stdout) if "--json" in args else {"text": proc.stdout + proc.stderr}


def nothing_fetched(demo: Demo, before: dict[str, bytes]) -> None:
    """The project and the work tree unchanged, and the cache holding no object, ref or download."""
    after = unsafe_outside(demo)
    assert {k: v for k, v in after.items() if not k.startswith(str(demo.cache))} == {
        k: v for k, v in before.items() if not k.startswith(str(demo.cache))
    }
    left = [Path(p).relative_to(demo.cache).as_posix() for p in after if p.startswith(str(demo.cache))]
    assert all(
        p == "lock"
        or (p.startswith("upstream.git/") and not p.startswith(("upstream.git/objects/", "upstream.git/refs/")))
        for p in left
    ), left


def test_plain_http_index_needs_the_users_permission(one_patch: Demo) -> None:
    before = unsafe_outside(one_patch)
    code, out = without_permission(one_patch, "--json", "status")
    assert code == 4, out
    (error,) = out["errors"]
    page = f"{one_patch.index.url}/demo/"
    assert (error["file"], error["key"], error["message"], error["hint"]) == (
        PIN,
        "artifact.index",
        f"{page!r} is plain http; a repository may name only https urls, unless you allow local ones",
        HINT,
    )
    assert one_patch.index.requests == []
    nothing_fetched(one_patch, before)
    for allowed in (["--allow-local-urls", "status"], ["status", "--allow-local-urls"]):
        code, out = without_permission(one_patch, *allowed)
        assert code == 0, out


@pytest.mark.parametrize("form", ["path", "file-url"])
def test_local_git_remote_needs_the_users_permission(one_patch: Demo, tmp_path: Path, form: str) -> None:
    up, commit = git_release(tmp_path)
    url = str(up) if form == "path" else up.as_uri()
    (one_patch.root / PIN).write_text(git_pin_text(url, commit))
    before = unsafe_outside(one_patch)
    code, out = without_permission(one_patch, "--json", "status")
    nothing_fetched(one_patch, before)
    assert code == 4
    (error,) = out["errors"]
    assert (error["key"], error["message"], error["hint"]) == (
        "git.url",
        f"{url!r} is a local file; a repository may name only https urls, unless you allow local ones",
        HINT,
    )


def test_git_itself_fetches_only_by_https_unless_allowed(tmp_path: Path) -> None:
    """The backstop under ``permit``: every git runs with GIT_ALLOW_PROTOCOL=https, so a fetch
    from a local repository fails in git even where patchtool's own check were forgotten."""
    up, commit = git_release(tmp_path)
    repo = gitmod.Repo.init_bare(tmp_path / "c.git")
    res = repo.git("fetch", "--quiet", args=[str(up), "refs/tags/v1.0"], check=False)
    assert res.returncode != 0 and "transport 'file' not allowed" in res.stderr
    repo.fetch(SourceUrl.parse(str(up), git=True), "+refs/tags/v1.0:refs/t", allow_local=True)
    assert repo.resolve("refs/t") == commit


def test_a_file_url_is_no_content_oracle(one_patch: Demo, tmp_path: Path) -> None:
    """``url = "file:///etc/passwd"`` used to download the file and print its sha256 in the hash
    mismatch. Without the user's permission nothing is read; with it, the mismatch is an error
    that names the pin's hash, never one of the file's own."""
    secret = tmp_path / "secret"
    secret.write_text("root:password-hash\n")
    pin = one_patch.root / PIN
    pin.write_text(pin.read_text().replace("prefix = ", f'url = "{secret.as_uri()}"\nprefix = '))
    code, out = without_permission(one_patch, "--json", "status")
    assert code == 4 and out["errors"][0]["key"] == "artifact.url"
    assert "is a local file" in out["errors"][0]["message"]
    assert sha256(secret) not in json.dumps(out)
    assert not (one_patch.cache / "downloads").exists() or not any((one_patch.cache / "downloads").rglob("*secret*"))


def test_an_index_link_to_a_local_file_is_refused(one_patch: Demo, tmp_path: Path) -> None:
    """The index is the user's own (PATCHTOOL_INDEX_URL), so its plain http is theirs to allow; a
    link on its page is the index's, not the user's, and file: there is refused."""
    secret = tmp_path / "secret"
    secret.write_text("private\n")
    one_patch.index.hrefs[one_patch.wheel.name] = secret.as_uri()
    code, out = without_permission(one_patch, "--json", "status", env={"PATCHTOOL_INDEX_URL": one_patch.index.url})
    assert code == 4
    (error,) = out["errors"]
    assert (error["file"], error["key"]) == (f"the index page {one_patch.index.url}/demo/", "href")
    assert error["message"].startswith(f"{secret.as_uri()!r} is a local file")
    assert sha256(secret) not in json.dumps(out)


def file_pin(demo: Demo, artifact: Path) -> None:
    """The demo's pin, its artifact read from ``artifact`` by a ``file:`` url."""
    pin = demo.root / PIN
    text = pin.read_text().replace(f'sha256 = "{sha256(demo.wheel)}"', f'sha256 = "{"0" * 64}"')
    pin.write_text(text.replace("prefix = ", f'url = "{artifact.as_uri()}"\nprefix = '))


FILES_HINT = (
    f"a local file is read only beneath a directory you name: {ALLOW_LOCAL_ENV}=DIR or patchtool "
    "--allow-local-urls-in DIR ..."
)


@pytest.mark.parametrize("how", ["=1", "--allow-local-urls", "=DIR", "--allow-local-urls-in"])
def test_a_file_url_is_no_oracle_where_local_urls_are_allowed(one_patch: Demo, tmp_path: Path, how: str) -> None:
    """With local urls allowed, ``url = "file:///any/file"`` printed the file's size and sha256 in
    the mismatch (found by issue 29): a local file is read only beneath a directory the user names."""
    secret = tmp_path / "secret"
    secret.write_text("root:password-hash\n")
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    file_pin(one_patch, secret)
    env = {ALLOW_LOCAL_ENV: "1" if how == "=1" else str(mirror) if how == "=DIR" else ""}
    flag = ["--allow-local-urls"] if how == "--allow-local-urls" else []
    flag = ["--allow-local-urls-in", str(mirror)] if how == "--allow-local-urls-in" else flag
    before = unsafe_outside(one_patch)
    for command in (["status"], ["check"]):
        code, out = without_permission(one_patch, "--json", *flag, *command, env=env)
        assert code in (1, 4), out
        (error,) = out["errors"]
        what = (
            "a local file, and you name no directory local files may come from"
            if how in ("=1", "--allow-local-urls")
            else f"a local file outside {mirror}, the directory you allow"
        )
        assert (error["file"], error["key"], error["message"], error["hint"]) == (
            PIN,
            "artifact.url",
            f"{secret.as_uri()!r} is {what}; a repository may name only https urls, unless you allow local ones",
            FILES_HINT,
        )
        # the file's size, in what the errors say besides its path (pytest's own may hold those digits)
        said = json.dumps(out["errors"]).replace(str(tmp_path), "TMP")
        assert sha256(secret) not in json.dumps(out) and str(secret.stat().st_size) not in said
    nothing_fetched(one_patch, before)


def test_a_file_url_beneath_the_named_directory_is_read(one_patch: Demo, tmp_path: Path) -> None:
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    wheel = mirror / one_patch.wheel.name
    wheel.write_bytes(one_patch.wheel.read_bytes())
    (mirror / "link.whl").symlink_to(one_patch.wheel)
    file_pin(one_patch, mirror / "link.whl")
    pin = one_patch.root / PIN
    pin.write_text(pin.read_text().replace(f'sha256 = "{"0" * 64}"', f'sha256 = "{sha256(wheel)}"'))
    # a link inside the directory to a file outside it is outside
    code, out = without_permission(one_patch, "--json", "status", env={ALLOW_LOCAL_ENV: str(mirror)})
    assert code == 4 and out["errors"][0]["key"] == "artifact.url", out
    pin.write_text(pin.read_text().replace((mirror / "link.whl").as_uri(), wheel.as_uri()))
    code, out = without_permission(one_patch, "--json", "status", env={ALLOW_LOCAL_ENV: str(mirror)})
    assert code == 0, out


@pytest.mark.parametrize("key", ["artifact.url", "artifact.index"])
def test_a_file_url_with_an_encoded_control_character_is_refused(one_patch: Demo, tmp_path: Path, key: str) -> None:
    """Found by an attack: ``%00`` in a pin's ``file:`` url was an internal error (exit 70,
    "embedded null byte") where local files are allowed; it is refused naming the file and key."""
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    url = f"{mirror.as_uri()}/x%00/{one_patch.wheel.name}" if key == "artifact.url" else f"{mirror.as_uri()}/%00/simple"
    if key == "artifact.url":
        file_pin(one_patch, mirror / "placeholder")
        pin = one_patch.root / PIN
        pin.write_text(pin.read_text().replace((mirror / "placeholder").as_uri(), url))
    else:
        pin = one_patch.root / PIN
        pin.write_text(
            "\n".join(
                f'index = "{url}"' if line.startswith("index = ") else line for line in pin.read_text().split("\n")
            )
        )
    before = unsafe_outside(one_patch)
    code, out = without_permission(one_patch, "--json", "check", env={ALLOW_LOCAL_ENV: str(mirror)})
    assert code == 1, out
    path = urllib.parse.unquote(urllib.parse.urlsplit(url).path)
    assert [(e["file"], e["key"], e["message"]) for e in out["errors"]] == [
        (PIN, key, f"{url!r} is not a URL: its path {path!r} contains a control character")
    ]
    nothing_fetched(one_patch, before)


def test_a_git_path_outside_the_named_directory_is_refused(one_patch: Demo, tmp_path: Path) -> None:
    """=1 still lets a pin name a local git repository; with a directory named, only beneath it."""
    up, commit = git_release(tmp_path)
    (one_patch.root / PIN).write_text(git_pin_text(str(up), commit))
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    before = unsafe_outside(one_patch)
    code, out = without_permission(one_patch, "--json", "status", env={ALLOW_LOCAL_ENV: str(mirror)})
    assert code == 4, out
    nothing_fetched(one_patch, before)
    assert (out["errors"][0]["key"], out["errors"][0]["message"]) == (
        "git.url",
        f"{str(up)!r} is a local file outside {mirror}, the directory you allow; a repository may name only https "
        "urls, unless you allow local ones",
    )
    for allowed in ("1", str(tmp_path)):
        code, out = without_permission(one_patch, "--json", "status", env={ALLOW_LOCAL_ENV: allowed})
        assert code == 0, out


def test_allow_local_urls_must_be_1_or_a_directory(one_patch: Demo) -> None:
    before = snapshot(one_patch.root)
    code, out = without_permission(one_patch, "--json", "status", env={ALLOW_LOCAL_ENV: "mirror"})
    assert code == 2, out
    assert out["errors"][0]["message"] == f"{ALLOW_LOCAL_ENV}='mirror' is neither 1 nor an absolute directory"
    assert snapshot(one_patch.root) == before


# -- downloads without end --------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["device", "fifo"])
def test_a_file_url_reads_only_a_regular_file(one_patch: Demo, tmp_path: Path, kind: str) -> None:
    """``file:///dev/zero`` with size = 100 wrote 2 GB; a FIFO hung forever."""
    if kind == "fifo":
        target = tmp_path / "pipe"
        os.mkfifo(target)
    else:
        target = Path("/dev/zero")
    pin = one_patch.root / PIN
    pin.write_text(pin.read_text().replace("prefix = ", f'url = "{target.as_uri()}"\nsize = 100\nprefix = '))
    before = snapshot(one_patch.root)
    code, out = run(one_patch, "status", env={ALLOW_LOCAL_ENV: "/"})  # local files allowed from anywhere
    assert code == 4
    what = "a named pipe (FIFO)" if kind == "fifo" else "a device"
    assert (
        out["errors"][0]["message"] == f"{target}: {target.as_uri()} is {what}, not a regular file; refusing to read it"
    )
    assert snapshot(one_patch.root) == before
    downloads = one_patch.cache / "downloads"
    assert not downloads.exists() or not [p for p in downloads.rglob("*") if p.is_file()]


def test_an_endless_body_is_cut_at_the_pins_size(one_patch: Demo) -> None:
    one_patch.index.endless.add(one_patch.wheel.name)
    pin = one_patch.root / PIN
    pin.write_text(pin.read_text().replace("prefix = ", "size = 1000\nprefix = "))
    code, out = run(one_patch, "status")
    assert code == 4
    url = f"{one_patch.index.url[:-7]}/files/{one_patch.wheel.name}"
    assert out["errors"][0]["message"] == f"{url} sends more than the 1000 bytes patchtool takes from it; refusing it"
    downloads = one_patch.cache / "downloads"
    assert not [p for p in downloads.rglob("*") if p.is_file()]
    assert len([r for r in one_patch.index.requests if r.startswith("/files/")]) == 1  # refused, not retried


def test_an_endless_body_without_a_pinned_size_stops_at_the_maximum(one_patch: Demo, tmp_path: Path) -> None:
    one_patch.index.endless.add(one_patch.wheel.name)
    url = SourceUrl.parse(f"{one_patch.index.url[:-7]}/files/{one_patch.wheel.name}")
    dest = tmp_path / "dl" / one_patch.wheel.name
    dest.parent.mkdir()
    with pytest.raises(UpstreamError) as exc:
        Fetcher(attempts=1, max_artifact=1 << 20).download(url, dest, size=None)
    assert exc.value.message == f"{url} sends more than the {1 << 20} bytes patchtool takes from it; refusing it"
    assert list(dest.parent.iterdir()) == []


def test_an_endless_index_page_stops_at_the_maximum(one_patch: Demo) -> None:
    one_patch.index.endless_page = True
    page = SourceUrl.parse(f"{one_patch.index.url}/demo/")
    with pytest.raises(UpstreamError) as exc:
        Fetcher(attempts=1, max_page=1 << 20).json(page)
    assert exc.value.message == f"{page} sends more than the {1 << 20} bytes patchtool takes from it; refusing it"


def test_pin_add_with_the_users_own_local_remote_needs_no_permission(one_patch: Demo, tmp_path: Path) -> None:
    """The user typed the path: it is theirs, not the repository's, so git may fetch it. The pin
    it writes is the repository's from then on, and using that needs the permission."""
    up, commit = git_release(tmp_path)
    git(up, "tag", "v1.1")
    code, out = without_permission(one_patch, "--json", "pin", "add", "--git", str(up), "--tag", "v1.1")
    assert code == 0, out
    pin = (one_patch.root / "upstream-pins" / "demo-1.1.toml").read_text()
    assert f'url = "{up}"' in pin and f'commit = "{commit}"' in pin


@pytest.mark.parametrize(
    ("location", "why"),
    [
        ("file:///etc/passwd", "redirects to the local file 'file:///etc/passwd'; refusing it"),
        (
            "ftp://127.0.0.1:1/demo.whl",
            "redirects to 'ftp://127.0.0.1:1/demo.whl': 'ftp://127.0.0.1:1/demo.whl' is not "
            "an https URL (nor http, file:); refusing it",
        ),
    ],
)
def test_a_download_follows_no_redirect_to_another_protocol(one_patch: Demo, location: str, why: str) -> None:
    """urllib's own opener follows https to ftp; patchtool's follows http(s) alone, and https to
    plain http only where the user allows it."""
    one_patch.index.redirects[one_patch.wheel.name] = location
    code, out = run(one_patch, "status")
    assert code == 4
    url = f"{one_patch.index.url[:-7]}/files/{one_patch.wheel.name}"
    assert out["errors"][0]["message"] == f"{url} {why}"
    assert len([r for r in one_patch.index.requests if r.startswith("/files/")]) == 1  # refused, not retried


# -- credentials in a url are never printed ------------------------------------------------------


def shows_no_secret(demo: Demo, *args: str, env: dict[str, str] | None = None) -> tuple[int, dict[str, Any], str]:
    """Run ``args`` as text and as ``--json``: the same exit code, ``secret`` in neither's stdout
    or stderr; (code, the envelope, the text run's stdout and stderr)."""
    text = demo.run(*args, env=env)
    as_json = demo.run("--json", *args, env=env)
    for res in (text, as_json):
        assert "Traceback" not in res.stderr, res.stderr
        assert "secret" not in res.stdout + res.stderr, res.stdout + res.stderr
    assert text.returncode == as_json.returncode
    return as_json.returncode, json.loads(as_json.stdout), text.stdout + text.stderr


def test_pin_add_never_prints_the_credentials_of_its_git_url(one_patch: Demo) -> None:
    """A url with `user:password@` was echoed into messages and CI logs (found by issue 29)."""
    before = snapshot(one_patch.root)
    url = "https://user:secret@127.0.0.1:1/x.git"
    code, out, text = shows_no_secret(one_patch, "pin", "add", "--git", url, "--tag", "v1.0")
    assert code == 4, out
    assert out["errors"][0]["message"].startswith("could not fetch tag v1.0 from https://***@127.0.0.1:1/x.git")
    assert "https://***@127.0.0.1:1/x.git" in text
    assert snapshot(one_patch.root) == before


@pytest.mark.parametrize("allowed", [False, True])
def test_a_pin_url_with_credentials_is_never_printed(one_patch: Demo, allowed: bool) -> None:
    """A pin file's git.url with credentials, refused (plain http, not allowed) or failing (nothing
    listens there): neither the message nor the --json envelope holds the password."""
    (one_patch.root / PIN).write_text(git_pin_text("http://user:secret@127.0.0.1:1/x.git", "a" * 40))
    env = None if allowed else {ALLOW_LOCAL_ENV: ""}
    before = snapshot(one_patch.root)
    for command in (["check"], ["status"], ["pin", "list"]):
        shows_no_secret(one_patch, *command, env=env)
    code, out, text = shows_no_secret(one_patch, "check", env=env)
    assert code == 1, out  # a problem of the pin: check reports it
    message = out["errors"][0]["message"]
    if allowed:  # tried, and failed: git's own words name the url too
        assert message.startswith("could not fetch tag v1.0 from http://***@127.0.0.1:1/x.git: git fetch ")
    else:
        assert (out["errors"][0]["key"], message) == (
            "git.url",
            "'http://***@127.0.0.1:1/x.git' is plain http; a repository may name only https urls, unless you "
            "allow local ones",
        )
    assert "http://***@127.0.0.1:1/x.git" in text
    assert snapshot(one_patch.root) == before


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("https://user:secret@host/x.git", "https://***@host/x.git"),
        ("fatal: unable to access 'https://u:secret@h/x/': no", "fatal: unable to access 'https://***@h/x/': no"),
        ("git+https://token@h/ and x.http://a:secret@b", "git+https://***@h/ and x.http://***@b"),
        ("ssh://git@github.com/a mailto:a@b https://h/path@x", "ssh://***@github.com/a mailto:a@b https://h/path@x"),
        # found by an attack: a quote or a second '@' in the password ended the redaction early,
        # though git and curl connect with all of it as the credential
        ('https://alice:s3cr"etPW@127.0.0.1:9/x.git', "https://***@127.0.0.1:9/x.git"),
        ("https://alice:s3cr@tPW@127.0.0.1:9/x.git", "https://***@127.0.0.1:9/x.git"),
        ("'https://al'ice:p@w@h': no", "'https://***@h': no"),
        # found by the second attack: git reads a '#' or '?' before the last '@' as the password's
        ("http://alice:SEKRIT#x@127.0.0.1:1/f.whl", "http://***@127.0.0.1:1/f.whl"),
        ("http://alice:SEKRIT?x@127.0.0.1:1/r.git", "http://***@127.0.0.1:1/r.git"),
    ],
)
def test_redact_hides_the_userinfo_of_every_url(text: str, shown: str) -> None:
    assert redact(text) == shown


def test_redacting_a_long_hostile_text_is_one_pass() -> None:
    """Every line patchtool prints passes through ``redact``, whose pattern matched a scheme from
    every word boundary of a run like ``a.a.a.``: a 16 KiB url took 0.7 s, an index page's
    16 MiB link would have taken days. 8 MiB of it now read in one pass."""
    run = "a." * (4 << 20)
    assert redact(f"https://x/{run}@") == f"https://x/{run}@"
    assert redact(f"{run}https://user:secret@host/") == f"{run}https://***@host/"
    assert redact(f"https://{'@' * (8 << 20)}h/") == "https://***@h/"
    assert redact(f"https://{'a@' * (4 << 20)}") == "https://***@"


@pytest.mark.parametrize(
    "url",
    [
        "http:/alice:SEKRIT@h/x",
        "http:alice:SEKRIT@h/x",
        "http:///alice:SEKRIT@h/x",
        "http://alice:SEKRIT x@h/x",
        "alice:SEKRIT@127.0.0.1:repo.git",
        "http://alice:SEKRIT\u2003x@h/x",
        "http://alice:SEKRIT\u0085x@h/x",
        "http://alice:SEKRIT\u2028x@h/x",
    ],
)
@pytest.mark.parametrize("git", [False, True])
def test_a_refused_url_is_shown_without_what_comes_before_its_last_at(url: str, git: bool) -> None:
    """Found by the second attack: a url refused for its shape was echoed whole, password included,
    and one holding a Unicode space or line separator was an internal error (exit 70) once used.
    Each is refused as not a url, showing only what follows its last '@'."""
    with pytest.raises(ValueError) as exc:
        SourceUrl.parse(url, git=git)
    assert "SEKRIT" not in str(exc.value)
    assert str(exc.value).startswith(f"'***@{url.rpartition('@')[2]}' is not a")


class _Recording(http.server.BaseHTTPRequestHandler):
    """Redirects /same/ to /simple/demo/ on itself, /other/ to the same path on 'localhost' (another
    host by name), /file/ to a local file; answers 404 to the rest, keeping what each request sent."""

    seen: ClassVar[list[tuple[str, str, str | None]]] = []

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        type(self).seen.append((self.headers.get("Host", ""), self.path, self.headers.get("Authorization")))
        port = self.server.server_address[1]
        where = {"/same/": "/simple/demo/", "/other/": f"http://localhost:{port}/simple/demo/"}
        where["/file/"] = "file:///etc/hostname"
        if self.path in where:
            self.send_response(302)
            self.send_header("Location", where[self.path])
        else:
            self.send_response(404)
        self.end_headers()


@pytest.mark.parametrize("port", ["", ":1", ":server"])
def test_a_download_urls_credentials_go_in_a_header_never_in_a_message(port: str) -> None:
    """Found by the third attack: `https://user:token@host/path` (pip's way to name a private index)
    gave urllib a host holding the password, which http.client read as a port and printed in its
    error ("nonnumeric port: 'SEKRIT@127.0.0.1'"), redaction or not. The credentials go in a Basic
    Authorization header now, sent to that host alone, and no message holds them."""
    import base64

    _Recording.seen.clear()
    with serving(_Recording) as server:
        where = f":{server}" if port == ":server" else port
        url = SourceUrl.parse(f"http://alice:SEK%40RIT@127.0.0.1{where}/simple/demo/")
        fetcher = Fetcher(attempts=1, backoff=0.01, timeout=5, deadline=60, allow_local=True)
        with pytest.raises(PatchtoolError) as caught:
            fetcher.json(url)
    said = caught.value.message + str(caught.value.hint) + json.dumps([p.to_dict() for p in caught.value.as_problems()])
    assert "SEK" not in said and "RIT" not in said, said
    if port == ":server":
        assert [auth for _, _, auth in _Recording.seen] == ["Basic " + base64.b64encode(b"alice:SEK@RIT").decode()]


@pytest.mark.parametrize(
    "url",
    [
        "http://alice:TOP?SECRET@127.0.0.1:1/simple",
        "http://127.0.0.1:1?SECRET@pypi.invalid/simple",
        "https://a:b#c@h/x",
    ],
)
@pytest.mark.parametrize("git", [False, True])
def test_a_url_whose_credentials_two_readers_read_apart_is_refused(url: str, git: bool) -> None:
    """Found by the fourth attack: a '?' or '#' in a password ends the host for Python's url reader
    and not for git's or curl's, so the download printed part of the password and sent the rest to
    another host (the url's user name, or the host before the '?'). Such a url is refused, saying to
    percent-encode them, and shown without its credentials."""
    with pytest.raises(ValueError) as exc:
        SourceUrl.parse(url, git=git)
    assert "SECRET" not in str(exc.value) and ":b#" not in str(exc.value)
    assert "write them percent-encoded (%3F, %23)" in str(exc.value)


@pytest.mark.parametrize("path", ["/same/", "/other/", "/file/"])
def test_credentials_follow_a_redirect_on_the_same_host_alone(path: str) -> None:
    """The fourth attack found the url's credentials dropped on a redirect within the same host,
    where pip keeps them (an index sending its downloads elsewhere on itself answered 401), and a
    refused redirect's message printed the url with them. They follow a redirect on the same scheme,
    host and port alone, and no message holds them."""
    _Recording.seen.clear()
    with serving(_Recording) as port:
        url = SourceUrl.parse(f"http://alice:SEKRIT@127.0.0.1:{port}{path}")
        fetcher = Fetcher(attempts=1, backoff=0.01, timeout=5, deadline=60, allow_local=True)
        with pytest.raises(PatchtoolError) as caught:
            fetcher.json(url)
    assert "SEKRIT" not in caught.value.message + str(caught.value.hint)
    sent = {p: auth for _, p, auth in _Recording.seen}
    assert sent[path] is not None  # the url's own host
    if path == "/same/":
        assert sent["/simple/demo/"] == sent[path]
    elif path == "/other/":
        assert [h.split(":")[0] for h, p, _ in _Recording.seen if p == "/simple/demo/"] == ["localhost"]
        assert sent["/simple/demo/"] is None
    else:
        assert caught.value.message.startswith("http://***@127.0.0.1:")
        assert "redirects to the local file 'file:///etc/hostname'; refusing it" in caught.value.message
