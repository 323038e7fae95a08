"""patchtool build / provenance: the patched wheel, its label, its provenance, and every bad input.

The demo upstream (a small wheel served by a real local index) covers the mechanics;
the `upstream` tier repacks the real sglang 0.5.23 wheel with this repository's series
and installs it into a fresh venv, and builds sglang 0.5.10.post1 from a git checkout
made from its real sdist.
"""

from __future__ import annotations

import base64
import csv
import dataclasses
import hashlib
import importlib.util
import io
import json
import os
import struct
import subprocess
import sys
import tarfile
import textwrap
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from packaging.version import Version

from conftest import REPO, UPSTREAM_FILES, Demo, edit
from helpers import format_patch, git, sha256, write_tree
from patchtool.errors import BuildError, UpstreamError
from patchtool.git import Repo as GitRepo
from patchtool.project.pins import Pin
from patchtool.upstream.cache import Cache
from patchtool.wheel.build import find_project_dir
from patchtool.wheel.provenance import FileChange, Provenance, UpstreamSource, local_version, series_hash
from patchtool.wheel.repack import Replacement, WheelName, repack, rewrite_version
from patchtool.wheel.versionfile import rewrite as rewrite_version_file
from patchtool.wheel.versionfile import version_tuple

# -- helpers ---------------------------------------------------------------------------------


