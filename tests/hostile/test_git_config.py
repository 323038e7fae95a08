"""git runs nothing a repository chose (issue 28).

Each case is differential: plain git 2.39, given the same repository, runs the program the
repository's configuration names (the attack is real), and patchtool's git, through the one layer
that builds every git command line (``git/command.py``), leaves no mark. The keys git reads under
fixed names are neutralised for every process (``NEUTRAL_CONFIG``); the families whose names a
repository picks are refused by name before git runs (``REFUSED_CONFIG``). Both in a patch
repository's configuration and in the cache's."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from cli_run import in_process
from conftest import Demo
from helpers import GIT_ENV, HANG_GUARD_S, git, snapshot
from patchtool.errors import InvalidInput
from patchtool.git.command import NEUTRAL_CONFIG, REFUSED_CONFIG, Runner, config_env, discover

PLAIN_ENV = {"GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1", "LC_ALL": "C"}
ID = ["-c", "user.name=T", "-c", "user.email=t@example.com"]


def marker(tmp_path: Path) -> tuple[Path, Path]:
    """A program that leaves a mark (the file it returns) when anything runs it."""
    mark = tmp_path / "MARK"
    program = tmp_path / "leave-mark"
    program.write_text(
        f'#!/bin/sh\necho "$0 $*" >> {mark}\nfor f in "$@"; do [ -f "$f" ] && echo x > "$f"; done\nexit 0\n'
    )
    program.chmod(0o755)
    return program, mark


def plain(
    cwd: Path, *args: str, env: dict[str, str] | None = None, stdin: str = ""
) -> subprocess.CompletedProcess[str]:
    """Plain git, as a user would run it: the repository's own configuration, no patchtool."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    return subprocess.run(
        ["git", *args],
        cwd=cwd,
        env={**clean, **PLAIN_ENV, **(env or {})},
        input=stdin,
        capture_output=True,
        text=True,
        timeout=HANG_GUARD_S,
        check=False,
    )


def committed(demo: Demo) -> Demo:
    """The demo's patch repository as a git repository, everything committed (a clone's state)."""
    git(demo.root, "init", "-q")
    git(demo.root, "add", "-A")
    git(demo.root, "commit", "-qm", "the series")
    return demo


def repository(path: Path) -> Path:
    path.mkdir(parents=True)
    git(path, "init", "-q")
    (path / "f.txt").write_text("one\n")
    git(path, "add", "f.txt")
    git(path, "commit", "-qm", "one")
    (path / "f.txt").write_text("one\ntwo\n")  # a change, so status refreshes the index
    return path


# -- every key with a fixed name: plain git runs it, patchtool's git does not --------------------------


def _hooks(program: Path, tmp: Path) -> str:
    hooks = tmp / "hooks"
    hooks.mkdir(exist_ok=True)
    shutil.copy(program, hooks / "post-commit")
    (hooks / "post-commit").chmod(0o755)
    return str(hooks)


CREDENTIAL = "protocol=https\nhost=example.invalid\n\n"
IDENT = {"GIT_AUTHOR_NAME": "T", "GIT_AUTHOR_EMAIL": "t@e", "GIT_COMMITTER_NAME": "T", "GIT_COMMITTER_EMAIL": "t@e"}


def _commit(runner: Runner, *options: str) -> None:
    runner.run("commit", "-q", *options, env=IDENT, check=False)


# key: (its value given the marking program, other configuration it needs, the git command that runs
# it as a user would type it, the same command through patchtool's git layer)
FIXED: dict[str, tuple[Callable[[Path, Path], str], dict[str, str], list[str], Callable[[Runner], object]]] = {
    "core.fsmonitor": (
        lambda p, t: str(p), {}, ["status", "--porcelain"], lambda r: r.run("status", "--porcelain", check=False)
    ),
    "core.hooksPath": (_hooks, {}, ["commit", "-qam", "two"], lambda r: _commit(r, "-amtwo")),
    "core.sshCommand": (
        lambda p, t: str(p), {}, ["ls-remote", "ssh://example.invalid/r.git"],
        lambda r: r.run("ls-remote", args=["ssh://example.invalid/r.git"], check=False),
    ),
    "core.gitProxy": (
        lambda p, t: str(p), {}, ["ls-remote", "git://example.invalid/r.git"],
        lambda r: r.run("ls-remote", args=["git://example.invalid/r.git"], check=False),
    ),
    "core.askPass": (
        lambda p, t: str(p), {}, ["credential", "fill"],
        lambda r: r.run("credential fill", input=CREDENTIAL.encode(), check=False),
    ),
    "credential.helper": (
        lambda p, t: f"!{p}", {}, ["credential", "fill"],
        lambda r: r.run("credential fill", input=CREDENTIAL.encode(), check=False),
    ),
    "core.editor": (lambda p, t: str(p), {}, ["commit", "-qa"], lambda r: _commit(r, "-a")),
    "gpg.program": (
        lambda p, t: str(p), {"commit.gpgSign": "true"}, ["commit", "-qam", "two"], lambda r: _commit(r, "-amtwo")
    ),
    "core.alternateRefsCommand": (
        lambda p, t: str(p), {}, ["fetch", "-q", "{other}", "HEAD"],
        lambda r: None,  # run below: it needs another repository
    ),
}  # fmt: skip


