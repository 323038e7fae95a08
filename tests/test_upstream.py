"""Pins and the upstream cache: verified downloads, deterministic imports, refusals."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from helpers import Index, git, import_tag, make_wheel, sha256
from patchtool.errors import InvalidInput, UpstreamError
from patchtool.git import Ident
from patchtool.project.pins import Pin
from patchtool.upstream.cache import Cache
from patchtool.upstream.index import Fetcher
from patchtool.urls import LocalUrls, SourceUrl

FILES = {"demo/__init__.py": "x = 1\n", "demo/run.sh": "#!/bin/sh\n", "other/skip.py": "pass\n"}


def pin_dict(wheel: Path, index: str, **art: Any) -> dict[str, Any]:
    artifact = {
        "index": index,
        "distribution": "demo",
        "version": "1.0",
        "filename": wheel.name,
        "sha256": sha256(wheel),
        "prefix": {"from": "demo/", "to": "python/demo/"},
    } | art
    return {"schema": 1, "name": "demo", "version": "1.0", "artifact": artifact}


@pytest.fixture
def served(tmp_path: Path):  # type: ignore[no-untyped-def]
    wheel = make_wheel(tmp_path / "demo-1.0-py3-none-any.whl", "demo", "1.0", FILES)
    index = Index(tmp_path)
    index.add(wheel)
    with index.serve():
        yield wheel, index


def fast() -> Fetcher:
    # quick retries; the timeout guards against a local server that stops answering (a hang)
    return Fetcher(attempts=3, backoff=0.01, timeout=600)


def import_tags(cache: Cache) -> list[str]:
    """Every tag in the cache: an import's, or none when nothing was imported."""
    return cache.repo.out("for-each-ref", "--format=%(refname)", args=["refs/tags/"]).split()


def test_pin_parses_both_sources(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path / "demo-1.0-py3-none-any.whl", "demo", "1.0", FILES)
    data = pin_dict(wheel, "https://pypi.org/simple") | {
        "git": {"url": "https://example.org/demo", "tag": "v1.0", "commit": "a" * 40}
    }
    pin = Pin.from_dict(data, name="demo-1.0", file="upstream-pins/demo-1.0.toml")
    assert pin.use == "artifact" and pin.git and pin.git.commit == "a" * 40
    assert pin.artifact and pin.artifact.prefix_to == "python/demo/"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"sha256": "abc"}, "artifact.sha256: 'abc' is not a sha256 hex digest"),
        (
            {"filename": "demo-1.1-py3-none-any.whl"},
            "artifact.filename: 'demo-1.1-py3-none-any.whl' is demo 1.1, not demo 1.0",
        ),
        ({"filename": "demo.zip"}, "artifact.filename: 'demo.zip' is neither a wheel nor an sdist file name"),
        ({"prefix": {"from": "demo", "to": "python/demo/"}}, "artifact.prefix.from: 'demo' must end with '/'"),
        (
            {"version": "2.0", "filename": "demo-2.0-py3-none-any.whl"},
            "artifact.version: artifact version 2.0 differs from the pin's 1.0",
        ),
    ],
)
def test_pin_errors_name_the_key(tmp_path: Path, change: dict[str, Any], message: str) -> None:
    wheel = make_wheel(tmp_path / "demo-1.0-py3-none-any.whl", "demo", "1.0", FILES)
    with pytest.raises(InvalidInput) as exc:
        Pin.from_dict(pin_dict(wheel, "x", **change), name="demo-1.0", file="upstream-pins/demo-1.0.toml")
    assert any(p.render().startswith(f"upstream-pins/demo-1.0.toml: {message}") for p in exc.value.problems), [
        p.render() for p in exc.value.problems
    ]