def envelope(stdout: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(stdout)
    assert set(data) == {"schema", "tool", "version", "command", "status", "exit_code", "data", "errors"}
    return data


def build(demo: Demo, out: Path, *args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    res = demo.run("build", "--out", str(out), "--json", *args, env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    return envelope(res.stdout)["data"]


def refused(demo: Demo, out: Path, code: int) -> list[str]:
    """Run a build that must fail: its error messages, and nothing at all in ``out``."""
    res = demo.run("build", "--out", str(out), "--json")
    data = envelope(res.stdout)
    assert res.returncode == code, res.stdout + res.stderr
    assert not out.exists() or not any(out.iterdir())
    return [e["message"] for e in data["errors"]]


def record_of(zf: zipfile.ZipFile) -> dict[str, tuple[str, str]]:
    name = next(n for n in zf.namelist() if n.endswith(".dist-info/RECORD"))
    rows = csv.reader(io.StringIO(zf.read(name).decode()))
    return {path: (digest, size) for path, digest, size in rows}


def record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def raw_member(path: Path, name: str) -> bytes:
    """The compressed bytes of one member, as stored."""
    with zipfile.ZipFile(path) as zf, open(path, "rb") as fh:
        info = zf.getinfo(name)
        fh.seek(info.header_offset)
        head = fh.read(30)
        n, e = struct.unpack("<HH", head[26:30])
        fh.seek(info.header_offset + 30 + n + e)
        return fh.read(info.compress_size)


def craft_wheel(
    path: Path,
    members: Mapping[str, bytes | tuple[bytes, int]],
    *,
    dist: str = "demo",
    version: str = "1.0",
    meta_version: str | None = None,
    tag: str = "py3-none-any",
) -> Path:
    """A wheel with exactly these members (name -> bytes, or (bytes, unix mode)) and its metadata."""
    info = f"{dist}-{version}.dist-info"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, item in members.items():
            data, mode = item if isinstance(item, tuple) else (item, 0o100644)
            zi = zipfile.ZipInfo(name, date_time=(2021, 2, 3, 4, 5, 6))
            zi.external_attr = mode << 16
            zf.writestr(zi, data, zipfile.ZIP_DEFLATED)
        for name, text in (
            (
                f"{info}/METADATA",
                f"Metadata-Version: 2.1\nName: {dist}\nVersion: {meta_version or version}\n\nA description.\n",
            ),
            (f"{info}/WHEEL", f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: {tag}\n"),
            (f"{info}/RECORD", ""),
        ):
            zi = zipfile.ZipInfo(name, date_time=(2021, 2, 3, 4, 5, 6))
            zi.external_attr = 0o100644 << 16
            zf.writestr(zi, text, zipfile.ZIP_DEFLATED)
    return path


def serve(demo: Demo, wheel: Path, *, pin_sha256: str | None = None) -> None:
    """Serve ``wheel`` as the demo release and point the pin at it (or at ``pin_sha256``)."""
    demo.index.add(wheel)
    pin = demo.root / "upstream-pins" / "demo-1.0.toml"
    lines = [
        f'sha256 = "{pin_sha256 or sha256(wheel)}"' if ln.startswith("sha256 = ") else ln
        for ln in pin.read_text().splitlines()
    ]
    pin.write_text("\n".join(lines) + "\n")


BLANK = Provenance(
    tool_version="0",
    pin="demo-1.0",
    version="1.0+pt.x",
    series_hash="0" * 64,
    upstream=UpstreamSource(name="demo", version="1.0", source="artifact"),
    base="0" * 40,
    tip="0" * 40,
    patches=(),
    files=(),
)
GOOD = {"demo/__init__.py": b'__version__ = "1.0"\n', "demo/core.py": b"def greet():\n    return 1\n"}


def three_changes(demo: Demo) -> None:
    """A series that modifies core.py, adds a module, and deletes util.py."""
    demo.commit_patch("0001-greet.patch", edit("python/demo/core.py", '"hello"', '"hi"'), "core: say hi")

    def add_and_delete(root: Path) -> None:
        (root / "python/demo/extra.py").write_text("EXTRA = True\n")
        (root / "python/demo/util.py").unlink()

    git(demo.work, "checkout", "-q", "p-0001-greet.patch")
    git(demo.work, "branch", "-f", "upstream", "HEAD")
    demo.commit_patch("0002-extra.patch", add_and_delete, "demo: extra module, no util")
    demo.write_manifest(demo.entry("greet", "0001-greet.patch"), demo.entry("extra", "0002-extra.patch"))


# -- the label and the pure pieces -----------------------------------------------------------


def test_local_version_is_pep440_and_carries_the_series_hash() -> None:
    digest = "ab12cd34ef56" + "0" * 52
    assert local_version(Version("0.5.23"), digest) == Version("0.5.23+pt.ab12cd34ef56")
    assert str(local_version(Version("0.5.23"), digest)) == "0.5.23+pt.ab12cd34ef56"
    assert str(local_version(Version("1.0+cu128"), digest)) == "1.0+cu128.pt.ab12cd34ef56"
    assert str(local_version(Version("0.5.10.post1"), digest)) == "0.5.10.post1+pt.ab12cd34ef56"
    # an all-digit hash prefix is still a valid, stable label (packaging normalises it)
    digits = local_version(Version("1.0"), "0123456789ab" + "0" * 52)
    assert digits == Version(str(digits)) and str(digits) == "1.0+pt.0123456789ab"


def test_series_hash_covers_pin_patches_order_tool_and_epoch() -> None:
    up = UpstreamSource(name="sglang", version="0.5.23", source="artifact", filename="x.whl", sha256="1" * 64)
    a, b = ("a", "patches/0001-a.patch", "2" * 64), ("b", "patches/0002-b.patch", "3" * 64)
    base = series_hash(pin="p", upstream=up, patches=[a, b], tool_version="0.1.0", source_date_epoch=None)
    assert base == series_hash(pin="p", upstream=up, patches=[a, b], tool_version="0.1.0", source_date_epoch=None)
    others = [
        series_hash(pin="q", upstream=up, patches=[a, b], tool_version="0.1.0", source_date_epoch=None),
        series_hash(pin="p", upstream=up, patches=[b, a], tool_version="0.1.0", source_date_epoch=None),
        series_hash(pin="p", upstream=up, patches=[a], tool_version="0.1.0", source_date_epoch=None),
        series_hash(
            pin="p", upstream=up, patches=[a, (*b[:2], "4" * 64)], tool_version="0.1.0", source_date_epoch=None
        ),
        series_hash(pin="p", upstream=up, patches=[a, b], tool_version="0.2.0", source_date_epoch=None),
        series_hash(pin="p", upstream=up, patches=[a, b], tool_version="0.1.0", source_date_epoch=1),
        series_hash(
            pin="p",
            upstream=UpstreamSource(
                name="sglang", version="0.5.23", source="artifact", filename="x.whl", sha256="5" * 64
            ),
            patches=[a, b],
            tool_version="0.1.0",
            source_date_epoch=None,
        ),
    ]
    assert len({base, *others}) == len(others) + 1


def test_rewrite_version_touches_only_the_header() -> None:
    meta = b"Metadata-Version: 2.4\r\nName: demo\r\nVersion: 1.0\r\n\r\nVersion: 1.0 in the description\r\n"
    assert rewrite_version(meta, Version("1.0+pt.abc")) == (
        b"Metadata-Version: 2.4\r\nName: demo\r\nVersion: 1.0+pt.abc\r\n\r\nVersion: 1.0 in the description\r\n"
    )
    with pytest.raises(UpstreamError, match="METADATA has 2 Version headers, expected one"):
        rewrite_version(b"Name: demo\nVersion: 1.0\nVersion: 2.0\n", Version("1.0"))


SCM_VERSION = textwrap.dedent("""\
    # file generated by vcs-versioning
    from __future__ import annotations

    __all__ = ["__version__", "__version_tuple__", "version", "version_tuple"]

    version: str
    __version__: str
    __version_tuple__: tuple[int | str, ...]

    __version__ = version = '1.0'
    __version_tuple__ = version_tuple = (1, 0)

    __commit_id__ = commit_id = None
    """)
VERSION_PY = (
    b'"""Version."""\ntry:\n    from demo._version import __version__, __version_tuple__\n'
    b'except ImportError:\n    __version__ = "0.0.0.dev0"\n'
)


def test_version_files_restate_only_the_upstream_version() -> None:
    new = Version("1.0+pt.0123456789ab")
    assert (
        rewrite_version_file(SCM_VERSION.encode(), Version("1.0"), new)
        == SCM_VERSION.replace("version = '1.0'", "version = '1.0+pt.0123456789ab'")
        .replace("version_tuple = (1, 0)", "version_tuple = (1, 0, 'pt.0123456789ab')")
        .encode()
    )
    assert rewrite_version_file(VERSION_PY, Version("1.0"), new) is None  # imports it: nothing to restate
    plain = b'NAME = "1.0"\n__version__: str = "1.0"  # the release\nVERSION = "1.0.1"\n'
    assert rewrite_version_file(plain, Version("1.0"), new) == (
        b'NAME = "1.0"\n__version__: str = "1.0+pt.0123456789ab"  # the release\nVERSION = "1.0.1"\n'
    )
    assert rewrite_version_file(b"__version__ = '1.0\n", Version("1.0"), new) is None  # does not parse
    assert version_tuple(Version("0.5.10.post1+pt.abc")) == (0, 5, 10, "post1", "pt.abc")


def test_wheel_name_keeps_build_tag_and_platform() -> None:
    name = WheelName.parse("sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl")
    assert name.filename(Version("0.5.23+pt.abc")) == "sglang-0.5.23+pt.abc-cp311-cp311-manylinux_2_34_x86_64.whl"
    assert (
        WheelName.parse("demo-1.0-7-py3-none-any.whl").filename(Version("1.0+pt.x"))
        == "demo-1.0+pt.x-7-py3-none-any.whl"
    )


@pytest.mark.parametrize(
    ("members", "message"),
    [
        (
            {"demo/../../evil.py": b"x"},
            "demo-1.0-py3-none-any.whl: entry 'demo/../../evil.py' is not a safe path: "
            "path 'demo/../../evil.py' escapes the tree; refusing it",
        ),
        (
            {"/etc/evil.py": b"x"},
            "demo-1.0-py3-none-any.whl: entry '/etc/evil.py' is not a safe path: "
            "absolute path '/etc/evil.py'; refusing it",
        ),
        (
            {"demo/link.py": (b"/etc/passwd", 0o120777)},
            "demo-1.0-py3-none-any.whl: entry 'demo/link.py' is a symbolic link; refusing it",
        ),
    ],
)
def test_repack_refuses_entries_that_escape_the_root(tmp_path: Path, members: dict[str, Any], message: str) -> None:
    wheel = craft_wheel(tmp_path / "demo-1.0-py3-none-any.whl", {**GOOD, **members})
    out = tmp_path / "out"
    with pytest.raises(UpstreamError) as exc:
        repack(wheel, out, name=WheelName.parse(wheel.name), version=Version("1.0+pt.x"), replace={}, provenance=BLANK)
    assert str(exc.value) == message
    assert not out.exists()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"meta_version": "2.0"},
            "demo-1.0-py3-none-any.whl contains demo 2.0 (its METADATA), not demo 1.0; refusing it",
        ),
        (
            {"version": "2.0"},
            "demo-1.0-py3-none-any.whl: its metadata directory is demo-2.0.dist-info, but the file "
            "name says demo 1.0; refusing it",
        ),
        (
            {"tag": "cp311-cp311-manylinux_2_34_x86_64"},
            "demo-1.0-py3-none-any.whl: its WHEEL file says tags cp311-cp311-manylinux_2_34_x86_64, but its file "
            "name says py3-none-any; refusing it (a wheel for another platform?)",
        ),
    ],
)
def test_repack_refuses_a_wheel_for_another_version_or_platform(
    tmp_path: Path, kwargs: dict[str, str], message: str
) -> None:
    wheel = craft_wheel(tmp_path / "demo-1.0-py3-none-any.whl", GOOD, **kwargs)
    out = tmp_path / "out"
    with pytest.raises(UpstreamError) as exc:
        repack(wheel, out, name=WheelName.parse(wheel.name), version=Version("1.0+pt.x"), replace={}, provenance=BLANK)
    assert str(exc.value) == message
    assert not out.exists()