@pytest.mark.parametrize("key", sorted(FIXED))
def test_a_key_git_runs_a_program_from_runs_nothing_under_patchtool(tmp_path: Path, key: str) -> None:
    program, mark = marker(tmp_path)
    value, extra, command, through_patchtool = FIXED[key]
    other = repository(tmp_path / "other")
    git(other, "commit", "-qam", "two")
    for side in ("plain", "patchtool"):
        repo = repository(tmp_path / side)
        git(repo, "config", "user.name", "T")
        git(repo, "config", "user.email", "t@e")
        for k, v in {key: value(program, tmp_path), **extra}.items():
            git(repo, "config", k, v)
        if key == "core.alternateRefsCommand":  # git asks it for the refs of the repository it borrows from
            (repo / ".git" / "objects" / "info" / "alternates").write_text(f"{other}/.git/objects\n")
        mark.unlink(missing_ok=True)
        if side == "plain":
            args = [w.format(other=f"file://{other}") for w in command]
            plain(repo, *args, stdin=CREDENTIAL if "credential" in args else "",
                  env={"GIT_TERMINAL_PROMPT": "0", "EDITOR": "false", "VISUAL": "false"})  # fmt: skip
            assert mark.exists(), f"plain git {' '.join(command)} did not run {key}: the case proves nothing"
        else:
            runner = Runner(git_dir=repo / ".git", work_tree=repo, cwd=repo)
            if key == "core.alternateRefsCommand":
                runner.run("fetch", "-q", args=[str(other), "HEAD"], env={"GIT_ALLOW_PROTOCOL": "file"}, check=False)
            else:
                through_patchtool(runner)
            assert not mark.exists(), f"patchtool's git ran {key}: {mark.read_text()}"


def test_every_fixed_key_that_names_a_program_is_neutralised_and_listed() -> None:
    neutral = {k for k, _ in NEUTRAL_CONFIG}
    assert set(FIXED) <= neutral
    trust = (Path(__file__).parents[2] / "docs" / "trust.md").read_text()
    for key in neutral:
        assert f"`{key}`" in trust, f"docs/trust.md does not list {key}"


def test_only_the_git_layer_sets_gits_command_line_configuration() -> None:
    """``GIT_CONFIG_COUNT`` in a process's environment replaces every pair before it: a module that
    sets its own (git merge-tree's conflict style did) drops the neutral values for that process.
    Only ``git/command.py`` spells it; everything else asks ``config_env`` for its extra pairs."""
    package = Path(__file__).parents[2] / "tool" / "patchtool"
    spelled = sorted(str(p.relative_to(package)) for p in package.rglob("*.py") if "GIT_CONFIG_COUNT" in p.read_text())
    assert spelled == ["git/command.py"]
    extra = config_env(("merge.conflictStyle", "diff3"))
    pairs = [
        (extra[f"GIT_CONFIG_KEY_{n}"], extra[f"GIT_CONFIG_VALUE_{n}"]) for n in range(int(extra["GIT_CONFIG_COUNT"]))
    ]
    assert pairs == [*NEUTRAL_CONFIG, ("merge.conflictStyle", "diff3")]


def test_a_diff_runs_neither_an_external_diff_nor_a_textconv(tmp_path: Path) -> None:
    program, mark = marker(tmp_path)
    for side in ("plain", "patchtool"):
        repo = repository(tmp_path / side)
        git(repo, "commit", "-qam", "two")
        git(repo, "config", "diff.external", str(program))
        mark.unlink(missing_ok=True)
        if side == "plain":
            plain(repo, "diff", "HEAD~1", "HEAD")
            assert mark.exists()
        else:
            runner = Runner(git_dir=repo / ".git", work_tree=repo, cwd=repo)
            runner.run("diff", args=["HEAD~1", "HEAD"], check=False)
            for command in ("show", "log", "diff-tree"):
                runner.run(command, "-p", args=["HEAD"], check=False)
            runner.run("format-patch", "--stdout", "-1", args=["HEAD"], check=False)
            assert not mark.exists()


