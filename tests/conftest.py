"""Shared fixtures: isolated git, a synthetic upstream served over real HTTP, the real sglang pin."""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import textwrap
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from cli_run import in_process, spawned
from helpers import Index, format_patch, git, lazy_modules, make_wheel, sha256, write_tree

REPO = Path(__file__).resolve().parent.parent
# release artifacts from PyPI are kept here between runs, so a run downloads each at most once
ARTIFACT_CACHE = Path(os.environ.get("PATCHTOOL_TEST_CACHE", REPO / ".cache" / "test-upstream"))
GPU_CHECKS = Path(__file__).resolve().parent / "gpu"
# every property test runs one fixed sequence of examples and keeps no example database (which
# pytest-xdist's workers would share): a test that wants random seeds or a database says so
settings.register_profile("patchtool", derandomize=True, deadline=None, database=None)
settings.load_profile("patchtool")
# the suite runs on every core (pytest-xdist), and its workers share this repository and the real
# upstream cache: a command that finds the other worker's command holding a lock waits for it to
# finish, as a person would, instead of giving up after the default 10 s. The tests of the wait
# itself set their own $PATCHTOOL_LOCK_TIMEOUT.
os.environ.setdefault("PATCHTOOL_LOCK_TIMEOUT", "900")


@pytest.fixture(scope="module", autouse=True)
def _heavy_modules(request: pytest.FixtureRequest) -> None:
    """Import the modules a test module holds lazily (``helpers.lazy``: tests/patches'
    torch, numpy, triton ...) before its first test, in the environment it set up at import
    (TRITON_INTERPRET=1), not at collection; skip it, naming the module, where one is missing."""
    for name in lazy_modules(request.module):
        pytest.importorskip(name)


def names_gpu_checks(args: list[str], cwd: Path) -> bool:
    """Whether a pytest command line names tests/gpu or something inside it."""
    for arg in args:
        target = (cwd / arg.split("::", 1)[0]).resolve()
        if target == GPU_CHECKS or GPU_CHECKS in target.parents:
            return True
    return False


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """tests/gpu (checks that need a GPU, with a conftest of their own) is collected only when the
    command line names it: `python tests/gpu/run.py` does, the normal suite over tests/ does not."""
    if collection_path == GPU_CHECKS and not names_gpu_checks(config.args, config.invocation_params.dir):
        return True
    return None