def test_repack_refuses_changes_that_do_not_fit_the_wheel(tmp_path: Path) -> None:
    wheel = craft_wheel(tmp_path / "demo-1.0-py3-none-any.whl", GOOD)
    out = tmp_path / "out"
    cases = [
        (
            {"demo/gone.py": Replacement(change=FileChange.MODIFIED, data=b"x")},
            "the series changes demo/gone.py, which demo-1.0-py3-none-any.whl does not ship",
        ),
        (
            {"demo/core.py": Replacement(change=FileChange.ADDED, data=b"x")},
            "the series adds demo/core.py, but demo-1.0-py3-none-any.whl already has it",
        ),
    ]
    for replace, message in cases:
        with pytest.raises(BuildError) as exc:
            repack(
                wheel,
                out,
                name=WheelName.parse(wheel.name),
                version=Version("1.0+pt.x"),
                replace=replace,
                provenance=BLANK,
            )
        assert str(exc.value) == message
    with pytest.raises(BuildError, match="already has demo/core.py; refusing to overwrite it with the provenance"):
        repack(
            wheel,
            out,
            name=WheelName.parse(wheel.name),
            version=Version("1.0+pt.x"),
            replace={},
            provenance=dataclasses.replace(BLANK, package_copy="demo/core.py"),
        )
    assert not out.exists()


# -- way (a) on the demo upstream ------------------------------------------------------------


def test_build_repacks_the_release_wheel(demo: Demo) -> None:
    three_changes(demo)
    out = demo.root / "dist"
    data = build(demo, out)
    version = data["version"]
    assert version == str(Version(version)) and version.startswith("1.0+pt.")
    assert data["version"] == f"1.0+pt.{data['series_hash'][:12]}"
    wheel = Path(data["wheel"])
    assert wheel == out / f"demo-{version}-py3-none-any.whl" and data["way"] == "repack"
    info = f"demo-{version}.dist-info"
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        assert names == [
            "demo/__init__.py",
            "demo/_patchtool_provenance.json",
            "demo/core.py",
            "demo/extra.py",
            f"{info}/METADATA",
            f"{info}/WHEEL",
            f"{info}/patchtool-provenance.json",
            f"{info}/RECORD",
        ]
        assert b'greeting = "hi"' in zf.read("demo/core.py")
        assert zf.read("demo/extra.py") == b"EXTRA = True\n"
        assert zf.read(f"{info}/METADATA").decode().splitlines()[2] == f"Version: {version}"
        record = record_of(zf)
        assert set(record) == set(names)
        for name in names:
            expected = ("", "") if name.endswith("RECORD") else (record_hash(zf.read(name)), str(len(zf.read(name))))
            assert record[name] == expected, name
        prov = json.loads(zf.read(f"{info}/patchtool-provenance.json"))
        assert zf.read("demo/_patchtool_provenance.json") == zf.read(f"{info}/patchtool-provenance.json")
    # unchanged members are copied as stored, never recompressed
    assert raw_member(wheel, "demo/__init__.py") == raw_member(demo.wheel, "demo/__init__.py")
    assert prov == data["provenance"]
    assert prov["upstream"] == {
        "name": "demo",
        "version": "1.0",
        "source": "artifact",
        "filename": "demo-1.0-py3-none-any.whl",
        "sha256": sha256(demo.wheel),
    }
    assert [(p["id"], p["file"], p["sha256"]) for p in prov["patches"]] == [
        ("greet", "patches/0001-greet.patch", sha256(demo.root / "patches/0001-greet.patch")),
        ("extra", "patches/0002-extra.patch", sha256(demo.root / "patches/0002-extra.patch")),
    ]
    assert [p["subject"] for p in prov["patches"]] == ["core: say hi", "demo: extra module, no util"]
    assert [(f["path"], f["change"], f.get("wheel_path")) for f in prov["files"]] == [
        ("python/demo/core.py", "modified", "demo/core.py"),
        ("python/demo/extra.py", "added", "demo/extra.py"),
        ("python/demo/util.py", "deleted", "demo/util.py"),
    ]
    apply = envelope(demo.run("apply", "--into", str(demo.root / "tree"), "--json").stdout)["data"]
    assert prov["tip"] == apply["tip"] and prov["base"] == apply["base"]
    assert [p["commit"] for p in prov["patches"]] == [p["commit"] for p in apply["patches"]]