# -- families whose names the repository picks: refused by name ----------------------------------------


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("filter.x.clean", "{p}"),
        ("filter.x.process", "{p}"),
        ("diff.x.textconv", "{p}"),
        ("diff.x.command", "{p}"),
        ("merge.x.driver", "{p} %O %A %B"),
        ("remote.origin.uploadpack", "{p}"),
        ("url.https://example.invalid/.insteadOf", "ext::{p}"),
        ("include.path", "{p}"),
        ("includeIf.gitdir:/.path", "{p}"),
        ("trailer.x.command", "{p}"),  # found by an attack: export's interpret-trailers ran it
        ("trailer.x.cmd", "{p}"),
    ],
)
def test_a_configuration_naming_its_own_program_is_refused_before_git_runs(
    one_patch: Demo, tmp_path: Path, key: str, value: str
) -> None:
    committed(one_patch)
    state = one_patch.root / ".patchtool"  # an interrupted write: git is asked whether a clone brought it
    state.mkdir()
    (state / ".gitignore").write_text("*\n")
    (state / "journal.json").write_text("{}\n")
    program, mark = marker(tmp_path)
    (one_patch.root / ".gitattributes").write_text("* filter=x diff=x merge=x\n")
    git(one_patch.root, "config", key, value.format(p=program))
    before = snapshot(one_patch.root)
    res = one_patch.run("status", "--json")  # the first git it runs in the repository refuses
    assert res.returncode == 1, res.stdout + res.stderr
    error = json.loads(res.stdout)["errors"][0]
    config = one_patch.root / ".git" / "config"
    assert error["message"].startswith(f"the git configuration {config} sets {key.lower()}"), error
    assert "patchtool runs no git on it" in error["message"]
    assert error["hint"].startswith("if you set it yourself, remove it"), error
    assert not mark.exists()
    assert snapshot(one_patch.root) == before


def test_the_refused_families_are_listed_in_trust_md() -> None:
    trust = (Path(__file__).parents[2] / "docs" / "trust.md").read_text()
    for section, key in REFUSED_CONFIG:
        assert section in trust.lower() and (key is None or key in trust.lower()), (section, key)


# -- the repository's own configuration and the cache's, through the commands ----------------------------


def test_a_received_repository_runs_no_fsmonitor_in_status_checkout_refresh_export(
    one_patch: Demo, tmp_path: Path
) -> None:
    committed(one_patch)
    program, mark = marker(tmp_path)
    git(one_patch.root, "config", "core.fsmonitor", str(program))
    plain(one_patch.root, "status", "--porcelain")
    assert mark.exists(), "plain git status runs the repository's fsmonitor"
    mark.unlink()
    assert one_patch.run("status").returncode == 0
    assert one_patch.run("checkout", env=GIT_ENV).returncode == 0
    core = one_patch.root / "work" / "series" / "python" / "demo" / "core.py"
    core.write_text(core.read_text().replace('"hi"', '"hey"'))
    res = one_patch.run("refresh", "greet", env=GIT_ENV)
    assert res.returncode == 0, res.stdout + res.stderr
    res = one_patch.run("export", env=GIT_ENV)
    assert res.returncode == 0, res.stdout + res.stderr
    assert not mark.exists(), mark.read_text()


def test_a_hook_planted_in_the_cache_runs_neither_in_patchtool_nor_in_a_plain_commit(
    one_patch: Demo, tmp_path: Path
) -> None:
    committed(one_patch)
    program, mark = marker(tmp_path)
    assert one_patch.run("status").returncode == 0  # the cache exists
    hooks = one_patch.cache / "upstream.git" / "hooks"
    for hook in ("post-commit", "pre-commit", "post-checkout", "reference-transaction", "post-index-change"):
        shutil.copy(program, hooks / hook)
        (hooks / hook).chmod(0o755)
    res = one_patch.run("checkout", env=GIT_ENV)
    assert res.returncode == 0, res.stdout + res.stderr
    new = ("new", "extra", "--kind", "operations", "--owner", "me", "--why", "w", "--applies-to", ">=1.0",
           "--drop-when", "never", "--subject", "s")  # fmt: skip
    res = one_patch.run(*new, env=GIT_ENV)
    assert res.returncode == 0, res.stdout + res.stderr
    assert not mark.exists(), mark.read_text()
    series = one_patch.root / "work" / "series"
    (series / "python" / "demo" / "util.py").write_text("def helper():\n    return 3\n")
    done = plain(series, *ID, "commit", "-qam", "by hand")
    assert done.returncode == 0, done.stderr
    assert not mark.exists(), "a plain git commit in work/series ran a hook planted in the cache"
    # and the same hook in a repository patchtool did not make runs: the case proves something
    other = repository(tmp_path / "other")
    shutil.copy(program, other / ".git" / "hooks" / "post-commit")
    plain(other, *ID, "commit", "-qam", "two")
    assert mark.exists()


