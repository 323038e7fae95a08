"""Hostile and damaged release artifacts, and tampered builds read back by `provenance`.

Every artifact here is crafted in the test (nothing binary is committed) and served by the demo's
real local index with a pin whose sha256 matches it: the hash proves only that the file is the
one pinned, never that it is safe. Each case is refused with its documented exit code and a
message naming the artifact and the member, before anything is imported, and leaves nothing on
disk: not in the project, not at the target, not in the cache (no object, ref or stray file).
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import re
import struct
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from conftest import UPSTREAM_FILES, Demo, edit
from helpers import git, sha256, snapshot

NAME = "demo-1.0-py3-none-any.whl"
HINT = "the artifact is malformed or hostile; nothing was imported"
DAMAGED_HINT = (
    "the file matches the pin's sha256, so the pin names a damaged file: check the pin against the "
    "index; nothing was imported"
)
Member = bytes | tuple[bytes, int]  # content, or (content, unix mode)


# -- crafting artifacts ------------------------------------------------------------------------


def wheel_with(path: Path, members: Mapping[str, Member], *, method: int = zipfile.ZIP_DEFLATED) -> Path:
    """The demo release with ``members`` added, their names exactly as given, and its metadata."""
    path.parent.mkdir(parents=True, exist_ok=True)
    files: dict[str, Member] = {k: v.encode() for k, v in UPSTREAM_FILES.items()}
    with zipfile.ZipFile(path, "w") as zf:
        for name, item in [*files.items(), *members.items()]:
            data, mode = item if isinstance(item, tuple) else (item, 0o100644)
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = mode << 16
            zf.writestr(info, data, method)
        for name, text in (
            ("demo-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: demo\nVersion: 1.0\n"),
            (
                "demo-1.0.dist-info/WHEEL",
                "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
            ),
            ("demo-1.0.dist-info/RECORD", ""),
        ):
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = 0o100644 << 16
            zf.writestr(info, text, zipfile.ZIP_DEFLATED)
    return path


def sdist_with(path: Path, members: Mapping[str, tarfile.TarInfo | bytes]) -> Path:
    """The demo release as an sdist (``demo-1.0/demo/...``, PKG-INFO) with ``members`` added."""
    path.parent.mkdir(parents=True, exist_ok=True)
    entries: dict[str, tarfile.TarInfo | bytes] = {f"demo-1.0/{k}": v.encode() for k, v in UPSTREAM_FILES.items()}
    entries["demo-1.0/PKG-INFO"] = b"Metadata-Version: 2.1\nName: demo\nVersion: 1.0\n"
    entries.update(members)
    with tarfile.open(path, "w:gz", format=tarfile.PAX_FORMAT) as tf:
        for name, item in entries.items():
            if isinstance(item, tarfile.TarInfo):
                tf.addfile(item)
            else:
                ti = tarfile.TarInfo(name)
                ti.size = len(item)
                ti.mode = 0o644
                tf.addfile(ti, io.BytesIO(item))
    return path


def serve(demo: Demo, artifact: Path, *, prefix: tuple[str, str] = ("demo/", "python/demo/")) -> None:
    """Serve ``artifact`` as the demo release, with a pin that names it by its true sha256."""
    demo.index.add(artifact)
    (demo.root / "upstream-pins" / "demo-1.0.toml").write_text(
        f'schema = 1\nname = "demo"\nversion = "1.0"\n\n[artifact]\nindex = "{demo.index.url}"\n'
        f'distribution = "demo"\nversion = "1.0"\nfilename = "{artifact.name}"\nsha256 = "{sha256(artifact)}"\n'
        f'prefix = {{ from = "{prefix[0]}", to = "{prefix[1]}" }}\n'
    )


def run(demo: Demo, *args: str, env: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
    res = demo.run(*args, "--json", env=env)
    assert "Traceback" not in res.stderr, res.stderr
    return res.returncode, json.loads(res.stdout)


def git_dir(demo: Demo) -> Path:
    return demo.cache / "upstream.git"


def assert_nothing_imported(demo: Demo) -> None:
    """The cache holds no ref, no object and no stray file: only the verified download, if any."""
    repo = git_dir(demo)
    if not repo.exists():
        return
    assert git(repo, "for-each-ref") == ""
    counts = dict(line.split(": ") for line in git(repo, "count-objects", "-v").splitlines())
    assert (counts["count"], counts["in-pack"], counts["garbage"]) == ("0", "0", "0"), counts
    stray = [p.name for p in repo.iterdir() if p.name.startswith(("fast_import_crash", "marks.", "index."))]
    assert stray == []


def refused(demo: Demo, command: str, code: int) -> dict[str, Any]:
    """Run ``command`` twice against the hostile artifact: the same error both times, nothing imported,
    and nothing changed on disk by either run (the first may only download the verified file)."""
    target = demo.root.parent / "target"
    args = ["apply", "--into", str(target)] if command == "apply" else ["build", "--out", str(target)]
    project = snapshot(demo.root)
    got, out = run(demo, *args)
    assert got == code, out
    assert snapshot(demo.root) == project and not target.exists()
    assert_nothing_imported(demo)
    cache = snapshot(demo.cache)
    assert all("/downloads/" in p or p.endswith("/lock") or "/upstream.git/" in p for p in cache)
    again, out_again = run(demo, *args)
    assert (again, out_again["errors"]) == (got, out["errors"])
    assert snapshot(demo.root) == project and snapshot(demo.cache) == cache and not target.exists()
    assert len(out["errors"]) == 1
    error: dict[str, Any] = out["errors"][0]
    return error


def recovers(demo: Demo) -> None:
    """The cache is not poisoned: the good release, pinned again, applies."""
    serve(demo, demo.wheel)
    code, out = run(demo, "apply", "--into", str(demo.root.parent / "good"))
    assert code == 0, out
    assert git(git_dir(demo), "fsck", "--strict", "--no-dangling").strip() == ""


@pytest.fixture
def series(demo: Demo) -> Demo:
    """The demo with one patch, so `build` has something to do."""
    demo.commit_patch("0001-greet.patch", edit("python/demo/core.py", '"hello"', '"hi"'), "core: say hi")
    demo.write_manifest(demo.entry("greet", "0001-greet.patch"))
    return demo


# -- member names that would inject into the import --------------------------------------------

INJECTIONS = {
    "newline adds a file outside prefix.to": ("demo/a\nM 100644 :1 setup_injected.py", {}),
    "newline adds a symlink to /etc/passwd": ("demo/a\nM 120000 :1 python/demo/passwd", {"demo/0.py": b"/etc/passwd"}),
    "newline writes a git hook": (
        "demo/a\nM 100755 :1 .git/hooks/post-checkout",
        {"demo/0.py": b"#!/bin/sh\ntouch pwned\n"},
    ),
    "a '.' component git fsck refuses": ("demo/./srt/x.py", {}),
}


@pytest.mark.parametrize("case", list(INJECTIONS))
def test_member_name_that_injects_into_the_import_is_refused(series: Demo, case: str) -> None:
    name, extra = INJECTIONS[case]
    serve(series, wheel_with(series.root.parent / "hostile" / NAME, {**extra, name: b"x = 1\n"}))
    why = "contains a control character" if "\n" in name else "has an empty, '.' or '..' component"
    for command in ("apply", "build"):
        error = refused(series, command, 4)
        assert error["message"] == f"{NAME}: entry {name!r} is not a safe path: path {name!r} {why}; refusing it"
        assert error["hint"] == HINT
    recovers(series)


# every other name or kind of member git, the import or an unpacker must never see
REFUSED = {
    "demo/../../evil.py": "path 'demo/../../evil.py' escapes the tree",
    "/etc/evil.py": "absolute path '/etc/evil.py'",
    "C:/evil.py": "absolute path 'C:/evil.py'",
    "demo\\..\\..\\evil.py": "path 'demo\\\\..\\\\..\\\\evil.py' contains a backslash",
    "demo//x.py": "path 'demo//x.py' has an empty, '.' or '..' component",
    "demo/.git/config": "path 'demo/.git/config' touches .git/",
    "demo/.GIT/hooks/pre-commit": "path 'demo/.GIT/hooks/pre-commit' touches .git/",
    "demo/.git./config": "path 'demo/.git./config' touches .git/",
    "demo/git~1/config": "path 'demo/git~1/config' touches .git/",
    "demo/.g\u200cit/config": "path 'demo/.g\\u200cit/config' touches .git/",
    "demo/x\x01.py": "path 'demo/x\\x01.py' contains a control character",
    "demo/x\x7f.py": "path 'demo/x\\x7f.py' contains a control character",
    "demo/\r.py": "path 'demo/\\r.py' contains a control character",
    ".git/hooks/post-checkout": "path '.git/hooks/post-checkout' touches .git/",
    "demo/" + "a" * 256 + ".py": f"path {'demo/' + 'a' * 256 + '.py'!r} has a name longer than 255 bytes, which no "
    "checkout can create",
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_unsafe_member_name_is_refused(demo: Demo, name: str) -> None:
    demo.write_manifest()
    serve(demo, wheel_with(demo.root.parent / "hostile" / NAME, {name: b"x = 1\n"}))
    error = refused(demo, "apply", 4)
    assert error["message"] == f"{NAME}: entry {name!r} is not a safe path: {REFUSED[name]}; refusing it"


@pytest.mark.parametrize(
    ("members", "why"),
    [
        ({"demo/link.py": (b"/etc/passwd", 0o120777)}, "entry 'demo/link.py' is a symbolic link"),
        ({"demo/fifo": (b"", 0o010644)}, "entry 'demo/fifo' is not a regular file"),
        ({"demo/dev": (b"", 0o020644)}, "entry 'demo/dev' is not a regular file"),
        ({"demo/../": (b"", 0o040755)}, "entry 'demo/../' is not a safe path: path 'demo/..' escapes the tree"),
    ],
)
def test_member_that_is_not_a_plain_file_is_refused(demo: Demo, members: dict[str, Member], why: str) -> None:
    demo.write_manifest()
    serve(demo, wheel_with(demo.root.parent / "hostile" / NAME, members))
    assert refused(demo, "apply", 4)["message"] == f"{NAME}: {why}; refusing it"


def test_member_twice_and_odd_compression_are_refused(demo: Demo) -> None:
    demo.write_manifest()
    hostile = demo.root.parent / "hostile" / NAME
    with pytest.warns(UserWarning, match="Duplicate name"):
        wheel_with(hostile, {"demo/core.py": b"print('second copy')\n"})
    serve(demo, hostile)
    assert refused(demo, "apply", 4)["message"] == f"{NAME}: entry 'demo/core.py' appears twice; refusing it"
    serve(demo, wheel_with(hostile, {"demo/x.py": b"x"}, method=zipfile.ZIP_BZIP2))
    assert refused(demo, "apply", 4)["message"] == (
        f"{NAME}: entry 'demo/__init__.py' uses compression method 12 (a wheel uses stored or deflate); refusing it"
    )


# a file and a directory of the same name: an import keeps only one of them, and `check` said clean
FILE_AND_DIRECTORY = {
    "file first": (
        {"demo/six.py": b"six = 1\n", "demo/six.py/x.py": b"x = 1\n"},
        "entry 'demo/six.py/x.py' lies beneath 'demo/six.py', which is also a file",
    ),
    "directory first": (
        {"demo/six.py/x.py": b"x = 1\n", "demo/six.py": b"six = 1\n"},
        "entry 'demo/six.py' is a file and also the directory of 'demo/six.py/x.py'",
    ),
}


@pytest.mark.parametrize("case", list(FILE_AND_DIRECTORY))
def test_wheel_member_that_is_a_file_and_a_directory_is_refused(series: Demo, case: str) -> None:
    members, why = FILE_AND_DIRECTORY[case]
    serve(series, wheel_with(series.root.parent / "hostile" / NAME, members))
    for command in ("apply", "build"):
        error = refused(series, command, 4)
        assert (error["message"], error["hint"]) == (f"{NAME}: {why}; refusing it", HINT)
    project = snapshot(series.root)
    code, out = run(series, "check")
    assert code == 1 and [e["message"] for e in out["errors"]] == [f"{NAME}: {why}; refusing it"]  # a problem
    assert snapshot(series.root) == project
    recovers(series)


@pytest.mark.parametrize("case", list(FILE_AND_DIRECTORY))
def test_sdist_member_that_is_a_file_and_a_directory_is_refused(demo: Demo, case: str) -> None:
    members, why = FILE_AND_DIRECTORY[case]
    demo.write_manifest()
    sdist = sdist_with(
        demo.root.parent / "hostile" / "demo-1.0.tar.gz", {f"demo-1.0/{k}": v for k, v in members.items()}
    )
    serve(demo, sdist, prefix=("demo-1.0/demo/", "python/demo/"))
    error = refused(demo, "apply", 4)
    assert error["message"] == f"demo-1.0.tar.gz: {why.replace('demo/', 'demo-1.0/demo/')}; refusing it"
    assert error["hint"] == HINT


def test_pin_prefix_that_leads_into_git_is_refused(demo: Demo) -> None:
    demo.write_manifest()
    serve(demo, demo.wheel, prefix=("demo/", ".git/hooks/"))
    project = snapshot(demo.root)
    code, out = run(demo, "apply", "--into", str(demo.root.parent / "target"))
    assert code == 1
    assert [(e["file"], e["key"], e["message"]) for e in out["errors"]] == [
        (
            "upstream-pins/demo-1.0.toml",
            "artifact.prefix.to",
            "path '.git/hooks' touches .git/: the import would put files there",
        )
    ]
    # nothing imported (the cache holds only the emptied directory Landlock confines the command to)
    assert snapshot(demo.root) == project and not (demo.cache / "upstream.git").exists()
    assert snapshot(demo.cache) == {}


def test_name_starting_with_a_quote_is_imported_verbatim(demo: Demo) -> None:
    """Legal in git, and fast-import would unquote it unless it is quoted: the one stream writer does."""
    demo.write_manifest()
    odd = {'demo/"q.py': b"q = 1\n", 'demo/a "b" c.py': b"c = 1\n", "demo/\u00fc.py": b"u = 1\n"}
    serve(demo, wheel_with(demo.root.parent / "odd" / NAME, odd), prefix=("demo/", ""))
    code, out = run(demo, "apply", "--into", str(demo.root.parent / "tree"))
    assert code == 0, out
    tree = demo.root.parent / "tree"
    assert {p.name: p.read_bytes() for p in tree.iterdir() if p.name != ".git"} == {
        '"q.py': b"q = 1\n",
        'a "b" c.py': b"c = 1\n",
        "\u00fc.py": b"u = 1\n",
        "__init__.py": b'__version__ = "1.0"\n',
        "core.py": UPSTREAM_FILES["demo/core.py"].encode(),
        "util.py": UPSTREAM_FILES["demo/util.py"].encode(),
    }


# -- sdists: links and names inside a tar ------------------------------------------------------


def _tar_entry(name: str, kind: bytes, target: str = "") -> tarfile.TarInfo:
    ti = tarfile.TarInfo(name)
    ti.type, ti.linkname = kind, target
    return ti


@pytest.mark.parametrize(
    ("members", "message"),
    [
        (
            {"demo-1.0/demo/link.py": _tar_entry("demo-1.0/demo/link.py", tarfile.SYMTYPE, "/etc/passwd")},
            "demo-1.0.tar.gz: entry 'demo-1.0/demo/link.py' is a symbolic link that points at '/etc/passwd', which "
            "is no plain relative path; refusing it",
        ),
        (
            {"demo-1.0/demo/hard.py": _tar_entry("demo-1.0/demo/hard.py", tarfile.LNKTYPE, "/etc/passwd")},
            "demo-1.0.tar.gz: entry 'demo-1.0/demo/hard.py' is not a regular file; refusing it",
        ),
        (
            {"demo-1.0/demo/a\nM 100644 :1 x.py": b"x"},
            "demo-1.0.tar.gz: entry 'demo-1.0/demo/a\\nM 100644 :1 x.py' is not a safe path: path "
            "'demo-1.0/demo/a\\nM 100644 :1 x.py' contains a control character; refusing it",
        ),
        (
            {"../evil.py": b"x"},
            "demo-1.0.tar.gz: entry '../evil.py' is not a safe path: path '../evil.py' escapes the tree; refusing it",
        ),
    ],
)
def test_hostile_sdist_is_refused(demo: Demo, members: dict[str, Any], message: str) -> None:
    demo.write_manifest()
    serve(
        demo,
        sdist_with(demo.root.parent / "hostile" / "demo-1.0.tar.gz", members),
        prefix=("demo-1.0/demo/", "python/demo/"),
    )
    error = refused(demo, "apply", 4)
    assert error["message"] == message


# -- damaged archives whose sha256 matches the pin -----------------------------------------------


def _data_offset(path: Path, member: str) -> tuple[int, int]:
    with zipfile.ZipFile(path) as zf:
        info = zf.getinfo(member)
    head = path.read_bytes()[info.header_offset : info.header_offset + 30]
    name_len, extra_len = struct.unpack("<HH", head[26:30])
    return info.header_offset + 30 + name_len + extra_len, info.compress_size


def truncated(path: Path) -> Path:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) * 2 // 3])
    return path


def corrupt_deflate(path: Path, member: str = "demo/core.py") -> Path:
    start, length = _data_offset(path, member)
    data = bytearray(path.read_bytes())
    data[start : start + length] = b"\xff" * length
    path.write_bytes(bytes(data))
    return path


@pytest.mark.parametrize(
    ("damage", "why"),
    [
        (truncated, "File is not a zip file"),
        (corrupt_deflate, "corrupt compressed data: Error -3 while decompressing data: invalid block type"),
    ],
)
def test_damaged_release_wheel_is_refused(series: Demo, damage: Any, why: str) -> None:
    damaged = damage(wheel_with(series.root.parent / "damaged" / NAME, {}))
    serve(series, damaged)
    for command in ("apply", "build"):
        error = refused(series, command, 4)
        assert error["message"] == f"{NAME} is damaged and cannot be read ({why}); refusing it"
        assert error["hint"] == DAMAGED_HINT


def test_member_with_a_bad_crc_is_refused(series: Demo) -> None:
    damaged = wheel_with(series.root.parent / "damaged" / NAME, {}, method=zipfile.ZIP_STORED)
    start, _ = _data_offset(damaged, "demo/util.py")
    data = bytearray(damaged.read_bytes())
    data[start] ^= 0x01
    damaged.write_bytes(bytes(data))
    serve(series, damaged)
    error = refused(series, "build", 4)
    assert error["message"] == f"{NAME} is damaged and cannot be read (Bad CRC-32 for file 'demo/util.py'); refusing it"


def test_truncated_sdist_is_refused(demo: Demo) -> None:
    demo.write_manifest()
    serve(
        demo,
        truncated(sdist_with(demo.root.parent / "damaged" / "demo-1.0.tar.gz", {})),
        prefix=("demo-1.0/demo/", "python/demo/"),
    )
    message = refused(demo, "apply", 4)["message"]
    assert re.fullmatch(r"demo-1\.0\.tar\.gz is damaged and cannot be read \(.+\); refusing it", message), message


# -- provenance: a build tampered with after it was made -----------------------------------------


def record_rows(data: bytes) -> list[list[str]]:
    return list(csv.reader(io.StringIO(data.decode())))


def b64(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def rezip(wheel: Path, dest: Path, change: dict[str, bytes], *, rewrite_record: bool) -> Path:
    """``wheel`` with members replaced or added, RECORD kept as it was or regenerated (as `wheel pack` does)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED) as out:
        members = {i.filename: src.read(i) for i in src.infolist()}
        record = next(n for n in members if n.endswith(".dist-info/RECORD"))
        members.update(change)
        if rewrite_record:
            rows = [[n, b64(d), str(len(d))] for n, d in members.items() if n != record] + [[record, "", ""]]
            buf = io.StringIO()
            csv.writer(buf, lineterminator="\n").writerows(rows)
            members[record] = buf.getvalue().encode()
        for name, data in members.items():
            out.writestr(name, data)
    return dest