def test_git_source_needs_commit_when_used() -> None:
    data = {"schema": 1, "name": "demo", "version": "1.0", "git": {"url": "https://example.org/u", "tag": "v1.0"}}
    with pytest.raises(InvalidInput) as exc:
        Pin.from_dict(data, name="p", file="upstream-pins/p.toml")
    assert "git.commit: the git source is used, so it must name the exact commit" in exc.value.problems[0].render()


def test_import_is_verified_and_deterministic(tmp_path: Path, served) -> None:  # type: ignore[no-untyped-def]
    wheel, index = served
    pin = Pin.from_dict(pin_dict(wheel, index.url), name="demo-1.0", file="f")
    first = Cache(tmp_path / "c1", fetcher=fast()).ensure(pin)
    second = Cache(tmp_path / "c2", fetcher=fast()).ensure(pin)
    assert first.commit == second.commit  # same release, same commit, on any machine
    repo = Cache(tmp_path / "c1").repo
    listing = repo.out("ls-tree", "-r", args=[first.commit])
    assert "100755 blob" in listing and "python/demo/run.sh" in listing
    assert "python/demo/__init__.py" in listing and "skip.py" not in listing and "dist-info" not in listing
    assert repo.out("log", "-1", "--format=%an %at", args=[first.commit]) == "patchtool 0"
    assert repo.resolve(f"refs/tags/{import_tag(wheel)}") == first.commit  # named by what it is
    # a second ensure uses the cache: no new request to the index
    before = len(index.requests)
    assert Cache(tmp_path / "c1", fetcher=fast()).ensure(pin).commit == first.commit
    assert len(index.requests) == before


def test_an_index_serving_only_pep_503_html_is_read(tmp_path: Path, served) -> None:  # type: ignore[no-untyped-def]
    """A plain "simple" index answers HTML whatever it is asked for: its anchors (relative links,
    the sha256 in the fragment) give the same files as a PEP 691 page, and the import is the same."""
    from patchtool.upstream.index import PackageIndex

    wheel, index = served
    pin = Pin.from_dict(pin_dict(wheel, index.url), name="demo-1.0", file="f")
    assert pin.artifact is not None
    from_json = PackageIndex(fast()).files(pin.artifact)
    index.html = True
    from_html = PackageIndex(fast()).files(pin.artifact)
    assert (
        [(e.filename, e.url and e.url.text, e.sha256) for e in from_html]
        == [(e.filename, e.url and e.url.text, e.sha256) for e in from_json]
        == [(wheel.name, f"{index.url[:-7]}/files/{wheel.name}", sha256(wheel))]
    )
    index.html = False
    expected = Cache(tmp_path / "c1", fetcher=fast()).ensure(pin).commit
    index.html = True
    assert Cache(tmp_path / "c2", fetcher=fast()).ensure(pin).commit == expected


def test_an_index_answering_neither_json_nor_html_says_so(tmp_path: Path) -> None:
    """A page that is neither PEP 691 JSON nor PEP 503 HTML is refused at once, with a message
    saying what the index answered (not retried, not a JSON decoding error)."""
    from patchtool.upstream.index import PackageIndex

    simple = tmp_path / "simple" / "demo"
    simple.mkdir(parents=True)
    (simple / "index.txt").write_text("demo-1.0-py3-none-any.whl\n")
    wheel = make_wheel(tmp_path / "demo-1.0-py3-none-any.whl", "demo", "1.0", FILES)
    pin = Pin.from_dict(pin_dict(wheel, "https://pypi.org/simple"), name="demo-1.0", file="f")
    assert pin.artifact is not None
    page = f"{(tmp_path / 'simple').as_uri()}/demo/index.txt"
    with pytest.raises(UpstreamError) as exc:
        Fetcher(attempts=3, backoff=5, allow_local=LocalUrls(allowed=True, beneath=tmp_path)).json(
            SourceUrl.parse(page)
        )
    assert exc.value.message == (
        f"the package index at {page} answered text/plain, neither a PEP 691 JSON nor a PEP 503 HTML project page"
    )
    with pytest.raises(UpstreamError, match="did not answer with a PEP 691 project page"):
        PackageIndex(Answering({"files": "nope"})).files(pin.artifact)