def test_a_cache_configuration_naming_a_filter_is_removed_and_said(one_patch: Demo, tmp_path: Path) -> None:
    committed(one_patch)
    program, mark = marker(tmp_path)
    assert one_patch.run("status").returncode == 0
    config = one_patch.cache / "upstream.git" / "config"
    git(one_patch.cache / "upstream.git", "config", "filter.x.smudge", str(program))
    (one_patch.cache / "upstream.git" / "info").mkdir(exist_ok=True)
    (one_patch.cache / "upstream.git" / "info" / "attributes").write_text("* filter=x\n")
    res = one_patch.run("checkout", "--json", env=GIT_ENV)
    assert res.returncode == 1, res.stdout + res.stderr
    error = json.loads(res.stdout)["errors"][0]
    assert f"{config} set filter.x.smudge (removed)" in error["message"], error
    assert not mark.exists()
    assert not (one_patch.root / "work" / "series").exists()
    assert "filter" not in config.read_text()
    assert one_patch.run("checkout", env=GIT_ENV).returncode == 0
    assert not mark.exists()


def test_a_cache_configuration_with_an_fsmonitor_runs_nothing(one_patch: Demo, tmp_path: Path) -> None:
    committed(one_patch)
    program, mark = marker(tmp_path)
    assert one_patch.run("status").returncode == 0
    git(one_patch.cache / "upstream.git", "config", "core.fsmonitor", str(program))
    assert one_patch.run("checkout", env=GIT_ENV).returncode == 1  # removed, and said once
    assert one_patch.run("checkout", env=GIT_ENV).returncode == 0
    core = one_patch.root / "work" / "series" / "python" / "demo" / "core.py"
    core.write_text(core.read_text().replace('"hi"', '"hey"'))
    assert one_patch.run("refresh", "greet", env=GIT_ENV).returncode == 0
    assert one_patch.run("status").returncode == 0
    assert not mark.exists(), mark.read_text()


# key: (its value, given the marking program and a directory; other keys it needs; the plain git
# command in work/series that runs it; where it is planted: the common config, or the checkout's
# own config.worktree). Plain git runs each; after one patchtool command, none is left to run.
CACHE_KEYS: dict[str, tuple[Callable[[Path, Path], str], dict[str, str], list[str], str]] = {
    "core.fsmonitor": (lambda p, t: str(p), {}, ["status", "--porcelain"], "config"),
    "diff.external": (lambda p, t: str(p), {}, ["diff"], "config"),
    "alias.st": (lambda p, t: f"!{p}", {}, ["st"], "config"),
    "core.editor": (lambda p, t: str(p), {}, ["commit", "-qa"], "config"),
    "gpg.program": (lambda p, t: str(p), {"commit.gpgSign": "true"}, ["commit", "-qam", "m"], "config"),
    "core.hooksPath": (_hooks, {}, ["commit", "-qam", "m"], "config"),
    "credential.helper": (lambda p, t: f"!{p}", {}, ["credential", "fill"], "config"),
    "core.sshCommand": (lambda p, t: str(p), {}, ["ls-remote", "ssh://example.invalid/r.git"], "config"),
    "include.path": (lambda p, t: str(t / "included"), {}, ["status", "--porcelain"], "config"),
    "filter.x.clean": (lambda p, t: str(p), {}, ["add", "-A"], "config"),
    "core.fsmonitor ": (lambda p, t: str(p), {}, ["status", "--porcelain"], "config.worktree"),
}  # fmt: skip


def test_a_program_the_caches_configuration_names_runs_in_no_plain_git_after_patchtool(
    one_patch: Demo, tmp_path: Path
) -> None:
    """The cache is patchtool's data: a key its configuration holds that patchtool never writes
    (each runs a program in the user's own git in work/series, which patchtool's neutral values do
    not reach) is removed before the next command uses the cache, which stops once, saying so."""
    committed(one_patch)
    program, mark = marker(tmp_path)
    (tmp_path / "included").write_text(f"[core]\n\tfsmonitor = {program}\n")
    assert one_patch.run("checkout", env=GIT_ENV).returncode == 0
    common = one_patch.cache / "upstream.git"
    (own,) = (common / "worktrees").iterdir()
    (common / "info").mkdir(exist_ok=True)
    (common / "info" / "attributes").write_text("*.py filter=x\n")
    series = one_patch.root / "work" / "series"
    env = {**IDENT, "GIT_TERMINAL_PROMPT": "0", "EDITOR": "false", "VISUAL": "false"}
    for n, (key, (value, extra, command, where)) in enumerate(CACHE_KEYS.items()):
        if where == "config.worktree":  # as `git sparse-checkout` turns it on: bare moves to the main worktree
            git(common, "config", "extensions.worktreeConfig", "true")
            git(common, "config", "--unset", "core.bare")
            git(common, "config", f"--file={common / 'config.worktree'}", "core.bare", "true")
        target = common / "config" if where == "config" else own / "config.worktree"
        for k, v in {key.strip(): value(program, tmp_path), **extra}.items():
            git(common, "config", f"--file={target}", k, v)
        (series / "python" / "demo" / "util.py").write_text(f"def helper():\n    return {n + 100}\n")
        mark.unlink(missing_ok=True)
        ran = plain(series, *command, env=env, stdin=CREDENTIAL if "credential" in command else "")
        assert mark.exists(), (
            f"{ran} plain git {' '.join(command)} in work/series did not run {key}: the case proves nothing"
        )
        mark.unlink()
        res = one_patch.run("status", "--json")
        assert res.returncode == 1, (key, res.stdout + res.stderr)
        message = json.loads(res.stdout)["errors"][0]["message"]
        assert f"{target} set " in message and key.strip().lower() in message.lower(), (key, message)
        done = plain(series, *command, env=env, stdin=CREDENTIAL if "credential" in command else "")
        assert not mark.exists(), f"plain git {' '.join(command)} in work/series still ran {key}: {done}"
        plain(series, "diff", "HEAD")
        plain(series, "status")
        assert not mark.exists(), key
        assert one_patch.run("status").returncode == 0, key