TAMPERED = b'__version__ = "1.0"\nimport os; os.system("id")\n'


@pytest.fixture
def built(series: Demo) -> Path:
    code, out = run(series, "build", "--out", str(series.root / "dist"))
    assert code == 0, out
    return Path(out["data"]["wheel"])


def provenance(demo: Demo, *args: str) -> tuple[int, dict[str, Any], list[tuple[str, str]]]:
    """`provenance` is read-only: it changes nothing, whatever it reads."""
    before = snapshot(demo.root.parent)
    code, out = run(demo, "provenance", *args)
    assert snapshot(demo.root.parent) == before
    return code, out, [(e.get("file", ""), e["message"]) for e in out["errors"]]


def test_untouched_wheel_is_consistent_file_by_file(series: Demo, built: Path) -> None:
    code, out, errors = provenance(series, str(built))
    assert (code, errors) == (0, [])
    with zipfile.ZipFile(built) as zf:
        files = len([n for n in zf.namelist() if not n.endswith("/RECORD")])
    assert out["data"]["record"] == {"listed": files, "matched": files}
    text = series.run("provenance", str(built)).stdout.splitlines()
    assert text[-2:] == [f"every file against RECORD: {files}/{files} as listed", "provenance: consistent"]


@pytest.mark.parametrize(
    ("change", "rewrite", "expected"),
    [
        ({"demo/__init__.py": TAMPERED}, False, [("demo/__init__.py", "differs from RECORD (sha256 does not match)")]),
        ({"demo/evil.py": b"import os\n"}, False, [("demo/evil.py", "is not listed in RECORD")]),
        ({"demo/__init__.py": TAMPERED}, True, "payload"),
        ({"demo/evil.py": b"import os\n"}, True, "payload"),
    ],
)
def test_tampered_wheel_is_not_consistent(
    series: Demo, built: Path, change: dict[str, bytes], rewrite: bool, expected: Any
) -> None:
    tampered = rezip(built, series.root.parent / "tampered" / built.name, change, rewrite_record=rewrite)
    code, out, errors = provenance(series, str(tampered))
    assert code == 1 and out["status"] == "problems"
    if expected == "payload":  # RECORD regenerated to match: only the recorded payload can tell
        record = f"demo-{out['data']['metadata_version']}.dist-info/RECORD"
        files = 4 if "demo/evil.py" in change else 3
        assert len(errors) == 1 and errors[0][0] == record
        assert re.fullmatch(
            rf"lists {files} package files \(payload sha256 [0-9a-f]{{16}}\.\.\.\), but the build made 3 "
            r"\(payload sha256 [0-9a-f]{16}\.\.\.\): files were changed, added or removed and RECORD "
            r"rewritten after the build",
            errors[0][1],
        ), errors
    else:
        assert errors == expected
    text = series.run("provenance", str(tampered))
    assert text.returncode == 1 and "provenance: consistent" not in text.stdout