class Answering:
    def __init__(self, page: Any) -> None:
        self.page = page

    def json(self, url: str) -> Any:
        return self.page


def test_the_index_override_is_the_one_the_cache_is_given(tmp_path: Path, served) -> None:  # type: ignore[no-untyped-def]
    """PATCHTOOL_INDEX_URL is read at the edge (the CLI) and handed to the Cache: the library reads no
    environment, and an override beats the pin's index."""
    wheel, index = served
    pin = Pin.from_dict(pin_dict(wheel, "http://127.0.0.1:9/simple"), name="demo-1.0", file="f")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PATCHTOOL_INDEX_URL", index.url)
        with pytest.raises(UpstreamError, match="could not read the package index at http://127.0.0.1:9/simple/demo/"):
            Cache(tmp_path / "c", fetcher=Fetcher(attempts=1)).ensure(pin)
    assert Cache(tmp_path / "c", fetcher=fast(), index_url=index.url).ensure(pin).commit


def test_wrong_sha256_is_refused_and_nothing_imported(tmp_path: Path, served) -> None:  # type: ignore[no-untyped-def]
    wheel, index = served
    pin = Pin.from_dict(
        pin_dict(wheel, index.url, url=f"{index.url[:-7]}/files/{wheel.name}", sha256="0" * 64),
        name="demo-1.0",
        file="f",
    )
    cache = Cache(tmp_path / "c", fetcher=fast())
    with pytest.raises(UpstreamError) as exc:
        cache.ensure(pin)
    assert f"{wheel.name}: sha256 is {sha256(wheel)}, but pin demo-1.0 says {'0' * 64}" in str(exc.value)
    assert import_tags(cache) == []
    assert not list((tmp_path / "c" / "downloads").rglob("*.whl*"))


def test_index_listing_another_hash_is_refused(tmp_path: Path, served) -> None:  # type: ignore[no-untyped-def]
    wheel, index = served
    pin = Pin.from_dict(pin_dict(wheel, index.url, sha256="1" * 64), name="demo-1.0", file="f")
    with pytest.raises(UpstreamError, match="the index lists demo-1.0-py3-none-any.whl with sha256"):
        Cache(tmp_path / "c", fetcher=fast()).ensure(pin)


def test_broken_download_is_resumed(tmp_path: Path, served) -> None:  # type: ignore[no-untyped-def]
    wheel, index = served
    index.break_next = 2
    pin = Pin.from_dict(pin_dict(wheel, index.url), name="demo-1.0", file="f")
    base = Cache(tmp_path / "c", fetcher=fast()).ensure(pin)
    assert base.commit
    file_requests = [r for r in index.requests if r.startswith("/files/")]
    assert len(file_requests) == 3


def test_download_that_keeps_breaking_fails_clearly(tmp_path: Path, served) -> None:  # type: ignore[no-untyped-def]
    wheel, index = served
    index.break_next = 99
    pin = Pin.from_dict(pin_dict(wheel, index.url), name="demo-1.0", file="f")
    cache = Cache(tmp_path / "c", fetcher=fast())
    with pytest.raises(UpstreamError) as exc:
        cache.ensure(pin)
    assert "failed after 3 attempts" in exc.value.message and "connection closed after" in exc.value.message
    assert exc.value.hint and "nothing was imported" in exc.value.hint
    assert import_tags(cache) == []
    assert not list((tmp_path / "c" / "downloads").rglob("*.whl*"))


def test_artifact_for_another_version_is_refused(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path / "demo-1.0-py3-none-any.whl", "demo", "1.0", FILES, metadata_version="1.1")
    index = Index(tmp_path)
    index.add(wheel)
    with index.serve():
        pin = Pin.from_dict(pin_dict(wheel, index.url), name="demo-1.0", file="f")
        cache = Cache(tmp_path / "c", fetcher=fast())
        with pytest.raises(UpstreamError, match="contains demo 1.1, not 1.0; refusing it"):
            cache.ensure(pin)
        assert import_tags(cache) == []