def test_no_key_that_runs_a_program_is_one_patchtool_writes_in_the_cache() -> None:
    from patchtool.git.owned import OWN_CONFIG

    written = {"core.hookspath", "gc.auto"}  # patchtool writes these: /dev/null and 0
    assert not {k.lower() for k, _ in NEUTRAL_CONFIG} - written & OWN_CONFIG
    assert not {section for section, _ in REFUSED_CONFIG} & {k.partition(".")[0] for k in OWN_CONFIG}


# -- discovery: a directory shaped like a bare repository is never one ----------------------------------


def _bare_shaped(fork: Path, program: Path) -> None:
    """``fork`` laid out as a git directory too (``HEAD``, ``config``, ``index``, ``objects/``,
    ``refs/``), whose configuration makes ``fork`` its own work tree and runs ``program``."""
    (fork / "HEAD").write_text("ref: refs/heads/main\n")
    (fork / "config").write_text(
        f"[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tworktree = .\n\tfsmonitor = {program}\n"
    )
    for sub in ("objects", "refs/heads"):
        (fork / sub).mkdir(parents=True, exist_ok=True)
        (fork / sub / ".keep").write_text("")
    empty = plain(fork, "read-tree", "--empty", env={"GIT_DIR": str(fork), "GIT_WORK_TREE": str(fork)})
    assert empty.returncode == 0 and (fork / "index").is_file(), empty.stderr


def test_a_plain_clone_of_a_fork_shaped_like_a_bare_repository_runs_nothing(one_patch: Demo, tmp_path: Path) -> None:
    program, mark = marker(tmp_path)
    outer = tmp_path / "outer"
    outer.mkdir()
    git(outer, "init", "-q")
    fork = outer / "fork"
    shutil.copytree(one_patch.root, fork, ignore=shutil.ignore_patterns(".git", ".patchtool", "work", "build"))
    _bare_shaped(fork, program)
    (fork / ".patchtool").mkdir()
    (fork / ".patchtool" / "journal.json").write_text('{"moves": []}\n')
    git(outer, "add", "-f", ".")
    git(outer, "commit", "-qm", "a fork")
    clone = tmp_path / "clone"
    done = plain(tmp_path, "clone", "-q", str(outer), str(clone))
    assert done.returncode == 0, done.stderr
    inside = clone / "fork"
    plain(inside, "ls-files", "--", ".patchtool")
    assert mark.exists(), "plain git in the clone takes the directory for a bare repository and runs its fsmonitor"
    mark.unlink()
    before = snapshot(clone)
    res = in_process(["status", "--json"], cwd=inside, env=one_patch.environment())
    assert res.returncode == 1, res.stdout + res.stderr
    error = json.loads(res.stdout)["errors"][0]
    assert "git tracks .patchtool/journal.json" in error["message"], error
    assert not mark.exists(), mark.read_text()
    assert snapshot(clone) == before


def test_discovery_takes_the_nearest_git_directory_or_file_and_never_a_bare_shape(tmp_path: Path) -> None:
    program, _ = marker(tmp_path)
    repo = repository(tmp_path / "r")
    inner = repo / "a" / "b"
    inner.mkdir(parents=True)
    _bare_shaped(inner, program)
    assert discover(inner) == (repo / ".git", repo)
    worktree = tmp_path / "wt"
    git(repo, "worktree", "add", "-q", "--detach", str(worktree))
    assert discover(worktree / "f.txt") == (repo / ".git" / "worktrees" / "wt", worktree)
    lone = tmp_path / "lone"
    lone.mkdir()
    _bare_shaped(lone, program)
    assert discover(lone) is None or discover(lone)[1] != lone  # type: ignore[index]