@pytest.fixture(autouse=True)
def _isolated_git(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for key in list(os.environ):
        if key.startswith("GIT_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", os.devnull)
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.delenv("PATCHTOOL_CACHE_DIR", raising=False)
    monkeypatch.delenv("PATCHTOOL_INDEX_URL", raising=False)
    # the tests' upstreams are local: an index on 127.0.0.1 over plain http, git repositories in
    # tmp_path; the tests of the refusal unset it
    monkeypatch.setenv("PATCHTOOL_ALLOW_LOCAL_URLS", "1")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    # pytest-xdist's workers export COLUMNS=80 and LINES=24, which every terminal size read (and a
    # child on a pseudo-terminal of its own size) would take over the real one
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.delenv("LINES", raising=False)


UPSTREAM_FILES = {
    "demo/__init__.py": '__version__ = "1.0"\n',
    "demo/core.py": textwrap.dedent('''\
        """Core of the demo upstream."""


        def greet(name):
            greeting = "hello"
            return f"{greeting} {name}"


        def farewell(name):
            word = "bye"
            return f"{word} {name}"


        def limit(queue, cap):
            if len(queue) > cap:
                return False
            return True
        '''),
    "demo/util.py": "def helper():\n    return 1\n",
}


@dataclasses.dataclass
class Demo:
    """A patch repository around a small upstream ``demo 1.0`` served by a local index."""

    root: Path
    cache: Path
    index: Index
    wheel: Path
    work: Path  # a git checkout of the upstream layout, for writing patches

    def run(self, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """``patchtool ARGS`` in the repository, in this process (``cli_run.in_process``); ``env`` is
        added to the environment for the call."""
        return in_process(args, cwd=self.root, env=self.environment(env))

    def spawn(self, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """``patchtool ARGS`` in the repository as a process of its own (``python -m patchtool``):
        for what needs the real entry point (Landlock, an exit a shell sees)."""
        return spawned(args, cwd=self.root, env=self.environment(env))

    def environment(self, env: dict[str, str] | None = None) -> dict[str, str]:
        """The environment a command line in the demo runs with: this one, its cache, and ``env``."""
        return {**os.environ, "PATCHTOOL_CACHE_DIR": str(self.cache), **(env or {})}

    def commit_patch(
        self, name: str, change: Callable[[Path], None], subject: str, body: str = "", *, on: str = "upstream"
    ) -> str:
        """Make a change on a fresh branch from ``on`` (upstream, or an earlier patch's branch
        ``p-<name>`` for a series made in sequence), export it as patches/<name>."""
        git(self.work, "checkout", "-q", "-B", f"p-{name}", on)
        change(self.work)
        git(self.work, "add", "-A")
        git(self.work, "commit", "-q", "-m", subject + (f"\n\n{body}" if body else ""))
        text = format_patch(self.work)
        (self.root / "patches" / name).write_text(text)
        return text

    def entry(self, ident: str, file: str, **extra: str) -> str:
        fields = {
            "id": ident,
            "file": f"patches/{file}",
            "kind": "correctness",
            "owner": "team",
            "why": "because",
            "applies_to": ">=1.0",
            "drop_when": "upstream fixes it",
        }
        fields.update(extra)
        body = "".join(f'{k} = "{v}"\n' for k, v in fields.items())
        return f'[[patch]]\n{body}upstream = {{ status = "pending" }}\n'

    def write_manifest(self, *entries: str, pin: str = "demo-1.0") -> None:
        (self.root / "patchset.toml").write_text(f'schema = 1\npin = "{pin}"\n\n' + "\n".join(entries))


def edit(path: str, old: str, new: str) -> Callable[[Path], None]:
    def change(root: Path) -> None:
        p = root / path
        text = p.read_text()
        assert old in text, (old, path)
        p.write_text(text.replace(old, new, 1))

    return change


def demo_pin(
    index: Index, artifact: Path, *, version: str = "1.0", prefix: tuple[str, str] = ("demo/", "python/demo/")
) -> str:
    """The pin of the demo upstream ``version`` (its ``artifact``, a wheel or an sdist) as served by
    ``index``, with ``prefix`` (from, to)."""
    return textwrap.dedent(f"""\
        schema = 1
        name = "demo"
        version = "{version}"

        [artifact]
        index = "{index.url}"
        distribution = "demo"
        version = "{version}"
        filename = "{artifact.name}"
        sha256 = "{sha256(artifact)}"
        prefix = {{ from = "{prefix[0]}", to = "{prefix[1]}" }}
        """)


@pytest.fixture(scope="session")
def demo_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What every demo starts from, made once per worker: the wheel of demo 1.0 and ``work``, a git
    repository of its upstream layout (branch ``upstream``, one commit). Each demo copies them."""
    base = tmp_path_factory.mktemp("demo-template")
    make_wheel(base / "demo-1.0-py3-none-any.whl", "demo", "1.0", UPSTREAM_FILES)
    work = base / "work"
    work.mkdir()
    git(work, "init", "-q", "-b", "upstream")
    write_tree(work, {f"python/{k}": v for k, v in UPSTREAM_FILES.items()})
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", "upstream 1.0")
    return base


@pytest.fixture
def demo(tmp_path: Path, demo_template: Path) -> Iterator[Demo]:
    wheel = tmp_path / "demo-1.0-py3-none-any.whl"
    shutil.copyfile(demo_template / wheel.name, wheel)
    index = Index(tmp_path)
    index.add(wheel)
    root = tmp_path / "project"
    (root / "patches").mkdir(parents=True)
    (root / "upstream-pins").mkdir()
    work = tmp_path / "work"
    shutil.copytree(demo_template / "work", work, symlinks=True)
    with index.serve():
        (root / "upstream-pins" / "demo-1.0.toml").write_text(demo_pin(index, wheel))
        yield Demo(root=root, cache=tmp_path / "cache", index=index, wheel=wheel, work=work)


@pytest.fixture
def one_patch(demo: Demo) -> Demo:
    """The demo with a single patch that changes greet()."""
    demo.commit_patch(
        "0001-greet.patch", edit("python/demo/core.py", '"hello"', '"hi"'), "core: say hi", "Shorter greeting."
    )
    demo.write_manifest(demo.entry("greet", "0001-greet.patch"))
    return demo


# -- the GPU runner --------------------------------------------------------------------------


@pytest.fixture
def fake_tree(tmp_path: Path) -> Path:
    """A directory that passes for a patched tree for tests/gpu/run.py, with a stamp naming one patch."""
    tree = tmp_path / "tree"
    (tree / "python" / "sglang").mkdir(parents=True)
    stamp = {
        "schema": 1,
        "pin": "sglang-0.5.23",
        "tip": "f" * 40,
        "patches": [{"id": "fake-patch", "file": "patches/0002-fake.patch", "sha256": "a" * 64}],
    }
    (tree / ".patchtool-gpu-tree.json").write_text(json.dumps(stamp))
    return tree


# -- the real upstream -----------------------------------------------------------------------


@pytest.fixture(scope="session")
def real_cache() -> Path:
    """The patchtool cache used for real sglang releases; kept between runs."""
    ARTIFACT_CACHE.mkdir(parents=True, exist_ok=True)
    return ARTIFACT_CACHE


@pytest.fixture(scope="session")
def patched_tree(real_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tree `patchtool apply` builds from this repository: sglang 0.5.23 plus the series. Built
    once per run: pytest-xdist's workers share the run's base directory, and the first to get there
    builds the tree while the others wait for it (tests only read it)."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    into = shared / "patched" / "sglang"
    done = into.with_name("built")
    with held_alone(into.with_name("lock")):
        if not done.exists():
            env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
            env.update(PATCHTOOL_CACHE_DIR=str(real_cache), GIT_CONFIG_GLOBAL=os.devnull)
            res = spawned(["apply", "--into", str(into), "--force"], cwd=REPO, env=env)
            assert res.returncode == 0, res.stdout + res.stderr
            done.touch()
    return into


def release_tag(cache: Path, distribution: str, version: str) -> str:
    """The one import of ``distribution`` ``version`` in the cache at ``cache``: patchtool tags it
    ``<dist>-<version>-<sha12>-<mapping8>`` (upstream/refnames.py; a cache an older patchtool
    filled may hold its ``<dist>-<version>-<sha12>`` too)."""
    named = f"{distribution}-{version}-{'?' * 12}-{'?' * 8}"
    res = subprocess.run(
        ["git", f"--git-dir={cache / 'upstream.git'}", "tag", "--list", named],
        capture_output=True,
        text=True,
        check=True,
        env={k: v for k, v in os.environ.items() if not k.startswith("GIT_")},
    )
    tags = res.stdout.split()
    assert len(tags) == 1, f"expected one import of {distribution} {version} in {cache}, found {tags}"
    return tags[0]


# -- public fixtures: python-unidiff's sample diffs, read from its sdist on PyPI -----------------
# python-unidiff 0.7.5's sdist (MIT), whose tests/samples/*.diff the corpus tier reads; nothing of it
# is copied into this repository
UNIDIFF_SDIST = "unidiff-0.7.5.tar.gz"
UNIDIFF_SHA256 = "2e5f0162052248946b9f0970a40e9e124236bf86c82b70821143a6fc1dea2574"
UNIDIFF_URL = (
    "https://files.pythonhosted.org/packages/a3/48/"
    "81be0ac96e423a877754153699731ef439fd7b80b4c8b5425c94ed079ebd/unidiff-0.7.5.tar.gz"
)
UNIDIFF_SAMPLES = (
    "binary",
    "bzr",
    "git",
    "git_cr",
    "git_delete",
    "git_filenames_with_spaces",
    "git_filenames_with_spaces_prefix",
    "git_no_prefix",
    "git_rename",
    "hg",
    "sample0",
    "sample1",
    "sample2",
    "sample3",
    "sample4",
    "sample5",
    "sample6",
    "sample7",
    "sample8",
    "svn",
)


@contextlib.contextmanager
def held_alone(path: Path) -> Iterator[None]:
    """An exclusive ``flock`` on ``path`` (made, with its directory, where missing) for the block:
    what keeps pytest-xdist's workers from filling a shared file at once."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


@pytest.fixture(scope="session")
def unidiff_samples() -> dict[str, bytes]:
    """Each sample diff of python-unidiff 0.7.5's sdist, by name (without ``.diff``)."""
    sdist = ARTIFACT_CACHE / "fixtures" / UNIDIFF_SDIST
    with held_alone(sdist.with_name(f"{sdist.name}.lock")):  # two workers: one downloads, the other reads it
        if not sdist.is_file() or hashlib.sha256(sdist.read_bytes()).hexdigest() != UNIDIFF_SHA256:
            try:
                # the limit is between bytes from PyPI: a network that stops answering, not a slow machine
                with urllib.request.urlopen(UNIDIFF_URL, timeout=60) as answer:
                    data = answer.read(1 << 20)
            except OSError as exc:
                pytest.skip(f"PyPI is unreachable from here ({exc}); the unidiff samples come from its sdist")
            assert hashlib.sha256(data).hexdigest() == UNIDIFF_SHA256, "PyPI served another unidiff-0.7.5.tar.gz"
            tmp = sdist.with_suffix(f".{os.getpid()}.part")
            tmp.write_bytes(data)
            tmp.replace(sdist)
    with tarfile.open(fileobj=io.BytesIO(sdist.read_bytes()), mode="r:gz") as tar:
        found = {}
        for name in UNIDIFF_SAMPLES:
            member = tar.extractfile(f"unidiff-0.7.5/tests/samples/{name}.diff")
            assert member is not None
            found[name] = member.read()
    return found