def test_damaged_wheel_given_to_provenance(series: Demo, built: Path) -> None:
    bad = series.root.parent / "damaged" / built.name
    bad.parent.mkdir()
    bad.write_bytes(built.read_bytes())
    corrupt_deflate(bad, "demo/util.py")
    code, _, errors = provenance(series, str(bad))
    assert (code, errors) == (
        1,
        [
            (
                bad.name,
                f"{bad.name}: entry 'demo/util.py' is damaged and cannot be read "
                "(corrupt compressed data: Error -3 while decompressing data: invalid "
                "block type)",
            )
        ],
    )
    truncated(bad)
    code, _, errors = provenance(series, str(bad))
    assert (code, errors) == (
        1,
        [("", f"{bad.name} is damaged and cannot be read (File is not a zip file); refusing it")],
    )


def test_tampered_install_is_not_consistent(series: Demo, built: Path, tmp_path: Path) -> None:
    site = tmp_path / "site"
    pip = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-index",
            "--target",
            str(site),
            str(built),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert pip.returncode == 0, pip.stderr
    code, out, errors = provenance(series, "demo", "--path", str(site))
    assert (code, errors) == (0, [])  # pip compiled the modules: RECORD lists the .pyc files without a hash
    assert out["data"]["record"]["listed"] == out["data"]["record"]["matched"] > 0
    with (site / "demo" / "__init__.py").open("a") as fh:
        fh.write('import os; os.system("id")\n')
    (site / "demo" / "evil.py").write_text("import os\n")
    code, out, errors = provenance(series, "demo", "--path", str(site))
    assert code == 1
    assert errors == [
        ("demo/__init__.py", "differs from RECORD (sha256 does not match)"),
        ("demo/evil.py", "is not listed in RECORD"),
    ]
    text = series.run("provenance", "demo", "--path", str(site)).stdout
    assert "error: demo/__init__.py: differs from RECORD (sha256 does not match)" in text
    # RECORD rewritten to match the edited file: the payload the build recorded still tells
    info = next(site.glob("demo-*.dist-info"))
    record = info / "RECORD"
    rows = record_rows(record.read_bytes())
    data = (site / "demo" / "__init__.py").read_bytes()
    rows = [[p, b64(data), str(len(data))] if p == "demo/__init__.py" else [p, h, s] for p, h, s in rows]
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows([*rows, ["demo/evil.py", b64(b"import os\n"), "10"]])
    record.write_text(buf.getvalue())
    code, out, errors = provenance(series, str(info))
    assert code == 1 and [f for f, _ in errors] == [f"{info.name}/RECORD"]
    assert errors[0][1].startswith("lists 4 package files (payload sha256 ")


def test_record_paths_outside_site_packages_are_never_read(series: Demo, built: Path, tmp_path: Path) -> None:
    """An installed RECORD naming ``../`` paths (right hash or wrong) must not make provenance hash
    files outside site-packages: that would be a content oracle for any file."""
    site = tmp_path / "site"
    pip = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-index",
            "--target",
            str(site),
            str(built),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert pip.returncode == 0, pip.stderr
    secret = tmp_path / "secret"
    secret.write_bytes(b"root:$6$hash:19000\n")
    record = next(site.glob("demo-*.dist-info")) / "RECORD"
    rows = record_rows(record.read_bytes())
    clean = provenance(series, "demo", "--path", str(site))
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(
        [*rows, ["../secret", b64(secret.read_bytes()), "19"], ["../../secret", b64(b"guess"), "5"]]
    )
    record.write_text(buf.getvalue())
    code, out, errors = provenance(series, "demo", "--path", str(site))
    assert (code, errors) == (0, [])
    assert out["data"]["record"] == clean[1]["data"]["record"]  # neither listed nor matched: not read
    assert "secret" not in json.dumps(out)