def test_a_command_that_needs_no_repository_finds_none(tmp_path: Path) -> None:
    program, mark = marker(tmp_path)
    bare = tmp_path / "bare-shaped"
    bare.mkdir()
    _bare_shaped(bare, program)
    git_dir = Runner(cwd=bare).run("rev-parse", "--git-dir", check=False)
    assert git_dir.returncode != 0, git_dir.stdout
    assert not mark.exists()


def test_safe_bare_repository_is_explicit_for_every_git(tmp_path: Path) -> None:
    assert ("safe.bareRepository", "explicit") in NEUTRAL_CONFIG
    bare = tmp_path / "b.git"
    git(tmp_path, "init", "-q", "--bare", str(bare))
    res = Runner(git_dir=bare).run("rev-parse", "--is-bare-repository")
    assert res.stdout.strip() == b"true"  # named with --git-dir, a bare repository is used


# -- found by an attack on the first version ----------------------------------------------------------


@pytest.mark.parametrize("where", ["a later line", "a worktree's config.worktree"])
def test_a_hooks_path_put_back_in_the_cache_is_undone_before_the_user_commits(
    one_patch: Demo, tmp_path: Path, where: str
) -> None:
    """git takes the last value of core.hooksPath, and a worktree's own config.worktree over the
    common one: patchtool reads it as git does, and puts /dev/null back before it uses the cache."""
    committed(one_patch)
    program, mark = marker(tmp_path)
    assert one_patch.run("checkout", env=GIT_ENV).returncode == 0
    common = one_patch.cache / "upstream.git"
    hooks = tmp_path / "planted"
    hooks.mkdir()
    shutil.copy(program, hooks / "pre-commit")
    if where == "a later line":
        with (common / "config").open("a") as f:
            f.write(f"[core]\n\thooksPath = {hooks}\n")
    else:
        git(common, "config", "extensions.worktreeConfig", "true")
        (worktree,) = (common / "worktrees").iterdir()
        (worktree / "config.worktree").write_text(f"[core]\n\tbare = false\n\thooksPath = {hooks}\n")
    series = one_patch.root / "work" / "series"
    res = one_patch.run("status", "--json")
    assert res.returncode == 1, res.stdout + res.stderr  # put back, and said once
    assert "hookspath" in json.loads(res.stdout)["errors"][0]["message"].lower()
    assert one_patch.run("status").returncode == 0
    (series / "python" / "demo" / "util.py").write_text("def helper():\n    return 3\n")
    done = plain(series, *ID, "commit", "-qam", "by hand")
    assert done.returncode == 0, done.stderr
    assert not mark.exists(), "the user's git commit ran a hook the cache's configuration was made to name"


def test_a_common_directory_reached_through_a_link_is_checked_as_git_reads_it(tmp_path: Path) -> None:
    """``commondir`` is resolved as git resolves it (links first, then ".."), so the configuration git
    reads is the one checked: ``.git/link -> x/y`` and ``commondir = link/../../c`` is ``.git/c``."""
    program, mark = marker(tmp_path)
    repo = repository(tmp_path / "r")
    dot = repo / ".git"
    (dot / "x" / "y").mkdir(parents=True)
    (dot / "link").symlink_to("x/y")
    (dot / "c").mkdir()
    for name in ("objects", "refs", "HEAD", "config"):
        src = dot / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, dot / "c" / name)
    with (dot / "c" / "config").open("a") as f:
        f.write(f'[filter "e"]\n\tclean = {program}\n')
    (dot / "commondir").write_text("link/../../c\n")
    shown = plain(repo, "config", "--show-origin", "filter.e.clean")
    assert str(dot / "c" / "config") in shown.stdout, shown  # where git reads it
    with pytest.raises(InvalidInput, match=r"sets filter\.e\.clean"):
        Runner(git_dir=dot, work_tree=repo, cwd=repo).run("status", "--porcelain")
    assert not mark.exists()


def test_a_fetch_gives_up_a_remote_slower_than_a_kib_a_second(tmp_path: Path) -> None:
    """The fetch-only values ride on the command line's scope beside the neutral ones, which stay."""
    import subprocess

    from patchtool.git.command import ISOLATION, remote_env

    env = {**os.environ, **ISOLATION, **remote_env(allow_local=False), "GIT_DIR": str(tmp_path / "none")}
    listed = subprocess.run(
        ["git", "config", "--list"], env=env, capture_output=True, text=True, check=True, timeout=HANG_GUARD_S
    ).stdout.splitlines()
    assert "http.lowspeedlimit=1024" in listed and "http.lowspeedtime=60" in listed
    assert "core.fsmonitor=false" in listed and "credential.helper=" in listed