def test_entries_escaping_the_archive_are_refused(tmp_path: Path) -> None:
    wheel = make_wheel(
        tmp_path / "demo-1.0-py3-none-any.whl", "demo", "1.0", {"demo/ok.py": "", "demo/../../evil.py": "x"}
    )
    index = Index(tmp_path)
    index.add(wheel)
    with index.serve():
        pin = Pin.from_dict(pin_dict(wheel, index.url), name="demo-1.0", file="f")
        with pytest.raises(
            UpstreamError, match=r"entry 'demo/\.\./\.\./evil\.py' is not a safe path: .* escapes the tree"
        ):
            Cache(tmp_path / "c", fetcher=fast()).ensure(pin)


def test_moved_cache_tag_is_refused(tmp_path: Path, served) -> None:  # type: ignore[no-untyped-def]
    wheel, index = served
    pin = Pin.from_dict(pin_dict(wheel, index.url), name="demo-1.0", file="f")
    cache = Cache(tmp_path / "c", fetcher=fast())
    base = cache.ensure(pin)
    someone = Ident("x", "x@example.org")
    other = cache.repo.commit_tree(base.tree, [], "not the import\n", author=someone, committer=someone)
    cache.repo.update_ref(base.ref, other)
    with pytest.raises(UpstreamError, match="the tag moved or the cache was changed"):
        Cache(tmp_path / "c", fetcher=fast()).ensure(pin)  # the next command


def test_recorded_tree_mismatch_is_refused(tmp_path: Path, served) -> None:  # type: ignore[no-untyped-def]
    wheel, index = served
    pin = Pin.from_dict(pin_dict(wheel, index.url, tree="f" * 40), name="demo-1.0", file="f")
    cache = Cache(tmp_path / "c", fetcher=fast())
    with pytest.raises(UpstreamError, match="but pin demo-1.0 records ffff"):
        cache.ensure(pin)
    assert import_tags(cache) == []


def git_upstream(tmp_path: Path) -> tuple[Path, str]:
    up = tmp_path / "upstream"
    up.mkdir()
    git(up, "init", "-q")
    (up / "f.py").write_text("a = 1\n")
    git(up, "add", "-A")
    git(up, "commit", "-q", "-m", "one")
    git(up, "tag", "v1.0")
    return up, git(up, "rev-parse", "HEAD").strip()


def git_pin(url: Path, commit: str) -> Pin:
    return Pin.from_dict(
        {"schema": 1, "name": "demo", "version": "1.0", "git": {"url": str(url), "tag": "v1.0", "commit": commit}},
        name="demo-1.0",
        file="f",
    )


def test_git_source_is_fetched_at_the_pinned_commit(tmp_path: Path) -> None:
    up, commit = git_upstream(tmp_path)
    base = Cache(tmp_path / "c").ensure(git_pin(up, commit))
    assert (base.commit, base.source) == (commit, "git")


def test_git_tag_that_moved_is_refused(tmp_path: Path) -> None:
    up, commit = git_upstream(tmp_path)
    (up / "f.py").write_text("a = 2\n")
    git(up, "commit", "-qam", "two")
    git(up, "tag", "-f", "v1.0")
    cache = Cache(tmp_path / "c")
    with pytest.raises(UpstreamError, match=f"but pin demo-1.0 says {commit}: the tag moved; refusing it"):
        cache.ensure(git_pin(up, commit))
    assert not cache.repo.out("for-each-ref")


def test_real_pin_file_parses() -> None:
    from patchtool.project.pins import load_pin

    pin = load_pin(Path(__file__).resolve().parent.parent, "sglang-0.5.23")
    assert str(pin.version) == "0.5.23" and pin.artifact and pin.artifact.tree
    assert pin.artifact.prefix_from == "sglang/" and pin.artifact.prefix_to == "python/sglang/"