def test_build_text_output(one_patch: Demo) -> None:
    res = one_patch.run("build", "--out", str(one_patch.root / "dist"))
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0] == "demo 1.0 (repacked from demo-1.0-py3-none-any.whl)"
    assert lines[1].startswith("  applied  greet ")
    assert lines[2] == "files changed by the series: 1 (1 in the wheel)"
    assert lines[3].startswith(f"wheel: {one_patch.root / 'dist'}/demo-1.0+pt.")


def test_same_inputs_give_the_same_bytes_and_label(one_patch: Demo) -> None:
    a = build(one_patch, one_patch.root / "a")
    b = build(one_patch, one_patch.root / "b")
    assert (a["version"], a["sha256"]) == (b["version"], b["sha256"])
    assert Path(a["wheel"]).read_bytes() == Path(b["wheel"]).read_bytes()
    assert a["sha256"] == sha256(Path(a["wheel"]))
    # a fixed SOURCE_DATE_EPOCH is an input too: another label, and the members patchtool writes carry it
    c = build(one_patch, one_patch.root / "c", env={"SOURCE_DATE_EPOCH": "1700000000"})
    d = build(one_patch, one_patch.root / "d", env={"SOURCE_DATE_EPOCH": "1700000000"})
    assert c["sha256"] == d["sha256"] and c["version"] != a["version"]
    with zipfile.ZipFile(c["wheel"]) as zf:
        assert zf.getinfo("demo/core.py").date_time == (2023, 11, 14, 22, 13, 20)
        assert zf.getinfo("demo/__init__.py").date_time == (2020, 1, 1, 0, 0, 0)  # copied as it was
    # any change to a patch file's bytes is a new label
    patch = one_patch.root / "patches" / "0001-greet.patch"
    patch.write_text(patch.read_text().replace("Shorter greeting.", "A shorter greeting."))
    assert build(one_patch, one_patch.root / "e")["version"] != a["version"]


def test_patch_touching_a_file_the_wheel_does_not_ship(demo: Demo) -> None:
    demo.commit_patch("0001-greet.patch", edit("python/demo/core.py", '"hello"', '"hi"'), "core: say hi")

    def notes(root: Path) -> None:
        (root / "docs").mkdir()
        (root / "docs/NOTES.md").write_text("notes\n")

    demo.commit_patch("0002-notes.patch", notes, "docs: notes")
    demo.write_manifest(demo.entry("greet", "0001-greet.patch"), demo.entry("notes", "0002-notes.patch"))
    out = demo.root / "dist"
    res = demo.run("build", "--out", str(out))
    assert res.returncode == 1
    assert res.stderr.strip() == (
        "error: patches/0002-notes.patch: patch notes: changes docs/NOTES.md, which the wheel does not ship: "
        "demo-1.0-py3-none-any.whl (it ships python/demo/ as demo/) (hint: a wheel carries only the package; "
        "keep such changes out of the series)"
    )
    assert not out.exists()
    assert not (demo.cache / "upstream.git").exists()  # refused before anything was fetched


def test_downloaded_wheel_with_another_sha256_is_refused(one_patch: Demo) -> None:
    (one_patch.root.parent / "other").mkdir()
    other = craft_wheel(one_patch.root.parent / "other" / "demo-1.0-py3-none-any.whl", GOOD)
    serve(one_patch, other, pin_sha256=sha256(one_patch.wheel))
    pin = one_patch.root / "upstream-pins" / "demo-1.0.toml"
    url = one_patch.index.url.removesuffix("/simple") + "/files/demo-1.0-py3-none-any.whl"
    pin.write_text(pin.read_text() + f'url = "{url}"\n')
    assert refused(one_patch, one_patch.root / "dist", 4) == [
        f"demo-1.0-py3-none-any.whl: sha256 is {sha256(other)}, but pin demo-1.0 says {sha256(one_patch.wheel)}; "
        "the file was not used"
    ]