# -- a worktree's commondir, read as git reads it (found by an attack on the second version) -------------


def _common_with_filter(dot: Path, name: str, program: Path) -> Path:
    """A common directory ``dot/<name>`` (any bytes) holding the repository and a filter git runs."""
    common = Path(os.fsdecode(os.fsencode(dot) + b"/" + name.encode("latin-1")))
    common.mkdir()
    for part in ("objects", "refs", "HEAD", "config"):
        src = dot / part
        (shutil.copytree if src.is_dir() else shutil.copy)(src, common / part)
    with (common / "config").open("a") as f:
        f.write(f'[filter "e"]\n\tclean = {program}\n')
    return common


@pytest.mark.parametrize(
    ("written", "name"),
    [
        (b"c \n", "c "),  # git keeps the space: `.strip()` took it off and checked a directory that is not there
        (b"c\t", "c\t"),
        (b"c\r\n\r\n", "c"),  # only newlines and carriage returns come off its end
        (b"c\xff\n", "c\xff"),  # not UTF-8: was not checked at all
        (b"c\0junk\n", "c"),  # git stops at the NUL: refused, whatever it names
    ],
    ids=["trailing-space", "trailing-tab", "crlf", "not-utf-8", "nul"],
)
def test_a_commondir_is_checked_where_git_reads_it(tmp_path: Path, written: bytes, name: str) -> None:
    program, mark = marker(tmp_path)
    repo = repository(tmp_path / "r")
    dot = repo / ".git"
    common = _common_with_filter(dot, name, program)
    if name != "c":  # the name patchtool once read instead: a clean repository, where git does not look
        (dot / "c").mkdir()
    (dot / "commondir").write_bytes(written)
    clean = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    shown = subprocess.run(  # bytes, unquoted (-z): the name need not be UTF-8
        ["git", "config", "-z", "--show-origin", "filter.e.clean"],
        cwd=repo, env={**clean, **PLAIN_ENV}, capture_output=True, timeout=HANG_GUARD_S, check=False,
    )  # fmt: skip
    assert shown.stdout.startswith(b"file:" + os.fsencode(common / "config") + b"\0"), shown  # git reads it there
    with pytest.raises(InvalidInput, match=r"sets filter\.e\.clean|holds a NUL byte"):
        Runner(git_dir=dot, work_tree=repo, cwd=repo).run("status", "--porcelain")
    assert not mark.exists()


@pytest.mark.parametrize("kind", ["empty", "fifo", "directory", "names-nothing"])
def test_a_commondir_git_cannot_read_is_refused_not_taken_as_none(tmp_path: Path, kind: str) -> None:
    repo = repository(tmp_path / "r")
    dot = repo / ".git"
    pointer = dot / "commondir"
    if kind == "empty":
        pointer.write_bytes(b"")
    elif kind == "fifo":
        os.mkfifo(pointer)
    elif kind == "directory":
        pointer.mkdir()
    else:
        pointer.write_bytes(b"nowhere/at/all\n")
    with pytest.raises(InvalidInput, match=r"cannot read the git pointer file .*commondir as git does"):
        Runner(git_dir=dot, work_tree=repo, cwd=repo).run("status", "--porcelain")


def test_a_gitdir_file_is_read_as_git_reads_it(tmp_path: Path) -> None:
    """A ``.git`` file's path keeps its white space, as git keeps it: ``x `` is not ``x``."""
    repo = repository(tmp_path / "r")
    top = tmp_path / "top"
    top.mkdir()
    shutil.copytree(repo / ".git", top / "x ")
    shutil.copytree(repo / ".git", top / "x")
    (top / ".git").write_bytes(b"gitdir: x \n")
    assert discover(top) == (top / "x ", top)
    (top / ".git").write_bytes(b"gitdir: \xffx\r\n")
    shutil.copytree(repo / ".git", Path(os.fsdecode(os.fsencode(top) + b"/\xffx")))
    assert discover(top) == (Path(os.fsdecode(os.fsencode(top) + b"/\xffx")), top)
    (top / ".git").write_bytes(b"gitdir: x\0y\n")
    assert discover(top) is None