@pytest.mark.parametrize(
    "filename",
    [
        "sglang-0.5.23-py3-none-any.whl",
        "sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl",
        "sgl_kernel-0.3.1-1-cp39-abi3-manylinux2014_x86_64.whl",
        "Foo.Bar-1.0rc1-py2.py3-none-any.whl",
        "sglang-0.5.10.post1.tar.gz",
        "torch-2.13.0.zip",
        "not-a-wheel.whl",
        "sglang-notaversion-py3-none-any.whl",
    ],
)
def test_artifact_names_read_as_packaging_reads_them(filename: str) -> None:
    from packaging.utils import (
        InvalidSdistFilename,
        InvalidWheelFilename,
        canonicalize_name,
        parse_sdist_filename,
        parse_wheel_filename,
    )

    from patchtool.names import ArtifactFilename
    from patchtool.project.pins import canonicalize_name as ours

    try:
        want = parse_wheel_filename(filename)[:2] if filename.endswith(".whl") else parse_sdist_filename(filename)
    except (InvalidWheelFilename, InvalidSdistFilename):
        want = (None, None)
    try:
        name, version = ArtifactFilename(filename).distribution, ArtifactFilename(filename).version
    except ValueError:
        name, version = None, None
    assert (ours(name) if name else None, version) == want
    assert ours("Foo__Bar.baz") == canonicalize_name("Foo__Bar.baz")


class Ticking:
    """A clock the test moves: each reading is a minute after the last."""

    def __init__(self) -> None:
        self.now = 0.0
        self.readings = 0

    def __call__(self) -> float:
        self.now += 60
        self.readings += 1
        return self.now


@pytest.mark.parametrize("what", ["artifact", "page"])
def test_a_download_that_trickles_past_its_deadline_is_refused(tmp_path: Path, served, what: str) -> None:  # type: ignore[no-untyped-def]
    """A server that never ends its body holds no command for hours: the overall deadline (on the
    test's own clock, a minute a read) refuses it, and the partial file is gone."""
    from helpers import snapshot

    wheel, index = served
    index.endless.add(wheel.name)
    index.endless_page = what == "page"
    clock = Ticking()
    fetcher = Fetcher(attempts=3, backoff=0.01, timeout=600, deadline=600, clock=clock)
    url = SourceUrl.parse(f"{index.url}/demo/" if what == "page" else f"{index.url[:-7]}/files/{wheel.name}")
    dest = tmp_path / "dl"
    dest.mkdir()
    before = snapshot(dest)
    with pytest.raises(UpstreamError) as exc:
        fetcher.json(url) if what == "page" else fetcher.download(url, dest / wheel.name, size=None)
    assert exc.value.message == f"{url.text} took longer than the 600 s patchtool gives one download; refusing it"
    assert exc.value.exit_code == 4
    assert clock.readings >= 12  # the start, ten reads in time, the one past the deadline (and the watchdog's)
    assert snapshot(dest) == before


def test_the_download_deadline_is_the_users_to_set(monkeypatch: pytest.MonkeyPatch) -> None:
    from patchtool.errors import UsageError

    monkeypatch.delenv("PATCHTOOL_DOWNLOAD_DEADLINE", raising=False)
    assert Fetcher().deadline == 1800
    monkeypatch.setenv("PATCHTOOL_DOWNLOAD_DEADLINE", "90")
    assert Fetcher().deadline == 90
    for bad in ("soon", "0", "-5", "nan", "1e9"):
        monkeypatch.setenv("PATCHTOOL_DOWNLOAD_DEADLINE", bad)
        with pytest.raises(UsageError) as exc:
            Fetcher()
        assert exc.value.message == f"PATCHTOOL_DOWNLOAD_DEADLINE={bad!r} is not a number of seconds from 1 to 604800"
