"""A generative hostile test: repositories built from hostile pieces, every reading and writing
command run on each, and the boundaries checked after every command.

Each example starts from the demo project (a real pin, a real patch, a real local index) and
lays hostile pieces over it, drawn by Hypothesis: pin values that are options, local URLs or
paths out of the repository; committed symbolic links where patchtool writes or reads; patch
headers git's fast-import refuses; registry and assumption regexes that take exponential time
in a backtracking engine; junk in ``.patchtool/``. Then it runs real ``python -m patchtool``
commands, and after each one checks:

- nothing outside the repository, the cache and the command's own temporary directory changed:
  a decoy tree beside the repository (with a secret in it) is byte-identical, and no file named
  like the attacks' markers appeared anywhere under the example's directory;
- the secret's bytes and its sha256 are in no output (no content oracle);
- the exit code is a documented one other than 70, and no traceback was printed;
- no process the command started outlived it (each command runs with a marker in its environment,
  and /proc is searched for it afterwards).

The CI run is derandomized and bounded; ``nox -s fuzz`` runs it with random seeds and a larger
budget (PATCHTOOL_FUZZ_EXAMPLES).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import Demo
from helpers import HANG_GUARD_S, snapshot

DOCUMENTED = {0, 1, 2, 3, 4, 5, 75}  # README "Exit codes"; 70 (internal error) is always a bug here
SECRET = b"the decoy's secret: 6f1d0a2c-hostile\n"
MARK = "pwned"  # every attack that would run a command or write a file names its target with this

FUZZ = os.environ.get("PATCHTOOL_FUZZ_EXAMPLES")  # set by `nox -s fuzz`: random seeds, its budget
EXAMPLES = int(FUZZ) if FUZZ else 20
DERANDOMIZE = not FUZZ


def _pin_attacks(decoy: str) -> st.SearchStrategy[tuple[str, str, str]]:
    """(table, key, TOML value) replacements for the demo pin."""
    target = f"{decoy}/{MARK}"
    url = st.sampled_from(
        [
            f'"--upload-pack=touch {target}-upload;"',
            f'"-oProxyCommand=touch {target}-proxy"',
            f'"ext::sh -c touch% {target}-ext"',
            f'"file://{decoy}/repo"',
            f'"{decoy}/repo"',
            '"http://127.0.0.1:1/x.git"',
            f'"--config=core.sshCommand=touch {target}-ssh"',
        ]
    )
    tag = st.sampled_from(['"v1.0"', f'"--output={target}-tag"', '"-x"', '"v1.0\\n"', '"refs/heads/../../x"'])
    artifact = st.sampled_from(
        [
            ("distribution", f'"../../{decoy.lstrip("/")}/{MARK}"'),
            ("distribution", '"-rf"'),
            ("filename", f'"../../../{decoy.lstrip("/")}/{MARK}-1.0.tar.gz"'),
            ("filename", '"../demo-1.0.tar.gz"'),
            ("filename", '"demo-1.0.tar.gz/../../x-1.0.tar.gz"'),
            ("url", f'"file://{decoy}/secret"'),
            ("url", '"file:///dev/zero"'),
            ("url", f'"{decoy}/secret"'),
            ("url", '"--output=/tmp/x"'),
            ("index", f'"file://{decoy}"'),
            ("index", '"http://127.0.0.1:1/simple"'),
            ("size", "100"),
            ("size", "1000000000000"),
        ]
    )
    return st.one_of(
        st.tuples(st.just("git"), st.just("url"), url),
        st.tuples(st.just("git"), st.just("tag"), tag),
        artifact.map(lambda kv: ("artifact", kv[0], kv[1])),
    )


LINKS = st.sampled_from(
    [
        "build",
        "dist",
        "work",
        ".patchtool",
        "upstream-pins/evil.toml",
        "patches/0002-link.patch",
        "retread.toml",
        "debian/patches/series",
        "out.html",
    ]
)

PATCH_HEADERS = st.sampled_from(
    [
        "From: </script> <e@x>",
        "From: A <a@x>\nFrom: B",
        "Subject: [PATCH] \x1b[31mred\x1b[0m",
        "From: Nobody <>",
        "Subject: [PATCH] a\r\nb",
    ]
)

REGEXES = st.sampled_from(
    ["(.|.|.)*QQQ", "x{99999999999}", "(" * 400 + "x" + ")" * 400, "(a*)*$", "[", "(?P<n>x)(?P=n)", "\\"]
)


@st.composite
def hostile_pieces(draw: st.DrawFn, decoy: str) -> dict[str, object]:
    return {
        "pin": draw(st.lists(_pin_attacks(decoy), max_size=3, unique_by=lambda t: (t[0], t[1]))),
        "git_table": draw(st.booleans()),
        "use_git": draw(st.booleans()),
        "links": draw(st.lists(LINKS, max_size=3, unique=True)),
        "header": draw(st.none() | PATCH_HEADERS),
        "assumption_regex": draw(st.none() | REGEXES),
        "registry_regex": draw(st.none() | REGEXES),
        "junk_state": draw(st.none() | st.sampled_from(["journal", "rebase", "staged-link"])),
        "allow_local": draw(st.booleans()),
    }


def _write_pin(root: Path, pieces: dict[str, object]) -> None:
    pin = root / "upstream-pins" / "demo-1.0.toml"
    lines = pin.read_text().splitlines()
    replaced: dict[tuple[str, str], str] = {(t, k): v for t, k, v in pieces["pin"]}  # type: ignore[misc]
    out, table = [], ""
    for line in lines:
        if line.startswith("["):
            table = line.strip("[]")
        key = line.split("=", 1)[0].strip() if "=" in line else ""
        if (table, key) in replaced:
            line = f"{key} = {replaced.pop((table, key))}"  # noqa: PLW2901 -- rewritten, then kept
        out.append(line)
    for (tbl, key), value in list(replaced.items()):  # keys the demo pin lacks
        if tbl == "artifact":
            out.insert(out.index("[artifact]") + 1, f"{key} = {value}")
            del replaced[(tbl, key)]
    git_lines = [f"{k} = {v}" for (t, k), v in replaced.items() if t == "git"]
    if pieces["git_table"] or git_lines:
        keys = {line.split("=")[0].strip() for line in git_lines}
        git_lines += [
            x for x in ('url = "https://127.0.0.1:1/x.git"', 'tag = "v1.0"') if x.split("=")[0].strip() not in keys
        ]
        use = ['use = "git"'] if pieces["use_git"] else []
        out = out[:3] + use + out[3:] + ["", "[git]", *git_lines, 'commit = "' + "a" * 40 + '"']
    pin.write_text("\n".join(out) + "\n")


def _lay(root: Path, decoy: Path, pieces: dict[str, object]) -> None:
    _write_pin(root, pieces)
    for link in pieces["links"]:  # type: ignore[attr-defined]
        path = root / link
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()
        target = decoy / "secret" if link.endswith((".toml", ".patch", "series", ".html")) else decoy
        path.symlink_to(target)
    if pieces["header"]:
        patch = root / "patches" / "0001-greet.patch"
        text = patch.read_text()
        head, rest = text.split("\n", 1)
        lines = rest.split("\n")
        key = str(pieces["header"]).split(":", 1)[0]
        lines = [str(pieces["header"]) if line.startswith(key + ":") else line for line in lines]
        patch.write_text(head + "\n" + "\n".join(lines))
    manifest = root / "patchset.toml"
    if pieces["assumption_regex"] is not None:
        rx = str(pieces["assumption_regex"]).replace("'", "")
        manifest.write_text(
            manifest.read_text() + '\n[[patch.assumptions]]\nid = "hostile"\n'
            f'file = "python/demo/core.py"\nregex = \'{rx}\'\nwhy = "attack"\n'
        )
    if pieces["registry_regex"] is not None:
        rx = str(pieces["registry_regex"]).replace("'", "")
        (root / "retread.toml").unlink(missing_ok=True)
        (root / "retread.toml").write_text(
            'schema = 1\n\n[[rejected]]\nid = "hostile"\ntitle = "t"\ntried = "t"\n'
            'verdict = "rejected"\nreason = "r"\nrevisit = "never"\n\n[[rejected.evidence]]\n'
            'metric = "m"\nchange = "worse"\nsource = "s"\n\n[[rejected.knobs]]\ntype = "pattern"\n'
            f"name = \"p\"\nregex = '{rx}'\n"
        )
        text = manifest.read_text()
        manifest.write_text(text.replace('pin = "demo-1.0"\n', 'pin = "demo-1.0"\nregistry = "retread.toml"\n', 1))
    state = root / ".patchtool"
    junk = pieces["junk_state"]
    if junk and not state.is_symlink():
        state.mkdir(exist_ok=True)
        if junk == "journal":
            (state / "journal.json").write_text(
                '{"schema": 1, "steps": [{"op": "move", "from": ".patchtool/staged/x", "to": "../../'
                + str(decoy).lstrip("/")
                + '/secret"}, {"op": "remove", "path": "../decoy/secret"}]}'
            )
        elif junk == "rebase":
            (state / "rebase").mkdir(exist_ok=True)
            (state / "rebase" / "state.json").write_text('{"schema": 1, "root": "' + str(decoy) + '"}')
        else:
            (state / "staged").mkdir(exist_ok=True)
            (state / "staged" / "x").symlink_to(decoy / "secret")


def _commands(out: Path) -> list[tuple[str, ...]]:
    reading = [
        ("status",),
        ("check",),
        ("--json", "check"),
        ("rebase", "--to", "1.0", "--dry-run"),
        ("scan", "--versions", "1.0", "--html", str(out / "scan.html")),
        ("retread", "scan", "."),
        ("pin", "list"),
    ]
    writing = [
        ("apply", "--into", str(out / "tree")),
        ("checkout",),
        ("export",),
        ("recover",),
        ("cache", "prune"),
        ("build", "--out", str(out / "dist")),
    ]
    return reading + writing


def _survivors(marker: str) -> list[str]:
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as fh:
                if marker.encode() in fh.read():
                    with open(f"/proc/{pid}/cmdline", "rb") as fh2:
                        argv = fh2.read().replace(b"\0", b" ").decode(errors="replace")
                    found.append(f"{pid}: {argv}")
        except OSError:
            continue
    return found


@pytest.mark.slow
@settings(
    max_examples=EXAMPLES,
    derandomize=DERANDOMIZE,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_hostile_repositories_stay_inside_their_boundaries(one_patch: Demo, data: st.DataObject) -> None:
    with tempfile.TemporaryDirectory(dir=one_patch.root.parent) as tmp:
        base = Path(tmp)
        decoy = base / "decoy"
        (decoy / "repo").mkdir(parents=True)
        (decoy / "secret").write_bytes(SECRET)
        (decoy / "demo-1.0.tar.gz").write_bytes(b"not yours to overwrite\n")
        root = base / "project"
        shutil.copytree(one_patch.root, root, symlinks=True)
        pieces = data.draw(hostile_pieces(str(decoy)), label="pieces")
        _lay(root, decoy, pieces)
        before = snapshot(decoy)
        secret_hash = hashlib.sha256(SECRET).hexdigest()
        out = base / "out"
        out.mkdir()
        commands = data.draw(st.lists(st.sampled_from(_commands(out)), min_size=2, max_size=5), label="commands")
        for argv in commands:
            marker = f"PATCHTOOL_GENERATIVE_MARK={uuid.uuid4().hex}"
            env = {k: v for k, v in os.environ.items() if k != "PATCHTOOL_ALLOW_LOCAL_URLS"}
            env.update(
                PATCHTOOL_CACHE_DIR=str(base / "cache"),
                PATCHTOOL_LOCK_TIMEOUT="5",
                PATCHTOOL_GENERATIVE_MARK=marker.split("=", 1)[1],
            )
            if pieces["allow_local"]:
                env["PATCHTOOL_ALLOW_LOCAL_URLS"] = "1"
            try:
                res = subprocess.run(
                    [sys.executable, "-m", "patchtool", *argv],
                    cwd=root,
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=HANG_GUARD_S,
                    stdin=subprocess.DEVNULL,
                )
            except subprocess.TimeoutExpired:
                pytest.fail(f"{argv} did not finish in {HANG_GUARD_S} s on {pieces}")
            said = res.stdout + res.stderr
            where = f"patchtool {' '.join(argv)} on {pieces}:\n{said[-3000:]}"
            assert res.returncode in DOCUMENTED, where
            assert "Traceback (most recent call last)" not in said, where
            assert snapshot(decoy) == before, where
            assert not list(base.rglob(f"*{MARK}*")), where
            assert not list(Path("/tmp").glob(f"{MARK}*")), where
            if not pieces["allow_local"]:
                assert SECRET.decode().strip() not in said and secret_hash not in said, where
            assert _survivors(marker.split("=", 1)[1]) == [], where