@pytest.mark.parametrize(
    ("members", "message"),
    [
        (
            {"demo/../../evil.py": b"x"},
            "demo-1.0-py3-none-any.whl: entry 'demo/../../evil.py' is not a safe path: "
            "path 'demo/../../evil.py' escapes the tree; refusing it",
        ),
        (
            {"/etc/evil.py": b"x"},
            "demo-1.0-py3-none-any.whl: entry '/etc/evil.py' is not a safe path: "
            "absolute path '/etc/evil.py'; refusing it",
        ),
        (
            {"demo/link.py": (b"/etc/passwd", 0o120777)},
            "demo-1.0-py3-none-any.whl: entry 'demo/link.py' is a symbolic link; refusing it",
        ),
    ],
)
def test_served_wheel_with_escaping_entries_is_refused(one_patch: Demo, members: dict[str, Any], message: str) -> None:
    (one_patch.root.parent / "bad").mkdir()
    core = UPSTREAM_FILES["demo/core.py"].encode()
    serve(
        one_patch,
        craft_wheel(one_patch.root.parent / "bad" / "demo-1.0-py3-none-any.whl", {"demo/core.py": core, **members}),
    )
    assert refused(one_patch, one_patch.root / "dist", 4) == [message]


def test_served_wheel_for_another_version_or_platform_is_refused(one_patch: Demo) -> None:
    (one_patch.root.parent / "bad").mkdir()
    core = UPSTREAM_FILES["demo/core.py"].encode()
    serve(
        one_patch,
        craft_wheel(
            one_patch.root.parent / "bad" / "demo-1.0-py3-none-any.whl", {"demo/core.py": core}, meta_version="2.0"
        ),
    )
    assert refused(one_patch, one_patch.root / "dist", 4) == [
        "demo-1.0-py3-none-any.whl contains demo 2.0, not 1.0; refusing it"
    ]
    serve(
        one_patch,
        craft_wheel(
            one_patch.root.parent / "bad" / "demo-1.0-py3-none-any.whl",
            {"demo/core.py": core},
            tag="cp311-cp311-manylinux_2_34_x86_64",
        ),
    )
    assert refused(one_patch, one_patch.root / "dist", 4) == [
        "demo-1.0-py3-none-any.whl: its WHEEL file says tags cp311-cp311-manylinux_2_34_x86_64, but its file "
        "name says py3-none-any; refusing it (a wheel for another platform?)"
    ]


def test_series_that_does_not_apply_builds_nothing(demo: Demo) -> None:
    demo.commit_patch("0001-greet.patch", edit("python/demo/core.py", '"hello"', '"hi"'), "core: say hi")
    (demo.root / "patches" / "0002-again.patch").write_text((demo.root / "patches" / "0001-greet.patch").read_text())
    demo.write_manifest(demo.entry("greet", "0001-greet.patch"), demo.entry("again", "0002-again.patch"))
    out = demo.root / "dist"
    res = demo.run("build", "--out", str(out))
    assert res.returncode == 3
    assert "error: patch again (patches/0002-again.patch) does not apply at demo-1.0; no wheel built" in res.stdout
    assert not out.exists()


def test_a_pin_on_an_sdist_is_not_repacked(one_patch: Demo) -> None:
    pin = one_patch.root / "upstream-pins" / "demo-1.0.toml"
    pin.write_text(pin.read_text().replace("demo-1.0-py3-none-any.whl", "demo-1.0.tar.gz"))
    res = one_patch.run("build", "--out", str(one_patch.root / "dist"))
    assert res.returncode == 2
    assert res.stderr.strip() == (
        "error: pin demo-1.0 names demo-1.0.tar.gz, an sdist; repacking needs the release wheel (hint: move "
        "the series onto the release's wheel: `patchtool rebase --to 1.0 --wheel` (or `patchtool pin add 1.0 "
        "--wheel` and `build --pin` it); or `build --from-sdist` runs upstream's build backend on the patched "
        "sdist, confined)"
    )
    assert not (one_patch.root / "dist").exists()


def test_the_project_directory_is_the_one_naming_the_distribution(tmp_path: Path) -> None:
    repo = tmp_path / "up"
    (repo / "python").mkdir(parents=True)
    (repo / "pyproject.toml").write_text('[project]\nname = "sgl-router"\n')
    (repo / "python" / "pyproject.toml").write_text('[project]\nname = "SGLang"\n')
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "up")
    cache = GitRepo(repo / ".git")
    tree = cache.tree_of("HEAD")
    assert find_project_dir(cache, tree, "sglang") == "python/"
    assert find_project_dir(cache, tree, "sgl_router") == ""
    with pytest.raises(BuildError) as exc:
        find_project_dir(cache, tree, "vllm")
    assert str(exc.value) == "no pyproject.toml at the top of the tree or one directory down names vllm"


# -- provenance, read back -------------------------------------------------------------------


def test_provenance_from_the_wheel_file(demo: Demo) -> None:
    three_changes(demo)
    data = build(demo, demo.root / "dist")
    res = demo.run("provenance", data["wheel"], "--json")
    assert res.returncode == 0, res.stdout
    report = envelope(res.stdout)["data"]
    assert report["kind"] == "wheel" and report["metadata_version"] == data["version"]
    assert report["provenance"] == data["provenance"]
    assert [(f["path"], f["state"]) for f in report["files"]] == [
        ("demo/core.py", "ok"),
        ("demo/extra.py", "ok"),
        ("demo/util.py", "ok"),
    ]
    text = demo.run("provenance", data["wheel"]).stdout.splitlines()
    assert text[0] == f"demo {data['version']} (wheel {data['wheel']})"
    assert text[1] == f"upstream: demo 1.0 from demo-1.0-py3-none-any.whl (sha256 {sha256(demo.wheel)})"
    assert text[-1] == "provenance: consistent"