def test_a_checkouts_commondir_in_the_cache_is_put_back_before_the_users_git_reads_it(
    one_patch: Demo, tmp_path: Path
) -> None:
    """A checkout's worktree in the cache points at its repository with ``commondir``, which
    ``git worktree add`` writes as ``../..``: any other content (``../../evil ``) is put back, and
    the command stops saying so, before the user's own git in work/series reads a configuration
    (a hooks path, a filter) from elsewhere."""
    committed(one_patch)
    program, mark = marker(tmp_path)
    assert one_patch.run("checkout", env=GIT_ENV).returncode == 0
    common = one_patch.cache / "upstream.git"
    evil = common / "evil "
    evil.mkdir()
    for part in ("objects", "refs"):
        (evil / part).symlink_to(f"../{part}")
    shutil.copy(common / "HEAD", evil / "HEAD")
    hooks = tmp_path / "planted"
    hooks.mkdir()
    shutil.copy(program, hooks / "pre-commit")
    (evil / "config").write_text((common / "config").read_text() + f"[core]\n\thooksPath = {hooks}\n")
    (pointer,) = (common / "worktrees").glob("*/commondir")
    pointer.write_bytes(b"../../evil ")
    series = one_patch.root / "work" / "series"
    shown = plain(series, "config", "--show-origin", "core.hooksPath")
    assert str(evil / "config") in shown.stdout, shown  # the user's git would read it: the case is real
    res = one_patch.run("status", "--json")
    assert res.returncode == 1, res.stdout + res.stderr
    error = json.loads(res.stdout)["errors"][0]
    assert error["message"].startswith(f"the cache's git repository {common} was changed"), error
    assert f"{pointer} held b'../../evil ', not '../..'" in error["message"], error
    assert pointer.read_bytes() == b"../..\n"
    (series / "python" / "demo" / "util.py").write_text("def helper():\n    return 3\n")
    done = plain(series, *ID, "commit", "-qam", "by hand")
    assert done.returncode == 0, done.stderr
    assert not mark.exists(), "the user's git commit ran a hook through a redirected commondir"
    assert one_patch.run("status").returncode == 0  # put back: the next command goes on


@pytest.mark.parametrize("kind", ["own-commondir", "worktree-link", "worktree-as-repository"])
def test_the_cache_is_refused_or_put_back_where_git_would_find_another_repository(
    one_patch: Demo, tmp_path: Path, kind: str
) -> None:
    committed(one_patch)
    assert one_patch.run("checkout", env=GIT_ENV).returncode == 0
    common = one_patch.cache / "upstream.git"
    if kind == "own-commondir":  # every git in the cache would read its repository from elsewhere
        (common / "commondir").write_text("elsewhere\n")
    elif kind == "worktree-link":
        (worktree,) = (common / "worktrees").iterdir()
        shutil.move(worktree, tmp_path / "moved")
        worktree.symlink_to(tmp_path / "moved")
    else:  # no commondir: git takes the worktree's directory for the repository, given objects/
        (worktree,) = (common / "worktrees").iterdir()
        (worktree / "commondir").unlink()
        (worktree / "objects").symlink_to("../../objects")
    res = one_patch.run("status", "--json")
    assert res.returncode == 1, res.stdout + res.stderr
    message = json.loads(res.stdout)["errors"][0]["message"]
    if kind == "own-commondir":
        assert f"{common / 'commondir'} (removed)" in message, message
        assert not (common / "commondir").exists()
        assert one_patch.run("status").returncode == 0
    elif kind == "worktree-link":
        assert message.startswith(f"{worktree} is not a directory, where git keeps a worktree of the cache"), message
    else:
        assert message.startswith(f"{worktree} has no commondir but objects/ of its own"), message


def test_a_worktrees_directory_that_is_a_link_is_refused_before_the_users_git_reads_through_it(
    one_patch: Demo, tmp_path: Path
) -> None:
    """Found by a second attack: ``upstream.git/worktrees`` replaced by a link to a copy whose
    ``series/commondir`` still reads ``../..``. git resolves the link before the ``..``, so the
    worktree's common directory, and the configuration the user's plain git in work/series reads
    (``core.fsmonitor``), were the copy's; patchtool looked at each worktree, not at the link,
    and said nothing."""
    committed(one_patch)
    program, _ = marker(tmp_path)
    assert one_patch.run("checkout", env=GIT_ENV).returncode == 0
    common = one_patch.cache / "upstream.git"
    evil = tmp_path / "evil"
    evil.mkdir()
    for part in ("objects", "refs", "HEAD"):
        (evil / part).symlink_to(common / part)
    (evil / "config").write_text((common / "config").read_text() + f"[core]\n\tfsmonitor = {program}\n")
    shutil.copytree(common / "worktrees", evil / "worktrees", symlinks=True)
    shutil.rmtree(common / "worktrees")
    (common / "worktrees").symlink_to(evil / "worktrees")
    series = one_patch.root / "work" / "series"
    shown = plain(series, "config", "--show-origin", "core.fsmonitor")
    assert str(evil / "config") in shown.stdout, shown  # the user's git would read it: the case is real
    res = one_patch.run("status", "--json")
    assert res.returncode == 1, res.stdout + res.stderr
    error = json.loads(res.stdout)["errors"][0]
    assert f"{common / 'worktrees'} is a symbolic link" in error["message"], error