def test_provenance_of_a_wheel_that_is_not_what_its_record_says(one_patch: Demo) -> None:
    wheel = Path(build(one_patch, one_patch.root / "dist")["wheel"])
    tampered = one_patch.root / "tampered" / wheel.name
    tampered.parent.mkdir()
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(tampered, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            dst.writestr(info, data.replace(b'"hi"', b'"hey"') if info.filename == "demo/core.py" else data)
    res = one_patch.run("provenance", str(tampered), "--json")
    assert res.returncode == 1
    assert [(e["file"], e["message"]) for e in envelope(res.stdout)["errors"]] == [
        ("demo/core.py", "differs from the patched file")
    ]
    res = one_patch.run("provenance", str(one_patch.wheel))
    assert res.returncode == 1
    assert res.stderr.strip() == (
        "error: demo-1.0-py3-none-any.whl: demo-1.0-py3-none-any.whl has no patchtool "
        "provenance (no *.dist-info/patchtool-provenance.json): it was not built by "
        "`patchtool build`"
    )


def test_provenance_of_an_installed_distribution(one_patch: Demo, tmp_path: Path) -> None:
    wheel = build(one_patch, one_patch.root / "dist")["wheel"]
    site = tmp_path / "site"
    pip = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-compile",
            "--no-index",
            "--target",
            str(site),
            wheel,
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert pip.returncode == 0, pip.stderr
    by_name = envelope(one_patch.run("provenance", "demo", "--path", str(site), "--json").stdout)["data"]
    assert by_name["kind"] == "installed" and by_name["metadata_version"].startswith("1.0+pt.")
    assert [(f["path"], f["state"]) for f in by_name["files"]] == [("demo/core.py", "ok")]
    info = next(site.glob("demo-*.dist-info"))
    by_dir = envelope(one_patch.run("provenance", str(info), "--json").stdout)["data"]
    assert by_dir["provenance"] == by_name["provenance"]
    (site / "demo/core.py").write_text("# edited in production\n")
    res = one_patch.run("provenance", "demo", "--path", str(site))
    assert res.returncode == 1
    assert (
        "error: demo/core.py: differs from the patched file (hint: this is not the build the record describes)"
        in res.stdout
    )
    res = one_patch.run("provenance", "nosuchdist", "--path", str(site))
    assert res.returncode == 2
    assert f"no distribution named 'nosuchdist' is installed in {site}" in res.stderr


def pip_target(wheel: str, site: Path) -> None:
    pip = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-compile",
            "--no-index",
            "--target",
            str(site),
            wheel,
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert pip.returncode == 0, pip.stderr


def installed_version(site: Path, package: str, *, stub: bool = False) -> list[str]:
    """``package.version.__version__``, its tuple and the distribution's version, as a user gets
    them from the installed files (``stub``: without running the package's heavy ``__init__``)."""
    code = (
        f"import importlib.metadata, sys, types\nsys.path.insert(0, {str(site)!r})\n"
        + (
            f"pkg = types.ModuleType({package!r}); pkg.__path__ = [{str(site / package)!r}]\n"
            f"sys.modules[{package!r}] = pkg\n"
            if stub
            else ""
        )
        + f"import {package}.version as v\n"
        f"print(v.__version__); print(v.__version_tuple__); print(importlib.metadata.version({package!r}))"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    res = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, env=env, check=False)
    assert res.returncode == 0, res.stderr
    return res.stdout.splitlines()


def test_an_installed_repacked_wheel_says_its_own_version(demo: Demo, tmp_path: Path) -> None:
    """`demo.__version__` is the wheel's version, not upstream's, also where the series itself
    changes a version file; RECORD and the provenance record vouch for the rewritten files."""
    files = {**UPSTREAM_FILES, "demo/version.py": VERSION_PY.decode(), "demo/_version.py": SCM_VERSION}
    (tmp_path / "release").mkdir()
    serve(
        demo, craft_wheel(tmp_path / "release" / "demo-1.0-py3-none-any.whl", {k: v.encode() for k, v in files.items()})
    )
    git(demo.work, "checkout", "-q", "upstream")
    write_tree(demo.work, {f"python/{k}": v for k, v in files.items()})
    git(demo.work, "add", "-A")
    git(demo.work, "commit", "-q", "-m", "upstream 1.0 with its version files")
    demo.commit_patch("0001-greet.patch", edit("python/demo/core.py", '"hello"', '"hi"'), "core: say hi")
    demo.commit_patch(
        "0002-version.patch",
        edit("python/demo/_version.py", "commit_id = None", "commit_id = 'fork'"),
        "version: name the fork's commit",
        on="p-0001-greet.patch",
    )
    demo.write_manifest(demo.entry("greet", "0001-greet.patch"), demo.entry("version", "0002-version.patch"))
    data = build(demo, demo.root / "dist")
    version = data["version"]
    with zipfile.ZipFile(data["wheel"]) as zf:
        scm = zf.read("demo/_version.py").decode()
        record = record_of(zf)
        assert f"__version__ = version = '{version}'" in scm
        assert f"version_tuple = (1, 0, 'pt.{data['series_hash'][:12]}')" in scm and "commit_id = 'fork'" in scm
        for member in ("demo/_version.py", "demo/version.py"):
            assert record[member][0] == record_hash(zf.read(member))
    assert demo.run("provenance", data["wheel"]).stdout.splitlines()[-1] == "provenance: consistent"
    site = tmp_path / "site"
    pip_target(data["wheel"], site)
    assert installed_version(site, "demo") == [version, f"(1, 0, 'pt.{data['series_hash'][:12]}')", version]
    res = demo.run("provenance", "demo", "--path", str(site), "--json")
    assert res.returncode == 0, res.stdout
    assert [(f["path"], f["state"]) for f in envelope(res.stdout)["data"]["files"]] == [
        ("demo/_version.py", "ok"),
        ("demo/core.py", "ok"),
    ]


# -- the real upstream -----------------------------------------------------------------------


def run_real(cache: Path, *args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_") and k != "SOURCE_DATE_EPOCH"}
    env.update(PATCHTOOL_CACHE_DIR=str(cache), GIT_CONFIG_GLOBAL=os.devnull)
    return subprocess.run(
        [sys.executable, "-m", "patchtool", *args], cwd=cwd, capture_output=True, text=True, env=env, check=False
    )


@pytest.fixture(scope="module")
def real_wheel(real_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("real-dist")
    res = run_real(real_cache, "build", "--out", str(out), "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    return envelope(res.stdout)["data"]


@pytest.mark.upstream
def test_real_wheel_is_reproducible(real_wheel: dict[str, Any], real_cache: Path, tmp_path: Path) -> None:
    res = run_real(real_cache, "build", "--out", str(tmp_path), "--json")
    again = envelope(res.stdout)["data"]
    assert (again["filename"], again["sha256"]) == (real_wheel["filename"], real_wheel["sha256"])
    assert (tmp_path / again["filename"]).read_bytes() == Path(real_wheel["wheel"]).read_bytes()
    assert real_wheel["filename"] == f"sglang-{real_wheel['version']}-cp311-cp311-manylinux_2_34_x86_64.whl"


@pytest.mark.upstream
@pytest.mark.slow
def test_real_wheel_installs_into_a_fresh_venv(
    real_wheel: dict[str, Any], real_cache: Path, patched_tree: Path, tmp_path: Path
) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    pip = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "--quiet",
            "--no-deps",
            "--no-compile",
            "--no-index",
            real_wheel["wheel"],
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert pip.returncode == 0, pip.stderr
    probe = subprocess.run(
        [
            str(python),
            "-c",
            "import importlib.metadata as m, sysconfig; "
            "print(m.version('sglang')); print(sysconfig.get_paths()['platlib'])",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert probe[0] == real_wheel["version"] == f"0.5.23+pt.{real_wheel['series_hash'][:12]}"
    site = Path(probe[1])
    files = real_wheel["provenance"]["files"]
    assert files and {f["path"] for f in files} >= {
        "python/sglang/srt/managers/scheduler.py",
        "python/sglang/srt/arg_groups/dsv4_tbo_guard.py",
    }
    for f in files:
        installed = site / f["wheel_path"]
        if f["change"] == "deleted":
            assert not installed.exists()
        else:
            assert installed.read_bytes() == (patched_tree / f["path"]).read_bytes(), f["path"]
    for target in (real_wheel["wheel"], "sglang"):
        res = run_real(real_cache, "provenance", target, "--path", str(site), "--json")
        assert res.returncode == 0, res.stdout
        data = envelope(res.stdout)["data"]
        assert data["provenance"] == real_wheel["provenance"]
        assert all(c["state"] == "ok" for c in data["files"]) and len(data["files"]) == len(files)
        assert (
            data["provenance"]["upstream"]["sha256"]
            == "00b3cd5b265ac76c64185fbb6b95424f324ddd9f428d0306b77bc9db9d859937"
        )


@pytest.mark.upstream
def test_real_wheel_installed_says_the_patched_version(
    real_wheel: dict[str, Any], real_cache: Path, tmp_path: Path
) -> None:
    """`sglang.__version__` (sglang/version.py reads sglang/_version.py) is the wheel's version. The
    package's own __init__ needs torch, so the check imports sglang.version under a bare package."""
    site = tmp_path / "site"
    pip_target(real_wheel["wheel"], site)
    version = real_wheel["version"]
    assert installed_version(site, "sglang", stub=True) == [
        version,
        f"(0, 5, 23, 'pt.{real_wheel['series_hash'][:12]}')",
        version,
    ]
    res = run_real(real_cache, "provenance", real_wheel["wheel"], "--json")
    assert res.returncode == 0, res.stdout
    # the installed RECORD vouches for the rewritten files (a --target install moves the scripts
    # away from where RECORD names them, so `provenance` is run on the venv install: slow tier)
    info = next(site.glob("sglang-*.dist-info"))
    rows = {row[0]: row[1] for row in csv.reader(io.StringIO((info / "RECORD").read_text()))}
    for member in ("sglang/_version.py", "sglang/version.py"):
        assert rows[member] == record_hash((site / member).read_bytes()), member


# -- way (b): a git checkout of upstream, built with the standard frontend -----------------------

SDIST = {
    "filename": "sglang-0.5.10.post1.tar.gz",
    "size": 4701855,
    "sha256": "01f7adfe7cde85b238fb0e1bae4b31d494e19d1471cf35ff3c5489a02f9d2263",
    "url": "https://files.pythonhosted.org/packages/42/38/feb04f6478b90315606fcd62b798917e7fcee9f1d7d84b01cf477398045e/"
    "sglang-0.5.10.post1.tar.gz",
}


@pytest.fixture(scope="module")
def sglang_git(real_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A git repository laid out like upstream (python/ holds the project), from the real 0.5.10.post1 sdist."""
    missing = [m for m in ("build", "setuptools_scm", "setuptools") if importlib.util.find_spec(m) is None]
    if missing:
        pytest.fail(f"the git-build tests need {', '.join(missing)}: pip install build setuptools-scm")
    pin = Pin.from_dict(
        {
            "schema": 1,
            "name": "sglang",
            "version": "0.5.10.post1",
            "artifact": {
                "distribution": "sglang",
                "version": "0.5.10.post1",
                **SDIST,
                "prefix": {"from": "sglang-0.5.10.post1/", "to": "python/"},
            },
        },
        name="sdist",
        file="sdist",
    )
    cache = Cache(real_cache)
    with cache.locked():
        sdist = cache.artifact_path(pin)  # downloaded once, verified by sha256
    repo = tmp_path_factory.mktemp("sglang-git") / "sglang"
    (repo / "python").mkdir(parents=True)
    with tarfile.open(sdist) as tf:
        for member in tf.getmembers():
            member.name = member.name.partition("/")[2]
            if member.name and (member.isfile() or member.isdir()):
                tf.extract(member, repo / "python", filter="data")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "sglang 0.5.10.post1")
    git(repo, "tag", "v0.5.10.post1")
    return repo, git(repo, "rev-parse", "HEAD").strip()


def git_project(tmp_path: Path, repo: Path, commit: str) -> Path:
    """A patch repository whose pin builds sglang 0.5.10.post1 from ``repo``, with one patch."""
    root = tmp_path / "project"
    (root / "patches").mkdir(parents=True)
    (root / "upstream-pins").mkdir()
    (root / "upstream-pins" / "sglang-git.toml").write_text(
        textwrap.dedent(f"""\
        schema = 1
        name = "sglang"
        version = "0.5.10.post1"
        use = "git"

        [git]
        url = "{repo}"
        tag = "v0.5.10.post1"
        commit = "{commit}"
        """)
    )
    git(repo, "checkout", "-q", "-B", "patch", commit)
    edit("python/sglang/utils.py", "import", "# patched by the fork\nimport")(repo)
    (repo / "python/sglang/srt/fork_marker.py").write_text("FORK = True\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "fork: mark the build")
    (root / "patches" / "0001-mark.patch").write_text(format_patch(repo))
    git(repo, "checkout", "-q", "main")
    (root / "patchset.toml").write_text(
        textwrap.dedent("""\
        schema = 1
        pin = "sglang-git"

        [[patch]]
        id = "mark"
        file = "patches/0001-mark.patch"
        kind = "operations"
        owner = "team"
        why = "mark the build"
        applies_to = ">=0.5.10"
        drop_when = "never"
        upstream = { status = "inappropriate", reason = "fork-only marker" }
        """)
    )
    return root


@pytest.mark.upstream
@pytest.mark.slow
def test_build_from_a_git_checkout_with_the_standard_frontend(sglang_git: tuple[Path, str], tmp_path: Path) -> None:
    repo, commit = sglang_git
    root = git_project(tmp_path, repo, commit)
    cache = tmp_path / "cache"
    runs = [
        run_real(cache, "build", "--no-isolation", "--out", str(tmp_path / name), "--json", cwd=root)
        for name in ("a", "b")
    ]
    for res in runs:
        assert res.returncode == 0, res.stdout + res.stderr
        assert res.stderr == ""  # the backend's warnings are in the report, not on the terminal
    a, b = (envelope(res.stdout)["data"] for res in runs)
    assert (a["sha256"], a["version"]) == (b["sha256"], b["version"])  # reproducible
    version = a["version"]
    assert a["way"] == "build" and version == f"0.5.10.post1+pt.{a['series_hash'][:12]}"
    assert a["filename"] == f"sglang-{version}-py3-none-any.whl"
    with zipfile.ZipFile(a["wheel"]) as zf:
        info = f"sglang-{version}.dist-info"
        assert zf.read(f"{info}/METADATA").decode().count(f"\nVersion: {version}\n") == 1
        assert f"__version__ = version = '{version}'" in zf.read("sglang/_version.py").decode()
        assert b'"""Common utilities"""\n\n# patched by the fork\nimport importlib\n' in zf.read("sglang/utils.py")
        assert zf.read("sglang/srt/fork_marker.py") == b"FORK = True\n"
        assert zf.read("sglang/_patchtool_provenance.json") == zf.read(f"{info}/patchtool-provenance.json")
        assert zf.namelist()[-1] == f"{info}/RECORD"
    prov = a["provenance"]
    assert prov["upstream"] == {
        "name": "sglang",
        "version": "0.5.10.post1",
        "source": "git",
        "url": str(repo),
        "tag": "v0.5.10.post1",
        "commit": commit,
    }
    assert prov["base"] == commit
    assert [(f["path"], f["wheel_path"]) for f in prov["files"]] == [
        ("python/sglang/srt/fork_marker.py", "sglang/srt/fork_marker.py"),
        ("python/sglang/utils.py", "sglang/utils.py"),
    ]
    res = run_real(cache, "provenance", a["wheel"], "--json", cwd=root)
    assert res.returncode == 0 and envelope(res.stdout)["data"]["provenance"] == prov


def test_provenance_of_every_wheel_in_dist(one_patch: Demo) -> None:
    """`patchtool provenance dist/*.whl`, the README's tour line, where dist/ holds two builds (issue
    30): each wheel is reported, and one that is not as built fails the whole (exit 1)."""
    first = build(one_patch, one_patch.root / "dist")
    one_patch.commit_patch(
        "0001-greet.patch", edit("python/demo/core.py", '"hello"', '"hey"'), "core: say hey", "Shorter greeting."
    )
    second = build(one_patch, one_patch.root / "dist")
    wheels = sorted(str(p) for p in (one_patch.root / "dist").glob("*.whl"))
    assert wheels == sorted([first["wheel"], second["wheel"]])
    res = one_patch.run("provenance", *wheels, "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    reports = envelope(res.stdout)["data"]["reports"]
    assert [r["location"] for r in reports] == wheels
    assert {r["metadata_version"] for r in reports} == {first["version"], second["version"]}
    text = one_patch.run("provenance", *wheels).stdout
    assert text.count("provenance: consistent") == 2 and f"(wheel {wheels[1]})" in text
    bad = one_patch.run("provenance", *wheels, str(one_patch.wheel))
    assert bad.returncode == 1 and "it was not built by `patchtool build`" in bad.stdout, bad.stdout + bad.stderr
    assert bad.stdout.count("provenance: consistent") == 2
